"""The exhaustive kNN on inputs larger than the device: windows of the query and bands of
the reference, searched pair by pair and merged.

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

`run_banded` searches every (window, band) pair with an ordinary plan and merges the
bands' k best by (distance, global candidate index). Each pair's distances are exact for
integer-valued inputs and direct re-scored sums otherwise, computed the same way whatever
the band, and within a band the local candidate order is the global order: the merge gives
the unbanded result, ties included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl.array as cla

from ...core.buffers import memory_limits
from ...core.runtime import Runtime
from ...core.volumes import Volume
from ..matches import Matches, grid_positions

__all__ = ["BandLayout", "band_layout", "run_banded"]


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


def _window(array: Any, rows: tuple[int, int], cols: tuple[int, int]) -> Any:
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


def run_banded(layout: BandLayout, runtime: Runtime, query: Volume, reference: Volume, *,
               patch: int, step: int, k: int, metric: str,
               search: Callable[[Any, Any, int], Matches]) -> Matches:
    """Search every (query window, reference band) pair with `search(query_window,
    reference_band, k_band)` (a two-image kNN of the same patch size, metric and step;
    k_band is k or the band's candidates, if fewer) and merge the bands' matches into the
    whole request's (device arrays for a device query)."""
    p = patch
    grid_y = grid_positions(query.rows, p, step)
    grid_x = grid_positions(query.cols, p, step)
    cand_cols = reference.cols - p + 1
    positions = np.empty((len(grid_y), len(grid_x), k, 2), np.int32)
    distances = np.empty((len(grid_y), len(grid_x), k), np.float32)
    config = None
    for g0, g1 in layout.row_blocks:
        y0, y1 = int(grid_y[g0]), int(grid_y[g1 - 1]) + p
        for c0, c1 in layout.col_blocks:
            x0, x1 = int(grid_x[c0]), int(grid_x[c1 - 1]) + p
            window = _window(query.array, (y0, y1), (x0, x1))
            found_d, found_i, found_p = [], [], []
            for a, b in layout.bands:
                if layout.band_axis == 0:
                    band = _window(reference.array, (a, b + p - 1), (0, reference.cols))
                else:
                    band = _window(reference.array, (0, reference.rows), (a, b + p - 1))
                band_candidates = (b - a) * (cand_cols if layout.band_axis == 0
                                             else reference.rows - p + 1)
                got = search(window, band, min(k, band_candidates))
                if not (np.array_equal(got.grid_y + y0, grid_y[g0:g1])
                        and np.array_equal(got.grid_x + x0, grid_x[c0:c1])):
                    raise RuntimeError("a query window's grid differs from the request's")
                config = got.config
                pos = got.positions.get() if isinstance(got.positions, cla.Array) \
                    else got.positions
                dist = got.distances.get() if isinstance(got.distances, cla.Array) \
                    else got.distances
                pos = pos.copy()
                pos[..., layout.band_axis] += a
                found_p.append(pos)
                found_d.append(dist)
                found_i.append(pos[..., 0].astype(np.int64) * cand_cols + pos[..., 1])
            d = np.concatenate(found_d, axis=-1)
            order = np.lexsort((np.concatenate(found_i, axis=-1), d), axis=-1)[..., :k]
            positions[g0:g1, c0:c1] = np.take_along_axis(
                np.concatenate(found_p, axis=-2), order[..., None], axis=-2)
            distances[g0:g1, c0:c1] = np.take_along_axis(d, order, axis=-1)
    if query.on_device:
        out_p = runtime.empty(positions.shape, np.int32)
        out_d = runtime.empty(distances.shape, np.float32)
        out_p.set(positions, queue=runtime.queue)
        out_d.set(distances, queue=runtime.queue)
        positions, distances = out_p, out_d
    return Matches(positions, distances, grid_y, grid_x, p, step, 0, k, metric, 0, config)
