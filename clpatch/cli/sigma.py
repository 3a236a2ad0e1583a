"""`clpatch denoise --sigma auto`: the noise level estimated from the input with
`clpatch.estimate_sigma`, reported on a `sigma:` line and used.

Images are estimated as they are denoised (after `--add-noise`, when given); videos on their
first frame; bursts on their reference frame. Colour inputs get one estimate per channel and
are denoised with their root mean square (the denoisers take one sigma for all channels).
An input on which no sigma can be estimated (too small, no noise, no frames) is a UsageError
(exit 2): it comes before any denoising, and the remedy is a numeric --sigma.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..core.runtime import Runtime
from ..denoise.noise_level import combined_sigma, estimate_sigma
from .common import UsageError, first_line, positive_number

__all__ = ["AUTO", "SIGMA_HELP", "first_frame_sigma", "resolve_sigma", "sigma_option"]

AUTO = "auto"
SIGMA_HELP = ("noise standard deviation in the image's units, e.g. 20 for 8-bit, or 'auto': "
              "estimated from IN with clpatch.estimate_sigma and printed (colour: per channel, "
              "denoised with their root mean square; videos: on the first frame; burst: on the "
              "reference frame) (default with --add-noise: the added sigma)")


def sigma_option(text: str) -> float | str:
    """argparse type of --sigma: a number > 0, or 'auto'."""
    if text.strip().lower() == AUTO:
        return AUTO
    return positive_number(text)


def _estimate(image: np.ndarray, runtime: Runtime, where: str) -> tuple[float, str]:
    """(sigma to use, report line) for `image` (H, W) or (H, W, C)."""
    try:
        values = np.atleast_1d(estimate_sigma(image, runtime=runtime))
    except ValueError as exc:
        raise UsageError(f"--sigma auto: {first_line(exc)}") from None
    value = combined_sigma(values)
    if not value > 0:
        raise UsageError(f"--sigma auto: the estimated noise of {where} is 0 (no noise to "
                         "remove); give --sigma")
    line = f"{value:.4g}, estimated on {where} (clpatch.estimate_sigma)"
    if len(values) > 1:
        names = list("RGB") if len(values) == 3 else [f"channel {c}" for c in range(len(values))]
        parts = ", ".join(f"{n} {v:.4g}" for n, v in zip(names, values, strict=True))
        line += f"; per channel {parts}; their root mean square is used"
    return value, line


#: A numeric --sigma on 16-bit data is checked against the estimate when it is below this
#: (one 8-bit step in 16-bit units), and reported when the estimate exceeds it this much.
UNITS_CHECK_BELOW = 257.0
UNITS_CHECK_FACTOR = 4.0


def resolve_sigma(args: argparse.Namespace, image: np.ndarray, runtime: Runtime,
                  where: str, bit_depth: int | None = None) -> str | None:
    """With --sigma auto, set args.sigma to the estimate for `image` and return the report
    line; None (args unchanged) for a numeric --sigma, but for a 16-bit `bit_depth` a
    sigma far below the noise the image holds (in 8-bit units, say: unchanged output)
    gets a warning line, returned in place of None."""
    if args.sigma != AUTO:
        if bit_depth == 16 and args.sigma < UNITS_CHECK_BELOW:
            return _units_warning(float(args.sigma), image, runtime, where)
        return None
    args.sigma, line = _estimate(image, runtime, where)
    return line


def _units_warning(sigma: float, image: np.ndarray, runtime: Runtime, where: str) -> str | None:
    """A warning when `image` (16-bit data) holds far more noise than `sigma`; None when not
    (or when it cannot be estimated)."""
    try:
        seen = float(estimate_sigma(image, average_sigmas=True, runtime=runtime))
    except ValueError:
        return None
    if not seen > UNITS_CHECK_FACTOR * sigma:
        return None
    return (f"WARNING: {sigma:g} given, but {where} holds noise of about {seen:.4g} in its 16-bit "
            f"units (0-65535; clpatch.estimate_sigma): sigma is in the file's units (8-bit "
            f"units x 257, here {sigma * 257:g}?); with this sigma the output is nearly the "
            "input")


def first_frame_sigma(args: argparse.Namespace, pairs: Iterator[tuple[Any, Any]],
                      runtime: Runtime, name: str) -> tuple[Iterator[tuple[Any, Any]], str | None]:
    """`resolve_sigma` on the first frame of a video's (noisy, clean) pairs: returns the
    pairs, the first one put back, and the report line."""
    if args.sigma != AUTO:
        return pairs, None
    first = next(pairs, None)
    if first is None:
        raise UsageError(f"--sigma auto: {name} has no frames")
    line = resolve_sigma(args, np.asarray(first[0]), runtime, f"frame 0 of {name}")
    return itertools.chain([first], pairs), line
