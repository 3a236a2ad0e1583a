"""`clpatch.nnf` (approximate nearest-neighbour fields by propagation-assisted k-d trees)
against the NumPy oracle of tests/reference/nnf.py, which implements the same algorithm.

On integer-valued images every float32 sum of the algorithm is reproduced bit for bit (the
projections follow the same sequence of rounded operations, the re-ranking sums are
exact), so positions and distances must equal the oracle's exactly. Each returned distance
must also be the true full-patch distance of its position. The real-image accuracy, the
reconstruction and the command line are tested in test_nnf_quality.py and
tests/cli/test_cli_nnf.py. Images stay small: CI runs these on a 2-core CPU through PoCL.
"""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.match.nnf.plan import POLISH, REFINE, VISITS, NnfPlan, hard_effort
from clpatch.match.nnf.search import BAND
from tests.helpers import random_image
from tests.reference.nnf import (
    build_tree,
    candidate_lists,
    fit_pca,
    nnf_oracle,
    patch_matrix,
    project,
)


def host(array) -> np.ndarray:
    return array.get() if isinstance(array, cla.Array) else np.asarray(array)


def integers(shape, seed: int, low: int = 0, high: int = 256, dtype=np.uint8) -> np.ndarray:
    return np.random.default_rng(seed).integers(low, high, shape).astype(dtype)


def leaf_of(candidates: int, leaf_size) -> int:
    """The leaf size `nnf` runs with (its documented default rule)."""
    if leaf_size is None:
        return max(32, 1 << (candidates - 1).bit_length())
    return leaf_size


def true_distances(a, b, positions, p: int) -> np.ndarray:
    """Full-patch sums of squared differences (float64) of every query of a and its
    returned positions in b."""
    pa = patch_matrix(host(a), p).astype(np.float64)
    pb = patch_matrix(host(b), p).astype(np.float64)
    hac, wac, k = positions.shape[:3]
    wbc = host(b).shape[1] - p + 1
    pid = (positions[..., 0].astype(np.int64) * wbc + positions[..., 1]).reshape(hac * wac, k)
    diff = pa[:, None, :] - pb[pid]
    return (diff * diff).sum(-1).reshape(hac, wac, k)


def check_valid(result, a, b, *, patch_size: int, k: int, exact_sums: bool) -> None:
    """What holds for any field: shapes and types, positions inside b, no position twice,
    distances ascending and equal to the true distances of their positions (exactly for
    integer-valued images, where every float32 sum is exact)."""
    p = patch_size
    ha, wa = host(a).shape[:2]
    hb, wb = host(b).shape[:2]
    hac, wac = ha - p + 1, wa - p + 1
    assert isinstance(result, clpatch.Matches)
    assert (result.patch_size, result.step, result.k, result.metric) == (p, 1, k, "l2")
    np.testing.assert_array_equal(result.grid_y, np.arange(hac))
    np.testing.assert_array_equal(result.grid_x, np.arange(wac))
    positions, distances = host(result.positions), host(result.distances)
    assert positions.dtype == np.int32 and distances.dtype == np.float32
    assert positions.shape == (hac, wac, k, 2) and distances.shape == (hac, wac, k)
    y, x = positions[..., 0], positions[..., 1]
    assert np.all((y >= 0) & (y <= hb - p) & (x >= 0) & (x <= wb - p)), "a position is outside b"
    codes = np.sort(y.astype(np.int64) * wb + x, axis=-1)
    assert np.all(np.diff(codes, axis=-1) != 0), "a position is returned twice"
    assert np.all(np.diff(distances, axis=-1) >= 0), "distances are not ascending"
    true = true_distances(a, b, positions, p)
    if exact_sums:
        np.testing.assert_array_equal(distances, true.astype(np.float32))
    else:
        np.testing.assert_allclose(distances, true, rtol=1e-5, atol=1e-3)


def effort(pca_dims: int) -> dict:
    """The oracle's keywords for the hard queries' effort in `pca_dims` dimensions (the
    plan's `hard_effort`)."""
    slack, points, leaves, visits = hard_effort(pca_dims)
    return dict(slack=slack, expand_points=points, expand_leaves=leaves, expand_visits=visits)


def check_oracle(result, a, b, *, patch_size, k, pca_dims, candidates, leaf_size, seed=0):
    """The field is the oracle's, bit for bit (integer-valued images)."""
    positions, distances = nnf_oracle(
        host(a), host(b), patch_size=patch_size, k=k, pca_dims=pca_dims, candidates=candidates,
        leaf_size=leaf_of(candidates, leaf_size), seed=seed, band=BAND, visits=VISITS,
        refine=REFINE, polish_passes=POLISH, **effort(pca_dims))
    got_pos, got_dist = host(result.positions), host(result.distances)
    bad = np.argwhere(np.any(got_pos != positions, axis=-1))
    if len(bad):
        y, x, j = (int(v) for v in bad[0])
        raise AssertionError(
            f"{len(bad)} positions differ from the oracle; first at query ({y}, {x}), rank "
            f"{j}: got {tuple(got_pos[y, x, j])} at {got_dist[y, x, j]}, expected "
            f"{tuple(positions[y, x, j])} at {distances[y, x, j]}")
    np.testing.assert_array_equal(got_dist, distances)


def searched_leaves(a, b, *, patch_size, pca_dims, candidates, leaf_size, seed=0):
    """(tree, every query's searched leaves) of the oracle's containing-leaf step."""
    p = patch_size
    mean, basis = fit_pca(a, b, p, pca_dims, seed)
    ra, rb = project(patch_matrix(a, p), mean, basis), project(patch_matrix(b, p), mean, basis)
    tree = build_tree(rb, leaf_size)
    shape_a = (a.shape[0] - p + 1, a.shape[1] - p + 1)
    shape_b = (b.shape[0] - p + 1, b.shape[1] - p + 1)
    _, _, searched = candidate_lists(ra, rb, tree, query_shape=shape_a, ref_shape=shape_b,
                                     candidates=candidates, band=BAND, visits=VISITS,
                                     refine=REFINE, return_searched=True)
    return tree, searched


# =========================================================================== the oracle

# (a shape, b shape, dtype, patch, pca_dims, candidates, k, leaf_size, short-leaf rule);
# every a but the last has more than 16 rows of patches (backtracking rows and propagation
# both run). The rule column says what the containing-leaf step must meet (checked on the
# oracle's tree): "short", a last real leaf with fewer than M points, so that its queries
# also search the previous leaf; "empty", an all-padding leaf that queries reach.
CASES = [
    # Nb = 315 = 78 * 4 + 3; 79 real leaves, more than a backtracking row visits (VISITS)
    pytest.param((21, 19), (17, 23), np.uint8, 3, 4, 4, 2, 4, "short", id="gray-Nb315-leaf4"),
    pytest.param((23, 20, 3), (19, 18, 3), np.float32, 4, 6, 8, 3, 8, None, id="rgb-float32"),
    # Nb = 21 with leaf 8: leaves of 8, 8 and 5 points (and an empty one)
    pytest.param((20, 11), (5, 9), np.uint8, 3, 3, 8, 8, 8, "short", id="Nb21-leaf8-k-is-M"),
    # Nb = 24 with leaf 8: leaves of 8, 8, 8 and an empty one
    pytest.param((19, 12), (5, 10), np.float32, 3, 5, 8, 1, 8, "empty", id="Nb24-leaf8"),
    pytest.param((37, 15), (11, 12), np.uint8, 3, 2, 6, 4, 16, None, id="b-smaller-3-bands"),
    pytest.param((18, 21, 2), (20, 17, 2), np.uint8, 2, 8, 5, 5, 8, None, id="2ch-all-dims"),
    pytest.param((19, 13, 3), (9, 10, 3), np.uint8, 1, 3, 4, 2, 4, None, id="rgb-patch1"),
    pytest.param((26, 24, 3), (22, 25, 3), np.uint8, 5, 10, 8, 1, None, None,
                 id="rgb-default-leaf"),
    pytest.param((21, 18), (20, 19), np.float32, 4, 6, 64, 32, None, None, id="M64-k32"),
    # Nb = 1088: 2048 slots, more than one sort block (1024), so the global sort steps run
    pytest.param((19, 20), (36, 34), np.uint8, 3, 4, 8, 2, None, None, id="Nb1088"),
    pytest.param((9, 30), (12, 11), np.int16, 3, 4, 6, 3, 8, None, id="int16-one-band"),
    # more than EFFORT_DIMS dimensions: the hard queries' slack and the expansion's
    # traversal (8 leaves at 11-20 dimensions, 16 at 21-30) in a tree of 64 and 32 leaves
    pytest.param((24, 22, 3), (30, 28, 3), np.uint8, 4, 20, 8, 2, 8, None, id="rgb-pca20"),
    pytest.param((20, 23, 3), (19, 21, 3), np.uint8, 4, 27, 6, 1, 8, None, id="rgb-pca27"),
]


@pytest.mark.parametrize("shape_a,shape_b,dtype,p,dims,m,k,leaf,rule", CASES)
def test_integer_images_equal_the_oracle(runtime, shape_a, shape_b, dtype, p, dims, m, k, leaf,
                                         rule):
    low = -300 if dtype == np.int16 else 0
    a = integers(shape_a, seed=sum(shape_a) + p, low=low, dtype=dtype)
    b = integers(shape_b, seed=sum(shape_b) + m, low=low, dtype=dtype)
    result = clpatch.nnf(a, b, patch_size=p, k=k, pca_dims=dims, candidates=m, leaf_size=leaf,
                         runtime=runtime)
    check_valid(result, a, b, patch_size=p, k=k, exact_sums=True)
    check_oracle(result, a, b, patch_size=p, k=k, pca_dims=dims, candidates=m, leaf_size=leaf)
    if rule is not None:
        tree, searched = searched_leaves(a, b, patch_size=p, pca_dims=dims, candidates=m,
                                         leaf_size=leaf)
        pairs = [leaves for leaves in searched if len(leaves) == 2]
        assert pairs, "no query searched two leaves"
        sizes = {tree.leaf_points(leaves[0]).size for leaves in pairs}
        assert min(sizes) < m and (0 in sizes) == (rule == "empty"), sizes
        assert all(tree.leaf_points(leaves[1]).size == leaf for leaves in pairs)


@pytest.mark.parametrize("shape_a,shape_b,p,dims,seed", [
    ((21, 19), (17, 23), 3, 4, 0),
    ((24, 25, 3), (26, 24, 3), 3, 7, 5),       # 506 + 528 patches > 1000: the seed samples
])
def test_projections_equal_the_oracle(runtime, shape_a, shape_b, p, dims, seed):
    """The device's reduced points are the oracle's `project(patch_matrix(...), *fit_pca(...))`
    bit for bit (read from a plan made directly: `NnfPlan.projections()` gives its last
    run's), and the plan's field is `clpatch.nnf`'s."""
    a = integers(shape_a, seed=3)
    b = integers(shape_b, seed=4).astype(np.float32)
    channels = 1 if len(shape_a) == 2 else shape_a[2]
    params = dict(patch_size=p, k=2, pca_dims=dims, candidates=8, leaf_size=8, seed=seed)
    plan = NnfPlan(runtime, *shape_a[:2], *shape_b[:2], channels, device_output=False, **params)
    got = plan.run(a, b)
    ra, rb = plan.projections()
    mean, basis = fit_pca(a, b, p, dims, seed)
    np.testing.assert_array_equal(ra, project(patch_matrix(a, p), mean, basis))
    np.testing.assert_array_equal(rb, project(patch_matrix(b, p), mean, basis))
    direct = clpatch.nnf(a, b, runtime=runtime, **params)
    np.testing.assert_array_equal(got.positions, direct.positions)
    np.testing.assert_array_equal(got.distances, direct.distances)
    check_oracle(direct, a, b, **params)


def test_hard_query_effort_above_ten_dimensions(runtime):
    """PCA 20 on a smooth pair (a blurred random image and its shifted copy with noise,
    rounded): some queries sit between the plain test and the scaled one, and the
    expansion's traversal finds closer points for others. The field is the oracle's, and
    differs from what the oracle gives without the slack and without the traversal."""
    raw = integers((32, 34, 3), seed=40).astype(np.float64)
    base = sum(raw[i:i + 30, j:j + 32] for i in range(3) for j in range(3)) / 9
    noise = np.random.default_rng(7).normal(0, 8, (24, 22, 3))
    a = np.rint(base[:24, :22]).astype(np.float32)
    b = np.rint(base[3:27, 5:27] + noise).astype(np.float32)
    params = dict(patch_size=4, k=2, pca_dims=20, candidates=8, leaf_size=8)
    result = clpatch.nnf(a, b, runtime=runtime, **params)
    check_valid(result, a, b, patch_size=4, k=2, exact_sums=True)
    check_oracle(result, a, b, **params)
    slack, points, leaves, visits = hard_effort(20)
    assert slack < 1 and visits > 0
    for change in (dict(slack=1.0), dict(expand_visits=0)):
        kw = {**effort(20), **change}
        _, other = nnf_oracle(a, b, band=BAND, visits=VISITS, refine=REFINE,
                              polish_passes=POLISH, **kw, **params)
        assert np.any(other != result.distances), f"{change} changes nothing here"


def test_float_images_are_valid_and_follow_the_oracle(runtime):
    """Fractional values: each distance is its position's true distance (to float32
    rounding), and the field is the oracle's when the oracle is given the device's own
    reduced points (the same float32 operations in the same order)."""
    a, b = random_image((22, 19, 3), seed=5), random_image((18, 21, 3), seed=6)
    params = dict(patch_size=4, k=3, pca_dims=6, candidates=8, leaf_size=8, seed=0)
    plan = NnfPlan(runtime, 22, 19, 18, 21, 3, device_output=False, **params)
    result = plan.run(a, b)
    check_valid(result, a, b, patch_size=4, k=3, exact_sums=False)
    positions, distances = nnf_oracle(a, b, band=BAND, visits=VISITS, refine=REFINE,
                                      polish_passes=POLISH, projections=plan.projections(),
                                      **effort(6), **params)
    np.testing.assert_array_equal(result.positions, positions)
    np.testing.assert_allclose(result.distances, distances, rtol=1e-6)


def test_self_field_is_the_identity(runtime):
    """Random integers have no two equal patches: every patch of a in a finds itself."""
    a = integers((23, 21, 3), seed=8)
    result = clpatch.nnf(a, a, patch_size=4, k=2, pca_dims=6, runtime=runtime)
    check_valid(result, a, a, patch_size=4, k=2, exact_sums=True)
    gy, gx = np.meshgrid(np.arange(20), np.arange(18), indexing="ij")
    np.testing.assert_array_equal(result.positions[:, :, 0], np.stack([gy, gx], axis=-1))
    assert np.all(result.distances[:, :, 0] == 0) and np.all(result.distances[:, :, 1] > 0)


# =========================================================================== arrays, runs


def test_device_arrays_in_device_arrays_out(runtime):
    a, b = integers((20, 18, 3), seed=9), integers((17, 19, 3), seed=10)
    params = dict(patch_size=3, k=2, pca_dims=5, candidates=6, runtime=runtime)
    expected = clpatch.nnf(a, b, **params)
    da, db = cla.to_device(runtime.queue, a), cla.to_device(runtime.queue, b)
    for args in ((da, db), (da, b)):                  # the kind of `a` decides the output's
        got = clpatch.nnf(*args, **params)
        assert isinstance(got.positions, cla.Array) and isinstance(got.distances, cla.Array)
        np.testing.assert_array_equal(got.positions.get(), expected.positions)
        np.testing.assert_array_equal(got.distances.get(), expected.distances)
    got = clpatch.nnf(a, db, **params)
    assert isinstance(got.positions, np.ndarray) and isinstance(got.distances, np.ndarray)
    np.testing.assert_array_equal(got.positions, expected.positions)


def test_device_images_sample_the_same_model(runtime):
    """Device images are sampled on the device (only the sampled patches come back): with
    more than 1000 patches the seed's sample is a subset, and the field is the oracle's
    whichever image lives where."""
    a, b = integers((26, 27, 3), seed=36), integers((25, 26, 3), seed=37)
    params = dict(patch_size=4, k=2, pca_dims=5, candidates=6, leaf_size=8, seed=3)
    da, db = cla.to_device(runtime.queue, a), cla.to_device(runtime.queue, b)
    for args in ((da, db), (a, db), (da, b)):
        got = clpatch.nnf(*args, runtime=runtime, **params)
        check_oracle(got, a, b, **params)


def test_runs_repeat_and_seeds_differ(runtime):
    # 26x27 and 25x26 with patch 4: 552 + 506 patches > 1000, so the seed picks the sample.
    a, b = integers((26, 27), seed=11), integers((25, 26), seed=12)
    params = dict(patch_size=4, k=3, pca_dims=3, candidates=6, leaf_size=8)
    first = clpatch.nnf(a, b, seed=0, runtime=runtime, **params)
    again = clpatch.nnf(a, b, seed=0, runtime=runtime, **params)
    np.testing.assert_array_equal(first.positions, again.positions)
    np.testing.assert_array_equal(first.distances, again.distances)
    other = clpatch.nnf(a, b, seed=1, runtime=runtime, **params)
    check_valid(other, a, b, patch_size=4, k=3, exact_sums=True)
    check_oracle(other, a, b, seed=1, **params)
    assert not np.array_equal(other.positions, first.positions)   # the model changed


def test_array_likes_are_accepted(runtime):
    a, b = integers((18, 9), seed=13), integers((8, 11), seed=14)
    params = dict(patch_size=3, k=1, pca_dims=4, candidates=4, runtime=runtime)
    expected = clpatch.nnf(a, b, **params)
    got = clpatch.nnf(a.tolist(), tuple(map(tuple, b.tolist())), **params)
    np.testing.assert_array_equal(got.positions, expected.positions)
    np.testing.assert_array_equal(got.distances, expected.distances)


def test_defaults(runtime):
    a, b = integers((20, 17, 3), seed=15), integers((16, 18, 3), seed=16)
    result = clpatch.nnf(a, b, runtime=runtime)
    assert (result.patch_size, result.k) == (8, 1)
    check_valid(result, a, b, patch_size=8, k=1, exact_sums=True)
    check_oracle(result, a, b, patch_size=8, k=1, pca_dims=10, candidates=8, leaf_size=None)


# =========================================================================== errors

GOOD = integers((12, 13), seed=20).astype(np.float32)
OK = dict(patch_size=3, k=1, pca_dims=4, candidates=4)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(patch_size=0), ValueError, "patch_size"),
    (dict(patch_size=13), ValueError, "patch_size"),        # larger than a's 12 rows
    (dict(patch_size=2.5), TypeError, "patch_size"),
    (dict(k=0), ValueError, "k must"),
    (dict(k=33, candidates=40), ValueError, "k must"),
    (dict(k=5), ValueError, r"candidates \(4\) must be at least k \(5\)"),
    (dict(k=True), TypeError, "k must"),
    (dict(candidates=0), ValueError, "candidates"),
    (dict(candidates=65), ValueError, "candidates"),
    (dict(pca_dims=0), ValueError, "pca_dims"),
    (dict(pca_dims=10), ValueError, "pca_dims"),            # > 3 * 3 * 1
    (dict(pca_dims=4.0), TypeError, "pca_dims"),
    (dict(leaf_size=12), ValueError, "leaf_size must be a power of two"),
    (dict(leaf_size=2), ValueError, r"leaf_size \(2\) must be at least candidates \(4\)"),
    (dict(leaf_size=1), ValueError, "leaf_size"),
    (dict(leaf_size=8192), ValueError, "leaf_size"),
    (dict(leaf_size="8"), TypeError, "leaf_size"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed=1.5), TypeError, "seed"),
])
def test_bad_parameters(runtime, kwargs, error, match):
    with pytest.raises(error, match=match):
        clpatch.nnf(GOOD, GOOD, runtime=runtime, **{**OK, **kwargs})


def test_bad_images(runtime):
    with pytest.raises(ValueError, match="b has 2 channels, a has 3"):
        clpatch.nnf(np.zeros((12, 13, 3)), np.zeros((12, 13, 2)), runtime=runtime, **OK)
    with pytest.raises(ValueError, match="b has 1 channels, a has 3"):
        clpatch.nnf(np.zeros((12, 13, 3)), GOOD, runtime=runtime, **OK)
    with pytest.raises(ValueError, match=r"patch_size 6 is larger than a \(12x13\) or b \(5x20\)"):
        clpatch.nnf(GOOD, np.zeros((5, 20)), runtime=runtime, **{**OK, "patch_size": 6})
    with pytest.raises(ValueError, match="candidates .* at most the 9 patches of b"):
        clpatch.nnf(GOOD, GOOD[:5, :5], runtime=runtime, **{**OK, "candidates": 10,
                                                            "leaf_size": 16})
    with pytest.raises(ValueError, match="a must be"):
        clpatch.nnf(np.zeros(20), GOOD, runtime=runtime, **OK)
    with pytest.raises(ValueError, match="b must be"):
        clpatch.nnf(GOOD, np.zeros((2, 12, 13, 1)), runtime=runtime, **OK)
    with pytest.raises(TypeError, match="a must be"):
        clpatch.nnf("a.png", GOOD, runtime=runtime, **OK)
    with pytest.raises(TypeError, match="b must be"):
        clpatch.nnf(GOOD, [[1, 2], [3]], runtime=runtime, **OK)
    with pytest.raises(TypeError, match="b must have a real numeric dtype"):
        clpatch.nnf(GOOD, GOOD.astype(complex), runtime=runtime, **OK)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["a", "b"])
def test_non_finite_images(runtime, bad, where):
    broken = GOOD.copy()
    broken[5, 7] = bad
    a, b = (broken, GOOD) if where == "a" else (GOOD, broken)
    with pytest.raises(ValueError, match=f"^{where} contains NaN or infinite values"):
        clpatch.nnf(a, b, runtime=runtime, **OK)


def test_reconstruct_refuses_what_is_not_a_field(runtime):
    with pytest.raises(TypeError, match="matches must be clpatch Matches, got tuple"):
        clpatch.reconstruct((np.zeros((2, 2, 1, 2), np.int32), None), GOOD, runtime=runtime)
    field = clpatch.nnf(GOOD, GOOD, runtime=runtime, **OK)
    with pytest.raises(ValueError, match="positions outside b"):
        clpatch.reconstruct(field, GOOD[:8, :8], runtime=runtime)
    sparse = clpatch.knn(GOOD, GOOD, patch_size=3, k=1, step=2, runtime=runtime)
    with pytest.raises(ValueError, match="step 1"):
        clpatch.reconstruct(sparse, GOOD, runtime=runtime)


def test_small_work_groups_give_the_same_field(runtime):
    """Work-groups of at most 8 make the tree's sort blocks 16 pairs: every level then sorts
    through the global bitonic steps and the merges, which a default PoCL run (one block of
    up to 1024 points) only reaches for b's of more than 1024 patches."""
    small = clpatch.Runtime(runtime.device, profile_overrides={"max_work_group_size": 8})
    a, b = integers((19, 16), seed=17), integers((15, 17), seed=18)   # Nb 169: 256 slots
    params = dict(patch_size=3, k=2, pca_dims=4, candidates=8, leaf_size=8)
    got = clpatch.nnf(a, b, runtime=small, **params)
    expected = clpatch.nnf(a, b, runtime=runtime, **params)
    np.testing.assert_array_equal(got.positions, expected.positions)
    np.testing.assert_array_equal(got.distances, expected.distances)
    check_oracle(got, a, b, **params)
