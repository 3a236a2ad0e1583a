"""Finding and choosing OpenCL devices: platforms, the `P:D`-indexed device list, and
`select_device`, which turns a device spec (an index, a device type, a name substring or
`CLPATCH_DEVICE`) into one `pyopencl.Device`.

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

import pyopencl as cl

from .errors import DeviceNotFoundError, NoOpenCLError
from .profiles import family_for_device

__all__ = ["DEVICE_TYPES", "INSTALL_HELP", "SPEC_FORMS", "DeviceEntry", "device_kind",
           "ensure_icd_registration", "get_platforms", "is_simulator", "list_devices",
           "select_device"]

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


#: Device types a spec may name (case-insensitively) -> the OpenCL type bit.
DEVICE_TYPES = {"gpu": cl.device_type.GPU, "cpu": cl.device_type.CPU,
                "accelerator": cl.device_type.ACCELERATOR}

_TYPE_NAMES = {"gpu": "GPU", "cpu": "CPU", "accelerator": "accelerator"}

#: What a device spec may be, for error messages.
SPEC_FORMS = ("a 'P:D' index, a device type (cpu, gpu, accelerator) or a substring of a "
              "device's name")


def device_kind(device: Any) -> str:
    """'GPU', 'CPU', 'accelerator', 'simulator' (Oclgrind reports every type at once) or
    'device'."""
    if is_simulator(device):
        return "simulator"
    for kind, bit in DEVICE_TYPES.items():
        if device.type & bit:
            return _TYPE_NAMES[kind]
    return "device"


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


def _not_found(what: str, reason: str, entries: list[DeviceEntry]) -> DeviceNotFoundError:
    return DeviceNotFoundError(
        f"{what} {reason}; give {SPEC_FORMS}. The devices are:\n"
        + "\n".join(f"  {e.index}  {e.label}  ({device_kind(e.device)})" for e in entries))


def select_device(spec: Any = None) -> Any:
    """Choose a device.

    `spec` may be a `pyopencl.Device`, an index `"P:D"`, a device type (`"cpu"`, `"gpu"`,
    `"accelerator"`: the best device of that type), or a substring of
    `"platform | platform vendor | platform version | device | device vendor"` (e.g.
    `"nvidia"`, `"pocl"`), both case-insensitive. With no spec, `CLPATCH_DEVICE` is read
    (unset or empty: none); without it the best GPU is chosen, else the best accelerator,
    else the best CPU. Simulators (Oclgrind) are only chosen by name or index. A blank spec
    (`""`, `"  "`, or `CLPATCH_DEVICE` set to spaces) raises ValueError; a spec that matches
    no device raises `DeviceNotFoundError` listing the devices.
    """
    if isinstance(spec, cl.Device):
        return spec
    what = "device"
    if spec is None and os.environ.get("CLPATCH_DEVICE"):
        spec = os.environ["CLPATCH_DEVICE"]
        what = "CLPATCH_DEVICE"
    if spec is not None:
        if not isinstance(spec, str):
            raise TypeError(f"device must be a pyopencl.Device, 'P:D', a device type or a "
                            f"name substring, got {spec!r}")
        if not spec.strip():
            raise ValueError(f"{what} is blank ({spec!r}): give {SPEC_FORMS}"
                             + ("" if what == "device" else ", or unset it"))
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
    text = spec.strip()
    return _find(text, f"device {text!r}" + ("" if what == "device" else " (from CLPATCH_DEVICE)"),
                 entries)


def _find(text: str, what: str, entries: list[DeviceEntry]) -> Any:
    """The device a non-blank spec names (`what`: how errors name the spec)."""
    if ":" in text and all(part.strip().isdigit() for part in text.split(":", 1)):
        p, d = (int(part) for part in text.split(":", 1))
        for e in entries:
            if (e.platform_index, e.device_index) == (p, d):
                return e.device
        raise _not_found(what, "matches no device's index", entries)
    kind = text.lower()
    if kind in DEVICE_TYPES:
        # Oclgrind reports every type: a type never picks a simulator.
        matches = [e for e in entries
                   if e.device.type & DEVICE_TYPES[kind] and not is_simulator(e.device)]
        if not matches:
            raise _not_found(what, f"matches no device: there is no {_TYPE_NAMES[kind]} "
                             "(a simulator is chosen by name or index only)", entries)
        return min(matches, key=_rank).device
    matches = [e for e in entries if kind in e.search_text]
    if not matches:
        raise _not_found(what, "matches no device", entries)
    return min(matches, key=_rank).device
