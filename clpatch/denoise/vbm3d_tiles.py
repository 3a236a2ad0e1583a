"""VBM3D's bands: frames too large for the device split into overlapping bands of rows
(as `BM3DPlan`'s tiles, for a video), and the device memory one band takes.

A band holds frame rows [y_lo, y_hi) of every frame in its rings and produces output rows
[a, b). From the output rows back: the last stage searches and filters every reference
whose group can reach rows [a, b) (a group's patches lie within `reach` rows of its
reference: window_ref // 2 + temporal_radius · (window_pred // 2), the drift of the
predictive search over the temporal window), reading the rows those searches reach; with
two stages, stage 1 does the same for the rows stage 2 reads, so that the basic estimate is
exact wherever stage 2 reads it. Search windows are clipped to the frame, never shifted, so
clipping them to a band that holds every row they can reach changes nothing: each output
pixel gathers exactly the contributions of an untiled run, bit for bit with the "fixed"
aggregation (integer sums, whatever their order).

Streams go through bands in chunks of frames (`chunk_frames`): a band cannot wait for the
others frame by frame without holding all of them, so each chunk of output frames is
denoised band after band from the input frames around it. Output frame t depends on input
frames t − halo ... t + halo only (`halo_frames`: 2 · temporal_radius per stage), so a
chunk's frames come out exactly as in one pass over the whole video.

A guide video matched on (guide_role "match") takes one more ring of frame slots: its runs
have their own bands (`plan_layout(plan, tile_bytes, guided=True)`), made when first needed.
The "oracle" role puts the guide in the basic estimate's ring and skips stage 1: the bands of
unguided runs hold it.

A stage on given matches (`clpatch.denoise.vbm3d_given`) may reach any row: a plan with one
has a single band of whole frames (or a DeviceResourceError when they do not fit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.buffers import memory_limits
from ..core.errors import DeviceResourceError
from ..match.matches import grid_positions
from .vbm3d_params import VideoStageParams

__all__ = ["Band", "Layout", "band_sizes", "chunk_frames", "halo_frames", "plan_bands",
           "plan_layout", "reach"]

_INT_MAX = 2 ** 31 - 1
#: Output frames per chunk of a tiled stream, in halos: a chunk of `CHUNK_HALOS` · halo
#: frames also uploads the halo on each side (1 + 2 / CHUNK_HALOS times the uploads) and
#: filters the reference frames within 3/4 of it in stage 1, 1/4 in stage 2 (two stages).
CHUNK_HALOS = 4
CHUNK_MIN = 8


@dataclass(frozen=True)
class Band:
    """Output rows [a, b) of every frame, computed from frame rows [y_lo, y_hi); `refs`:
    per stage, the rows [g0, g1) of its reference grid the band searches and filters."""

    a: int
    b: int
    y_lo: int
    y_hi: int
    refs: tuple[tuple[int, int], ...]

    @property
    def rows(self) -> int:
        return self.y_hi - self.y_lo


@dataclass(frozen=True)
class Layout:
    """The bands of one kind of run of a plan (with or without a guide ring) and what its
    shared buffers are sized for: the tallest band's rows, and per stage the most rows of
    the reference grid one band searches."""

    bands: tuple[Band, ...]
    rows: int
    refs: tuple[int, ...]
    guided: bool


def reach(params: VideoStageParams, radius: int) -> int:
    """How far (rows or columns) from its reference a candidate's top-left can lie."""
    return params.window_ref // 2 + radius * (params.window_pred // 2)


def halo_frames(radius: int, stages: int) -> int:
    """Input frames on each side of an output frame that it depends on."""
    return 2 * radius * stages


def chunk_frames(radius: int, stages: int) -> int:
    """Output frames per chunk of a stream through several bands."""
    return max(CHUNK_MIN, CHUNK_HALOS * halo_frames(radius, stages))


def _band(grids: list[tuple[VideoStageParams, np.ndarray, int]], rows: int, a: int,
          b: int) -> Band:
    """The band of output rows [a, b); `grids`: per stage (parameters, reference rows,
    reach)."""
    lo, hi = a, b
    refs: list[tuple[int, int]] = []
    y_lo, y_hi = a, b
    for p, gy, h in reversed(grids):
        # The references whose groups can reach rows [lo, hi) ...
        g0 = int(np.searchsorted(gy, lo - h - p.patch_size + 1, side="left"))
        g1 = max(int(np.searchsorted(gy, hi - 1 + h, side="right")), g0 + 1)
        refs.insert(0, (g0, g1))
        # ... and the rows their searches read (the rows the stage before must get right).
        lo, hi = max(0, int(gy[g0]) - h), min(rows, int(gy[g1 - 1]) + h + p.patch_size)
        y_lo, y_hi = min(y_lo, lo), max(y_hi, hi)
    return Band(a, b, y_lo, y_hi, tuple(refs))


def band_sizes(plan: Any, band: Band, columns: list[int] | None = None, *,
               guided: bool = False) -> dict[str, int]:
    """Bytes of each device buffer a band of `plan` (a VBM3DPlan) needs; `columns`: the
    reference columns of each stage (None: counted here); `guided`: with the ring of guide
    frames the searches run on (guide_role "match")."""
    frame = plan.channels * band.rows * plan.cols
    item = 8 if plan.aggregation == "fixed" else 4
    two = len(plan.params) == 2
    if columns is None:
        columns = [len(grid_positions(plan.cols, p.patch_size, p.step)) for p in plan.params]
    sizes = {"noisy frames": plan.slots * frame * 4,
             "basic frames": plan.slots * frame * 4 if two else 0,
             "guide frames": plan.slots * frame * 4 if guided else 0,
             "stage-1 accumulator": plan.acc_slots * frame * 2 * item,
             "stage-2 accumulator": plan.acc_slots * frame * 2 * item if two else 0,
             "upload staging": frame * 8,
             "output rows": plan.channels * (band.b - band.a) * plan.cols * 4}
    for s, (p, gx, (g0, g1)) in enumerate(zip(plan.params, columns, band.refs, strict=True)):
        sizes[f"stage-{s + 1} matches"] = (g1 - g0) * gx * p.n * 16   # (t, y, x), distance
    return sizes


def _envelope(plan: Any, bands: list[Band], columns: list[int], guided: bool) -> dict[str, int]:
    """Bytes of each device buffer of a plan going through `bands`: the buffers are shared,
    each as large as the largest band needs."""
    sized = [band_sizes(plan, band, columns, guided=guided) for band in bands]
    return {name: max(sizes[name] for sizes in sized) for name in sized[0]}


def plan_layout(plan: Any, tile_bytes: int | None, guided: bool = False) -> Layout:
    """The `Layout` of `plan_bands`."""
    bands = plan_bands(plan, tile_bytes, guided)
    refs = tuple(max(band.refs[s][1] - band.refs[s][0] for band in bands)
                 for s in range(len(plan.params)))
    return Layout(tuple(bands), max(band.rows for band in bands), refs, guided)


def plan_bands(plan: Any, tile_bytes: int | None, guided: bool = False) -> list[Band]:
    """Bands of output rows covering the frames of `plan` (a VBM3DPlan), as tall as fit the
    device's memory (or `tile_bytes`), with a ring of guide frames when `guided`: the whole
    frame when it fits, else the fewest bands of about equal height that fit (a band's
    memory grows with its height: the tallest that fits is found by bisection).
    DeviceResourceError when even bands of one output row do not fit."""
    largest, total = memory_limits(plan.runtime, tile_bytes)
    rows = plan.rows
    whole = any(plan.given)         # given matches may reach any row
    grids = [(p, grid_positions(rows, p.patch_size, p.step),
              rows if whole else reach(p, plan.radius)) for p in plan.params]
    columns = [len(grid_positions(plan.cols, p.patch_size, p.step)) for p in plan.params]

    def bands(per_band: int) -> list[Band]:
        return [_band(grids, rows, a, min(rows, a + per_band)) for a in range(0, rows, per_band)]

    def fits(per_band: int) -> bool:
        split = bands(per_band)
        sizes = _envelope(plan, split, columns, guided)
        # The kernels index the rings with 32-bit integers.
        frame = plan.channels * max(band.rows for band in split) * plan.cols
        indexable = max(plan.acc_slots * frame * 2, plan.slots * frame) <= _INT_MAX
        return indexable and max(sizes.values()) <= largest and sum(sizes.values()) <= total

    if fits(rows):
        return bands(rows)
    lo, hi = 0, rows                    # fits(lo) (0: none tried yet), not fits(hi)
    while hi - lo > 1 and not whole:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    if lo == 0:
        split = bands(1)
        sizes = _envelope(plan, split, columns, guided)
        name, big = max(sizes.items(), key=lambda kv: kv[1])
        raise DeviceResourceError(
            f"VBM3D{' with a guide' if guided else ''} on {plan.rows}x{plan.cols}x{plan.channels} "
            f"frames with temporal radius "
            f"{plan.radius} does not fit the device's memory even in bands of one output row: "
            f"such bands hold up to {max(band.rows for band in split)} rows of every frame "
            f"and need {sum(sizes.values())} bytes ({name}: {big} bytes in one buffer), more "
            f"than allowed ({total} bytes, {largest} per buffer); reduce temporal_radius, the "
            + ("frame size or k (a plan on given matches holds whole frames)" if whole else
               "frame width, window_ref, window_pred or n"))
    even = -(-rows // -(-rows // lo))   # as many bands, of equal height
    return bands(even if fits(even) else lo)
