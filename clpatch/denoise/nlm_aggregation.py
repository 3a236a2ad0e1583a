"""NL-means aggregation (Davy–Ehret §4.3): the bilinear patch weights, each pixel's total
weight, the choice among the accumulation strategies ("buffers", "fixed", "cas"), the
"buffers" launches, and the value bounds the accumulation needs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.upload import check_peak
from ..core.validate import check_choice
from ..core.volumes import magnitude_limit

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


def average_classes(average: Any, k: int, g0: int, g1: int, lattice_rows: int,
                    lattice_cols: int, gx: int) -> None:
    """The atomic-free ("buffers") launches of grid rows [g0, g1) through `average(i0, si, na,
    j0, sj, nb, cls)` (grid rows i0, i0 + si, ... (na of them) and columns j0, j0 + sj, ...
    (nb), into buffer class cls; -1: by the rows' and columns' classes): lattice references
    by class into the K x K buffers, then the references off the lattice (last row /
    column) in launches of non-overlapping patches, added to buffer 0 after the lattice
    (launches of a queue run in order)."""
    lat_hi = min(g1, lattice_rows)
    lat_rows = max(0, lat_hi - g0)
    average(0, 1, lat_rows, 0, 1, lattice_cols, -1)
    if lattice_cols < gx:  # last grid column, off the lattice: rows of one class at a time
        for c in range(k):
            first = (-(g0 - c)) % k  # first tile row whose grid row = c (mod k)
            average(first, k, -(-(lat_rows - first) // k), lattice_cols, 1, 1, 0)
    if g1 > lattice_rows:  # last grid row, off the lattice
        row = lattice_rows - g0
        for c in range(k):
            average(row, 1, 1, c, k, -(-(lattice_cols - c) // k), 0)
        if lattice_cols < gx:
            average(row, 1, 1, lattice_cols, 1, 1, 0)


def fixed_bound_factor(patch_size: int, step: int, colour: bool) -> np.float32:
    """What the largest |value| is multiplied by to bound every pixel's fixed-point sum
    (nlm_scale in denoise/nlmeans.cl.mako): K² for the K x K patches summed over a pixel,
    times sqrt(3) for colour (the opponent transform's largest gain)."""
    k = buffer_classes(patch_size, step) + 1
    return np.float32(k * k * (math.sqrt(3.0) if colour else 1.0))


def check_nlm_peak(peak: float, patch_size: int, channels: int, colour: bool,
                   name: str = "image") -> None:
    """ValueError naming `name` when values of largest |x| = `peak` could overflow the
    distances (or, for colour, the opponent transform's sums)."""
    check_peak(peak, magnitude_limit(patch_size, channels), name)
    limit = magnitude_limit(patch_size, channels) / math.sqrt(3.0)
    if colour and peak > limit:
        raise ValueError(f"colour {name} values must satisfy |x| <= {limit:.3g}")
