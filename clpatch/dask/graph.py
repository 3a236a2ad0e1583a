"""The Dask side of a chunked computation: one task per output chunk, reading its sub-window.

`map_pieces` builds, for every output chunk of a (T,) H, W (, C) array, a task that receives
the chunk's sub-window of the input (a slice of the Dask array, so Dask gathers it from
every input chunk it overlaps: chunks smaller than the halo are fine) and the whole image's
peak |value| (one reduction task shared by all), and the same sub-window of the guide when
there is one, runs the method on the sub-window with this process's runtime and returns the
core. The pieces are joined with `dask.array.concatenate`
along explicit axes; the result has the input's chunks in time and space (channels in one
chunk).
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

__all__ = ["check_dask_array", "global_peak", "map_pieces"]


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


def _run_piece(block: np.ndarray, peak: Any, guide: np.ndarray | None, piece: Piece,
               video: bool, method: Callable[..., Any], args: tuple,
               kwargs: dict[str, Any]) -> np.ndarray:
    """One task: the method on the sub-window `block` (and `guide`'s, when given), the core
    cut out of its result."""
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
    colour = x.ndim == lead + 3
    if colour and len(x.chunks[-1]) > 1:
        x = x.rechunk({x.ndim - 1: -1})
    if guide is not None and guide.shape != x.shape:
        raise ValueError(f"guide must have the input's shape {x.shape}, got {guide.shape}")
    frames = x.shape[0] if video else 1
    frame_chunks = x.chunks[0] if video else (1,)
    rows, cols = x.shape[lead], x.shape[lead + 1]
    tail = x.shape[lead + 2:]
    token = dask.base.tokenize(x, halo, method, args, kwargs, peak, guide)
    blocks: dict[tuple[int, ...], da.Array] = {}
    row_chunks, col_chunks = x.chunks[lead], x.chunks[lead + 1]
    for piece in pieces(rows, cols, row_chunks, col_chunks, halo, frames, frame_chunks):
        window = (slice(piece.ya, piece.yb), slice(piece.xa, piece.xb))
        if video:
            window = (slice(piece.ta, piece.tb), *window)
        task = dask.delayed(_run_piece, pure=True, name=f"{name}-{token}-{piece.t0}-{piece.a}-{piece.c}")(
            x[window], peak, None if guide is None else guide[window], piece, video, method,
            args, kwargs)
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
