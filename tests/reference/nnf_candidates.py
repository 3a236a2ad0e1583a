"""Candidate lists of the NNF oracle: section 4 of the specification in tests/reference/nnf.py
(which re-exports these names).

`reduced_distances` (float32 distances in the PCA space), `smallest_keys` (the m smallest
(distance, pid) keys of a set), `traverse` (4(b): the bounded depth-first traversal, also used
by section 6's expansion) and `candidate_lists` (4(a)–(d): containing leaf, traversal on
every band-th row, propagation down the band, checkerboard refinement). Imports nothing from
clpatch.
"""

from __future__ import annotations

import numpy as np

from .nnf_tree import Tree, descend_many

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
