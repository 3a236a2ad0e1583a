"""Re-ranking helpers, expansion and polish of the NNF oracle: sections 5–7 of the
specification in tests/reference/nnf.py (which re-exports these names and whose `nnf_oracle`
chains them).

`exact_distances_f32` (section 5's full-dimensional sequential float32 distance), `expand`
(section 6: more points for the queries whose k-th full distance exceeds the scaled M-th
reduced one) and `polish` (section 7: checkerboard passes over the neighbours' first
matches). Imports nothing from clpatch.
"""

from __future__ import annotations

import numpy as np

from .nnf_candidates import reduced_distances, smallest_keys, traverse
from .nnf_tree import Tree

F32 = np.float32


# ----------------------------------------------------------------------------- 5. full distance


def exact_distances_f32(pa: np.ndarray, pb: np.ndarray, q: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """float32 full distances between query patches q and reference patches pid (same
    shape): Σ over j = (c · p + i) · p + jj ascending of t · t, t = a − b, every operation
    rounded to float32 (the literal sequential float32 sum, no fused multiply-add)."""
    q = np.asarray(q, dtype=np.int64)
    pid = np.asarray(pid, dtype=np.int64)
    acc = np.zeros(q.shape, dtype=np.float32)
    for j in range(pa.shape[1]):
        t = pa[q, j] - pb[pid, j]
        acc = acc + t * t
    return acc


# ----------------------------------------------------------------------------- 6. expansion


def expand(best_pid: np.ndarray, best_dist: np.ndarray, cand_pid: np.ndarray,
           cand_dist: np.ndarray, ra: np.ndarray, rb: np.ndarray, tree: Tree, pa: np.ndarray,
           pb: np.ndarray, *, extra: int, leaves: int, slack: float = 1.0,
           visits: int = 0) -> None:
    """Section 6, in place on best_pid (Na, k) int64 and best_dist (Na, k) float32;
    cand_pid/cand_dist: the candidate lists of section 4. A query is expanded when its k-th
    full distance exceeds float32(slack) · its M-th reduced distance (a float32 product)."""
    k, m = best_pid.shape[1], cand_pid.shape[1]
    if not extra or not leaves:
        return
    worst = F32(slack) * cand_dist[:, m - 1]
    for q in np.flatnonzero(best_dist[:, k - 1] > worst):
        listed = cand_pid[q][cand_pid[q] >= 0]
        chosen: list[int] = []
        for pid in listed:
            f = int(tree.leaf_of[pid])
            if f not in chosen:
                chosen.append(f)
        chosen = chosen[:leaves]
        points = np.concatenate([tree.leaf_points(f) for f in chosen])
        points = points[~np.isin(points, listed)]
        pids, reduced = smallest_keys(points, reduced_distances(ra[q], rb[points]), extra)
        if visits:
            others = _ListedOut(tree, listed)
            pids, reduced = traverse(tree, ra[q], rb, others, pids, reduced, extra,
                                     tuple(chosen), visits, cap=best_dist[q, k - 1])
        for pid, red in zip(pids, reduced, strict=True):
            if not red < best_dist[q, k - 1]:
                break
            d = exact_distances_f32(pa, pb, np.array([q]), np.array([pid]))
            best_pid[q], best_dist[q] = smallest_keys(np.append(best_pid[q], pid),
                                                      np.append(best_dist[q], d), k)


class _ListedOut:
    """`leaf_points` of a tree without the points of one query's list (indexable by leaf)."""

    def __init__(self, tree: Tree, listed: np.ndarray) -> None:
        self.tree, self.listed = tree, listed

    def __getitem__(self, leaf: int) -> np.ndarray:
        points = self.tree.leaf_points(leaf)
        return points[~np.isin(points, self.listed)]


# ----------------------------------------------------------------------------- 7. polish


def polish(best_pid: np.ndarray, best_dist: np.ndarray, worst_reduced: np.ndarray,
           pa: np.ndarray, pb: np.ndarray, *, query_shape: tuple[int, int],
           ref_shape: tuple[int, int], passes: int, slack: float = 1.0) -> None:
    """Section 7, in place on best_pid (Na, k) int64 and best_dist (Na, k) float32 (ascending
    by (distance, pid)); worst_reduced (Na,) float32: every query's M-th reduced distance,
    times float32(slack) (a float32 product) before the comparison."""
    hac, wac = query_shape
    hbc, wbc = ref_shape
    k = best_pid.shape[1]
    worst_reduced = F32(slack) * np.asarray(worst_reduced, dtype=np.float32)
    ys, xs = np.divmod(np.arange(hac * wac), wac)
    for colour in [c for _ in range(passes) for c in (0, 1)]:
        first = best_pid[:, 0].copy()       # the other colour's matches, as they stand
        active = np.flatnonzero(((ys + xs) % 2 == colour)
                                & (best_dist[:, k - 1] > worst_reduced))
        for q in active:
            y, x = ys[q], xs[q]
            offered = []
            for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                ny, nx = y + dy, x + dx
                if not (0 <= ny < hac and 0 <= nx < wac):
                    continue
                ty, tx = first[ny * wac + nx] // wbc - dy, first[ny * wac + nx] % wbc - dx
                if 0 <= ty < hbc and 0 <= tx < wbc:
                    offered.append(ty * wbc + tx)
            if not offered:
                continue
            new = np.asarray(offered, dtype=np.int64)
            dists = exact_distances_f32(pa, pb, np.full(new.size, q), new)
            pids, keep = smallest_keys(np.concatenate([best_pid[q], new]),
                                       np.concatenate([best_dist[q], dists]), k)
            best_pid[q], best_dist[q] = pids, keep
