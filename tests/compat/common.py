"""Shared inputs of the compat tests: small noisy crops of the test images in [0, 1]."""

from __future__ import annotations

import numpy as np

from tests.helpers import load_image

SIGMA = 0.1


def noisy_crop(name: str, seed: int = 1, size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(clean, noisy): the central size x size crop of a test image in [0, 1] (float64),
    and it plus white Gaussian noise of deviation SIGMA."""
    image = load_image(name, np.float64) / 255.0
    y0, x0 = image.shape[0] // 2 - size // 2, image.shape[1] // 2 - size // 2
    clean = image[y0:y0 + size, x0:x0 + size]
    noisy = clean + SIGMA * np.random.default_rng(seed).standard_normal(clean.shape)
    return clean, noisy


def psnr(estimate: np.ndarray, clean: np.ndarray) -> float:
    return float(10 * np.log10(1.0 / np.mean((np.asarray(estimate, np.float64) - clean) ** 2)))
