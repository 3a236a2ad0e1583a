"""Block matching of the BM3D / CBM3D oracle (tests/reference/bm3d.py documents the rule and
re-exports these names): the search-window offsets, the reference grid (plain or staggered)
and `block_match`, which forms every reference's group of similar patches on one
single-channel guide; `match_groups` runs it with one stage's parameters. Imports nothing
from clpatch.
"""

from __future__ import annotations

import numpy as np

from .bm3d_params import StageParams
from .search import grid

# --------------------------------------------------------------------------- block matching


def stagger_shifts(step: int) -> tuple[int, ...]:
    """Column shifts (to the left) of a staggered grid's rows in turn: row i's references sit
    i mod step columns right of a lattice column; for step 3 that is (0, 2, 1), the bm3d
    package's pattern. Step 1 has nothing to stagger: ()."""
    return tuple((-i) % step for i in range(step)) if step > 1 else ()


def window_offsets(window: int) -> np.ndarray:
    """(dy, dx) offsets of the search window, (0, 0) first, then raster order."""
    half = window // 2
    r = np.arange(-half, half + 1)
    dy, dx = np.meshgrid(r, r, indexing="ij")
    offs = np.stack([dy.ravel(), dx.ravel()], -1)
    zero = (offs[:, 0] == 0) & (offs[:, 1] == 0)
    return np.concatenate([offs[zero], offs[~zero]])


def _box_sum(terms: np.ndarray, p: int) -> np.ndarray:
    s = np.zeros((terms.shape[0] + 1, terms.shape[1] + 1))
    s[1:, 1:] = terms.cumsum(0).cumsum(1)
    return s[p:, p:] - s[:-p, p:] - s[p:, :-p] + s[:-p, :-p]


def staggered_columns(cols: int, patch_size: int, step: int, shifts) -> np.ndarray:
    """(len(shifts), m) reference columns of a staggered grid, one row per shift s.

    Every row has the same m columns: the lattice ``j·step`` (j·step < last), each moved left
    by s and kept >= 0 (so column 0 is always a reference), then the border column
    ``last = cols - patch_size``. With ``shifts = (0,)`` this is the plain grid. Shifts
    (0, 2, 1) give the pattern of the ``bm3d`` PyPI package for step 3: consecutive rows of
    references start 0, 1 and 2 columns to the right of a multiple of 3, so the edges of
    neighbouring rows' patches never line up.
    """
    last = cols - patch_size
    if any(not 0 <= s < step for s in shifts) or not len(shifts):
        raise ValueError(f"shifts must be in [0, step), got {shifts}")
    if len(shifts) == 1 and shifts[0] == 0:
        return grid(cols, patch_size, step)[None]
    lattice = np.arange(0, last, step) if last > 0 else np.zeros(0, dtype=int)
    return np.array([np.concatenate([np.maximum(lattice - s, 0), [last]]) for s in shifts])


def block_match(guide: np.ndarray, patch_size: int, step: int, window: int, n: int, tau: float,
                shifts=(0,)):
    """Groups of similar patches on a single-channel guide (H, W).

    Returns (grid_y, grid_x, positions, distances, counts): positions (gy, gx, n, 2) as (y, x),
    ascending distance, the reference first; distances (gy, gx, n); counts (gy, gx) = the
    group size k (power of 2). Entries beyond k are the next candidates in order (or -1/inf
    when there are none) and are not part of the group. ``shifts``: reference row i uses
    the columns of shift ``shifts[i % len(shifts)]`` (:func:`staggered_columns`); grid_x is
    1-D for the plain grid, else (gy, gx) per row.
    """
    guide = np.asarray(guide, dtype=np.float64)
    rows, cols = guide.shape
    p = patch_size
    gy = grid(rows, p, step)
    table = staggered_columns(cols, p, step, tuple(shifts))
    gxs = table[np.arange(len(gy)) % len(table)]              # (gy, gx)
    offsets = window_offsets(window)
    vy, vx = rows - p + 1, cols - p + 1                     # valid top-left positions
    dist = np.full(gxs.shape + (len(offsets),), np.inf)
    for o, (dy, dx) in enumerate(offsets):
        ys = slice(max(0, -dy), min(rows, rows - dy))
        xs = slice(max(0, -dx), min(cols, cols - dx))
        if ys.start >= ys.stop or xs.start >= xs.stop:
            continue
        diff = np.zeros_like(guide)
        diff[ys, xs] = guide[ys, xs] - guide[ys.start + dy:ys.stop + dy, xs.start + dx:xs.stop + dx]
        d = _box_sum(diff * diff, p)[gy[:, None], gxs]
        ok = ((gy + dy >= 0) & (gy + dy < vy))[:, None] & ((gxs + dx >= 0) & (gxs + dx < vx))
        dist[..., o] = np.where(ok, d, np.inf)
    order = np.argsort(dist, axis=-1, kind="stable")[..., :n]
    best = np.take_along_axis(dist, order, -1)
    pos = np.stack([gy[:, None, None] + offsets[order, 0], gxs[:, :, None] + offsets[order, 1]], -1)
    pos = np.where(np.isfinite(best)[..., None], pos, -1)
    similar = np.sum(best <= tau * p * p, axis=-1)           # the reference (d = 0) always counts
    counts = 2 ** np.floor(np.log2(np.maximum(similar, 1))).astype(int)
    return gy, (gxs[0] if len(table) == 1 else gxs), pos, best, counts

def match_groups(plane: np.ndarray, params: StageParams):
    """:func:`block_match` of one stage's parameters (its grid staggered when
    ``params.stagger``) on the single-channel image ``plane``."""
    shifts = (stagger_shifts(params.step) or (0,)) if params.stagger else (0,)
    return block_match(plane, params.patch_size, params.step, params.window, params.n,
                       params.tau_match, shifts)


def given_groups(positions: np.ndarray, distances: np.ndarray, patch_size: int, step: int,
                 n: int, tau: float, rows: int, cols: int):
    """:func:`block_match`'s result for groups built from given matches (clpatch's
    ``matches=``): positions (gy, gx, K, 2) and ascending distances (gy, gx, K) on the plain
    grid of ``step``, of which the first ``n`` count. A group is the reference patch, then
    the matches in order without it; its size is the largest power of 2 at most
    min(n, number of the n matches with distance <= tau·p², plus one when the reference is
    not among them)."""
    p = patch_size
    gy, gx = grid(rows, p, step), grid(cols, p, step)
    pos = np.asarray(positions)[:, :, :n]
    dist = np.asarray(distances, dtype=np.float64)[:, :, :n]
    out = np.empty(pos.shape, dtype=int)
    counts = np.empty(pos.shape[:2], dtype=int)
    for a, ry in enumerate(gy):
        for b, rx in enumerate(gx):
            own = [j for j in range(n) if tuple(pos[a, b, j]) == (ry, rx)]
            similar = int(np.sum(dist[a, b] <= tau * p * p)) + (0 if own else 1)
            rest = [pos[a, b, j] for j in range(n) if j != (own[0] if own else -1)]
            out[a, b] = np.array([[ry, rx]] + rest[:n - 1])
            counts[a, b] = 2 ** int(np.floor(np.log2(max(min(similar, n), 1))))
    return gy, gx, out, dist, counts


def matched_groups(positions: np.ndarray, distances: np.ndarray, grid_y, grid_x, n: int,
                   tau: float, patch_size: int):
    """:func:`given_groups` on any grid: the groups of given matches (positions (gy, gx, K,
    2) as (y, x), ascending distances (gy, gx, K), of which the first ``n`` count) of the
    references at rows ``grid_y`` and columns ``grid_x``, 1-D, or (gy, gx) for a staggered
    grid (one row of columns per grid row). A group is the reference patch, then the matches
    in order without it; its size is the largest power of 2 at most min(n, the matches with
    distance <= tau·p², plus one when the reference is not among them). Returns
    :func:`block_match`'s tuple (grid_y, grid_x, members (gy, gx, n, 2), distances, sizes)."""
    gy = np.asarray(grid_y)
    gx = np.broadcast_to(np.asarray(grid_x), (len(gy), np.shape(positions)[1]))
    pos = np.asarray(positions)[:, :, :n]
    dist = np.asarray(distances, dtype=np.float64)[:, :, :n]
    ref = np.stack(np.broadcast_arrays(gy[:, None], gx), -1)                  # (gy, gx, 2)
    is_self = np.all(pos == ref[..., None, :], axis=-1)
    where = np.where(is_self.any(-1), np.argmax(is_self, -1), n)              # n: absent
    similar = np.sum(dist <= tau * patch_size * patch_size, -1) + (where == n)
    sizes = 2 ** np.floor(np.log2(np.clip(similar, 1, n))).astype(int)
    m = np.arange(1, n)
    j = (m - 1) + (m - 1 >= where[..., None])                                 # skip the reference
    others = np.take_along_axis(pos, np.minimum(j, n - 1)[..., None], -2)
    others = np.where((j < n)[..., None], others, -1)
    members = np.concatenate([ref[..., None, :], others], -2)
    return gy, np.asarray(grid_x), members.astype(int), dist, sizes
