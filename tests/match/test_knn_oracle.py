"""The kNN oracle (tests/reference/knn.py) against hand-computed cases and naive loops.

Pure NumPy: no OpenCL, so the oracle is trusted before it judges `clpatch.knn`."""

import itertools

import numpy as np
import pytest

from tests.reference.knn import (
    chamfer_pair,
    grid,
    knn_brute,
    knn_vectors_brute,
    patch_distances,
)

# ----------------------------------------------------------------------------- grid rule


@pytest.mark.parametrize("size,patch,step,expected", [
    (10, 3, 1, list(range(8))),
    (10, 3, 3, [0, 3, 6, 7]),
    (10, 3, 7, [0, 7]),
    (10, 4, 3, [0, 3, 6]),          # 6 = 10 - 4 already on the lattice
    (5, 5, 1, [0]),
    (5, 5, 4, [0]),
    (20, 5, 100, [0, 15]),
])
def test_grid(size, patch, step, expected):
    np.testing.assert_array_equal(grid(size, patch, step), expected)


# ----------------------------------------------------------------------------- chamfer


def test_chamfer_identical_is_zero():
    rng = np.random.default_rng(0)
    q = rng.integers(0, 4, (4, 4))
    assert chamfer_pair(q, q) == 0.0
    q3 = rng.integers(0, 2, (3, 3, 3))
    assert chamfer_pair(q3, q3) == 0.0


def test_chamfer_missing_label_costs_twice_p_minus_one():
    q = np.array([[0, 0], [0, 5]])
    r = np.zeros((2, 2))
    # three pixels of label 0 find themselves (0); label 5 is absent from r: 2 (p - 1) = 2
    assert chamfer_pair(q, r) == 2.0
    # the other way: label 0 is in q; r's (1, 1) finds q's nearest 0 one step away
    assert chamfer_pair(r, q) == 1.0


def test_chamfer_linf_offset_one():
    q = np.array([[1, 0], [0, 0]])
    r = np.array([[0, 0], [0, 1]])
    # label 1 at (0, 0) of q: nearest 1 of r at (1, 1): max(1, 1) = 1;
    # the 0s at (0, 1), (1, 0) find 0s in place; the 0 at (1, 1) finds one at distance 1
    assert chamfer_pair(q, r) == 2.0


def test_chamfer_3x3_hand_computed():
    q = np.array([[2, 0, 0],
                  [0, 0, 0],
                  [0, 0, 7]])
    r = np.array([[0, 0, 0],
                  [0, 0, 0],
                  [0, 0, 2]])
    # (0,0) label 2 -> (2,2): 2; (2,2) label 7 missing: 2 (p - 1) = 4; the 0 at (2, 2) is
    # counted above; every other 0 of q has a 0 of r in place
    assert chamfer_pair(q, r) == 6.0
    # r -> q: r's 0 at (0, 0) finds q's 0 at (0, 1): 1; r's 2 at (2, 2) finds q's 2 at (0, 0): 2
    assert chamfer_pair(r, q) == 1.0 + 2.0


def test_chamfer_multichannel_needs_all_channels_equal():
    q = np.zeros((2, 2, 2))
    r = np.zeros((2, 2, 2))
    r[..., 1] = 1          # channel 0 matches everywhere, channel 1 nowhere
    assert chamfer_pair(q, r) == 4 * 2.0
    r[1, 1] = 0            # one pixel now equal in both channels
    assert chamfer_pair(q, r) == 0 + 1 + 1 + 1     # offsets from (0,0), (0,1), (1,0); (1,1) 0


def test_chamfer_vectorised_equals_loops():
    rng = np.random.default_rng(3)
    for p, shape in [(2, (7, 6)), (3, (8, 9)), (4, (9, 7, 2)), (5, (9, 9))]:
        query = rng.integers(0, 3, shape).astype(np.float32)
        reference = rng.integers(0, 3, (shape[0] + 1, shape[1] - 1) + shape[2:]).astype(np.float32)
        for qy, qx in [(0, 0), (shape[0] - p, shape[1] - p), (1, 2)]:
            q = query[qy:qy + p, qx:qx + p]
            d1 = patch_distances(query, reference, p, "chamfer", qy, qx)
            d2 = patch_distances(query, reference, p, "chamfer_sym", qy, qx)
            for cy, cx in itertools.product(range(d1.shape[0]), range(d1.shape[1])):
                r = reference[cy:cy + p, cx:cx + p]
                assert d1[cy, cx] == chamfer_pair(q, r), (p, qy, qx, cy, cx)
                assert d2[cy, cx] == chamfer_pair(q, r) + chamfer_pair(r, q), (p, qy, qx, cy, cx)


def test_chamfer_self_match_zero_and_bounds():
    rng = np.random.default_rng(4)
    image = rng.integers(0, 5, (10, 11))
    p = 4
    for metric in ("chamfer", "chamfer_sym"):
        pos, dist = knn_brute(image, None, p, 3, metric)
        assert np.all(dist[..., 0] == 0)
        bound = p * p * 2 * (p - 1) * (2 if metric == "chamfer_sym" else 1)
        assert np.all(dist <= bound)


# ----------------------------------------------------------------------------- l2 / l1


def naive_distance(query, reference, p, qy, qx, cy, cx, metric):
    q = np.asarray(query, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    total = 0.0
    for i in range(p):
        for j in range(p):
            a = np.atleast_1d(q[qy + i, qx + j])
            b = np.atleast_1d(r[cy + i, cx + j])
            for c in range(a.size):
                d = a[c] - b[c]
                total += d * d if metric == "l2" else abs(d)
    return total


@pytest.mark.parametrize("metric", ["l2", "l1"])
@pytest.mark.parametrize("shape", [(6, 7), (6, 5, 3)])
def test_l2_l1_equal_naive_loops(metric, shape):
    rng = np.random.default_rng(5)
    query = rng.integers(0, 256, shape).astype(np.float32)
    reference = rng.integers(0, 256, (shape[0] + 2, shape[1] + 1) + shape[2:]).astype(np.float32)
    p = 3
    for qy, qx in itertools.product(range(shape[0] - p + 1), range(shape[1] - p + 1)):
        d = patch_distances(query, reference, p, metric, qy, qx)
        assert d.shape == (reference.shape[0] - p + 1, reference.shape[1] - p + 1)
        for cy, cx in itertools.product(range(d.shape[0]), range(d.shape[1])):
            assert d[cy, cx] == naive_distance(query, reference, p, qy, qx, cy, cx, metric)


def test_reference_none_is_the_query():
    image = np.random.default_rng(6).random((9, 8)).astype(np.float32)
    np.testing.assert_array_equal(patch_distances(image, None, 3, "l2", 2, 4),
                                  patch_distances(image, image, 3, "l2", 2, 4))


# ----------------------------------------------------------------------------- tie rule and knn


@pytest.mark.parametrize("metric", ["l2", "l1", "chamfer", "chamfer_sym"])
def test_constant_image_row_major_ties(metric):
    image = np.full((7, 9), 3.0)
    p, k = 3, 10
    pos, dist = knn_brute(image, None, p, k, metric, step=2)
    assert np.all(dist == 0)
    ncols = 9 - p + 1
    expected = np.stack([np.arange(k) // ncols, np.arange(k) % ncols], -1)
    assert pos.shape == (len(grid(7, p, 2)), len(grid(9, p, 2)), k, 2)
    assert np.all(pos == expected)


def test_knn_brute_matches_full_sort():
    rng = np.random.default_rng(7)
    query = rng.integers(0, 4, (9, 10)).astype(np.float32)      # frequent ties
    reference = rng.integers(0, 4, (8, 12)).astype(np.float32)
    p, step = 3, 3
    ncols = 12 - p + 1
    n_cand = (8 - p + 1) * ncols
    for metric in ("l2", "l1", "chamfer"):
        pos, dist = knn_brute(query, reference, p, n_cand, metric, step)
        gy, gx = grid(9, p, step), grid(10, p, step)
        for a, b in itertools.product(range(len(gy)), range(len(gx))):
            d = patch_distances(query, reference, p, metric, gy[a], gx[b]).reshape(-1)
            keys = sorted((d[i], i) for i in range(n_cand))
            assert [i for _, i in keys] == list(pos[a, b, :, 0] * ncols + pos[a, b, :, 1])
            assert [v for v, _ in keys] == list(dist[a, b])
        assert np.all(np.diff(dist, axis=-1) >= 0)


def test_knn_brute_self_at_distance_zero():
    image = np.random.default_rng(8).random((11, 10)).astype(np.float32)
    pos, dist = knn_brute(image, None, 4, 1, "l2")
    gy, gx = grid(11, 4, 1), grid(10, 4, 1)
    assert np.all(dist[..., 0] == 0)
    np.testing.assert_array_equal(pos[..., 0, 0], np.broadcast_to(gy[:, None], pos.shape[:2]))
    np.testing.assert_array_equal(pos[..., 0, 1], np.broadcast_to(gx[None, :], pos.shape[:2]))


# ----------------------------------------------------------------------------- vectors


@pytest.mark.parametrize("metric", ["l2", "l1"])
def test_knn_vectors_brute(metric):
    rng = np.random.default_rng(9)
    queries = rng.integers(0, 3, (13, 4))
    references = rng.integers(0, 3, (17, 4))
    idx, dist = knn_vectors_brute(queries, references, 5, metric)
    assert idx.dtype == np.int32 and idx.shape == (13, 5) and dist.shape == (13, 5)
    for n in range(13):
        diff = queries[n] - references
        d = (diff * diff).sum(-1) if metric == "l2" else np.abs(diff).sum(-1)
        keys = sorted((float(d[m]), m) for m in range(17))[:5]
        assert list(idx[n]) == [m for _, m in keys]
        assert list(dist[n]) == [v for v, _ in keys]
