"""`VBM3DPlan`: the compiled VBM3D for one frame shape and parameter set, streaming frames
through rings of device frame slots; `clpatch.denoise.vbm3d` describes the method."""


from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..core.buffers import BufferPool, memory_limits
from ..core.errors import DeviceResourceError
from ..core.runtime import Runtime
from ..core.staging import download
from ..core.transfer import Transfers
from ..core.upload import Uploader, check_peak
from ..core.validate import check_float, check_int
from ..core.volumes import Volume, as_volume, default_data_range, magnitude_limit
from ..match.matches import grid_positions
from .bm3d_params import channel_sigmas, choose_aggregation, fixed_point_scales
from .strength import Strength
from .vbm3d_params import (
    VideoStageParams,
    choose_video_search,
    contributions,
)
from .vbm3d_stage import VideoStage

__all__ = ["VBM3DPlan"]

_INT_MAX = 2 ** 31 - 1


class VBM3DPlan:
    """A compiled VBM3D for one frame shape and parameter set, reusable across videos.

    `stream(frames, sigma)` denoises any iterable of frames (H, W[, C]) and yields float32
    frames; `run(video, sigma)` denoises a whole (T, H, W[, C]) array. With `keep_events`,
    `last_events` collects (name, event) pairs of the last video: upload, transform,
    search1/2, filter1/2, finalize1/2, clear (for benchmarks; a long video makes a long list).
    """

    def __init__(self, runtime: Runtime, rows: int, cols: int, channels: int,
                 params: tuple[VideoStageParams, VideoStageParams], stages: int = 2,
                 temporal_radius: int = 4, *, aggregation: str | None = None,
                 variant: str | None = None, memory_bytes: int | None = None) -> None:
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
        self._check_memory(memory_bytes)
        self.stages = [VideoStage(self, sp) for sp in self.params]
        self._pool = BufferPool(runtime.context)
        self._uploader = Uploader(runtime, self._pool)
        self._transfers: Transfers | None = None
        self.keep_events = False
        self.last_events: list[tuple[str, Any]] = []

    def _check_memory(self, memory_bytes: int | None) -> None:
        frame = self.channels * self.rows * self.cols
        item = 8 if self.aggregation == "fixed" else 4
        refs = max(len(grid_positions(self.rows, sp.patch_size, sp.step))
                   * len(grid_positions(self.cols, sp.patch_size, sp.step)) * sp.n
                   for sp in self.params)
        sizes = {"noisy frames": self.slots * frame * 4,
                 "basic frames": self.slots * frame * 4 if len(self.params) == 2 else 0,
                 "accumulator": self.acc_slots * frame * 2 * item,
                 "search results": refs * 16, "output frame": frame * 4}
        largest, total = memory_limits(self.runtime, memory_bytes)
        whole = sum(sizes.values()) + (sizes["accumulator"] if len(self.params) == 2 else 0)
        name, big = max(sizes.items(), key=lambda kv: kv[1])
        # The kernels index the rings with 32-bit integers.
        too_many = max(self.acc_slots * frame * 2, self.slots * frame) > _INT_MAX
        if too_many or big > largest or whole > total:
            raise DeviceResourceError(
                f"VBM3D on {self.rows}x{self.cols}x{self.channels} frames with temporal radius "
                f"{self.radius} needs {whole} bytes of device memory ({name}: {big} bytes in one "
                f"buffer), more than this device allows ({total} bytes, {largest} per buffer); "
                "reduce temporal_radius or the frame size (frames are not split into tiles)")

    # ---- fixed point -----------------------------------------------------------------------

    def _scales(self, peak: float, sigmas: np.ndarray) -> list[tuple[float, float]]:
        if self.aggregation != "fixed":
            return [(1.0, 1.0)] * len(self.stages)
        return [fixed_point_scales(s.params.stage, contributions(s.params, self.radius), peak,
                                   sigmas) for s in self.stages]

    # ---- running ---------------------------------------------------------------------------

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
        if volume.on_device:
            if volume.array.context != self.runtime.context:
                raise ValueError("frames live in another OpenCL context than the runtime's")
            peak = self._device_peak(volume)
            output = self.runtime.empty(tuple(video.shape), np.float32)
            frames: Iterator[Any] = (_DeviceFrame(volume, t) for t in range(volume.frames))
        else:
            # One pass for the fixed-point scale's peak; NaN and inf carry through min/max.
            peak = max(abs(float(np.min(video))), abs(float(np.max(video))))
            check_peak(peak, magnitude_limit(self.params[0].patch_size, 1), "frames")
            output = np.empty(tuple(video.shape), np.float32)
            frames = iter(video)
        for t, frame in enumerate(self._stream(frames, strength, peak, volume.dtype,
                                               output if volume.on_device else None,
                                               checked=True)):
            if not volume.on_device:
                output[t] = frame.reshape(output.shape[1:])
        return output

    def _device_peak(self, volume: Volume) -> float:
        """The largest |value| of a device video (converted frame by frame into a scratch
        frame by the checking conversion kernel), checked finite and small enough for
        float32 distances."""
        scratch = self._pool.get("peak", self.channels * self.rows * self.cols * 4)
        self._uploader.begin()
        for t in range(volume.frames):
            self._uploader.convert(volume, t, t + 1, 0, self.rows, scratch)
        peak = self._uploader.peak()
        check_peak(peak, magnitude_limit(self.params[0].patch_size, 1), "frames")
        return peak

    def stream(self, frames: Iterable[Any], sigma: float, *, data_range: float | None = None,
               peak: float | None = None) -> Iterator[np.ndarray]:
        """Denoise frames one at a time: yields float32 frames (H, W) or (H, W, 3) in order.

        data_range: as in `clpatch.bm3d` (None: from the first frame's dtype and values).
        peak: the largest |value| of the video, for the fixed-point aggregation's scale
        (None: 4 · data_range; a frame beyond it raises ValueError).
        """
        strength = Strength.check(sigma, data_range=data_range)
        if peak is not None:
            peak = check_float("peak", peak)
        return self._stream(iter(frames), strength, peak, None, None)

    def _frame_array(self, frame: Any, index: int) -> Any:
        if isinstance(frame, _DeviceFrame):
            return frame
        if isinstance(frame, cla.Array):
            frame = frame.get()
        frame = np.asarray(frame)
        shape = (self.rows, self.cols) if self.channels == 1 else (self.rows, self.cols, 3)
        if frame.shape != shape and not (self.channels == 1 and frame.shape == shape + (1,)):
            raise ValueError(f"frame {index} has shape {frame.shape}, expected {shape}")
        if frame.dtype.kind not in "uif":
            raise TypeError(f"frame {index} must have a real numeric dtype, got {frame.dtype}")
        return frame

    def _stream(self, frames: Iterator[Any], strength: Strength, peak: float | None,
                dtype: Any, device_out: Any, checked: bool = False) -> Iterator[np.ndarray]:
        """The stream; `checked`: the frames' values were checked already (a whole video)."""
        data_range = strength.data_range
        sigmas = channel_sigmas(strength.sigma, self.colour)
        radius, two = self.radius, len(self.stages) == 2
        events: list[tuple[str, Any]] = []
        self.last_events = events
        state = _StreamState()
        limit = magnitude_limit(self.params[0].patch_size, 1)
        while True:
            frame = next(frames, None)
            if frame is None:
                state.total = state.uploaded
                if state.total == 0:
                    raise ValueError("frames is empty: VBM3D needs at least one frame")
            else:
                frame = self._frame_array(frame, state.uploaded)
                if state.uploaded == 0:
                    if data_range is None:
                        known = peak if peak is not None else float(np.abs(frame).max())
                        data_range = default_data_range(dtype or frame.dtype, known)
                    if peak is None:
                        peak = 4.0 * data_range
                        state.bound = peak
                    state.scales = self._scales(peak, sigmas)
                    state.tau_unit = (data_range / 255.0) ** 2
                if not checked:            # the conversion kernel measures the frame
                    self._uploader.begin()
                self._upload(frame, state, events)
                if not checked:
                    self._check_frame(self._uploader.peak(), state.uploaded - 1, state, limit)
            end = state.total is not None
            progress = True
            while progress:
                progress = False
                # Stage 1 for every reference frame whose frames ahead are in.
                while state.s1 < state.uploaded and (state.s1 + radius < state.uploaded or end):
                    self._reference_frame(0, state.s1, state, sigmas, events)
                    state.s1 += 1
                # Basic estimates no stage-1 group can reach any more (with two stages, only
                # while the frame's stage-2 accumulator slot is free).
                while (state.basic < state.s1
                       and (state.basic + radius < state.s1 or (end and state.s1 == state.total))
                       and (not two or state.basic - state.out < self.acc_slots)):
                    if two:
                        self._finalize_basic(state.basic, state, events)
                    else:
                        yield self._output(0, state.basic, state, events, device_out)
                    state.basic += 1
                    progress = True
                if not two:
                    continue
                while state.s2 < state.basic and (state.s2 + radius < state.basic
                                                  or (end and state.basic == state.total)):
                    self._reference_frame(1, state.s2, state, sigmas, events)
                    state.s2 += 1
                    progress = True
                while state.out < state.s2 and (state.out + radius < state.s2
                                                or (end and state.s2 == state.total)):
                    yield self._output(1, state.out, state, events, device_out)
                    state.out += 1
                    progress = True
            if end:
                break
        if not self.keep_events:
            self.last_events = []

    def _check_frame(self, top: float, index: int, state: _StreamState, limit: float) -> None:
        """Frame `index`'s largest |value| `top` (NaN/inf when it held any) against the
        float32 limit and the peak the fixed-point scales assume."""
        if not math.isfinite(top):
            raise ValueError(f"frame {index} contains NaN or infinite values")
        if top > limit:
            raise ValueError(f"frame {index}: values must satisfy |x| <= {limit:.3g} so that "
                             f"float32 patch distances cannot overflow (largest |x| is {top:.3g})")
        if state.bound is not None and self.aggregation == "fixed" and top > state.bound:
            raise ValueError(f"frame {index} has values up to {top:.6g}, beyond the assumed peak "
                             f"{state.bound:.6g} (4 x data_range); pass peak= (or data_range=) "
                             "to VBM3DPlan.stream")

    def _buffers(self) -> dict[str, Any]:
        frame = self.channels * self.rows * self.cols
        item = 8 if self.aggregation == "fixed" else 4
        get = self._pool.get
        out = {"noisy": get("noisy", self.slots * frame * 4),
               "acc1": get("acc1", self.acc_slots * frame * 2 * item)}
        if len(self.stages) == 2:
            out["basic"] = get("basic", self.slots * frame * 4)
            out["acc2"] = get("acc2", self.acc_slots * frame * 2 * item)
        return out

    def _upload(self, frame: np.ndarray, state: _StreamState, events: list) -> None:
        self._put_frame(frame, state.uploaded, events)
        self._clear(0, state.uploaded, events)
        state.uploaded += 1

    def _put_frame(self, frame: Any, t: int, events: list) -> None:
        """Frame t (a NumPy frame or a `_DeviceFrame`) into its slot of the noisy ring, as
        planar float (opponent colours for colour), converted on the device."""
        slot = t % self.slots
        bufs = self._buffers()
        self._convert_frame(frame, bufs["noisy"], slot * self.channels * self.rows * self.cols,
                            events)
        if self.colour:
            i32 = np.int32
            events.append(("transform", self.stages[0].opponent(
                self.runtime.queue, (self.cols, self.rows, 1), None, bufs["noisy"], i32(slot),
                i32(1), i32(self.rows), i32(self.cols), bufs["noisy"], i32(0))))

    def _convert_frame(self, frame: Any, dst: Any, dst_base: int, events: list) -> None:
        """A NumPy frame or a `_DeviceFrame` as planar float32 at dst[dst_base ...]."""
        if isinstance(frame, _DeviceFrame):
            volume, t = frame.volume, frame.index
        else:
            block = frame.reshape(1, self.rows, self.cols, self.channels)
            volume, t = as_volume(block, name="frame", video=True), 0
            if self._transfers is None:     # host frames move through pinned memory
                self._transfers = Transfers(self.runtime)
        events.extend(self._uploader.convert(volume, t, t + 1, 0, self.rows, dst, dst_base,
                                             transfers=self._transfers))

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
        events: list = []
        t_lo, t_hi = max(0, t - self.radius), min(len(video) - 1, t + self.radius)
        for f in range(t_lo, t_hi + 1):
            self._put_frame(video[f], f, events)
        p = self.stages[s].params
        state = _StreamState(total=len(video))
        pos, dist = self._search(s, t, state, events)
        gy, gx = len(self.stages[s].grid_y), len(self.stages[s].grid_x)
        positions = np.empty((gy, gx, p.n, 3), np.int32)
        distances = np.empty((gy, gx, p.n), np.float32)
        cl.enqueue_copy(self.runtime.queue, positions, pos)
        cl.enqueue_copy(self.runtime.queue, distances, dist)
        return positions, distances

    def _clear(self, s: int, t: int, events: list) -> None:
        count = 2 * self.channels * self.rows * self.cols
        acc = self._buffers()[f"acc{s + 1}"]
        events.append(("clear", self.stages[s].clear(
            self.runtime.queue, (count,), None, acc, np.int32((t % self.acc_slots) * count),
            np.int32(count))))

    def _reference_frame(self, s: int, t: int, state: _StreamState, sigmas: np.ndarray,
                         events: list) -> None:
        """Search and filter the references of frame t in stage s + 1."""
        queue = self.runtime.queue
        i32, f32 = np.int32, np.float32
        stage = self.stages[s]
        p = stage.params
        bufs = self._buffers()
        gy, gx = len(stage.grid_y), len(stage.grid_x)
        pos, dist = self._search(s, t, state, events)
        tag = str(p.stage)
        if p.stage == 1:
            shrink = [p.lambda_3d * float(v) for v in sigmas]
        else:
            shrink = [float(v) ** 2 for v in sigmas]
        shrink = (shrink + [0.0, 0.0])[:3]
        tau = p.tau_match * state.tau_unit * p.patch_size ** 2
        images = (bufs["noisy"], bufs["basic"]) if p.stage == 2 else (bufs["noisy"],)
        scale = state.scales[s]
        events.append(("filter" + tag, stage.filter(
            queue, (stage.work_group, gx, gy), (stage.work_group, 1, 1), *images,
            i32(self.slots), i32(self.rows), i32(self.cols), i32(0), i32(0), pos, dist, i32(gy),
            i32(gx), stage.search.ys, stage.search.xs, i32(0), i32(gy), i32(0), i32(t), bufs[f"acc{s + 1}"],
            i32(self.acc_slots), f32(tau), *(f32(v) for v in shrink), f32(scale[0]),
            f32(scale[1]))))

    def _search(self, s: int, t: int, state: _StreamState, events: list) -> tuple[Any, Any]:
        """Enqueues the search of reference frame t in stage s + 1: (positions, distances)."""
        stage = self.stages[s]
        gy, gx, n = len(stage.grid_y), len(stage.grid_x), stage.params.n
        pos = self._pool.get(f"pos{s}", gy * gx * n * 12)
        dist = self._pool.get(f"dist{s}", gy * gx * n * 4)
        last = (state.total if state.total is not None else state.uploaded) - 1
        t_lo, t_hi = max(0, t - self.radius), min(last, t + self.radius)
        guide = self._buffers()["noisy" if s == 0 else "basic"]
        events.append((f"search{stage.params.stage}", stage.search.enqueue(
            guide, self.slots, t, t_lo, t_hi, pos, dist)))
        return pos, dist

    def _finalize_args(self, s: int, t: int, state: _StreamState) -> tuple[Any, ...]:
        i32, f32 = np.int32, np.float32
        scale = state.scales[s]
        return (self._buffers()[f"acc{s + 1}"], i32(self.rows), i32(self.cols),
                i32(t % self.acc_slots), i32(1), i32(0), i32(self.rows), f32(1.0 / scale[0]),
                f32(1.0 / scale[1]))

    def _finalize_basic(self, t: int, state: _StreamState, events: list) -> None:
        """The basic estimate of frame t into its slot of the basic ring; frees the frame's
        stage-1 accumulator slot and clears its stage-2 one."""
        i32 = np.int32
        slot = t % self.slots
        events.append(("finalize1", self.stages[0].finalize_planar(
            self.runtime.queue, (self.cols, self.rows, 1), None, *self._finalize_args(0, t, state),
            self._buffers()["basic"], i32(self.rows), i32(slot * self.channels * self.rows))))
        self._clear(1, t, events)

    def _output(self, s: int, t: int, state: _StreamState, events: list, device_out: Any) -> Any:
        i32 = np.int32
        queue = self.runtime.queue
        stage = self.stages[s]
        if device_out is not None:
            events.append((f"finalize{s + 1}", stage.finalize(
                queue, (self.cols, self.rows, 1), None, *self._finalize_args(s, t, state),
                device_out.data, i32(self.rows), i32(0), i32(t))))
            return device_out[t]
        out = self._pool.get("out", self.rows * self.cols * self.channels * 4)
        events.append((f"finalize{s + 1}", stage.finalize(
            queue, (self.cols, self.rows, 1), None, *self._finalize_args(s, t, state), out,
            i32(self.rows), i32(0), i32(0))))
        shape = (self.rows, self.cols) if self.channels == 1 else (self.rows, self.cols, 3)
        frame = np.empty(shape, np.float32)
        download(queue, frame, out, shape=frame.shape, wait_for=[events[-1][1]],
                 transfers=self._transfers)
        return frame


@dataclass(frozen=True)
class _DeviceFrame:
    """Frame `index` of a device video, converted in place of a NumPy frame."""

    volume: Volume
    index: int


@dataclass
class _StreamState:
    """Progress of one stream: frames uploaded, next reference frame of stage 1 and 2, next
    basic estimate and output, total frames once the input ended."""

    uploaded: int = 0
    s1: int = 0
    basic: int = 0
    s2: int = 0
    out: int = 0
    total: int | None = None
    bound: float | None = None
    scales: list[tuple[float, float]] | None = None
    tau_unit: float = 1.0


# ---- public function ------------------------------------------------------------------------
