"""The NNF oracle (tests/reference/nnf.py) against exact search, hand-made cases and naive
loops. Pure NumPy: no OpenCL, so the oracle is trusted before it judges `clpatch.nnf`."""

from __future__ import annotations

import numpy as np
import pytest

from tests.reference.images import smooth_image
from tests.reference.nnf import (
    build_tree,
    candidate_lists,
    descend,
    exact_distances_f32,
    exact_nnf,
    fit_pca,
    nnf_oracle,
    patch_matrix,
    project,
    reconstruct,
    reduced_distances,
    tree_levels,
)


def full_distance(a, b, p, y, x, cy, cx):
    """Full L2 between a's patch at (y, x) and b's at (cy, cx), in float64."""
    qa = np.asarray(a, np.float64)[y:y + p, x:x + p]
    qb = np.asarray(b, np.float64)[cy:cy + p, cx:cx + p]
    return float(((qa - qb) ** 2).sum())


# ----------------------------------------------------------------------------- patches


def test_patch_matrix_element_order():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 1000, (6, 7, 3))
    p = 3
    P = patch_matrix(img, p)
    assert P.dtype == np.float32 and P.shape == (4 * 5, 27)
    for y in range(4):
        for x in range(5):
            for c in range(3):
                for i in range(p):
                    for jj in range(p):
                        assert P[y * 5 + x, (c * p + i) * p + jj] == img[y + i, x + jj, c]


def test_patch_matrix_gray_is_one_channel():
    img = np.arange(30).reshape(5, 6)
    np.testing.assert_array_equal(patch_matrix(img, 2), patch_matrix(img[..., None], 2))


# ----------------------------------------------------------------------------- PCA, projection


def test_fit_pca_orthonormal_signed_and_seeded():
    # n_all = 784 + 728 > 1000 patches: the seed picks which 1000
    a, b = smooth_image((30, 30, 3), 1), smooth_image((28, 30, 3), 2)
    p, dims = 3, 6
    mean, w = fit_pca(a, b, p, dims, seed=5)
    assert mean.dtype == np.float32 and w.dtype == np.float32
    assert mean.shape == (27,) and w.shape == (27, dims)
    w64 = w.astype(np.float64)
    np.testing.assert_allclose(w64.T @ w64, np.eye(dims), atol=1e-6)
    for col in w64.T:                               # sign rule: largest |value| positive
        assert col[np.argmax(np.abs(col))] > 0
    mean2, w2 = fit_pca(a, b, p, dims, seed=5)
    np.testing.assert_array_equal(mean, mean2)
    np.testing.assert_array_equal(w, w2)
    mean3, w3 = fit_pca(a, b, p, dims, seed=6)
    assert not np.array_equal(mean, mean3)
    assert not np.array_equal(w, w3)


def test_fit_pca_uses_all_patches_when_fewer_than_1000():
    # n_all <= 1000: every patch is picked (in another order); the mean is the full mean
    a, b = smooth_image((10, 10), 3), smooth_image((9, 11), 4)
    mean, _ = fit_pca(a, b, 3, 2, seed=0)
    both = np.concatenate([patch_matrix(a, 3), patch_matrix(b, 3)]).astype(np.float64)
    np.testing.assert_allclose(mean, both.mean(0).astype(np.float32), rtol=1e-6)


def test_project_is_the_sequential_float32_sum():
    rng = np.random.default_rng(2)
    P = rng.normal(0, 50, (7, 12)).astype(np.float32)
    mean = rng.normal(0, 5, 12).astype(np.float32)
    W = rng.normal(0, 1, (12, 3)).astype(np.float32)
    r = project(P, mean, W)
    assert r.dtype == np.float32
    for q in range(7):
        for k in range(3):
            acc = np.float32(0)
            for j in range(12):
                acc = np.float32(acc + np.float32(np.float32(P[q, j] - mean[j]) * W[j, k]))
            assert r[q, k] == acc
    np.testing.assert_allclose(r, (P.astype(np.float64) - mean) @ W, rtol=1e-4, atol=1e-3)


def test_reduced_distances_sequential_float32():
    rng = np.random.default_rng(3)
    rq = rng.normal(0, 9, 5).astype(np.float32)
    rows = rng.normal(0, 9, (6, 5)).astype(np.float32)
    d = reduced_distances(rq, rows)
    for n in range(6):
        acc = np.float32(0)
        for k in range(5):
            t = np.float32(rq[k] - rows[n, k])
            acc = np.float32(acc + np.float32(t * t))
        assert d[n] == acc


# ----------------------------------------------------------------------------- tree


@pytest.mark.parametrize("n,s,levels", [(1, 4, 0), (4, 4, 0), (5, 4, 1), (8, 4, 1), (9, 4, 2),
                                        (16, 4, 2), (17, 4, 3), (1739, 32, 6), (2048, 32, 6)])
def test_tree_levels(n, s, levels):
    assert tree_levels(n, s) == levels


@pytest.mark.parametrize("n,s,dims", [(37, 4, 3), (64, 8, 2), (21, 8, 4), (5, 8, 2), (100, 6, 5)])
def test_tree_structure(n, s, dims):
    rng = np.random.default_rng(n + s)
    rb = rng.normal(0, 1, (n, dims)).astype(np.float32)
    rb[:, 1] *= 10                                  # a wide dimension
    tree = build_tree(rb, s)
    L = tree.levels
    n_pad = 2 ** L * s
    assert tree.order.shape == (n_pad,)
    np.testing.assert_array_equal(np.sort(tree.order), np.arange(n_pad))      # a permutation
    # leaves: S slots each, their real points partition the pids, leaf_of agrees
    real = np.concatenate([tree.leaf_points(j) for j in range(2 ** L)])
    np.testing.assert_array_equal(np.sort(real), np.arange(n))
    for j in range(2 ** L):
        assert tree.leaf_slots(j).size == s
        assert np.all(tree.leaf_of[tree.leaf_points(j)] == j)
    # padding (+inf everywhere) always sorts to the right: it is a suffix of the order
    assert np.all(tree.order[:n] < n) and np.all(tree.order[n:] >= n)
    # medians split each node's segment: left half <= median <= right half, median = max left
    values = np.full((n_pad, dims), np.inf, np.float32)
    values[:n] = rb
    for level in range(L):
        seg = n_pad >> level
        for node in range(2 ** level):
            h = 2 ** level + node
            dim, med = tree.dims[h], tree.medians[h]
            assert 0 <= dim < dims and tree.medians.dtype == np.float32
            part = values[tree.order[node * seg:(node + 1) * seg], dim]
            left, right = part[:seg // 2], part[seg // 2:]
            assert left.max() == med and np.all(right >= med)
    # root dimension: widest spread of the real points
    if L > 0:
        spread = rb.max(0) - rb.min(0)
        assert tree.dims[1] == int(np.argmax(spread))
    # with continuous values (no ties but a median with itself) every point descends home
    for pid in range(n):
        assert descend(tree, rb[pid]) == tree.leaf_of[pid]


def test_tree_hand_example_and_spread_ties():
    # 8 points, 2 dims, S = 2: L = 2
    rb = np.array([[5, 0], [1, 0], [4, 1], [0, 1], [7, 3], [2, 3], [6, 2], [3, 2]], np.float32)
    tree = build_tree(rb, 2)
    assert tree.levels == 2
    assert tree.dims[1] == 0 and tree.medians[1] == 3          # spreads (7, 3): dim 0
    # left node: points x in {0,1,2,3}: cell bounds x in [0, 3], y in [0, 3]: spread tie
    # (3 == 3) -> dim 0 (strict >); right node: x in [3, 7] (4) vs y [0, 3] (3) -> dim 0
    assert tree.dims[2] == 0 and tree.medians[2] == 1
    assert tree.dims[3] == 0 and tree.medians[3] == 5
    np.testing.assert_array_equal(tree.order, [3, 1, 5, 7, 2, 0, 6, 4])
    np.testing.assert_array_equal(tree.leaf_of, [2, 0, 2, 0, 3, 1, 3, 1])
    assert descend(tree, np.array([3, 9], np.float32)) == 1     # 3 <= 3 goes left, then right
    assert descend(tree, np.array([3.5, 9], np.float32)) == 2


def test_tree_stable_sort_on_ties():
    # all values equal: every stable sort keeps the order; padding stays at the end
    rb = np.zeros((10, 2), np.float32)
    tree = build_tree(rb, 4)
    np.testing.assert_array_equal(tree.order, np.arange(16))
    assert tree.dims[1] == 0 and tree.medians[1] == 0
    # node 3 owns [0 0 +inf +inf ...]: median (last of left half) is +inf
    assert tree.medians[3] == np.inf


# ----------------------------------------------------------------------------- candidates


def test_candidate_lists_sorted_and_exact_rows():
    a, b = smooth_image((22, 12), 7), smooth_image((14, 15), 8)
    p, dims, m, band = 3, 4, 6, 8
    pa, pb = patch_matrix(a, p), patch_matrix(b, p)
    mean, w = fit_pca(a, b, p, dims, 0)
    ra, rb = project(pa, mean, w), project(pb, mean, w)
    tree = build_tree(rb, 8)
    hac, wac = 20, 10
    cp, cd, searched = candidate_lists(ra, rb, tree, query_shape=(hac, wac), ref_shape=(12, 13),
                                       candidates=m, band=band, return_searched=True)
    for q in range(hac * wac):
        pids, dists = cp[q][cp[q] >= 0], cd[q][cp[q] >= 0]
        assert pids.size == np.unique(pids).size
        keys = list(zip(dists.tolist(), pids.tolist(), strict=True))
        assert keys == sorted(keys)
        np.testing.assert_array_equal(dists, reduced_distances(ra[q], rb[pids]))
        # never worse than the containing leaf (and the previous one) alone
        own = np.concatenate([tree.leaf_points(g) for g in searched[q]])
        own_d = np.sort(reduced_distances(ra[q], rb[own]))[:m]
        assert pids.size >= own_d.size and np.all(dists[:own_d.size] <= own_d)
        if (q // wac) % band == 0:               # exact rows: the M smallest keys of all b
            d = reduced_distances(ra[q], rb)
            best = np.lexsort((np.arange(d.size), d))[:m]
            np.testing.assert_array_equal(pids, best)


# ----------------------------------------------------------------------------- whole field


@pytest.mark.parametrize("channels", [None, 3])
def test_single_leaf_all_candidates_is_exact(channels):
    shape = (12, 14) if channels is None else (12, 14, channels)
    a, b = smooth_image(shape, 11), smooth_image((11, 13) + shape[2:], 12)
    p = 3
    nb = 9 * 11
    d = p * p * (channels or 1)
    for dims in (2, d):
        pos, dist = nnf_oracle(a, b, patch_size=p, k=4, pca_dims=dims, candidates=nb,
                               leaf_size=nb, band=4)
        epos, edist = exact_nnf(a, b, patch_size=p, k=4)
        np.testing.assert_array_equal(pos, epos)
        np.testing.assert_array_equal(dist, edist)


def test_shifted_copy_is_found_exactly():
    big = smooth_image((40, 44, 3), 21)
    sy, sx = 3, -2                                  # a's patch (y, x) is b's (y + sy, x + sx)
    a = big[8:32, 10:34]
    b = big[8 - sy:32 - sy + 6, 10 - sx:34 - sx + 4]
    p = 4
    pos, dist = nnf_oracle(a, b, patch_size=p, k=2, pca_dims=6, candidates=8, leaf_size=16,
                           band=8)
    hac, wac = a.shape[0] - p + 1, a.shape[1] - p + 1
    hbc, wbc = b.shape[0] - p + 1, b.shape[1] - p + 1
    checked = 0
    for y in range(hac):
        for x in range(wac):
            if 0 <= y + sy < hbc and 0 <= x + sx < wbc:
                assert tuple(pos[y, x, 0]) == (y + sy, x + sx)
                assert dist[y, x, 0] == 0
                checked += 1
    assert checked > hac * wac // 2


@pytest.mark.parametrize("levels,seed", [(3, 0), (256, 1)])
def test_distances_true_positions_valid_ascending_ties_by_pid(levels, seed):
    # levels = 3: lots of exact ties
    rng = np.random.default_rng(seed)
    a = rng.integers(0, levels, (18, 20, 2)).astype(np.float32)
    b = rng.integers(0, levels, (16, 17, 2)).astype(np.float32)
    p, k = 3, 5
    pos, dist = nnf_oracle(a, b, patch_size=p, k=k, pca_dims=3, candidates=8, leaf_size=8,
                           band=5)
    assert pos.dtype == np.int32 and dist.dtype == np.float32
    hbc, wbc = 14, 15
    assert pos.shape == (16, 18, k, 2) and dist.shape == (16, 18, k)
    assert np.all((pos[..., 0] >= 0) & (pos[..., 0] < hbc))
    assert np.all((pos[..., 1] >= 0) & (pos[..., 1] < wbc))
    pid = pos[..., 0].astype(np.int64) * wbc + pos[..., 1]
    for y in range(16):
        for x in range(18):
            assert np.unique(pid[y, x]).size == k
            for j in range(k):
                assert dist[y, x, j] == full_distance(a, b, p, y, x, *pos[y, x, j])
            keys = list(zip(dist[y, x].tolist(), pid[y, x].tolist(), strict=True))
            assert keys == sorted(keys)
    if levels == 3:
        assert np.any(np.diff(dist, axis=-1) == 0)   # ties did occur


def test_field_never_beats_exact_and_often_matches():
    a, b = smooth_image((26, 28), 31), smooth_image((24, 30), 32)
    pos, dist = nnf_oracle(a, b, patch_size=3, k=2, pca_dims=4, candidates=8, leaf_size=16)
    _, edist = exact_nnf(a, b, patch_size=3, k=2)
    assert np.all(dist >= edist)
    assert np.mean(dist[..., 0] == edist[..., 0]) > 0.5


def test_projections_argument():
    a, b = smooth_image((15, 16), 41), smooth_image((14, 17), 42)
    p, dims = 3, 4
    mean, w = fit_pca(a, b, p, dims, seed=3)
    ra, rb = project(patch_matrix(a, p), mean, w), project(patch_matrix(b, p), mean, w)
    kw = dict(patch_size=p, k=3, pca_dims=dims, candidates=6, leaf_size=8, band=4)
    pos, dist = nnf_oracle(a, b, seed=3, **kw)
    pos2, dist2 = nnf_oracle(a, b, seed=99, projections=(ra, rb), **kw)
    np.testing.assert_array_equal(pos, pos2)
    np.testing.assert_array_equal(dist, dist2)
    with pytest.raises(AssertionError):
        nnf_oracle(a, b, projections=(ra.astype(np.float64), rb), **kw)


def test_preconditions():
    a, b = smooth_image((12, 12), 51), smooth_image((6, 6), 52)       # Nb = 16 for p = 3
    with pytest.raises(AssertionError, match="leaf_size"):
        nnf_oracle(a, b, patch_size=3, k=2, pca_dims=2, candidates=8, leaf_size=4)
    with pytest.raises(AssertionError, match="fewer than candidates"):
        nnf_oracle(a, b, patch_size=3, k=2, pca_dims=2, candidates=17, leaf_size=32)
    with pytest.raises(AssertionError, match="k="):
        nnf_oracle(a, b, patch_size=3, k=9, pca_dims=2, candidates=8, leaf_size=8)


def test_short_leaf_takes_the_previous_leaf():
    # Nb = 21 = 2·8 + 5, S = M = k = 8: leaves hold 8, 8, 5, 0 real points. The 5-point leaf
    # is a LEFT child whose sibling (leaf ^ 1) is all padding; its queries also take the
    # previous leaf (full), so every query ends with k real candidates.
    rng = np.random.default_rng(20)
    b = rng.integers(0, 256, (5, 9)).astype(np.float32)
    a = rng.integers(0, 256, (12, 9)).astype(np.float32)
    pos, dist = nnf_oracle(a, b, patch_size=3, k=8, pca_dims=4, candidates=8, leaf_size=8)
    assert np.all(pos >= 0) and np.all(np.isfinite(dist))


# ----------------------------------------------------------------------------- exact, votes


def test_exact_nnf_ties_by_pid_and_integer_sums():
    a = np.full((6, 7), 3.0)
    b = np.full((5, 6), 3.0)
    pos, dist = exact_nnf(a, b, patch_size=2, k=4)
    assert np.all(dist == 0)
    np.testing.assert_array_equal(pos[0, 0], [[0, 0], [0, 1], [0, 2], [0, 3]])
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (7, 8, 3)).astype(np.float32)
    b = rng.integers(0, 256, (6, 9, 3)).astype(np.float32)
    pa, pb = patch_matrix(a, 3), patch_matrix(b, 3)
    q, pid = np.meshgrid(np.arange(pa.shape[0]), np.arange(pb.shape[0]), indexing="ij")
    d32 = exact_distances_f32(pa, pb, q, pid)
    d64 = ((pa[:, None].astype(np.float64) - pb[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(d32, d64.astype(np.float32))     # exact for integers
    _, edist = exact_nnf(a, b, patch_size=3, k=3)
    np.testing.assert_array_equal(edist.reshape(-1, 3), np.sort(d32, axis=1)[:, :3])


@pytest.mark.parametrize("channels", [None, 2])
def test_reconstruct_against_loop(channels):
    rng = np.random.default_rng(5)
    p = 3
    hac, wac = 4, 5
    bshape = (7, 8) if channels is None else (7, 8, channels)
    b = rng.integers(0, 100, bshape).astype(np.float32)
    pos = np.stack([rng.integers(0, 5, (hac, wac, 2)), rng.integers(0, 6, (hac, wac, 2))],
                   axis=-1).astype(np.int32)
    out = reconstruct(pos, b, p)
    b3 = b if channels else b[..., None]
    expect = np.zeros((hac + p - 1, wac + p - 1, b3.shape[2]))
    for Y in range(hac + p - 1):
        for X in range(wac + p - 1):
            votes = [b3[pos[y, x, 0, 0] + Y - y, pos[y, x, 0, 1] + X - x]
                     for y in range(hac) for x in range(wac)
                     if 0 <= Y - y < p and 0 <= X - x < p]
            expect[Y, X] = np.mean(votes, axis=0)
    if channels is None:
        expect = expect[..., 0]
    assert out.dtype == np.float32 and out.shape == expect.shape
    np.testing.assert_array_equal(out, expect.astype(np.float32))


def test_reconstruct_of_exact_self_field_is_identity():
    a = smooth_image((10, 11, 3), 61)
    pos, _ = exact_nnf(a, a, patch_size=3, k=1)
    np.testing.assert_array_equal(reconstruct(pos, a, 3), a)
