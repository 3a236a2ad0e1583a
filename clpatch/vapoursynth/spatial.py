"""The per-frame filters (BM3D, NL-means without a temporal window): `FrameFilter`, a
`core.std.ModifyFrame` callback.

Each request takes a lane (`clpatch.vapoursynth.lanes`) and, for each plane job, copies the
frame's planes to the device (`clpatch.vapoursynth.transfer`), enqueues the lane's plan
(`clpatch.make_plan` on device arrays: its results are those of the one-shot functions bit
for bit), turns the result into the clip's sample type on the device and copies it into a
copy of the frame: one copy each way, one wait per job. Requests on other threads run on
other lanes at the same time, so their copies overlap each other's kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .formats import ClipFormat
from .jobs import PlaneJob
from .lanes import Lane, Lanes
from .transfer import JobTransfer

__all__ = ["FrameFilter"]


class FrameFilter:
    """`ModifyFrame` callback: frame n of the clip (and of the guide clip, when `guided`)
    filtered by the plans `make(runtime, job)` of `jobs`."""

    def __init__(self, fmt: ClipFormat, jobs: list[PlaneJob], lanes: Lanes,
                 make: Callable[[Any, PlaneJob], Any], guided: bool = False) -> None:
        self.fmt, self.jobs, self.lanes, self.make, self.guided = fmt, jobs, lanes, make, guided

    def _parts(self, lane: Lane, job: PlaneJob) -> tuple[Any, JobTransfer, JobTransfer | None]:
        """The lane's plan of `job` and its transfers (the image's, the guide's)."""
        plan = lane.plan(job.key, lambda rt: self.make(rt, job))
        io = lane.plan(("io", job.key), lambda rt: JobTransfer(rt, job, self.fmt))
        guide = (lane.plan(("guide", job.key), lambda rt: JobTransfer(rt, job, self.fmt))
                 if self.guided else None)
        return plan, io, guide

    def prepare(self) -> None:
        """Make every lane's plans now, when the script builds the filter: bad parameters
        raise here (the first lane's plans are made first), not at the first frame."""
        for lane in self.lanes.open_all():
            for job in self.jobs:
                self._parts(lane, job)

    def __call__(self, n: int, f: Any) -> Any:
        source, guide_frame = (f[0], f[1]) if self.guided else (f, None)
        out = source.copy()
        with self.lanes.lane() as lane:
            for job in self.jobs:
                plan, io, guide = self._parts(lane, job)
                io.put(source)
                if guide is None:
                    result, _ = plan.enqueue(io.input)
                else:
                    guide.put(guide_frame)
                    result, _ = plan.enqueue(io.input, guide.input)
                io.convert(result)
                io.get(lane.runtime.queue, out)
                plan.check()            # a float frame beyond the assumed peak raises here
        return out
