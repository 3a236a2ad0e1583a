"""The windowed search engine (Davy–Ehret §4.1): `SearchPlan`, a matcher.

A plan is made once for an input shape and a request; it keeps its built kernels and device
buffers. `run(image)` searches a whole input (NumPy or device array) and returns `Matches`;
the filters drive the same plan piece by piece through its public face: `upload` converts a
chunk of the input to planar float32 on the device, `enqueue_chunk` searches a chunk of it into
device buffers — both take `wait_for` events and return events.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ...core.buffers import int_buffer, memory_limits
from ...core.kernels import kernel, max_group_size
from ...core.runtime import Runtime
from ...core.sinks import MatchesSink
from ...core.upload import needs_conversion
from ...core.volumes import Volume, magnitude_limit
from ..matcher_plan import MatcherPlan
from ..matches import Matches, grid_positions, lattice_count
from .config import SearchConfig, SearchRequest, choose_search
from .launch import LaunchTemplate
from .layout import (
    Chunk,
    WindowGeometry,
    max_pairs_per_launch,
    plan_chunks,
    upload_chunk,
)


class SearchPlan(MatcherPlan):
    """A compiled windowed search for one input shape, reusable across calls (a
    `clpatch.core.plans.Plan`: `clpatch.make_plan("search", ...)` makes one).

    Inputs larger than the device's memory are processed in chunks of frames and bands of
    grid rows (`chunks`); every chunk uploads exactly the rows and frames its windows can
    reach, so results are identical to a single pass. `last_events` holds the (stage, event)
    pairs of the last `run`: upload, convert, search.

    `fused`: the plan's kernels also take the input check (lib/peak_check.mako), so that
    `run` on an input that needs no conversion (float32, one channel, C order, see
    `clpatch.core.upload.needs_conversion`) searches the caller's device buffer (or a plain
    copy of the host array) directly, with one launch fewer. Set when asked for
    (`fused_check`) on a single-channel input searched in one chunk; results are the same
    either way.
    """

    method = "search"

    def __init__(self, runtime: Runtime, frames: int, rows: int, cols: int, channels: int,
                 request: SearchRequest, config: SearchConfig, *, temporal_window: int = 0,
                 device_output: bool = False, video: bool = False,
                 stagger: tuple[int, ...] = (), fused_check: bool = False) -> None:
        """`stagger` (BM3D's): column shifts s_i of a staggered grid, one per grid row in
        turn: row i's lattice references move to max(0, x - s_i), each s_i < step, and the
        last column (x = cols - p) is always a border column of its own (the row-band
        kernels search it as their last column; the naive kernel reads a column table).
        `fused_check`: build kernels that can check the input themselves (`fused`), for a
        plan driven through `run` (the filters, which `upload` and `enqueue_chunk`, leave it off
        and keep their kernels as they are)."""
        super().__init__(runtime)
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
        self.lattice_rows = lattice_count(rows, p, s)[0]
        self.lattice_cols = lattice_count(cols, p, s)[0]
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
        self._int_buffers: dict[tuple, Any] = {}
        self._templates: dict[tuple, LaunchTemplate] = {}    # see `prepare`
        self._kernel_objects: dict[tuple[int, Any], Any] = {}
        self.geometry = WindowGeometry(frames, rows, cols, channels, p, s, self.half,
                                       temporal_window, self.grid_y)
        largest, total = memory_limits(runtime)
        self.chunks = plan_chunks(self.geometry, len(self.grid_x), request.n, self.dim,
                                  min(largest, total // 3), device_output)
        whole = self.geometry.chunk(0, frames, 0, len(self.grid_y))
        self.fused = bool(fused_check) and channels == 1 and self.chunks == [whole] and (
            whole.f_lo, whole.f_hi, whole.y_lo, whole.y_hi) == (0, frames, 0, rows)
        self.config = self._build(config)

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
        if self.fused:
            params["check"] = True
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
        self.main_kernel = built
        self.naive_kernel = None
        if config.variant == "naive":
            self.naive_kernel, self.naive_group = built, config.group
        elif config.variant == "square" and (self.lattice_rows < len(self.grid_y)
                                             or self.lattice_cols < len(self.grid_x)):
            # The square variant's grid rows/columns off the lattice are searched by the
            # naive kernel (the row-band kernels search their border row and column).
            border = dataclasses.replace(config, variant="naive", rows=0, tile=0, batch=0)
            self.naive_kernel = self._kernel_for(border)
            self.naive_group = max(1, min(self.runtime.profile.naive_group_size,
                                          max_group_size(self.naive_kernel, device)))
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

    def ints(self, key: tuple, values: np.ndarray) -> Any:
        """A read-only int32 device buffer of `values`, made once per plan and `key`."""
        buf = self._int_buffers.get(key)
        if buf is None:
            buf = self._int_buffers[key] = int_buffer(self.runtime.context, values)
        return buf

    def kernel_object(self, built: Any, use: Any) -> Any:
        """Another kernel object of `built` (one of this plan's kernels), one per `use`:
        launches of one kernel with different arguments each keep their own, so that from
        run to run none is set again (`LaunchTemplate`)."""
        key = (id(built), use)
        found = self._kernel_objects.get(key)
        if found is None:
            found = self._kernel_objects[key] = kernel(built.program, built.name)
        return found

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

    def enqueue_chunk(self, planar: Any, chunk: Chunk, out_pos: Any, out_dist: Any, *,
                      out_rows: int, out_row0: int = 0, out_f0: int = 0,
                      wait_for: list[Any] | None = None) -> list[Any]:
        """Search one chunk of `planar` (the block `upload` made for it) into the Matches
        buffers `out_pos`/`out_dist`, laid out [frame][out_rows][grid column][n][dim]; the
        chunk's first grid row goes to row `out_row0`, its first frame to `out_f0`. Returns
        the launches' events (each waits for `wait_for`)."""
        return self.template(chunk, out_rows, out_row0, out_f0).fire(planar, out_pos, out_dist,
                                                                     wait_for)

    def prepare(self, planar: Any, chunk: Chunk, out_pos: Any, out_dist: Any, *,
                out_rows: int, out_row0: int = 0, out_f0: int = 0) -> BoundLaunches:
        """The launches `enqueue_chunk` makes, computed but not enqueued: `fire(wait_for)` enqueues
        them."""
        return BoundLaunches(self.template(chunk, out_rows, out_row0, out_f0), planar,
                             out_pos, out_dist)

    def template(self, chunk: Chunk, out_rows: int, out_row0: int = 0,
                 out_f0: int = 0) -> LaunchTemplate:
        """The launches of `chunk` written to output row `out_row0` of `out_rows` and frame
        `out_f0`, with the run's buffers left open (`LaunchTemplate.fire`); made once per
        plan and placement (at most TEMPLATES_KEPT are kept)."""
        key = (chunk, out_rows, out_row0, out_f0)
        found = self._templates.get(key)
        if found is None:
            if len(self._templates) >= TEMPLATES_KEPT:
                self._templates.clear()
            found = self._templates[key] = LaunchTemplate(self, chunk, out_rows, out_row0,
                                                          out_f0)
        return found

    def check_limit(self) -> float:
        """The largest |value| the search's float32 distances can take."""
        return magnitude_limit(self.request.patch_size, self.channels)

    # ---- running (`run` and `enqueue`: `MatcherPlan`) --------------------------------------

    def _launch(self, volume: Volume, out: Any,
                wait_for: list[Any] | None) -> tuple[Matches, list[Any]]:
        """Enqueue the run on `volume` (its uploads, searches and, for NumPy output, copies
        back); returns the Matches and the last launches' events. The caller reads or
        defers the value check (`uploader.peak`, `defer_check`)."""
        gy, gx = len(self.grid_y), len(self.grid_x)
        lead = (self.frames,) if self.video else ()
        sink = MatchesSink(self, lead, gy, gx, self.request.n, self.dim,
                           device=self.device_output, out=out)
        events: list[tuple[str, Any]] = []
        self.uploader.begin()
        # An input already in the planar layout is searched as it is: the first launch
        # checks its values (a fused plan; then there is one chunk, the whole input).
        word = self.uploader.check_words()[1] if (self.fused
                                                 and not needs_conversion(volume)) else None
        last = wait_for
        for chunk in self.chunks:
            out_pos, out_dist, out_rows, out_row0, out_f0 = sink.target(chunk.r0, chunk.r1,
                                                                        chunk.g0, chunk.g1)
            # Everything the host computes comes first: the search is enqueued right after
            # its conversion.
            template = self.template(chunk, out_rows, out_row0, out_f0)
            if word is not None and volume.on_device:
                planar, uploads, after = volume.array.base_data, [], last
            elif word is not None:
                planar = self.pool.get("planar", int(template.count) * 4)
                uploads = self.uploader.copy_planar(volume, planar, wait_for=last)
                after = [uploads[-1][1]]
            else:
                planar, uploads = self.upload(volume, chunk, wait_for=last)
                after = [uploads[-1][1]]
            events.extend(uploads)
            searched = template.fire(planar, out_pos, out_dist, after, word)
            events.extend(("search", e) for e in searched)
            last = searched
            sink.store(chunk.r0, chunk.r1, chunk.g0, chunk.g1, (out_pos, out_dist), searched)
        self.last_events = events
        positions, distances = sink.arrays()
        r = self.request
        grid_x = self.ref_x.copy() if self.stagger else self.grid_x.copy()
        return (Matches(positions, distances, self.grid_y.copy(), grid_x, r.patch_size, r.step,
                        r.window, r.n, r.metric, self.temporal_window, self.config), last)


#: Launch templates a plan keeps (one per chunk and output placement in use).
TEMPLATES_KEPT = 64


class BoundLaunches:
    """A chunk's launches with their buffers: `fire(wait_for)` enqueues them and returns
    their events (`SearchPlan.prepare`)."""

    def __init__(self, template: LaunchTemplate, planar: Any, out_pos: Any,
                 out_dist: Any) -> None:
        self.template, self.planar = template, planar
        self.out_pos, self.out_dist = out_pos, out_dist

    def fire(self, wait_for: list[Any] | None) -> list[Any]:
        return self.template.fire(self.planar, self.out_pos, self.out_dist, wait_for)
