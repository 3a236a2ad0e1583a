"""The `clpatch` command line: `clpatch devices | search | demo`.

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
from typing import Any, NoReturn

import numpy as np

from . import __version__
from .errors import ClpatchError
from .runtime import (
    INSTALL_HELP,
    DeviceEntry,
    Runtime,
    get_platforms,
    is_simulator,
    list_devices,
    select_device,
)
from .scheduler import SEARCH_VARIANTS

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

    from .profiles import FAMILIES

    forced = os.environ.get("CLPATCH_PROFILE") or None
    return forced if forced in FAMILIES else None


def _describe_entry(entry: DeviceEntry, default: bool) -> list[str]:
    """The lines `clpatch devices` prints for one device."""
    from .profiles import family_for_device, profile_for_device

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
    from .search import search_patches

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
    from .search import grid_positions

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

    from .profiles import FAMILIES

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


# ---- search and demo --------------------------------------------------------------------

def read_image(path: str | Path) -> tuple[np.ndarray, bool]:
    """Read an image file as a NumPy array, keeping its values and dtype.

    PNG/TIFF/JPEG/... through Pillow: grayscale as (H, W), colour as (H, W, C) (RGB, RGBA,
    LA; palette images are expanded), 16-bit images as uint16. Multi-frame files (TIFF
    stacks, animations) become video (T, H, W[, C]). `.npy` files are loaded as they are.
    Returns (array, is_video) where is_video is True only for multi-frame image files.
    """
    path = Path(path)
    if not path.is_file():
        raise CommandError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CommandError(f"{path}: not a readable .npy array ({_first_line(exc)})") from exc
        return array, False

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            frames = [_frame_array(image, k) for k in range(getattr(image, "n_frames", 1))]
    except UnidentifiedImageError as exc:
        raise CommandError(f"{path}: not an image file Pillow can read") from exc
    except (OSError, ValueError, SyntaxError) as exc:  # truncated or corrupt files
        raise CommandError(f"{path}: cannot read the image ({_first_line(exc)})") from exc
    if len(frames) == 1:
        return frames[0], False
    if len({(f.shape, f.dtype) for f in frames}) != 1:
        raise CommandError(f"{path}: its {len(frames)} frames differ in size or type; "
                           "save them as a (T, H, W[, C]) .npy array instead")
    return np.stack(frames), True


def _frame_array(image: Any, index: int) -> np.ndarray:
    image.seek(index)
    mode = image.mode
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif mode == "PA":
        image = image.convert("RGBA")
    elif mode == "1":
        image = image.convert("L")
    elif mode in ("CMYK", "YCbCr", "LAB", "HSV"):
        image = image.convert("RGB")
    array = np.asarray(image)
    if array.dtype.byteorder not in ("=", "|"):  # e.g. big-endian 16-bit TIFF
        array = array.astype(array.dtype.newbyteorder("="))
    return array


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
    from .search import search_patches

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
    image, video = read_image(args.image)
    result, runtime, seconds, builds = _run_search(image, video, args)
    print("\n".join(_summary(Path(args.image).name, image, video or result.positions.shape[-1] == 3,
                             result, runtime, seconds, builds)))
    if args.output:
        _save(args.output, result, runtime)
        print(f"saved:      {args.output} (positions, distances, grid_y, grid_x)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from ._resources import sample_image_path

    path = sample_image_path()
    image, video = read_image(path)
    args.patch_size, args.step, args.window, args.n = 8, 4, 21, 16
    args.metric, args.variant, args.temporal_window = "l2", None, 0
    result, runtime, seconds, builds = _run_search(image, video, args)
    print("\n".join(_summary(path.name, image, video, result, runtime, seconds, builds)))
    i, j = len(result.grid_y) // 2, len(result.grid_x) // 2
    matches = ", ".join(f"({y}, {x}) d={d:.6g}" for (y, x), d in
                        zip(result.positions[i, j, :4], result.distances[i, j, :4], strict=True))
    print(f"centre reference (y={result.grid_y[i]}, x={result.grid_x[j]}): best 4 matches "
          f"(y, x): {matches}")
    return 0


# ---- parser and entry point ---------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Portable OpenCL patch search (and, later, "
                     "patch-based denoising).")
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

    demo = commands.add_parser("demo", help="search the bundled sample image and show the result",
                               description="Run a default search on the bundled sample image.")
    _add_device_option(demo)
    demo.set_defaults(func=cmd_demo)

    from .cli_tuning import add_commands

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
