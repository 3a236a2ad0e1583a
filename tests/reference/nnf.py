"""NumPy reference ("oracle") of the nearest-neighbour field of `clpatch.nnf`: propagation-
assisted k-d trees (He & Sun; the GPU formulation of Oancea et al.), written from the
algorithm's specification (the steps below; clpatch/match/nnf.py documents the same
steps) and nothing of clpatch.

Every rounding and ordering rule is followed literally, so that the OpenCL implementation
produces bit-identical fields on integer-valued images (and, when the device's own
projections are fed in through `projections=`, on any images whose re-ranking sums are
exact).

Steps
-----
1. `fit_pca`: PCA on a seeded random subset (min(1000, Na + Nb) patches, drawn by
   `default_rng(seed).choice(Na + Nb, n, replace=False)`) of both images' patches, in
   float64; eigenvectors by descending eigenvalue (stable on ties: the lower eigh index
   first), each signed so that its largest-|value| entry (first on ties) is positive.
2. `project`: r[q][k] = Σ_j (P[q][j] − mean32[j]) · W32[j][k], every subtraction, product
   and addition rounded to float32 separately, j ascending, accumulator from 0.
3. `build_tree`: k-d tree over b's reduced points padded with +inf points to
   2**L · leaf_size; per node the dimension of largest (cell-bound) spread, a stable sort of
   the node's segment along it, the median = the last value of the left half.
4. `candidate_lists`: per query the `candidates` (M) smallest keys (reduced distance, pid)
   of everything offered to it (a set: a pid offered twice counts once):
   (a) its containing leaf, and the previous leaf f − 1 when the containing leaf holds
       fewer than M real points (the real points fill a prefix of the leaves, so only the
       last non-empty leaf and the empty ones after it are short, and leaf f − 1 is full);
   (b) rows y % band == 0: `traverse`, a depth-first traversal with backtracking that
       visits at most `visits` leaves (exact when it ends before);
   (c) the other rows, top to bottom within each band: the leaves of the patches one row
       below the candidates of the query above;
   (d) `refine` passes, each in two halves over a checkerboard (x + y even, then odd, each
       half reading the other's current lists): the four neighbours' candidates moved back
       by the neighbour's offset (points, PatchMatch-style).
5. `nnf_oracle`: re-ranking of the candidates by the exact full-dimensional float32 L2
   distance (sequential float32 sum in (c, i, jj) order), ties by pid; the first k.
6. `expand`: every query whose k-th full distance exceeds float32(slack) times the M-th
   reduced distance of its candidate list (+inf for a short list; a float32 product): the
   distinct leaves of its list's points, in list order, the first `expand_leaves`, then
   (`expand_visits` > 0) `traverse` from the root over an extra list of `expand` entries,
   bounded by the smaller of its worst and the k-th full distance, at most
   `expand_visits` leaves, the leaves just scanned counted but not scanned again;
   their real points not on the list, the `expand` smallest keys (reduced distance, pid);
   of these, in that order while the reduced distance is below the current k-th full
   distance, each offered on its full distance.
7. `polish`: passes, each in two halves over a checkerboard (x + y even, then odd, each half
   reading the other's current matches), over the queries whose k-th full distance exceeds
   float32(slack) times the M-th reduced distance of their candidate list (+inf for a short
   list): each is offered its four neighbours' first matches moved back by the neighbour's
   offset, on full distances; the first k keys (distance, pid) of the union are kept.
   (clpatch picks slack, expand, expand_leaves and expand_visits from pca_dims: 1.0, 16, 4
   and 0 up to 10 dimensions; the tests pass what it uses.)

Plus `exact_nnf` (brute-force exact k nearest patches) and `reconstruct` (voting
reconstruction of a from the first matches), for accuracy checks.

Conventions: images (H, W) or (H, W, C), any real dtype, taken as float32 (no scaling);
query index q = y · Wac + x over a's Hac × Wac patch corners; pid = y · Wbc + x over b's;
positions are (y, x) top-left corners, int32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

F32 = np.float32


# ----------------------------------------------------------------------------- patches


def as_image(img) -> np.ndarray:
    """(H, W, C) float32 copy of an image (values as float32, no scaling)."""
    data = np.asarray(img).astype(np.float32)
    if data.ndim == 2:
        data = data[..., None]
    assert data.ndim == 3, f"image must be (H, W) or (H, W, C), got shape {data.shape}"
    return data


def corner_grid(img, p: int) -> tuple[int, int]:
    """(rows, columns) of patch top-left corners of an image for patch size p."""
    shape = np.shape(img)
    assert 1 <= p <= min(shape[0], shape[1]), f"patch size {p} does not fit image {shape}"
    return shape[0] - p + 1, shape[1] - p + 1


def patch_matrix(img, p: int) -> np.ndarray:
    """(N, d) float32: row y · Wc + x is the patch vector of corner (y, x); element
    j = (c · p + i) · p + jj holds img[y + i, x + jj, c]."""
    data = as_image(img)
    rows, cols = corner_grid(data, p)
    win = sliding_window_view(data, (p, p), axis=(0, 1))     # (rows, cols, C, p, p)
    return np.ascontiguousarray(win.reshape(rows * cols, -1), dtype=np.float32)


# ----------------------------------------------------------------------------- 1. PCA


def fit_pca(a, b, p: int, dims: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean32 (d,), W32 (d, dims)) float32: the PCA model of section 1."""
    pa, pb = patch_matrix(a, p), patch_matrix(b, p)
    assert pa.shape[1] == pb.shape[1], "a and b must have the same number of channels"
    d = pa.shape[1]
    assert 1 <= dims <= d, f"pca_dims={dims} outside [1, d={d}]"
    na, nb = pa.shape[0], pb.shape[0]
    n_all = na + nb
    rng = np.random.default_rng(seed)
    n_m = min(1000, n_all)
    picks = rng.choice(n_all, size=n_m, replace=False)
    both = np.concatenate([pa, pb], axis=0)          # index < na: a's q; else b's pid + na
    x = both[picks].astype(np.float64)
    mean = x.mean(axis=0)
    xc = x - mean
    cov = xc.T @ xc / max(n_m - 1, 1)
    w, v = np.linalg.eigh(cov)
    order = np.argsort(-w, kind="stable")            # descending; ties: lower eigh index first
    wm = v[:, order[:dims]].copy()
    for col in range(dims):
        big = int(np.argmax(np.abs(wm[:, col])))     # first index on ties
        if wm[big, col] < 0:
            wm[:, col] = -wm[:, col]
    return mean.astype(np.float32), wm.astype(np.float32)


# ----------------------------------------------------------------------------- 2. projection


def project(P: np.ndarray, mean32: np.ndarray, W32: np.ndarray) -> np.ndarray:
    """(N, dims) float32: r[q][k] = Σ_j ((P[q][j] − mean32[j]) · W32[j][k]), j ascending,
    each subtraction, product and addition rounded to float32 (no fused multiply-add)."""
    P = np.asarray(P, dtype=np.float32)
    mean32 = np.asarray(mean32, dtype=np.float32)
    W32 = np.asarray(W32, dtype=np.float32)
    n, d = P.shape
    assert mean32.shape == (d,) and W32.shape[0] == d
    out = np.empty((n, W32.shape[1]), dtype=np.float32)
    for k in range(W32.shape[1]):
        acc = np.zeros(n, dtype=np.float32)
        for j in range(d):
            centred = P[:, j] - mean32[j]            # float32 array − float32 scalar
            acc = acc + centred * W32[j, k]          # product rounded, then the sum rounded
        out[:, k] = acc
    return out


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


# ----------------------------------------------------------------------------- 4. candidates


def reduced_distances(rq: np.ndarray, rb_rows: np.ndarray) -> np.ndarray:
    """float32 dist_r of one reduced query rq (dims,) to the rows rb_rows (n, dims):
    Σ_k (t · t), t = rq[k] − rb[k], k ascending, each operation rounded to float32."""
    rq = np.asarray(rq, dtype=np.float32)
    rb_rows = np.asarray(rb_rows, dtype=np.float32)
    acc = np.zeros(rb_rows.shape[0], dtype=np.float32)
    for k in range(rq.shape[0]):
        t = rq[k] - rb_rows[:, k]
        acc = acc + t * t
    return acc


def smallest_keys(pids: np.ndarray, dists: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The m smallest keys (dist, pid) of a set (a pid offered twice counts once),
    ascending: (pids int64, dists float32)."""
    pids = np.asarray(pids, dtype=np.int64)
    dists = np.asarray(dists, dtype=np.float32)
    pids, first = np.unique(pids, return_index=True)
    dists = dists[first]
    order = np.lexsort((pids, dists))[:m]
    return pids[order], dists[order]


def traverse(tree: Tree, v: np.ndarray, rb: np.ndarray, leaf_points: list, pids: np.ndarray,
             dists: np.ndarray, m: int, searched: tuple, visits: int, cap=np.inf):
    """Section 4(b): the depth-first traversal with backtracking of one query v from its
    list (pids, dists), visiting at most `visits` leaves, literally as the kernel walks it:
    nearer child first (left when v[dim] − median <= 0), the farther child stacked with the
    bound max(parent bound, (v[dim] − median)²) unless that exceeds the M-th distance,
    popped entries skipped when their bound exceeds it by then; searched leaves count as
    visited but are not offered again. With `cap`, the bound is min(M-th distance, cap)."""
    v = np.asarray(v, dtype=np.float32)
    cap = np.float32(cap)
    worst = lambda: min(dists[m - 1] if dists.size >= m else np.float32(np.inf),  # noqa: E731
                        cap)
    stack = [(1, np.float32(0.0))]
    visited = 0
    while stack and visited < visits:
        h, bound = stack.pop()
        if bound > worst():
            continue
        while h < 2 ** tree.levels:
            diff = np.float32(v[tree.dims[h]] - tree.medians[h])
            near = 2 * h + 1 if diff > 0 else 2 * h
            b2 = max(bound, np.float32(diff * diff))
            if not b2 > worst():
                stack.append((near ^ 1, b2))
            h = near
        f = h - 2 ** tree.levels
        visited += 1
        if f not in searched and leaf_points[f].size:
            new = leaf_points[f]
            pids, dists = smallest_keys(np.concatenate([pids, new]),
                                        np.concatenate([dists, reduced_distances(v, rb[new])]),
                                        m)
    return pids, dists


def candidate_lists(ra: np.ndarray, rb: np.ndarray, tree: Tree, *, query_shape: tuple[int, int],
                    ref_shape: tuple[int, int], candidates: int, band: int = 16,
                    visits: int = 32, refine: int = 2, return_searched: bool = False):
    """Section 4: (cand_pid (Na, M) int64, −1 for empty; cand_dist (Na, M) float32, +inf for
    empty), each row ascending by (dist_r, pid). query_shape = (Hac, Wac), ref_shape =
    (Hbc, Wbc). With return_searched, also a list of every query's searched leaves (tuple)."""
    ra = np.asarray(ra, dtype=np.float32)
    rb = np.asarray(rb, dtype=np.float32)
    hac, wac = query_shape
    hbc, wbc = ref_shape
    na, nb, m = hac * wac, hbc * wbc, candidates
    assert ra.shape[0] == na and rb.shape[0] == nb and ra.shape[1] == rb.shape[1]
    assert tree.n_real == nb
    assert m >= 1 and band >= 1
    cand_pid = np.full((na, m), -1, dtype=np.int64)
    cand_dist = np.full((na, m), np.inf, dtype=np.float32)
    leaf_points = [tree.leaf_points(j) for j in range(tree.n_leaves)]

    def store(q, pids, dists):
        cand_pid[q] = -1
        cand_dist[q] = np.inf
        cand_pid[q, :pids.size] = pids
        cand_dist[q, :pids.size] = dists

    def current(q):
        real = cand_pid[q] >= 0
        return cand_pid[q][real], cand_dist[q][real]

    # (a) containing leaf, plus the previous leaf (f - 1, full) when it holds fewer than M
    # real points
    containing = descend_many(tree, ra)
    searched: list[tuple[int, ...]] = []
    for q in range(na):
        f = int(containing[q])
        leaves = (f,)
        if leaf_points[f].size < m and tree.levels > 0:
            leaves = (f, f - 1)
        searched.append(leaves)
        pids = np.concatenate([leaf_points[g] for g in leaves])
        store(q, *smallest_keys(pids, reduced_distances(ra[q], rb[pids]), m))

    # (b) rows 0, band, 2·band, …: the bounded traversal (exact when it visits fewer than
    #     `visits` leaves)
    for y in range(0, hac, band):
        for x in range(wac):
            q = y * wac + x
            store(q, *traverse(tree, ra[q], rb, leaf_points, *current(q), m, searched[q],
                               visits))

    # (c) propagation, t = 1 .. band − 1 (equivalently: every non-exact row, top to bottom,
    #     reading the row above as it stands after its own step)
    for t in range(1, band):
        for y in range(t, hac, band):
            for x in range(wac):
                q = y * wac + x
                up, _ = current((y - 1) * wac + x)
                cy, cx = up // wbc, up % wbc
                below = cy + 1 < hbc
                leaves = tree.leaf_of[(cy[below] + 1) * wbc + cx[below]]
                new = [int(g) for g in np.unique(leaves) if int(g) not in searched[q]]
                if not new:
                    continue
                pids = np.concatenate([leaf_points[g] for g in new])
                old_pids, old_dists = current(q)
                store(q, *smallest_keys(np.concatenate([old_pids, pids]),
                                        np.concatenate([old_dists,
                                                        reduced_distances(ra[q], rb[pids])]), m))
    # (d) refinement passes, each in two halves over a checkerboard (the queries with
    #     x + y even, then odd; each half reads the other half's current lists): every query
    #     is offered its four neighbours' candidates moved back by the neighbour's offset
    #     (the points, not their leaves: PatchMatch's propagation)
    for colour in [c for _ in range(refine) for c in (0, 1)]:
        before = cand_pid.copy()        # the other colour's lists do not change meanwhile
        for y in range(hac):
            for x in range((y + colour) % 2, wac, 2):
                q = y * wac + x
                offered = []
                for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                    ny, nx = y + dy, x + dx
                    if not (0 <= ny < hac and 0 <= nx < wac):
                        continue
                    nb_pids = before[ny * wac + nx]
                    nb_pids = nb_pids[nb_pids >= 0]
                    ty, tx = nb_pids // wbc - dy, nb_pids % wbc - dx
                    ok = (ty >= 0) & (ty < hbc) & (tx >= 0) & (tx < wbc)
                    offered.extend(int(t) for t in ty[ok] * wbc + tx[ok])
                if not offered:
                    continue
                pids = np.asarray(offered, dtype=np.int64)
                old_pids, old_dists = current(q)
                store(q, *smallest_keys(np.concatenate([old_pids, pids]),
                                        np.concatenate([old_dists,
                                                        reduced_distances(ra[q], rb[pids])]),
                                        m))
    if return_searched:
        return cand_pid, cand_dist, searched
    return cand_pid, cand_dist


# ----------------------------------------------------------------------------- 5. re-ranking


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


def nnf_oracle(a, b, *, patch_size: int, k: int, pca_dims: int, candidates: int,
               leaf_size: int = 32, seed: int = 0, band: int = 16, visits: int = 32,
               refine: int = 2, expand_points: int = 16, expand_leaves: int = 4,
               polish_passes: int = 2, slack: float = 1.0, expand_visits: int = 0,
               projections=None):
    """(positions (Hac, Wac, k, 2) int32 as (y, x), distances (Hac, Wac, k) float32): the
    approximate k nearest b patches of every a patch (sections 1–7). `projections` = (ra, rb)
    float32 replaces sections 1–2 (e.g. the device's own projections)."""
    p = patch_size
    img_a, img_b = as_image(a), as_image(b)
    assert img_a.shape[2] == img_b.shape[2], "a and b must have the same number of channels"
    hac, wac = corner_grid(img_a, p)
    hbc, wbc = corner_grid(img_b, p)
    na, nb = hac * wac, hbc * wbc
    m = candidates
    assert 1 <= k <= m, f"k={k} must be in [1, candidates={m}]"
    assert leaf_size >= m, f"leaf_size={leaf_size} must be >= candidates={m}"
    assert nb >= m, f"b has {nb} patches, fewer than candidates={m}"
    pa, pb = patch_matrix(img_a, p), patch_matrix(img_b, p)
    if projections is None:
        mean32, w32 = fit_pca(img_a, img_b, p, pca_dims, seed)
        ra, rb = project(pa, mean32, w32), project(pb, mean32, w32)
    else:
        ra, rb = (np.asarray(r) for r in projections)
        assert ra.dtype == np.float32 and rb.dtype == np.float32, "projections must be float32"
        assert ra.shape == (na, pca_dims) and rb.shape == (nb, pca_dims), (
            f"projections of shapes {ra.shape}, {rb.shape}; expected ({na}, {pca_dims}), "
            f"({nb}, {pca_dims})")
    tree = build_tree(rb, leaf_size)
    cand_pid, cand_dist = candidate_lists(ra, rb, tree, query_shape=(hac, wac),
                                          ref_shape=(hbc, wbc), candidates=m, band=band,
                                          visits=visits, refine=refine)
    real = cand_pid >= 0
    short = np.flatnonzero(real.sum(axis=1) < k)
    if short.size:
        q = int(short[0])
        raise AssertionError(
            f"{short.size} queries end with fewer than k={k} real candidates; first: query "
            f"(y={q // wac}, x={q % wac}) with {int(real[q].sum())}")
    q_idx = np.broadcast_to(np.arange(na)[:, None], cand_pid.shape)
    dist = exact_distances_f32(pa, pb, q_idx, np.where(real, cand_pid, 0))
    dist = np.where(real, dist, np.float32(np.inf)).astype(np.float32)
    pid_key = np.where(real, cand_pid, np.iinfo(np.int64).max)
    order = np.lexsort((pid_key, dist, ~real), axis=-1)[:, :k]
    best_pid = np.take_along_axis(cand_pid, order, axis=1)
    best_dist = np.take_along_axis(dist, order, axis=1)
    expand(best_pid, best_dist, cand_pid, cand_dist, ra, rb, tree, pa, pb,
           extra=expand_points, leaves=expand_leaves, slack=slack, visits=expand_visits)
    polish(best_pid, best_dist, cand_dist[:, m - 1], pa, pb, query_shape=(hac, wac),
           ref_shape=(hbc, wbc), passes=polish_passes, slack=slack)
    positions = np.stack([best_pid // wbc, best_pid % wbc], axis=-1).astype(np.int32)
    return positions.reshape(hac, wac, k, 2), best_dist.reshape(hac, wac, k)


# ----------------------------------------------------------------------------- checks


def exact_nnf(a, b, *, patch_size: int, k: int):
    """(positions (Hac, Wac, k, 2) int32, distances (Hac, Wac, k) float32): the exact k
    nearest b patches of every a patch by full L2 (computed in float64 from the float32
    values, then cast to float32), ascending by (float32 distance, pid)."""
    p = patch_size
    img_a, img_b = as_image(a), as_image(b)
    assert img_a.shape[2] == img_b.shape[2], "a and b must have the same number of channels"
    hac, wac = corner_grid(img_a, p)
    _, wbc = corner_grid(img_b, p)
    pa = patch_matrix(img_a, p).astype(np.float64)
    pb = patch_matrix(img_b, p).astype(np.float64)
    nb = pb.shape[0]
    assert 1 <= k <= nb, f"k={k} outside [1, {nb}]"
    best_pid = np.empty((pa.shape[0], k), dtype=np.int64)
    best_dist = np.empty((pa.shape[0], k), dtype=np.float32)
    chunk = max(1, 4_000_000 // max(1, nb * pa.shape[1]))
    pids = np.broadcast_to(np.arange(nb), (chunk, nb))
    for start in range(0, pa.shape[0], chunk):
        diff = pa[start:start + chunk, None, :] - pb[None, :, :]
        d = (diff * diff).sum(-1).astype(np.float32)
        order = np.lexsort((pids[:d.shape[0]], d), axis=-1)[:, :k]
        best_pid[start:start + chunk] = order
        best_dist[start:start + chunk] = np.take_along_axis(d, order, axis=1)
    positions = np.stack([best_pid // wbc, best_pid % wbc], axis=-1).astype(np.int32)
    return positions.reshape(hac, wac, k, 2), best_dist.reshape(hac, wac, k)


def reconstruct(positions: np.ndarray, b, patch_size: int) -> np.ndarray:
    """Voting reconstruction (float32, shape (Hac + p − 1, Wac + p − 1[, C]) following b's
    rank): every pixel is the mean, over the query patches covering it, of the pixel at the
    same offset of the query's first match (k index 0); computed in float64."""
    p = patch_size
    img_b = np.asarray(b).astype(np.float32).astype(np.float64)
    two_d = img_b.ndim == 2
    if two_d:
        img_b = img_b[..., None]
    positions = np.asarray(positions)
    hac, wac = positions.shape[:2]
    cy = positions[:, :, 0, 0].astype(np.int64)
    cx = positions[:, :, 0, 1].astype(np.int64)
    out = np.zeros((hac + p - 1, wac + p - 1, img_b.shape[2]))
    count = np.zeros((hac + p - 1, wac + p - 1, 1))
    for i in range(p):
        for jj in range(p):
            out[i:i + hac, jj:jj + wac] += img_b[cy + i, cx + jj]
            count[i:i + hac, jj:jj + wac] += 1
    out = (out / count).astype(np.float32)
    return out[..., 0] if two_d else out
