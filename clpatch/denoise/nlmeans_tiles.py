"""The memory plan of `NLMeansPlan`: tiles of reference frames and output rows whose
buffers fit the device, and the buffers one tile needs.

A tile of output rows searches and averages every reference patch that touches them, so
each output pixel gathers exactly the contributions of an untiled run, in the same order:
any tiling gives the same result. A guided run (`guide=`) holds the guide's block beside
the image's, so it is planned with those buffers counted (`plan_tiles(..., guided=True)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.buffers import halve_until_fits, memory_limits

__all__ = ["PIPELINE_BANDS", "PIPELINE_BYTES", "VIDEO_FRAMES_PER_TILE", "Tile", "plan_tiles",
           "reference_frames", "run_tiles", "tile_bytes", "tile_for"]

#: Reference frames per tile of a video: device memory is bounded by this, not by T.
VIDEO_FRAMES_PER_TILE = 8
#: NumPy images of at least this many bytes are denoised in PIPELINE_BANDS bands (at least) so
#: that a band's upload and the previous band's download overlap the kernels (Transfers).
PIPELINE_BYTES = 8 << 20
PIPELINE_BANDS = 4


@dataclass(frozen=True)
class Tile:
    """Reference frames [r0, r1) and output rows [a, b), with the search chunk they need."""

    r0: int
    r1: int
    a: int
    b: int
    chunk: Any


def reference_frames(plan: Any) -> tuple[int, int]:
    """The frames `plan` denoises: [lo, hi) (one frame for a burst's `reference`)."""
    if plan.reference is None:
        return 0, plan.frames
    return plan.reference, plan.reference + 1


def tile_for(plan: Any, r0: int, r1: int, a: int, b: int) -> Tile:
    """The tile of reference frames [r0, r1) and output rows [a, b) of `plan`."""
    p = plan.patch_size
    g0 = int(np.searchsorted(plan.grid_y + p, a, side="right"))
    g1 = int(np.searchsorted(plan.grid_y, b, side="left"))
    return Tile(r0, r1, a, b, plan.search.chunk(r0, r1, g0, g1))


def tile_bytes(plan: Any, tile: Tile, guided: bool = False) -> tuple[int, int]:
    """(largest buffer, all buffers) in bytes of one tile of `plan` (with a guide's block
    and its host staging when `guided`)."""
    c = tile.chunk
    nf, hb, w, ch = c.f_hi - c.f_lo, c.y_hi - c.y_lo, plan.cols, plan.channels
    nr = tile.r1 - tile.r0
    refs = nr * (c.g1 - c.g0) * len(plan.grid_x)
    acc_item = {"buffers": 4 * plan.classes ** 2, "fixed": 8, "cas": 4}[plan.aggregation]
    band = nf * ch * hb * w
    sizes = [band * 4,                                   # planar band
             band * 8,                                   # host staging (up to 8-byte items)
             nf * hb * w * 4 if plan.luma else 0,        # luminance band
             refs * plan.n * 4 * (plan.search.dim + 1),  # positions and distances
             nr * ch * hb * w * acc_item,                # accumulators
             0 if plan.device_output else nr * (tile.b - tile.a) * w * ch * 4,
             band * 4 if guided else 0,                  # the guide's planar band
             band * 8 if guided else 0]                  # and its host staging
    return max(sizes), sum(sizes)


def plan_tiles(plan: Any, tile_bytes_limit: int | None, frames_per_tile: int,
               rows_per_tile: int, *, guided: bool = False) -> list[Tile]:
    """The tiles of `plan` whose buffers fit the device (or `tile_bytes_limit`): at most
    `frames_per_tile` reference frames and `rows_per_tile` output rows each, halved (frames
    first) until they fit; DeviceResourceError when not even one image row fits."""
    largest, total = memory_limits(plan.runtime, tile_bytes_limit)
    lo, hi = reference_frames(plan)

    def tiles(fc: int, rc: int) -> list[Tile]:
        return [tile_for(plan, r0, min(hi, r0 + fc), a, min(plan.rows, a + rc))
                for r0 in range(lo, hi, fc) for a in range(0, plan.rows, rc)]

    def fits(fc: int, rc: int) -> bool:
        return all(big <= largest and whole <= total
                   for big, whole in (tile_bytes(plan, t, guided) for t in tiles(fc, rc)))

    return tiles(*halve_until_fits(
        fits, frames_per_tile, rows_per_tile,
        f"one image row of this input does not fit the device's memory "
        f"({largest} bytes per buffer); reduce the image width, window or n"))


def run_tiles(plan: Any, guided: bool) -> list[Tile]:
    """The tiles of a run of `plan` without or with a guide: a video's reference frames a few
    at a time (VIDEO_FRAMES_PER_TILE, or its temporal window's), a pipelined image's rows in
    at least PIPELINE_BANDS bands, within the plan's memory budget."""
    frames_per_tile = plan.frames if plan.reference is None else 1
    if plan.video and plan.reference is None:
        frames_per_tile = min(plan.frames,
                              max(VIDEO_FRAMES_PER_TILE, 2 * plan.temporal_window + 1))
    rows_per_tile = -(-plan.rows // PIPELINE_BANDS) if plan.pipelined else plan.rows
    return plan_tiles(plan, plan.tile_bytes, frames_per_tile, rows_per_tile, guided=guided)
