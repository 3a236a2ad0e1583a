"""`VBM3DPlan`: the compiled VBM3D for one frame shape and parameter set, streaming frames
through rings of device frame slots, in bands of rows when frames are too large for the
device; `clpatch.denoise.vbm3d` describes the method."""


from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyopencl as cl

from ..core.buffers import BufferPool
from ..core.plans import Plan, check_out
from ..core.runtime import Runtime
from ..core.transfer import Transfers
from ..core.upload import check_peak
from ..core.validate import check_float, check_int
from ..core.volumes import Volume, as_volume, default_data_range, magnitude_limit
from .bm3d_params import channel_sigmas, choose_aggregation, fixed_point_scales
from .given import matches_search, stage_label
from .guide import guide_volume
from .peaks import peak_judge
from .strength import Strength
from .vbm3d_given import counted
from .vbm3d_params import VideoStageParams, check_guide_role, choose_video_search, contributions
from .vbm3d_pass import BandPass, FrameRef, VideoSettings
from .vbm3d_stage import VideoStage
from .vbm3d_stream import chunks, guide_iterator, one_band
from .vbm3d_tiles import Layout, chunk_frames, plan_layout

__all__ = ["VBM3DPlan"]


class VBM3DPlan(Plan):
    """A compiled VBM3D for one frame shape and parameter set, reusable across videos (a
    `clpatch.core.plans.Plan`: `clpatch.make_plan("vbm3d", ...)` makes one for a video
    shape, its strength and guide role fixed in `strength` and `guide_role`).

    `stream(frames, sigma)` denoises any iterable of frames (H, W[, C]) and yields float32
    frames; `run(video, sigma)` denoises a whole (T, H, W[, C]) array. Frames whose rings
    do not fit the device's memory (or `tile_bytes`) are processed in overlapping bands of
    rows (`bands`, see `clpatch.denoise.vbm3d_tiles`), with results bit for bit those of
    one band with the "fixed" aggregation; a stream then goes by chunks of `chunk_frames`
    output frames (fewer: less host memory, more frames uploaded and filtered twice).
    With `keep_events`, `last_events` collects (name, event) pairs of the last video (else
    it keeps the last pair, which `enqueue` returns):
    upload, convert, transform, search1/2 (given1/2: given matches copied), filter1/2,
    finalize1/2, clear (for benchmarks; a long video makes a long list).
    `memory_bytes` is the former name of `tile_bytes`.

    `given`: the stages whose groups come from matches the caller gives (`use_matches`,
    see `clpatch.denoise.vbm3d_given`) instead of the video search; such a plan runs and
    streams videos of `frames` frames (the matches'), in one band of whole frames, and
    takes no guide.

    `run`, `apply` and `stream` take a guide video (`guide`, `guide_role`: see
    `clpatch.vbm3d`); any plan takes one. Matching on a guide ("match") holds one more ring
    of frames, so those runs have bands of their own (`layout(True)`, planned on first use);
    `bands`, `band_rows` and `band_refs` are those of runs without a guide.
    """

    method = "vbm3d"
    input_names = ("frames", "guide")

    def __init__(self, runtime: Runtime, rows: int, cols: int, channels: int,
                 params: tuple[VideoStageParams, VideoStageParams], stages: int = 2,
                 temporal_radius: int = 4, *, aggregation: str | None = None,
                 variant: str | None = None, tile_bytes: int | None = None,
                 memory_bytes: int | None = None, given: tuple[bool, ...] = (False, False),
                 frames: int | None = None) -> None:
        if channels not in (1, 3):
            raise ValueError(f"VBM3D filters grayscale (1 channel) or RGB (3 channels), got {channels}")
        p = params[0].patch_size
        if rows < p or cols < p:
            raise ValueError(f"frames of {rows}x{cols} are smaller than the patch size {p}")
        self.given = tuple(bool(g) for g in (*given, False, False)[:stages])
        if any(self.given) and frames is None:
            raise ValueError("a VBM3D plan on given matches needs their frame count (frames=)")
        super().__init__(runtime)
        #: The frames of every video a plan on given matches runs (None: any count).
        self.frames = frames if any(self.given) else None
        #: The strength and guide role of `enqueue` (`clpatch.make_plan` sets them).
        self.strength: Strength | None = None
        self.guide_role = "match"
        self.rows, self.cols, self.channels = rows, cols, channels
        self.colour = channels == 3
        self.params = params[:stages]
        self.radius = temporal_radius
        self.aggregation, self.aggregation_reason = choose_aggregation(runtime.profile, aggregation)
        self.variant, self.variant_reason = choose_video_search(runtime.profile, variant)
        self.slots = 4 * temporal_radius + 2          # noisy and basic frames
        self.acc_slots = 2 * temporal_radius + 2      # each accumulator
        self._tile_bytes = tile_bytes if tile_bytes is not None else memory_bytes
        self._layouts = {False: plan_layout(self, self._tile_bytes)}
        self._sized_for: tuple[int, tuple[int, ...]] | None = None
        unguided = self._layouts[False]
        self.bands = list(unguided.bands)
        self.band_rows = unguided.rows
        self.band_refs = list(unguided.refs)
        #: Output frames per chunk of a stream through several bands.
        self.chunk_frames = chunk_frames(temporal_radius, len(self.params))
        self.stages = [VideoStage(self, sp, g)
                       for sp, g in zip(self.params, self.given, strict=True)]
        self.transfers: Transfers | None = None     # made by the first host frame
        self.keep_events = False

    def layout(self, guided: bool) -> Layout:
        """The bands of runs with (`guided`: a ring of guide frames to match on) or without
        one. Switching to bands of other sizes than the last run's drops the buffers sized
        for those, so that device memory stays within the budget."""
        found = self._layouts.get(guided)
        if found is None:
            found = self._layouts[guided] = plan_layout(self, self._tile_bytes, guided)
        sized = (found.rows, found.refs)
        if self._sized_for is not None and self._sized_for != sized:
            self.pool = BufferPool(self.runtime.context)
            self.uploader.pool = self.pool
        self._sized_for = sized
        return found

    def use_matches(self, matches: tuple[Any, Any]) -> None:
        """Set the given matches of the stages planned for them (`given`; `matches`: a
        `clpatch.denoise.given.stage_matches` pair), checked (`VideoStage.use`)."""
        for s, (stage, m) in enumerate(zip(self.stages, matches[:len(self.stages)],
                                           strict=True)):
            if stage.given is not None:
                stage.use(m, stage_label(matches, s), self.radius)

    def _role(self, guide_role: Any, guide: Any) -> str | None:
        """The checked role of a run's guide (None without one); TypeError for a guide to a
        plan on given matches (`clpatch.denoise.given.matches_search`)."""
        if any(self.given):
            matches_search("window", self.given, guide=guide)
        return check_guide_role(guide_role, guide is not None, len(self.stages))

    def _check_frames(self, count: int) -> None:
        """ValueError when a plan on given matches gets another number of frames."""
        if self.frames is not None and count != self.frames:
            raise ValueError(f"frames has {count} frames; the plan's matches hold "
                             f"{self.frames}")

    def host_transfers(self) -> Transfers:
        """The pinned staging that host frames and results move through."""
        if self.transfers is None:
            self.transfers = Transfers(self.runtime)
        return self.transfers

    def settings(self, strength: Strength, peak: float | None, dtype: Any,
                 frame: Any = None) -> VideoSettings:
        """The video's settings; data_range (None: from `dtype` and `peak`, else from the
        first `frame`) and peak (None: 4 · data_range, which frames must then respect)."""
        data_range = strength.data_range
        if data_range is None:
            known = peak if peak is not None else float(np.abs(frame).max())
            data_range = default_data_range(dtype, known)
        bound = None
        if peak is None:
            peak = bound = 4.0 * data_range
        sigmas = channel_sigmas(strength.sigma, self.colour)
        if self.aggregation != "fixed":
            scales = [(1.0, 1.0)] * len(self.stages)
        else:
            scales = [fixed_point_scales(s.params.stage, max(contributions(s.params, self.radius),
                                                             s.measured or 0), peak, sigmas)
                      for s in self.stages]
        return VideoSettings(sigmas, scales, (data_range / 255.0) ** 2, bound)

    # ---- whole videos ----------------------------------------------------------------------

    def run(self, video: Any, sigma: float, *, data_range: float | None = None,
            guide: Any = None, guide_role: str = "match") -> Any:
        """Denoise a whole video (T, H, W[, C]) of the planned frame shape: float32 of the
        same shape, NumPy for NumPy input, a device array for device input (converted frame
        by frame on the device). guide, guide_role: as in `clpatch.vbm3d` (the guide has the
        video's shape; NumPy or device array whatever the video is)."""
        return self.apply(video, Strength.check(sigma, data_range=data_range), guide=guide,
                          guide_role=guide_role)

    def apply(self, video: Any, strength: Strength, *, guide: Any = None,
              guide_role: str = "match") -> Any:
        """`run` with the strength arguments checked already (`Strength.check`)."""
        role = self._role(guide_role, guide)
        return self._launch(as_volume(video, name="frames", video=True), strength, guide,
                            role, None)

    @property
    def waits_for_peak(self) -> bool:
        """Whether `enqueue` waits for the video's peak |value| before its passes: unless
        the plan has a peak and no guide (`clpatch.make_plan` sets `strength`)."""
        return self.strength is None or self.strength.peak is None or len(self.input_shapes) > 1

    def enqueue_arrays(self, video: Any, guide: Any = None, *, out: Any,
                       wait_for: list[Any] | None) -> tuple[Any, list[Any]]:
        """The plan's `enqueue` (`clpatch.core.plans.Plan`) with its `strength` and
        `guide_role`: the denoised device video (in `out` when given); see `waits_for_peak`
        for when it waits, else the value check is deferred."""
        strength = self.planned_strength()
        role = self._role(self.guide_role, guide)
        output = self._launch(as_volume(video, name="frames", video=True), strength,
                              guide, role, out)
        return output, [self.last_events[-1][1]]

    def _launch(self, volume: Volume, strength: Strength, guide: Any, role: str | None,
                out: Any) -> Any:
        """Enqueue a whole video's passes (for NumPy frames, and copy them back); returns
        the output. A device video with a given peak and no guide is checked after the
        passes, without waiting (`defer_check`); otherwise its peak is read first."""
        video = volume.array            # an array-like is an array from here on
        if (volume.rows, volume.cols, volume.channels) != (self.rows, self.cols, self.channels):
            raise ValueError(f"frames shape {tuple(video.shape)} differs from the planned frame "
                             f"shape {(self.rows, self.cols, self.channels)}")
        self._check_frames(volume.frames)
        limit = magnitude_limit(self.params[0].patch_size, 1)
        layout = self.layout(role == "match")
        defer = volume.on_device and strength.peak is not None and role is None
        if volume.on_device:
            if volume.array.context != self.runtime.context:
                raise ValueError("frames live in another OpenCL context than the runtime's")
            output = (self.runtime.empty(tuple(video.shape), np.float32) if out is None else
                      check_out(out, tuple(video.shape), np.float32, self.runtime.context))
        else:
            output = np.empty(tuple(video.shape), np.float32)
        guided = None
        if defer:
            peak = strength.peak
            self.uploader.begin()           # the passes' conversions check the frames
        else:
            if volume.on_device:
                peak = self._device_peak(volume, layout)
            else:
                # One pass for the fixed-point scale's peak; NaN and inf carry through min/max.
                peak = max(abs(float(np.min(video))), abs(float(np.max(video))))
            check_peak(peak, limit, "frames")
            guided = None if role is None else self._guide_volume(guide, volume, layout, limit)
            if strength.peak is not None:    # a larger video's peak (clpatch.dask's pieces)
                self._judge(strength.peak, limit)(peak)
                peak = strength.peak
        settings = self.settings(strength, peak, volume.dtype)
        events: list[tuple[str, Any]] = []
        self.last_events = events
        # Each band is one pass over every frame (a single band: the frames' one pass).
        for band in layout.bands:
            rows = None if volume.on_device else output[:, band.a:band.b]
            band_pass = BandPass(self, band, settings, events,
                                 device_out=output if volume.on_device else None,
                                 target=None if rows is None else rows.__getitem__,
                                 layout=layout, role=role)
            for t in range(volume.frames):
                band_pass.upload(FrameRef(volume, t),
                                 None if guided is None else FrameRef(guided, t))
                for _ in band_pass.advance(False):
                    pass
            for _ in band_pass.advance(True):
                pass
        if defer:
            self.defer_check([events[-1][1]], self._judge(strength.peak, limit))
        if not self.keep_events:
            self.last_events = events[-1:]
        return output

    @staticmethod
    def _judge(given: float, limit: float) -> Any:
        """The check of the frames' measured peak (`clpatch.denoise.peaks.peak_judge`)."""
        return peak_judge(lambda peak: check_peak(peak, limit, "frames"), given, "frames")

    def _device_peak(self, volume: Volume, layout: Layout) -> float:
        """The largest |value| of a device video (converted frame by frame, band by band,
        into the noisy ring as scratch by the checking conversion kernel)."""
        scratch = self.pool.get("noisy", self.slots * self.channels * layout.rows
                                * self.cols * 4)
        self.uploader.begin()
        for t in range(volume.frames):
            for band in layout.bands:
                self.uploader.convert(volume, t, t + 1, band.a, band.b, scratch)
        return self.uploader.peak()

    def _guide_volume(self, guide: Any, volume: Volume, layout: Layout, limit: float) -> Volume:
        """The checked guide of a whole video `volume`: its shape, context and values (finite,
        within `limit`); it never changes the frames' peak or data range."""
        guided = guide_volume(guide, volume, self.runtime, "frames")
        if guided.on_device:
            top = self._device_peak(guided, layout)
        else:
            top = max(abs(float(np.min(guided.array))), abs(float(np.max(guided.array))))
        check_peak(top, limit, "guide")
        return guided

    # ---- streams ---------------------------------------------------------------------------

    def stream(self, frames: Iterable[Any], sigma: float | None = None, *,
               data_range: float | None = None, peak: float | None = None,
               guide: Iterable[Any] | None = None,
               guide_role: str | None = None) -> Iterator[np.ndarray]:
        """Denoise frames one at a time: yields float32 frames (H, W) or (H, W, 3) in order.

        sigma: as in `clpatch.vbm3d`; None: the plan's `strength` and `guide_role` (a plan
        of `clpatch.make_plan`, whose shape's frame count does not bound the stream).
        data_range: as in `clpatch.bm3d` (None: from the first frame's dtype and values).
        peak: the largest |value| of the video, for the fixed-point aggregation's scale
        (None: 4 · data_range; a frame beyond it raises ValueError).
        guide: an iterable of guide frames in step with `frames` (each of a frame's shape,
        any real dtype), guide_role: what it replaces, as in `clpatch.vbm3d`; it must end
        when `frames` ends. data_range and peak never come from the guide.
        Frames of one band come out 4 · temporal_radius frames behind the input; frames in
        several bands by chunks of `chunk_frames`, once the frames a chunk needs are in.
        One band's frames are checked on the device without waiting (NaN, infinity, the
        magnitude limit, the peak): a frame that fails raises its ValueError before an
        output it reaches is yielded (`vbm3d_stream.one_band`); several bands' frames are
        checked on the host as they arrive.
        """
        if sigma is None:
            if self.strength is None:
                raise TypeError("stream needs sigma (or a plan of clpatch.make_plan)")
            sigma, data_range, peak = (self.strength.sigma, self.strength.data_range,
                                       self.strength.peak)
        guide_role = guide_role or self.guide_role
        strength = Strength.check(sigma, data_range=data_range)
        if peak is not None:
            peak = check_float("peak", peak)
        role = self._role(guide_role, guide)
        guides = None if role is None else guide_iterator(guide)
        layout = self.layout(role == "match")
        run = one_band if len(layout.bands) == 1 else chunks
        frames = iter(frames) if self.frames is None else counted(frames, self.frames)
        return run(self, frames, strength, peak, guides, role, layout)

    # ---- inspection ------------------------------------------------------------------------

    def search(self, video: Any, t: int, *, stage: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """The search of one reference frame, for tests and inspection: (positions
        (gy, gx, n, 3) as (t, y, x), distances (gy, gx, n)) of the references of frame t of
        `video` (a NumPy (T, H, W[, C]) array), matched on its first channel (Y for colour)
        with the given stage's parameters. Missing entries are (-1, -1, -1) and +inf."""
        video = np.asarray(video)
        if video.ndim == 3:
            video = video[..., None]
        if video.shape[1:] != (self.rows, self.cols, self.channels):
            raise ValueError(f"video frames of shape {video.shape[1:]} differ from the plan's")
        if not 0 <= t < len(video):
            raise ValueError(f"t must be in [0, {len(video) - 1}], got {t}")
        s = check_int("stage", stage, 1, len(self.stages)) - 1
        p = self.stages[s].params
        gy, gx = len(self.stages[s].grid_y), len(self.stages[s].grid_x)
        positions = np.empty((gy, gx, p.n, 3), np.int32)
        distances = np.empty((gy, gx, p.n), np.float32)
        volume = as_volume(video, name="video", video=True)
        t_lo, t_hi = max(0, t - self.radius), min(len(video) - 1, t + self.radius)
        for band in self.bands:        # a reference's matches are the same in every band
            band_pass = BandPass(self, band, None, [])
            for f in range(t_lo, t_hi + 1):
                band_pass.put_frame(FrameRef(volume, f), f)
            pos, dist = band_pass.search(s, t, len(video) - 1, band_pass.noisy)
            g0, g1 = band.refs[s]
            cl.enqueue_copy(self.runtime.queue, positions[g0:g1], pos)
            cl.enqueue_copy(self.runtime.queue, distances[g0:g1], dist)
            found = positions[g0:g1, ..., 1] >= 0
            positions[g0:g1, ..., 1][found] += band.y_lo
        return positions, distances
