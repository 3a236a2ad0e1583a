"""The exact windowed search on a Dask array chunked in space.

The result is a `Matches` whose positions and distances are Dask arrays over the whole
image's reference grid (grid_y × grid_x, the same grid one call of `clpatch.search_patches`
has), chunked by the input's chunks: grid row g belongs to the row chunk holding grid_y[g].
Each block searches its references in a sub-window reaching window // 2 + patch_size
pixels beyond them (`clpatch.dask.pieces.search_halo`), so every reference sees the same
candidates as in one call, and positions are in the whole image's coordinates.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.highlevelgraph import HighLevelGraph
from dask.task_spec import Task, TaskRef

from ..core.runtime import Runtime
from ..core.validate import k_or_n
from ..match.matches import Matches, grid_positions
from ..match.window.params import check_fits, check_search_request
from ..match.window.search import search_patches as search_image
from .graph import check_dask_array, chunk_blocks, join_window, refs, window_parts
from .pieces import search_halo, sub_window
from .worker import run_on_device

__all__ = ["search_patches"]


def _spans(chunks: tuple[int, ...], grid: np.ndarray) -> list[tuple[int, int]]:
    """Per chunk of pixels, the [g0, g1) of grid positions inside it (non-empty only)."""
    ends = np.cumsum((0, *chunks))
    cuts = np.searchsorted(grid, ends)
    return [(int(g0), int(g1)) for g0, g1 in zip(cuts[:-1], cuts[1:], strict=True) if g1 > g0]


def _run_search(sources: list[Any], *, layout: list[Any], ya: int, xa: int, ys: np.ndarray,
                xs: np.ndarray, kwargs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """One task: search the sub-window joined from the input chunks' `sources` and `layout`
    (`window_parts`; top-left at (ya, xa) in the image) and keep the references at rows `ys`
    and columns `xs` (image coordinates)."""
    block = join_window(sources, layout)

    def call(runtime: Runtime) -> Matches:
        return search_image(block, runtime=runtime, **kwargs)

    found = run_on_device(call)
    iy = np.searchsorted(found.grid_y, ys - ya)
    ix = np.searchsorted(found.grid_x, xs - xa)
    positions = found.positions[iy][:, ix] + np.array([ya, xa], np.int32)
    return positions, found.distances[iy][:, ix]


def search_patches(image: Any, patch_size: int = 8, step: int = 4, window: int = 21, k: int = 16,
                   metric: str = "l2", *, n: int | None = None) -> Matches:
    """`clpatch.search_patches` on a Dask array (H, W) or (H, W, C) chunked in space.

    Returns `Matches` with lazy Dask arrays: positions int32 (gy, gx, k, 2) in the image's
    coordinates and distances float32 (gy, gx, k), equal to one in-memory call's; `config`
    is None (each worker's scheduler chooses its own variant: the results do not depend on
    it). Images only (no video). `n` is the deprecated name of `k`.
    """
    n = k_or_n(k, n, 16, "clpatch.dask.search_patches")
    x = check_dask_array(image, "image", (2, 3))
    channels = x.shape[2] if x.ndim == 3 else 1
    if x.ndim == 3 and len(x.chunks[2]) > 1:
        x = x.rechunk({2: -1})
    request = check_search_request(patch_size=patch_size, step=step, n=n, window=window,
                                   channels=channels, metric=metric)
    rows, cols = x.shape[:2]
    available = check_fits(request, 1, rows, cols, 0)
    if request.n > available:
        raise ValueError(f"k={request.n} is larger than the number of candidates of a corner "
                         f"reference ({available} with window={request.window}, "
                         f"patch_size={request.patch_size})")
    p, s = request.patch_size, request.step
    grid_y, grid_x = grid_positions(rows, p, s), grid_positions(cols, p, s)
    halo = search_halo(p, s, request.window)
    kwargs = dict(patch_size=p, step=s, window=request.window, k=request.n, metric=request.metric)
    token = dask.base.tokenize(x, kwargs)
    row_spans, col_spans = _spans(x.chunks[0], grid_y), _spans(x.chunks[1], grid_x)

    def extent(grid: np.ndarray, spans: list[tuple[int, int]]) -> int:
        return max(int(grid[g1 - 1]) + 1 - int(grid[g0]) for g0, g1 in spans)

    # Sub-windows by the pieces' rule, over the pixel extent of each block's references.
    tall, wide = extent(grid_y, row_spans), extent(grid_x, col_spans)
    blocks = chunk_blocks(x, 2)
    spans = [((gi, g0, g1), (hi, h0, h1)) for gi, (g0, g1) in enumerate(row_spans)
             for hi, (h0, h1) in enumerate(col_spans)]
    windows = [(sub_window(int(grid_y[g0]), int(grid_y[g1 - 1]) + 1, rows, tall, halo),
                sub_window(int(grid_x[h0]), int(grid_x[h1 - 1]) + 1, cols, wide, halo))
               for (_, g0, g1), (_, h0, h1) in spans]
    name = f"clpatch-search-{token}"
    layer, parts = window_parts(blocks, windows, f"{name}-cut")
    # One task per block, and one per output array picking its half of the block's result.
    for ((gi, g0, g1), (hi, h0, h1)), ((ya, _), (xa, _)), (sources, layout) in zip(
            spans, windows, parts, strict=True):
        run = functools.partial(_run_search, layout=layout, ya=ya, xa=xa, ys=grid_y[g0:g1],
                                xs=grid_x[h0:h1], kwargs=kwargs)
        layer[name, gi, hi] = Task((name, gi, hi), run, refs(sources))
        for half, tail in ((0, (0, 0)), (1, (0,))):
            key = (f"{name}-{half}", gi, hi, *tail)
            layer[key] = Task(key, operator.getitem, TaskRef((name, gi, hi)), half)
    # (One graph for both arrays, each a layer of its own name in Dask's eyes: a plain dict.)
    graph = dict(HighLevelGraph.from_collections(name, layer, dependencies=[blocks.array]))
    grid_chunks = (tuple(g1 - g0 for g0, g1 in row_spans), tuple(h1 - h0 for h0, h1 in col_spans))
    positions = da.Array(graph, f"{name}-0", (*grid_chunks, (request.n,), (2,)), dtype=np.int32)
    distances = da.Array(graph, f"{name}-1", (*grid_chunks, (request.n,)), dtype=np.float32)
    return Matches(positions, distances,
                   grid_y, grid_x, p, s, request.window, request.n, request.metric, 0, None)
