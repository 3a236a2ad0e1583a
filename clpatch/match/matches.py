"""The Matches contract: what every search engine returns and every filter consumes.

For every reference patch (top-left corners on a grid), its `k` best candidates: positions
(top-left corners) and distances, ascending. On the device the layout is fixed:

    positions: int32, [frame][grid row][grid column][k][dim], dim 2 as (y, x) or 3 as (t, y, x)
    distances: float32, [frame][grid row][grid column][k]

Equal distances resolve to the candidate visited first in the engine's documented order,
the same on every device (the windowed search: offsets in window order; see DESIGN.md).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.validate import check_int

#: Largest coordinate an int32 position holds.
INT32_MAX = 2**31 - 1


@dataclass(repr=False)
class Matches:
    """The k nearest patches of every reference patch.

    positions: int32, (gy, gx, k, 2) as (y, x), or (T, gy, gx, k, 3) as (t, y, x) for video;
               top-left corners of the matched patches.
    distances: float32, (gy, gx, k) or (T, gy, gx, k), ascending along the last axis;
               sums of squared (l2) or absolute (l1) differences over patch and channels.
    grid_y, grid_x: int32, top-left rows / columns of the reference patches (grid_x is
               (gy, gx), one row of columns per grid row, for a plan's staggered grid).
    positions and distances are NumPy arrays for NumPy input, device arrays for device input.
    The remaining fields say how the matches were found (`k`: matches per reference;
    `config`: the engine's configuration). `n` is the deprecated name of `k`.
    """

    positions: Any
    distances: Any
    grid_y: np.ndarray
    grid_x: np.ndarray
    patch_size: int
    step: int
    window: int
    k: int
    metric: str
    temporal_window: int
    config: Any

    def __repr__(self) -> str:
        """One line: shape, k, how they were found, the distances' range (NumPy arrays; a
        device array's range would need a read, so it is not shown)."""
        lead = tuple(self.distances.shape[:-3])
        gy, gx = self.distances.shape[-3:-1]
        where = "device" if hasattr(self.distances, "queue") else "NumPy"
        config = self.config
        engine = (getattr(config, "variant", None) or getattr(config, "method", None)
                  or (type(config).__name__ if config is not None else "given"))
        span = ""
        if where == "NumPy" and self.distances.size:
            d = np.asarray(self.distances)
            span = f", distances {float(np.min(d)):.4g}..{float(np.max(d)):.4g}"
        frames = f"{lead[0]} frames x " if lead else ""
        return (f"Matches({frames}{gy}x{gx} references x k={self.k}, patch {self.patch_size}, "
                f"step {self.step}, {self.metric}, {engine}{span}, {where} arrays)")

    @property
    def n(self) -> int:
        """Deprecated: `k`."""
        warnings.warn("Matches.n is deprecated, use Matches.k", DeprecationWarning,
                      stacklevel=2)
        return self.k


#: The windowed search's name for its result (kept: the public API has always used it).
SearchResult = Matches


def grid_positions(size: int, patch_size: int, step: int) -> np.ndarray:
    """Top-left coordinates of reference patches along one axis: 0, step, …, plus size − p.

    size: the axis' length, patch_size (1 ≤ patch_size ≤ size) ≤ size < 2³¹ (the positions
    are int32); step ≥ 1. ValueError/TypeError naming the argument otherwise."""
    size = check_int("size", size, 1, INT32_MAX)
    patch_size = check_int("patch_size", patch_size, 1, size)
    step = check_int("step", step, 1, INT32_MAX)
    last = size - patch_size
    positions = np.arange(0, last + 1, step, dtype=np.int64)
    if positions[-1] != last:
        positions = np.append(positions, last)
    return positions.astype(np.int32)


def lattice_count(size: int, patch_size: int, step: int) -> tuple[int, bool]:
    """(positions on the lattice 0, step, …, whether the grid's last position size − p lies
    off it) along one axis of `grid_positions` (size ≥ patch_size, not checked)."""
    span = max(size - patch_size, 0)
    return span // step + 1, span % step != 0


def min_candidates(rows: int, cols: int, frames: int, patch_size: int, window: int,
                   temporal_window: int) -> int:
    """The fewest candidates any reference has (a corner reference in the first frame)."""
    half = window // 2
    return ((min(half, rows - patch_size) + 1) * (min(half, cols - patch_size) + 1)
            * (min(temporal_window, frames - 1) + 1))


def usable_n(n: int, available: int, *, power_of_two: bool = False) -> int:
    """The project's one policy for `n` in the filters: `n` (already checked against the
    engine's range), lowered to the `available` candidates of the most constrained reference
    on images too small to offer n (and to a power of two where a group size must be one).
    `search_patches` refuses instead: its result has a fixed n axis, so it cannot shrink."""
    n = min(n, available)
    return 1 << (n.bit_length() - 1) if power_of_two else n
