"""The exhaustive kNN on inputs larger than the device: windows of the query and bands of
the reference, searched pair by pair and merged (`clpatch.match.knn.banded`).

`KnnPlan` keeps both images on the device and cuts only the query grid into blocks of grid
rows (for its heaps). When an image alone is larger than the device's budget, or one grid
row's heaps are (`knn_vectors` on millions of vectors: its query image is one grid row),
`band_layout` cuts

- the query into windows of whole grid lines (rows, and columns where one grid row is too
  large): a window starting at grid row g0 has the same grid as the global one there,
  because the global grid is 0, step, 2·step, … plus the last position;
- the reference into bands of candidate lines (rows; columns for a one-row reference),
  consecutive bands overlapping by p − 1 pixels so that every candidate lies in exactly
  one band.

Each (window, band) pair's distances are exact for integer-valued inputs and direct
re-scored sums otherwise, computed the same way whatever the band, and within a band the
local candidate order is the global order: merging the bands' k best by (distance, global
candidate index) gives the unbanded result, ties included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyopencl.array as cla

from ...core.buffers import memory_limits
from ...core.runtime import Runtime
from ...core.volumes import Volume
from ..matches import grid_positions

__all__ = ["BandLayout", "band_layout", "window_view"]


@dataclass(frozen=True)
class BandLayout:
    """Query windows as (grid row range, grid column range) pairs and reference bands as
    candidate line ranges along `band_axis` (0: rows, 1: columns)."""

    row_blocks: tuple[tuple[int, int], ...]
    col_blocks: tuple[tuple[int, int], ...]
    band_axis: int
    bands: tuple[tuple[int, int], ...]

    @property
    def pairs(self) -> int:
        return len(self.row_blocks) * len(self.col_blocks) * len(self.bands)


def _ranges(count: int, size: int) -> tuple[tuple[int, int], ...]:
    size = max(1, size)
    return tuple((a, min(count, a + size)) for a in range(0, count, size))


def band_layout(runtime: Runtime, query: Volume, reference: Volume, *, patch: int,
                step: int, heap_bytes: int) -> BandLayout | None:
    """How to cut a request that does not fit the device (None when it fits as a whole).

    Budget (from `memory_limits`: the allocation limit and half the device memory, or the
    runtime's `memory_limit`): a planar float32 image, query window or reference band, takes
    at most a quarter of it (and one buffer), a window's heaps one grid row at least of a
    quarter (`heap_bytes`: heap and result bytes per query patch)."""
    largest, total = memory_limits(runtime)
    image_budget = min(largest, total // 4)
    channels, p = query.channels, patch
    grid_y = grid_positions(query.rows, p, step)
    grid_x = grid_positions(query.cols, p, step)

    def image_bytes(rows: int, cols: int) -> int:
        return 4 * channels * rows * cols

    # Query windows: grid columns per window so that one grid row's heaps fit, then grid
    # rows per window so that the window's pixels fit.
    cols_per = len(grid_x)
    if len(grid_x) * heap_bytes > min(largest, total // 4):
        cols_per = max(1, min(largest, total // 4) // heap_bytes)
    width = min(query.cols, (cols_per - 1) * step + p)
    rows_per = len(grid_y)
    while rows_per > 1 and image_bytes(min(query.rows, (rows_per - 1) * step + p),
                                       width) > image_budget:
        rows_per = max(1, min(rows_per - 1, rows_per // 2 + 1))
    # Reference bands: candidate lines per band.
    cand_rows, cand_cols = reference.rows - p + 1, reference.cols - p + 1
    axis = 0 if cand_rows > 1 else 1
    lines, across = (cand_rows, reference.cols) if axis == 0 else (cand_cols, reference.rows)
    per_band = lines
    if image_bytes(lines + p - 1, across) > image_budget:
        per_band = max(1, image_budget // max(1, 4 * channels * across) - (p - 1))
    if (cols_per >= len(grid_x) and rows_per >= len(grid_y) and per_band >= lines):
        return None
    return BandLayout(_ranges(len(grid_y), rows_per), _ranges(len(grid_x), cols_per), axis,
                      _ranges(lines, per_band))


def window_view(array: Any, rows: tuple[int, int], cols: tuple[int, int]) -> Any:
    """Rows [r0, r1) and columns [c0, c1) of an (H, W) or (H, W, C) image, as a view
    (device arrays too: the conversion reads any strides)."""
    (r0, r1), (c0, c1) = rows, cols
    if isinstance(array, cla.Array) and array.shape[0] == 1 and (c0, c1) != (0, array.shape[1]):
        # One row: a contiguous run of the flattened row.
        flat = array.reshape(array.shape[1:])[c0:c1]
        return flat.reshape((1, c1 - c0, *array.shape[2:]))
    if (c0, c1) == (0, array.shape[1]):
        return array[r0:r1]
    return array[r0:r1, c0:c1]
