"""The self-test's inputs: tiny seeded images and videos, the kinds the test suite uses.

- random floats, for searches compared to a tolerance;
- integer labels and integer noise, where every float32 distance is exact, so results (ties
  included) must equal the oracle's bit for bit;
- smooth patterns plus noise for the filters: clear matches, so few patch distances sit near
  the matching thresholds (where float32 rounding could flip a decision of the oracle's).
"""

from __future__ import annotations

import numpy as np

SIGMA = 20.0


def random_image(shape: tuple[int, ...], seed: int, scale: float = 255.0) -> np.ndarray:
    """float32 values uniform in [0, scale)."""
    return (np.random.default_rng(seed).random(shape) * scale).astype(np.float32)


def integers(shape: tuple[int, ...], seed: int, high: int = 256,
             dtype: type = np.float32) -> np.ndarray:
    """Integers uniform in [0, high): few values give many exact ties."""
    return np.random.default_rng(seed).integers(0, high, shape).astype(dtype)


def noisy_half_flat(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random values with a flat upper half, plus N(0, SIGMA): flat and textured patches."""
    base = random_image(shape, seed)
    base[: shape[0] // 2] = 128.0
    return (base + np.random.default_rng(seed).normal(0, SIGMA, shape)).astype(np.float32)


def smooth_noisy(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """128 + 60 sin(y/5) cos(x/7) (phase-shifted per channel) plus N(0, SIGMA)."""
    y, x = np.mgrid[:shape[0], :shape[1]].astype(np.float64)
    channels = shape[2] if len(shape) == 3 else 1
    base = np.stack([128 + 60 * np.sin(y / 5 + c) * np.cos(x / 7 - c / 2)
                     for c in range(channels)], -1).reshape(shape)
    return (base + np.random.default_rng(seed).normal(0, SIGMA, shape)).astype(np.float32)


def smooth_video(frames: int, rows: int, cols: int, seed: int, channels: int = 1) -> np.ndarray:
    """A smooth pattern drifting by sub-pixel steps, plus N(0, SIGMA): (T, H, W[, C])."""
    y, x = np.mgrid[:rows, :cols].astype(np.float64)
    clean = np.stack([np.stack([128 + 60 * np.sin((y + 0.7 * t) / 5 + c)
                                * np.cos((x - 0.4 * t) / 7 - c) for c in range(channels)], -1)
                      for t in range(frames)])
    if channels == 1:
        clean = clean[..., 0]
    return (clean + np.random.default_rng(seed).normal(0, SIGMA, clean.shape)).astype(np.float32)


def integer_video(frames: int, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """A textured frame moving by (1, 2) pixels per frame plus small integer noise: integer
    values, so every patch distance is exact in float32 and ties are real ties."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (rows, cols))
    video = [np.roll(base, (t, 2 * t), (0, 1)) + rng.integers(0, 3, (rows, cols))
             for t in range(frames)]
    return np.stack(video).astype(np.float32)
