"""The `clpatch` command line: `clpatch devices | search | denoise | demo` (and tuning).

Every command returns an exit code from `main(argv)`; errors are reported as one
`clpatch: error: ...` line on stderr (a multi-line explanation, such as how to install
an OpenCL driver, follows it), never as a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from ..version import __version__
from ..core.errors import ClpatchError
from ..io.images import ImageInfo, add_noise, output_format, psnr, read_array, read_image, write_image
from ..core.runtime import (
    INSTALL_HELP,
    DeviceEntry,
    Runtime,
    get_platforms,
    is_simulator,
    list_devices,
    select_device,
)
from ..match.window_config import SEARCH_VARIANTS

if TYPE_CHECKING:
    from ..io.video import VideoInfo

log = logging.getLogger("clpatch")

PROG = "clpatch"
# The search `devices --check` runs on every device: small, on the default (rule) path, with
# the last grid row and column off the step-4 lattice so the border kernel runs too.
_CHECK_SHAPE = (22, 27)
_CHECK_PARAMS = dict(patch_size=8, step=4, window=9, n=4)


class CommandError(Exception):
    """A failure to report as `clpatch: error: <message>` (first line; the rest follows)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors become one `clpatch: error:` line instead of usage + exit."""

    def error(self, message: str) -> NoReturn:
        raise CommandError(f"{message} (see '{self.prog} --help')", code=2)


# ---- devices ------------------------------------------------------------------------------

def _kib(nbytes: int) -> str:
    return f"{nbytes // 1024} KiB" if nbytes % 1024 == 0 else f"{nbytes} bytes"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _device_kind(device: Any) -> str:
    import pyopencl as cl

    if is_simulator(device):  # Oclgrind reports every device type at once
        return "simulator"
    for bit, name in ((cl.device_type.GPU, "GPU"), (cl.device_type.CPU, "CPU"),
                      (cl.device_type.ACCELERATOR, "accelerator")):
        if device.type & bit:
            return name
    return "device"


def _forced_family() -> str | None:
    import os

    from ..core.profiles import FAMILIES

    forced = os.environ.get("CLPATCH_PROFILE") or None
    return forced if forced in FAMILIES else None


def _describe_entry(entry: DeviceEntry, default: bool) -> list[str]:
    """The lines `clpatch devices` prints for one device."""
    from ..core.profiles import family_for_device, profile_for_device

    device = entry.device
    mark = "*" if default else " "
    lines = [f"{mark} {entry.index}  {entry.label}" + ("   <- default" if default else "")]
    try:
        matched = family_for_device(device)
        forced = _forced_family()
        profile = profile_for_device(device, family=forced)
        family = (f"{forced} (forced by CLPATCH_PROFILE; the device matches {matched})"
                  if forced and forced != matched else matched)
        lines += [
            f"      {_device_kind(device)}, {device.version.strip()}, driver {device.driver_version.strip()}",
            f"      profile {family}; {profile.compute_units} compute units, local memory "
            f"{_kib(profile.local_mem_size)}, max work-group {profile.max_work_group_size}",
            f"      sub-groups {profile.subgroup_ops}; atomics: int64 {_yes(profile.int64_atomics)}, "
            f"float {_yes(profile.float_atomics)}; fp64 {_yes(profile.fp64)}",
        ]
        problems = entry.problems()
    except Exception as exc:  # a driver that cannot answer a query is itself worth showing
        problems = [f"cannot query the device: {_first_line(exc)}"]
    lines += [f"      ! {problem}" for problem in problems]
    return lines


def _check_device(entry: DeviceEntry) -> str | None:
    """Run a tiny search on the device and compare it with NumPy; None when it works,
    else what went wrong."""
    from ..match.search import search_patches

    image = (np.random.default_rng(7).random(_CHECK_SHAPE) * 255).astype(np.float32)
    try:
        runtime = Runtime(entry.device)
        result = search_patches(image, runtime=runtime, **_CHECK_PARAMS)
    except Exception as exc:  # any failure means this device is unusable; say why
        return f"{type(exc).__name__}: {_first_line(exc)}"
    expected = _brute_force_distances(image, **_CHECK_PARAMS)
    error = np.abs(result.distances.astype(np.float64) - expected)
    if not np.all(error <= 1e-4 * np.abs(expected) + 1e-2):
        return (f"{result.config.describe()} gave wrong distances "
                f"(largest error {error.max():.3g}); the driver miscompiles clpatch's kernels")
    return None


def _brute_force_distances(image: np.ndarray, patch_size: int, step: int, window: int,
                           n: int) -> np.ndarray:
    """The n smallest L2 distances of every reference of a small 2-D image, in NumPy."""
    from ..match.matches import grid_positions

    rows, cols = image.shape
    data = image.astype(np.float64)
    half = window // 2
    gy = grid_positions(rows, patch_size, step)
    gx = grid_positions(cols, patch_size, step)
    out = np.empty((len(gy), len(gx), n))
    for i, y in enumerate(gy):
        for j, x in enumerate(gx):
            ref = data[y:y + patch_size, x:x + patch_size]
            found = [float(((data[cy:cy + patch_size, cx:cx + patch_size] - ref) ** 2).sum())
                     for cy in range(max(0, y - half), min(rows - patch_size, y + half) + 1)
                     for cx in range(max(0, x - half), min(cols - patch_size, x + half) + 1)]
            out[i, j] = np.sort(found)[:n]
    return out


def _install_advice() -> str:
    """INSTALL_HELP without its first sentence (which says that no platform exists at all)."""
    first, _, rest = INSTALL_HELP.partition("\n")
    return first[first.find("Install"):] + "\n" + rest if "Install" in first else INSTALL_HELP


def cmd_devices(args: argparse.Namespace) -> int:
    import os

    from ..core.profiles import FAMILIES

    entries = list_devices()
    empty = [(p, platform) for p, platform in enumerate(get_platforms())
             if not any(e.platform_index == p for e in entries)]
    if not entries:
        for p, platform in empty:
            print(f"platform {p} ({platform.name.strip()}) has no devices")
        raise CommandError(INSTALL_HELP)
    env = os.environ.get("CLPATCH_DEVICE") or None
    forced = os.environ.get("CLPATCH_PROFILE") or None
    if forced and forced not in FAMILIES:
        print(f"note: CLPATCH_PROFILE={forced} is ignored here and refused by clpatch.Runtime: "
              f"it must be one of {', '.join(FAMILIES)}")
    try:
        default = select_device()
        default_note = None
    except ClpatchError as exc:
        default = None
        default_note = ("only simulators were found; choose one by name (CLPATCH_DEVICE=oclgrind)"
                        if all(is_simulator(e.device) for e in entries) else _first_line(exc))
    print(f"OpenCL devices ({len(entries)}); * marks the one clpatch uses by default"
          + (f" (CLPATCH_DEVICE={env})" if env else "") + ":")
    for entry in entries:
        is_default = default is not None and entry.device == default
        print("\n".join(_describe_entry(entry, is_default)))
    for p, platform in empty:
        print(f"  {p}:-  {platform.name.strip()}: platform without devices")
    if default_note:
        print(f"no default device: {default_note}")
    if not args.check:
        return 0

    print("\nChecking each device with a small search:")
    working = 0
    for entry in entries:
        name = f"  {entry.index}  {entry.device.name.strip()}"
        if is_simulator(entry.device):
            print(f"{name}: skipped (simulator)")
            continue
        start = time.perf_counter()
        problem = _check_device(entry)
        if problem is None:
            working += 1
            print(f"{name}: ok ({time.perf_counter() - start:.1f} s)")
        else:
            print(f"{name}: FAILED: {problem}")
    if working == 0:
        raise CommandError("no OpenCL device other than a simulator works. " + _install_advice())
    print(f"{working} working device(s).")
    return 0


# ---- search -------------------------------------------------------------------------------

def _add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", "-d", metavar="SPEC", default=None,
                        help="device index 'P:D' or a name substring (see 'clpatch devices'); "
                             "default: $CLPATCH_DEVICE, else the best GPU, else the CPU")


def _stats(values: np.ndarray) -> str:
    return f"mean {float(np.mean(values)):.6g}, median {float(np.median(values)):.6g}"


def _summary(name: str, image: np.ndarray, video: bool, result: Any, runtime: Runtime,
             seconds: float, builds: int) -> list[str]:
    shape = "x".join(str(s) for s in image.shape)
    layout = ("video (T, H, W" + (", C)" if image.ndim == 4 else ")")) if video else \
        ("(H, W, C)" if image.ndim == 3 else "(H, W)")
    frames = image.shape[0] if video else 1
    gy, gx = len(result.grid_y), len(result.grid_x)
    refs = frames * gy * gx
    config = result.config
    lines = [
        f"image:      {name}: {shape} {image.dtype} {layout}",
        f"search:     patch {result.patch_size}, step {result.step}, window {result.window}, "
        f"n {result.n}, {result.metric}"
        + (f", temporal window {result.temporal_window}" if video else ""),
        f"grid:       {gy} x {gx} references" + (f" x {frames} frames" if video else "")
        + f" = {refs}",
        f"config:     {config.describe()}",
        f"chosen by:  {config.source}: {config.reason}",
        f"device:     {runtime.device.platform.name.strip()} | {runtime.device.name.strip()} "
        f"(profile {runtime.profile.family})",
        f"wall time:  {seconds:.3f} s" + (f" (includes building {builds} OpenCL program(s))"
                                          if builds else ""),
    ]
    distances = np.asarray(result.distances)
    shown = [1, 2, result.n] if result.n > 2 else list(range(1, result.n + 1))
    for k in shown:
        lines.append(f"{f'neighbour {k}:':<11} distance {_stats(distances[..., k - 1])}")
    return lines


def _run_search(image: np.ndarray, video: bool, args: argparse.Namespace) -> tuple[Any, Runtime,
                                                                                   float, int]:
    from ..match.search import search_patches

    runtime = Runtime(args.device)
    builds = runtime.programs.builds
    start = time.perf_counter()
    result = search_patches(image, args.patch_size, args.step, args.window, args.n,
                            metric=args.metric, variant=args.variant,
                            temporal_window=args.temporal_window, runtime=runtime,
                            video=True if video else None)
    return result, runtime, time.perf_counter() - start, runtime.programs.builds - builds


def _save(path: str, result: Any, runtime: Runtime) -> None:
    with open(path, "wb") as fh:
        np.savez(fh, positions=np.asarray(result.positions), distances=np.asarray(result.distances),
                 grid_y=result.grid_y, grid_x=result.grid_x, patch_size=result.patch_size,
                 step=result.step, window=result.window, n=result.n, metric=result.metric,
                 temporal_window=result.temporal_window, config=result.config.describe(),
                 device=runtime.device.name.strip())


def cmd_search(args: argparse.Namespace) -> int:
    if args.output:
        folder = Path(args.output).resolve().parent
        if not folder.is_dir():
            raise CommandError(f"cannot write {args.output}: folder {folder} does not exist")
    image, video = read_array(args.image)
    result, runtime, seconds, builds = _run_search(image, video, args)
    print("\n".join(_summary(Path(args.image).name, image, video or result.positions.shape[-1] == 3,
                             result, runtime, seconds, builds)))
    if args.output:
        _save(args.output, result, runtime)
        print(f"saved:      {args.output} (positions, distances, grid_y, grid_x)")
    return 0


# ---- denoise and demo ---------------------------------------------------------------------

DENOISE_METHODS = ("nlmeans", "bm3d", "vbm3d")
AGGREGATIONS = ("buffers", "fixed", "cas")
BM3D_PRESETS = ("fast", "reference")
# Options of `denoise` passed on to the method when given: (argparse dest, keyword, label).
_METHOD_OPTIONS = (("preset", "preset", "preset"), ("patch_size", "patch_size", "patch"),
                   ("step", "step", "step"), ("window", "window", "window"), ("n", "n", "n"),
                   ("h", "h", "h"), ("aggregation", "aggregation", "aggregation"),
                   ("temporal_radius", "temporal_radius", "temporal radius"))
DEMO_SIGMA = 20.0
DEMO_SEED = 0


def _positive(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and np.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def _method(name: str) -> Any:
    if name == "nlmeans":
        from ..denoise.nlmeans import nlmeans

        return nlmeans
    if name == "bm3d":
        from ..denoise.bm3d import bm3d

        return bm3d
    if name == "vbm3d":
        from ..denoise.vbm3d import vbm3d

        return vbm3d
    raise CommandError(f"unknown denoising method {name!r}; choose from {', '.join(DENOISE_METHODS)}")


def _method_line(name: str, function: Any, sigma: float, kwargs: dict[str, Any]) -> str:
    """'nlmeans, sigma 20, patch 8, ...': the parameters that apply, given or default."""
    import inspect

    defaults = {k: p.default for k, p in inspect.signature(function).parameters.items()}
    parts = [name, f"sigma {sigma:g}"]
    if name == "bm3d":
        from ..denoise.bm3d_params import stage_params

        given = {k: v for k, v in kwargs.items() if k in ("patch_size", "step", "window", "n")}
        preset = kwargs.get("preset", defaults["preset"])
        s1, s2, _ = stage_params(preset, **given)
        parts += [f"preset {preset}", f"patch {s1.patch_size}", f"step {s1.step}/{s2.step}",
                  f"window {s1.window}/{s2.window}", f"n {s1.n}/{s2.n}",
                  f"transforms {s1.transform_2d}/{s2.transform_2d}, {s1.transform_1d}",
                  f"aggregation {kwargs.get('aggregation') or 'auto'}"]
        return ", ".join(parts)
    for _, key, label in _METHOD_OPTIONS:
        value = kwargs.get(key, defaults.get(key))
        if key in defaults or key in kwargs:
            shown = "auto" if value is None else f"{value:g}" if isinstance(value, float) else value
            parts.append(f"{label} {shown}")
    return ", ".join(parts)


def _as_written(image: np.ndarray, info: ImageInfo | VideoInfo) -> np.ndarray:
    """The values a file of `info`'s bit depth (an image's or a video's) would hold:
    rounded and clipped."""
    if info.bit_depth is None:
        return image
    return np.clip(np.rint(image), 0, info.peak)


def _shape(image: np.ndarray) -> str:
    return "x".join(str(s) for s in image.shape[:2])


def _check_output(path: str | None, info: ImageInfo) -> None:
    """Fail before any work when `path` cannot be written with `info`'s depth and mode."""
    if path is None:
        return
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise CommandError(f"cannot write {path}: folder {folder} does not exist")
    output_format(path, info)


def _clean_reference(path: str, image: np.ndarray, info: ImageInfo) -> np.ndarray:
    clean, clean_info = read_image(path)
    if clean.shape != image.shape:
        raise CommandError(f"the clean reference {path} is {_shape(clean)} "
                           f"{'colour' if clean_info.colour else 'grayscale'}, the input "
                           f"{_shape(image)} {'colour' if info.colour else 'grayscale'}")
    if clean_info.bit_depth != info.bit_depth:
        raise CommandError(f"the clean reference {path} is {clean_info.describe()}, the input "
                           f"{info.describe()}: PSNR needs the same bit depth")
    return clean


def _denoise(name: str, image: np.ndarray, info: ImageInfo, args: argparse.Namespace, *,
             clean: np.ndarray | None, clean_name: str | None, noise_line: str | None) -> int:
    """Denoise `image`, write args.output (when given) and print what happened."""
    import inspect

    if args.method == "vbm3d":
        raise CommandError(f"--method vbm3d denoises videos, and {name} is an image; give a "
                           "directory of frames, a multi-page TIFF, a (T, H, W[, 3]) .npy array "
                           "or a video file")
    function = _method(args.method)
    kwargs = {key: getattr(args, dest) for dest, key, _ in _METHOD_OPTIONS
              if getattr(args, dest, None) is not None}
    accepted = inspect.signature(function).parameters
    for key in kwargs:
        if key not in accepted:
            users = [m for m in DENOISE_METHODS if key in inspect.signature(_method(m)).parameters]
            raise CommandError(f"--{key.replace('_', '-')} does not apply to --method "
                               f"{args.method} (only to {', '.join(users)})")
    if "data_range" in accepted and info.bit_depth is not None:
        kwargs["data_range"] = float(info.peak)  # BM3D's thresholds follow the file's range
    runtime = Runtime(args.device)
    builds = runtime.programs.builds
    start = time.perf_counter()
    result = function(image, args.sigma, runtime=runtime, **kwargs)
    seconds = time.perf_counter() - start
    builds = runtime.programs.builds - builds
    result = np.asarray(result, dtype=np.float32)
    if result.shape != image.shape:
        raise CommandError(f"{args.method} returned shape {result.shape} for an image of "
                           f"shape {image.shape}")
    if args.output:
        write_image(args.output, result, info)

    lines = [f"image:      {name}: {_shape(image)}, {info.describe()}"]
    if noise_line:
        lines.append(f"noise:      {noise_line}")
    lines += [
        f"method:     {_method_line(args.method, function, args.sigma, kwargs)}",
        f"device:     {runtime.device.platform.name.strip()} | {runtime.device.name.strip()} "
        f"(profile {runtime.profile.family})",
        f"time:       {seconds:.3f} s" + (f" (includes building {builds} OpenCL program(s))"
                                          if builds else ""),
    ]
    if clean is not None:
        before = psnr(image, clean, info.peak)
        after = psnr(_as_written(result, info), clean, info.peak)
        lines.append(f"PSNR:       noisy {before:.2f} dB -> denoised {after:.2f} dB "
                     f"({after - before:+.2f} dB; peak {info.peak:g}, against {clean_name})")
    if args.output:
        lines.append(f"output:     {args.output} "
                     f"({info.describe(output_format(args.output, info))})")
    print("\n".join(lines))
    return 0


def _seed(text: str) -> int:
    """argparse type: an integer >= 0 (what numpy.random.default_rng takes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _noise_seed(seed: int | None) -> int:
    """The given seed, or a fresh one (printed, so that the run can be repeated)."""
    return seed if seed is not None else int(np.random.SeedSequence().entropy % 2**31)


def cmd_denoise(args: argparse.Namespace) -> int:
    """`clpatch denoise IN OUT`: read, optionally add noise, denoise, write, report."""
    if args.sigma is None:
        if args.add_noise is None:
            raise CommandError("--sigma is required: the noise standard deviation of IN, in its "
                               "units (e.g. 20 for an 8-bit image)")
        args.sigma = args.add_noise
    if args.add_noise is None and (args.seed is not None or args.save_noisy):
        raise CommandError("--seed and --save-noisy go with --add-noise")
    from ..io.video import is_video_path

    if is_video_path(args.input):
        from .video import VideoCommandError, denoise_video

        try:
            return denoise_video(args, _noise_seed(args.seed) if args.add_noise else None)
        except VideoCommandError as exc:
            raise CommandError(str(exc)) from None
    if args.overwrite:
        raise CommandError("--overwrite is for video outputs (directories of frames)")
    image, info = read_image(args.input)
    _check_output(args.output, info)
    _check_output(args.save_noisy, info)
    clean, clean_name, noise_line = None, None, None
    if args.clean:
        clean, clean_name = _clean_reference(args.clean, image, info), Path(args.clean).name
    if args.add_noise is not None:
        seed = _noise_seed(args.seed)
        clean, clean_name = image, f"{Path(args.input).name} (the input)"
        image = add_noise(clean, args.add_noise, seed)
        noise_line = f"added Gaussian noise, sigma {args.add_noise:g}, seed {seed} (not clipped)"
        if args.save_noisy:
            write_image(args.save_noisy, image, info)
            noise_line += f"; saved to {args.save_noisy}"
    return _denoise(Path(args.input).name, image, info, args, clean=clean,
                    clean_name=clean_name, noise_line=noise_line)


def cmd_demo(args: argparse.Namespace) -> int:
    """`clpatch demo`: denoise the bundled sample image after adding seeded noise."""
    from ..core.resources import sample_image_path

    path = sample_image_path()
    clean, info = read_image(path)
    _check_output(args.output, info)
    noisy = add_noise(clean, DEMO_SIGMA, DEMO_SEED)
    args.method, args.sigma = "nlmeans", DEMO_SIGMA
    return _denoise(f"{path.name} (bundled sample)", noisy, info, args, clean=clean,
                    clean_name=path.name,
                    noise_line=f"added Gaussian noise, sigma {DEMO_SIGMA:g}, seed {DEMO_SEED} "
                    "(not clipped)")


# ---- parser and entry point ---------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Portable OpenCL patch search and patch-based "
                     "denoising.")
    parser.add_argument("--version", action="version", version=f"clpatch {__version__}")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="show clpatch's log messages (kernel cache, driver registration)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    devices = commands.add_parser("devices", help="list OpenCL platforms and devices",
                                  description="List every OpenCL device with its 'P:D' index, "
                                  "profile and limits; * marks the default choice.")
    devices.add_argument("--check", action="store_true",
                         help="also run a small search on every non-simulator device; exit 1 "
                              "when none works")
    devices.set_defaults(func=cmd_devices)

    search = commands.add_parser("search", help="find the n most similar patches of every "
                                 "reference patch of an image",
                                 description="Exact windowed patch search on an image file "
                                 "(PNG, TIFF, JPEG, ... via Pillow) or a .npy array.")
    search.add_argument("image", metavar="IMAGE", help="image file, or .npy array "
                        "((H, W), (H, W, C); (T, H, W) with --temporal-window > 0; (T, H, W, C))")
    search.add_argument("--patch-size", "-p", type=int, default=8, help="patch side (default 8)")
    search.add_argument("--step", "-s", type=int, default=4,
                        help="grid step of the reference patches (default 4)")
    search.add_argument("--window", "-w", type=int, default=21,
                        help="search window side, half-width window//2 (default 21)")
    search.add_argument("-n", type=int, default=16, help="neighbours per reference (default 16)")
    search.add_argument("--metric", choices=("l2", "l1"), default="l2",
                        help="sum of squared (l2) or absolute (l1) differences (default l2)")
    search.add_argument("--variant", choices=SEARCH_VARIANTS, default=None,
                        help="force a kernel variant (default: the scheduler's choice)")
    search.add_argument("--temporal-window", "-t", type=int, default=0,
                        help="video: search frames t-tw ... t+tw (default 0)")
    _add_device_option(search)
    search.add_argument("--output", "-o", metavar="FILE.npz",
                        help="save positions, distances, grid_y and grid_x to this .npz file")
    search.set_defaults(func=cmd_search)

    denoise = commands.add_parser(
        "denoise", help="denoise an image or a video",
        description="Denoise an image (PNG, TIFF, JPEG: 8- or 16-bit grayscale, RGB, with or "
        "without alpha; or a .npy array) and write the result with the same bit depth and mode; "
        "alpha is kept as it is. Values and sigma share the file's units (0-255 for 8-bit, "
        "0-65535 for 16-bit files). Videos (a directory of frames, a multi-page TIFF, a "
        "(T, H, W[, 3]) .npy array, or with the 'video' extra a video file) are denoised with "
        "--method vbm3d (streamed), bm3d (frame by frame) or nlmeans (video NL-means) and "
        "written as OUT's kind of video.")
    denoise.add_argument("input", metavar="IN", help="noisy image file (or the clean image, with "
                         "--add-noise)")
    denoise.add_argument("output", metavar="OUT", help="denoised image to write; the format "
                         "comes from the extension (.png, .tif, .tiff, .jpg, .jpeg, .npy)")
    denoise.add_argument("--method", "-m", choices=DENOISE_METHODS, default="nlmeans",
                         help="denoising method: nlmeans (default), bm3d (CBM3D for colour) or, "
                              "for videos, vbm3d")
    denoise.add_argument("--preset", choices=BM3D_PRESETS, default=None,
                         help="bm3d parameter set: fast (Davy-Ehret's defaults, the default) or "
                              "reference (the original BM3D's)")
    denoise.add_argument("--sigma", type=_positive, default=None,
                         help="noise standard deviation in the image's units, e.g. 20 for 8-bit "
                              "(default with --add-noise: the added sigma)")
    noise = denoise.add_mutually_exclusive_group()
    noise.add_argument("--add-noise", type=_positive, metavar="SIGMA", default=None,
                       help="first add Gaussian noise of this sigma to IN (a test): IN is then "
                            "the clean reference for the PSNR")
    noise.add_argument("--clean", metavar="REF", default=None,
                       help="clean image to report PSNR against (same size and bit depth)")
    denoise.add_argument("--seed", type=_seed, default=None,
                         help="seed of --add-noise's noise (default: a fresh one, printed)")
    denoise.add_argument("--save-noisy", metavar="FILE", default=None,
                         help="with --add-noise: also write the noisy image (rounded and clipped)")
    denoise.add_argument("--patch-size", "-p", type=int, default=None,
                         help="patch side (default: the method's, 8)")
    denoise.add_argument("--step", "-s", type=int, default=None,
                         help="grid step of the reference patches (default: the method's; "
                              "nlmeans 4, bm3d by preset)")
    denoise.add_argument("--window", "-w", type=int, default=None,
                         help="search window side (default: the method's; nlmeans 21, bm3d by "
                              "preset)")
    denoise.add_argument("-n", type=int, default=None,
                         help="similar patches per reference (default: the method's; nlmeans 16, "
                              "bm3d by preset; a power of 2 for bm3d)")
    denoise.add_argument("--h", type=_positive, default=None,
                         help="NL-means filtering parameter (default: derived from sigma)")
    denoise.add_argument("--aggregation", choices=AGGREGATIONS, default=None,
                         help="how overlapping patch estimates are summed (default: the "
                              "scheduler's choice for the device)")
    denoise.add_argument("--temporal-radius", "-t", type=int, default=None,
                         help="videos: frames searched on each side (default: vbm3d 4, nlmeans 4)")
    denoise.add_argument("--overwrite", action="store_true",
                         help="videos: write into a non-empty OUT directory (its frame_NNNNN "
                              "files are replaced)")
    _add_device_option(denoise)
    denoise.set_defaults(func=cmd_denoise)

    demo = commands.add_parser("demo", help="denoise the bundled sample image and show the PSNR",
                               description=f"Add Gaussian noise (sigma {DEMO_SIGMA:g}, seed "
                               f"{DEMO_SEED}) to the bundled 512x512 sample image, denoise it with "
                               "NL-means' defaults and print the PSNR before and after and the "
                               "time. Writes nothing unless --output is given.")
    _add_device_option(demo)
    demo.add_argument("--output", "-o", metavar="FILE", default=None,
                      help="write the denoised image to FILE (.png, .tif, .jpg, .npy)")
    demo.set_defaults(func=cmd_demo)

    from .tuning import add_commands

    add_commands(commands, _add_device_option)
    return parser


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _report(message: str) -> None:
    lines = message.strip().splitlines() or ["unknown error"]
    print(f"{PROG}: error: {lines[0]}", file=sys.stderr)
    for line in lines[1:]:
        print(line, file=sys.stderr)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of the message (tests replace it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


_log_handler: logging.Handler | None = None


def _setup_logging(verbose: bool) -> None:
    global _log_handler
    if _log_handler is None:
        _log_handler = _StderrHandler()
        _log_handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(_log_handler)
    log.setLevel(logging.INFO if verbose else logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default: sys.argv[1:]); returns the exit code."""
    import pyopencl as cl

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        _setup_logging(args.verbose)
        if args.command is None:
            parser.print_help()
            return 2
        return int(args.func(args))
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except CommandError as exc:
        _report(str(exc))
        return exc.code
    except BrokenPipeError:  # output piped into a command that stopped reading (| head)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (ClpatchError, ValueError, TypeError, OSError, LookupError) as exc:
        _report(str(exc) or type(exc).__name__)
        return 1
    except cl.Error as exc:
        _report(f"OpenCL error: {exc}")
        return 1
