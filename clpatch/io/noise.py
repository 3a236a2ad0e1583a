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


def synthetic_burst(image: np.ndarray, frames: int, sigma: float, *, seed: int | None = 0,
                    max_shift: float = 2.0, max_angle: float = 1.0) -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """A burst of `frames` noisy views of one scene with camera shake: frame 0 is `image`
    itself, every other frame `image` rotated by up to `max_angle` degrees and shifted by
    up to `max_shift` pixels (uniform, sub-pixel; bilinear resampling about the centre, the
    border clamped), then every frame gets white Gaussian noise of `sigma`.

    Returns (noisy frames (T, H, W[, C]) float32, clean frames likewise)."""
    frames = int(frames)
    if frames < 1:
        raise ValueError(f"frames must be at least 1, got {frames}")
    rng = np.random.default_rng(seed)
    image = np.asarray(image, dtype=np.float32)
    rows, cols = image.shape[:2]
    yy, xx = np.mgrid[0:rows, 0:cols].astype(np.float64)
    cy, cx = (rows - 1) / 2.0, (cols - 1) / 2.0
    clean = [image]
    for _ in range(frames - 1):
        angle = np.deg2rad(rng.uniform(-max_angle, max_angle))
        dy, dx = rng.uniform(-max_shift, max_shift, 2)
        cos, sin = np.cos(angle), np.sin(angle)
        # Where each output pixel comes from in `image`.
        sy = cy + cos * (yy - cy) - sin * (xx - cx) + dy
        sx = cx + sin * (yy - cy) + cos * (xx - cx) + dx
        sy, sx = np.clip(sy, 0, rows - 1), np.clip(sx, 0, cols - 1)
        y0, x0 = np.minimum(sy.astype(int), rows - 2), np.minimum(sx.astype(int), cols - 2)
        fy, fx = sy - y0, sx - x0
        if image.ndim == 3:
            fy, fx = fy[..., None], fx[..., None]
        top = image[y0, x0] * (1 - fx) + image[y0, x0 + 1] * fx
        bottom = image[y0 + 1, x0] * (1 - fx) + image[y0 + 1, x0 + 1] * fx
        clean.append((top * (1 - fy) + bottom * fy).astype(np.float32))
    clean_frames = np.stack(clean)
    noisy = clean_frames + rng.normal(0.0, sigma, clean_frames.shape)
    return noisy.astype(np.float32), clean_frames
