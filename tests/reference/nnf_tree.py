"""The k-d tree of the NNF oracle: section 3 of the specification in tests/reference/nnf.py
(which re-exports these names).

`Tree` (heap-ordered split dimensions and medians over +inf-padded leaves), `tree_levels`,
`build_tree`, and `descend` / `descend_many` (the leaf a reduced point falls in). Imports
nothing from clpatch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F32 = np.float32


# ----------------------------------------------------------------------------- 3. k-d tree


@dataclass
class Tree:
    """k-d tree of section 3.

    order:    (N_pad,) int64, position -> pid (pid >= n_real is padding).
    levels:   L; leaves = 2**L, leaf j = positions [j · S, (j + 1) · S).
    dims:     (2**L,) int64, split dimension of heap node h (1 .. 2**L − 1; entry 0 unused, −1).
    medians:  (2**L,) float32, median of heap node h (entry 0 unused, NaN).
    leaf_of:  (n_real,) int64, leaf of every real pid.
    leaf_size: S.
    n_real:   Nb, the number of real points.
    """

    order: np.ndarray
    levels: int
    dims: np.ndarray
    medians: np.ndarray
    leaf_of: np.ndarray
    leaf_size: int
    n_real: int

    @property
    def n_leaves(self) -> int:
        return 2 ** self.levels

    def leaf_slots(self, leaf: int) -> np.ndarray:
        """The S pids (padding included) of a leaf, in tree order."""
        s = self.leaf_size
        return self.order[leaf * s:(leaf + 1) * s]

    def leaf_points(self, leaf: int) -> np.ndarray:
        """The real pids of a leaf, in tree order."""
        slots = self.leaf_slots(leaf)
        return slots[slots < self.n_real]


def tree_levels(n_real: int, leaf_size: int) -> int:
    """L = 0 if Nb <= S else ceil(log2(Nb / S)), computed in integers: the smallest L with
    S · 2**L >= Nb."""
    levels = 0
    while leaf_size * 2 ** levels < n_real:
        levels += 1
    return levels


def _widest_dim(lb: np.ndarray, ub: np.ndarray) -> int:
    """The literal loop: spread = ub − lb in float32; dim 0 unless a later spread is strictly
    greater (IEEE >: NaN never wins, and a NaN spread[0] keeps dim 0)."""
    with np.errstate(invalid="ignore", over="ignore"):   # inf − inf = NaN is intended
        spread = (ub - lb).astype(np.float32)
    dim, best = 0, spread[0]
    for k in range(1, spread.size):
        if spread[k] > best:
            best, dim = spread[k], k
    return dim


def build_tree(rb: np.ndarray, leaf_size: int) -> Tree:
    """The k-d tree of section 3 over the reduced points rb (Nb, dims) float32."""
    rb = np.asarray(rb, dtype=np.float32)
    assert rb.ndim == 2 and rb.shape[0] >= 1 and rb.shape[1] >= 1
    assert leaf_size >= 1
    n_real, dr = rb.shape
    s = leaf_size
    levels = tree_levels(n_real, s)
    n_pad = 2 ** levels * s
    values = np.full((n_pad, dr), np.inf, dtype=np.float32)   # padding: +inf everywhere
    values[:n_real] = rb
    order = np.arange(n_pad, dtype=np.int64)
    dims = np.full(2 ** levels, -1, dtype=np.int64)
    medians = np.full(2 ** levels, np.nan, dtype=np.float32)
    lb = {1: rb.min(axis=0).astype(np.float32)}
    ub = {1: rb.max(axis=0).astype(np.float32)}
    for level in range(levels):
        seg = n_pad >> level                                      # S_l
        for n in range(2 ** level):
            h = 2 ** level + n
            dim = _widest_dim(lb[h], ub[h])
            part = order[n * seg:(n + 1) * seg]
            key = values[part, dim]
            perm = np.argsort(key, kind="stable")
            order[n * seg:(n + 1) * seg] = part[perm]
            median = F32(key[perm][seg // 2 - 1])
            dims[h], medians[h] = dim, median
            lb[2 * h], ub[2 * h] = lb[h].copy(), ub[h].copy()
            ub[2 * h][dim] = median
            lb[2 * h + 1], ub[2 * h + 1] = lb[h].copy(), ub[h].copy()
            lb[2 * h + 1][dim] = median
    position = np.empty(n_pad, dtype=np.int64)
    position[order] = np.arange(n_pad)
    leaf_of = position[:n_real] // s
    return Tree(order=order, levels=levels, dims=dims, medians=medians, leaf_of=leaf_of,
                leaf_size=s, n_real=n_real)


def descend(tree: Tree, v) -> int:
    """Leaf of one point v (dims,): h = 1; L times h = 2h if v[dim(h)] <= median(h) else
    2h + 1; leaf = h − 2**L."""
    v = np.asarray(v, dtype=np.float32)
    h = 1
    for _ in range(tree.levels):
        h = 2 * h if v[tree.dims[h]] <= tree.medians[h] else 2 * h + 1
    return h - 2 ** tree.levels


def descend_many(tree: Tree, r: np.ndarray) -> np.ndarray:
    """`descend` of every row of r (N, dims), vectorised: (N,) int64 leaves."""
    r = np.asarray(r, dtype=np.float32)
    h = np.ones(r.shape[0], dtype=np.int64)
    rows = np.arange(r.shape[0])
    for _ in range(tree.levels):
        v = r[rows, tree.dims[h]]
        h = np.where(v <= tree.medians[h], 2 * h, 2 * h + 1)
    return h - 2 ** tree.levels
