"""Synthetic noise and the PSNR quality measure, for `clpatch denoise --add-noise` and `demo`."""

from __future__ import annotations

import numpy as np


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


def psnr(a: np.ndarray, b: np.ndarray, peak: float) -> float:
    """Peak signal-to-noise ratio of `a` against `b` in dB: 10 log10(peak² / MSE), computed in
    float64; inf when they are equal."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"psnr: shapes differ, {a.shape} and {b.shape}")
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else 10.0 * float(np.log10(peak * peak / mse))
