"""`clpatch denoise IN OUT --method burst`: several noisy frames of one scene, taken with a
shaking camera, denoised into one image, the reference frame (`clpatch.burst_denoise`: the
clustering ANN finds each reference patch's neighbours in every frame, then NL-means, or
with `--burst-method bm3d` BM3D's collaborative filter).

IN is a directory of images (its frame files in natural name order, `frame2` before
`frame10`, all of one shape and bit depth; each read by `read_image`), a multi-page TIFF, a
(T, H, W[, 3]) `.npy` array or, with the `video` extra, a video file (read by `open_video`).
OUT is one image, written with the reference frame's bit depth and mode (a directory's
reference frame keeps its alpha channel, as `denoise` does for images). `denoise` applies the
output rules and the noise options; PSNR is the reference frame's. The burst is read whole
before any work: what is refused there, or in the options, is a UsageError (exit 2).
"""

from __future__ import annotations

import argparse
import inspect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..denoise.burst import BURST_METHODS, burst_defaults, burst_denoise
from ..io.images import ImageInfo, output_format, psnr, read_image, write_image
from ..io.noise import psnr_peak
from ..io.video import FRAME_EXTENSIONS, frame_files, is_video_path, open_video, output_frame_info
from .common import (
    ARGUMENT_ERRORS,
    UsageError,
    as_written,
    builds_note,
    device_line,
    open_runtime,
    usage_checks,
)
from .outputs import Writing
from .sigma import resolve_sigma

# Options of `denoise` passed on to burst_denoise when given: (argparse dest, keyword, label).
BURST_OPTIONS = (("reference", "reference", "reference frame"), ("tile", "tile", "tile"),
                 ("k", "k", "k"), ("patch_size", "patch_size", "patch"), ("step", "step", "step"),
                 ("h", "h", "h"))
# Options of `denoise` that only --method burst takes (argparse dest, option).
BURST_ONLY = (("reference", "--reference"), ("tile", "--tile"),
              ("burst_method", "--burst-method"))
# What each burst method does to the candidates, for the report.
METHOD_LINES = {"nlmeans": "nlmeans", "bm3d": "bm3d (hard thresholding, then Wiener)"}
# Options of `denoise` that --method burst refuses, and why.
NOT_FOR_BURST = {"preset": "", "window": " (the ANN searches tiles: --tile)",
                 "aggregation": "",
                 "temporal_radius": " (every frame is searched)",
                 "search": " (a burst is always searched with the clustering ANN)"}
SOURCES = ("a directory of images, a multi-page TIFF, a (T, H, W[, 3]) .npy array or a video "
           "file")


@dataclass
class Burst:
    """The frames of a burst, float32 (T, H, W[, 3]) in the file's units, and how its
    reference frame is written."""

    frames: np.ndarray
    info: ImageInfo
    reference: int
    described: str      # e.g. '4 frames of 48x40 8-bit L (directory)'


def add_burst_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --burst-method (the filter of --method burst) to `denoise`'s parser."""
    parser.add_argument("--burst-method", choices=BURST_METHODS, default=None,
                        help="burst: the filter applied to each reference patch's "
                             "candidates from every frame: nlmeans (default) or bm3d "
                             "(BM3D's hard thresholding, then Wiener; k a power of 2)")


def burst_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of burst_denoise given on the command line; UsageError for an option
    of another method."""
    for dest, why in NOT_FOR_BURST.items():
        if getattr(args, dest, None) is not None:
            option = f"--{dest.replace('_', '-')}"
            raise UsageError(f"{option} does not apply to --method burst{why}")
    kwargs = {key: getattr(args, dest) for dest, key, _ in BURST_OPTIONS
              if getattr(args, dest, None) is not None}
    method = getattr(args, "burst_method", None)
    if method is not None:
        if method == "bm3d" and "h" in kwargs:
            raise UsageError("--h is NL-means' filtering parameter: it does not apply to "
                             "--burst-method bm3d")
        kwargs["method"] = method
    return kwargs


def check_burst_only(args: argparse.Namespace) -> None:
    """UsageError when an option of --method burst comes with another method."""
    for dest, option in BURST_ONLY:
        if getattr(args, dest, None) is not None:
            raise UsageError(f"{option} applies to --method burst only, not to --method "
                             f"{args.method}")


def check_burst_output(path: str | None, source: str) -> None:
    """An image output may not sit among the frames of the input directory (it would be
    read as a frame of the burst next time)."""
    if path is None or not Path(source).is_dir():
        return
    output = Path(path)
    if (output.suffix.lower() in FRAME_EXTENSIONS
            and output.resolve().parent == Path(source).resolve()):
        raise UsageError(f"{path}: is inside the input directory {source}, where it would be "
                         "read as a frame of the burst; write it elsewhere")


def _check_reference(reference: int, count: int, path: str) -> None:
    if not 0 <= reference < count:
        raise UsageError(f"--reference {reference} is out of range: {path} holds {count} "
                         f"frames (0 to {count - 1})")


def _layout(shape: tuple[int, ...], info: ImageInfo) -> str:
    depth = f"{info.bit_depth}-bit" if info.bit_depth else "float"
    return f"{shape[1]}x{shape[0]} {depth} {'RGB' if len(shape) == 3 else 'L'}"


def _read_directory(path: str, reference: int) -> Burst:
    files = frame_files(path)
    if not files:
        raise UsageError(f"{path}: no images in the directory (--method burst reads its "
                         f"*{'/*'.join(sorted(FRAME_EXTENSIONS))} files, in name order)")
    if len(files) < 2:
        raise UsageError(f"{path}: holds one image, {files[0].name}; --method burst needs "
                         "several frames of one scene")
    _check_reference(reference, len(files), path)
    frames, infos = [], []
    for file in files:
        frame, info = read_image(file)
        if frames and (frame.shape != frames[0].shape or info.bit_depth != infos[0].bit_depth):
            raise UsageError(f"{file}: {_layout(frame.shape, info)}, but {files[0].name} is "
                             f"{_layout(frames[0].shape, infos[0])}: the frames of a burst "
                             "must all have the same shape and bit depth")
        frames.append(frame)
        infos.append(info)
    described = f"{len(files)} frames of {_layout(frames[0].shape, infos[0])} (directory)"
    return Burst(np.stack(frames), infos[reference], reference, described)


def read_burst(path: str, reference: int) -> Burst:
    """The burst at `path` (see the module doc), read whole; UsageError for a missing or
    unreadable file, an empty directory, frames of different shapes, a `reference` out of
    range, or a single image."""
    with usage_checks():
        return _read_burst(path, reference)


def _read_burst(path: str, reference: int) -> Burst:
    if Path(path).is_dir():
        return _read_directory(path, reference)
    if not is_video_path(path):
        read_image(path)  # a missing or unreadable file is reported as such
        raise UsageError(f"--method burst denoises several frames of one scene, and {path} "
                         f"is a single image; pass several frames: {SOURCES}")
    info, frames = open_video(path)
    if info.frames < 2:
        raise UsageError(f"{path}: holds one frame; --method burst needs several frames of "
                         "one scene")
    _check_reference(reference, info.frames, path)
    stack = np.stack(list(frames)).astype(np.float32, copy=False)
    return Burst(stack.reshape(len(stack), *info.shape), output_frame_info(info), reference,
                 info.describe())


def burst_line(sigma: float, kwargs: dict[str, Any]) -> str:
    """'burst, sigma 20, reference frame 0, ...': the parameters, given or default."""
    method = kwargs.get("method", "nlmeans")
    defaults = {k: p.default for k, p in inspect.signature(burst_denoise).parameters.items()}
    defaults.update(burst_defaults(method))
    parts = ["burst", f"sigma {sigma:g}", f"{METHOD_LINES[method]} on the clustering ANN's "
             "candidates from every frame"]
    for _, key, label in BURST_OPTIONS:
        if key == "h" and method != "nlmeans":
            continue
        value = kwargs.get(key, defaults.get(key))
        shown = "auto" if value is None else f"{value:g}" if isinstance(value, float) else value
        parts.append(f"{label} {shown}")
    return ", ".join(parts)


def denoise_burst(args: argparse.Namespace, burst: Burst, kwargs: dict[str, Any], *,
                  clean: np.ndarray | None, clean_name: str | None,
                  noise_line: str | None) -> int:
    """Denoise `burst` (noise already added) into its reference frame, write args.output
    (when given) and print what happened."""
    runtime = open_runtime(args.device)
    sigma_line = resolve_sigma(args, burst.frames[burst.reference], runtime,  # --sigma auto
                               f"frame {burst.reference} of {Path(args.input).name}")
    builds = runtime.programs.builds
    with Writing(args.output):  # an interrupted run writes nothing, and says so
        start = time.perf_counter()
        with usage_checks(ARGUMENT_ERRORS):  # the parameters, checked before any work
            result = burst_denoise(burst.frames, args.sigma, runtime=runtime, **kwargs)
        seconds = time.perf_counter() - start
        builds = runtime.programs.builds - builds
        result = np.asarray(result, dtype=np.float32)
        if args.output:
            write_image(args.output, result, burst.info)
    lines = [f"burst:      {Path(args.input).name}: {burst.described}"]
    if noise_line:
        lines.append(f"noise:      {noise_line}")
    if sigma_line:
        lines.append(f"sigma:      {sigma_line}")
    lines += [f"method:     {burst_line(args.sigma, kwargs)}",
              f"device:     {device_line(runtime)}",
              f"time:       {seconds:.3f} s" + builds_note(builds)]
    if clean is not None:
        peak = psnr_peak(clean, burst.info.bit_depth)
        before = psnr(burst.frames[burst.reference], clean, peak)
        after = psnr(as_written(result, burst.info), clean, peak)
        lines.append(f"PSNR:       noisy {before:.2f} dB -> denoised {after:.2f} dB "
                     f"({after - before:+.2f} dB; frame {burst.reference}; peak {peak:g}, "
                     f"against {clean_name})")
    if args.output:
        lines.append(f"output:     {args.output} "
                     f"({burst.info.describe(output_format(args.output, burst.info))}, "
                     f"frame {burst.reference} denoised)")
    print("\n".join(lines))
    return 0
