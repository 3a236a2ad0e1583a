"""The host side of the noise estimate (`clpatch.denoise.noise_level` describes the method):
its constants, the texture threshold, Chen et al.'s eigenvalue criterion, the iteration's
stopping rule and the unpacking of the device's statistics, all in float64."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

__all__ = ["BINS", "CONFIDENCE", "MAX_ITERATIONS", "MIN_PATCHES_PER_DIMENSION", "PATCH",
           "RTOL", "chen_variance", "dc_free_basis", "min_patches", "settled",
           "threshold_factor", "unpack", "variance"]

#: Patch side.
PATCH = 9
#: Share of pure-noise patches the texture threshold keeps.
CONFIDENCE = 0.99
#: A selection holds at least this many patches per dimension of a patch vector.
MIN_PATCHES_PER_DIMENSION = 4
#: Passes after the first (all patches), at most.
MAX_ITERATIONS = 12
#: The iteration stops when sigma² changes by at most this fraction.
RTOL = 1e-3
#: Histogram bins per channel: a float's bits >> 20, 8 bins per octave.
BINS = 2048


def min_patches(patch: int = PATCH) -> int:
    """The fewest patch positions an image must have."""
    return MIN_PATCHES_PER_DIMENSION * patch * patch


def threshold_factor(patch: int = PATCH, confidence: float = CONFIDENCE) -> float:
    """tau0 (see the module doc): (tr / r) times the Wilson-Hilferty chi²_r quantile."""
    r = patch * patch - 1
    z = NormalDist().inv_cdf(confidence)
    a = 2.0 / (9.0 * r)
    chi2 = r * (1.0 - a + z * math.sqrt(a)) ** 3
    return 4.0 * patch * (patch - 1) / r * chi2


def chen_variance(values: np.ndarray) -> float:
    """Chen et al.'s criterion (module doc, step 3) on eigenvalues."""
    values = np.sort(np.asarray(values, np.float64))
    for m in range(len(values), 0, -1):
        head = values[:m]
        tau = float(head.mean())
        if np.count_nonzero(head > tau) == np.count_nonzero(head < tau):
            return tau
    return float(values[0])


def settled(levels: list[float], counts: list[int], count: int, level: float) -> float | None:
    """Record a pass (its selection's size and level) in `levels` and `counts`; return the
    estimate once the iteration has settled (module doc, step 4), else None."""
    if count in counts:         # the same selection again: a cycle from its first pass
        return float(np.mean(levels[counts.index(count):]))
    if levels and abs(level - levels[-1]) <= RTOL * levels[-1]:
        return level
    levels.append(level)
    counts.append(count)
    return None


def dc_free_basis(d: int) -> np.ndarray:
    """An orthonormal basis (d, d - 1) of the vectors orthogonal to the constant vector."""
    q, _ = np.linalg.qr(np.column_stack([np.ones(d), np.eye(d)[:, :d - 1]]))
    return q[:, 1:]


def unpack(row: np.ndarray, patch: int, blocks: int,
           scale: float) -> tuple[int, np.ndarray, np.ndarray]:
    """(count, sums, products) from the device's 4 x 4 blocks (upper triangle, row-major)
    of the sums of a a^T, a = (v, 1), v a patch's P² values; sums and products are divided
    by scale and scale²."""
    d = patch * patch
    full = np.zeros((4 * blocks, 4 * blocks))
    it = iter(np.asarray(row, np.float64).reshape(-1, 4, 4))
    for bi in range(blocks):
        for bj in range(bi, blocks):
            full[4 * bi:4 * bi + 4, 4 * bj:4 * bj + 4] = next(it)
    full = np.triu(full) + np.triu(full, 1).T
    return int(round(full[d, d])), full[:d, d] / scale, full[:d, :d] / (scale * scale)


def variance(row: np.ndarray, patch: int, blocks: int, basis: np.ndarray) -> tuple[int, float]:
    """(patches, Chen et al.'s level) of one channel's statistics (`unpack`'s layout)."""
    count, sums, products = unpack(row, patch, blocks, 1.0)
    if count == 0:
        return 0, 0.0
    mu = sums / count
    cov = products / count - np.outer(mu, mu)
    return count, max(chen_variance(np.linalg.eigvalsh(basis.T @ cov @ basis)), 0.0)
