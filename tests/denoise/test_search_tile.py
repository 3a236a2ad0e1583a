"""The denoisers' windowed search takes the rules' square tile for the image's size (a small
image on a large GPU gets a smaller tile, so more work-groups), and its results do not
depend on the tile."""

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


@pytest.mark.parametrize("method", ["nlmeans", "bm3d"])
def test_small_image_gets_the_fitted_tile_and_the_same_result(runtime, image, method):
    many = clpatch.Runtime(runtime.device, profile_overrides={"compute_units": 132})
    few = clpatch.Runtime(runtime.device, profile_overrides={"compute_units": 1})
    call = getattr(clpatch, method)
    got = call(image, 20.0, runtime=many)
    want = call(image, 20.0, runtime=few)
    plan_many, plan_few = last_plan(many), last_plan(few)
    if method == "nlmeans":
        tiles_many, tiles_few = [plan_many.search.config.tile], [plan_few.search.config.tile]
    else:
        tiles_many = [stage.search.config.tile for stage in plan_many.stages]
        tiles_few = [stage.search.config.tile for stage in plan_few.stages]
    assert all(t == 4 for t in tiles_many), tiles_many
    assert all(t == many.profile.square_tile for t in tiles_few), tiles_few
    np.testing.assert_array_equal(got, want)
