"""The offsets engine's top-k variants (cl_src/match/knn_offsets.cl.mako): per-work-item
heaps, buffered candidates merged into sorted lists by the work-group ("group", portable)
or by warps ("warp": inline-PTX ballots on NVIDIA; elsewhere work-groups of one warp with
ballots through local memory, which is how PoCL runs that code path). Every variant must
give the oracle's matches, ties included, whatever k, launch pieces or splits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import clpatch
from clpatch.match.knn import plan as knn_plan
from clpatch.match.knn import search as knn_module
from clpatch.match.knn.config import (
    RULE_TOPK,
    TOPK_GROUP,
    TOPK_HEAP,
    TOPK_WARP,
    choose_knn,
    fits,
    team_rows,
    topk_variant,
)
from tests.helpers import tiered
from tests.match.test_knn import check_knn, labels, smoothed

#: Forced configurations: the variant, the tile (the warp variant off NVIDIA needs a
#: work-group of one warp).
FORCED = {"group": (TOPK_GROUP, None), "warp": (TOPK_WARP, (8, 4))}


def force(monkeypatch, name: str, topk_k: int = 1) -> None:
    """clpatch.knn's offsets engine with the top-k variant `name` from k = topk_k up."""
    topk, tile = FORCED[name]

    def choose(*args, **kw):
        config = choose_knn(*args, **kw)
        if config.method != "offsets":
            return config
        config = replace(config, topk=topk, topk_k=topk_k)
        return config if tile is None else replace(config, tile_x=tile[0], tile_y=tile[1])

    monkeypatch.setattr(knn_module, "choose_knn", choose)


def last_plan(runtime):
    return next(reversed(runtime.plan_cache().values()))


# CI: each team with two of the (metric, k) cases, each case once; make test-slow: all.
@pytest.mark.parametrize("name,metric,k", tiered(
    [(n, m, k) for n in ("group", "warp") for m, k in (("l2", 7), ("l1", 40), ("l2", 150))],
    keep=lambda n, m, k: (n == "group") == (k != 40)))
def test_team_topk_matches_the_oracle(runtime, monkeypatch, name, metric, k):
    """Label images (many equal distances: the tie rule decides), two images, k from below
    a team's width to several list rows per work-item."""
    force(monkeypatch, name)
    query, reference = labels((21, 19, 2), 3, seed=71), labels((23, 22, 2), 3, seed=72)
    got = clpatch.knn(query, reference, patch_size=4, k=k, metric=metric, method="offsets",
                      runtime=runtime)
    plan = last_plan(runtime)
    assert plan.topk == FORCED[name][0]
    if k > 128:                      # several list rows per work-item in either team
        assert team_rows(plan.config, k) >= 2
    check_knn(got, query, reference, patch_size=4, k=k, metric=metric, exact=True)


@pytest.mark.parametrize("name", ["group", "warp"])
def test_team_topk_self_search_float(runtime, monkeypatch, name):
    """A smooth float photo crop against itself (re-scored distances), step 2."""
    force(monkeypatch, name)
    image = smoothed("camera", (30, 40, 22, 24))
    got = clpatch.knn(image, patch_size=5, k=33, step=2, method="offsets", runtime=runtime)
    assert last_plan(runtime).topk == FORCED[name][0]
    check_knn(got, image, None, patch_size=5, k=33, step=2, exact=False)


@pytest.mark.parametrize("name", ["group", "warp"])
def test_team_topk_equals_heaps_over_many_launches(runtime, monkeypatch, name):
    """Launches of a few offset rows each (the buffers are flushed at every launch's end)
    and several splits (merged by the finishing kernel) give the heaps' matches."""
    rng = np.random.default_rng(5)
    query = rng.integers(0, 256, (19, 23, 3)).astype(np.uint8)
    reference = rng.integers(0, 256, (21, 18, 3)).astype(np.uint8)
    kw = dict(patch_size=4, k=20, metric="l2", method="offsets")
    heaps = clpatch.knn(query, reference, runtime=runtime, **kw)
    assert last_plan(runtime).topk == TOPK_HEAP
    force(monkeypatch, name)
    monkeypatch.setattr(knn_plan, "WORK_PER_LAUNCH", 1000)
    fresh = clpatch.Runtime(runtime.device)
    got = clpatch.knn(query, reference, runtime=fresh, **kw)
    plan = last_plan(fresh)
    assert plan.topk == FORCED[name][0]
    assert sum(1 for stage, _ in plan.last_events if stage == "search") > 3
    np.testing.assert_array_equal(got.positions, heaps.positions)
    np.testing.assert_array_equal(got.distances, heaps.distances)


def test_topk_variant_rule(runtime):
    """The rule takes RULE_TOPK; a team variant applies from topk_k up, the warp one only
    with inline PTX or work-groups of one warp, and none where its lists do not fit the
    local memory; `clpatch explain knn` names the variant."""
    prof = runtime.profile
    config = choose_knn(prof, metric="l2", patch=5, channels=1, step=1)
    assert config.method == "offsets" and config.topk == RULE_TOPK
    kw = dict(patch=5, channels=1)
    group = replace(config, topk=TOPK_GROUP, topk_k=32)
    assert topk_variant(group, prof, k=31, **kw) == TOPK_HEAP
    assert topk_variant(group, prof, k=32, **kw) == TOPK_GROUP
    assert topk_variant(group, prof, k=1 << 20, **kw) == TOPK_HEAP     # lists too large
    warp = replace(config, topk=TOPK_WARP, topk_k=1)
    ptx = prof.subgroup_ops == "ptx"
    assert topk_variant(warp, prof, k=64, **kw) == (TOPK_WARP if ptx else TOPK_HEAP)
    assert topk_variant(replace(warp, tile_x=8, tile_y=4), prof, k=64, **kw) == TOPK_WARP
    assert (fits(warp, prof, metric="l2", **{"patch": 5, "channels": 1}) == "") == ptx
    assert fits(replace(config, topk=7), prof, metric="l2", patch=5, channels=1)
    text = str(clpatch.explain("knn", runtime=runtime, patch_size=5, k=200))
    assert "top-k: per-work-item heaps" in text
