"""`VBM3DPlan.stream`'s generators: frames (and guide frames) read one at a time, through
one band (`one_band`) or, for frames too large for the device, by chunks of frames band
after band (`chunks`, see `clpatch.denoise.vbm3d_tiles`)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyopencl.array as cla

from ..core.volumes import as_volume, magnitude_limit
from .strength import Strength
from .vbm3d_pass import BandPass, FrameRef, VideoSettings
from .vbm3d_tiles import Layout, halo_frames

__all__ = ["chunks", "guide_iterator", "one_band"]

_END = object()      # what next() gives for an ended iterator


def guide_iterator(guide: Any) -> Iterator[Any]:
    """The guide frames of a stream as an iterator; TypeError naming guide otherwise."""
    try:
        return iter(guide)
    except TypeError:
        raise TypeError("guide must be an iterable of guide frames (in step with frames), "
                        f"got {type(guide).__name__}") from None


def _frame_array(plan: Any, frame: Any, index: int, what: str = "frame") -> np.ndarray:
    if isinstance(frame, cla.Array):
        frame = frame.get()
    frame = np.asarray(frame)
    shape = (plan.rows, plan.cols) if plan.channels == 1 else (plan.rows, plan.cols, 3)
    if frame.shape != shape and not (plan.channels == 1 and frame.shape == shape + (1,)):
        raise ValueError(f"{what} {index} has shape {frame.shape}, expected {shape}")
    if frame.dtype.kind not in "uif":
        raise TypeError(f"{what} {index} must have a real numeric dtype, got {frame.dtype}")
    return frame


def _guide_frame(plan: Any, guides: Iterator[Any] | None, index: int) -> np.ndarray | None:
    """Guide frame `index` (None without a guide); ValueError when the guide ended."""
    if guides is None:
        return None
    found = next(guides, _END)
    if found is _END:
        raise ValueError(f"guide ended after {index} frames, before frames did")
    return _frame_array(plan, found, index, "guide frame")


def _end_guide(guides: Iterator[Any] | None, count: int) -> None:
    """ValueError when the guide has more frames than the `count` frames."""
    if guides is not None and next(guides, _END) is not _END:
        raise ValueError(f"guide has more frames than frames ({count})")


def _frame_ref(plan: Any, frame: np.ndarray) -> FrameRef:
    block = frame.reshape(1, plan.rows, plan.cols, plan.channels)
    return FrameRef(as_volume(block, name="frame", video=True), 0)


def _top(frame: np.ndarray) -> float:
    """The largest |value| of a host frame (NaN when it holds one)."""
    return max(abs(float(np.min(frame))), abs(float(np.max(frame))))


def _check_frame(plan: Any, top: float, index: int, bound: float | None, limit: float,
                 what: str = "frame") -> None:
    """Frame `index`'s largest |value| `top` (NaN/inf when it held any) against the
    float32 limit and the peak the fixed-point scales assume (`bound`; None for guide
    frames, which the scales never see)."""
    if not math.isfinite(top):
        raise ValueError(f"{what} {index} contains NaN or infinite values")
    if top > limit:
        raise ValueError(f"{what} {index}: values must satisfy |x| <= {limit:.3g} so that "
                         f"float32 patch distances cannot overflow (largest |x| is {top:.3g})")
    if bound is not None and plan.aggregation == "fixed" and top > bound:
        raise ValueError(f"frame {index} has values up to {top:.6g}, beyond the assumed peak "
                         f"{bound:.6g} (4 x data_range); pass peak= (or data_range=) "
                         "to VBM3DPlan.stream")


def one_band(plan: Any, frames: Iterator[Any], strength: Strength, peak: float | None,
             guides: Iterator[Any] | None, role: str | None,
             layout: Layout) -> Iterator[np.ndarray]:
    """The stream of frames that are one band: each frame (and guide frame) is uploaded and
    its values checked by the conversion kernel, and every output it completes yielded.

    The checks do not wait: each frame's check word is read behind its conversion
    (`Plan.defer_check`) and judged before the next output is yielded. An output is read
    back after every frame it depends on was converted, so a frame that fails its check
    raises its ValueError before any output it reaches is yielded (up to the temporal
    radius of frames after it is read), and the device is never idle waiting for a check
    (before, each frame's upload waited for its check word)."""
    events: list[tuple[str, Any]] = []
    plan.last_events = events
    limit = magnitude_limit(plan.params[0].patch_size, 1)
    plan.checks.wait(plan.runtime.queue)        # (an earlier run's, judged first)
    band_pass = None
    count = 0
    for frame in frames:
        frame = _frame_array(plan, frame, count)
        guide = _guide_frame(plan, guides, count)
        if band_pass is None:
            settings = plan.settings(strength, peak, frame.dtype, frame)
            band_pass = BandPass(plan, layout.bands[0], settings, events, layout=layout,
                                 role=role)
        plan.uploader.begin()
        band_pass.upload(_frame_ref(plan, frame))
        plan.defer_check(None, lambda top, i=count, bound=settings.bound: _check_frame(
            plan, top, i, bound, limit))
        if guide is not None:
            plan.uploader.begin()
            band_pass.put_guide(_frame_ref(plan, guide), count)
            plan.defer_check(None, lambda top, i=count: _check_frame(plan, top, i, None, limit,
                                                                      "guide frame"))
        count += 1
        for _, out in band_pass.advance(False):
            plan.checks.poll()
            yield out
    if band_pass is None:
        raise ValueError("frames is empty: VBM3D needs at least one frame")
    _end_guide(guides, count)
    for _, out in band_pass.advance(True):
        plan.checks.poll()
        yield out
    plan.checks.wait(plan.runtime.queue)
    if not plan.keep_events:
        plan.last_events = []


def chunks(plan: Any, frames: Iterator[Any], strength: Strength, peak: float | None,
           guides: Iterator[Any] | None, role: str | None,
           layout: Layout) -> Iterator[np.ndarray]:
    """The stream of frames in several bands: chunks of `plan.chunk_frames` output frames,
    each denoised band after band from the input frames within the halo around it
    (`clpatch.denoise.vbm3d_tiles`); input (and guide) frames are held on the host until
    no chunk needs them. Frame values are checked on the host as they arrive."""
    events: list[tuple[str, Any]] = []
    plan.last_events = events
    limit = magnitude_limit(plan.params[0].patch_size, 1)
    halo, size = halo_frames(plan.radius, len(plan.stages)), max(1, plan.chunk_frames)
    held: list[tuple[np.ndarray, np.ndarray | None]] = []    # frames first, first + 1, ...
    first = start = count = 0           # start: the next chunk's first output frame
    settings = None
    for frame in frames:
        frame = np.array(_frame_array(plan, frame, count))     # a copy: frames are held
        guide = _guide_frame(plan, guides, count)
        if settings is None:
            settings = plan.settings(strength, peak, frame.dtype, frame)
        _check_frame(plan, _top(frame), count, settings.bound, limit)
        if guide is not None:
            guide = np.array(guide)
            _check_frame(plan, _top(guide), count, None, limit, "guide frame")
        held.append((frame, guide))
        count += 1
        if count == start + size + halo:
            yield from _chunk(plan, held, first, start, start + size, count, settings,
                              events, role, layout, end=False)
            start += size
            drop = max(0, start - halo) - first
            del held[:drop]
            first += drop
    if settings is None:
        raise ValueError("frames is empty: VBM3D needs at least one frame")
    _end_guide(guides, count)
    if start < count:
        yield from _chunk(plan, held, first, start, count, count, settings, events, role,
                          layout, end=True)
    if not plan.keep_events:
        plan.last_events = []


def _chunk(plan: Any, held: list[tuple[np.ndarray, np.ndarray | None]], first: int, t0: int,
           t1: int, f1: int, settings: VideoSettings, events: list, role: str | None,
           layout: Layout, *, end: bool) -> Iterator[np.ndarray]:
    """Output frames [t0, t1) from input frames [t0 - halo, f1) (`held` from `first`:
    (frame, guide frame) pairs; `end`: f1 is the end of the video), band by band."""
    f0 = max(0, t0 - halo_frames(plan.radius, len(plan.stages)))
    shape = (plan.rows, plan.cols) if plan.channels == 1 else (plan.rows, plan.cols, 3)
    out = np.empty((t1 - t0, *shape), np.float32)
    for band in layout.bands:
        rows = out[:, band.a:band.b]
        band_pass = BandPass(plan, band, settings, events, wanted=range(t0 - f0, t1 - f0),
                             target=lambda t, rows=rows: rows[t - (t0 - f0)],
                             layout=layout, role=role)
        for f in range(f0, f1):
            frame, guide = held[f - first]
            band_pass.upload(_frame_ref(plan, frame),
                             None if guide is None else _frame_ref(plan, guide))
            for _ in band_pass.advance(False):
                pass
        if end:
            for _ in band_pass.advance(True):
                pass
    yield from out
