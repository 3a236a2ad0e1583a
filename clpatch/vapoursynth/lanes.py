"""Lanes: the runtimes a filter's concurrent frame requests run on.

VapourSynth calls a filter's frame callback from `core.num_threads` threads at once. Each
call takes a free lane — a `clpatch.Runtime` with its own in-order queue, plans and
buffers — for the time it enqueues (and, for the per-frame filters, runs) its work, so
requests do not serialise on one queue and a plan is never used by two threads at once. A
filter opens its lanes when the script builds it (`open_all`, so the first frames do not
wait for runtimes and plans), up to its limit; a request waits while every lane is taken.
All lanes of a device share one OpenCL context per process (`device_context`), so device
arrays move between them without copies. Where the lanes' default memory budgets (half the
device each) could overcommit the device, each lane's `memory_limit` is its share of half
the device's memory: larger frames are then processed in tiles, bit for bit the same.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pyopencl as cl

import clpatch

__all__ = ["Lane", "Lanes", "device_context"]

_CONTEXTS: dict[int, tuple[Any, Any]] = {}
_CONTEXTS_LOCK = threading.Lock()
#: The smallest memory budget a lane is given (bytes).
MIN_LANE_BYTES = 256 << 20


def device_context(device: Any) -> tuple[Any, Any]:
    """(pyopencl device, context) for clpatch's device spec `device` (None: CLPATCH_DEVICE
    or the best GPU; `"P:D"`, a type, a name substring, a pyopencl.Device, or a
    clpatch.Runtime whose context is then used). One context per device and process."""
    if isinstance(device, clpatch.Runtime):
        return device.device, device.context
    found = clpatch.select_device(device)
    with _CONTEXTS_LOCK:
        entry = _CONTEXTS.get(found.int_ptr)
        if entry is None:
            entry = _CONTEXTS[found.int_ptr] = (found, cl.Context([found]))
        return entry


class Lane:
    """One runtime (its queue, plans, buffers) and a queue of its own for read-backs, so a
    frame's download does not wait behind work enqueued after it on the runtime's queue."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.plans: dict[Any, Any] = {}
        self._downloads: Any = None

    def plan(self, key: Any, make: Callable[[Any], Any]) -> Any:
        """The lane's plan under `key`, made by `make(runtime)` the first time."""
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = make(self.runtime)
        return plan

    @property
    def downloads(self) -> Any:
        if self._downloads is None:
            self._downloads = cl.CommandQueue(self.runtime.context, self.runtime.device)
        return self._downloads


class Lanes:
    """Up to `limit` lanes on `device` (see `device_context`), opened as requests need them."""

    def __init__(self, device: Any, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"lanes must be an integer >= 1, got {limit!r}")
        self.device, self.context = device_context(device)
        self.limit = limit
        half = self.device.global_mem_size // 2
        share = max(MIN_LANE_BYTES, half // limit)
        self._memory = share if limit > 1 and share < half else None
        self._free: list[Lane] = []
        self._opened = 0
        self._state = threading.Condition()

    def _open(self) -> Lane:
        queue = cl.CommandQueue(self.context, self.device)
        return Lane(clpatch.Runtime(queue=queue, memory_limit=self._memory))

    def open_all(self) -> list[Lane]:
        """Open every lane now (when the script builds the filter: the first frames then
        find their runtimes, programs and plans ready); returns the free lanes (all of
        them before the first request)."""
        with self._state:
            missing = self.limit - self._opened
            self._opened += missing
        opened = []
        try:
            for _ in range(missing):
                opened.append(self._open())
        finally:
            with self._state:
                self._opened -= missing - len(opened)
                self._free.extend(opened)
                self._state.notify_all()
        with self._state:
            return list(self._free)

    @contextlib.contextmanager
    def lane(self) -> Iterator[Lane]:
        """A free lane for the duration of the block (opened when none is free and fewer
        than `limit` are open, else waited for)."""
        with self._state:
            while not self._free and self._opened >= self.limit:
                self._state.wait()
            lane = self._free.pop() if self._free else None
            if lane is None:
                self._opened += 1
        if lane is None:
            try:
                lane = self._open()
            except BaseException:
                with self._state:
                    self._opened -= 1
                    self._state.notify()
                raise
        try:
            yield lane
        finally:
            with self._state:
                self._free.append(lane)
                self._state.notify()
