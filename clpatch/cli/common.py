"""What several commands share: the error they raise, the --device option, argument types,
how a device and a run are described, and the values a written file holds."""

from __future__ import annotations

import argparse

import numpy as np

from ..core.devices import SPEC_FORMS
from ..core.errors import ClpatchError
from ..core.runtime import Runtime
from ..io.images import ImageInfo
from ..io.video import VideoInfo


class CommandError(Exception):
    """A failure to report as `clpatch: error: <message>` (first line; the rest follows)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


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


def open_runtime(spec: str | None) -> Runtime:
    """The runtime of `--device` (None: the default device); CommandError with exit status
    2 when it cannot be opened."""
    try:
        return Runtime(spec)
    except (ClpatchError, ValueError) as exc:
        where = f"--device {spec!r}" if spec is not None else "the default device"
        raise CommandError(f"cannot open {where}: {exc}", code=2) from None


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
