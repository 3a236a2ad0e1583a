"""The windowed search engine (Davy–Ehret §4.1): `SearchPlan`, a matcher.

A plan is made once for an input shape and a request; it keeps its built kernels and device
buffers. `run(image)` searches a whole input (NumPy or device array) and returns `Matches`;
the filters drive the same plan piece by piece through its public face: `upload` converts a
chunk of the input to planar float32 on the device, `enqueue` searches a chunk of it into
device buffers — both take `wait_for` events and return events.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np

from ..core.buffers import BufferPool, int_buffer, memory_limits
from ..core.kernels import kernel, max_group_size
from ..core.runtime import Runtime
from ..core.staging import download
from ..core.upload import Uploader, check_peak
from ..core.volumes import Volume, as_volume, check_planned, magnitude_limit
from .matches import Matches, grid_positions
from .window_config import SearchConfig, SearchRequest, choose_search
from .window_layout import (
    Chunk,
    WindowGeometry,
    launch_pieces,
    max_pairs_per_launch,
    plan_chunks,
    upload_chunk,
)


class SearchPlan:
    """A compiled windowed search for one input shape, reusable across calls.

    Inputs larger than the device's memory are processed in chunks of frames and bands of
    grid rows (`chunks`); every chunk uploads exactly the rows and frames its windows can
    reach, so results are identical to a single pass. `last_events` holds the (stage, event)
    pairs of the last `run`: upload, convert, search.
    """

    def __init__(self, runtime: Runtime, frames: int, rows: int, cols: int, channels: int,
                 request: SearchRequest, config: SearchConfig, *, temporal_window: int = 0,
                 device_output: bool = False, video: bool = False,
                 stagger: tuple[int, ...] = ()) -> None:
        """`stagger` (BM3D's): column shifts s_i of a staggered grid, one per grid row in
        turn: row i's lattice references move to max(0, x - s_i), each s_i < step, and the
        last column (x = cols - p) is always a border column of its own (the row-band
        kernels search it as their last column; the naive kernel reads a column table)."""
        self.runtime = runtime
        self.max_pairs = max_pairs_per_launch(runtime.profile.family)
        self.frames, self.rows, self.cols, self.channels = frames, rows, cols, channels
        self.request = request
        self.temporal_window = temporal_window
        self.device_output = device_output
        self.video = video
        self.half = request.window // 2
        self.reach = self.half       # rows between a reference and its farthest candidate
        p, s = request.patch_size, request.step
        self.grid_y = grid_positions(rows, p, s)
        self.grid_x = grid_positions(cols, p, s)
        self.lattice_rows = (rows - p) // s + 1
        self.lattice_cols = (cols - p) // s + 1
        self.stagger = tuple(int(v) for v in stagger) if any(stagger) else ()
        if any(not 0 <= v < s for v in self.stagger):
            raise ValueError(f"stagger shifts must lie in [0, step={s}), got {stagger}")
        self.ref_x = None
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
        self.pool = BufferPool(runtime.context)
        self.uploader = Uploader(runtime, self.pool)
        self._int_buffers: dict[tuple, Any] = {}
        self._launchers: dict[tuple, _Launcher] = {}    # templates, see `prepare`
        self.config = self._build(config)
        self.geometry = WindowGeometry(frames, rows, cols, channels, p, s, self.half,
                                       temporal_window, self.grid_y)
        largest, total = memory_limits(runtime)
        self.chunks = plan_chunks(self.geometry, len(self.grid_x), request.n, self.dim,
                                  min(largest, total // 3), device_output)

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
        program = self.runtime.programs.get("match/search.cl.mako",
                                            **self._template_params(config))
        name = {"naive": "search_naive", "square": "search_square"}.get(config.variant,
                                                                         "search_rowband")
        return kernel(program, name)

    def _build(self, config: SearchConfig) -> SearchConfig:
        """Build the kernels of `config`, shrinking work-groups the built kernel cannot take
        (registers and local memory can lower a kernel's limit below the device's)."""
        device = self.runtime.device
        while True:
            built = self._kernel_for(config)
            allowed = max_group_size(built, device)
            if config.variant == "naive":
                if config.group > allowed:
                    config = dataclasses.replace(
                        config, group=allowed,
                        reason=config.reason + f"; group cut to {allowed} by the kernel's limit")
                break
            if (config.tile ** 2 if config.variant == "square" else config.group) <= allowed:
                break
            config = self._shrink(config, allowed)
        self._main = built
        self._naive = None
        if config.variant == "naive":
            self._naive, self._naive_group = built, config.group
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

    def _ints(self, key: tuple, values: np.ndarray) -> Any:
        """A read-only int32 device buffer of `values`, made once per plan and `key`."""
        buf = self._int_buffers.get(key)
        if buf is None:
            buf = self._int_buffers[key] = int_buffer(self.runtime.context, values)
        return buf

    # ---- the matcher's face ----------------------------------------------------------------

    def chunk(self, r0: int, r1: int, g0: int, g1: int) -> Chunk:
        """The chunk of reference frames [r0, r1) and grid rows [g0, g1) (the image block
        its windows reach), for a filter that tiles the work its own way."""
        return self.geometry.chunk(r0, r1, g0, g1)

    def upload(self, volume: Volume, chunk: Chunk, name: str = "planar", *,
               staging: str = "staging", transfers: Any = None,
               wait_for: list[Any] | None = None) -> tuple[Any, list[tuple[str, Any]]]:
        """The chunk's frames and rows of all of `volume`'s channels as planar float32 in
        this plan's buffer `name`, with the (stage, event) pairs of the upload (a host
        block goes through buffer `staging`, on `transfers`' queue when given, see
        `Uploader.convert`). Values are checked by the conversion: call `uploader.begin()`
        before a run's first upload and `uploader.peak()` after its last."""
        return upload_chunk(self.pool, self.uploader, volume, chunk, name, staging=staging,
                            transfers=transfers, wait_for=wait_for)

    def enqueue(self, planar: Any, chunk: Chunk, out_pos: Any, out_dist: Any, *, out_rows: int,
                out_row0: int = 0, out_f0: int = 0,
                wait_for: list[Any] | None = None) -> list[Any]:
        """Search one chunk of `planar` (the block `upload` made for it) into the Matches
        buffers `out_pos`/`out_dist`, laid out [frame][out_rows][grid column][n][dim]; the
        chunk's first grid row goes to row `out_row0`, its first frame to `out_f0`. Returns
        the launches' events (each waits for `wait_for`)."""
        return self.prepare(planar, chunk, out_pos, out_dist, out_rows=out_rows,
                            out_row0=out_row0, out_f0=out_f0).fire(wait_for)

    def prepare(self, planar: Any, chunk: Chunk, out_pos: Any, out_dist: Any, *,
                out_rows: int, out_row0: int = 0, out_f0: int = 0) -> _Launcher:
        """The launches `enqueue` makes, computed but not enqueued: `fire(wait_for)` enqueues
        them. `run` prepares a chunk's launches before its upload, so that on a GPU the
        search follows the conversion without waiting for the host."""
        key = (planar.int_ptr, chunk, out_rows, out_row0, out_f0)
        template = self._launchers.get(key)
        if template is None or template.planar is not planar:
            # Templates of a buffer the pool has replaced would keep it alive: drop them.
            self._launchers = {k: t for k, t in self._launchers.items() if t.planar is planar}
            if len(self._launchers) >= LAUNCHERS_KEPT:
                self._launchers.clear()
            template = self._launchers[key] = _Launcher(self, planar, chunk, _OUT_POS,
                                                        _OUT_DIST, out_rows, out_row0, out_f0)
        return template.retarget(out_pos, out_dist)

    def check_limit(self) -> float:
        """The largest |value| the search's float32 distances can take."""
        return magnitude_limit(self.request.patch_size, self.channels)

    # ---- running ---------------------------------------------------------------------------

    def _results(self) -> tuple[Any, Any]:
        """Empty (positions, distances) of a run: device arrays for device output (images
        get no frame axis: the kernels write frame 0), NumPy arrays otherwise."""
        gy, gx, n, dim = len(self.grid_y), len(self.grid_x), self.request.n, self.dim
        if self.device_output:
            lead = (self.frames,) if self.video else ()
            return (self.runtime.empty((*lead, gy, gx, n, dim), np.int32),
                    self.runtime.empty((*lead, gy, gx, n), np.float32))
        return (np.empty((self.frames, gy, gx, n, dim), np.int32),
                np.empty((self.frames, gy, gx, n), np.float32))

    def run(self, image: Any, *, wait_for: list[Any] | None = None) -> Matches:
        """Search `image` (same shape as planned; NumPy in → NumPy out, device in → device out;
        a `clpatch.core.volumes.Volume` of it is taken as it is)."""
        volume = image if isinstance(image, Volume) else as_volume(image, video=self.video)
        check_planned(volume, (self.frames, self.rows, self.cols, self.channels),
                      self.device_output, self.runtime.context)
        queue = self.runtime.queue
        gy, gx, n, dim = len(self.grid_y), len(self.grid_x), self.request.n, self.dim
        events: list[tuple[str, Any]] = []
        self.uploader.begin()
        last = wait_for
        positions, distances = self._results()
        for chunk in self.chunks:
            if self.device_output:
                out_pos, out_dist = positions.data, distances.data
                out_rows, out_row0, out_f0 = gy, chunk.g0, chunk.r0
            else:
                count = (chunk.r1 - chunk.r0) * (chunk.g1 - chunk.g0) * gx * n
                out_pos = self.pool.get("out_pos", count * dim * 4)
                out_dist = self.pool.get("out_dist", count * 4)
                out_rows, out_row0, out_f0 = chunk.g1 - chunk.g0, 0, 0
            # Everything the host computes comes first: the search is enqueued right after
            # its conversion (the same pooled buffer `upload` fills).
            planar = self.pool.get("planar", (chunk.f_hi - chunk.f_lo) * self.channels
                                   * (chunk.y_hi - chunk.y_lo) * self.cols * 4)
            launches = self.prepare(planar, chunk, out_pos, out_dist, out_rows=out_rows,
                                    out_row0=out_row0, out_f0=out_f0)
            uploaded, uploads = self.upload(volume, chunk, wait_for=last)
            assert uploaded is planar
            events.extend(uploads)
            searched = launches.fire([uploads[-1][1]])
            events.extend(("search", e) for e in searched)
            last = searched
            if not self.device_output:
                shape = (chunk.r1 - chunk.r0, chunk.g1 - chunk.g0, gx, n)
                download(queue, positions[chunk.r0:chunk.r1, chunk.g0:chunk.g1], out_pos,
                         shape=(*shape, dim), wait_for=searched)
                download(queue, distances[chunk.r0:chunk.r1, chunk.g0:chunk.g1], out_dist,
                         shape=shape, wait_for=searched)
        self.last_events = events
        check_peak(self.uploader.peak(last), self.check_limit())
        if not self.video and not self.device_output:
            positions, distances = positions[0], distances[0]
        r = self.request
        grid_x = self.ref_x.copy() if self.stagger else self.grid_x.copy()
        return Matches(positions, distances, self.grid_y.copy(), grid_x, r.patch_size, r.step,
                       r.window, r.n, r.metric, self.temporal_window, self.config)


#: Launch templates a plan keeps (one per chunk and output placement in use).
LAUNCHERS_KEPT = 64
#: Stand-ins for the output buffers in a plan's launch templates (`_Launcher.retarget`).
_OUT_POS, _OUT_DIST = object(), object()


class _Launcher:
    """The launches of one chunk: the structured variant over the lattice part of its rows,
    the naive kernel over grid rows and columns off the lattice. Made with every launch's
    kernel, sizes and arguments computed (`launches`); `fire` enqueues them. A plan keeps
    one per chunk and output placement, made with stand-ins for the output buffers, and
    `retarget` gives a run's copy with its buffers (a few microseconds instead of the
    tens that computing the launches takes on a fast host)."""

    def __init__(self, plan: SearchPlan, planar: Any, chunk: Chunk, out_pos: Any, out_dist: Any,
                 out_rows: int, out_row0: int, out_f0: int) -> None:
        self.plan, self.chunk, self.planar = plan, chunk, planar
        self.out_row0, self.out_f0 = out_row0, out_f0
        i32 = np.int32
        rows = chunk.y_hi - chunk.y_lo
        nf = chunk.f_hi - chunk.f_lo
        self.common = (planar, i32(nf), i32(rows), i32(plan.cols), i32(plan.half),
                       i32(plan.temporal_window))
        self.tail = (i32(chunk.f_lo), i32(chunk.y_lo), out_pos, out_dist, i32(out_rows),
                     i32(len(plan.grid_x)))
        self.ref_frames = chunk.r1 - chunk.r0
        self.candidates = ((2 * plan.half + 1) ** 2) * (2 * plan.temporal_window + 1)
        # (kernel, global size, local size, arguments) of each launch, in order.
        self.launches: list[tuple[Any, tuple[int, ...], tuple[int, ...], tuple[Any, ...]]] = []
        self._plan_launches()

    def retarget(self, out_pos: Any, out_dist: Any) -> _Launcher:
        """A copy whose launches write to `out_pos` and `out_dist` in place of this one's
        output buffers."""
        swap = {id(self.tail[2]): out_pos, id(self.tail[3]): out_dist}
        retargeted = copy.copy(self)
        retargeted.launches = [
            (run, global_size, local_size, tuple(swap.get(id(a), a) for a in args))
            for run, global_size, local_size, args in self.launches]
        return retargeted

    def fire(self, wait_for: list[Any] | None) -> list[Any]:
        """Enqueue the launches, each after `wait_for`; their events."""
        queue = self.plan.runtime.queue
        return [run(queue, global_size, local_size, *args, wait_for=wait_for)
                for run, global_size, local_size, args in self.launches]

    def _plan_launches(self) -> None:
        plan, chunk = self.plan, self.chunk
        gx = len(plan.grid_x)
        lattice_hi = min(chunk.g1, plan.lattice_rows)
        if plan.config.variant == "naive":
            self.naive(chunk.g0, chunk.g1, 0, gx)
            return
        if chunk.g0 < lattice_hi:
            self.structured(lattice_hi)
        # Grid column off the lattice (x = W - p), for the lattice rows.
        if plan.lattice_cols < gx and not plan.stagger:
            self.naive(chunk.g0, lattice_hi, plan.lattice_cols, gx)
        # Grid row off the lattice (y = H - p), all columns.
        if chunk.g1 > plan.lattice_rows:
            self.naive(max(chunk.g0, plan.lattice_rows), chunk.g1, 0, gx)

    def naive(self, g_lo: int, g_hi: int, col_lo: int, col_hi: int) -> None:
        plan, chunk, i32 = self.plan, self.chunk, np.int32
        if g_lo >= g_hi or col_lo >= col_hi:
            return
        lw = plan._naive_group
        for f0, f1, r0, r1 in launch_pieces(self.ref_frames, g_hi - g_lo, col_hi - col_lo,
                                            self.candidates, plan.max_pairs):
            a, b = g_lo + r0, g_lo + r1
            ys = plan._ints(("ys", a, b, chunk.y_lo), plan.grid_y[a:b] - chunk.y_lo)
            if plan.stagger:   # every reference's column, rows a..b of the piece
                xs = plan._ints(("xs", a, b, col_lo, col_hi), plan.ref_x[a:b, col_lo:col_hi].ravel())
            else:
                xs = plan._ints(("x", col_lo, col_hi), plan.grid_x[col_lo:col_hi])
            global_size = (-(-(col_hi - col_lo) // lw) * lw, r1 - r0, f1 - f0)
            self.launches.append((plan._naive, global_size, (lw, 1, 1), (
                *self.common, i32(chunk.r0 - chunk.f_lo + f0), *self.tail,
                i32(self.out_row0 + g_lo - chunk.g0 + r0), i32(col_lo), i32(self.out_f0 + f0),
                ys, xs, i32(r1 - r0), i32(col_hi - col_lo))))

    def structured(self, lattice_hi: int) -> None:
        """The structured variant over the lattice rows and columns of the chunk (on a
        staggered grid, the border column too: it is the row-band kernel's last column)."""
        plan, chunk, i32 = self.plan, self.chunk, np.int32
        config, p = plan.config, plan.request.patch_size
        nx = len(plan.grid_x) if plan.stagger else plan.lattice_cols
        for f0, f1, r0, r1 in launch_pieces(self.ref_frames, lattice_hi - chunk.g0, nx,
                                            self.candidates, plan.max_pairs):
            oy = int(plan.grid_y[chunk.g0 + r0]) - chunk.y_lo
            ny = r1 - r0
            if config.variant == "square":
                t = config.tile
                global_size = (-(-nx // (t - 1)) * t, -(-ny // (t - 1)) * t, f1 - f0)
                local_size = (t, t, 1)
            else:
                shift_max = max(plan.stagger, default=0)
                per_row = (config.group - p - shift_max) // plan.request.step + 1
                global_size = (-(-nx // per_row) * config.group, -(-ny // config.rows), f1 - f0)
                local_size = (config.group, 1, 1)
            extra = ()
            if plan.stagger:
                g = chunk.g0 + r0
                extra = (plan._ints(("shifts", g, g + ny), plan.row_shifts[g:g + ny]),)
            self.launches.append((plan._main, global_size, local_size, (
                *self.common, i32(chunk.r0 - chunk.f_lo + f0), *self.tail,
                i32(self.out_row0 + r0), i32(0), i32(self.out_f0 + f0), i32(oy), i32(ny),
                i32(nx), *extra)))
