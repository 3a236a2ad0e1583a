"""The runtimes of the process a piece runs in: opened lazily, never pickled.

Which device a process uses, first match wins:

1. `CLPATCH_DEVICE` in the process's environment (any form `clpatch.select_device` takes);
2. a Dask worker resource `clpatch-device=N`: the worker's N-th GPU in `clpatch devices`
   order (``dask worker --resources "clpatch-device=1"``; the amount carries the index);
3. on a Dask worker whose name is an integer (``LocalCluster`` numbers its workers 0, 1, …):
   the host's GPUs round-robin by that number, so one worker per GPU on a multi-GPU host
   works out of the box;
4. otherwise the default device (`clpatch.Runtime()`).

`use_runtime(runtime)` sets a process's runtime explicitly instead (the command line's
--device does, for chunks run in its own process).

Lanes: a piece's call spends most of its time on the host (joining its sub-window, copying
it to and from pinned memory, page faults of its result), during which one call leaves the
device idle. So a process runs up to `lanes()` calls at once, each on a lane of its own: a
runtime with its own in-order queue, plans and buffers, all lanes sharing the first one's
context. A call takes a free lane, opening one while fewer than `lanes()` are open, else it
waits for one. `lanes()` is `CLPATCH_DASK_LANES` when set, else on a Dask worker its thread
count (at most `MAX_LANES`), else 1: give each worker as many threads as calls it should
overlap. On an H200, a 16384² image in 2048² chunks with BM3D (fast) took 2.08 s on one
worker of one thread and 1.16-1.18 s with three or four (NL-means "fixed" 0.97 s and
0.62 s with three): one call at a time leaves much of a GPU unused. A runtime given by
`use_runtime` is the process's only lane.

Each lane may take what one runtime takes of the device's memory (a buffer up to the
allocation limit, half the memory in all); where `lanes()` such halves would not leave every
lane a largest buffer, each lane's `memory_limit` becomes its share of half the memory
instead (calls that need more run in tiles, bit for bit the same).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pyopencl as cl

from ..core.buffers import MAX_BUFFER_BYTES
from ..core.devices import is_simulator, list_devices
from ..core.runtime import Runtime
from ..core.validate import check_int

__all__ = ["LANES_ENV", "MAX_LANES", "RESOURCE", "device_spec", "lanes", "open_lanes",
           "run_on_device", "use_runtime", "worker_runtime"]

#: The Dask worker resource naming a worker's GPU (its amount is the GPU's index).
RESOURCE = "clpatch-device"
#: The environment variable setting the lanes of a process (see the module doc).
LANES_ENV = "CLPATCH_DASK_LANES"
#: The most lanes a worker's thread count opens (on the H200 a fourth lane gained 2 % over
#: three with BM3D; more were not measured).
MAX_LANES = 4

T = TypeVar("T")

_STATE = threading.Condition()
_OPEN: list[Runtime] = []       # every lane opened, the first one's context shared
_FREE: list[Runtime] = []       # the lanes no call holds
_FIXED: list[bool] = [False]    # a runtime given by use_runtime: the only lane


def _gpus() -> list[str]:
    """`P:D` indices of the host's GPUs, in `clpatch devices` order (not simulators: Oclgrind
    calls itself a GPU)."""
    return [e.index for e in list_devices()
            if e.device.type & cl.device_type.GPU and not is_simulator(e.device)]


def device_spec(worker: Any = None) -> str | None:
    """The device spec of this process (see the module doc); None for the default device.
    `worker`: the Dask worker (default: the current one, if this process is a worker)."""
    if os.environ.get("CLPATCH_DEVICE", "").strip():
        return None                      # Runtime() reads it
    if worker is None:
        worker = _current_worker()
    if worker is None:
        return None
    resources = getattr(getattr(worker, "state", worker), "total_resources", None) or {}
    if RESOURCE in resources:
        index = int(resources[RESOURCE])
        gpus = _gpus()
        if not 0 <= index < len(gpus):
            raise ValueError(f"worker resource {RESOURCE}={resources[RESOURCE]} names GPU {index}, "
                             f"but this host has {len(gpus)} GPU(s)")
        return gpus[index]
    name = getattr(worker, "name", None)
    if isinstance(name, int) or (isinstance(name, str) and name.isdigit()):
        gpus = _gpus()
        if gpus:
            return gpus[int(name) % len(gpus)]
    return None


def _current_worker() -> Any:
    try:
        from distributed import get_worker
    except ImportError:
        return None
    try:
        return get_worker()
    except ValueError:                   # not running inside a worker
        return None


def lanes(worker: Any = None) -> int:
    """How many calls this process runs on its device at once (see the module doc).
    `worker`: the Dask worker (default: the current one, if this process is a worker)."""
    if _FIXED[0]:
        return 1
    text = os.environ.get(LANES_ENV, "").strip()
    if text:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{LANES_ENV} must be an integer, got {text!r}") from None
        return check_int(LANES_ENV, value, 1, 64)
    if worker is None:
        worker = _current_worker()
    threads = getattr(getattr(worker, "state", None), "nthreads", None)
    return max(1, min(MAX_LANES, int(threads))) if threads else 1


def _open_lane(count: int) -> Runtime:
    """A new lane of `count`: the first one on this process's device, later ones with a
    queue of their own on its context (see the module doc for their memory)."""
    if not _OPEN:
        runtime = Runtime(device_spec())
    else:
        first = _OPEN[0]
        queue = cl.CommandQueue(first.context, first.device, properties=first.queue.properties)
        runtime = Runtime(queue=queue, profile=first.profile)
    if count > 1:
        profile = runtime.profile
        share = profile.global_mem_size // (2 * count)
        if share < min(profile.max_mem_alloc_size, MAX_BUFFER_BYTES):
            for lane in (*_OPEN, runtime):
                if lane.memory_limit is None or lane.memory_limit > share:
                    lane.memory_limit = share
    return runtime


def open_lanes() -> int:
    """How many lanes this process has opened so far."""
    with _STATE:
        return len(_OPEN)


def worker_runtime() -> Runtime:
    """This process's first lane, opened on first use (see the module doc)."""
    with _STATE:
        if not _OPEN:
            _OPEN.append(_open_lane(1))
            _FREE.append(_OPEN[0])
        return _OPEN[0]


def use_runtime(runtime: Runtime | None) -> None:
    """Make `runtime` this process's only lane (the command line's --device, or a caller's
    own); None forgets the process's lanes (they open again on the next call, e.g. after
    `CLPATCH_DEVICE` changed). Lanes in use finish their calls first."""
    with _STATE:
        while len(_FREE) < len(_OPEN):
            _STATE.wait()
        _OPEN[:] = [] if runtime is None else [runtime]
        _FREE[:] = list(_OPEN)
        _FIXED[0] = runtime is not None
        _STATE.notify_all()


def run_on_device(fn: Callable[[Runtime], T]) -> T:
    """`fn(runtime)` on a free lane of this process (see the module doc)."""
    limit = lanes()
    with _STATE:
        while not _FREE and len(_OPEN) >= limit:
            _STATE.wait()
        if _FREE:
            runtime = _FREE.pop()
        else:
            runtime = _open_lane(limit)
            _OPEN.append(runtime)
    try:
        return fn(runtime)
    finally:
        with _STATE:
            _FREE.append(runtime)
            _STATE.notify()
