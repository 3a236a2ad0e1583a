"""`BM3DPlan`: the compiled BM3D/CBM3D (two stages of search, fused filter and aggregation)
for one image shape and parameter set; `clpatch.denoise.bm3d` describes the method."""


from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from ..core.buffers import BufferPool, halve_until_fits, int_buffer, memory_limits
from ..core.runtime import Runtime
from ..core.staging import download
from ..core.transfer import Transfers
from ..core.upload import Uploader, check_peak
from ..core.volumes import Volume, as_volume, check_planned, default_data_range
from ..match.matcher import make_matcher
from ..match.window_config import SearchConfig, SearchRequest, choose_search
from . import bm3d_stream
from .bm3d_guide import check_guide_role, guide_volume, upload_guide
from .bm3d_params import (
    StageParams,
    channel_sigmas,
    choose_aggregation,
    fixed_point_scales,
    stagger_shifts,
)
from .collaborative import FilterKernels
from .strength import Strength

__all__ = ["BM3DPlan"]

# NumPy images of at least this many bytes move through pinned memory.
PINNED_BYTES = 4 << 20
# Filter launches are split so that one launch holds at most this many work-groups.
GROUPS_PER_LAUNCH = 1 << 20


@dataclass(frozen=True)
class _Tile:
    """Output rows [a, b) and, per stage, the search chunk of the references they need."""

    a: int
    b: int
    chunks: tuple[Any, ...]


class _Stage:
    """The search plan and kernels of one stage."""

    def __init__(self, plan: BM3DPlan, params: StageParams, variant: Any) -> None:
        rt = plan.runtime
        self.params = params
        request = SearchRequest(params.patch_size, params.step, params.n, params.window, 1, "l2",
                                False)
        # (size: the rules fit the square search's tile to a small image, to fill the device)
        config = choose_search(request, rt.profile, variant, rt.tuning,
                               size=(plan.rows, plan.cols))
        shifts = stagger_shifts(params.step) if params.stagger else ()
        self.search = make_matcher(plan.search_engine, rt, 1, plan.rows, plan.cols, 1, request,
                                   config, stagger=shifts)
        self.staggered = bool(self.search.stagger)
        kernels = FilterKernels(rt, params, channels=plan.channels,
                                aggregation=plan.aggregation, colour=plan.colour,
                                stagger=self.staggered, exact_variance=params.exact_variance)
        self.filter, self.group = kernels.filter, kernels.group
        self.finalize, self.finalize_planar = kernels.finalize, kernels.finalize_planar
        self.clear, self.opponent = kernels.clear, kernels.opponent

    def rows_for(self, a: int, b: int) -> tuple[int, int]:
        """Grid rows [g0, g1) whose groups can reach output rows [a, b)."""
        p, h = self.params.patch_size, self.search.reach
        gy = self.search.grid_y
        g0 = int(np.searchsorted(gy, a - h - p + 1, side="left"))
        g1 = int(np.searchsorted(gy, b - 1 + h, side="right"))
        return g0, max(g1, g0 + 1)


class BM3DPlan:
    """A compiled BM3D/CBM3D for one image shape and parameter set, reusable across calls.

    `run(image, sigma)` denoises one image of the planned shape. Images larger than the
    device's memory are processed in bands of output rows; a band searches and filters every
    reference whose group can reach it (stage 1 for all bands, then stage 2), so each output
    pixel gathers exactly the contributions of an untiled run (bit for bit with the
    deterministic "fixed" aggregation). `last_events` holds (stage, event) pairs of the last
    run: convert, transform, search1, filter1, finalize1, search2, filter2, finalize2, clear.
    A guided run's bands count the guide's buffer (`tiles_for(True)`), so may be lower.
    """

    def __init__(self, runtime: Runtime, rows: int, cols: int, channels: int,
                 params: tuple[StageParams, StageParams], stages: int = 2, *,
                 aggregation: str | None = None, variant: str | SearchConfig | None = None,
                 device_output: bool = False, tile_bytes: int | None = None,
                 search: str = "window") -> None:
        if channels not in (1, 3):
            raise ValueError(f"BM3D filters grayscale (1 channel) or RGB (3 channels), got {channels}")
        self.search_engine = search      # checked by make_matcher
        self.runtime = runtime
        self.rows, self.cols, self.channels = rows, cols, channels
        self.colour = channels == 3
        self.device_output = device_output
        self.params = params[:stages]
        self.aggregation, self.aggregation_reason = choose_aggregation(runtime.profile, aggregation)
        self.stages = [_Stage(self, p, variant) for p in self.params]
        self.pool = BufferPool(runtime.context)
        # The guide's conversion has its own check word: its peak is never the image's.
        self.guide_uploader = Uploader(runtime, self.pool)
        # Large NumPy images move through pinned memory on a transfer queue (Transfers).
        large = rows * cols * channels * 4 >= PINNED_BYTES
        self.transfers = Transfers(runtime) if large and not device_output else None
        self.stream_downloads: dict[int, Any] = {}   # stream slot -> its last download
        self.stream_transfers: Transfers | None = None   # made by the first stream
        self._xs = [None if s.staggered else int_buffer(self.runtime.context, s.search.grid_x)
                    for s in self.stages]
        self._ys: dict[tuple[int, int, int], Any] = {}
        self._tile_budget = tile_bytes
        self.tiles = self._plan_tiles(tile_bytes)
        self._guided_tiles: list[_Tile] | None = None
        self.last_events: list[tuple[str, Any]] = []

    # ---- memory plan -----------------------------------------------------------------------

    def _tile(self, a: int, b: int) -> _Tile:
        return _Tile(a, b, tuple(s.search.chunk(0, 1, *s.rows_for(a, b)) for s in self.stages))

    def _tile_bytes(self, tile: _Tile, guided: bool = False) -> tuple[int, int]:
        """(largest buffer, all buffers) of a tile, in bytes (`guided`: with a guide's band
        and its host staging)."""
        w, ch = self.cols, self.channels
        item = 8 if self.aggregation == "fixed" else 4
        largest = whole = 0
        for stage, chunk in zip(self.stages, tile.chunks, strict=True):
            hb = chunk.y_hi - chunk.y_lo
            refs = (chunk.g1 - chunk.g0) * len(stage.search.grid_x)
            sizes = [ch * hb * w * 4,                       # planar band
                     ch * hb * w * 8,                       # host staging
                     ch * hb * w * 4,                       # basic estimate band
                     refs * stage.params.n * 12,            # positions and distances
                     ch * hb * w * 2 * item,                # numerator and denominator
                     (tile.b - tile.a) * w * ch * 4]        # output rows
            if guided:
                sizes += [ch * hb * w * 4, ch * hb * w * 8]  # guide band and its staging
            largest = max(largest, *sizes)
            whole = max(whole, sum(sizes))
        return largest, whole

    def _plan_tiles(self, tile_bytes: int | None, guided: bool = False) -> list[_Tile]:
        largest, total = memory_limits(self.runtime, tile_bytes)

        def tiles(rc: int) -> list[_Tile]:
            return [self._tile(a, min(self.rows, a + rc)) for a in range(0, self.rows, rc)]

        def fits(_: int, rc: int) -> bool:
            return all(big <= largest and whole <= total
                       for big, whole in (self._tile_bytes(t, guided) for t in tiles(rc)))

        _, rows = halve_until_fits(
            fits, 1, self.rows,
            f"one image row of this input does not fit the device's memory ({largest} bytes per "
            "buffer); reduce the image width, window or n")
        return tiles(rows)

    def tiles_for(self, guided: bool) -> list[_Tile]:
        """The bands of a run without (`tiles`) or with a guide image."""
        if not guided:
            return self.tiles
        if self._guided_tiles is None:
            self._guided_tiles = self._plan_tiles(self._tile_budget, guided=True)
        return self._guided_tiles

    # ---- running ---------------------------------------------------------------------------

    def scales(self, peak: float, sigmas: np.ndarray) -> list[tuple[float, float]]:
        """(numerator, denominator) fixed-point scales per stage: powers of two for which no
        pixel's sum can leave int64 (the weights and the contributions per pixel are bounded)."""
        if self.aggregation != "fixed":
            return [(1.0, 1.0)] * len(self.stages)
        out = []
        for stage in self.stages:
            p = stage.params
            per_axis = -(-(p.patch_size + 2 * stage.search.reach) // p.step) + 1
            if stage.staggered:     # column 0 is a reference of every row besides the lattice
                per_axis += 1
            # Stage 2 divides by mu2·σ²: its weights scale like those of a noise mu2^½·σ.
            noise = sigmas * math.sqrt(p.mu2) if p.stage == 2 else sigmas
            out.append(fixed_point_scales(p.stage, per_axis * per_axis * p.n, peak, noise,
                                          p.exact_variance))
        return out

    def run(self, image: Any, sigma: float, *, data_range: float | None = None,
            guide: Any = None, guide_role: str = "match") -> Any:
        """Denoise `image` (the planned shape): float32, same shape and kind of array.
        guide: None, or an image of `image`'s shape (any real dtype, NumPy or device array
        of either kind) that the groups are matched on; guide_role: "match" (both stages
        match on the guide) or "oracle" (the guide is the basic estimate: stage 2 only).
        `clpatch.denoise.bm3d.bm3d` describes both."""
        return self.apply(image, Strength.check(sigma, data_range=data_range), guide=guide,
                          guide_role=guide_role)

    def apply(self, image: Any, strength: Strength, *, guide: Any = None,
              guide_role: str = "match") -> Any:
        """`run` with the strength arguments checked already (`Strength.check`)."""
        role = check_guide_role(guide_role, guide is not None, len(self.stages))
        volume = as_volume(image, video=False)
        image = volume.array            # an array-like is an array from here on
        check_planned(volume, (1, self.rows, self.cols, self.channels), self.device_output,
                      self.runtime.context)
        guided = None if guide is None else guide_volume(guide, volume, self.runtime)
        tiles = self.tiles_for(guided is not None)
        # The upload measures the peak |value| (the fixed-point scales need it before any
        # filter runs): a single tile's upload is kept for both stages; a tiled image is
        # converted band by band once up front to measure it, unless the caller gave the
        # peak (checked against the measured one after the run). The guide's conversion
        # checks its values into a word of its own, read after the run.
        uploader = self.stages[0].search.uploader
        uploader.begin()
        if guided is not None:
            self.guide_uploader.begin()
        kept: dict[str, Any] = {"single": len(tiles) == 1}
        events: list[tuple[str, Any]] = []
        search = self.stages[0].search
        given = strength.peak
        if len(tiles) == 1:
            kept["noisy"] = self.upload_noisy(self.stages[0], volume, tiles[0].chunks[0],
                                               events)
            if guided is not None:
                kept["guide"] = upload_guide(self, self.stages[0], guided, tiles[0].chunks[0],
                                             events)
        elif given is None:
            for tile in tiles:
                search.upload(volume, tile.chunks[0], "peak")
        peak = uploader.peak() if given is None else given
        check_peak(peak, search.check_limit())
        data_range = strength.data_range
        if data_range is None:
            data_range = default_data_range(volume.dtype, peak)
        sigmas = channel_sigmas(strength.sigma, self.colour)
        scales = self.scales(peak, sigmas)
        tau_unit = (data_range / 255.0) ** 2

        if self.device_output:
            output = self.runtime.empty(tuple(image.shape), np.float32)
        else:
            output = np.empty(tuple(image.shape), np.float32)
        # Between the stages: the noisy band and the basic estimate stay on the device when
        # the image is one tile; with several tiles the basic estimate goes through the host.
        # The "oracle" role runs stage 2 only, on the guide as its basic estimate.
        run = [1] if role == "oracle" else list(range(len(self.stages)))
        if len(run) == 2 and len(tiles) > 1:
            kept["basic_host"] = np.empty((self.channels, self.rows, self.cols), np.float32)
        for s in run:
            last = s == len(self.stages) - 1
            for tile in tiles:
                self.run_stage(s, self.stages[s], volume, tile, sigmas, scales[s], tau_unit,
                               last, output, kept, events, guide=guided, guide_role=role)
        self.last_events = events
        if guided is not None:
            check_peak(self.guide_uploader.peak(), search.check_limit(), "guide")
        if given is not None:
            measured = uploader.peak()
            check_peak(measured, search.check_limit())
            if measured > given:
                raise ValueError(f"image values reach |x| = {measured:.6g}, above the peak "
                                 f"{given:.6g} passed")
        return output

    def stream(self, frames: Iterable[Any], sigma: float, *, data_range: float | None = None,
               peak: float | None = None, guide: Iterable[Any] | None = None,
               guide_role: str = "match") -> Iterator[np.ndarray]:
        """Denoise frames of the planned shape one at a time (a video frame by frame),
        overlapping each frame's copies with its neighbours' kernels; yields float32 frames
        in order. guide: None, or an iterable of guide frames in step with `frames` (one
        per frame, as `run`'s guide). See `clpatch.denoise.bm3d_stream.stream`."""
        return bm3d_stream.stream(self, frames, sigma, data_range=data_range, peak=peak,
                                  guide=guide, guide_role=guide_role)

    def upload_noisy(self, stage: _Stage, volume: Volume, chunk: Any,
                     events: list[tuple[str, Any]], *, staging: str = "staging",
                     transfers: Any = None) -> Any:
        """Convert the chunk of `volume` into the planar "noisy" buffer (opponent colours
        for colour), appending its events; returns the buffer."""
        planar, uploads = stage.search.upload(volume, chunk, "noisy", staging=staging,
                                              transfers=transfers or self.transfers)
        events.extend(uploads)
        if self.colour:
            hb = chunk.y_hi - chunk.y_lo
            events.append(("transform", stage.opponent(
                self.runtime.queue, (self.cols, hb, 1), None, planar, np.int32(0), np.int32(1),
                np.int32(hb),
                np.int32(self.cols), planar, np.int32(0))))
        return planar

    def run_stage(self, s: int, stage: _Stage, volume: Volume, tile: _Tile, sigmas: np.ndarray,
                  scales: tuple[float, float], tau_unit: float, last: bool, output: Any,
                  kept: dict[str, Any], events: list[tuple[str, Any]], *,
                  slot: int | None = None, guide: Volume | None = None,
                  guide_role: str = "match") -> None:
        """Enqueue stage `s` of one tile (its search, filter and finalize). `kept` carries
        the run's buffers between calls ("single": whether the run is one tile, "noisy" and
        "guide": a single tile's uploads, "basic", "basic_host"). With `guide` (the guide
        image) the groups are matched on it; with guide_role "oracle" it is also stage 2's
        basic estimate. With `slot` (a stream's frame slot) the last stage finalizes into
        buffer f"out{slot}" once its previous download (`stream_downloads[slot]`) is done,
        and leaves the download to the caller."""
        queue = self.runtime.queue
        i32, f32 = np.int32, np.float32
        p = stage.params
        chunk = tile.chunks[s]
        hb, w, ch = chunk.y_hi - chunk.y_lo, self.cols, self.channels
        gy, gx = chunk.g1 - chunk.g0, len(stage.search.grid_x)
        tag = str(p.stage)
        single = kept["single"]

        # The noisy band (and the guide's); a single tile's was uploaded by run() (and
        # serves both stages).
        if single:
            noisy = kept["noisy"]
            guide_band = kept.get("guide")
        else:
            noisy = kept["noisy"] = self.upload_noisy(stage, volume, chunk, events)
            guide_band = None if guide is None else upload_guide(self, stage, guide, chunk,
                                                                 events)
        # The basic estimate of stage 2 (its Wiener oracle): the guide in the "oracle" role,
        # else stage 1's, on the device for a single tile, else from the host.
        basic = None
        if p.stage == 2:
            if guide_role == "oracle":
                basic = guide_band
            elif single:
                basic = kept["basic"]
            else:
                basic = self.pool.get("basic_band", ch * hb * w * 4)
                cl.enqueue_copy(queue, basic, np.ascontiguousarray(
                    kept["basic_host"][:, chunk.y_lo:chunk.y_hi]))
        # The band the groups are matched on (its Y plane first): the guide, else the noisy
        # image (stage 1) or the basic estimate (stage 2).
        match_on = guide_band if guide_band is not None else basic if p.stage == 2 else noisy

        pos = self.pool.get("pos", gy * gx * p.n * 8)
        dist = self.pool.get("dist", gy * gx * p.n * 4)
        searched = stage.search.enqueue(match_on, chunk, pos, dist, out_rows=gy)
        events.extend(("search" + tag, e) for e in searched)

        item = 8 if self.aggregation == "fixed" else 4
        count = 2 * ch * hb * w
        acc = self.pool.get("acc", count * item)
        events.append(("clear", stage.clear(queue, (count,), None, acc, i32(0), i32(count))))
        ys = self._ys.get((s, chunk.g0, chunk.g1))
        if ys is None:
            ys = self._ys[(s, chunk.g0, chunk.g1)] = int_buffer(self.runtime.context,
                stage.search.grid_y[chunk.g0:chunk.g1])
        xs = self._xs[s]
        if stage.staggered:     # every reference's column, the chunk's rows
            xs = self._ys.get((-1 - s, chunk.g0, chunk.g1))
            if xs is None:
                xs = self._ys[(-1 - s, chunk.g0, chunk.g1)] = int_buffer(self.runtime.context,
                    stage.search.ref_x[chunk.g0:chunk.g1])

        if p.stage == 1:
            shrink = [p.lambda_3d * float(v) for v in sigmas]
        else:
            shrink = [p.mu2 * float(v) ** 2 for v in sigmas]
        shrink = (shrink + [0.0, 0.0])[:3]
        tau = p.tau_match * tau_unit * p.patch_size ** 2
        images = (noisy, basic) if p.stage == 2 else (noisy,)
        rows_per_launch = max(1, GROUPS_PER_LAUNCH // max(1, gx))
        for r0 in range(0, gy, rows_per_launch):
            nrows = min(gy, r0 + rows_per_launch) - r0
            events.append(("filter" + tag, stage.filter(
                queue, (stage.group, gx, nrows), (stage.group, 1, 1), *images, i32(1), i32(hb),
                i32(w), i32(0), i32(chunk.y_lo), pos, dist, i32(gy), i32(gx), ys,
                xs, i32(r0), i32(nrows), i32(0), i32(0), acc, f32(tau),
                *(f32(v) for v in shrink), f32(scales[0]), f32(scales[1]))))

        rows = tile.b - tile.a
        inv = (f32(1.0 / scales[0]), f32(1.0 / scales[1]))
        head = (acc, i32(hb), i32(w), i32(0), i32(1), i32(tile.a - chunk.y_lo), i32(rows), *inv)
        if not last:
            # The basic estimate, in the working (opponent) space.
            estimate = kept["basic"] = self.pool.get("basic", ch * rows * w * 4)
            events.append(("finalize" + tag, stage.finalize_planar(
                queue, (w, rows, 1), None, *head, estimate, i32(rows), i32(0))))
            if not single:
                download(queue, kept["basic_host"][:, tile.a:tile.b], estimate,
                         shape=(ch, rows, w))
            return
        if self.device_output:
            out, out_rows, out_y0 = output.data, self.rows, tile.a
        else:
            out = self.pool.get("out" if slot is None else f"out{slot}", rows * w * ch * 4)
            out_rows, out_y0 = rows, 0
        previous = self.stream_downloads.pop(slot, None) if slot is not None else None
        events.append(("finalize" + tag, stage.finalize(
            queue, (w, rows, 1), None, *head, out, i32(out_rows), i32(out_y0), i32(0),
            wait_for=[previous] if previous is not None else None)))
        if not self.device_output and slot is None:
            download(queue, output[tile.a:tile.b], out, shape=(rows, w, ch),
                     wait_for=[events[-1][1]], transfers=self.transfers)
