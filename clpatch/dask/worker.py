"""The runtime of the process a piece runs in: opened lazily, once per process, never pickled.

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

A process runs one piece on its device at a time (a lock around every device call): plans
and their buffers are reused between pieces, and one queue gains nothing from several
threads. Give each worker one thread per device, or more threads if reading and writing
chunks should overlap the device.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pyopencl as cl

from ..core.devices import is_simulator, list_devices
from ..core.runtime import Runtime

__all__ = ["RESOURCE", "device_spec", "run_on_device", "use_runtime", "worker_runtime"]

#: The Dask worker resource naming a worker's GPU (its amount is the GPU's index).
RESOURCE = "clpatch-device"

T = TypeVar("T")

_LOCK = threading.Lock()
_RUNTIME: list[Runtime] = []


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


def worker_runtime() -> Runtime:
    """This process's runtime, opened on first use (see the module doc)."""
    with _LOCK:
        if not _RUNTIME:
            _RUNTIME.append(Runtime(device_spec()))
        return _RUNTIME[0]


def use_runtime(runtime: Runtime) -> None:
    """Make `runtime` this process's (the command line's --device, or a caller's own)."""
    with _LOCK:
        _RUNTIME[:] = [runtime]


def run_on_device(fn: Callable[[Runtime], T]) -> T:
    """`fn(runtime)` with this process's runtime, one call at a time per process."""
    runtime = worker_runtime()
    with _LOCK:
        return fn(runtime)
