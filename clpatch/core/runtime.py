"""OpenCL platforms, devices, and the `Runtime` every clpatch call runs on.

Nothing here runs at import time. The first query for platforms first makes sure that
a vendor driver present on the machine but missing from the ICD registry (common in
containers: `libnvidia-opencl.so.1` with nothing in `/etc/OpenCL/vendors`) is
registered for this process.
"""

from __future__ import annotations

import ctypes.util
import logging
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as cl_tools

from .errors import DeviceNotFoundError, NoOpenCLError
from .kernels import ProgramCache
from .plans import PlanCache
from .profiles import FAMILIES, DeviceProfile, family_for_device, profile_for_device
from .tuning import TuningCache

log = logging.getLogger("clpatch")

# Driver libraries that vendors install with an ICD file; containers often lose the file.
_VENDOR_LIBRARIES = {
    "nvidia": "libnvidia-opencl.so.1",
    "amd": "libamdocl64.so",
    "intel": "libigdrcl.so",
}
_EXTRA_LIBRARY_DIRS = ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/wsl/lib")

_icd_lock = threading.Lock()
_icd_checked = False

INSTALL_HELP = (
    "No usable OpenCL device was found. Install an OpenCL driver:\n"
    "  - any machine (CPU):   apt-get install pocl-opencl-icd   (Debian/Ubuntu; 'pocl' elsewhere)\n"
    "  - NVIDIA GPU:          the NVIDIA driver ships libnvidia-opencl.so.1; clpatch registers it\n"
    "                         itself when /etc/OpenCL/vendors/nvidia.icd is missing\n"
    "  - AMD GPU:             ROCm's rocm-opencl-runtime\n"
    "  - Intel GPU:           intel-opencl-icd\n"
    "Then check with:  clpatch devices"
)


#: Whether pyopencl takes its unchecked array constructor (see Runtime.empty).
_FAST_ARRAYS = [True]

def _vendor_dir() -> Path:
    for var in ("OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH"):
        value = os.environ.get(var)
        if value and Path(value).is_dir():
            return Path(value)
    return Path("/etc/OpenCL/vendors")


def _icd_files(vendor_dir: Path) -> list[Path]:
    """The ICD files the loader reads: the one `OCL_ICD_VENDORS` names (ocl-icd then loads
    that one alone), else those of the vendor folder."""
    single = os.environ.get("OCL_ICD_VENDORS", "")
    if single.endswith(".icd"):
        return [Path(single)]
    return sorted(vendor_dir.glob("*.icd")) if vendor_dir.is_dir() else []


def _registered_libraries(vendor_dir: Path) -> set[str]:
    names = set()
    for icd in _icd_files(vendor_dir):
        try:
            names.add(Path(icd.read_text().strip()).name)
        except OSError:
            continue
    return names


def _locate_library(soname: str) -> str | None:
    """How an ICD file must name `soname`: the bare name when the dynamic loader finds it by
    itself, the full path when it lies in a folder searched here only; None when absent."""
    stem = soname[3:].split(".so")[0]  # libnvidia-opencl.so.1 -> nvidia-opencl
    if ctypes.util.find_library(stem):
        return soname
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += list(_EXTRA_LIBRARY_DIRS)
    for folder in dirs:
        if (Path(folder) / soname).exists():
            return str(Path(folder) / soname)
    return None


def _library_present(soname: str) -> bool:
    return _locate_library(soname) is not None


def ensure_icd_registration() -> list[str]:
    """Register installed vendor OpenCL drivers that have no ICD file, for this process.

    Must run before the first platform query (the ICD loader reads its registry once).
    Returns the library names registered (empty when nothing was missing).
    """
    global _icd_checked
    with _icd_lock:
        if _icd_checked:
            return []
        _icd_checked = True
        vendor_dir = _vendor_dir()
        registered = _registered_libraries(vendor_dir)
        missing = [lib for lib in _VENDOR_LIBRARIES.values()
                   if lib not in registered and _library_present(lib)]
        if not missing:
            return []
        private = Path(tempfile.mkdtemp(prefix="clpatch-icd-"))
        for icd in _icd_files(vendor_dir):
            if icd.is_file():
                shutil.copy(icd, private / icd.name)
        for lib in missing:
            # dlopen reads LD_LIBRARY_PATH once, at start: a library found in a folder
            # searched here must be named by its path.
            entry = _locate_library(lib) or lib
            (private / f"clpatch-{lib.split('.so')[0]}.icd").write_text(entry + "\n")
        os.environ["OCL_ICD_VENDORS"] = str(private)
        log.warning("clpatch: registered OpenCL driver(s) %s for this process (no ICD file in %s)",
                    ", ".join(missing), vendor_dir)
        return missing


def get_platforms() -> list[Any]:
    """All OpenCL platforms, after registering unregistered vendor drivers; [] if none."""
    ensure_icd_registration()
    try:
        return list(cl.get_platforms())
    except cl.Error:
        return []


def is_simulator(device: Any) -> bool:
    """True for instrumentation simulators (Oclgrind): correct but very slow."""
    return "oclgrind" in device.platform.name.lower()


@dataclass(frozen=True)
class DeviceEntry:
    """One OpenCL device with its `P:D` index."""

    platform_index: int
    device_index: int
    device: Any

    @property
    def index(self) -> str:
        return f"{self.platform_index}:{self.device_index}"

    @property
    def label(self) -> str:
        return f"{self.device.platform.name.strip()} | {self.device.name.strip()}"

    @property
    def search_text(self) -> str:
        """What a name given to `select_device` is matched against (case-insensitively)."""
        d, p = self.device, self.device.platform
        return " | ".join(str(x).strip() for x in (p.name, p.vendor, p.version, d.name, d.vendor)).lower()

    def problems(self) -> list[str]:
        """Things about this device that users should know before running on it."""
        d = self.device
        found = []
        if not d.available:
            found.append("device reports itself unavailable")
        if not d.compiler_available:
            found.append("no OpenCL C compiler")
        if is_simulator(d):
            found.append("simulator: for checking kernels, far too slow for real work")
        if d.local_mem_size < 16384:
            found.append(f"small local memory ({d.local_mem_size} bytes)")
        if d.max_work_group_size < 64:
            found.append(f"small work-groups (max {d.max_work_group_size})")
        if family_for_device(d) == "generic":
            found.append("no matching profile: generic (safe, untuned) kernels")
        return found


def list_devices() -> list[DeviceEntry]:
    """Every device of every platform, indexed `P:D`."""
    entries = []
    for p, platform in enumerate(get_platforms()):
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        entries.extend(DeviceEntry(p, d, dev) for d, dev in enumerate(devices))
    return entries


def _rank(entry: DeviceEntry) -> tuple:
    d = entry.device
    kind = 0 if d.type & cl.device_type.GPU else 1 if d.type & cl.device_type.ACCELERATOR else 2
    return (is_simulator(d), not d.available, kind, -d.max_compute_units * d.max_clock_frequency)


def select_device(spec: Any = None) -> Any:
    """Choose a device.

    `spec` may be a `pyopencl.Device`, an index `"P:D"`, or a case-insensitive substring
    of `"platform | device"` (e.g. `"nvidia"`, `"pocl"`). With no spec, `CLPATCH_DEVICE`
    is read; without it the best GPU is chosen, else the best CPU. Simulators are only
    chosen by name.
    """
    if isinstance(spec, cl.Device):
        return spec
    if spec is None:
        spec = os.environ.get("CLPATCH_DEVICE") or None
    entries = list_devices()
    if not entries:
        raise NoOpenCLError(INSTALL_HELP)
    if spec is None:
        usable = [e for e in entries if not is_simulator(e.device)]
        if not usable:
            raise NoOpenCLError(
                "Only simulator devices were found ("
                + ", ".join(e.label for e in entries)
                + "); choose one explicitly with CLPATCH_DEVICE=oclgrind, or:\n" + INSTALL_HELP)
        return min(usable, key=_rank).device
    if not isinstance(spec, str):
        raise TypeError(f"device must be a pyopencl.Device, 'P:D' or a name substring, got {spec!r}")
    text = spec.strip()
    if ":" in text and all(part.strip().isdigit() for part in text.split(":", 1)):
        p, d = (int(part) for part in text.split(":", 1))
        for e in entries:
            if (e.platform_index, e.device_index) == (p, d):
                return e.device
        raise DeviceNotFoundError(f"device {text!r}: no such index; devices are:\n"
                                  + "\n".join(f"  {e.index}  {e.label}" for e in entries))
    matches = [e for e in entries if text.lower() in e.search_text]
    if not matches:
        raise DeviceNotFoundError(f"device {text!r} matches no device; devices are:\n"
                                  + "\n".join(f"  {e.index}  {e.label}" for e in entries))
    return min(matches, key=_rank).device


class Runtime:
    """A device with its context, command queue, profile and compiled-program cache.

    Pass one to any clpatch function (`runtime=`) to choose the device or to share a
    context and queue with the rest of a pipeline. Building one compiles nothing.

    Parameters
    ----------
    device:
        `pyopencl.Device`, `"P:D"`, or a name substring; default `CLPATCH_DEVICE` or the best GPU.
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
    """

    def __init__(self, device: Any = None, *, queue: Any = None,
                 profile: str | DeviceProfile | None = None,
                 profile_overrides: dict[str, Any] | None = None,
                 profiling: bool = False, memory_limit: int | None = None) -> None:
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

        if profile is None:
            profile = os.environ.get("CLPATCH_PROFILE") or None
        if isinstance(profile, DeviceProfile):
            self.profile = profile.with_overrides(**profile_overrides) if profile_overrides else profile
        else:
            if profile is not None and profile not in FAMILIES:
                raise ValueError(f"profile must be one of {FAMILIES} or a DeviceProfile, got {profile!r}")
            self.profile = profile_for_device(self.device, family=profile, overrides=profile_overrides)

        if memory_limit is not None and (isinstance(memory_limit, bool)
                                         or not isinstance(memory_limit, int) or memory_limit < 1):
            raise ValueError(f"memory_limit must be a positive number of bytes or None, "
                             f"got {memory_limit!r}")
        self.memory_limit = memory_limit
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
