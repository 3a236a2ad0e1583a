"""Tilings with an origin and the filters' two tilings (`AnnPair`, clpatch/match/ann/pair.py)
against the NumPy oracle (tests/reference/ann.py: `tile_runs` with an origin,
`ann_pair_image`), which re-implements the rule of clpatch/match/ann/params.py on its own.

On integer-valued images the matches must equal the oracle's exactly: every reference is
answered by exactly one of the two tilings (the output arrays start uninitialised, so a
reference answered by neither would differ), the one where it lies nearer its tile's centre.
"""

from __future__ import annotations

import numpy as np
import pytest

from clpatch.match.ann.pair import AnnPair
from clpatch.match.ann.params import (
    AnnConfig,
    centre_distance,
    check_ann_request,
    pair_origin,
    tile_edges,
    tile_of,
)
from clpatch.match.ann.plan import AnnPlan
from clpatch.match.ann.search import ann_matcher
from clpatch.match.window.config import SearchRequest
from tests.match.test_ann import integers, noisy_photo
from tests.reference import ann as oracle


def request_for(image, **kw):
    kw.setdefault("neighbour_clusters", 0)
    kw.setdefault("step", 1)
    return check_ann_request(channels=1, rows=image.shape[0], cols=image.shape[1], **kw)


def same(found, pos, dist):
    assert np.array_equal(found.positions, pos) and np.array_equal(found.distances, dist)


def test_edges_follow_the_oracle_and_bound_every_run():
    for positions in range(1, 160):
        for tile in (1, 3, 7, 15, 21):
            origin = pair_origin(positions, tile)
            assert origin in (0, tile // 2)
            assert origin == 0 or positions - origin >= 2 * tile
            edges = tile_edges(positions, tile, origin)
            runs = list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))
            assert runs == oracle.tile_runs(positions, tile, origin)
            sizes = np.diff(edges)
            assert sizes.min() >= min(positions, tile)
            assert sizes.max() <= (2 * tile - 1 if len(sizes) > 1 else positions)
            c = np.arange(positions)
            run = tile_of(c, positions, tile, origin)
            assert np.all((edges[run] <= c) & (c < edges[run + 1]))
            assert np.array_equal(centre_distance(positions, tile, origin),
                                  np.abs(2 * c - (edges[run] + edges[run + 1] - 1)))


def test_an_origin_leaving_one_run_is_refused():
    with pytest.raises(ValueError, match="origin 5 leaves fewer than two runs"):
        tile_edges(20, 8, 5)


@pytest.mark.parametrize("shape,origin,kw", [
    ((71, 60), (3, 3), dict(patch_size=8, k=16, tile=7)),
    ((50, 83), (4, 0), dict(patch_size=5, k=9, tile=9, step=3, neighbour_clusters=2)),
    ((44, 61), (0, 6), dict(patch_size=4, k=12, tile=12, neighbour_clusters=1)),
])
def test_a_tiling_with_an_origin_equals_the_oracle(runtime, shape, origin, kw):
    image = noisy_photo("brick", *shape, seed=sum(shape))
    plan = AnnPlan(runtime, 1, *shape, 1, request_for(image, **kw), origin=origin)
    found = plan.run(image)
    same(found, *oracle.ann_image(image, origin=origin, **kw))


@pytest.mark.parametrize("shape,kw", [
    ((71, 71), dict(patch_size=8, k=16, tile=21, step=4, neighbour_clusters=2)),
    pytest.param((66, 57), dict(patch_size=5, k=9, tile=9, step=3, neighbour_clusters=1),
                 marks=pytest.mark.slow),                       # (both axes, as above)
    ((80, 30), dict(patch_size=6, k=8, tile=10, step=2)),           # an origin on y only
    ((25, 27), dict(patch_size=5, k=8, tile=8, step=2)),            # no room: one tiling
])
def test_two_tilings_equal_the_oracle(runtime, shape, kw):
    image = integers(shape, seed=shape[0])
    request = request_for(image, **kw)
    plan = AnnPair(runtime, *shape, 1, request)
    p, t = kw["patch_size"], kw["tile"]
    origin = (pair_origin(shape[0] - p + 1, t), pair_origin(shape[1] - p + 1, t))
    assert (plan.second is None) == (origin == (0, 0))
    if plan.second is not None:
        assert plan.second.origin == origin and (plan.choose, plan.second.choose) == (1, 2)
    found = plan.run(image)
    same(found, *oracle.ann_pair_image(image, **kw))
    # Every candidate lies in its reference's tile of one of the two tilings.
    py, px = shape[0] - p + 1, shape[1] - p + 1
    pos, gy, gx = found.positions, found.grid_y, found.grid_x
    inside = [(tile_of(pos[..., 0], py, t, oy) == tile_of(gy, py, t, oy)[:, None, None])
              & (tile_of(pos[..., 1], px, t, ox) == tile_of(gx, px, t, ox)[None, :, None])
              for oy, ox in {(0, 0), origin}]
    assert np.logical_or.reduce(inside).all(axis=-1).all()


def test_two_tilings_on_a_photograph_are_valid_and_nearer_the_centre(runtime):
    """Positions and true distances on a float photograph; a reference is never farther
    from its tile's centre than in the plain tiling, and often nearer."""
    image = noisy_photo("camera", 90, 97, seed=3).astype(np.float32) + 0.25
    kw = dict(patch_size=8, k=16, tile=15, step=3, neighbour_clusters=2)
    plan = AnnPair(runtime, 90, 97, 1, request_for(image, **kw))
    found = plan.run(image)
    pos, dist = found.positions, found.distances
    assert np.all(pos[:, :, 0, 0] == found.grid_y[:, None])
    assert np.all(pos[:, :, 0, 1] == found.grid_x[None, :])
    assert np.all(dist[..., 0] == 0) and np.all(np.diff(dist, axis=-1) >= 0)
    py, px = 83, 90
    origin = plan.second.origin
    plain = np.maximum(centre_distance(py, 15)[found.grid_y][:, None],
                       centre_distance(px, 15)[found.grid_x][None, :])
    other = np.maximum(centre_distance(py, 15, origin[0])[found.grid_y][:, None],
                       centre_distance(px, 15, origin[1])[found.grid_x][None, :])
    chosen = np.minimum(plain, other)
    assert (chosen < plain).mean() > 0.3 and chosen.mean() < 0.8 * plain.mean()


# (CI runs the staggered grid, which takes the same bands; the plain one is a slow sweep.)
@pytest.mark.parametrize("stagger", [pytest.param((), marks=pytest.mark.slow), (0, 1, 2)])
def test_two_tilings_in_bands_give_the_same_matches(runtime, stagger):
    image = noisy_photo("camera", 120, 50, seed=6)
    request = request_for(image, patch_size=6, k=8, tile=10, step=3)
    whole = AnnPair(runtime, 120, 50, 1, request, stagger=stagger)
    banded = AnnPair(runtime, 120, 50, 1, request, stagger=stagger, tile_bytes=60_000)
    assert len(whole.chunks) == 1 and len(banded.chunks) > 2
    assert banded.second is not None and banded.scratch_sets == 2
    a, b = whole.run(image), banded.run(image)
    same(b, a.positions, a.distances)


def test_the_second_tiling_keeps_its_layout_choices(runtime):
    """A tiling with an origin under other work-group sizes and global-memory pixels: the
    oracle's matches still (its first row and column are larger than the inner ones)."""
    image = noisy_photo("moon", 52, 67, 5)
    kw = dict(patch_size=7, k=14, tile=13, step=2, neighbour_clusters=1)
    config = AnnConfig(32, False, 13, 1, local_pixels=False, query_group=32)
    plan = AnnPlan(runtime, 1, 52, 67, 1, request_for(image, **kw), config, origin=(6, 6))
    same(plan.run(image), *oracle.ann_image(image, origin=(6, 6), **kw))


def test_filters_ask_for_two_tilings_on_images_and_one_on_bursts(runtime):
    request = SearchRequest(8, 4, 16, 21, 1, "l2", False)
    assert isinstance(ann_matcher(runtime, 1, 71, 71, 1, request), AnnPair)
    single = ann_matcher(runtime, 1, 71, 71, 1, request, tilings=1)
    assert type(single) is AnnPlan
    burst = ann_matcher(runtime, 3, 30, 30, 1, SearchRequest(5, 2, 8, 15, 1, "l2", True),
                        video=True, reference=1)
    assert type(burst) is AnnPlan
    for bad in (0, 3, True, "2"):
        with pytest.raises(ValueError, match="tilings must be 1 or 2"):
            ann_matcher(runtime, 1, 71, 71, 1, request, tilings=bad)
    with pytest.raises(ValueError, match="tilings must be 1 or 2"):
        ann_matcher(runtime, 3, 30, 30, 1, SearchRequest(5, 2, 8, 15, 1, "l2", True),
                    video=True, reference=1, tilings=2)
    r = check_ann_request(patch_size=5, step=1, k=8, tile=8, neighbour_clusters=0,
                          channels=1, rows=40, cols=40)
    with pytest.raises(ValueError, match="origin"):
        AnnPlan(runtime, 1, 40, 40, 1, r, origin=(4, 4), versus=(4, 0))
