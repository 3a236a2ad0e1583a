"""NumPy oracle of `clpatch.estimate_sigma` (clpatch/denoise/noise_level.py describes the
method): weak-texture patch selection (Liu, Tanaka & Okutomi 2013) iterated with the
eigenvalue criterion of Chen, Zhu & Heng (2015) on the covariance of the selected patches'
mean-removed pixels. Everything in float64; imports nothing from clpatch (the defaults below
are the library's, and a test checks that they agree).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

PATCH = 9
CONFIDENCE = 0.99
MIN_PATCHES_PER_DIMENSION = 4
MAX_ITERATIONS = 12
RTOL = 1e-3
BINS = 2048


def texture_strength(channel: np.ndarray, p: int = PATCH) -> np.ndarray:
    """(H - p + 1, W - p + 1): per patch, the sum of its squared horizontal and vertical
    differences."""
    img = np.asarray(channel, np.float64)
    dh = np.diff(img, axis=1) ** 2
    dv = np.diff(img, axis=0) ** 2
    ph, pw = img.shape[0] - p + 1, img.shape[1] - p + 1
    th = sliding_window_view(dh, (p, p - 1)).sum((-1, -2))[:ph, :pw]
    tv = sliding_window_view(dv, (p - 1, p)).sum((-1, -2))[:ph, :pw]
    return th + tv


def histogram_bin(t: np.ndarray) -> np.ndarray:
    """The device's histogram bin of texture strengths (their float32 bits >> 20)."""
    bits = np.asarray(t, np.float32).view(np.uint32) >> 20
    return np.minimum(bits, BINS - 1).astype(np.int64)


def bin_upper_edge(b: int) -> float:
    """The float32 value below which every strength of bin b (and lower bins) lies."""
    return float(np.array([(b + 1) << 20], np.uint32).view(np.float32)[0])


def chi2_quantile(q: float, k: int) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (k degrees of freedom)."""
    z = NormalDist().inv_cdf(q)
    a = 2.0 / (9.0 * k)
    return k * (1.0 - a + z * math.sqrt(a)) ** 3


def threshold_factor(p: int = PATCH, confidence: float = CONFIDENCE) -> float:
    """tau0: a pure-noise patch's texture strength is below tau0 * sigma^2 with probability
    `confidence` (Liu et al.'s gamma approximation of its law: (tr / r) chi2_r)."""
    r = p * p - 1
    trace = 4.0 * p * (p - 1)
    return trace / r * chi2_quantile(confidence, r)


def patch_statistics(channel: np.ndarray, threshold: float, p: int = PATCH,
                     texture: np.ndarray | None = None) -> tuple[int, np.ndarray, np.ndarray]:
    """(count, sum of v, sum of v v^T) over the patches whose texture strength is below
    `threshold`; v is a patch's pixels (row-major) minus their mean."""
    img = np.asarray(channel, np.float64)
    t = texture_strength(img, p) if texture is None else texture
    d = p * p
    sums, products, count = np.zeros(d), np.zeros((d, d)), 0
    windows = sliding_window_view(img, (p, p))
    for y0 in range(0, t.shape[0], 64):
        block = windows[y0:y0 + 64].reshape(-1, d)
        chosen = block[(t[y0:y0 + 64] < threshold).reshape(-1)]
        v = chosen - chosen.mean(1, keepdims=True)
        sums += v.sum(0)
        products += v.T @ v
        count += len(v)
    return count, sums, products


def dc_free_basis(d: int) -> np.ndarray:
    """(d, d - 1) orthonormal basis of the vectors whose entries sum to 0."""
    q, _ = np.linalg.qr(np.column_stack([np.ones(d), np.eye(d)[:, :d - 1]]))
    return q[:, 1:]


def eigenvalues(count: int, sums: np.ndarray, products: np.ndarray) -> np.ndarray:
    """Ascending eigenvalues of the selected patches' covariance, restricted to the
    mean-free vectors (the d - 1 dimensions a mean-removed patch spans)."""
    mu = sums / count
    cov = products / count - np.outer(mu, mu)
    basis = dc_free_basis(len(sums))
    return np.linalg.eigvalsh(basis.T @ cov @ basis)


def chen_level(values: np.ndarray) -> float:
    """Chen, Zhu & Heng's noise variance: the mean tau of the m smallest eigenvalues for the
    largest m where as many of those m lie above tau as below it."""
    values = np.sort(np.asarray(values, np.float64))
    for m in range(len(values), 0, -1):
        head = values[:m]
        tau = float(head.mean())
        if np.count_nonzero(head > tau) == np.count_nonzero(head < tau):
            return tau
    return float(values[0])


def channel_sigma(channel: np.ndarray, p: int = PATCH, confidence: float = CONFIDENCE,
                  min_patches_per_dimension: int = MIN_PATCHES_PER_DIMENSION,
                  max_iterations: int = MAX_ITERATIONS, rtol: float = RTOL,
                  trace: list | None = None) -> float:
    """The noise standard deviation of one channel (H, W). `trace`, when given, receives
    (threshold, count, variance) of every pass."""
    t = texture_strength(channel, p)
    counts = np.bincount(histogram_bin(t).reshape(-1), minlength=BINS)
    need = min_patches_per_dimension * p * p
    floor = bin_upper_edge(int(np.searchsorted(np.cumsum(counts), need)))
    tau0 = threshold_factor(p, confidence)
    threshold = math.inf
    levels: list[float] = []
    counts: list[int] = []
    variance = 0.0
    for _ in range(max_iterations + 1):
        count, sums, products = patch_statistics(channel, threshold, p, texture=t)
        variance = max(chen_level(eigenvalues(count, sums, products)), 0.0) if count else 0.0
        if trace is not None:
            trace.append((threshold, count, variance))
        if count in counts:             # a cycle: the mean of its levels
            variance = float(np.mean(levels[counts.index(count):]))
            break
        if levels and abs(variance - levels[-1]) <= rtol * levels[-1]:
            break
        levels.append(variance)
        counts.append(count)
        threshold = float(np.float32(max(tau0 * variance, floor)))
    return math.sqrt(variance)


def estimate_sigma(image: np.ndarray, channel_axis: int | None = None, **kw) -> float | np.ndarray:
    """Per-channel noise sigma of an (H, W) or (H, W, C) image (channels at
    `channel_axis`, last by default for 3-D input): a float for 2-D input, else (C,)."""
    image = np.asarray(image, np.float64)
    if image.ndim == 2:
        return channel_sigma(image, **kw)
    image = np.moveaxis(image, -1 if channel_axis is None else channel_axis, -1)
    return np.array([channel_sigma(image[..., c], **kw) for c in range(image.shape[-1])])
