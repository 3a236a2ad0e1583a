"""The Dask side of a chunked computation: one task per output chunk, reading its sub-window.

`map_pieces` builds, for every output chunk of a (T,) H, W (, C) array, a task that receives
the input chunks its sub-window overlaps (chunks smaller than the halo are fine) with the
part of each it needs, and the whole image's peak |value| (one reduction, shared by all),
and the same of the guide when there is one; the task joins the parts into the sub-window,
runs the method on it with this process's runtime and returns the core. The pieces are
joined with `dask.array.concatenate` along explicit axes; the result has the input's chunks
in time and space (channels in one chunk).

The tasks take the input's chunks as `Delayed` objects made once (`to_delayed`), not a
sliced Dask array each: Dask optimises the graph of every collection passed to a delayed
call on its own, which for 16 pieces of a 4096² image took about 0.3 s of the client's time
(the peak's reduction graph alone was optimised 16 times).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import dask
import dask.array as da
import numpy as np

from ..core.runtime import Runtime
from .pieces import Halo, Piece, pieces
from .worker import run_on_device

__all__ = ["check_dask_array", "chunk_blocks", "global_peak", "join_window", "map_pieces",
           "window_parts"]


def check_dask_array(x: Any, name: str, ndims: tuple[int, ...]) -> da.Array:
    """`x` as a Dask array of one of `ndims` dimensions, of a real dtype (TypeError /
    ValueError naming `name` otherwise). NumPy arrays are wrapped in one chunk."""
    if isinstance(x, np.ndarray):
        x = da.from_array(x, chunks=x.shape)
    if not isinstance(x, da.Array):
        raise TypeError(f"{name} must be a dask.array.Array (or a NumPy array), got {type(x).__name__}")
    if x.ndim not in ndims:
        raise ValueError(f"{name} must have {' or '.join(map(str, ndims))} dimensions, got shape {x.shape}")
    if any(np.isnan(s) for s in x.shape):
        raise ValueError(f"{name} has unknown chunk sizes; call {name}.compute_chunk_sizes() first")
    if 0 in x.shape:
        raise ValueError(f"{name} is empty (shape {x.shape})")
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)) \
            or x.dtype == np.bool_:
        raise TypeError(f"{name} must have a real dtype, got {x.dtype}")
    return x


def global_peak(x: da.Array, peak: float | None) -> Any:
    """The whole image's peak |value| as the device's conversion measures it (|float32(x)|;
    NaN when x has any): `peak` when given, else a lazy Dask scalar."""
    if peak is not None:
        return float(peak)
    return da.abs(x.astype(np.float32)).max()


def _chunk_parts(chunks: tuple[int, ...], lo: int, hi: int) -> list[tuple[int, slice]]:
    """(chunk index, slice inside the chunk) of the chunks along one axis that cover
    [lo, hi), in order."""
    parts, start = [], 0
    for index, size in enumerate(chunks):
        a, b = max(lo, start), min(hi, start + size)
        if a < b:
            parts.append((index, slice(a - start, b - start)))
        start += size
    return parts


def chunk_blocks(x: da.Array, axes: int) -> tuple[np.ndarray, tuple[tuple[int, ...], ...]]:
    """x's chunks as `Delayed` objects, one per chunk of its first `axes` axes (the axes a
    window cuts; any later one, the channels, in one chunk), and those axes' chunks: what
    `window_parts` takes. Make them once per array: each call optimises x's graph."""
    if any(len(c) > 1 for c in x.chunks[axes:]):
        x = x.rechunk({a: -1 for a in range(axes, x.ndim)})
    return x.to_delayed().reshape(x.numblocks[:axes]), x.chunks[:axes]


def window_parts(blocks: tuple[np.ndarray, tuple[tuple[int, ...], ...]],
                 window: tuple[tuple[int, int], ...]) -> Any:
    """The chunks of `blocks` (`chunk_blocks`) covering `window` ((lo, hi) per windowed
    axis), as nested lists of (chunk, slices) pairs, one nesting level per windowed axis."""
    delayed, chunks = blocks
    axes = [_chunk_parts(c, lo, hi) for c, (lo, hi) in zip(chunks, window, strict=True)]

    def nest(level: int, index: tuple[int, ...], slices: tuple[slice, ...]) -> Any:
        if level == len(axes):
            return (delayed[index], slices)
        return [nest(level + 1, index + (i,), slices + (sl,)) for i, sl in axes[level]]
    return nest(0, (), ())


def join_window(parts: Any, axis: int = 0) -> np.ndarray:
    """The sub-window from `window_parts`' nesting, the chunks computed."""
    if isinstance(parts, tuple):
        block, slices = parts
        return block[slices]
    joined = [join_window(p, axis + 1) for p in parts]
    return joined[0] if len(joined) == 1 else np.concatenate(joined, axis=axis)


def _run_piece(parts: Any, peak: Any, guide_parts: Any, piece: Piece,
               video: bool, method: Callable[..., Any], args: tuple,
               kwargs: dict[str, Any]) -> np.ndarray:
    """One task: the method on the sub-window joined from `parts` (and the guide's from
    `guide_parts`, when given), the core cut out of its result."""
    block = join_window(parts)
    guide = None if guide_parts is None else join_window(guide_parts)
    peak = float(peak)
    if not math.isfinite(peak):
        raise ValueError("image contains NaN or infinite values")
    if guide is not None:
        kwargs = {**kwargs, "guide": guide}

    def call(runtime: Runtime) -> np.ndarray:
        return method(block, *args, peak=peak, runtime=runtime, **kwargs)

    out = run_on_device(call)
    frames, rows, cols = piece.core
    return out[frames, rows, cols] if video else out[rows, cols]


def map_pieces(x: da.Array, halo: Halo, method: Callable[..., Any], args: tuple,
               kwargs: dict[str, Any], *, video: bool, peak: Any, name: str,
               guide: da.Array | None = None) -> da.Array:
    """`method(sub_window, *args, peak=peak, runtime=..., **kwargs)` over every output chunk
    of `x` ((T,) H, W (, C), channels last), joined into a float32 Dask array with x's
    chunks (channels in one chunk). With `guide` (x's shape, any chunks), each call also
    gets `guide=` the same sub-window of the guide."""
    lead = 1 if video else 0
    if guide is not None and guide.shape != x.shape:
        raise ValueError(f"guide must have the input's shape {x.shape}, got {guide.shape}")
    frames = x.shape[0] if video else 1
    frame_chunks = x.chunks[0] if video else (1,)
    rows, cols = x.shape[lead], x.shape[lead + 1]
    tail = x.shape[lead + 2:]
    token = dask.base.tokenize(x, halo, method, args, kwargs, peak, guide)
    spatial = lead + 2                   # the windowed axes: (frames,) rows, columns
    x_blocks = chunk_blocks(x, spatial)
    g_blocks = None if guide is None else chunk_blocks(guide, spatial)
    if isinstance(peak, da.Array):
        peak = peak.to_delayed().item()  # one reduction for every task
    blocks: dict[tuple[int, ...], da.Array] = {}
    row_chunks, col_chunks = x.chunks[lead], x.chunks[lead + 1]
    for piece in pieces(rows, cols, row_chunks, col_chunks, halo, frames, frame_chunks):
        window = ((piece.ya, piece.yb), (piece.xa, piece.xb))
        if video:
            window = ((piece.ta, piece.tb), *window)
        parts = window_parts(x_blocks, window)
        guide_parts = None if g_blocks is None else window_parts(g_blocks, window)
        task = dask.delayed(_run_piece, pure=True, name=f"{name}-{token}-{piece.t0}-{piece.a}-{piece.c}")(
            parts, peak, guide_parts, piece, video, method, args, kwargs)
        shape = (piece.b - piece.a, piece.d - piece.c, *tail)
        if video:
            shape = (piece.t1 - piece.t0, *shape)
        blocks[(piece.t0, piece.a, piece.c)] = da.from_delayed(task, shape, dtype=np.float32)
    # Join columns, then rows, then frames (explicit axes: a colour block's last axis is
    # its channels).
    starts = [sorted({k[i] for k in blocks}) for i in range(3)]
    planes = [da.concatenate([da.concatenate([blocks[(t, a, c)] for c in starts[2]], axis=lead + 1)
                              for a in starts[1]], axis=lead)
              for t in starts[0]]
    return da.concatenate(planes, axis=0) if video else planes[0]
