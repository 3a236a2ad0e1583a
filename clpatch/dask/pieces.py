"""Where each piece of a chunked computation reads: halos and aligned sub-windows.

A piece is one output chunk (its *core*) and the sub-window of the input it is computed
from: the core widened by the method's halo on every side, clipped to the image, with the
top-left corner moved up and left to a multiple of the method's alignment. The method runs
on the sub-window as if it were a whole image, and the core is cut out of its result.

Why the core is then exactly what one call on the whole image gives (the `Halo` of each
method is derived below):

- the sub-window starts on a multiple of the alignment, so its reference grid
  (0, step, 2·step, … of the sub-window) is the whole image's lattice shifted, with the same
  grid-row parity (BM3D's staggered rows) and the same aggregation classes (NL-means'
  "buffers");
- every reference whose result reaches the core has its whole search window inside the
  sub-window, clipped only where the image itself ends, so it finds the same candidates at
  the same distances;
- the sub-window's own border references (its last row and column, which the image has
  not) lie at least one halo from the core and touch only pixels outside it;
- the fixed-point aggregation is scaled by the whole image's peak |value| (`peak=`), so
  every pixel's sum is the same integer.

The derivation, for patch side p and a search reaching r = window // 2 pixels:

- NL-means writes a reference's estimate on its own patch only. Output rows [a, b) come from
  references in [a − p + 1, b − 1], which read rows [y − r, y + r + p − 1]: a halo of
  p − 1 + r. One more row keeps the sub-window's extra last reference (p rows above its
  bottom) off the core: halo p + r. Video adds the temporal window in frames.
- BM3D writes every patch of a reference's group, and group members lie within r of it:
  a stage needs references within p − 1 + r of the region it must get right, reading r + p
  beyond them, so a stage's halo is p + 2r (the extra reference's group stays outside too).
  Stage 2 reads the basic estimate, which stage 1 must then get right over stage 2's
  halo: two stages need p + 2·r₁ + p + 2·r₂.
- The exact search writes only its references' own matches: a halo of r + p over the grid
  rows and columns of the output block (no extra reference is kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Halo", "Piece", "align_down", "bm3d_halo", "nlmeans_halo", "pieces", "search_halo",
           "sub_window"]


@dataclass(frozen=True)
class Halo:
    """How far beyond its core a piece reads (pixels, and frames for video), and the
    alignment of a sub-window's top-left corner (pixels)."""

    pixels: int
    align: int
    frames: int = 0


@dataclass(frozen=True)
class Piece:
    """One output chunk: its core rows [a, b) and columns [c, d) (frames [t0, t1) for video),
    and the sub-window rows [ya, yb), columns [xa, xb), frames [ta, tb) it is computed from."""

    a: int
    b: int
    c: int
    d: int
    ya: int
    yb: int
    xa: int
    xb: int
    t0: int = 0
    t1: int = 1
    ta: int = 0
    tb: int = 1

    @property
    def core(self) -> tuple[slice, slice, slice]:
        """(frames, rows, columns) of the core inside the sub-window's result."""
        return (slice(self.t0 - self.ta, self.t1 - self.ta), slice(self.a - self.ya, self.b - self.ya),
                slice(self.c - self.xa, self.d - self.xa))


def align_down(value: int, align: int) -> int:
    """The largest multiple of `align` at most `value` (value >= 0)."""
    return value // align * align


def nlmeans_halo(patch_size: int, step: int, window: int, temporal_window: int = 0) -> Halo:
    """NL-means' halo (see the module doc). The alignment, step · ceil(p / step), keeps the
    "buffers" aggregation's classes (grid index mod ceil(p / step) in each axis)."""
    return Halo(patch_size + window // 2, step * math.ceil(patch_size / step), temporal_window)


def bm3d_halo(stages: list[tuple[int, int, int, int]]) -> Halo:
    """BM3D's halo for its stages, each (patch_size, step, window, stagger period) (see the
    module doc). The alignment is a common multiple of every stage's step · period, so both
    stages' grids and staggered rows line up with the whole image's."""
    pixels, align = 0, 1
    for p, step, window, period in stages:
        pixels += p + 2 * (window // 2)
        align = math.lcm(align, step * max(1, period))
    return Halo(pixels, align)


def search_halo(patch_size: int, step: int, window: int) -> Halo:
    """The exact search's halo around the grid positions of an output block."""
    return Halo(patch_size + window // 2, step)


def pieces(rows: int, cols: int, row_chunks: tuple[int, ...], col_chunks: tuple[int, ...],
           halo: Halo, frames: int = 1, frame_chunks: tuple[int, ...] = (1,)) -> list[Piece]:
    """The pieces of an image (rows × cols, frames for video) chunked as given, in C order
    of (frame chunk, row chunk, column chunk).

    Sub-windows are as wide as the largest chunk plus both halos and one alignment step
    wherever the image allows (a piece at an edge reads more on its inner side), so that a
    regular chunking gives at most two sub-window sizes per axis: every size is a plan of its
    own on the device, and few sizes keep them all cached."""
    out = []
    for t0, t1 in _spans(frame_chunks):
        ta, tb = max(0, t0 - halo.frames), min(frames, t1 + halo.frames)
        for a, b in _spans(row_chunks):
            ya, yb = sub_window(a, b, rows, max(row_chunks), halo)
            for c, d in _spans(col_chunks):
                xa, xb = sub_window(c, d, cols, max(col_chunks), halo)
                out.append(Piece(a, b, c, d, ya, yb, xa, xb, t0, t1, ta, tb))
    return out


def _spans(chunks: tuple[int, ...]) -> list[tuple[int, int]]:
    ends = [0]
    for size in chunks:
        ends.append(ends[-1] + int(size))
    return list(zip(ends[:-1], ends[1:], strict=True))


def sub_window(lo: int, hi: int, size: int, largest: int, halo: Halo) -> tuple[int, int]:
    """The sub-window of the span [lo, hi) of an axis of `size`, `largest` the longest span
    of that axis (see `pieces`): it covers [lo - halo, hi + halo) clipped to the axis,
    starts on the alignment and has the axis' common width where the axis allows."""
    span = largest + 2 * halo.pixels + halo.align       # the common width
    if span >= size:
        return 0, size
    start = align_down(min(max(0, lo - halo.pixels), size - span), halo.align)
    end = size if size - start < span + halo.align else start + span
    return start, end
