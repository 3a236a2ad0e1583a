"""The kNN's launches are bounded in work (`WORK_PER_LAUNCH`): with the bound forced tiny,
each engine splits its offsets, candidates or reference rows over many launches (the
offsets engine in whole groups of its consecutive dy) and must return the same matches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import clpatch
from clpatch.match.knn import plan as knn_plan


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


@pytest.mark.parametrize("family,units,scale", [
    ("nvidia", 132, 16),        # an H100: 16 times the base per launch
    ("nvidia", 20, 2),
    ("amd", 96, 12),
    ("nvidia", 4, 1),           # small GPUs keep the base
    ("amd", 1000, knn_plan.MAX_LAUNCH_SCALE),
    ("intel", 512, 1),          # execution units, not streaming multiprocessors
    ("cpu", 64, 1),
])
def test_launch_work_grows_with_the_gpu(runtime, family, units, scale):
    profile = dataclasses.replace(runtime.profile, family=family, compute_units=units)
    assert knn_plan.launch_work(profile) == knn_plan.WORK_PER_LAUNCH * scale


def test_plans_take_the_device_launch_work(runtime, monkeypatch):
    """A plan's launches follow `launch_work` for its runtime's profile."""
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, (24, 26)).astype(np.uint8)
    monkeypatch.setattr(knn_plan, "WORK_PER_LAUNCH", 200_000)
    counts = {}
    for units in (2, 64):
        rt = clpatch.Runtime(runtime.device, profile_overrides={"compute_units": units},
                             profile="nvidia")
        clpatch.knn(image, None, patch_size=3, k=5, method="offsets", runtime=rt)
        plan = next(reversed(rt.plan_cache().values()))
        assert plan.work_per_launch == knn_plan.launch_work(rt.profile)
        counts[units] = sum(1 for stage, _ in plan.last_events if stage == "search")
    assert counts[64] < counts[2]
