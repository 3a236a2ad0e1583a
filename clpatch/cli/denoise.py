"""`clpatch denoise IN OUT` on images: read, optionally add noise, denoise with NL-means or
BM3D (neighbours from the windowed search or, with `--search ann`, the clustering ANN), write
with the input's bit depth and mode, report the PSNR. Videos go to `video`, bursts
(`--method burst`: several frames of one scene into one image) to `burst`. Refusals before
any work are UsageErrors (exit 2), failures while denoising or writing exit 1 (`common`)."""

from __future__ import annotations

import argparse
import inspect
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..core.volumes import as_volume
from ..denoise.bm3d import bm3d, noise_255
from ..denoise.bm3d_params import choose_aggregation as bm3d_aggregation
from ..denoise.bm3d_params import settings_note, stage_params
from ..denoise.nlm_aggregation import choose_aggregation as nlm_aggregation
from ..denoise.nlmeans import nlmeans
from ..denoise.strength import Strength
from ..denoise.vbm3d import vbm3d
from ..io.images import FLOAT_FORMATS, ImageInfo, add_noise, output_format, psnr, read_image, write_image
from ..io.noise import psnr_peak
from ..io.video import is_video_path
from ..match.ann.search import DEFAULT_TILE, FILTER_NEIGHBOUR_CLUSTERS, FILTER_TILE, FILTER_TILINGS
from ..match.matcher import searches
from .burst import (
    add_burst_arguments,
    burst_options,
    check_burst_only,
    check_burst_output,
    denoise_burst,
    read_burst,
)
from .chunked import denoise_chunked
from .common import (
    ARGUMENT_ERRORS,
    CommandError,
    UsageError,
    add_device_option,
    as_written,
    builds_note,
    device_line,
    open_runtime,
    positive_number,
    seed_number,
    usage_checks,
)
from .guide import add_guide_options, check_guide_options, guide_line, image_guide
from .outputs import Writing, check_format, check_outputs
from .sigma import AUTO, SIGMA_HELP, resolve_sigma, sigma_option
from .video import denoise_video

DENOISE_METHODS = ("nlmeans", "bm3d", "vbm3d", "burst")
AGGREGATIONS = ("buffers", "fixed", "cas")
BM3D_PRESETS = ("fast", "reference")
# The library function of each method.
_FUNCTIONS: dict[str, Callable[..., Any]] = {"nlmeans": nlmeans, "bm3d": bm3d, "vbm3d": vbm3d}
# Options of `denoise` passed on to the method when given: (argparse dest, keyword, label).
METHOD_OPTIONS = (("preset", "preset", "preset"), ("patch_size", "patch_size", "patch"),
                  ("step", "step", "step"), ("window", "window", "window"), ("k", "k", "k"),
                  ("h", "h", "h"), ("aggregation", "aggregation", "aggregation"),
                  ("temporal_radius", "temporal_radius", "temporal radius"),
                  ("search", "search", "search"))


def method_function(name: str) -> Callable[..., Any]:
    """The library function of the denoising method `name` (not burst: see `burst`)."""
    if name not in _FUNCTIONS:
        raise UsageError(f"unknown denoising method {name!r}; choose from "
                         f"{', '.join(DENOISE_METHODS)}")
    return _FUNCTIONS[name]


def method_line(name: str, function: Any, sigma: float, kwargs: dict[str, Any],
                noise: float | None = None) -> str:
    """'nlmeans, sigma 20, patch 8, ...': the parameters that apply, given or default
    (`noise`: BM3D's σ in 0-255 units, which picks its preset's settings)."""
    defaults = {k: p.default for k, p in inspect.signature(function).parameters.items()}
    parts = [name, f"sigma {sigma:g}"]
    ann = kwargs.get("search") == "ann"
    if name == "bm3d":
        given = {("n" if k == "k" else k): v for k, v in kwargs.items()
                 if k in ("patch_size", "step", "window", "k")}
        preset = kwargs.get("preset", defaults["preset"])
        s1, s2, _ = stage_params(preset, noise, **given)
        patch = (f"{s1.patch_size}" if s1.patch_size == s2.patch_size
                 else f"{s1.patch_size}/{s2.patch_size}")
        parts += [f"preset {preset}" + settings_note(preset, noise),
                  f"patch {patch}", f"step {s1.step}/{s2.step}",
                  *([] if ann else [f"window {s1.window}/{s2.window}"]), f"k {s1.n}/{s2.n}",
                  f"transforms {s1.transform_2d}/{s2.transform_2d}, {s1.transform_1d}",
                  f"aggregation {kwargs.get('aggregation') or 'auto'}"]
    else:
        for _, key, label in METHOD_OPTIONS:
            if key == "search" or (ann and key == "window"):
                continue
            value = kwargs.get(key, defaults.get(key))
            if key in defaults or key in kwargs:
                shown = ("auto" if value is None else
                         f"{value:g}" if isinstance(value, float) else value)
                parts.append(f"{label} {shown}")
    if ann:
        parts.append(f"search ann (the clustering ANN, tiles of {FILTER_TILE}, "
                     f"{FILTER_NEIGHBOUR_CLUSTERS} sibling clusters, {FILTER_TILINGS} "
                     "tilings)")
    return ", ".join(parts)


def _shape(image: np.ndarray) -> str:
    return "x".join(str(s) for s in image.shape[:2])


def _clean_reference(path: str, image: np.ndarray, info: ImageInfo) -> np.ndarray:
    with usage_checks():
        clean, clean_info = read_image(path)
    if clean.shape != image.shape:
        raise UsageError(f"the clean reference {path} is {_shape(clean)} "
                         f"{'colour' if clean_info.colour else 'grayscale'}, the input "
                         f"{_shape(image)} {'colour' if info.colour else 'grayscale'}")
    if clean_info.bit_depth != info.bit_depth:
        raise UsageError(f"the clean reference {path} is {clean_info.describe()}, the input "
                         f"{info.describe()}: PSNR needs the same bit depth")
    return clean


def denoise_image(name: str, image: np.ndarray, info: ImageInfo, args: argparse.Namespace, *,
                  clean: np.ndarray | None, clean_name: str | None,
                  noise_line: str | None) -> int:
    """Denoise `image` with args.method, write args.output (when given) and print what
    happened."""
    if args.method == "vbm3d":
        raise UsageError(f"--method vbm3d denoises videos, and {name} is an image; give a "
                         "directory of frames, a multi-page TIFF, a (T, H, W[, 3]) .npy array "
                         "or a video file")
    function = method_function(args.method)
    if args.method == "bm3d" and info.channels not in (1, 3):
        raise UsageError(f"--method bm3d filters grayscale or RGB images, and {name} is a "
                         f"{info.mode} .npy array (every channel of a .npy array is data, "
                         "none is alpha); use --method nlmeans, or save 1 or 3 channels")
    kwargs = {key: getattr(args, dest) for dest, key, _ in METHOD_OPTIONS
              if getattr(args, dest, None) is not None}
    accepted = inspect.signature(function).parameters
    for key in kwargs:
        if key not in accepted:
            users = [m for m, f in _FUNCTIONS.items() if key in inspect.signature(f).parameters]
            raise UsageError(f"--{key.replace('_', '-')} does not apply to --method "
                             f"{args.method} (only to {', '.join(users)})")
    if "data_range" in accepted and info.bit_depth is not None:
        kwargs["data_range"] = float(info.peak)  # BM3D's thresholds follow the file's range
    guided = image_guide(args, image, info)
    runtime = open_runtime(args.device)
    sigma_line = resolve_sigma(args, image, runtime, name, info.bit_depth)  # --sigma auto
    # The header first, before the work (a long call, or kernel builds, then shows what it
    # is doing); the time, PSNR and output lines after it. The arguments the call would
    # refuse are checked before it, so that an error prints no header.
    with usage_checks(ARGUMENT_ERRORS):  # the method's line checks its parameters too
        if args.method == "bm3d":
            bm3d_aggregation(runtime.profile, kwargs.get("aggregation"))
        elif args.method == "nlmeans":
            nlm_aggregation(kwargs.get("patch_size", 8), kwargs.get("step", 4),
                            runtime.profile, kwargs.get("aggregation"))
        noise = (noise_255(as_volume(image), Strength.check(
            args.sigma, data_range=kwargs.get("data_range")), runtime, kwargs.get("preset"))
            if args.method == "bm3d" else None)
        method = method_line(args.method, function, args.sigma, kwargs, noise)
    lines = [f"image:      {name}: {_shape(image)}, {info.describe()}"]
    if info.note:
        lines.append(f"note:       {info.note}")
    if noise_line:
        lines.append(f"noise:      {noise_line}")
    if sigma_line:
        lines.append(f"sigma:      {sigma_line}")
    lines.append(f"method:     {method}")
    if guided:
        lines.append(f"guide:      {guide_line(args)}")
    lines.append(f"device:     {device_line(runtime)}")
    print("\n".join(lines), flush=True)
    builds = runtime.programs.builds
    with Writing(args.output):  # an interrupted run writes nothing, and says so
        start = time.perf_counter()
        with usage_checks(ARGUMENT_ERRORS):  # the parameters, checked before any work
            result = function(image, args.sigma, runtime=runtime, **kwargs, **guided)
        seconds = time.perf_counter() - start
        builds = runtime.programs.builds - builds
        result = np.asarray(result, dtype=np.float32)
        if result.shape != image.shape:
            raise CommandError(f"{args.method} returned shape {result.shape} for an image of "
                               f"shape {image.shape}")
        if args.output:
            write_image(args.output, result, info)

    # What the user gets: a file's values are read back from it where it changes them
    # (JPEG rounds and compresses; float data written to an 8-bit format is rounded to
    # 0-255); otherwise the values the written bit depth holds (`as_written`).
    fmt = output_format(args.output, info) if args.output else None
    lossy = fmt == "JPEG" or (info.bit_depth is None and fmt not in (None, *FLOAT_FORMATS))
    lines = [f"time:       {seconds:.3f} s" + builds_note(builds)]
    if clean is not None:
        peak = psnr_peak(clean, info.bit_depth)
        before = psnr(image, clean, peak)
        got = read_image(args.output)[0] if lossy else as_written(result, info)
        after = psnr(got, clean, peak)
        lines.append(f"PSNR:       noisy {before:.2f} dB -> denoised {after:.2f} dB "
                     f"({after - before:+.2f} dB; peak {peak:g}, against {clean_name}"
                     + (f"; of the {fmt} file written" if lossy else "") + ")")
    if args.output:
        lines.append(f"output:     {args.output} "
                     f"({info.describe(output_format(args.output, info))})")
    print("\n".join(lines))
    return 0


def noise_seed(seed: int | None) -> int:
    """The given seed, or a fresh one (printed, so that the run can be repeated)."""
    return seed if seed is not None else int(np.random.SeedSequence().entropy % 2**31)


def _noise_and_clean(args: argparse.Namespace, image: np.ndarray, info: ImageInfo,
                     reference: int | None = None) -> tuple[np.ndarray, np.ndarray | None,
                                                            str | None, str | None]:
    """(what to denoise, the clean image or None, its name, the noise line) for --clean and
    --add-noise. With `reference`, `image` is a burst (T, H, W[, C]): noise goes to every
    frame, and the clean image and --save-noisy are frame `reference`'s."""
    name = Path(args.input).name
    view = image if reference is None else image[reference]
    clean, clean_name, noise_line = None, None, None
    if args.clean:
        clean, clean_name = _clean_reference(args.clean, view, info), Path(args.clean).name
    if args.add_noise is not None:
        seed = noise_seed(args.seed)
        clean = view
        clean_name = (f"{name} (the input)" if reference is None else
                      f"frame {reference} of {name} (the input)")
        image = add_noise(image, args.add_noise, seed)
        noise_line = (f"added Gaussian noise{'' if reference is None else ' to every frame'}, "
                      f"sigma {args.add_noise:g}, seed {seed} (not clipped)")
        if args.save_noisy:
            with Writing(args.save_noisy):
                write_image(args.save_noisy, image if reference is None else image[reference],
                            info)
            noise_line += (f"; saved to {args.save_noisy}"
                           + ("" if reference is None else f" (frame {reference})"))
    return image, clean, clean_name, noise_line


def _check_search(args: argparse.Namespace, video: bool) -> None:
    """--search goes with nlmeans and bm3d on images; with ann, --window does not apply."""
    if args.search in (None, "window"):
        return
    if video:
        raise UsageError(f"--search {args.search} denoises images (--method nlmeans or "
                         f"bm3d), and {args.input} is a video; for several frames of one "
                         "scene use --method burst")
    if args.window is not None:
        raise UsageError(f"--window does not apply to --search {args.search} (the ANN "
                         f"searches tiles of {FILTER_TILE})")


def _cmd_burst(args: argparse.Namespace) -> int:
    """`clpatch denoise IN OUT --method burst` (see `burst`)."""
    kwargs = burst_options(args)
    check_outputs([args.output, args.save_noisy], inputs=[args.input, args.clean],
                  overwrite=args.overwrite)
    for path in (args.output, args.save_noisy):
        check_burst_output(path, args.input)
    burst = read_burst(args.input, 0 if args.reference is None else args.reference)
    check_format(args.output, burst.info)
    check_format(args.save_noisy, burst.info)
    burst.frames, clean, clean_name, noise_line = _noise_and_clean(
        args, burst.frames, burst.info, burst.reference)
    return denoise_burst(args, burst, kwargs, clean=clean, clean_name=clean_name,
                         noise_line=noise_line)


def cmd_denoise(args: argparse.Namespace) -> int:
    """`clpatch denoise IN OUT`: read, optionally add noise, denoise, write, report."""
    if args.sigma is None:
        if args.add_noise is None:
            raise UsageError("--sigma is required: the noise standard deviation of IN, in its "
                             "units (e.g. 20 for an 8-bit image)")
        args.sigma = args.add_noise
    if args.add_noise is None and (args.seed is not None or args.save_noisy):
        raise UsageError("--seed and --save-noisy go with --add-noise")
    check_guide_options(args)
    if args.chunks is not None:
        if args.sigma == AUTO:
            raise UsageError("--sigma auto does not go with --chunks: estimate sigma on a "
                             "part of IN (clpatch.estimate_sigma) and give its value")
        return denoise_chunked(args)
    if args.scheduler is not None:
        raise UsageError("--scheduler goes with --chunks")
    if args.method == "burst":
        return _cmd_burst(args)
    check_burst_only(args)
    video = is_video_path(args.input)
    _check_search(args, video)
    check_outputs([args.output, args.save_noisy], inputs=[args.input, args.clean, args.guide],
                  overwrite=args.overwrite, video=video)
    if video:
        return denoise_video(args, noise_seed(args.seed) if args.add_noise else None)
    with usage_checks():
        image, info = read_image(args.input)
    check_format(args.output, info)
    check_format(args.save_noisy, info)
    image, clean, clean_name, noise_line = _noise_and_clean(args, image, info)
    return denoise_image(Path(args.input).name, image, info, args, clean=clean,
                         clean_name=clean_name, noise_line=noise_line)


def add_command(commands: argparse._SubParsersAction) -> None:
    """Add `denoise` to the command line's sub-commands."""
    denoise = commands.add_parser(
        "denoise", help="denoise an image or a video",
        description="Denoise an image (PNG, TIFF, JPEG: 8- or 16-bit grayscale, RGB, with or "
        "without alpha; or a .npy array) and write the result with the same bit depth and mode; "
        "alpha is kept as it is. Values and sigma share the file's units (0-255 for 8-bit, "
        "0-65535 for 16-bit files). Videos (a directory of frames, a multi-page TIFF, a "
        "(T, H, W[, 3]) .npy array, or with the 'video' extra a video file) are denoised with "
        "--method vbm3d (streamed), bm3d (frame by frame) or nlmeans (video NL-means) and "
        "written as OUT's kind of video. --method burst takes several frames of one scene "
        "shot with a shaking camera (a directory of images, a multi-page TIFF, a "
        "(T, H, W[, 3]) .npy array or a video file) and writes one image: the --reference "
        "frame, denoised with patches from every frame (clustering ANN, then NL-means or BM3D: "
        "--burst-method).")
    denoise.add_argument("input", metavar="IN", help="noisy image file (or the clean image, with "
                         "--add-noise), video, or with --method burst the burst's frames")
    denoise.add_argument("output", metavar="OUT", help="denoised image to write; the format "
                         "comes from the extension (.png, .tif, .tiff, .jpg, .jpeg, .webp, .bmp, "
                         ".npy); never IN, and not over an existing file without --overwrite")
    denoise.add_argument("--method", "-m", choices=DENOISE_METHODS, default="nlmeans",
                         help="denoising method: nlmeans (default), bm3d (CBM3D for colour), "
                              "for videos vbm3d, or burst: several frames of one scene into one "
                              "image")
    denoise.add_argument("--preset", choices=BM3D_PRESETS, default=None,
                         help="bm3d parameter set: fast (Davy-Ehret's defaults, the default) or "
                              "reference (the original BM3D's)")
    denoise.add_argument("--sigma", type=sigma_option, default=None, help=SIGMA_HELP)
    noise = denoise.add_mutually_exclusive_group()
    noise.add_argument("--add-noise", type=positive_number, metavar="SIGMA", default=None,
                       help="first add Gaussian noise of this sigma to IN (a test): IN is then "
                            "the clean reference for the PSNR")
    noise.add_argument("--clean", metavar="REF", default=None,
                       help="clean image to report PSNR against (same size and bit depth)")
    denoise.add_argument("--seed", type=seed_number, default=None,
                         help="seed of --add-noise's noise (default: a fresh one, printed)")
    denoise.add_argument("--save-noisy", metavar="FILE", default=None,
                         help="with --add-noise: also write the noisy image (rounded and "
                              "clipped; burst: the noisy reference frame)")
    denoise.add_argument("--patch-size", "-p", type=int, default=None,
                         help="patch side (default: the method's, 8)")
    denoise.add_argument("--step", "-s", type=int, default=None,
                         help="grid step of the reference patches (default: the method's; "
                              "nlmeans 4, bm3d by preset, burst 2)")
    denoise.add_argument("--window", "-w", type=int, default=None,
                         help="search window side (default: the method's; nlmeans 21, bm3d by "
                              "preset)")
    denoise.add_argument("-k", "--k", "-n", "--n", type=int, default=None, dest="k",
                         help="similar patches per reference (default: the method's; nlmeans 16, "
                              "bm3d by preset, a power of 2; burst 16, from every frame, at "
                              "most 32); -n is its former name")
    denoise.add_argument("--h", type=positive_number, default=None,
                         help="NL-means filtering parameter (default: derived from sigma; "
                              "burst: sigma)")
    denoise.add_argument("--search", choices=searches(), default=None,
                         help="nlmeans and bm3d on images: where the similar patches come from "
                              "(default window, the exact windowed search; ann: the clustering "
                              "ANN, to which --window does not apply)")
    denoise.add_argument("--reference", type=int, default=None, metavar="INDEX",
                         help="burst: the frame to denoise, counted from 0 (default 0)")
    denoise.add_argument("--tile", type=int, default=None,
                         help=f"burst: side of the ANN's tiles (default {DEFAULT_TILE})")
    denoise.add_argument("--aggregation", choices=AGGREGATIONS, default=None,
                         help="how overlapping patch estimates are summed (default: the "
                              "scheduler's choice for the device)")
    denoise.add_argument("--temporal-radius", "--temporal-window", "-t", type=int, default=None,
                         dest="temporal_radius",
                         help="videos: frames searched on each side (default: vbm3d 4, nlmeans 4)")
    denoise.add_argument("--overwrite", action="store_true",
                         help="replace an existing OUT (and --save-noisy file); for a directory "
                              "of frames, its frame_NNNNN files (without it, an existing output "
                              "is an error)")
    denoise.add_argument("--chunks", type=int, default=None, metavar="N",
                         help="images too large for memory: read IN (TIFF, BigTIFF or Zarr) in "
                              "N x N chunks, denoise them with clpatch.dask (nlmeans or bm3d; "
                              "the same result as one call) and write OUT (Zarr or tiled TIFF) "
                              "band by band; needs the dask extra")
    denoise.add_argument("--scheduler", metavar="ADDRESS", default=None,
                         help="with --chunks: run the chunks on the workers of this Dask "
                              "scheduler (e.g. tcp://host:8786), each on its own device; they "
                              "must see IN at the same path (default: this process)")
    add_guide_options(denoise)
    add_burst_arguments(denoise)
    add_device_option(denoise)
    denoise.set_defaults(func=cmd_denoise)
