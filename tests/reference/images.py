"""Synthetic test images for the oracles' own tests (NumPy only, nothing from clpatch)."""

from __future__ import annotations

import numpy as np


def smooth_image(shape, seed, amplitude=255.0, *, clip=False):
    """Photo-like integer-valued image: box-blurred noise plus a little grain, rounded;
    `clip` keeps it within 0 … 255."""
    rng = np.random.default_rng(seed)
    img = rng.uniform(0, amplitude, shape)
    box = np.ones(5) / 5
    for axis in (0, 1):
        img = np.apply_along_axis(lambda r: np.convolve(r, box, mode="same"), axis, img)
    img = np.round(img + rng.normal(0, 3, shape))
    return (np.clip(img, 0, 255) if clip else img).astype(np.float32)
