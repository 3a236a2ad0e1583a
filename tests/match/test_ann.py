"""`clpatch.ann_search` (the clustering ANN of Tsai et al.) against the NumPy oracle of
tests/reference/ann.py, which implements the algorithm of clpatch/match/ann/params.py on
its own.

On integer-valued images every sum the algorithm compares is reproduced bit for bit (centre
means are correctly rounded divisions, every distance a sum in the order of the patch's
values), so positions and distances must equal the oracle's exactly, whatever the kernels'
work-group sizes, scans and pixel source. Every returned distance must also be the true
distance of its position, and every candidate must lie in its reference's tile. Images stay
small: CI runs these on a 2-core CPU through PoCL.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.io.noise import synthetic_burst
from clpatch.match.ann import layout as ann_layout
from clpatch.match.ann import plan as ann_plan
from clpatch.match.ann.layout import (
    DEEP_TILE_GROUP,
    DEEP_TILE_PER_UNIT,
    DEEP_TILE_RATIO,
    GROUP,
    MANY_TILES_GROUP,
    MANY_TILES_PER_UNIT,
    ann_config,
    query_bytes,
)
from clpatch.match.ann.params import (
    LEAF,
    AnnConfig,
    candidate_bound,
    check_ann_request,
    cluster_count,
    tile_of,
)
from clpatch.match.ann.plan import AnnPlan
from tests.helpers import load_image
from tests.reference import ann as oracle


def integers(shape, seed: int, high: int = 256) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, shape).astype(np.float32)


def noisy_photo(name: str, rows: int, cols: int, seed: int = 0, sigma: float = 20.0):
    """A crop of a test photograph with rounded Gaussian noise (integer values)."""
    img = load_image(name)
    if img.ndim == 3:
        img = np.round(img @ np.array([0.299, 0.587, 0.114], np.float32))
    crop = img[:rows, :cols]
    noise = np.random.default_rng(seed).normal(0, sigma, crop.shape)
    return np.round(crop + noise).astype(np.float32)


def check_valid(found, image, *, patch_size: int, k: int, tile: int) -> None:
    """Shapes, the reference first, ascending true distances, candidates in the tile."""
    img = image if image.ndim == 3 else image[..., None]
    pos, dist = np.asarray(found.positions), np.asarray(found.distances)
    gy, gx = found.grid_y, found.grid_x
    assert pos.shape == (len(gy), len(gx), k, 2) and dist.shape == (len(gy), len(gx), k)
    assert pos.dtype == np.int32 and dist.dtype == np.float32
    assert np.array_equal(pos[:, :, 0, 0], np.broadcast_to(gy[:, None], pos.shape[:2]))
    assert np.array_equal(pos[:, :, 0, 1], np.broadcast_to(gx[None, :], pos.shape[:2]))
    assert np.all(dist[..., 0] == 0) and np.all(np.diff(dist, axis=-1) >= 0)
    py, px = img.shape[0] - patch_size + 1, img.shape[1] - patch_size + 1
    ty = tile_of(pos[..., 0], py, tile) == tile_of(gy, py, tile)[:, None, None]
    tx = tile_of(pos[..., 1], px, tile) == tile_of(gx, px, tile)[None, :, None]
    assert ty.all() and tx.all(), "a candidate outside its reference's tile"
    flat = pos[..., 0].astype(np.int64) * px + pos[..., 1]
    assert all(len(set(row)) == k for row in flat.reshape(-1, k)), "a candidate twice"
    windows = oracle.patch_windows(img[None].astype(np.float64), patch_size)[0]
    ref = windows[gy[:, None, None], gx[None, :, None]]
    cand = windows[pos[..., 0], pos[..., 1]]
    true = ((ref - cand) ** 2).sum(axis=(-3, -2, -1))
    np.testing.assert_allclose(dist, true, rtol=1e-5, atol=1e-3)


CASES = {
    "random": (lambda: integers((61, 74), 1), dict(patch_size=8, k=16, tile=15)),
    "camera": (lambda: noisy_photo("camera", 70, 83, 2), dict(patch_size=8, k=16, tile=15)),
    "small-tiles": (lambda: noisy_photo("brick", 41, 37, 3),
                    dict(patch_size=5, k=9, tile=6, step=3, neighbour_clusters=2)),
    "rgb": (lambda: np.round(load_image("astronaut")[100:151, 200:247]),
            dict(patch_size=6, k=12, tile=11, neighbour_clusters=1)),
    "flat": (lambda: np.pad(np.full((12, 20), 7, np.float32), ((9, 11), (5, 6))),
             dict(patch_size=4, k=10, tile=8)),
    "tiny": (lambda: integers((9, 12), 4), dict(patch_size=3, k=5, tile=15)),
    # One tile of 5 x 13 = 65 patches: its children hold 32 (a leaf) and 33 (split again into
    # 16 and 17), so one depth of the tree holds a leaf and a node to split.
    "mixed-depth": (lambda: integers((8, 16), 12), dict(patch_size=4, k=10, tile=13)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_oracle(runtime, case):
    make, kw = CASES[case]
    image = make()
    found = clpatch.ann_search(image, runtime=runtime, **kw)
    pos, dist = oracle.ann_image(image, **kw)
    assert np.array_equal(found.positions, pos)
    assert np.array_equal(found.distances, dist)
    check_valid(found, image, patch_size=kw["patch_size"], k=kw["k"], tile=kw["tile"])
    assert found.k == kw["k"] and found.window == kw["tile"] and found.metric == "l2"


@pytest.mark.parametrize("group,query_group,local", [(32, 32, False), (64, 96, True)])
def test_layouts_give_the_same_matches(runtime, group, query_group, local):
    """Other work-group sizes and global-memory pixels: the oracle's matches still."""
    image = noisy_photo("moon", 52, 67, 5)
    request = check_ann_request(patch_size=7, step=2, k=14, tile=13, neighbour_clusters=1,
                                channels=1, rows=52, cols=67)
    config = AnnConfig(group, False, 13, 1, local_pixels=local, query_group=query_group)
    plan = AnnPlan(runtime, 1, 52, 67, 1, request, config)
    assert bool(plan.block) == local
    found = plan.run(image)
    pos, dist = oracle.ann_image(image, patch_size=7, k=14, tile=13, step=2,
                                 neighbour_clusters=1)
    assert np.array_equal(found.positions, pos) and np.array_equal(found.distances, dist)


def test_cluster_count_is_the_oracles():
    """The host's count of a tile's clusters (it sizes the query's units) is the number of
    leaves the clustering makes."""
    rng = np.random.default_rng(3)
    for m in (1, 31, 32, 33, 64, 65, 100, 225, 345, 621, 841):
        _, leaves = oracle.cluster(rng.integers(0, 256, (m, 4)).astype(np.float32))
        assert cluster_count(m) == len(leaves), m


@pytest.mark.parametrize("query_group", [32, 64])
def test_large_tiles_answered_by_several_work_groups(runtime, query_group):
    """The last row's and column's larger tiles (here up to 23 x 27 positions: 32 clusters
    against an inner tile's 8) are answered in runs of clusters, one work-group each, whose
    queries also take neighbour clusters from the other runs: the oracle's matches."""
    image = noisy_photo("text", 60, 64, 4)
    request = check_ann_request(patch_size=8, step=1, k=16, tile=15, neighbour_clusters=2,
                                channels=1, rows=60, cols=64)
    plan = AnnPlan(runtime, 1, 60, 64, 1, request,
                   AnnConfig(64, False, 15, 2, query_group=query_group))
    run, parts, parts_last, units = plan.units
    assert run == 8 and (parts_last >> 8) == 4 and units == 2 * (parts >> 8) + 4
    found = plan.run(image)
    pos, dist = oracle.ann_image(image, patch_size=8, k=16, tile=15, step=1,
                                 neighbour_clusters=2)
    assert np.array_equal(found.positions, pos) and np.array_equal(found.distances, dist)


def test_bands_of_tile_rows_give_the_same_matches(runtime):
    """A memory limit that forces one band of tile rows per chunk: the same result."""
    image = noisy_photo("camera", 90, 50, 6)
    whole = clpatch.ann_search(image, patch_size=6, k=8, tile=10, runtime=runtime)
    request = check_ann_request(patch_size=6, step=1, k=8, tile=10, neighbour_clusters=0,
                                channels=1, rows=90, cols=50)
    plan = AnnPlan(runtime, 1, 90, 50, 1, request, tile_bytes=60_000)
    assert len(plan.chunks) > 2
    banded = plan.run(image)
    assert np.array_equal(banded.positions, whole.positions)
    assert np.array_equal(banded.distances, whole.distances)


def test_device_arrays_stay_on_the_device(runtime):
    image = integers((40, 45), 7)
    found = clpatch.ann_search(cla.to_device(runtime.queue, image), patch_size=5, k=8, tile=9,
                               runtime=runtime)
    assert isinstance(found.positions, cla.Array) and isinstance(found.distances, cla.Array)
    pos, dist = oracle.ann_image(image, patch_size=5, k=8, tile=9)
    assert np.array_equal(found.positions.get(), pos)
    assert np.array_equal(found.distances.get(), dist)


def test_staggered_grid_matches_the_plain_search(runtime):
    """BM3D's staggered grid: each reference gets what the step-1 search gives its position
    (a patch's matches depend on its tile, not on which patches are references)."""
    image = noisy_photo("camera", 47, 58, 8)
    request = check_ann_request(patch_size=6, step=3, k=8, tile=9, neighbour_clusters=0,
                                channels=1, rows=47, cols=58)
    plan = AnnPlan(runtime, 1, 47, 58, 1, request, stagger=(0, 1, 2))
    found = plan.run(image)
    pos, dist = oracle.ann_image(image, patch_size=6, k=8, tile=9, step=1)
    ys, xs = found.grid_y[:, None], found.grid_x
    assert np.array_equal(found.positions, pos[ys, xs])
    assert np.array_equal(found.distances, dist[ys, xs])


@pytest.mark.parametrize("reference", [0, 3])
def test_burst_equals_oracle(runtime, reference):
    scene = load_image("camera")[40:88, 60:113]
    noisy, _ = synthetic_burst(scene, 4, 10.0, seed=9)
    frames = np.round(noisy)
    request = check_ann_request(patch_size=5, step=2, k=12, tile=8, neighbour_clusters=1,
                                channels=1, rows=48, cols=53, frames=4)
    plan = AnnPlan(runtime, 4, 48, 53, 1, request, video=True, reference=reference)
    found = plan.run(frames)
    pos, dist = oracle.ann(frames[..., None], patch_size=5, k=12, tile=8, step=2,
                           neighbour_clusters=1, reference=reference)
    assert found.positions.shape[-1] == 3
    assert np.array_equal(found.positions, pos) and np.array_equal(found.distances, dist)
    assert len(np.unique(pos[..., 0])) == 4, "candidates from every frame"


# CI: threshold 0 (every node by digit selection); 40 mixes both paths (make test-slow).
@pytest.mark.parametrize("threshold", [0, pytest.param(40, marks=pytest.mark.slow)])
def test_median_by_digit_selection_equals_oracle(runtime, monkeypatch, threshold):
    """Nodes larger than ann_plan.RANK_SELECT find their median by selecting it digit by
    digit; forced on every node (0), or on the upper levels only (40), the clusters and so
    the matches are the oracle's (here a burst: large tiles, ties between equal patches)."""
    monkeypatch.setattr(ann_plan, "RANK_SELECT", threshold)
    scene = load_image("camera")[40:88, 60:113]
    noisy, _ = synthetic_burst(scene, 4, 10.0, seed=9)
    frames = np.round(noisy)
    frames[1, 10:20, 10:30] = 128.0          # flat areas: many equal keys
    request = check_ann_request(patch_size=5, step=2, k=12, tile=8, neighbour_clusters=1,
                                channels=1, rows=48, cols=53, frames=4)
    plan = AnnPlan(runtime, 4, 48, 53, 1, request, video=True, reference=1)
    found = plan.run(frames)
    pos, dist = oracle.ann(frames[..., None], patch_size=5, k=12, tile=8, step=2,
                           neighbour_clusters=1, reference=1)
    assert np.array_equal(found.positions, pos) and np.array_equal(found.distances, dist)
    image = noisy_photo("text", 60, 64, 11)
    got = clpatch.ann_search(image, patch_size=8, k=16, runtime=clpatch.Runtime(runtime.device))
    pos, dist = oracle.ann_image(image, patch_size=8, k=16, tile=15, step=1)
    assert np.array_equal(got.positions, pos) and np.array_equal(got.distances, dist)


def test_float_images_give_true_distances(runtime):
    """Non-integer values: the oracle's sums may round differently in the last bit (the
    kernels fuse multiply-adds where allowed), so check the result on its own."""
    image = np.random.default_rng(10).random((44, 51)).astype(np.float32)
    found = clpatch.ann_search(image, patch_size=6, k=10, tile=10, runtime=runtime)
    check_valid(found, image, patch_size=6, k=10, tile=10)


def test_candidate_bound_holds_for_every_tile_size():
    """The kernels size a query's distance table by `candidate_bound`: no tile of 1 to 300
    patches, k and neighbour count give a query more candidates (the tree's shape depends
    on the patch count alone)."""
    for patches in range(1, 301):
        leaves, stack = [], [(0, patches)]
        while stack:
            lo, hi = stack.pop()
            if hi - lo <= LEAF:
                leaves.append((lo, hi))
            else:
                stack += [(lo + (hi - lo) // 2, hi), (lo, lo + (hi - lo) // 2)]
        for k in range(1, min(patches, LEAF) + 1):
            for n in range(3):
                most = max(np.subtract(*oracle.candidate_run(leaves, c, k, n)[::-1])
                           for c in range(len(leaves)))
                assert most <= candidate_bound(k, n), (patches, k, n)


def test_inputs_of_many_tiles_take_the_smaller_clustering_group(runtime, monkeypatch):
    """The work-group rule (the matches do not depend on it: see the layouts test)."""
    request = check_ann_request(patch_size=8, step=1, k=16, tile=15, neighbour_clusters=0,
                                channels=1, rows=512, cols=512)
    many = MANY_TILES_PER_UNIT * runtime.profile.compute_units
    assert ann_config(request, runtime.profile, tiles=many).group == MANY_TILES_GROUP
    assert ann_config(request, runtime.profile, tiles=many - 1).group == GROUP
    assert ann_config(request, runtime.profile).group == GROUP
    # 53 x 63 positions: 3 x 4 tiles, "many" from 12 tiles per unit on; bursts keep GROUP
    monkeypatch.setattr(ann_layout, "MANY_TILES_PER_UNIT", 12 / runtime.profile.compute_units)
    assert AnnPlan(runtime, 1, 60, 70, 1, request).config.group == MANY_TILES_GROUP
    assert AnnPlan(runtime, 2, 60, 70, 1, request, video=True).config.group == GROUP
    monkeypatch.setattr(ann_layout, "MANY_TILES_PER_UNIT", 13 / runtime.profile.compute_units)
    assert AnnPlan(runtime, 1, 60, 70, 1, request).config.group == GROUP


def test_few_tiles_with_a_deep_corner_take_the_larger_clustering_group(runtime):
    """Images of few tiles per compute unit whose corner tile holds DEEP_TILE_RATIO times an
    inner tile's patches cluster with DEEP_TILE_GROUP work-items; the matches are the
    oracle's (with warp ballots where the profile has them)."""
    request = check_ann_request(patch_size=8, step=1, k=16, tile=15, neighbour_clusters=0,
                                channels=1, rows=512, cols=512)
    units = runtime.profile.compute_units
    deep = int(np.ceil(DEEP_TILE_RATIO * 15 ** 2))
    few = DEEP_TILE_PER_UNIT * units

    def group(**kw):
        return ann_config(request, runtime.profile, **kw).group
    assert group(tiles=few, largest_tile=deep) == DEEP_TILE_GROUP
    assert group(tiles=few + 1, largest_tile=deep) == GROUP
    assert group(tiles=few, largest_tile=deep - 1) == GROUP
    assert group(largest_tile=deep) == GROUP                 # unknown size, or a burst
    # 47 x 47: 40 positions a side, tiles of 15 and 25 (a 625-patch corner); 45 x 45: 15, 23
    image = noisy_photo("coins", 47, 47, 3)
    plan = AnnPlan(runtime, 1, 47, 47, 1, check_ann_request(
        patch_size=8, step=1, k=16, tile=15, neighbour_clusters=1, channels=1, rows=47, cols=47))
    assert plan.config.group == min(DEEP_TILE_GROUP, runtime.profile.max_work_group_size // 32 * 32)
    assert plan.config.ballot == (runtime.profile.subgroup_ops == "ptx")
    found = plan.run(image)
    pos, dist = oracle.ann_image(image, patch_size=8, k=16, tile=15, step=1, neighbour_clusters=1)
    assert np.array_equal(found.positions, pos) and np.array_equal(found.distances, dist)
    assert AnnPlan(runtime, 1, 45, 45, 1, check_ann_request(
        patch_size=8, step=1, k=16, tile=15, neighbour_clusters=0, channels=1, rows=45,
        cols=45)).config.group == GROUP


def test_query_work_group_fits_the_local_memory():
    """A device of 32 KiB of local memory (Oclgrind's) gets fewer query work-items: their
    distance tables must fit it."""
    request = check_ann_request(patch_size=8, step=1, k=16, tile=15, neighbour_clusters=0,
                                channels=1, rows=512, cols=512)
    for local, expected in ((49152, 256), (32768, 128), (13000, 64), (8200, 32)):
        device = SimpleNamespace(compute_units=4, subgroup_ops="none", max_work_group_size=1024,
                                 local_mem_size=local)
        config = ann_config(request, device)
        assert config.query_group == expected
        assert query_bytes(request, config.query_group, 29 * 29) <= local


def test_two_runs_agree(runtime):
    image = noisy_photo("text", 60, 64, 11)
    a = clpatch.ann_search(image, patch_size=8, k=16, runtime=runtime)
    b = clpatch.ann_search(image, patch_size=8, k=16, runtime=runtime)
    assert np.array_equal(a.positions, b.positions) and np.array_equal(a.distances, b.distances)


@pytest.mark.parametrize("kwargs,message", [
    (dict(k=33), r"k must be in \[1, 32\]"),
    (dict(k=0), r"k must be in"),
    (dict(tile=0), r"tile must be in \[1, 64\]"),
    (dict(tile=65), r"tile must be in"),
    (dict(patch_size=0), r"patch_size must be in"),
    (dict(neighbour_clusters=3), r"neighbour_clusters must be in \[0, 2\]"),
    (dict(step=0), r"step must be in"),
    (dict(k=30, tile=4), r"largest valid k is 16"),
    (dict(patch_size=40), r"patch_size must be in"),
    (dict(k=2.0), r"k must be an integer"),
])
def test_bad_parameters(kwargs, message):
    image = np.zeros((40, 40), np.float32)
    with pytest.raises((ValueError, TypeError), match=message):
        clpatch.ann_search(image, **kwargs)


def test_bad_images(runtime):
    with pytest.raises(ValueError, match="larger than the image"):
        clpatch.ann_search(np.zeros((5, 30), np.float32), patch_size=8, runtime=runtime)
    with pytest.raises(ValueError, match="values per patch"):
        clpatch.ann_search(np.zeros((40, 40, 5), np.float32), patch_size=16, runtime=runtime)
    bad = np.zeros((30, 30), np.float32)
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN|finite"):
        clpatch.ann_search(bad, patch_size=4, k=4, runtime=runtime)
    with pytest.raises((TypeError, ValueError), match="image"):
        clpatch.ann_search("not an image", runtime=runtime)
