"""`BurstBM3DPlan`: BM3D's collaborative filter on a burst (`clpatch.burst_denoise`'s
method "bm3d"), the groups drawn from every frame by the clustering ANN.

The reference frame's patches (grid of step `step` plus the last row and column) are the
references; each one's 3-D group is itself followed by its k ANN candidates from all
frames in ascending distance, cut as BM3D cuts it (the largest power of 2 ≤ the candidates
within ``tau_match``). Each group is filtered by the collaborative filter of BM3D/VBM3D
(`clpatch.denoise.collaborative`, its video form: positions (t, y, x), one accumulator
slot per frame), in two stages:

1. *basic estimate*: hard thresholding of the 3-D spectrum at ``lambda_3d · σ``;
2. *final estimate*: empirical Wiener shrinkage with the same group cut from the basic
   estimate as oracle.

Stage 2 reuses stage 1's groups (the same ANN matches and matching threshold, so the same
group sizes) instead of matching again on the basic estimate. The basic estimate exists
only where the groups put patches: a reference frame's grid covers the whole frame, but
the other frames are estimated only where stage-1 groups took patches from them. Matching
again on "the basic estimate of every frame" would need a basic estimate of every whole
frame, i.e. stage 1 run with every frame as reference (T times the work); reusing the
groups makes the oracle defined exactly where stage 2 reads it, and in a burst most
candidates are true (shifted) copies of the reference patch, which noisy matching already
finds. (For one image, BM3D's re-matching on the basic estimate mainly helps at high noise,
where noisy distances mislead.)

Each filtered patch is aggregated into its own frame's accumulator (the kernel's), so the
accumulators hold every frame; only the reference frame is finalized. The whole burst is
filtered as one piece: device memory ≈ T · C · H · W · (8 + 2 · 8) bytes plus the ANN's.

Colour (C = 3) is CBM3D's: the opponent transform (Y, U, V), groups matched on Y (the ANN
runs on the frames' Y planes) and shared by the three channels, each filtered with its own
noise level.

The matching threshold ``tau_match`` (mean squared difference per pixel in 0–255 units,
scaled by (data_range / 255)²: 2500, max(2500, 3.125 σ²) from σ ≈ 28.28 to 40, 25000
above σ = 40, σ in 0–255 units) and
``lambda_3d`` (3.0, 2.8 above σ = 40) are the "fast" preset's stage-1 values
(`clpatch.denoise.bm3d_params`); the 2-D transform is Bior1.5 for 8 × 8 patches, else the
DCT, and the 1-D transform the Walsh–Hadamard.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.buffers import int_buffer, memory_limits
from ..core.errors import DeviceResourceError
from ..core.plans import Plan, check_out
from ..core.runtime import Runtime
from ..core.staging import download
from ..core.upload import check_peak
from ..core.volumes import Volume, as_volume, check_planned, default_data_range
from ..match.ann.params import AnnRequest
from ..match.ann.plan import AnnPlan
from .bm3d_params import (
    channel_sigmas,
    choose_aggregation,
    fixed_point_scales,
    preset_settings,
    stage_params,
)
from .collaborative import FilterKernels
from .peaks import peak_judge
from .strength import Strength

__all__ = ["BurstBM3DPlan", "check_group_size"]

#: Filter launches hold at most this many work-groups.
GROUPS_PER_LAUNCH = 1 << 20
#: The preset whose thresholds (tau_match, lambda_3d) and transforms the burst takes.
PRESET = "fast"


def check_group_size(k: Any) -> int:
    """k for method "bm3d": a power of 2 from 2 to 32 (BM3D's group sizes)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    k = int(k)
    if k < 2 or k > 32 or k & (k - 1):
        raise ValueError(f"k must be a power of 2 from 2 to 32 for method='bm3d' (BM3D's "
                         f"group sizes: 2, 4, 8, 16 or 32), got {k}")
    return k


class BurstBM3DPlan(Plan):
    """BM3D of frame `reference` of bursts of (frames, rows, cols, channels) (channels 1 or
    3), with groups from the clustering ANN of `request` (a checked `AnnRequest`: patch
    size, step, k (the largest group, a power of 2), tile; channels 1: colour is matched on
    Y). stages: 2, or 1 for the basic estimate only. aggregation: None (the device's best),
    "fixed" or "cas" (see `clpatch.denoise.bm3d`). `run(frames, sigma)` or `apply(frames,
    strength)`; `last_events` holds the (stage, event) pairs of the last run. A
    `clpatch.core.plans.Plan` (`clpatch.make_plan("burst", ..., method="bm3d")`), whose
    `enqueue` waits for the frames' peak unless `peak=` was given (the fixed-point scales
    and the default data range need it; see `waits_for_peak`).
    """

    method = "burst"
    input_names = ("frames",)

    def __init__(self, runtime: Runtime, frames: int, rows: int, cols: int, channels: int,
                 request: AnnRequest, reference: int, *, stages: int = 2,
                 aggregation: str | None = None, device_output: bool = False) -> None:
        if channels not in (1, 3):
            raise ValueError(f"frames must have 1 or 3 channels for method='bm3d' (grayscale "
                             f"or RGB), got {channels}")
        if request.channels != 1:
            raise ValueError(f"the burst's ANN matches on one channel (Y for colour), got "
                             f"{request.channels}")
        check_group_size(request.k)
        super().__init__(runtime)
        #: The strength of `enqueue` (`clpatch.make_plan` sets it).
        self.strength: Strength | None = None
        self.frames, self.rows, self.cols, self.channels = frames, rows, cols, channels
        self.colour = channels == 3
        self.reference = reference
        self.device_output = device_output
        self.request = request
        self.aggregation, self.aggregation_reason = choose_aggregation(runtime.profile,
                                                                       aggregation)
        p1, p2, _ = stage_params(PRESET, None, patch_size=request.patch_size,
                                 step=request.step, n=request.k)
        self.params = (p1, p2)[:stages]
        self.matcher = AnnPlan(runtime, frames, rows, cols, 1, request, video=True,
                               reference=reference)
        self.kernels = [FilterKernels(runtime, p, channels=channels,
                                      aggregation=self.aggregation, colour=self.colour,
                                      video=True, exact_variance=p.exact_variance)
                        for p in self.params]
        ctx = runtime.context
        self.ys = int_buffer(ctx, self.matcher.grid_y)
        self.xs = int_buffer(ctx, self.matcher.grid_x)
        self.uploader = self.matcher.uploader       # the frames' check is the ANN's
        self._check_memory()

    def _check_memory(self) -> None:
        plane = self.frames * self.channels * self.rows * self.cols
        item = 8 if self.aggregation == "fixed" else 4
        refs = len(self.matcher.grid_y) * len(self.matcher.grid_x)
        sizes = [plane * 4, plane * 8, plane * 4, plane * 2 * item,
                 refs * self.request.k * 16, self.rows * self.cols * self.channels * 4]
        if self.colour:
            sizes.append(self.frames * self.rows * self.cols * 4)
        largest, total = memory_limits(self.runtime)
        if max(sizes) > largest or sum(sizes) > total:
            raise DeviceResourceError(
                f"a burst of {self.frames} frames of {self.rows}x{self.cols}x{self.channels} "
                f"needs {sum(sizes)} bytes of device memory for method='bm3d' (buffers up to "
                f"{max(sizes)}), above the device's {total} ({largest} per buffer); pass "
                "fewer frames or a smaller crop")

    def scales(self, peak: float, sigmas: np.ndarray) -> list[tuple[float, float]]:
        """(numerator, denominator) fixed-point scales per stage (as `BM3DPlan.scales`:
        a pixel of any frame is reached by the groups of the references within the patch
        size plus twice the ANN's reach, each adding at most n patches)."""
        if self.aggregation != "fixed":
            return [(1.0, 1.0)] * len(self.params)
        out = []
        for p in self.params:
            per_axis = -(-(p.patch_size + 2 * self.matcher.reach) // p.step) + 1
            noise = sigmas * math.sqrt(p.mu2) if p.stage == 2 else sigmas
            out.append(fixed_point_scales(p.stage, per_axis * per_axis * p.n, peak, noise))
        return out

    @property
    def waits_for_peak(self) -> bool:
        """Whether `enqueue` reads the frames' peak |value| before the filters: when the
        plan's strength gives no peak."""
        return self.strength is None or self.strength.peak is None

    def run(self, frames: Any, sigma: float) -> Any:
        """Denoise the reference frame of `frames` (the planned shape): float32 (H, W[, C]),
        NumPy for NumPy input, device array for device input."""
        return self.apply(frames, Strength.check(sigma))

    def enqueue_arrays(self, frames: Any, *, out: Any,
                       wait_for: list[Any] | None) -> tuple[Any, list[Any]]:
        """The plan's `enqueue` (`clpatch.core.plans.Plan`) with its `strength`: the denoised
        reference frame (in `out` when given); without a given peak it waits for the
        frames' (`waits_for_peak`), with one their check against it is deferred."""
        strength = self.planned_strength()
        output = self._launch(as_volume(frames, name="frames", video=True), strength,
                              out)
        last = [self.last_events[-1][1]]
        if strength.peak is not None:
            self.defer_check(last, self._judge(strength.peak), "frames")
        return output, last

    def apply(self, frames: Any, strength: Strength) -> Any:
        """`run` with sigma checked already (`Strength.check`; its data_range, when given,
        scales the matching threshold, else the frames' dtype and peak decide it)."""
        volume = as_volume(frames, name="frames", video=True)
        check_planned(volume, (self.frames, self.rows, self.cols, self.channels),
                      self.device_output, self.runtime.context)
        output = self._launch(volume, strength, None)
        if strength.peak is not None:
            self._judge(strength.peak)(self.matcher.uploader.peak())
        return output

    def _judge(self, given: float) -> Any:
        """The check of a run's measured peak against the given one (and the distances'
        limit)."""
        limit = self.matcher.check_limit()
        return peak_judge(lambda peak: check_peak(peak, limit, "frames"), given, "frames")

    def _launch(self, volume: Volume, strength: Strength, out: Any) -> Any:
        """A run on `volume` (it reads the frames' peak before the filters)."""
        queue, i32, f32 = self.runtime.queue, np.int32, np.float32
        rt, h, w, ch, nf = self.runtime, self.rows, self.cols, self.channels, self.frames
        matcher = self.matcher
        gy, gx, k = len(matcher.grid_y), len(matcher.grid_x), self.request.k
        chunk = matcher.chunk(self.reference, self.reference + 1, 0, gy)
        events: list[tuple[str, Any]] = []

        # Every frame as planar float (opponent colours, and their Y planes for the ANN).
        matcher.uploader.begin()
        noisy, uploads = matcher.upload(volume, chunk, "burst_noisy")
        events.extend(uploads)
        match_on = noisy
        if self.colour:
            match_on = self.pool.get("luma", nf * h * w * 4)
            events.append(("transform", self.kernels[0].opponent(
                queue, (w, h, nf), None, noisy, i32(0), i32(nf), i32(h), i32(w), match_on,
                i32(1))))
        pos = self.pool.get("pos", gy * gx * k * 12)
        dist = self.pool.get("dist", gy * gx * k * 4)
        searched = matcher.enqueue_chunk(match_on, chunk, pos, dist, out_rows=gy)
        events.extend(("search", e) for e in searched)
        peak = strength.peak if strength.peak is not None else matcher.uploader.peak()
        check_peak(peak, matcher.check_limit())

        data_range = strength.data_range
        if data_range is None:
            data_range = default_data_range(volume.dtype, peak)
        settings = preset_settings(PRESET, strength.sigma * 255.0 / data_range)
        tau = (float(settings["tau_match"][0]) * (data_range / 255.0) ** 2
               * self.request.patch_size ** 2)
        sigmas = channel_sigmas(strength.sigma, self.colour)
        scales = self.scales(peak, sigmas)

        item = 8 if self.aggregation == "fixed" else 4
        count = 2 * nf * ch * h * w
        acc = self.pool.get("acc", count * item)
        basic = None
        for s, (params, kern) in enumerate(zip(self.params, self.kernels, strict=True)):
            events.append(("clear", kern.clear(queue, (count,), None, acc, i32(0),
                                               i32(count))))
            if params.stage == 1:
                shrink = [float(settings["lambda_3d"]) * float(v) for v in sigmas]
            else:
                shrink = [params.mu2 * float(v) ** 2 for v in sigmas]
            shrink = (shrink + [0.0, 0.0])[:3]
            images = (noisy,) if basic is None else (noisy, basic)
            tag = str(params.stage)
            per_launch = max(1, GROUPS_PER_LAUNCH // max(1, gx))
            for r0 in range(0, gy, per_launch):
                nrows = min(gy, r0 + per_launch) - r0
                events.append(("filter" + tag, kern.filter(
                    queue, (kern.group, gx, nrows), (kern.group, 1, 1), *images, i32(nf),
                    i32(h), i32(w), i32(0), i32(0), pos, dist, i32(gy), i32(gx), self.ys,
                    self.xs, i32(r0), i32(nrows), i32(0), i32(self.reference), acc, i32(nf),
                    f32(tau), *(f32(v) for v in shrink), f32(scales[s][0]),
                    f32(scales[s][1]))))
            inv = (f32(1.0 / scales[s][0]), f32(1.0 / scales[s][1]))
            if s < len(self.params) - 1:
                # Every frame's basic estimate (defined where the groups put patches; only
                # those pixels are read, by the same groups, in stage 2).
                basic = self.pool.get("basic", nf * ch * h * w * 4)
                events.append(("finalize" + tag, kern.finalize_planar(
                    queue, (w, h, nf), None, acc, i32(h), i32(w), i32(0), i32(nf), i32(0),
                    i32(h), *inv, basic, i32(h), i32(0))))
                continue
            shape = (h, w) if ch == 1 else (h, w, ch)
            head = (acc, i32(h), i32(w), i32(self.reference), i32(1), i32(0), i32(h), *inv)
            if self.device_output:
                output = (rt.empty(shape, np.float32) if out is None
                          else check_out(out, shape, np.float32, rt.context))
                events.append(("finalize" + tag, kern.finalize(
                    queue, (w, h, 1), None, *head, output.data, i32(h), i32(0), i32(0))))
            else:
                out = self.pool.get("out", h * w * ch * 4)
                events.append(("finalize" + tag, kern.finalize(
                    queue, (w, h, 1), None, *head, out, i32(h), i32(0), i32(0))))
                output = np.empty(shape, np.float32)
                download(queue, output, out, shape=shape, wait_for=[events[-1][1]])
        self.last_events = events
        return output
