"""The kNN's launches are bounded in work (`WORK_PER_LAUNCH`): with the bound forced tiny,
each engine splits its offsets, candidates or reference rows over many launches (the
offsets engine in whole groups of its consecutive dy) and must return the same matches."""

from __future__ import annotations

import numpy as np
import pytest

import clpatch
from clpatch.match import knn_plan


@pytest.mark.parametrize("method,metric", [("offsets", "l2"), ("offsets", "l1"),
                                           ("direct", "chamfer"), ("gemm", "l2")])
def test_tiny_launches_give_the_same_matches(runtime, monkeypatch, method, metric):
    rng = np.random.default_rng(11)
    levels = 3 if metric == "chamfer" else 256
    query = rng.integers(0, levels, (19, 23, 2)).astype(np.uint8)
    reference = rng.integers(0, levels, (21, 18, 2)).astype(np.uint8)
    kw = dict(patch_size=4, k=7, metric=metric, method=method)
    expected = clpatch.knn(query, reference, runtime=runtime, **kw)
    monkeypatch.setattr(knn_plan, "WORK_PER_LAUNCH", 1000)
    fresh = clpatch.Runtime(runtime.device)
    got = clpatch.knn(query, reference, runtime=fresh, **kw)
    plan = next(reversed(fresh.plan_cache().values()))
    assert sum(1 for stage, _ in plan.last_events if stage == "search") > 3
    np.testing.assert_array_equal(got.positions, expected.positions)
    np.testing.assert_array_equal(got.distances, expected.distances)
