"""Exact windowed patch search (Davy–Ehret §4.1): `search_patches` and `SearchPlan`.

Semantics (fixed by the design so that every variant is checkable against NumPy):

- reference patches have their top-left corner on the grid 0, step, 2·step, … of each
  axis, plus the last valid position H − p (W − p), so borders are always covered;
- candidates are all valid patch positions whose top-left corner lies in the window of
  half-width window // 2 around the reference's, clipped to the image (the reference
  itself is a candidate); for video, in frames t − tw … t + tw, clipped to the video;
- the distance is the sum over the patch and its channels of squared (L2) or absolute
  (L1) differences;
- the result is the n candidates of smallest distance, ascending; ties resolve either way.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..core.buffers import BufferPool, halve_until_fits
from ..core.volumes import (
    CL_TYPES,
    Volume,
    as_volume,
    check_host_values,
    check_planned,
    magnitude_limit,
)
from ..core.errors import DeviceResourceError
from ..core.kernels import max_group_size
from ..core.runtime import Runtime, resolve_runtime
from .window_config import SearchConfig, SearchRequest, choose_search

METRICS = ("l2", "l1")
# The input-value check (a pyopencl reduction) of each runtime, shared by its plans.
_FINITE_CHECKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
MAX_PATCH = 32
MAX_N = 32
MAX_WINDOW = 127        # offsets are packed in 8 bits each
MAX_TEMPORAL_WINDOW = 63
# Distance evaluations (reference × candidate) per launch: keeps each launch short on slow
# devices (display watchdogs) and far from int32 index limits.
MAX_PAIRS_PER_LAUNCH = 1 << 31
# One buffer never exceeds this (int32 element indexing in the kernels).
MAX_BUFFER_BYTES = (1 << 31) - 1
_PLANS_KEPT = 16


@dataclass
class SearchResult:
    """The n nearest patches of every reference patch.

    positions: int32, (gy, gx, n, 2) as (y, x), or (T, gy, gx, n, 3) as (t, y, x) for video;
               top-left corners of the matched patches.
    distances: float32, (gy, gx, n) or (T, gy, gx, n), ascending along the last axis;
               sums of squared (l2) or absolute (l1) differences over patch and channels.
    grid_y, grid_x: int32, top-left rows / columns of the reference patches (grid_x is
               (gy, gx), one row of columns per grid row, for a plan's staggered grid).
    positions and distances are NumPy arrays for NumPy input, device arrays for device input.
    """

    positions: Any
    distances: Any
    grid_y: np.ndarray
    grid_x: np.ndarray
    patch_size: int
    step: int
    window: int
    n: int
    metric: str
    temporal_window: int
    config: SearchConfig


def grid_positions(size: int, patch_size: int, step: int) -> np.ndarray:
    """Top-left coordinates of reference patches along one axis: 0, step, …, plus size − p."""
    last = size - patch_size
    positions = list(range(0, last + 1, step))
    if positions[-1] != last:
        positions.append(last)
    return np.asarray(positions, dtype=np.int32)


def min_candidates(rows: int, cols: int, frames: int, patch_size: int, window: int,
                   temporal_window: int) -> int:
    """The fewest candidates any reference has (a corner reference in the first frame)."""
    half = window // 2
    return ((min(half, rows - patch_size) + 1) * (min(half, cols - patch_size) + 1)
            * (min(temporal_window, frames - 1) + 1))


def _check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return int(value)


def _check_params(volume: Volume, patch_size: Any, step: Any, window: Any, n: Any, metric: Any,
                  tw: int) -> tuple[int, int, int, int, str]:
    p = _check_int("patch_size", patch_size, 1, MAX_PATCH)
    s = _check_int("step", step, 1, 64)
    w = _check_int("window", window, 1, MAX_WINDOW)
    k = _check_int("n", n, 1, MAX_N)
    if not isinstance(metric, str) or metric.lower() not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if tw and not volume.video:
        raise ValueError("temporal_window > 0 needs a video input (T, H, W[, C])")
    if p > volume.rows or p > volume.cols:
        raise ValueError(f"patch_size {p} is larger than the image ({volume.rows}x{volume.cols})")
    available = min_candidates(volume.rows, volume.cols, volume.frames, p, w, tw)
    if k > available:
        raise ValueError(f"n={k} is larger than the number of candidates of a corner reference "
                         f"({available} with window={w}, patch_size={p}"
                         + (f", temporal_window={tw}" if volume.video else "") + ")")
    return p, s, w, k, metric.lower()


def search_patches(image: Any, patch_size: int = 8, step: int = 4, window: int = 21, n: int = 16,
                   metric: str = "l2", variant: str | SearchConfig | None = None,
                   temporal_window: int = 0, runtime: Runtime | None = None, *,
                   video: bool | None = None) -> SearchResult:
    """Find the `n` most similar patches of every reference patch, exactly.

    image: (H, W) or (H, W, C) NumPy or device array of any real dtype; video as
           (T, H, W[, C]) (a 3-D array is taken as video when temporal_window > 0 or video=True).
    patch_size: side p of the square patches, 1–32.   step: grid step of reference patches.
    window: side of the search window (half-width window // 2), 1–127.
    n: neighbours per reference, 1–32 (at most the candidates of a corner reference).
    metric: "l2" (sum of squared differences) or "l1" (sum of absolute differences).
    variant: None (the scheduler's choice), "naive", "convolution", "square", "column",
             or a SearchConfig forcing every knob.
    temporal_window: for video, frames t − tw … t + tw are searched.
    runtime: device to run on (default: the input's queue, else the default device).
    """
    tw = _check_int("temporal_window", temporal_window, 0, MAX_TEMPORAL_WINDOW)
    volume = as_volume(image, video=video, temporal_window=tw)
    p, s, w, k, metric = _check_params(volume, patch_size, step, window, n, metric, tw)
    rt = resolve_runtime(runtime, image)
    request = SearchRequest(p, s, k, w, volume.channels, metric, volume.video)
    config = choose_search(request, rt.profile, variant, rt.tuning)
    key = ("search", volume.frames, volume.rows, volume.cols, volume.channels, volume.video,
           volume.dtype.str, volume.on_device, request, tw, config)
    cache = rt.plan_cache()
    plan = cache.pop(key, None)
    if plan is None:
        plan = SearchPlan(rt, volume.frames, volume.rows, volume.cols, volume.channels, request,
                          config, temporal_window=tw, device_output=volume.on_device,
                          video=volume.video)
    cache[key] = plan
    _trim(cache)
    return plan.run(image)


def _trim(cache: dict) -> None:
    plans = [key for key in cache if isinstance(key, tuple) and key and key[0] == "search"]
    for key in plans[:-_PLANS_KEPT]:
        del cache[key]


@dataclass(frozen=True)
class _Chunk:
    """Reference frames [r0, r1) and grid rows [g0, g1), with the image block they need."""

    r0: int
    r1: int
    f_lo: int
    f_hi: int
    g0: int
    g1: int
    y_lo: int
    y_hi: int


class SearchPlan:
    """A compiled windowed search for one input shape, reusable across calls.

    Keeps the built kernels and device buffers; `run(image)` searches one image (or video)
    of the planned shape. Inputs larger than the device's memory are processed in chunks
    of frames and bands of grid rows; every chunk uploads exactly the rows and frames its
    windows can reach, so results are identical to a single pass.
    """

    def __init__(self, runtime: Runtime, frames: int, rows: int, cols: int, channels: int,
                 request: SearchRequest, config: SearchConfig, *, temporal_window: int = 0,
                 device_output: bool = False, video: bool = False,
                 stagger: tuple[int, ...] = ()) -> None:
        """`stagger` (internal, BM3D's): column shifts s_i of a staggered grid, one per grid
        row in turn: row i's lattice references move to max(0, x - s_i), each s_i < step,
        and the last column (x = cols - p) is always a border column of its own (the row-band
        kernels search it as their last column; the naive kernel reads a column table)."""
        self.runtime = runtime
        self.frames, self.rows, self.cols, self.channels = frames, rows, cols, channels
        self.request = request
        self.temporal_window = temporal_window
        self.device_output = device_output
        self.video = video
        self.half = request.window // 2
        p, s = request.patch_size, request.step
        self.grid_y = grid_positions(rows, p, s)
        self.grid_x = grid_positions(cols, p, s)
        self.lattice_rows = (rows - p) // s + 1
        self.lattice_cols = (cols - p) // s + 1
        self.stagger = tuple(int(v) for v in stagger) if any(stagger) else ()
        if any(not 0 <= v < s for v in self.stagger):
            raise ValueError(f"stagger shifts must lie in [0, step={s}), got {stagger}")
        if self.stagger:
            if video:
                raise ValueError("a staggered grid is for images, not video")
            self.lattice_cols = -(-(cols - p) // s)          # j * step < cols - p
            shifts = np.array(self.stagger)[np.arange(len(self.grid_y)) % len(self.stagger)]
            self.row_shifts = shifts.astype(np.int32)
            lattice = self.grid_x[:self.lattice_cols]
            self.ref_x = np.concatenate(
                [np.maximum(lattice[None, :] - shifts[:, None], 0),
                 np.broadcast_to(self.grid_x[self.lattice_cols:], (len(shifts), 1))],
                axis=1).astype(np.int32)
            if config.variant == "square":
                config = choose_search(request, runtime.profile, SearchConfig(
                    "column", source=config.source,
                    reason=config.reason + "; column instead of square: square has no "
                    "staggered grid"))
        self.dim = 3 if video else 2
        self.last_events: list[tuple[str, Any]] = []
        self._pool = BufferPool(runtime.context)
        self._convert_kernels: dict[str, Any] = {}
        self.config = self._build(config)
        self.chunks = self._plan_chunks()

    # ---- kernels -------------------------------------------------------------------------

    def _template_params(self, config: SearchConfig) -> dict[str, Any]:
        r = self.request
        params = dict(patch=r.patch_size, n=r.n, channels=r.channels, metric=r.metric,
                      table=config.table, video=self.video)
        if self.stagger:
            params["shift_max"] = max(self.stagger)
        if config.variant == "naive":
            params["variant"] = "naive"
        elif config.variant == "square":
            params.update(variant="square", tile=config.tile, batch=config.batch)
        else:
            params.update(variant="rowband", step=r.step, width=config.group, rows=config.rows,
                          batch=config.batch)
        return params

    def _kernel_for(self, config: SearchConfig) -> Any:
        program = self.runtime.programs.get("match/search.cl.mako", **self._template_params(config))
        name = {"naive": "search_naive", "square": "search_square"}.get(config.variant,
                                                                         "search_rowband")
        return cl.Kernel(program, name)

    def _build(self, config: SearchConfig) -> SearchConfig:
        """Build the kernels of `config`, shrinking work-groups the built kernel cannot take
        (registers and local memory can lower a kernel's limit below the device's)."""
        device = self.runtime.device
        while True:
            kernel = self._kernel_for(config)
            allowed = max_group_size(kernel, device)
            if config.variant == "naive":
                if config.group > allowed:
                    config = dataclasses.replace(
                        config, group=allowed,
                        reason=config.reason + f"; group cut to {allowed} by the kernel's limit")
                break
            if (config.tile ** 2 if config.variant == "square" else config.group) <= allowed:
                break
            config = self._shrink(config, allowed)
        self._main = kernel
        if config.variant == "naive":
            self._naive, self._naive_group = kernel, config.group
        elif self.lattice_rows < len(self.grid_y) or (self.lattice_cols < len(self.grid_x)
                                                      and not self.stagger):
            # Grid rows/columns off the lattice are searched by the naive kernel (a staggered
            # grid's border column is the row-band kernel's last column).
            border = dataclasses.replace(config, variant="naive", rows=0, tile=0, batch=0)
            self._naive = self._kernel_for(border)
            self._naive_group = max(1, min(self.runtime.profile.naive_group_size,
                                           max_group_size(self._naive, device)))
        return config

    def _shrink(self, config: SearchConfig, allowed: int) -> SearchConfig:
        p = self.request.patch_size
        note = f"; shrunk: the built kernel allows {allowed} work-items per group"
        if config.variant == "square" and config.tile > 2:
            tile = config.tile
            while tile * tile > allowed and tile > 2:
                tile //= 2
            if tile * tile <= allowed:
                return dataclasses.replace(config, tile=tile, reason=config.reason + note)
        if config.variant in ("convolution", "column"):
            group = config.group
            while group > allowed:
                group //= 2
            if group >= p:
                per_row = (group - p) // self.request.step + 1
                rows = 1 if config.variant == "convolution" else max(1, min(config.rows,
                                                                            group // per_row))
                return dataclasses.replace(config, group=group, rows=rows,
                                           reason=config.reason + note)
        return dataclasses.replace(config, variant="naive", group=max(1, allowed), rows=0, tile=0,
                                   batch=0,
                                   reason=config.reason + note + "; fell back to the naive search")

    # ---- memory plan -----------------------------------------------------------------------

    def _budget(self) -> int:
        profile = self.runtime.profile
        return int(min(profile.max_mem_alloc_size, MAX_BUFFER_BYTES, profile.global_mem_size // 6))

    def _chunk(self, r0: int, r1: int, g0: int, g1: int) -> _Chunk:
        tw, half, p = self.temporal_window, self.half, self.request.patch_size
        return _Chunk(r0, r1, max(0, r0 - tw), min(self.frames, r1 + tw), g0, g1,
                      max(0, int(self.grid_y[g0]) - half),
                      min(self.rows, int(self.grid_y[g1 - 1]) + half + p))

    def _plan_chunks(self) -> list[_Chunk]:
        budget = self._budget()
        gy, gx, n = len(self.grid_y), len(self.grid_x), self.request.n
        per_ref_out = n * 4 * self.dim
        if self.device_output and self.frames * gy * gx * per_ref_out > budget:
            raise DeviceResourceError(
                f"the search result ({self.frames * gy * gx * per_ref_out} bytes of positions) does "
                f"not fit one device buffer ({budget} bytes); pass a NumPy array to have the "
                "search processed in chunks")
        frames_per_chunk, rows_per_band = self.frames, gy

        tw, half, p, s = self.temporal_window, self.half, self.request.patch_size, self.request.step

        def fits(fc: int, rb: int) -> bool:
            # Size the largest chunk, an interior one: its windows reach tw frames and
            # window // 2 rows beyond it on both sides (grid rows are at most `step` apart).
            frames = min(self.frames, fc + 2 * tw)
            rows = min(self.rows, (rb - 1) * s + 2 * half + p)
            image_bytes = frames * self.channels * rows * self.cols * 4
            return image_bytes <= budget and fc * rb * gx * per_ref_out <= budget

        frames_per_chunk, rows_per_band = halve_until_fits(
            fits, frames_per_chunk, rows_per_band,
            f"one row of references of this input does not fit the device's buffers "
            f"({budget} bytes); reduce the image width or the window")
        chunks = []
        for r0 in range(0, self.frames, frames_per_chunk):
            r1 = min(self.frames, r0 + frames_per_chunk)
            for g0 in range(0, gy, rows_per_band):
                chunks.append(self._chunk(r0, r1, g0, min(gy, g0 + rows_per_band)))
        return chunks

    def _buffer(self, name: str, nbytes: int) -> Any:
        return self._pool.get(name, nbytes)

    # ---- running ---------------------------------------------------------------------------

    def run(self, image: Any) -> SearchResult:
        """Search `image` (same shape as planned; NumPy in → NumPy out, device in → device out)."""
        volume = as_volume(image, video=self.video)
        check_planned(volume, (self.frames, self.rows, self.cols, self.channels),
                      self.device_output, self.runtime.context)
        if not volume.on_device:
            check_host_values(volume, self.request.patch_size)

        queue = self.runtime.queue
        gy, gx, n, dim = len(self.grid_y), len(self.grid_x), self.request.n, self.dim
        self.last_events = []
        if self.device_output:
            positions = cla.empty(queue, (self.frames, gy, gx, n, dim), np.int32)
            distances = cla.empty(queue, (self.frames, gy, gx, n), np.float32)
        else:
            positions = np.empty((self.frames, gy, gx, n, dim), np.int32)
            distances = np.empty((self.frames, gy, gx, n), np.float32)

        for chunk in self.chunks:
            planar = self._upload(volume, chunk)
            if self.device_output:
                out_pos, out_dist = positions.data, distances.data
                out_gy, out_row0, out_f0 = gy, chunk.g0, chunk.r0
            else:
                count = (chunk.r1 - chunk.r0) * (chunk.g1 - chunk.g0) * gx * n
                out_pos = self._buffer("out_pos", count * dim * 4)
                out_dist = self._buffer("out_dist", count * 4)
                out_gy, out_row0, out_f0 = chunk.g1 - chunk.g0, 0, 0
            self._launch(planar, chunk, out_pos, out_dist, out_gy, out_row0, out_f0)
            if not self.device_output:
                shape = (chunk.r1 - chunk.r0, chunk.g1 - chunk.g0, gx, n)
                staged_pos = np.empty((*shape, dim), np.int32)
                staged_dist = np.empty(shape, np.float32)
                cl.enqueue_copy(queue, staged_pos, out_pos)
                cl.enqueue_copy(queue, staged_dist, out_dist)
                positions[chunk.r0:chunk.r1, chunk.g0:chunk.g1] = staged_pos
                distances[chunk.r0:chunk.r1, chunk.g0:chunk.g1] = staged_dist

        if not self.video:
            positions, distances = positions[0], distances[0]
        r = self.request
        grid_x = self.ref_x.copy() if self.stagger else self.grid_x.copy()
        return SearchResult(positions, distances, self.grid_y.copy(), grid_x,
                            r.patch_size, r.step, r.window, r.n, r.metric, self.temporal_window,
                            self.config)

    def _upload(self, volume: Volume, chunk: _Chunk, name: str = "planar") -> Any:
        """The chunk's frames and rows of all of `volume`'s channels as planar float32 on
        the device (buffer `name` of this plan)."""
        queue = self.runtime.queue
        frames, rows = chunk.f_hi - chunk.f_lo, chunk.y_hi - chunk.y_lo
        channels = volume.channels
        planar = self._buffer(name, frames * channels * rows * self.cols * 4)
        if volume.on_device:
            source, dtype = volume.array, volume.dtype
            sf, sy, sx, sc = volume.element_strides()
            base = volume.element_offset() + chunk.f_lo * sf + chunk.y_lo * sy
            src_buf = source.base_data
        else:
            block = volume.array if volume.video else volume.array[None]
            block = block[chunk.f_lo:chunk.f_hi, chunk.y_lo:chunk.y_hi]
            if block.dtype == np.float64 and not self.runtime.profile.fp64:
                block = block.astype(np.float32)
            block = np.ascontiguousarray(block)
            dtype = block.dtype
            sf, sy, sx = (s // dtype.itemsize for s in block.strides[:3])
            sc = 1 if block.ndim == 4 else 0
            base = 0
            src_buf = self._buffer("staging", block.nbytes)
            cl.enqueue_copy(queue, src_buf, block)
        if dtype == np.float64 and not self.runtime.profile.fp64:
            raise TypeError("float64 device arrays need a device with fp64 support")
        kernel = self._convert_kernel(dtype)
        event = kernel(queue, (self.cols, rows, frames), None, src_buf,
                       np.int64(base), np.int64(sf), np.int64(sy), np.int64(sx), np.int64(sc),
                       np.int32(frames), np.int32(rows), np.int32(self.cols),
                       np.int32(channels), planar, np.int64(0))
        self.last_events.append(("convert", event))
        if volume.on_device:
            self._check_device_values(planar, frames * channels * rows * self.cols)
        return planar

    def _convert_kernel(self, dtype: np.dtype) -> Any:
        type_name = CL_TYPES[np.dtype(dtype)]
        kernel = self._convert_kernels.get(type_name)
        if kernel is None:
            kernel = cl.Kernel(self.runtime.programs.get("lib/convert.cl.mako", src_type=type_name),
                               "to_planar")
            self._convert_kernels[type_name] = kernel
        return kernel

    def _check_device_values(self, planar: Any, count: int) -> None:
        # One reduction per runtime, shared by its plans (it is two programs to build).
        check = _FINITE_CHECKS.get(self.runtime)
        if check is None:
            from pyopencl.reduction import ReductionKernel

            check = _FINITE_CHECKS[self.runtime] = ReductionKernel(
                self.runtime.context, np.float32, neutral="0.0f", reduce_expr="fmax(a, b)",
                map_expr="isfinite(x[i]) ? fabs(x[i]) : INFINITY",
                arguments="__global const float *x")
        view = cla.Array(self.runtime.queue, (count,), np.float32, data=planar)
        peak = float(check(view).get())
        self.last_peak = peak
        limit = magnitude_limit(self.request.patch_size, self.channels)
        if not math.isfinite(peak):
            raise ValueError("image contains NaN or infinite values")
        if peak > limit:
            raise ValueError(f"image values must satisfy |x| <= {limit:.3g} so that float32 "
                             f"patch distances cannot overflow (largest |x| is {peak:.3g})")

    def _launch(self, planar: Any, chunk: _Chunk, out_pos: Any, out_dist: Any,
                out_gy: int, out_row0: int, out_f0: int) -> None:
        """Enqueue the searches of one chunk: the structured variant over the lattice part
        of its rows, the naive kernel over grid rows and columns off the lattice."""
        queue = self.runtime.queue
        i32 = np.int32
        rows = chunk.y_hi - chunk.y_lo
        nf = chunk.f_hi - chunk.f_lo
        ref_frames = chunk.r1 - chunk.r0
        common = (planar, i32(nf), i32(rows), i32(self.cols), i32(self.half),
                  i32(self.temporal_window))
        tail = (i32(chunk.f_lo), i32(chunk.y_lo), out_pos, out_dist, i32(out_gy),
                i32(len(self.grid_x)))
        config = self.config
        gx = len(self.grid_x)
        candidates = ((2 * self.half + 1) ** 2) * (2 * self.temporal_window + 1)
        p = self.request.patch_size

        def naive(g_lo: int, g_hi: int, col_lo: int, col_hi: int) -> None:
            if g_lo >= g_hi or col_lo >= col_hi:
                return
            ys = self.grid_y[g_lo:g_hi] - chunk.y_lo
            xs_buf = None if self.stagger else _int_buffer(self.runtime, self.grid_x[col_lo:col_hi])
            lw = self._naive_group
            for f0, f1, r0, r1 in self._splits(ref_frames, g_hi - g_lo, col_hi - col_lo,
                                               candidates):
                if self.stagger:   # every reference's column, rows r0..r1 of the piece
                    xs_buf = _int_buffer(self.runtime,
                                         self.ref_x[g_lo + r0:g_lo + r1, col_lo:col_hi].ravel())
                global_size = (-(-(col_hi - col_lo) // lw) * lw, r1 - r0, f1 - f0)
                event = self._naive(queue, global_size, (lw, 1, 1), *common,
                                    i32(chunk.r0 - chunk.f_lo + f0), *tail,
                                    i32(out_row0 + g_lo - chunk.g0 + r0), i32(col_lo),
                                    i32(out_f0 + f0), _int_buffer(self.runtime, ys[r0:r1]),
                                    xs_buf, i32(r1 - r0), i32(col_hi - col_lo))
                self.last_events.append(("search", event))

        lattice_hi = min(chunk.g1, self.lattice_rows)
        if config.variant == "naive":
            naive(chunk.g0, chunk.g1, 0, gx)
            return
        # Structured variants over the lattice rows and columns of this chunk (on a staggered
        # grid, the border column too: it is the row-band kernel's last column).
        if chunk.g0 < lattice_hi:
            nx = gx if self.stagger else self.lattice_cols
            for f0, f1, r0, r1 in self._splits(ref_frames, lattice_hi - chunk.g0, nx, candidates):
                oy = int(self.grid_y[chunk.g0 + r0]) - chunk.y_lo
                ny = r1 - r0
                if config.variant == "square":
                    t = config.tile
                    global_size = (-(-nx // (t - 1)) * t, -(-ny // (t - 1)) * t, f1 - f0)
                    local_size = (t, t, 1)
                else:
                    shift_max = max(self.stagger, default=0)
                    per_row = (config.group - p - shift_max) // self.request.step + 1
                    global_size = (-(-nx // per_row) * config.group, -(-ny // config.rows), f1 - f0)
                    local_size = (config.group, 1, 1)
                extra = ()
                if self.stagger:
                    g = chunk.g0 + r0
                    extra = (_int_buffer(self.runtime, self.row_shifts[g:g + ny]),)
                event = self._main(queue, global_size, local_size, *common,
                                   i32(chunk.r0 - chunk.f_lo + f0), *tail,
                                   i32(out_row0 + r0), i32(0), i32(out_f0 + f0),
                                   i32(oy), i32(ny), i32(nx), *extra)
                self.last_events.append(("search", event))
        # Grid column off the lattice (x = W - p), for the lattice rows.
        if self.lattice_cols < gx and not self.stagger:
            naive(chunk.g0, lattice_hi, self.lattice_cols, gx)
        # Grid row off the lattice (y = H - p), all columns.
        if chunk.g1 > self.lattice_rows:
            naive(max(chunk.g0, self.lattice_rows), chunk.g1, 0, gx)

    @staticmethod
    def _splits(frames: int, grid_rows: int, grid_cols: int,
                candidates: int) -> list[tuple[int, int, int, int]]:
        """(frame range, row range) pieces of a launch, each under MAX_PAIRS_PER_LAUNCH."""
        per_row = max(1, grid_cols * candidates)
        rows_per_launch = max(1, MAX_PAIRS_PER_LAUNCH // per_row)
        if frames * grid_rows <= rows_per_launch:
            return [(0, frames, 0, grid_rows)]
        frames_per_launch = max(1, rows_per_launch // grid_rows)
        if frames_per_launch > 1:
            return [(f, min(frames, f + frames_per_launch), 0, grid_rows)
                    for f in range(0, frames, frames_per_launch)]
        return [(f, f + 1, r, min(grid_rows, r + rows_per_launch))
                for f in range(frames) for r in range(0, grid_rows, rows_per_launch)]


def _int_buffer(runtime: Runtime, values: np.ndarray) -> Any:
    return cl.Buffer(runtime.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                     hostbuf=np.ascontiguousarray(values, dtype=np.int32))
