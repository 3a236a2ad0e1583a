"""The Dask side of a chunked computation: one task per output chunk, reading its sub-window.

`map_pieces` builds, for every output chunk of a (T,) H, W (, C) array, a task that receives
the input chunks its sub-window covers whole (its own chunk), the parts of the others it
reads (its halo: cut by one task per chunk, `window_parts`; chunks smaller than the halo
are fine), the whole image's peak |value| (one task per chunk and one for their maximum,
shared by all), and the same of the guide when there is one; the task joins the parts into
the sub-window, runs the method on it with this process's runtime and returns the core:
that task is the result's chunk (the result is a Dask array over the pieces' keys, with the
input's chunks in time and space and the channels in one chunk; no task joins them). On a
distributed cluster holding the input, each piece is annotated to run where its own chunk
lies (`clpatch.dask.placement`).

The graph is written directly in Dask's task specification (`dask.task_spec`: tasks whose
arguments refer to the input's chunk keys), one token per call: building it through
`dask.delayed` made Dask search every task's arguments for collections, hash them and
optimise each chunk's graph again: NL-means' graph of a 16384² image in 2048² chunks took
0.22-0.29 s to build on an H200 host, time during which no worker can start, and takes
0.01 s so.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.task_spec import List, Task, TaskRef

from ..core import hostwork
from ..core.runtime import Runtime
from .pieces import Halo, Piece, pieces
from .placement import chunk_holders, pin_pieces
from .worker import run_on_device

__all__ = ["Blocks", "check_dask_array", "chunk_blocks", "global_peak", "join_window",
           "map_pieces", "refs", "window_parts"]


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


def _keys(x: da.Array) -> np.ndarray:
    """x's chunk keys as an object array of x's block shape."""
    keys, every = np.empty(x.numblocks, object), x.__dask_keys__()
    for index in np.ndindex(*x.numblocks):
        nested = every
        for i in index:
            nested = nested[i]
        keys[index] = nested
    return keys


def global_peak(x: da.Array, peak: float | None) -> Any:
    """The whole image's peak |value| as the device's conversion measures it (|float32(x)|;
    NaN when x has any): `peak` when given, else a lazy `Delayed`, one task per chunk and
    one for their maximum."""
    if peak is not None:
        return float(peak)
    name = f"clpatch-peak-{dask.base.tokenize(x)}"
    keys = _keys(x).ravel()
    layer = {(name, i): Task((name, i), _block_peak, TaskRef(k)) for i, k in enumerate(keys)}
    layer[name] = Task(name, _largest, List(*(TaskRef((name, i)) for i in range(len(keys)))))
    return Delayed(name, HighLevelGraph.from_collections(name, layer, dependencies=[x]))


def _block_peak(block: np.ndarray) -> float:
    """|float32(block)|'s largest value (NaN if any is NaN), from the block's largest and
    smallest values: no temporary array (rounding to float32 keeps their order), slabs
    reduced in several threads (`clpatch.core.hostwork`: a 2048² float32 chunk took
    2.7 ms in one thread on an H200 host)."""
    top, bottom = (np.float32(v) for v in hostwork.extrema(block))
    return float(np.maximum(np.abs(top), np.abs(bottom)))


def _largest(values: list[float]) -> float:
    """The largest of `values`, NaN if any is NaN."""
    return float(np.max(np.asarray(values, np.float64)))


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


@dataclass(frozen=True)
class Blocks:
    """An array cut by its windowed axes (`chunk_blocks`): the array (later axes in one
    chunk), its chunk keys per block of the windowed axes, and those axes' chunks."""

    array: da.Array
    keys: np.ndarray
    chunks: tuple[tuple[int, ...], ...]


def chunk_blocks(x: da.Array, axes: int) -> Blocks:
    """x's chunks by its first `axes` axes (the axes a window cuts; any later one, the
    channels, in one chunk): what `window_parts` takes."""
    if any(len(c) > 1 for c in x.chunks[axes:]):
        x = x.rechunk({a: -1 for a in range(axes, x.ndim)})
    keys = _keys(x).reshape(x.numblocks[:axes])
    return Blocks(x, keys, x.chunks[:axes])


def _cut_borders(block: np.ndarray, cuts: tuple[tuple[slice, ...], ...]) -> tuple[np.ndarray, ...]:
    """One task per chunk: copies of the parts of `block` that other chunks' pieces read
    (copies, so that only they travel to another worker and the chunk need not stay in
    memory for them)."""
    return tuple(block[c].copy() for c in cuts)


def window_parts(blocks: Blocks, windows: list[tuple[tuple[int, int], ...]],
                 name: str) -> tuple[dict[Any, Task], list[tuple[list[Any], list[Any]]]]:
    """The tasks that cut the windows' halos out of the chunks, and for each of `windows`
    ((lo, hi) per windowed axis) its sources and layout, what `join_window` takes: the
    keys it reads, and for each its place (index per windowed axis among the window's
    parts) and selector (`source[selector]` is the part).

    A chunk the window covers whole is its own source (a piece's own chunk: the scheduler
    runs the piece where it lies). The parts of chunks a window covers only in part (its
    halo) come from one task per such chunk that cuts every part any window needs of it:
    a piece's task then depends on those few copies, not on its neighbours' whole chunks,
    which another worker would have to send it whole (on two workers that moved the
    neighbours' chunks of every piece at a boundary between them, several times the halos'
    bytes) - and one task per chunk, not per part, as Dask's cost per task is about a
    millisecond of the scheduler's time."""
    placed = []             # per window: its parts (place, chunk, slices, their key, whole)
    cuts: dict[tuple[int, ...], dict[tuple[tuple[int, int], ...], int]] = {}
    for window in windows:
        axes = [_chunk_parts(c, lo, hi) for c, (lo, hi) in zip(blocks.chunks, window, strict=True)]
        parts = []
        for place in itertools.product(*(range(len(a)) for a in axes)):
            combo = [a[i] for a, i in zip(axes, place, strict=True)]
            index = tuple(i for i, _ in combo)
            slices = tuple(sl for _, sl in combo)
            whole = all(sl == slice(0, c[i]) for (i, sl), c in zip(combo, blocks.chunks, strict=True))
            key = tuple((sl.start, sl.stop) for sl in slices)
            if not whole:
                cuts.setdefault(index, {}).setdefault(key, len(cuts[index]))
            parts.append((place, index, slices, key, whole))
        placed.append(parts)
    token = dask.base.tokenize(blocks.keys.ravel().tolist(), windows)
    layer = {(name, token, *index): Task(
        (name, token, *index), _cut_borders, TaskRef(blocks.keys[index]),
        tuple(tuple(slice(a, b) for a, b in key) for key in keys))
        for index, keys in cuts.items()}
    out = []
    for parts in placed:
        sources, layout = [], []
        for place, index, slices, key, whole in parts:
            if whole:
                sources.append(blocks.keys[index])
                layout.append((place, slices))
            else:
                sources.append((name, token, *index))
                layout.append((place, cuts[index][key]))
        out.append((sources, layout))
    return layer, out


def join_window(sources: list[Any], layout: list[Any]) -> np.ndarray:
    """The sub-window from `window_parts`' sources (computed) and layout: one array, each
    part copied into place once (large parts in several threads, `clpatch.core.hostwork`:
    joining a 2244² float32 window took 5.7 ms in one thread on an H200 host)."""
    leaves = [(place, source[selector]) for source, (place, selector)
              in zip(sources, layout, strict=True)]
    if len(leaves) == 1:
        return leaves[0][1]
    depth = len(leaves[0][0])
    # Along each windowed axis, the parts' sizes (read off the parts at index 0 elsewhere).
    sizes = [[a.shape[axis] for i, a in leaves if all(j == 0 for k, j in enumerate(i) if k != axis)]
             for axis in range(depth)]
    starts = [np.concatenate(([0], np.cumsum(s))) for s in sizes]
    first = leaves[0][1]
    out = np.empty(tuple(int(s[-1]) for s in starts) + first.shape[depth:],
                   np.result_type(*(a.dtype for _, a in leaves)))
    for place, a in leaves:
        hostwork.copy(out[tuple(slice(int(starts[k][i]), int(starts[k][i + 1]))
                                for k, i in enumerate(place))], a)
    return out


def refs(keys: list[Any]) -> List:
    """A task argument that is the values of `keys`, in order."""
    return List(*(TaskRef(k) for k in keys))


def _run_piece(sources: list[Any], peak: Any, guide_sources: Any, *, layout: list[Any],
               guide_layout: Any, piece: Piece, video: bool, method: Callable[..., Any],
               args: tuple, kwargs: dict[str, Any]) -> np.ndarray:
    """One task: the method on the sub-window joined from `sources` (and the guide's from
    `guide_sources`, when given), the core cut out of its result."""
    block = join_window(sources, layout)
    guide = None if guide_sources is None else join_window(guide_sources, guide_layout)
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
    of `x` ((T,) H, W (, C), channels last), a float32 Dask array with x's chunks (channels
    in one chunk). `peak`: a number, or a `Delayed` (`global_peak`). With `guide` (x's
    shape, any chunks), each call also gets `guide=` the same sub-window of the guide."""
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
    row_chunks, col_chunks = x.chunks[lead], x.chunks[lead + 1]
    cut = pieces(rows, cols, row_chunks, col_chunks, halo, frames, frame_chunks)
    windows = [((p.ta, p.tb),) * video + ((p.ya, p.yb), (p.xa, p.xb)) for p in cut]
    out = f"{name}-{token}"
    layer, x_parts = window_parts(x_blocks, windows, f"{name}-cut")
    g_parts: list[Any] = [(None, None)] * len(cut)
    if g_blocks is not None:
        g_layer, g_parts = window_parts(g_blocks, windows, f"{name}-cut-guide")
        layer.update(g_layer)
    depends = [x_blocks.array] + ([] if g_blocks is None else [g_blocks.array])
    if isinstance(peak, Delayed):
        depends.append(peak)
        peak = TaskRef(peak.key)
    # Each piece's task is the output chunk itself (its key is the output array's key of
    # that chunk).
    chunks = (*((frame_chunks,) if video else ()), row_chunks, col_chunks, *((c,) for c in tail))
    firsts = [dict(zip(np.cumsum((0, *c[:-1])).tolist(), range(len(c)), strict=True))
              for c in (frame_chunks, row_chunks, col_chunks)]
    own = {}                # piece key -> its own chunk's key (where it should run)
    for piece, (sources, layout), (g_sources, g_layout) in zip(cut, x_parts, g_parts, strict=True):
        index = (firsts[0][piece.t0],) * video + (firsts[1][piece.a], firsts[2][piece.c])
        key = (out, *index, *(0,) * len(tail))
        own[key] = x_blocks.keys[index]
        run = functools.partial(_run_piece, layout=layout, guide_layout=g_layout, piece=piece,
                                video=video, method=method, args=args, kwargs=kwargs)
        layer[key] = Task(key, run, refs(sources), peak,
                          None if g_sources is None else refs(g_sources))
    placed = pin_pieces(layer, own, chunk_holders(x_blocks.array))
    graph = HighLevelGraph.from_collections(out, placed, dependencies=depends)
    return da.Array(graph, out, chunks, dtype=np.float32)
