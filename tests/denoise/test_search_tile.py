"""The denoisers' windowed search fits the rules' configuration to the image's size (a small
image on a large GPU gets a smaller square tile, or fewer reference rows per column
work-group, so more work-groups), and its results do not depend on it."""

from __future__ import annotations

import numpy as np
import pytest

import clpatch


def last_plan(rt: clpatch.Runtime):
    cache = rt.plan_cache()
    return cache[next(reversed(cache))]


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    rng = np.random.default_rng(7)
    return np.round(rng.random((60, 70)) * 255).astype(np.float32)


def runtimes(runtime):
    many = clpatch.Runtime(runtime.device, profile_overrides={"compute_units": 132})
    few = clpatch.Runtime(runtime.device, profile_overrides={"compute_units": 1})
    return many, few


@pytest.mark.parametrize("method", ["nlmeans", "bm3d"])
def test_small_image_gets_the_fitted_tile_and_the_same_result(runtime, image, method):
    many, few = runtimes(runtime)
    call = getattr(clpatch, method)
    # (BM3D on a step-4 grid: the square search; its fast preset's steps 6 / 5 take the
    # column search, below.)
    kwargs = {} if method == "nlmeans" else dict(step=4, k=8, window=21)
    got = call(image, 20.0, runtime=many, **kwargs)
    want = call(image, 20.0, runtime=few, **kwargs)
    plan_many, plan_few = last_plan(many), last_plan(few)
    if method == "nlmeans":
        tiles_many, tiles_few = [plan_many.search.config.tile], [plan_few.search.config.tile]
    else:
        tiles_many = [stage.search.config.tile for stage in plan_many.stages]
        tiles_few = [stage.search.config.tile for stage in plan_few.stages]
    assert all(t == 4 for t in tiles_many), tiles_many
    assert all(t == many.profile.square_tile for t in tiles_few), tiles_few
    np.testing.assert_array_equal(got, want)


def test_small_image_gets_fewer_column_rows_and_the_same_result(runtime, image):
    """The fast preset's column searches (steps 6 and 5): rows = the step on a device with
    one compute unit, 1 on a 60×70 image with 132 of them."""
    many, few = runtimes(runtime)
    got = clpatch.bm3d(image, 20.0, runtime=many)
    want = clpatch.bm3d(image, 20.0, runtime=few)
    configs_many = [stage.search.config for stage in last_plan(many).stages]
    configs_few = [stage.search.config for stage in last_plan(few).stages]
    assert [c.variant for c in configs_many + configs_few] == ["column"] * 4
    assert [c.rows for c in configs_few] == [6, 5], configs_few
    assert [c.rows for c in configs_many] == [1, 1], configs_many
    assert "work-groups per compute unit" in configs_many[0].reason
    np.testing.assert_array_equal(got, want)
