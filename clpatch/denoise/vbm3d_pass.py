"""One pass of VBM3D over a band of rows of a run of frames (`BandPass`): the frames go
through rings of device frame slots, and each is searched, filtered and finalized as soon
as the frames it needs are in (`clpatch.denoise.vbm3d` describes the schedule).

A whole frame is one band; frames too large for the device are split into bands
(`clpatch.denoise.vbm3d_tiles`), each its own pass over the frames, all sharing the plan's
buffers (sized for the tallest band). Positions and rows are band coordinates throughout.

A guide video (`clpatch.vbm3d`'s guide, `role`): "match" puts its frames in a ring of their
own that the searches of both stages run on, instead of the noisy frames (stage 1) and the
basic estimate (stage 2); "oracle" puts them in the basic estimate's ring, skips stage 1 and
its accumulator, and stage 2 matches on them and uses them as its Wiener oracle. The guide's
frames go through the same conversion and opponent transform as the noisy ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.staging import download
from ..core.volumes import Volume
from .vbm3d_tiles import Band, Layout

__all__ = ["BandPass", "FrameRef", "VideoSettings"]


@dataclass(frozen=True)
class FrameRef:
    """Frame `index` of a video (NumPy or device), converted on the device band by band."""

    volume: Volume
    index: int


@dataclass(frozen=True)
class VideoSettings:
    """What one video's filtering needs: per-channel sigmas, the fixed-point (numerator,
    denominator) scales per stage, the unit of the matching thresholds, and the peak the
    scales assume when the caller gave none (None: known)."""

    sigmas: np.ndarray
    scales: list[tuple[float, float]]
    tau_unit: float
    bound: float | None


@dataclass
class _Progress:
    """Frames uploaded, next reference frame of stage 1 and 2, next basic estimate and
    output, total frames once the input ended."""

    uploaded: int = 0
    s1: int = 0
    basic: int = 0
    s2: int = 0
    out: int = 0
    total: int | None = None


class BandPass:
    """VBM3D of `plan` (a VBM3DPlan) on one band of a run of frames numbered from 0.

    `upload(frame)` puts the next frame in; `advance(end)` enqueues everything the frames
    in allow (`end`: no frame follows) and yields (t, output rows [a, b) of frame t): a
    float32 array, or None when the plan finalizes into `device_out` (a device video).
    Only frames in `wanted` (None: all) are finalized, and only the references they need
    are searched and filtered; `target(t)`, when given, is the array the rows of frame t
    are copied into. `layout`: the bands `band` is one of (None: the plan's unguided ones);
    `role`: the guide's (None: no guide), whose frames `put_guide` puts in.
    """

    def __init__(self, plan: Any, band: Band, settings: VideoSettings | None,
                 events: list[tuple[str, Any]], *, device_out: Any = None,
                 wanted: range | None = None,
                 target: Callable[[int], np.ndarray] | None = None,
                 layout: Layout | None = None, role: str | None = None) -> None:
        self.plan, self.band, self.settings, self.events = plan, band, settings, events
        self.device_out, self.wanted, self.target = device_out, wanted, target
        self.layout = layout if layout is not None else plan.layout(False)
        self.role = role
        self.rows = band.rows
        self.frame = plan.channels * self.rows * plan.cols       # floats of one frame slot
        pool, item = plan.pool, 8 if plan.aggregation == "fixed" else 4
        held = plan.channels * self.layout.rows * plan.cols      # the tallest band's slot
        self.noisy = pool.get("noisy", plan.slots * held * 4)
        self.guide = pool.get("guide", plan.slots * held * 4) if role == "match" else None
        self.acc = [None if role == "oracle"
                    else pool.get("acc1", plan.acc_slots * held * 2 * item)]
        self.basic = None
        if len(plan.stages) == 2:
            self.basic = pool.get("basic", plan.slots * held * 4)
            self.acc.append(pool.get("acc2", plan.acc_slots * held * 2 * item))
        self.ys = [stage.band_ys(g0, g1, band.y_lo)
                   for stage, (g0, g1) in zip(plan.stages, band.refs, strict=True)]
        self.state = _Progress()

    # ---- frames in -------------------------------------------------------------------------

    def upload(self, frame: FrameRef, guide: FrameRef | None = None) -> None:
        """The next frame into its slot of the noisy ring (and its guide frame into the
        guide's, see `put_guide`); clears its accumulator slot."""
        t = self.state.uploaded
        self.put_frame(frame, t)
        if guide is not None:
            self.put_guide(guide, t)
        if self.acc[0] is not None:
            self._clear(0, t)
        self.state.uploaded += 1

    def put_frame(self, frame: FrameRef, t: int) -> None:
        """The band's rows of `frame` into the slot of frame t of the noisy ring, as planar
        float (opponent colours for colour), converted on the device."""
        self._put(frame, t, self.noisy)

    def put_guide(self, frame: FrameRef, t: int) -> None:
        """The band's rows of guide frame t into its slot of the guide's ring (the basic
        estimate's for the "oracle" role), as `put_frame` does for the noisy frame."""
        if self.role is None:
            raise ValueError("this pass has no guide (role None)")
        self._put(frame, t, self.guide if self.role == "match" else self.basic)

    def _put(self, frame: FrameRef, t: int, ring: Any) -> None:
        plan = self.plan
        slot = t % plan.slots
        volume = frame.volume
        transfers = None if volume.on_device else plan.host_transfers()
        self.events.extend(plan.uploader.convert(
            volume, frame.index, frame.index + 1, self.band.y_lo, self.band.y_hi, ring,
            slot * self.frame, transfers=transfers))
        if plan.colour:
            i32 = np.int32
            self.events.append(("transform", plan.stages[0].opponent(
                plan.runtime.queue, (plan.cols, self.rows, 1), None, ring, i32(slot),
                i32(1), i32(self.rows), i32(plan.cols), ring, i32(0))))

    # ---- the schedule ----------------------------------------------------------------------

    def advance(self, end: bool) -> Iterator[tuple[int, Any]]:
        """Enqueue the work the uploaded frames allow, yielding the outputs in order."""
        plan, state = self.plan, self.state
        radius, two = plan.radius, len(plan.stages) == 2
        if end and state.total is None:
            state.total = state.uploaded
        progress = True
        while progress:
            progress = False
            # Stage 1 for every reference frame whose frames ahead are in.
            while state.s1 < state.uploaded and (state.s1 + radius < state.uploaded or end):
                self._reference_frame(0, state.s1)
                state.s1 += 1
            # Basic estimates no stage-1 group can reach any more (with two stages, only
            # while the frame's stage-2 accumulator slot is free).
            while (state.basic < state.s1
                   and (state.basic + radius < state.s1 or (end and state.s1 == state.total))
                   and (not two or state.basic - state.out < plan.acc_slots)):
                if two:
                    self._finalize_basic(state.basic)
                elif self._wanted(state.basic):
                    yield state.basic, self._output(0, state.basic)
                state.basic += 1
                progress = True
            if not two:
                continue
            while state.s2 < state.basic and (state.s2 + radius < state.basic
                                              or (end and state.basic == state.total)):
                self._reference_frame(1, state.s2)
                state.s2 += 1
                progress = True
            while state.out < state.s2 and (state.out + radius < state.s2
                                            or (end and state.s2 == state.total)):
                if self._wanted(state.out):
                    yield state.out, self._output(1, state.out)
                state.out += 1
                progress = True

    def _wanted(self, t: int) -> bool:
        return self.wanted is None or t in self.wanted

    def _needed(self, s: int, t: int) -> bool:
        """Whether reference frame t of stage s + 1 contributes to a wanted output: within
        radius of them in the last stage, 3 · radius in stage 1 of two (its groups reach
        the basic estimates that stage 2's groups read)."""
        if self.wanted is None:
            return True
        margin = self.plan.radius * (2 * (len(self.plan.stages) - 1 - s) + 1)
        return self.wanted.start - margin <= t < self.wanted.stop + margin

    # ---- kernels ---------------------------------------------------------------------------

    def search(self, s: int, t: int, last: int, guide: Any) -> tuple[Any, Any]:
        """Enqueue the search of the band's references of frame t in stage s + 1 among
        frames up to `last` of the ring `guide` (a stage on given matches copies them
        instead): (positions, distances) buffers."""
        plan = self.plan
        stage = plan.stages[s]
        g0, g1 = self.band.refs[s]
        gy, gx, n = g1 - g0, len(stage.grid_x), stage.params.n
        pos = plan.pool.get(f"pos{s}", self.layout.refs[s] * gx * n * 12)
        dist = plan.pool.get(f"dist{s}", self.layout.refs[s] * gx * n * 4)
        if stage.given is not None:
            self.events.append((f"given{stage.params.stage}",
                                stage.copy_band(t, g0, g1, pos, dist)))
            return pos, dist
        t_lo, t_hi = max(0, t - plan.radius), min(last, t + plan.radius)
        self.events.append((f"search{stage.params.stage}", stage.search_band(
            guide, plan.slots, self.rows, self.ys[s], gy, t, t_lo, t_hi, pos, dist)))
        return pos, dist

    def _clear(self, s: int, t: int) -> None:
        count = 2 * self.frame
        self.events.append(("clear", self.plan.stages[s].clear(
            self.plan.runtime.queue, (count,), None, self.acc[s],
            np.int32((t % self.plan.acc_slots) * count), np.int32(count))))

    def _reference_frame(self, s: int, t: int) -> None:
        """Search and filter the band's references of frame t in stage s + 1 (stage 1 is
        skipped when the guide is the basic estimate)."""
        if not self._needed(s, t) or self.acc[s] is None:
            return
        plan, settings = self.plan, self.settings
        i32, f32 = np.int32, np.float32
        stage = plan.stages[s]
        p = stage.params
        g0, g1 = self.band.refs[s]
        gy, gx = g1 - g0, len(stage.grid_x)
        last = (self.state.total if self.state.total is not None else self.state.uploaded) - 1
        matched = self.noisy if s == 0 else self.basic        # the "oracle" guide is basic
        if self.role == "match":
            matched = self.guide
        pos, dist = self.search(s, t, last, matched)
        if p.stage == 1:
            shrink = [p.lambda_3d * float(v) for v in settings.sigmas]
        else:
            shrink = [float(v) ** 2 for v in settings.sigmas]
        shrink = (shrink + [0.0, 0.0])[:3]
        tau = p.tau_match * settings.tau_unit * p.patch_size ** 2
        images = (self.noisy, self.basic) if p.stage == 2 else (self.noisy,)
        scale = settings.scales[s]
        self.events.append(("filter" + str(p.stage), stage.filter(
            plan.runtime.queue, (stage.work_group, gx, gy), (stage.work_group, 1, 1), *images,
            i32(plan.slots), i32(self.rows), i32(plan.cols), i32(0), i32(0), pos, dist, i32(gy),
            i32(gx), self.ys[s], stage.xs, i32(0), i32(gy), i32(0), i32(t), self.acc[s],
            i32(plan.acc_slots), f32(tau), *(f32(v) for v in shrink), f32(scale[0]),
            f32(scale[1]))))

    def _finalize_args(self, s: int, t: int, y_first: int, rows: int) -> tuple[Any, ...]:
        i32, f32 = np.int32, np.float32
        scale = self.settings.scales[s]
        return (self.acc[s], i32(self.rows), i32(self.plan.cols), i32(t % self.plan.acc_slots),
                i32(1), i32(y_first), i32(rows), f32(1.0 / scale[0]), f32(1.0 / scale[1]))

    def _finalize_basic(self, t: int) -> None:
        """The basic estimate of frame t into its slot of the basic ring; frees the frame's
        stage-1 accumulator slot and clears its stage-2 one. (The "oracle" guide is the basic
        estimate, in the ring since its upload: only the clearing is left.)"""
        plan, i32 = self.plan, np.int32
        if self.acc[0] is None:
            self._clear(1, t)
            return
        slot = t % plan.slots
        self.events.append(("finalize1", plan.stages[0].finalize_planar(
            plan.runtime.queue, (plan.cols, self.rows, 1), None,
            *self._finalize_args(0, t, 0, self.rows), self.basic, i32(self.rows),
            i32(slot * plan.channels * self.rows))))
        self._clear(1, t)

    def _output(self, s: int, t: int) -> Any:
        """Output rows [a, b) of frame t, finalized from stage s + 1's accumulator."""
        plan, band, i32 = self.plan, self.band, np.int32
        queue = plan.runtime.queue
        stage = plan.stages[s]
        rows = band.b - band.a
        head = self._finalize_args(s, t, band.a - band.y_lo, rows)
        if self.device_out is not None:
            self.events.append((f"finalize{s + 1}", stage.finalize(
                queue, (plan.cols, rows, 1), None, *head, self.device_out.data, i32(plan.rows),
                i32(band.a), i32(t))))
            return None
        out = plan.pool.get("out", rows * plan.cols * plan.channels * 4)
        self.events.append((f"finalize{s + 1}", stage.finalize(
            queue, (plan.cols, rows, 1), None, *head, out, i32(rows), i32(0), i32(0))))
        shape = (rows, plan.cols) if plan.channels == 1 else (rows, plan.cols, 3)
        frame = self.target(t) if self.target is not None else np.empty(shape, np.float32)
        download(queue, frame, out, shape=shape, wait_for=[self.events[-1][1]],
                 transfers=plan.transfers)
        return frame
