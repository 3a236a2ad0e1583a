"""`clpatch denoise` on videos: a directory of frames, a multi-page TIFF, a `.npy` array
(T, H, W[, 3]) or, with the `video` extra, a video file; the result is written as the same
kind of video unless OUT names another (see clpatch.io.video).

Methods: `vbm3d` streams the frames through `VBM3DPlan.stream` (device memory bounded by the
temporal window, host memory by the frames in flight); `bm3d` denoises frame by frame
(`BM3DPlan.stream`: one frame's copies overlap the next one's kernels); and
`nlmeans` runs video NL-means (`nlmeans_video`), which takes the whole video at once. The
PSNR against a clean reference (`--clean`, or the input itself with `--add-noise`) is over
all frames. A progress bar goes to stderr when it is a terminal.

Outputs are written to temporaries beside them and renamed into place once every frame is
written (`VideoWriter`): an interrupted or failed run leaves no partial video and the previous
output, if any, untouched, and says so (see `outputs.Writing`).

Exit statuses (see `common`): IN, the clean reference, the guide, the outputs (opened before
any work) and the method's parameters (checked as its plan is made) are usage errors when
refused (2); a frame failing to decode or holding NaN values midway, the device or a write
failing is a failure (1).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..core.runtime import Runtime
from ..denoise.bm3d import plan_for
from ..denoise.nlmeans import nlmeans_video
from ..denoise.vbm3d import VBM3DPlan
from ..denoise.vbm3d_params import choose_video_search, video_stage_params
from ..io.noise import psnr_peak
from ..io.video import VideoInfo, VideoWriter, open_video
from .common import (
    ARGUMENT_ERRORS,
    UsageError,
    as_written,
    builds_note,
    device_line,
    open_runtime,
    usage_checks,
)
from .guide import guide_line, video_guide
from .outputs import Writing
from .progress import Progress
from .sigma import first_frame_sigma

# Command-line options (argparse dest) each video method accepts, and its keyword.
VIDEO_OPTIONS = {
    "vbm3d": {"patch_size": "patch_size", "step": "step", "k": "k", "aggregation": "aggregation",
              "temporal_radius": "temporal_radius"},
    "bm3d": {"preset": "preset", "patch_size": "patch_size", "step": "step", "window": "window",
             "k": "k", "aggregation": "aggregation"},
    "nlmeans": {"patch_size": "patch_size", "step": "step", "window": "window", "k": "k",
                "h": "h", "aggregation": "aggregation", "temporal_radius": "temporal_window"},
}


def _options(args: argparse.Namespace) -> dict[str, Any]:
    accepted = VIDEO_OPTIONS[args.method]
    given = {dest: getattr(args, dest) for dest in
             ("preset", "patch_size", "step", "window", "k", "h", "aggregation",
              "temporal_radius") if getattr(args, dest, None) is not None}
    for dest in given:
        if dest not in accepted:
            users = [m for m, opts in VIDEO_OPTIONS.items() if dest in opts]
            raise UsageError(f"--{dest.replace('_', '-')} does not apply to --method "
                             f"{args.method} on a video (only to {', '.join(users)})")
    return {accepted[dest]: value for dest, value in given.items()}


def _noisy(frames: Iterator[np.ndarray], sigma: float | None,
           seed: int | None) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """(frame to denoise, clean frame or None): with `sigma`, Gaussian noise of one seeded
    generator is added frame after frame and the input is the clean reference."""
    rng = np.random.default_rng(seed) if sigma is not None else None
    for frame in frames:
        if rng is None:
            yield frame, None
        else:
            noise = rng.standard_normal(frame.shape).astype(np.float32)
            yield (frame + np.float32(sigma) * noise).astype(np.float32), frame


def _method_line(args: argparse.Namespace, kwargs: dict[str, Any], runtime: Runtime) -> str:
    parts = [args.method, f"sigma {args.sigma:g}"]
    if args.method == "vbm3d":
        given = {k: v for k, v in kwargs.items() if k != "aggregation"}
        s1, s2, _, radius = video_stage_params(**given)
        variant, _ = choose_video_search(runtime.profile)
        parts += [f"temporal radius {radius}", f"patch {s1.patch_size}",
                  f"step {s1.step}/{s2.step}", f"windows {s1.window_ref}/{s1.window_pred}",
                  f"q {s1.q}", f"k {s1.n}/{s2.n}", f"search {variant}"]
    elif args.method == "bm3d":
        parts.append(f"frame by frame, preset {kwargs.get('preset', 'fast')}")
    else:
        parts.append(f"video NL-means, temporal window {kwargs.get('temporal_window', 4)}")
    parts.append(f"aggregation {kwargs.get('aggregation') or 'auto'}")
    return ", ".join(parts)


def _denoised(args: argparse.Namespace, info: VideoInfo, pairs: Iterator[tuple[Any, Any]],
              kwargs: dict[str, Any], runtime: Runtime, queue: collections.deque,
              guide: tuple[dict[str, Any], Iterator[np.ndarray] | None] = ({}, None),
              ) -> Iterator[np.ndarray]:
    """The denoised frames in order; every input pair read goes into `queue` first.
    `guide`: the guide keywords and frames (`guide.video_guide`)."""
    guide_kwargs, guide_frames = guide
    if guide_frames is not None:
        guide_kwargs = {**guide_kwargs, "guide": guide_frames}
    data_range = float(info.peak) if info.bit_depth is not None else None

    def inputs() -> Iterator[np.ndarray]:
        for noisy, clean in pairs:
            queue.append((noisy, clean))
            yield noisy

    rows, cols = info.shape[:2]
    channels = 3 if info.colour else 1
    # A plan checks its parameters as it is made, before any work: usage errors. The frames
    # stream through it after that: what fails then (a frame, the device) is a failure.
    if args.method == "vbm3d":
        given = {k: v for k, v in kwargs.items() if k != "aggregation"}
        with usage_checks(ARGUMENT_ERRORS):
            p1, p2, stages, radius = video_stage_params(**given)
            plan = VBM3DPlan(runtime, rows, cols, channels, (p1, p2), stages, radius,
                             aggregation=kwargs.get("aggregation"))
        yield from plan.stream(inputs(), args.sigma, data_range=data_range, **guide_kwargs)
    elif args.method == "bm3d":      # frame by frame, copies overlapping the kernels
        # The preset's settings follow σ in 0-255 units (float videos: on that scale, as the
        # command line takes float data).
        noise = args.sigma * 255.0 / (data_range or 255.0)
        with contextlib.ExitStack() as held:
            with usage_checks(ARGUMENT_ERRORS):
                plan = held.enter_context(plan_for(runtime, rows, cols, channels, noise=noise,
                                                   **kwargs))
            yield from plan.stream(inputs(), args.sigma, data_range=data_range,
                                   **guide_kwargs)
    else:
        video = np.stack(list(inputs()))
        if guide_frames is not None:
            guide_kwargs["guide"] = np.stack(list(guide_frames))
        with usage_checks(ARGUMENT_ERRORS):  # the whole video at once: checked before work
            result = nlmeans_video(video, args.sigma, runtime=runtime, **kwargs,
                                   **guide_kwargs)
        yield from result


def denoise_video(args: argparse.Namespace, seed: int | None) -> int:
    """`clpatch denoise` when IN is a video (see the module doc). `seed`: the noise seed
    when args.add_noise is given."""
    with usage_checks():
        info, frames = open_video(args.input)
    kwargs = _options(args)
    guide = video_guide(args, info)
    clean_frames: Iterator[np.ndarray] | None = None
    if args.clean:
        with usage_checks():
            clean_info, clean_frames = open_video(args.clean)
        if (clean_info.frames, clean_info.shape) != (info.frames, info.shape):
            raise UsageError(f"the clean reference {args.clean} is {clean_info.describe()}, "
                             f"the input {info.describe()}")
    runtime = open_runtime(args.device)
    builds = runtime.programs.builds
    with contextlib.ExitStack() as files:  # on any exception the writers drop their temporaries
        writer = noisy_writer = None
        with usage_checks():  # an output the writer refuses (its kind, 16-bit, odd sizes)
            if args.output:
                writer = files.enter_context(VideoWriter(args.output, info,
                                                         overwrite=args.overwrite))
            if args.save_noisy:
                noisy_writer = files.enter_context(VideoWriter(args.save_noisy, info,
                                                               overwrite=args.overwrite))
        with Writing(args.output, args.save_noisy) as writing:
            count, seconds, squared, sigma_line = _run(args, info, frames, clean_frames, kwargs,
                                                       runtime, seed, writer, noisy_writer,
                                                       guide)
            for path, w in ((args.output, writer), (args.save_noisy, noisy_writer)):
                if w is not None:
                    w.close()
                    writing.written(path)
    _summary(args, info, kwargs, runtime, seed, writer, count, seconds, squared, builds,
             sigma_line)
    return 0


def _run(args: argparse.Namespace, info: VideoInfo, frames: Iterator[np.ndarray],
         clean_frames: Iterator[np.ndarray] | None, kwargs: dict[str, Any], runtime: Runtime,
         seed: int | None, writer: VideoWriter | None, noisy_writer: VideoWriter | None,
         guide: tuple[dict[str, Any], Any]) -> tuple[int, float, dict[str, float], str | None]:
    """Denoises, writes and measures: (frames, seconds, summed per-frame MSE and the
    largest |value| of the clean frames, "clean_peak", the --sigma auto report line)."""
    pairs = _noisy(frames, args.add_noise, seed)
    pairs, sigma_line = first_frame_sigma(args, pairs, runtime, Path(args.input).name)
    queue: collections.deque = collections.deque()
    squared = {"noisy": 0.0, "denoised": 0.0, "clean_peak": 0.0}
    count = 0
    start = time.perf_counter()
    with Progress(info.frames, f"{args.method} {Path(args.input).name}") as progress:
        for result in _denoised(args, info, pairs, kwargs, runtime, queue, guide):
            noisy, clean = queue.popleft()
            if clean_frames is not None:
                clean = next(clean_frames)
            result = np.asarray(result, np.float32).reshape(info.shape)
            if writer is not None:
                writer.write(result)
            if noisy_writer is not None:
                noisy_writer.write(noisy)
            if clean is not None:
                written = as_written(result, info)
                squared["noisy"] += float(np.mean((noisy.astype(np.float64) - clean) ** 2))
                squared["denoised"] += float(np.mean((written.astype(np.float64) - clean) ** 2))
                squared["clean_peak"] = max(squared["clean_peak"], float(np.max(np.abs(clean))))
            count += 1
            progress.update(count)
    return count, time.perf_counter() - start, squared, sigma_line


def _summary(args: argparse.Namespace, info: VideoInfo, kwargs: dict[str, Any], runtime: Runtime,
             seed: int | None, writer: VideoWriter | None, count: int, seconds: float,
             squared: dict[str, float], builds_before: int, sigma_line: str | None) -> None:
    builds = runtime.programs.builds - builds_before
    lines = [f"video:      {Path(args.input).name}: {info.describe()}"]
    if args.add_noise is not None:
        lines.append(f"noise:      added Gaussian noise, sigma {args.add_noise:g}, seed {seed} "
                     "(not clipped)" + (f"; saved to {args.save_noisy}" if args.save_noisy else ""))
    if sigma_line:
        lines.append(f"sigma:      {sigma_line}")
    lines.append(f"method:     {_method_line(args, kwargs, runtime)}")
    if args.guide is not None:
        lines.append(f"guide:      {guide_line(args)}")
    lines += [f"device:     {device_line(runtime)}",
              f"time:       {seconds:.3f} s, {count / max(seconds, 1e-9):.1f} frames/s"
              + builds_note(builds)]
    if args.add_noise is not None or args.clean:
        peak = psnr_peak(np.float32(squared["clean_peak"]), info.bit_depth)

        def db(total: float) -> float:
            return 10 * np.log10(peak ** 2 / max(total / count, 1e-300))

        against = Path(args.clean).name if args.clean else f"{Path(args.input).name} (the input)"
        before, after = db(squared["noisy"]), db(squared["denoised"])
        lines.append(f"PSNR:       noisy {before:.2f} dB -> denoised {after:.2f} dB "
                     f"({after - before:+.2f} dB over {count} frames; peak {peak:g}, "
                     f"against {against})")
    if writer is not None:
        lines.append(f"output:     {args.output} ({writer.kind}, {count} frames)")
    print("\n".join(lines))
