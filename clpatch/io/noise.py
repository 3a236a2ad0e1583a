"""Synthetic noise and the PSNR quality measure, for `clpatch denoise --add-noise` and `demo`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.volumes import default_data_range

#: The unsigned type of an 8- or 16-bit file's samples.
_DEPTH_TYPES = {8: np.uint8, 16: np.uint16}


def add_noise(image: np.ndarray, sigma: float, seed: int | None = None) -> np.ndarray:
    """`image` plus white Gaussian noise of standard deviation `sigma` (float32).

    The noise comes from `numpy.random.default_rng(seed)`, so a given seed always gives the
    same noise for the same shape. It is neither clipped nor rounded.
    """
    if not sigma > 0:
        raise ValueError(f"the noise sigma must be > 0, got {sigma}")
    rng = np.random.default_rng(seed)
    image = np.asarray(image, dtype=np.float32)
    return (image + rng.normal(0.0, sigma, image.shape)).astype(np.float32)


def psnr_peak(clean: Any, bit_depth: int | None = None) -> float:
    """The peak a PSNR against `clean` is computed with: the nominal range the denoisers
    assume (`clpatch.core.volumes.default_data_range`). 255 / 65535 for 8- / 16-bit data
    (`bit_depth`, as read from a file whose samples are now floats); otherwise from
    `clean`'s dtype and values: the type's maximum for integers wider than 8 bits, 1 for
    floats within [-1, 1], else 255."""
    if bit_depth is not None:
        if bit_depth not in _DEPTH_TYPES:
            raise ValueError(f"bit_depth must be 8, 16 or None, got {bit_depth!r}")
        return default_data_range(_DEPTH_TYPES[bit_depth], None)
    clean = np.asarray(clean)
    largest = float(np.max(np.abs(clean))) if clean.size else None
    return default_data_range(clean.dtype, largest)


def psnr(a: np.ndarray, b: np.ndarray, peak: float | None = None) -> float:
    """Peak signal-to-noise ratio of `a` against the reference `b` in dB:
    10 log10(peak² / MSE), computed in float64; inf when they are equal. `peak` None:
    `psnr_peak(b)` (1 for float data within [0, 1], 255 for 0–255 data)."""
    if peak is None:
        peak = psnr_peak(b)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"psnr: shapes differ, {a.shape} and {b.shape}")
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else 10.0 * float(np.log10(peak * peak / mse))
