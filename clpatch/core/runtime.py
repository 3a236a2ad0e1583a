"""The `Runtime` every clpatch call runs on: a device with its context, command queue,
profile, compiled-program cache and plan cache, and the default runtime a call without one
uses. Finding and choosing the device is `clpatch.core.devices`'s.

Nothing here runs at import time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as cl_tools

from .devices import is_simulator, select_device
from .inflight import Progress, register
from .kernels import BuildHook, ProgramCache
from .plans import PlanCache
from .profiles import FAMILIES, DeviceProfile, profile_for_device
from .tuning import TuningCache
from .validate import check_int

#: Largest `memory_limit` accepted (bytes; far beyond any device).
MAX_MEMORY_LIMIT = 1 << 60

#: Largest `max_in_flight` accepted.
MAX_IN_FLIGHT_LIMIT = 1 << 16

#: Whether pyopencl takes its unchecked array constructor (see Runtime.empty).
_FAST_ARRAYS = [True]


class Runtime:
    """A device with its context, command queue, profile and compiled-program cache.

    Pass one to any clpatch function (`runtime=`) to choose the device or to share a
    context and queue with the rest of a pipeline. Building one compiles nothing.

    Parameters
    ----------
    device:
        `pyopencl.Device`, `"P:D"`, a device type (`"cpu"`, `"gpu"`, `"accelerator"`) or a
        name substring (see `clpatch.select_device`); default `CLPATCH_DEVICE` or the best GPU.
    queue:
        An existing `pyopencl.CommandQueue` to run on (its device and context are used).
    profile:
        Force a profile family (`"nvidia"`, `"amd"`, `"intel"`, `"cpu"`, `"generic"`) or pass a
        `DeviceProfile`; default: matched from the device (`CLPATCH_PROFILE` forces a family).
    profile_overrides:
        Profile values to replace, e.g. `{"neighbour_table": "unordered"}`.
    profiling:
        Enable OpenCL profiling events on the queue this runtime creates (benchmarks).
    memory_limit:
        Bytes of device memory one call's buffers may take (also the largest buffer); inputs
        needing more are processed in tiles. Default: half the device's memory, each buffer at
        most the device's allocation limit.
    max_in_flight:
        Launches the queue may hold unfinished (default: `clpatch.core.inflight.MAX_IN_FLIGHT`,
        `MAX_IN_FLIGHT_CPU` on a CPU device); a further launch first waits for the oldest.
        This bounds the work left running after Ctrl-C or `cancel()`. Runtimes sharing a
        queue share the bound, the cancel request and the progress hook.
    progress:
        A callable taking a `clpatch.core.inflight.Progress` (see `Runtime.progress`), or None.
    build_progress:
        A callable taking a `clpatch.core.kernels.BuildEvent` for each OpenCL program this
        runtime compiles from source (see `Runtime.build_progress`), or None.

    Notes
    -----
    Stopping a call: `cancel()` from any thread makes the call running on this runtime raise
    `clpatch.Cancelled`; Ctrl-C raises `KeyboardInterrupt` in the main thread. Both are seen
    at a launch or a wait for the device (on a GPU when the launch being waited for ends,
    on a CPU device within about 10 ms); the launches already enqueued
    (at most `max_in_flight`) still run to their end on the device, as long as the engines
    made them (see `clpatch.core.inflight`).
    """

    def __init__(self, device: Any = None, *, queue: Any = None,
                 profile: str | DeviceProfile | None = None,
                 profile_overrides: dict[str, Any] | None = None,
                 profiling: bool = False, memory_limit: int | None = None,
                 max_in_flight: int | None = None,
                 progress: Callable[[Progress], Any] | None = None,
                 build_progress: BuildHook | None = None) -> None:
        if queue is not None:
            if not isinstance(queue, cl.CommandQueue):
                raise TypeError(f"queue must be a pyopencl.CommandQueue, got {type(queue).__name__}")
            if device is not None:
                raise ValueError("pass either device or queue, not both")
            if queue.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE:
                raise ValueError("queue must be an in-order queue: the plans order their "
                                 "launches by the queue as well as by events")
            self.queue = queue
            self.context = queue.context
            self.device = queue.device
        else:
            self.device = select_device(device)
            self.context = cl.Context([self.device])
            props = cl.command_queue_properties.PROFILING_ENABLE if profiling else 0
            self.queue = cl.CommandQueue(self.context, self.device, properties=props)
        self.profiling = bool(self.queue.properties & cl.command_queue_properties.PROFILING_ENABLE)
        limit = (None if max_in_flight is None
                 else check_int("max_in_flight", max_in_flight, 1, MAX_IN_FLIGHT_LIMIT))
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be a callable or None, got {type(progress).__name__}")
        self.build_progress = build_progress
        self._flight = register(self.queue, limit)
        if progress is not None:
            self._flight.hook = progress

        if profile is None:
            profile = os.environ.get("CLPATCH_PROFILE") or None
        if isinstance(profile, DeviceProfile):
            self.profile = profile.with_overrides(**profile_overrides) if profile_overrides else profile
        else:
            if profile is not None and profile not in FAMILIES:
                raise ValueError(f"profile must be one of {FAMILIES} or a DeviceProfile, got {profile!r}")
            self.profile = profile_for_device(self.device, family=profile, overrides=profile_overrides)

        self.memory_limit = (None if memory_limit is None
                             else check_int("memory_limit", memory_limit, 1, MAX_MEMORY_LIMIT))
        self.programs = ProgramCache(self)
        # Device results handed to the caller come from a caching allocator: a buffer the
        # caller drops is reused by a later result instead of returned to the driver (an
        # allocation costs about 25 µs on the H100, as much as a small kernel). `free_held()`
        # gives the held buffers back.
        self.allocator = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(self.queue))
        self._plans = PlanCache()
        self._tuning: TuningCache | None = None

    @classmethod
    def for_queue(cls, queue: Any) -> Runtime:
        """The runtime wrapping an existing queue, reused between calls (the few most
        recently used queues keep theirs, so compiled programs are not rebuilt)."""
        with _default_lock:
            key = queue.int_ptr
            runtime = _queue_runtimes.pop(key, None)
            if runtime is None:
                runtime = cls(queue=queue)
            _queue_runtimes[key] = runtime
            while len(_queue_runtimes) > _QUEUE_RUNTIMES_KEPT:
                _queue_runtimes.pop(next(iter(_queue_runtimes)))
            return runtime

    def cancel(self) -> None:
        """Ask the call running on this runtime to stop (thread-safe; returns at once).

        The call raises `clpatch.Cancelled` in its own thread at its next launch or while
        waiting for the device; the request is cleared when it is raised, and the runtime
        serves the next call normally (its work queues behind the abandoned launches, at
        most `max_in_flight` of them). A request made while no call runs stops the next
        call at its first launch; `clear_cancel()` withdraws it."""
        self._flight.cancel_requested = True

    def clear_cancel(self) -> None:
        """Withdraw a `cancel()` request not yet acted on."""
        self._flight.cancel_requested = False

    @property
    def cancel_requested(self) -> bool:
        """Whether a `cancel()` request is pending (not yet raised as `Cancelled`)."""
        return self._flight.cancel_requested

    @property
    def progress(self) -> Callable[[Progress], Any] | None:
        """The progress hook, or None (then nothing is counted or queried).

        Called in the thread running a call, at launch boundaries and while waiting for
        the device, whenever more launches are seen finished: with a
        `clpatch.core.inflight.Progress` (launches finished since the hook was set, those
        still in flight, the kernel name of the last finished). It is a sign of life for
        a display, not a fraction: the launches of a call are not known in advance. Setting
        it (even to the same callable) restarts the count, so set it before each call to
        count that call's launches. An exception it raises stops the call like a cancel.
        Never called from an OpenCL callback thread."""
        return self._flight.hook

    @progress.setter
    def progress(self, hook: Callable[[Progress], Any] | None) -> None:
        self._flight.hook = hook

    @property
    def build_progress(self) -> BuildHook | None:
        """The build-progress hook, or None (then the process-wide one is used, see
        `clpatch.core.kernels.set_default_build_progress`).

        Called with a `clpatch.core.kernels.BuildEvent` when this runtime starts compiling
        an OpenCL program from source and when the compile ends ("start", then "done" or
        "failed"), in the thread that builds; programs found in memory or in the on-disk
        program cache report nothing. The first call of a kind on a device compiles its
        programs (seconds each on some drivers); `clpatch.warmup` compiles them ahead.
        An exception it raises stops the call."""
        return self._build_progress

    @build_progress.setter
    def build_progress(self, hook: BuildHook | None) -> None:
        if hook is not None and not callable(hook):
            raise TypeError(f"build_progress must be a callable or None, got "
                            f"{type(hook).__name__}")
        self._build_progress = hook

    @property
    def max_in_flight(self) -> int:
        """Launches the queue may hold unfinished (see the constructor); settable."""
        return self._flight.limit

    @max_in_flight.setter
    def max_in_flight(self, value: int) -> None:
        self._flight.limit = check_int("max_in_flight", value, 1, MAX_IN_FLIGHT_LIMIT)

    @property
    def is_simulator(self) -> bool:
        return is_simulator(self.device)

    @property
    def tuning(self) -> TuningCache:
        """The device's tuning cache (`clpatch.core.tuning.TuningCache`), read on first use
        from `CLPATCH_TUNING` or the user cache folder."""
        if self._tuning is None:
            self._tuning = TuningCache(self.device)
        return self._tuning

    def use_tuning(self, path: Any = None) -> TuningCache:
        """Read the tuning cache again, from `path` if given (else the default place); plans
        made under the previous one are dropped."""
        self._plans.clear()
        self._tuning = TuningCache(self.device, path)
        return self._tuning

    def empty(self, shape: tuple[int, ...], dtype: Any) -> cla.Array:
        """A new device array (C order) on this runtime's queue, from its caching allocator.

        pyopencl's checking constructor costs about 10 µs an array on a fast host, a
        tenth of a small search's call; where pyopencl offers its unchecked constructor
        (the keyword `_fast`, used by pyopencl itself), the array is made through it with
        the shape and strides computed here, else through `pyopencl.array.empty`."""
        dtype = np.dtype(dtype)
        if _FAST_ARRAYS[0] and shape and all(d > 0 for d in shape):
            strides, size = [], 1
            for d in reversed(shape):
                strides.append(size * dtype.itemsize)
                size *= d
            try:
                return cla.Array(None, tuple(shape), dtype, strides=tuple(reversed(strides)),
                                 data=self.allocator(size * dtype.itemsize),
                                 allocator=self.allocator, _fast=True, _size=size,
                                 _context=self.context, _queue=self.queue)
            except TypeError:          # a pyopencl without the unchecked constructor
                _FAST_ARRAYS[0] = False
        return cla.empty(self.queue, shape, dtype, allocator=self.allocator)

    def free_held(self) -> None:
        """Give the device memory the plans and the result allocator hold back to the
        driver (plans are dropped; they are made again on the next call)."""
        self._plans.clear()
        self.allocator.free_held()

    def plan_cache(self) -> PlanCache:
        """Per-runtime store for engine plans (compiled programs and buffers kept between
        calls), least recently used first."""
        return self._plans

    def __repr__(self) -> str:
        return (f"Runtime({self.device.platform.name.strip()} | {self.device.name.strip()}, "
                f"profile={self.profile.family})")


_default_lock = threading.RLock()
_default_runtime: Runtime | None = None
_queue_runtimes: dict[int, Runtime] = {}
_QUEUE_RUNTIMES_KEPT = 8


def default_runtime() -> Runtime:
    """The process-wide runtime used when a call passes none (created on first use)."""
    global _default_runtime
    with _default_lock:
        if _default_runtime is None:
            _default_runtime = Runtime()
        return _default_runtime


def resolve_runtime(runtime: Runtime | None, *arrays: Any) -> Runtime:
    """The runtime a call should use: the given one, else the queue of a device-array
    input, else the default runtime."""
    if runtime is not None:
        if not isinstance(runtime, Runtime):
            raise TypeError(f"runtime must be a clpatch.Runtime or None, got {type(runtime).__name__}")
        return runtime
    for array in arrays:
        if isinstance(array, cla.Array) and array.queue is not None:
            return Runtime.for_queue(array.queue)
    return default_runtime()
