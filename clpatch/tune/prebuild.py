"""Building the programs of many search configurations at once, for `clpatch autotune`
(see `Prebuilder`): worker processes fill the on-disk program cache, threads load it."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
from collections.abc import Iterable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import pyopencl as cl

from ..core.devices import list_devices
from ..core.errors import ClpatchError
from ..core.kernels import cache_dir
from ..core.profiles import DeviceProfile
from ..core.runtime import Runtime
from ..match.window.config import SearchConfig, SearchRequest, choose_search, config_to_json
from ..match.window.plan import SearchPlan

log = logging.getLogger("clpatch")


def knobs(config: SearchConfig) -> tuple:
    return tuple(config_to_json(config).items())


def new_plan(runtime: Runtime, size: tuple[int, int], request: SearchRequest,
              config: SearchConfig) -> SearchPlan:
    rows, cols = size
    full = choose_search(request, runtime.profile, config)
    return SearchPlan(runtime, 1, rows, cols, request.channels, request, full, device_output=True)


# Worker processes of the "processes" builder: each has its own runtime on the same device
# and fills the on-disk program cache that the tuning process then loads from.
_worker_runtime: Runtime | None = None


def _worker_start(device: str, profile: dict[str, Any]) -> None:
    global _worker_runtime
    _worker_runtime = Runtime(device, profile=DeviceProfile(**profile))


def _worker_build(size: tuple[int, int], request: SearchRequest, config: SearchConfig) -> None:
    try:
        new_plan(_worker_runtime, size, request, config)
    except Exception:  # noqa: BLE001 - the tuning process meets the error again and records it
        pass


def _device_index(runtime: Runtime) -> str | None:
    for entry in list_devices():
        if entry.device == runtime.device:
            return entry.index
    return None


# Device memory each build process may take for its context (a CUDA context takes a few
# hundred MB): fewer processes on small devices, so the timed plans never run short.
MEMORY_PER_BUILD_PROCESS = 4 << 30


class Prebuilder:
    """Builds the plans (and so the programs) of a stage's configurations concurrently.

    `processes` (the default): worker processes, each with its own context and driver
    instance, build the programs and store their binaries in the on-disk program cache;
    the tuning process then loads the binaries (in threads) and constructs the plans. On
    the H100 (NVIDIA OpenCL 580) 8 processes build 0.16-0.30 s per configuration against
    0.58 s one at a time. `threads`: a pool of threads constructs the plans in the tuning
    process; the program cache builds different programs at once and pyopencl releases the
    GIL while the driver compiles, but the drivers serialise most of the work inside one
    process: 0.47 s per configuration with 8 threads on the H100, and none of it overlaps
    on PoCL (one compiler lock per process). Threads are the fallback where processes
    cannot help: no disk cache (simulators, CLPATCH_NO_DISK_CACHE=1), a device that cannot
    be named to a new process, under 8 GB of device memory, or a worker that died.
    Failures are kept and raised again when the configuration is timed, so it is rejected
    with the same reason as without prebuilding.
    """

    def __init__(self, runtime: Runtime, size: tuple[int, int], jobs: int, how: str) -> None:
        self.runtime, self.size, self.jobs = runtime, size, jobs
        self.failures: dict[tuple, Exception] = {}
        self._threads: Executor | None = None
        self._processes: Executor | None = None
        if how not in ("threads", "processes"):
            raise ValueError(f"builds must be 'threads' or 'processes', got {how!r}")
        workers = min(jobs, runtime.profile.global_mem_size // MEMORY_PER_BUILD_PROCESS)
        device = _device_index(runtime) if how == "processes" and workers > 1 else None
        self.how = "processes" if (device is not None and cache_dir() is not None
                                   and not runtime.is_simulator) else "threads"
        if jobs > 1:
            self._threads = ThreadPoolExecutor(jobs, thread_name_prefix="clpatch-build")
            if self.how == "processes":
                self._processes = ProcessPoolExecutor(
                    workers, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_worker_start, initargs=(device, {
                        f.name: (dict(v) if f.name in ("origins", "notes") else v)
                        for f in dataclasses.fields(runtime.profile)
                        for v in (getattr(runtime.profile, f.name),)}))

    def close(self) -> None:
        for pool in (self._threads, self._processes):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def _plan_or_failure(self, request: SearchRequest, knobs: tuple, config: SearchConfig) -> None:
        try:
            new_plan(self.runtime, self.size, request, config)
        except (ValueError, ClpatchError, cl.Error) as exc:
            self.failures[(request, knobs)] = exc

    def prebuild(self, request: SearchRequest, configs: Iterable[SearchConfig]) -> None:
        """Build every configuration's programs; return when all are built (or failed)."""
        if self._threads is None:
            return
        todo: dict[tuple, SearchConfig] = {}
        for config in configs:
            try:
                full = choose_search(request, self.runtime.profile, config)
            except ValueError:
                continue  # refused before building; the timing loop records why
            todo.setdefault(knobs(full), config)
        if self._processes is not None:
            try:
                for future in [self._processes.submit(_worker_build, self.size, request, c)
                               for c in todo.values()]:
                    future.result()
            except Exception as exc:  # noqa: BLE001 - a worker died (a driver crash, say)
                log.warning("clpatch: autotune's build processes failed (%s); building in "
                            "threads from now on", exc)
                self._processes.shutdown(wait=False, cancel_futures=True)
                self._processes, self.how = None, "threads"
        for future in [self._threads.submit(self._plan_or_failure, request, knobs, c)
                       for knobs, c in todo.items()]:
            future.result()

    def failure(self, request: SearchRequest, config: SearchConfig) -> Exception | None:
        try:
            full = choose_search(request, self.runtime.profile, config)
        except ValueError:
            return None
        return self.failures.pop((request, knobs(full)), None)
