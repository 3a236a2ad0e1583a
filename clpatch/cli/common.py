"""What several commands share: the exit statuses and the errors they raise, the --device
option, argument types, how a device and a run are described, and the values a written file
holds.

Exit statuses, the same for every command (the top-level help's epilog says them):
EXIT_USAGE (2, argparse's own) when the command line is refused before any work starts (a
bad or conflicting option or value, an unknown method or device, a missing or unreadable
input, an input format refused, an output refused: it exists without --overwrite, is an
input, has the wrong extension, its folder is missing or unwritable); EXIT_FAILURE (1) when
the work fails (no OpenCL driver, a device or OpenCL error, a build failure, invalid data
found during the run, a write failing); 130 after Ctrl-C (`outputs.INTERRUPTED_CODE`).
A check raises `UsageError`, a failure `CommandError`; errors from the library are sorted by
where they are raised: inside `usage_checks()` (the checks before any work) they are usage
errors, elsewhere failures (`main` reports them with exit 1).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..core.devices import SPEC_FORMS
from ..core.errors import ClpatchError, DeviceNotFoundError
from ..core.runtime import Runtime
from ..io.images import ImageInfo
from ..io.video import VideoInfo

EXIT_FAILURE = 1  # the work failed
EXIT_USAGE = 2    # the command line was refused before any work (argparse's status)

#: What the checks before any work raise when they refuse the command line: a missing input
#: (FileNotFoundError), an unreadable or refused file (ImageFileError, a ValueError), a bad
#: value (ValueError, TypeError), an unknown name (LookupError), the library's own refusals.
REFUSALS = (ValueError, TypeError, LookupError, OSError, ClpatchError)
#: What a library function raises when it refuses its arguments (see clpatch.core.errors).
ARGUMENT_ERRORS = (ValueError, TypeError)


class CommandError(Exception):
    """A failure of the work, reported as `clpatch: error: <message>` (first line; the rest
    follows); exit status EXIT_FAILURE unless `code` says otherwise (130: interrupted)."""

    default_code = EXIT_FAILURE

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = self.default_code if code is None else code


class UsageError(CommandError):
    """The command line refused before any work starts: exit status EXIT_USAGE, as
    argparse's own errors."""

    default_code = EXIT_USAGE


@contextmanager
def usage_checks(kinds: tuple[type[BaseException], ...] = REFUSALS) -> Iterator[None]:
    """Wraps checks of the command line made before any work (reading the inputs, checking
    an output's format): an error of `kinds` raised inside becomes a UsageError with its
    message. Around a library call that checks its arguments before doing any work, pass
    `ARGUMENT_ERRORS`: its refusals are usage errors, its failures (OpenCL, the device) are
    not."""
    try:
        yield
    except CommandError:
        raise
    except kinds as exc:
        raise UsageError(str(exc).strip() or type(exc).__name__) from exc


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def device_spec(text: str) -> str:
    """argparse type of --device: what `clpatch.select_device` takes, not blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"is blank ({text!r}): give {SPEC_FORMS}")
    return text


def add_device_option(parser: argparse.ArgumentParser) -> None:
    """The `--device` / `-d` option of every command that runs kernels."""
    parser.add_argument("--device", "-d", metavar="SPEC", default=None, type=device_spec,
                        help="device index 'P:D', type (cpu, gpu, accelerator: the best one "
                             "of that type) or a name substring (see 'clpatch devices'); "
                             "default: $CLPATCH_DEVICE, else the best GPU, else the CPU")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_number(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and np.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def non_negative_number(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value >= 0 and np.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def seed_number(text: str) -> int:
    """argparse type: an integer >= 0 (what numpy.random.default_rng takes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def open_runtime(spec: str | None, **options: Any) -> Runtime:
    """The runtime of `--device` (None: the default device, $CLPATCH_DEVICE's when set), with
    Runtime's `options`. A device that --device or $CLPATCH_DEVICE names wrongly (blank,
    matching none, a bad $CLPATCH_PROFILE) is a UsageError; no OpenCL driver, or a device
    that fails to open, a CommandError (exit 1)."""
    try:
        return Runtime(spec, **options)
    except (ValueError, TypeError, ClpatchError) as exc:
        usage = isinstance(exc, (DeviceNotFoundError, ValueError, TypeError))
        message = f"cannot open --device {spec!r}: {exc}" if spec is not None else str(exc)
        raise (UsageError if usage else CommandError)(message) from None


def device_line(runtime: Runtime) -> str:
    """'platform | device (profile family)': the device a command ran on."""
    return (f"{runtime.device.platform.name.strip()} | {runtime.device.name.strip()} "
            f"(profile {runtime.profile.family})")


def builds_note(builds: int) -> str:
    """What to append to a reported time when OpenCL programs were built during it."""
    return f" (includes building {builds} OpenCL program(s))" if builds else ""


def as_written(image: np.ndarray, info: ImageInfo | VideoInfo) -> np.ndarray:
    """The values a file of `info`'s bit depth (an image's or a video's) would hold:
    rounded and clipped."""
    if info.bit_depth is None:
        return image
    return np.clip(np.rint(image), 0, info.peak)
