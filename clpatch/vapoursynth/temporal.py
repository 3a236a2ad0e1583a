"""The temporal filters (VBM3D, NL-means with a temporal window): `ChunkFilter`, a
`core.std.ModifyFrame` callback that denoises the clip by chunks of frames.

What clpatch's video functions give at frame t depends on the input frames within a halo
around it, truncated at the video's ends (not mirrored or repeated): t ± temporal_window
for NL-means; t ± 4·radius for VBM3D (stage 1 aggregates a group into every frame it
draws from, radius frames either side, and stage 2 searches the basic estimates of the
frames within radius, each of them made from frames 2·radius further). So a chunk of output
frames [t0, t1) is one whole-video call on the input frames [t0 − halo, t1 + halo) clamped
to the clip: its frames [t0, t1) are those of `clpatch.vbm3d` (resp. `nlmeans_video`) on
the whole clip, bit for bit, whatever order VapourSynth asks for them in.

The filter is a ModifyFrame whose further clips give, for frame n, the input frames of
n's chunk (`chunk_input`: the clip shifted and held on each chunk's first frame), so
VapourSynth fetches them in parallel before calling the filter. The first request of a
chunk copies them into one device array on a lane, enqueues the plan
(`clpatch.make_plan` on device arrays: nothing waits for the device) and the conversion of
its result to the clip's sample type (`clpatch.vapoursynth.transfer`), and gives the lane
back; every request of the chunk then reads its own frame's planes back on the lane's
read-back queue once the conversion is done: one copy each way. When a chunk
is first asked for while the previous one is known, the next chunk is enqueued too (its
frames fetched one by one with `get_frame`, which lets VapourSynth run other work on the
thread's behalf while it waits), so the device holds the next chunk's work while the
frames of this one are read back.
A chunk is dropped when each of its frames has been read back once (VapourSynth's cache
keeps the frames; a frame asked for again after that recomputes its chunk), or when more
than `MAX_CHUNKS` are held. The halo frames of a chunk are computed and discarded:
`chunk_frames` (default `CHUNK_HALOS` halos, at least `MIN_CHUNK`, the whole chunk within
`CHUNK_BYTES` of results on the device) trades that waste against device memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import numpy as np
import vapoursynth as vs

from .formats import ClipFormat
from .jobs import PlaneJob
from .lanes import Lanes
from .transfer import JobTransfer

__all__ = ["ChunkFilter", "chunk_length"]

#: Output frames per chunk, in halos (each chunk computes 2 halos it discards).
CHUNK_HALOS = 8
#: The fewest output frames of a chunk.
MIN_CHUNK = 32
#: The most bytes of float32 results a chunk's run holds on the device (halo included).
CHUNK_BYTES = 2 << 30
#: The most chunks held at once.
MAX_CHUNKS = 4


def chunk_length(halo: int, frame_bytes: int, given: int | None = None) -> int:
    """Output frames per chunk (`given`, else the default of the module doc)."""
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise ValueError(f"chunk_frames must be an integer >= 1, got {given!r}")
        return given
    fits = CHUNK_BYTES // max(1, frame_bytes) - 2 * halo
    return max(1, halo, min(max(MIN_CHUNK, CHUNK_HALOS * halo), fits))


class _Chunk:
    """Output frames [t0, t1) from input frames [f0, f1); `runs`: per plane job its
    transfer (holding the output planes), the event of their conversion and the lane it
    was enqueued on; `error` what computing it raised."""

    def __init__(self, t0: int, t1: int, f0: int, f1: int) -> None:
        self.t0, self.t1, self.f0, self.f1 = t0, t1, f0, f1
        self.ready = threading.Event()
        self.runs: list[tuple[Any, Any, Any]] = []
        self.error: BaseException | None = None
        self.delivered: set[int] = set()


class ChunkFilter:
    """`ModifyFrame` callback: frame n of `clip` from the chunk that holds it; `make(runtime,
    job, frames)` is the plan of a job for a run of `frames` frames."""

    def __init__(self, clip: Any, fmt: ClipFormat, jobs: list[PlaneJob], lanes: Lanes,
                 make: Callable[[Any, PlaneJob, int], Any], halo: int, length: int) -> None:
        self.clip, self.fmt, self.jobs, self.lanes, self.make = clip, fmt, jobs, lanes, make
        self.halo, self.length = halo, length
        self.count = clip.num_frames
        self._chunks: OrderedDict[int, _Chunk] = OrderedDict()
        self._asked: deque[int] = deque(maxlen=2 * MAX_CHUNKS)   # chunks asked for lately
        self._lock = threading.Lock()

    def bounds(self, c: int) -> tuple[int, int, int, int]:
        """(t0, t1, f0, f1) of chunk `c`."""
        t0, t1 = c * self.length, min(self.count, (c + 1) * self.length)
        return t0, t1, max(0, t0 - self.halo), min(self.count, t1 + self.halo)

    def prepare(self) -> None:
        """Make every lane's plans for the first chunk now, when the script builds the
        filter: bad parameters raise here, not at the first frame."""
        _, _, f0, f1 = self.bounds(0)
        for lane in self.lanes.open_all():
            for job in self.jobs:
                lane.plan((job.key, f1 - f0), lambda rt, job=job: self.make(rt, job, f1 - f0))

    def _take(self, c: int) -> tuple[_Chunk, bool]:
        """Chunk `c` and whether the caller must compute it (it was missing)."""
        with self._lock:
            if not self._asked or self._asked[-1] != c:
                self._asked.append(c)
            chunk = self._chunks.get(c)
            if chunk is not None:
                self._chunks.move_to_end(c)
                return chunk, False
            chunk = self._chunks[c] = _Chunk(*self.bounds(c))
            while len(self._chunks) > MAX_CHUNKS:
                self._chunks.popitem(last=False)
            return chunk, True

    def _next_missing(self, c: int) -> bool:
        """Whether chunk c + 1 should be enqueued ahead: it exists in the clip, is not held,
        and the requests go forward (chunk c − 1 was asked for lately, or c is the first)."""
        with self._lock:
            return (c + 1) * self.length < self.count and c + 1 not in self._chunks and (
                c == 0 or c - 1 in self._asked)

    def node(self) -> Any:
        """The filter's clip: ModifyFrame of the clip, with `chunk_inputs` as further clips so
        that VapourSynth fetches a chunk's input frames in parallel, before the callback."""
        count = min(self.length, self.count) + 2 * self.halo
        self._first = -self.halo            # input k of frame n: frame c0(n) + first + k
        inputs = [chunk_input(self.clip, self.length, k + self._first) for k in range(count)]
        return vs.core.std.ModifyFrame(self.clip, [self.clip, *inputs], self)

    def __call__(self, n: int, f: Any) -> Any:
        c = n // self.length
        chunk, mine = self._take(c)
        if mine:
            start = c * self.length + self._first
            self._compute(chunk, [f[1 + i - start] for i in range(chunk.f0, chunk.f1)])
        if self._next_missing(c):
            ahead, mine = self._take(c + 1)
            if mine:
                self._compute(ahead)
        chunk.ready.wait()
        if chunk.error is not None:
            raise chunk.error
        out = f[0].copy()
        for io, event, lane in chunk.runs:
            io.get(lane.downloads, out, n - chunk.f0, wait_for=[event])
        self._delivered(c, chunk, n)
        return out

    def _delivered(self, c: int, chunk: _Chunk, n: int) -> None:
        with self._lock:
            chunk.delivered.add(n)
            if len(chunk.delivered) == chunk.t1 - chunk.t0 and self._chunks.get(c) is chunk:
                del self._chunks[c]

    def _compute(self, chunk: _Chunk, frames: list[Any] | None = None) -> None:
        """Copy the chunk's input `frames` (None: fetch them from the clip, one by one) to the
        device and enqueue its runs and the conversion of their results to the clip's
        sample type."""
        try:
            if frames is None:
                frames = [self.clip.get_frame(i) for i in range(chunk.f0, chunk.f1)]
            count = len(frames)
            with self.lanes.lane() as lane:
                for job in self.jobs:
                    plan = lane.plan((job.key, count),
                                     lambda rt, job=job: self.make(rt, job, count))
                    io = JobTransfer(lane.runtime, job, self.fmt, count)
                    for i, frame in enumerate(frames):
                        if not self.fmt.integer:
                            for p in job.planes:
                                _check_float(np.asarray(frame[p]), self.fmt.fixed_peak,
                                             chunk.f0 + i)
                        io.put(frame, i)
                    result, _ = plan.enqueue(io.input)
                    event = io.convert(result)
                    io.drop_input()
                    chunk.runs.append((io, event, lane))
        except BaseException as exc:  # raised to every request of the chunk
            chunk.error = exc
        finally:
            chunk.ready.set()


def chunk_input(clip: Any, length: int, shift: int) -> Any:
    """The clip whose frame n is `clip`'s frame c0 + shift, clamped to the clip, c0 = n −
    n mod `length` (the first frame of n's chunk)."""
    count = clip.num_frames
    if shift > 0:
        moved = clip[-1] * count if shift >= count else clip[shift:] + clip[-1] * shift
    elif shift < 0:
        moved = clip[0] * count if -shift >= count else clip[0] * -shift + clip[:count + shift]
    else:
        moved = clip
    if length == 1:
        return moved
    return vs.core.std.SelectEvery(moved, cycle=length, offsets=[0] * length)[:count]


def _check_float(image: np.ndarray, peak: float, index: int) -> None:
    """A float frame's values must be finite and within the peak the filter assumes."""
    top = max(abs(float(np.min(image))), abs(float(np.max(image))))
    if not np.isfinite(top):
        raise ValueError(f"frame {index} contains NaN or infinite values")
    if top > peak:
        raise ValueError(f"frame {index} has values up to {top:.6g}; float clips must stay "
                         f"within ±{peak:g} (VapourSynth's float range is [0, 1])")
