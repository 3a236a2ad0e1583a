"""Exceptions raised by clpatch (besides ValueError/TypeError for bad arguments)."""

from __future__ import annotations


class ClpatchError(Exception):
    """Base class of clpatch's own errors."""


class NoOpenCLError(ClpatchError, RuntimeError):
    """No usable OpenCL platform or device; the message says how to install one."""


class DeviceNotFoundError(ClpatchError, LookupError):
    """A device was asked for by index or name and none matched."""


class KernelBuildError(ClpatchError, RuntimeError):
    """An OpenCL program failed to build; the message holds the build log and the
    template parameters that produced the source."""


class DeviceResourceError(ClpatchError, RuntimeError):
    """The device could not run a kernel configuration (work-group or memory limits)."""


class Cancelled(ClpatchError):
    """The call was stopped by `Runtime.cancel()` at a launch boundary or while waiting for
    the device; the runtime stays usable (see `clpatch.core.inflight`)."""
