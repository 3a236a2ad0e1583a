"""Render `cl_src/**/*.cl.mako` templates and build (and cache) the OpenCL programs.

`render()` is a pure function of (template, device profile, static parameters): any
kernel variant can be reproduced and read without a GPU (`clpatch render ...` would just
call it). `ProgramCache` builds rendered sources for one runtime and keeps the programs
in memory and their binaries on disk, keyed by the source hash, the build options and
the device's platform, name and driver version, so a second process does not recompile.
Compiling from source can take seconds per program (tens of seconds for a call on some
drivers): each compile is reported to a build-progress hook (`BuildEvent`), the runtime's
(`Runtime.build_progress`) or else the process-wide one (`set_default_build_progress`, which
the command line sets to draw its "building kernels" line). A program is compiled in a
build child process (`clpatch.core.buildchild`), so that a compiler crash raises
`CompilerCrashError` instead of ending the caller.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyopencl as cl
from mako import exceptions as mako_exceptions
from mako.lookup import TemplateLookup

from . import buildchild
from .buildchild import ChildDied, CompilerCrashError, CompileRefused
from .childproc import implementation
from .errors import KernelBuildError
from .inflight import InFlight, flight_of
from .profiles import DeviceProfile
from .resources import cl_src_dir

log = logging.getLogger("clpatch")

#: Options every program is built with. No fast-math: distances must match NumPy.
BUILD_OPTIONS: tuple[str, ...] = ()


@cache
def _lookup() -> TemplateLookup:
    return TemplateLookup(directories=[str(cl_src_dir())], strict_undefined=True,
                          input_encoding="utf-8")


def _describe(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(params.items()))


def render(template: str, profile: DeviceProfile, **params: Any) -> str:
    """OpenCL C source of `cl_src/<template>` specialised for `profile` and `params`.

    The template sees `profile` (the profile's values as attributes) and each parameter
    by name. The source starts with a comment naming the template and every value used,
    so a saved source says how to reproduce it.
    """
    try:
        body = _lookup().get_template(template).render(
            profile=SimpleNamespace(**profile.template_values()), **params)
    except Exception as exc:
        detail = mako_exceptions.text_error_template().render()
        raise KernelBuildError(
            f"rendering {template} failed with parameters {_describe(params)} "
            f"and profile {profile.family}:\n{detail}") from exc
    header = (f"// clpatch: {template}\n// parameters: {_describe(params)}\n"
              f"// profile: {profile.family}: {_describe(profile.template_values())}\n")
    return header + body


def cache_dir() -> Path | None:
    """Where program binaries are kept (`CLPATCH_CACHE_DIR`, else the user cache folder);
    None when `CLPATCH_NO_DISK_CACHE=1`."""
    if os.environ.get("CLPATCH_NO_DISK_CACHE", "") not in ("", "0"):
        return None
    override = os.environ.get("CLPATCH_CACHE_DIR")
    if override:
        return Path(override) / "programs"
    import platformdirs

    return Path(platformdirs.user_cache_dir("clpatch")) / "programs"


@dataclass(frozen=True)
class BuildEvent:
    """What a build-progress hook receives: twice for each program compiled from source
    ("start", then "done" or "failed"), never for a program found in memory or loaded from
    the on-disk cache, so a warm cache reports nothing.

    phase: "start" (the driver starts compiling), "done" (compiled) or "failed" (the driver
        refused the source; a `KernelBuildError` follows).
    template: the template the source was rendered from ("denoise/nlmeans.cl.mako"), or
        "<source>" for a source built directly.
    device: the device's name.
    builds: programs compiled from source by this runtime's cache so far, this one
        included from "done" on (`ProgramCache.builds`).
    seconds: how long the compile took, storing the binary included ("done", "failed");
        0.0 at "start".
    stored: whether the binary goes to the on-disk cache (so the next process loads it
        instead of compiling; False with `CLPATCH_NO_DISK_CACHE=1` or on a simulator).
    """

    phase: str
    template: str
    device: str
    builds: int
    seconds: float
    stored: bool


#: A build-progress hook: called with each `BuildEvent`, in the thread that builds (builds
#: of different programs may run in several threads at once, e.g. autotune's --jobs).
BuildHook = Callable[[BuildEvent], Any]

_default_hook: list[BuildHook | None] = [None]


def set_default_build_progress(hook: BuildHook | None) -> BuildHook | None:
    """Make `hook` (None: none) receive the build events of every runtime that has no
    `build_progress` hook of its own; returns the previous process-wide hook (to restore
    it). The command line sets one for the duration of a command."""
    if hook is not None and not callable(hook):
        raise TypeError(f"hook must be a callable or None, got {type(hook).__name__}")
    previous, _default_hook[0] = _default_hook[0], hook
    return previous


def default_build_progress() -> BuildHook | None:
    """The process-wide build-progress hook (see `set_default_build_progress`), or None."""
    return _default_hook[0]


def device_identity(device: Any) -> str:
    """Everything about a device and its driver that can change a compiled binary."""
    platform = device.platform
    return "|".join(str(x).strip() for x in (
        platform.name, platform.version, device.name, device.version, device.driver_version))


class ProgramCache:
    """Builds and caches programs for one runtime's device."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self._programs: dict[str, Any] = {}
        self._lock = threading.Lock()  # guards the dictionaries and the counter
        self._building: dict[str, threading.Lock] = {}  # one lock per program being built
        self.builds = 0  # programs compiled from source by this cache (for tests and logs)
        self.loads = 0   # programs loaded from the on-disk cache by this cache
        self.build_seconds = 0.0  # time spent compiling (and storing) programs, threads summed

    def get(self, template: str, **params: Any) -> Any:
        """The built program for `template` with `params` on this runtime's device."""
        source = render(template, self.runtime.profile, **params)
        return self.build(source, template=template, params=params)

    def build(self, source: str, *, template: str = "<source>",
              params: dict[str, Any] | None = None,
              options: tuple[str, ...] = BUILD_OPTIONS) -> Any:
        device = self.runtime.device
        key = hashlib.sha256("\0".join(
            (source, " ".join(options), device_identity(device))).encode()).hexdigest()
        # Threads may build different programs at the same time (pyopencl releases the GIL
        # in clBuildProgram; autotune's --jobs relies on it); one program is built once.
        with self._lock:
            program = self._programs.get(key)
            if program is not None:
                return program
            key_lock = self._building.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                program = self._programs.get(key)
            if program is None:
                program = self._load_or_build(key, source, template, params or {}, options)
                with self._lock:
                    self._programs[key] = program
                    self._building.pop(key, None)
        return program

    def _binary_path(self, key: str) -> Path | None:
        folder = cache_dir()
        if folder is None or self.runtime.is_simulator:
            return None
        return folder / f"{key}.bin"

    def _load_or_build(self, key: str, source: str, template: str, params: dict[str, Any],
                       options: tuple[str, ...]) -> Any:
        ctx, device = self.runtime.context, self.runtime.device
        path = self._binary_path(key)
        if path is not None and path.is_file():
            try:
                binary = _unpack_binary(path.read_bytes())
                if binary is None or not _loadable(binary, device):
                    raise OSError("not a complete clpatch program binary")
                program = cl.Program(ctx, [device], [binary]).build(list(options))
                _check_kernels(program)  # a stale or foreign binary fails here, not at launch
                with self._lock:
                    self.loads += 1
                return program
            except (cl.Error, OSError) as exc:
                log.info("clpatch: cached binary %s unusable (%s); rebuilding", path.name, exc)
        hook = getattr(self.runtime, "build_progress", None) or _default_hook[0]
        name = device.name.strip()
        if hook is not None:
            hook(BuildEvent("start", template, name, self.builds, 0.0, path is not None))
        start = time.perf_counter()
        try:
            program, binary = self._compile(source, template, options)
        except (cl.Error, CompileRefused, ChildDied) as exc:
            if hook is not None:
                hook(BuildEvent("failed", template, name, self.builds,
                                time.perf_counter() - start, path is not None))
            raise self._build_error(exc, key, source, template, params) from exc
        if path is not None:
            self._store(path, program, device, binary)  # on PoCL, making the binary compiles too
        seconds = time.perf_counter() - start
        with self._lock:
            self.builds += 1
            self.build_seconds += seconds
            builds = self.builds
        log.debug("clpatch: built %s for %s in %.2f s", template, name, seconds)
        if hook is not None:
            hook(BuildEvent("done", template, name, builds, seconds, path is not None))
        return program

    def _compile(self, source: str, template: str, options: tuple[str, ...]
                 ) -> tuple[Any, bytes | None]:
        """The program built from `source`, with its binary when a build child made it.

        A build child compiles it first (`clpatch.core.buildchild`; see the module doc for
        why and what it costs); this process loads the child's binary. It compiles the
        source itself, with a log line saying why, where no child can help: on a simulator
        (the binary is not kept anyway, and Oclgrind checks the build in this process), with
        `CLPATCH_BUILD_IN_CHILD=0`, when no child could start or find the device, and when
        the binary does not load back here (PoCL's without its bitcode, see `_loadable`).
        Raises `ChildDied` when a second child died too (a crash is tried twice),
        `CompileRefused` when the compiler refused the source, `cl.Error` when this process's
        own compile fails."""
        ctx, device = self.runtime.context, self.runtime.device
        if self.runtime.is_simulator or not buildchild.enabled():
            why = "a simulator" if self.runtime.is_simulator else f"{buildchild.ENV}=0"
            log.debug("clpatch: building %s in this process (%s)", template, why)
        else:
            made = buildchild.build_in_children(device, source, options, template)
            why = made.unusable
            if made.binary is not None and not _loadable(made.binary, device):
                why = "the binary its build child made cannot be loaded back"
            elif made.binary is not None:
                try:
                    program = cl.Program(ctx, [device], [made.binary]).build(list(options))
                    _check_kernels(program)
                    return program, made.binary
                except cl.Error as exc:
                    why = f"the binary its build child made did not load ({exc})"
            log.info("clpatch: building %s in this process: %s", template, why)
        program = cl.Program(ctx, source).build(list(options), devices=[device],
                                                cache_dir=False)
        return program, None

    def _build_error(self, exc: Exception, key: str, source: str, template: str,
                     params: dict[str, Any]) -> KernelBuildError:
        """The error to raise for a failed compile (`_compile`'s exceptions)."""
        device = self.runtime.device
        saved = self._save_failed_source(key, source)
        where = (f"parameters: {_describe(params)}\nprofile: {self.runtime.profile.family}\n"
                 f"source saved as: {saved}")
        if isinstance(exc, ChildDied):
            return CompilerCrashError(
                f"the OpenCL compiler of {implementation(device)} crashed ({exc}) while "
                f"building {template} for {device.name.strip()}\n{where}\n(it compiled in "
                "a build child process, which died; this process goes on)")
        return KernelBuildError(f"building {template} for {device.name.strip()} failed\n"
                                f"{where}\nbuild log:\n{_build_log(str(exc))}")

    @staticmethod
    def _save_failed_source(key: str, source: str) -> str:
        folder = Path(tempfile.gettempdir()) / "clpatch-failed-builds"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{key[:16]}.cl"
        target.write_text(source)
        return str(target)

    @staticmethod
    def _store(path: Path, program: Any, device: Any, binary: bytes | None = None) -> None:
        """Keep the program's binary (`binary`, else the program's own) in the disk cache."""
        try:
            if binary is None:
                binaries = program.get_info(cl.program_info.BINARIES)
                binary = bytes(binaries[0]) if binaries and binaries[0] else b""
            if not binary or not _loadable(binary, device):
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(_pack_binary(binary))
            os.replace(tmp, path)
        except (cl.Error, OSError) as exc:  # a read-only cache folder must not stop the work
            log.info("clpatch: could not store program binary in %s (%s)", path.parent, exc)


def _check_kernels(program: Any) -> None:
    """Create (and drop) every kernel of `program`, one by one. Not with
    `Program.all_kernels()`: on NVIDIA's OpenCL (H100, driver of 2026) the kernels that
    clCreateKernelsInProgram makes through it are never released, and they keep the whole
    context alive, about 520 MB of device memory per runtime (measured), until the test
    suite's fresh runtimes ran the GPU out of memory."""
    for name in program.get_info(cl.program_info.KERNEL_NAMES).split(";"):
        if name:
            cl.Kernel(program, name)


# Cached binaries carry a checksum: drivers do not all reject a damaged binary cleanly
# (PoCL aborts the process on a truncated one), so only intact files reach the driver.
_BINARY_MAGIC = b"clpatch-program-binary-1\n"


def _loadable(binary: bytes, device: Any) -> bool:
    """Whether the driver can be handed `binary` without risk. PoCL's binaries carry the
    program's bitcode (`program.bc`); PoCL 3.1 once handed out one without it (in a CI run;
    the cause was not found, perhaps its own cache folder changed under it), and loading
    that binary aborts the process (an assertion in pocl_binary.c), so such a binary is
    neither stored nor loaded: the program is built from source instead."""
    if "portable computing language" not in device.platform.name.lower():
        return True
    return b"program.bc" in binary


def _pack_binary(binary: bytes) -> bytes:
    return _BINARY_MAGIC + hashlib.sha256(binary).digest() + binary


def _unpack_binary(data: bytes) -> bytes | None:
    """The driver binary held in a cache file, or None if the file is damaged or foreign."""
    head = len(_BINARY_MAGIC) + 32
    if not data.startswith(_BINARY_MAGIC) or len(data) <= head:
        return None
    binary = data[head:]
    return binary if hashlib.sha256(binary).digest() == data[head - 32:head] else None


def _build_log(text: str) -> str:
    # pyopencl puts the per-device build logs into the message; keep them readable.
    return text if len(text) < 20000 else text[:20000] + "\n... (log truncated)"


def max_group_size(kernel: Any, device: Any) -> int:
    """The largest work-group this built kernel accepts on `device` (registers, local memory)."""
    return int(kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device))


_UNSET = object()


def _arg_key(value: Any) -> Any:
    """What decides whether an argument must be set again: a memory object's handle (the
    kernel keeps no reference to it either), a NumPy scalar itself (equal scalars of the
    same type are the same argument); anything else is always set."""
    if isinstance(value, cl.MemoryObjectHolder):
        return value.int_ptr
    if isinstance(value, np.generic) or value is None:
        return value
    return _UNSET


class CachedKernel:
    """A kernel whose arguments are set only when they change, then enqueued.

    Called like a `pyopencl.Kernel`: `k(queue, global_size, local_size, *args, wait_for=)`
    returns the launch's event. NVIDIA's OpenCL takes about 10 µs to set each by-value
    argument (measured on the H100, driver 580: 0.2 µs for a buffer), so re-setting a dozen
    unchanged scalars cost more than the launch itself; most launches of a plan repeat the
    previous launch's arguments. On a runtime's queue, every launch goes through the queue's
    `clpatch.core.inflight.InFlight`: at most its `limit` launches unfinished (waiting for
    the oldest, interruptibly, beyond that), progress reported and cancellation checked
    after the launch is enqueued. Other attributes are the wrapped kernel's."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.name = kernel.function_name
        self._args: list[Any] = []
        self._queue: Any = None             # the last queue launched on, and its InFlight
        self._flight: InFlight | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)

    def __call__(self, queue: Any, global_size: Any, local_size: Any, *args: Any,
                 wait_for: Any = None) -> Any:
        if queue is not self._queue:
            self._queue, self._flight = queue, flight_of(queue)
        flight = self._flight
        if flight is not None:
            flight.before_launch()
        last = self._args
        if len(last) != len(args):
            last[:] = [_UNSET] * len(args)
        for i, value in enumerate(args):
            if value is last[i]:        # the same NumPy scalar object as last time
                continue
            key = _arg_key(value)
            old = last[i]
            if key is _UNSET or not (key is old or (type(key) is type(old) and key == old)):
                self.kernel.set_arg(i, value)
                last[i] = key
        event = cl.enqueue_nd_range_kernel(queue, self.kernel, global_size, local_size,
                                           wait_for=wait_for)
        if flight is not None:
            flight.launched(event, self.name)
        return event


def kernel(program: Any, name: str) -> CachedKernel:
    """Kernel `name` of a built program, as a `CachedKernel`."""
    return CachedKernel(cl.Kernel(program, name))
