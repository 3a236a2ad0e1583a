"""The per-frame filters (BM3D, NL-means without a temporal window): `FrameFilter`, a
`core.std.ModifyFrame` callback.

Each request takes a lane (`clpatch.vapoursynth.lanes`), runs the lane's plan of each plane
job on the frame's planes (one copy to the device, one back: the plan's synchronous call
on the VapourSynth plane's memory) and writes the result into a copy of the frame, in the
clip's format. Requests on other threads run on other lanes at the same time, so their
copies overlap each other's kernels. The plans are `clpatch.make_plan` plans, whose
results are those of the one-shot functions bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .formats import ClipFormat, write_plane
from .jobs import PlaneJob
from .lanes import Lanes

__all__ = ["FrameFilter"]


class FrameFilter:
    """`ModifyFrame` callback: frame n of the clip (and of the guide clip, when `guided`)
    filtered by the plans `make(runtime, job)` of `jobs`."""

    def __init__(self, fmt: ClipFormat, jobs: list[PlaneJob], lanes: Lanes,
                 make: Callable[[Any, PlaneJob], Any], guided: bool = False) -> None:
        self.fmt, self.jobs, self.lanes, self.make, self.guided = fmt, jobs, lanes, make, guided

    def prepare(self) -> None:
        """Make every lane's plans now, when the script builds the filter: bad parameters
        raise here (the first lane's plans are made first), not at the first frame."""
        for lane in self.lanes.open_all():
            for job in self.jobs:
                lane.plan(job.key, lambda rt, job=job: self.make(rt, job))

    def __call__(self, n: int, f: Any) -> Any:
        source, guide = (f[0], f[1]) if self.guided else (f, None)
        results = []
        with self.lanes.lane() as lane:
            for job in self.jobs:
                plan = lane.plan(job.key, lambda rt, job=job: self.make(rt, job))
                image = job.pack([np.asarray(source[p]) for p in job.planes])
                if guide is None:
                    results.append(plan(image))
                else:
                    results.append(plan(image, job.pack([np.asarray(guide[p])
                                                         for p in job.planes])))
        out = source.copy()
        for job, result in zip(self.jobs, results, strict=True):
            for p, values in zip(job.planes, job.unpack(result), strict=True):
                write_plane(out, p, values, self.fmt)
        return out
