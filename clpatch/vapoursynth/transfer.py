"""A plane job's device side on one lane (`JobTransfer`): the planes of VapourSynth frames
go to the device once, the results come back once, already in the clip's sample type.

- In: each plane is copied from the frame's own memory into the device array the plan
  reads: GRAY/YUV planes as they are (the plan converts the clip's samples on the device),
  RGB's three planes into one planar array whose transposed view is the plan's `(H, W, 3)`
  input (the plans read any strides), YUV444 with `chroma` as the pseudo-RGB the job makes
  on the host (`PlaneJob.pack`, float32).
- Out: a small kernel (`cl_src/lib/to_plane.cl.mako`) turns the plan's float32 result into
  each output plane in the clip's sample type — rounded to the nearest code (ties to even, as NumPy's
  `rint`) and clamped to [0, peak] for integer formats, as `np.clip(np.rint(x), 0, peak)`
  — and each plane is copied into the output frame's memory. The kernel's program
  comes from the lane runtime's program cache, its kernel object is made per job transfer
  (kernel objects are not thread-safe).

Planes whose rows VapourSynth pads (a stride wider than the row) go through a contiguous
host copy; common widths (multiples of 64 bytes) are copied directly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.cltypes as cltypes

from .formats import ClipFormat
from .jobs import OPPONENT, PlaneJob

__all__ = ["JobTransfer"]

#: The clip's sample type -> (the kernel's OpenCL C type, how it stores a value).
_STORES = {"u1": ("uchar", "integer"), "u2": ("ushort", "integer"), "f4": ("float", "float"),
           "f2": ("ushort", "half")}


def _program(runtime: Any, dtype: np.dtype) -> Any:
    """`cl_src/lib/to_plane.cl.mako` for the clip's sample type, from the runtime's program
    cache (built once per device, kept on disk like every clpatch program)."""
    out_type, store = _STORES[dtype.str[1:]]
    return runtime.programs.get("lib/to_plane.cl.mako", out_type=out_type, store=store)


class JobTransfer:
    """The device arrays and copies of `job` on a lane's `runtime`, for a run of `frames`
    frames (None: one image, the per-frame filters'). `input` is what the plan takes;
    `output` holds the job's planes in the clip's sample type, (planes, [frames,] H, W)."""

    def __init__(self, runtime: Any, job: PlaneJob, fmt: ClipFormat,
                 frames: int | None = None) -> None:
        self.runtime, self.job, self.fmt = runtime, job, fmt
        lead = () if frames is None else (frames,)
        rows, cols = job.shape[:2]
        self.plane_shape = (rows, cols)
        if job.kind == "rgb":
            self._planar = runtime.empty((*lead, 3, rows, cols), job.dtype)
            self.input = self._planar.transpose((1, 2, 0) if frames is None else (0, 2, 3, 1))
        else:
            self._planar = self.input = runtime.empty((*lead, *job.shape), job.dtype)
        self.output = runtime.empty((len(job.planes), *lead, rows, cols), fmt.dtype)
        self.pixels = rows * cols * (frames or 1)
        self._kernel = cl.Kernel(_program(runtime, fmt.dtype), "to_plane")

    def put(self, frame: Any, index: int = 0) -> None:
        """Copy the job's planes of VapourSynth `frame` into frame slot `index` of the input
        (without waiting: the copies keep their host arrays, and so the frame, alive)."""
        job, queue = self.job, self.runtime.queue
        if job.kind == "yuv":
            pieces = [np.ascontiguousarray(job.pack([np.asarray(frame[p]) for p in job.planes]))]
        else:
            pieces = [np.ascontiguousarray(np.asarray(frame[p])) for p in job.planes]
        target, offset = self._planar.base_data, self._planar.offset
        for k, host in enumerate(pieces):
            start = offset + (index * len(pieces) + k) * host.nbytes
            cl.enqueue_copy(queue, target, host, dst_offset=start, is_blocking=False)

    def convert(self, result: Any) -> Any:
        """Enqueue the output planes from the plan's float32 `result` (of `input`'s shape);
        returns the event of the last."""
        job, fmt = self.job, self.fmt
        channels = 3 if len(job.shape) == 3 else 1
        item = fmt.dtype.itemsize
        event = None
        for k in range(len(job.planes)):
            if job.kind == "yuv":
                m, scale, offset = OPPONENT[k], job.scales[k], job.offset if k else 0.0
            else:
                m, scale, offset = np.eye(3)[k], 1.0, 0.0
            event = self._kernel(
                self.runtime.queue, (self.pixels,), None, result.base_data,
                np.uint64(result.offset // 4), np.int32(channels),
                cltypes.make_float4(*(float(v) for v in m), 0.0), np.float32(scale), np.float32(offset),
                np.float32(fmt.peak), self.output.base_data,
                np.uint64(self.output.offset // item + k * self.pixels))
        return event

    def drop_input(self) -> None:
        """Give the input array back to the lane's allocator (the runs that read it are
        enqueued on the lane's in-order queue, ahead of any later use of the memory)."""
        self._planar = self.input = None

    def get(self, queue: Any, frame: Any, index: int = 0, wait_for: Any = None) -> None:
        """Copy output frame `index`'s planes into the writable VapourSynth `frame` (waits)."""
        rows, cols = self.plane_shape
        frames = self.pixels // (rows * cols)
        for k, p in enumerate(self.job.planes):
            target = np.asarray(frame[p])
            start = self.output.offset + (k * frames + index) * rows * cols * target.itemsize
            host = target if target.flags.c_contiguous else np.empty_like(target, order="C")
            cl.enqueue_copy(queue, host, self.output.base_data, src_offset=start,
                            wait_for=wait_for, is_blocking=True)
            if host is not target:
                target[...] = host
