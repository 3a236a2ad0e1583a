"""`VBM3DPlan`: the compiled VBM3D for one frame shape and parameter set, streaming frames
through rings of device frame slots, in bands of rows when frames are too large for the
device; `clpatch.denoise.vbm3d` describes the method."""


from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..core.buffers import BufferPool
from ..core.runtime import Runtime
from ..core.transfer import Transfers
from ..core.upload import Uploader, check_peak
from ..core.validate import check_float, check_int
from ..core.volumes import Volume, as_volume, default_data_range, magnitude_limit
from .bm3d_params import channel_sigmas, choose_aggregation, fixed_point_scales
from .strength import Strength
from .vbm3d_params import VideoStageParams, choose_video_search, contributions
from .vbm3d_pass import BandPass, FrameRef, VideoSettings
from .vbm3d_stage import VideoStage
from .vbm3d_tiles import chunk_frames, halo_frames, plan_bands

__all__ = ["VBM3DPlan"]


class VBM3DPlan:
    """A compiled VBM3D for one frame shape and parameter set, reusable across videos.

    `stream(frames, sigma)` denoises any iterable of frames (H, W[, C]) and yields float32
    frames; `run(video, sigma)` denoises a whole (T, H, W[, C]) array. Frames whose rings
    do not fit the device's memory (or `tile_bytes`) are processed in overlapping bands of
    rows (`bands`, see `clpatch.denoise.vbm3d_tiles`), with results bit for bit those of
    one band with the "fixed" aggregation; a stream then goes by chunks of `chunk_frames`
    output frames (fewer: less host memory, more frames uploaded and filtered twice).
    With `keep_events`, `last_events` collects (name, event) pairs of the last video:
    upload, convert, transform, search1/2, filter1/2, finalize1/2, clear (for benchmarks;
    a long video makes a long list).
    `memory_bytes` is the former name of `tile_bytes`.
    """

    def __init__(self, runtime: Runtime, rows: int, cols: int, channels: int,
                 params: tuple[VideoStageParams, VideoStageParams], stages: int = 2,
                 temporal_radius: int = 4, *, aggregation: str | None = None,
                 variant: str | None = None, tile_bytes: int | None = None,
                 memory_bytes: int | None = None) -> None:
        if channels not in (1, 3):
            raise ValueError(f"VBM3D filters grayscale (1 channel) or RGB (3 channels), got {channels}")
        p = params[0].patch_size
        if rows < p or cols < p:
            raise ValueError(f"frames of {rows}x{cols} are smaller than the patch size {p}")
        self.runtime = runtime
        self.rows, self.cols, self.channels = rows, cols, channels
        self.colour = channels == 3
        self.params = params[:stages]
        self.radius = temporal_radius
        self.aggregation, self.aggregation_reason = choose_aggregation(runtime.profile, aggregation)
        self.variant, self.variant_reason = choose_video_search(runtime.profile, variant)
        self.slots = 4 * temporal_radius + 2          # noisy and basic frames
        self.acc_slots = 2 * temporal_radius + 2      # each accumulator
        self.bands = plan_bands(self, tile_bytes if tile_bytes is not None else memory_bytes)
        self.band_rows = max(band.rows for band in self.bands)
        self.band_refs = [max(band.refs[s][1] - band.refs[s][0] for band in self.bands)
                          for s in range(len(self.params))]
        #: Output frames per chunk of a stream through several bands.
        self.chunk_frames = chunk_frames(temporal_radius, len(self.params))
        self.stages = [VideoStage(self, sp) for sp in self.params]
        self.pool = BufferPool(runtime.context)
        self.uploader = Uploader(runtime, self.pool)
        self.transfers: Transfers | None = None     # made by the first host frame
        self.keep_events = False
        self.last_events: list[tuple[str, Any]] = []

    def host_transfers(self) -> Transfers:
        """The pinned staging that host frames and results move through."""
        if self.transfers is None:
            self.transfers = Transfers(self.runtime)
        return self.transfers

    def _settings(self, strength: Strength, peak: float | None, dtype: Any,
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
            scales = [fixed_point_scales(s.params.stage, contributions(s.params, self.radius),
                                         peak, sigmas) for s in self.stages]
        return VideoSettings(sigmas, scales, (data_range / 255.0) ** 2, bound)

    # ---- whole videos ----------------------------------------------------------------------

    def run(self, video: Any, sigma: float, *, data_range: float | None = None) -> Any:
        """Denoise a whole video (T, H, W[, C]) of the planned frame shape: float32 of the
        same shape, NumPy for NumPy input, a device array for device input (converted frame
        by frame on the device)."""
        return self.apply(video, Strength.check(sigma, data_range=data_range))

    def apply(self, video: Any, strength: Strength) -> Any:
        """`run` with the strength arguments checked already (`Strength.check`)."""
        volume = as_volume(video, name="frames", video=True)
        video = volume.array            # an array-like is an array from here on
        if (volume.rows, volume.cols, volume.channels) != (self.rows, self.cols, self.channels):
            raise ValueError(f"frames shape {tuple(video.shape)} differs from the planned frame "
                             f"shape {(self.rows, self.cols, self.channels)}")
        limit = magnitude_limit(self.params[0].patch_size, 1)
        if volume.on_device:
            if volume.array.context != self.runtime.context:
                raise ValueError("frames live in another OpenCL context than the runtime's")
            peak = self._device_peak(volume)
            output = self.runtime.empty(tuple(video.shape), np.float32)
        else:
            # One pass for the fixed-point scale's peak; NaN and inf carry through min/max.
            peak = max(abs(float(np.min(video))), abs(float(np.max(video))))
            output = np.empty(tuple(video.shape), np.float32)
        check_peak(peak, limit, "frames")
        if strength.peak is not None:        # a larger video's peak (clpatch.dask's pieces)
            if peak > strength.peak:
                raise ValueError(f"frames values reach |x| = {peak:.6g}, above the peak "
                                 f"{strength.peak:.6g} passed")
            peak = strength.peak
        settings = self._settings(strength, peak, volume.dtype)
        events: list[tuple[str, Any]] = []
        self.last_events = events
        # Each band is one pass over every frame (a single band: the frames' one pass).
        for band in self.bands:
            rows = None if volume.on_device else output[:, band.a:band.b]
            band_pass = BandPass(self, band, settings, events,
                                 device_out=output if volume.on_device else None,
                                 target=None if rows is None else rows.__getitem__)
            for t in range(volume.frames):
                band_pass.upload(FrameRef(volume, t))
                for _ in band_pass.advance(False):
                    pass
            for _ in band_pass.advance(True):
                pass
        if not self.keep_events:
            self.last_events = []
        return output

    def _device_peak(self, volume: Volume) -> float:
        """The largest |value| of a device video (converted frame by frame, band by band,
        into the noisy ring as scratch by the checking conversion kernel)."""
        scratch = self.pool.get("noisy", self.slots * self.channels * self.band_rows
                                * self.cols * 4)
        self.uploader.begin()
        for t in range(volume.frames):
            for band in self.bands:
                self.uploader.convert(volume, t, t + 1, band.a, band.b, scratch)
        return self.uploader.peak()

    # ---- streams ---------------------------------------------------------------------------

    def stream(self, frames: Iterable[Any], sigma: float, *, data_range: float | None = None,
               peak: float | None = None) -> Iterator[np.ndarray]:
        """Denoise frames one at a time: yields float32 frames (H, W) or (H, W, 3) in order.

        data_range: as in `clpatch.bm3d` (None: from the first frame's dtype and values).
        peak: the largest |value| of the video, for the fixed-point aggregation's scale
        (None: 4 · data_range; a frame beyond it raises ValueError).
        Frames of one band come out 4 · temporal_radius frames behind the input; frames in
        several bands by chunks of `chunk_frames`, once the frames a chunk needs are in.
        """
        strength = Strength.check(sigma, data_range=data_range)
        if peak is not None:
            peak = check_float("peak", peak)
        if len(self.bands) == 1:
            return self._stream(iter(frames), strength, peak)
        return self._chunks(iter(frames), strength, peak)

    def _frame_array(self, frame: Any, index: int) -> np.ndarray:
        if isinstance(frame, cla.Array):
            frame = frame.get()
        frame = np.asarray(frame)
        shape = (self.rows, self.cols) if self.channels == 1 else (self.rows, self.cols, 3)
        if frame.shape != shape and not (self.channels == 1 and frame.shape == shape + (1,)):
            raise ValueError(f"frame {index} has shape {frame.shape}, expected {shape}")
        if frame.dtype.kind not in "uif":
            raise TypeError(f"frame {index} must have a real numeric dtype, got {frame.dtype}")
        return frame

    def _frame_ref(self, frame: np.ndarray) -> FrameRef:
        block = frame.reshape(1, self.rows, self.cols, self.channels)
        return FrameRef(as_volume(block, name="frame", video=True), 0)

    def _stream(self, frames: Iterator[Any], strength: Strength,
                peak: float | None) -> Iterator[np.ndarray]:
        """The stream of frames that are one band: each frame is uploaded, its values
        checked by the conversion kernel, and every output it completes yielded."""
        events: list[tuple[str, Any]] = []
        self.last_events = events
        limit = magnitude_limit(self.params[0].patch_size, 1)
        band_pass = None
        count = 0
        for frame in frames:
            frame = self._frame_array(frame, count)
            if band_pass is None:
                settings = self._settings(strength, peak, frame.dtype, frame)
                band_pass = BandPass(self, self.bands[0], settings, events)
            self.uploader.begin()
            band_pass.upload(self._frame_ref(frame))
            self._check_frame(self.uploader.peak(), count, settings.bound, limit)
            count += 1
            for _, out in band_pass.advance(False):
                yield out
        if band_pass is None:
            raise ValueError("frames is empty: VBM3D needs at least one frame")
        for _, out in band_pass.advance(True):
            yield out
        if not self.keep_events:
            self.last_events = []

    def _chunks(self, frames: Iterator[Any], strength: Strength,
                peak: float | None) -> Iterator[np.ndarray]:
        """The stream of frames in several bands: chunks of `chunk_frames` output frames,
        each denoised band after band from the input frames within the halo around it
        (`clpatch.denoise.vbm3d_tiles`); input frames are held on the host until no chunk
        needs them. Frame values are checked on the host as they arrive."""
        events: list[tuple[str, Any]] = []
        self.last_events = events
        limit = magnitude_limit(self.params[0].patch_size, 1)
        halo, size = halo_frames(self.radius, len(self.stages)), max(1, self.chunk_frames)
        held: list[np.ndarray] = []         # input frames first, first + 1, ...
        first = start = count = 0           # start: the next chunk's first output frame
        settings = None
        for frame in frames:
            frame = np.array(self._frame_array(frame, count))     # a copy: frames are held
            if settings is None:
                settings = self._settings(strength, peak, frame.dtype, frame)
            top = max(abs(float(np.min(frame))), abs(float(np.max(frame))))
            self._check_frame(top, count, settings.bound, limit)
            held.append(frame)
            count += 1
            if count == start + size + halo:
                yield from self._chunk(held, first, start, start + size, count, settings,
                                       events, end=False)
                start += size
                drop = max(0, start - halo) - first
                del held[:drop]
                first += drop
        if settings is None:
            raise ValueError("frames is empty: VBM3D needs at least one frame")
        if start < count:
            yield from self._chunk(held, first, start, count, count, settings, events, end=True)
        if not self.keep_events:
            self.last_events = []

    def _chunk(self, held: list[np.ndarray], first: int, t0: int, t1: int, f1: int,
               settings: VideoSettings, events: list, *, end: bool) -> Iterator[np.ndarray]:
        """Output frames [t0, t1) from input frames [t0 - halo, f1) (`held` from `first`;
        `end`: f1 is the end of the video), band by band."""
        f0 = max(0, t0 - halo_frames(self.radius, len(self.stages)))
        shape = (self.rows, self.cols) if self.channels == 1 else (self.rows, self.cols, 3)
        out = np.empty((t1 - t0, *shape), np.float32)
        for band in self.bands:
            rows = out[:, band.a:band.b]
            band_pass = BandPass(self, band, settings, events, wanted=range(t0 - f0, t1 - f0),
                                 target=lambda t, rows=rows: rows[t - (t0 - f0)])
            for f in range(f0, f1):
                band_pass.upload(self._frame_ref(held[f - first]))
                for _ in band_pass.advance(False):
                    pass
            if end:
                for _ in band_pass.advance(True):
                    pass
        yield from out

    def _check_frame(self, top: float, index: int, bound: float | None, limit: float) -> None:
        """Frame `index`'s largest |value| `top` (NaN/inf when it held any) against the
        float32 limit and the peak the fixed-point scales assume (`bound`)."""
        if not math.isfinite(top):
            raise ValueError(f"frame {index} contains NaN or infinite values")
        if top > limit:
            raise ValueError(f"frame {index}: values must satisfy |x| <= {limit:.3g} so that "
                             f"float32 patch distances cannot overflow (largest |x| is {top:.3g})")
        if bound is not None and self.aggregation == "fixed" and top > bound:
            raise ValueError(f"frame {index} has values up to {top:.6g}, beyond the assumed peak "
                             f"{bound:.6g} (4 x data_range); pass peak= (or data_range=) "
                             "to VBM3DPlan.stream")

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
