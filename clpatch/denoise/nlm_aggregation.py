"""NL-means aggregation (Davy–Ehret §4.3): the bilinear patch weights, each pixel's total
weight, and the choice among the accumulation strategies ("buffers", "fixed", "cas")."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.validate import check_choice

AGGREGATIONS = ("buffers", "fixed", "cas")


def bilinear_weights(patch_size: int) -> np.ndarray:
    """The aggregation weights bw(i), i < patch_size, of one patch axis."""
    i = np.arange(patch_size)
    return (2 * np.minimum(i, patch_size - 1 - i) + 1) / patch_size


def coverage(size: int, patch_size: int, grid: np.ndarray) -> np.ndarray:
    """Total aggregation weight of each row (or column): the sum of bw(y − g) over the
    grid positions g with g ≤ y < g + patch_size."""
    total = np.zeros(size)
    bw = bilinear_weights(patch_size)
    for g in np.asarray(grid):
        total[g:g + patch_size] += bw
    return total


def buffer_classes(patch_size: int, step: int) -> int:
    """K of the atomic-free scheme: references K grid steps apart never overlap."""
    return -(-patch_size // step)


def choose_aggregation(patch_size: int, step: int, profile: Any,
                       aggregation: str | None = None) -> tuple[str, str]:
    """(strategy, reason): `aggregation` when given (checked), else the device's best."""
    k = buffer_classes(patch_size, step)
    if aggregation is not None:
        check_choice("aggregation", aggregation, AGGREGATIONS)
        if aggregation == "buffers" and k > 2:
            raise ValueError(f"aggregation='buffers' needs step >= patch_size / 2 (at most 2 x 2 "
                             f"buffers), got patch_size={patch_size}, step={step}")
        if aggregation == "fixed" and not profile.int64_atomics:
            raise ValueError("aggregation='fixed' needs 64-bit integer atomics "
                             "(cl_khr_int64_base_atomics), which this device lacks")
        return aggregation, "forced"
    if k <= 2:
        return "buffers", f"step >= patch_size / 2: {k * k} buffers, no atomics (Davy-Ehret 4.3.5)"
    if profile.int64_atomics:
        return "fixed", "64-bit integer atomics on fixed point: deterministic"
    return "cas", "no 64-bit atomics: float atomics emulated with compare-and-swap"
