"""`BM3DPlan`: the compiled BM3D/CBM3D (two stages of search, fused filter and aggregation)
for one image shape and parameter set; `clpatch.denoise.bm3d` describes the method."""


from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyopencl as cl

from ..core.buffers import int_buffer
from ..core.plans import Plan, check_out
from ..core.runtime import Runtime
from ..core.staging import download
from ..core.transfer import Transfers
from ..core.upload import Uploader, check_peak
from ..core.volumes import Volume, as_volume, check_planned, default_data_range
from ..match.window.config import SearchConfig
from . import bm3d_stream
from .bm3d_guide import check_guide_role, guide_volume, upload_guide
from .bm3d_params import (
    StageParams,
    channel_sigmas,
    choose_aggregation,
    fixed_point_scales,
)
from .bm3d_stage import Stage, Tile, plan_tiles
from .given import stage_label
from .peaks import peak_judge
from .strength import Strength

__all__ = ["BM3DPlan"]

# NumPy images of at least this many bytes move through pinned memory.
PINNED_BYTES = 4 << 20
# Filter launches are split so that one launch holds at most this many work-groups.
GROUPS_PER_LAUNCH = 1 << 20


class BM3DPlan(Plan):
    """A compiled BM3D/CBM3D for one image shape and parameter set, reusable across calls (a
    `clpatch.core.plans.Plan`: `clpatch.make_plan("bm3d", ...)` makes one, its strength and
    guide role fixed in `strength` and `guide_role`).

    `run(image, sigma)` denoises one image of the planned shape. Images larger than the
    device's memory are processed in bands of output rows; a band searches and filters every
    reference whose group can reach it (stage 1 for all bands, then stage 2), so each output
    pixel gathers exactly the contributions of an untiled run (bit for bit with the
    deterministic "fixed" aggregation). `last_events` holds (stage, event) pairs of the last
    run: convert, transform, search1, filter1, finalize1, search2, filter2, finalize2, clear.
    A guided run's bands count the guide's buffer (`tiles_for(True)`), so may be lower.
    """

    method = "bm3d"
    input_names = ("image", "guide")

    def __init__(self, runtime: Runtime, rows: int, cols: int, channels: int,
                 params: tuple[StageParams, StageParams], stages: int = 2, *,
                 aggregation: str | None = None, variant: str | SearchConfig | None = None,
                 device_output: bool = False, tile_bytes: int | None = None,
                 search: str = "window", given: tuple[bool, bool] = (False, False)) -> None:
        """`given`: the stages whose groups come from matches the caller gives
        (`use_matches`) instead of engine `search`."""
        if channels not in (1, 3):
            raise ValueError(f"BM3D filters grayscale (1 channel) or RGB (3 channels), got {channels}")
        self.search_engine = search      # checked by make_matcher
        super().__init__(runtime)
        #: The strength and guide role of `enqueue` (`clpatch.make_plan` sets them).
        self.strength: Strength | None = None
        self.guide_role = "match"
        self.rows, self.cols, self.channels = rows, cols, channels
        self.colour = channels == 3
        self.device_output = device_output
        self.params = params[:stages]
        self.aggregation, self.aggregation_reason = choose_aggregation(runtime.profile, aggregation)
        self.stages = [Stage(self, p, variant, g)
                       for p, g in zip(self.params, given[:stages], strict=True)]
        self.uploader = self.stages[0].search.uploader      # the image's check
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
        self.tiles = plan_tiles(self, tile_bytes)
        self._guided_tiles: list[Tile] | None = None

    # ---- memory plan (`clpatch.denoise.bm3d_stage`) ----------------------------------------

    def tiles_for(self, guided: bool) -> list[Tile]:
        """The bands of a run without (`tiles`) or with a guide image."""
        if not guided:
            return self.tiles
        if self._guided_tiles is None:
            self._guided_tiles = plan_tiles(self, self._tile_budget, guided=True)
        return self._guided_tiles

    def use_matches(self, matches: tuple[Any, Any]) -> None:
        """Set the given matches of the stages planned for them (`given`), checked
        (`clpatch.match.given.GivenMatcher.use`)."""
        for s, (stage, m) in enumerate(zip(self.stages, matches[:len(self.stages)], strict=True)):
            if stage.given:
                stage.search.use(m, stage_label(matches, s))

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
        check_planned(volume, (1, self.rows, self.cols, self.channels), self.device_output,
                      self.runtime.context)
        guided = None if guide is None else guide_volume(guide, volume, self.runtime)
        output = self._launch(volume, strength, guided, role, None)
        limit = self.stages[0].search.check_limit()
        if guided is not None:
            check_peak(self.guide_uploader.peak(), limit, "guide")
        if strength.peak is not None:
            self._judge(strength.peak)(self.uploader.peak())
        return output

    @property
    def waits_for_peak(self) -> bool:
        """Whether `enqueue` waits for the image's peak |value| (it then reads it before
        the filters): when no peak was given and the fixed-point aggregation or a float
        image's default data range needs it (`clpatch.make_plan` sets `strength`)."""
        strength, dtype = self.strength, self.input_dtype
        if strength is None or strength.peak is not None:
            return False
        float_range = strength.data_range is None and (dtype is None or dtype.kind == "f")
        return self.aggregation == "fixed" or float_range

    def enqueue_arrays(self, image: Any, guide: Any = None, *, out: Any,
                       wait_for: list[Any] | None) -> tuple[Any, list[Any]]:
        """The plan's `enqueue` (`clpatch.core.plans.Plan`) with its `strength` and
        `guide_role`: the denoised device image (in `out` when given), the value checks
        deferred (see `waits_for_peak` for when it waits)."""
        strength = self.planned_strength()
        volume = as_volume(image, video=False)
        guided = None if guide is None else guide_volume(guide, volume, self.runtime)
        output = self._launch(volume, strength, guided, self.guide_role, out)
        last = [self.last_events[-1][1]]
        limit = self.stages[0].search.check_limit()
        if guided is not None:
            self.defer_check(last, limit, "guide", uploader=self.guide_uploader)
        if strength.peak is not None:
            self.defer_check(last, self._judge(strength.peak))
        return output, last

    def _judge(self, given: float | None) -> Any:
        """The check of a run's measured peak (`clpatch.denoise.peaks.peak_judge`)."""
        limit = self.stages[0].search.check_limit()
        return peak_judge(lambda peak: check_peak(peak, limit), given)

    def _launch(self, volume: Volume, strength: Strength, guided: Volume | None, role: str,
                out: Any) -> Any:
        """Enqueue a run (for NumPy output, and copy it back); returns the output. Without
        a given peak it first waits for the image's; the caller reads or defers the other
        checks."""
        image = volume.array            # an array-like is an array from here on
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

        if out is not None:
            output = check_out(out, tuple(image.shape), np.float32, self.runtime.context)
        elif self.device_output:
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
        return output

    def stream(self, frames: Iterable[Any], sigma: float | None = None, *,
               data_range: float | None = None, peak: float | None = None,
               guide: Iterable[Any] | None = None,
               guide_role: str | None = None) -> Iterator[Any]:
        """Denoise frames of the planned shape one at a time (a video frame by frame),
        overlapping each frame's copies with its neighbours' kernels; yields float32 frames
        in order. guide: None, or an iterable of guide frames in step with `frames` (one
        per frame, as `run`'s guide). See `clpatch.denoise.bm3d_stream.stream`. With no
        sigma, the frames of a plan of `clpatch.make_plan` (its strength) go through
        `Plan.stream` (NumPy or device frames)."""
        if sigma is None:
            if self.strength is None or guide is not None:
                raise TypeError("stream needs sigma (a plan of clpatch.make_plan takes "
                                "frames alone)")
            return Plan.stream(self, frames)
        return bm3d_stream.stream(self, frames, sigma, data_range=data_range, peak=peak,
                                  guide=guide, guide_role=guide_role or "match")

    def upload_noisy(self, stage: Stage, volume: Volume, chunk: Any,
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

    def run_stage(self, s: int, stage: Stage, volume: Volume, tile: Tile, sigmas: np.ndarray,
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
        searched = stage.search.enqueue_chunk(match_on, chunk, pos, dist, out_rows=gy)
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
