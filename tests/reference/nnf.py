"""NumPy reference ("oracle") of the nearest-neighbour field of `clpatch.nnf`: propagation-
assisted k-d trees (He & Sun; the GPU formulation of Oancea et al.), written from the
algorithm's specification (the steps below; clpatch/match/nnf/search.py documents the same
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

Modules: this one holds the specification and `nnf_oracle`, and re-exports the steps from
nnf_pca (patch vectors, sections 1–2), nnf_tree (section 3), nnf_candidates (section 4),
nnf_rank (the float32 full distance of section 5, sections 6–7) and nnf_checks (`exact_nnf`,
`reconstruct`).

Conventions: images (H, W) or (H, W, C), any real dtype, taken as float32 (no scaling);
query index q = y · Wac + x over a's Hac × Wac patch corners; pid = y · Wbc + x over b's;
positions are (y, x) top-left corners, int32.
"""

from __future__ import annotations

import numpy as np

from .nnf_candidates import candidate_lists, reduced_distances, smallest_keys, traverse
from .nnf_checks import exact_nnf, reconstruct
from .nnf_pca import as_image, corner_grid, fit_pca, patch_matrix, project
from .nnf_rank import exact_distances_f32, expand, polish
from .nnf_tree import Tree, build_tree, descend, descend_many, tree_levels

__all__ = [
    "Tree", "as_image", "build_tree", "candidate_lists", "corner_grid", "descend",
    "descend_many", "exact_distances_f32", "exact_nnf", "expand", "fit_pca", "nnf_oracle",
    "patch_matrix", "polish", "project", "reconstruct", "reduced_distances", "smallest_keys",
    "traverse", "tree_levels",
]


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
