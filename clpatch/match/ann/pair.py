"""`AnnPair`: the filters' clustering ANN on an image (`search="ann"`), two tilings.

With one tiling a reference at a tile's edge finds candidates on one side only, where the
exact windowed search looks the same distance every way; BM3D on such groups lost about
0.1 dB more than with the better of two tilings (`clpatch.match.ann.params`: the plain
tiling and the one of origin tile // 2). `AnnPair` plans both on the same input: each
clusters its own tiles and answers only the references that lie nearer their tile's
centre in it, so the two write disjoint references of one output. It is an `AnnPlan` (the
plain tiling) to the filters: the same matcher face, its chunks holding the image rows
of both tilings.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...core.runtime import Runtime
from ..window.layout import Chunk
from .params import AnnConfig, AnnRequest, pair_origin
from .plan import AnnPlan

__all__ = ["AnnPair"]


class AnnPair(AnnPlan):
    """Two tilings of one image's ANN (origins (0, 0) and `pair_origin` of each axis), each
    reference answered by the tiling where it lies nearer its tile's centre. Where no axis
    has room for a second tiling (fewer than two tiles of the origin's), the plain tiling
    alone (`second` is None)."""

    def __init__(self, runtime: Runtime, rows: int, cols: int, channels: int,
                 request: AnnRequest, config: AnnConfig | None = None, *,
                 stagger: tuple[int, ...] = (),
                 device_output: bool = False, tile_bytes: int | None = None) -> None:
        p, t = request.patch_size, request.tile
        origin = (pair_origin(rows - p + 1, t), pair_origin(cols - p + 1, t))
        self.second = None
        if origin != (0, 0):
            self.second = AnnPlan(runtime, 1, rows, cols, channels, request, config,
                                  stagger=stagger,
                                  device_output=device_output, tile_bytes=tile_bytes,
                                  origin=origin, versus=(0, 0))
        super().__init__(runtime, 1, rows, cols, channels, request, config, stagger=stagger,
                         device_output=device_output, tile_bytes=tile_bytes,
                         versus=None if self.second is None else origin)
        if self.second is not None:
            self.reach = max(self.reach, self.second.reach)

    @property
    def scratch_sets(self) -> int:
        """Sets of clustering scratch a band takes: one per tiling."""
        return 1 if self.second is None else 2

    def chunk(self, r0: int, r1: int, g0: int, g1: int) -> Chunk:
        """Grid rows [g0, g1): the image rows of the tiles that hold them in either tiling."""
        mine = super().chunk(r0, r1, g0, g1)
        if self.second is None:
            return mine
        other = self.second.chunk(r0, r1, g0, g1)
        return dataclasses.replace(mine, y_lo=min(mine.y_lo, other.y_lo),
                                   y_hi=max(mine.y_hi, other.y_hi))

    def enqueue_chunk(self, planar: Any, chunk: Chunk, out_pos: Any, out_dist: Any, *,
                      out_rows: int, out_row0: int = 0, out_f0: int = 0,
                      wait_for: list[Any] | None = None) -> list[Any]:
        """Both tilings' launches (see `AnnPlan.enqueue_chunk`), the second's after the
        first's."""
        events = super().enqueue_chunk(planar, chunk, out_pos, out_dist, out_rows=out_rows,
                                       out_row0=out_row0, out_f0=out_f0, wait_for=wait_for)
        if self.second is not None:
            events += self.second.enqueue_chunk(planar, chunk, out_pos, out_dist,
                                                out_rows=out_rows, out_row0=out_row0,
                                                out_f0=out_f0, wait_for=events[-1:])
        return events
