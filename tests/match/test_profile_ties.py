"""Every device profile gives the same results on 8-bit images (issue 18).

Integer-valued inputs make equal patch distances common (flat and saturated regions, and
exact integer sums in general), so which candidate wins a tie decides the matches and, through
them, the denoised image. The tie rule (cl_src/lib/nn_table.mako, tests/reference/search.py):
equal distances go to the candidate of smaller offset (dt, dy, dx), lexicographically, i.e.
the smaller (t, y, x) of its top-left corner in raster order. Each family's profile (forced
on the test device, as `CLPATCH_PROFILE` does) picks another neighbour-table kind,
work-group shapes and batches: every one must return the oracle's matches exactly, and the
filters must match their oracles to float rounding (1e-3 on 0-255 data).
"""

from __future__ import annotations

import numpy as np
import pytest

import clpatch
from clpatch.core.profiles import FAMILIES
from clpatch.match.window.config import SEARCH_VARIANTS
from clpatch.match.window.video import VIDEO_SEARCHES
from tests.helpers import assert_close, family_runtime, load_image, tiered
from tests.reference import vbm3d as vbm3d_ref
from tests.reference.bm3d import bm3d_reference
from tests.reference.nlmeans import nlmeans_reference
from tests.reference.search import brute_force_search

SIGMA = 20.0
ATOL = 1e-3   # float32 kernels against the float64 oracles, on 0-255 data

# variant -> (patch_size, step, window, k): requests each variant can run.
REQUESTS = {
    "naive": (4, 2, 9, 8),
    "convolution": (4, 1, 9, 8),
    "column": (5, 3, 11, 8),
    "square": (8, 4, 15, 16),
}

def photo_uint8(rows, cols, seed=0, frames=0):
    """A crop of camera.png plus N(0, 20) noise, rounded and clipped to uint8, with a
    saturated block (every patch inside it ties with every other at distance 0). frames > 0:
    a video of crops moving by (1, 2) pixels per frame."""
    photo = load_image("camera", np.float64)
    rng = np.random.default_rng(seed)
    if frames:
        clean = np.stack([photo[90 + t:90 + t + rows, 140 + 2 * t:140 + 2 * t + cols]
                          for t in range(frames)])
    else:
        clean = photo[90:90 + rows, 140:140 + cols]
    noisy = np.clip(np.rint(clean + rng.normal(0, SIGMA, clean.shape)), 0, 255)
    noisy[..., 2:2 + rows // 3, 3:3 + cols // 3] = 255
    return noisy.astype(np.uint8)


def check_exact(result, image, patch, step, window, k, *, metric="l2", temporal_window=0,
                video=False, what=""):
    _, _, distances, positions = brute_force_search(image, patch, step, window, k, metric,
                                                    temporal_window, video)
    np.testing.assert_array_equal(np.asarray(result.distances), distances.astype(np.float32),
                                  err_msg=f"{what}: distances")
    got = np.asarray(result.positions)
    wrong = (got != positions).any(-1)
    assert not wrong.any(), (f"{what}: {int(wrong.sum())} of {wrong.size} positions break the "
                             f"tie rule, first at {tuple(np.argwhere(wrong)[0])}")


def test_the_image_has_ties():
    """The test input really exercises the rule: many references have tied candidates."""
    image = photo_uint8(40, 44)
    _, _, distances, _ = brute_force_search(image, 4, 2, 9, 8)
    tied = (np.diff(distances, axis=-1) == 0).any(-1)
    assert tied.mean() > 0.05, tied.mean()


# ---- the windowed search: every family x variant --------------------------------------------

# CI: each family with two variants, each variant with an ordered-table and an
# unordered-table family; make test-slow: every pair.
@pytest.mark.parametrize("family,variant", tiered(
    ((f, v) for f in FAMILIES for v in SEARCH_VARIANTS),
    keep=lambda f, v: (FAMILIES.index(f) + SEARCH_VARIANTS.index(v)) % 2 == 0))
def test_search_follows_the_tie_rule(runtime, family, variant):
    rt = family_runtime(runtime, family)
    image = photo_uint8(40, 44)
    patch, step, window, k = REQUESTS[variant]
    result = clpatch.search_patches(image, patch, step, window, k, variant=variant, runtime=rt)
    assert result.config.variant == variant
    assert result.config.table == rt.profile.neighbour_table
    check_exact(result, image, patch, step, window, k, what=f"{family}/{variant}")


@pytest.mark.parametrize("table", ["ordered", "unordered"])
def test_l1_and_video_follow_the_tie_rule(runtime, table):
    rt = family_runtime(runtime, "amd" if table == "unordered" else "nvidia")
    assert rt.profile.neighbour_table == table
    image = photo_uint8(36, 40, seed=1)
    result = clpatch.search_patches(image, 5, 3, 11, 8, metric="l1", variant="column", runtime=rt)
    check_exact(result, image, 5, 3, 11, 8, metric="l1", what=f"l1 column, {table}")
    video = photo_uint8(20, 22, seed=2, frames=3)
    for variant in ("naive", "convolution"):
        result = clpatch.search_patches(video, 4, 1 if variant == "convolution" else 3, 7, 8,
                                        variant=variant, temporal_window=1, runtime=rt)
        check_exact(result, video, 4, 1 if variant == "convolution" else 3, 7, 8,
                    temporal_window=1, video=True, what=f"video {variant}, {table}")


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["l2", "l1"])
@pytest.mark.parametrize("variant", SEARCH_VARIANTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_video_search_follows_the_tie_rule_sweep(runtime, family, variant, metric):
    rt = family_runtime(runtime, family)
    video = photo_uint8(24, 28, seed=3, frames=3)
    patch, step, window, k = REQUESTS[variant]
    result = clpatch.search_patches(video, patch, step, window, k, metric=metric,
                                    variant=variant, temporal_window=1, runtime=rt)
    check_exact(result, video, patch, step, window, k, metric=metric, temporal_window=1,
                video=True, what=f"{family}/{variant}/{metric} video")


# ---- the filters: every family against the oracles and each other ----------------------------

def check_filter(outputs, expected, what):
    """Each family's output within ATOL of the oracle and of the first family's."""
    first = next(iter(outputs.values()))
    for family, out in outputs.items():
        assert out.dtype == np.float32 and out.shape == expected.shape, what
        assert_close(out, expected, rtol=0.0, atol=ATOL, what=f"{what}, {family} vs oracle")
        assert_close(out, first, rtol=0.0, atol=ATOL, what=f"{what}, {family} vs the others")


# Small patches: distances of a few hundred, so ties between different patches (not only
# between identical ones, which give the same average either way) decide the neighbours.
@pytest.mark.parametrize("patch_size,step,window,k", tiered(
    [(3, 1, 7, 8), (5, 3, 11, 16), (8, 4, 21, 16)], keep=lambda *case: case == (3, 1, 7, 8)))
def test_nlmeans_every_profile(runtime, patch_size, step, window, k):
    image = photo_uint8(40, 44, seed=4)
    params = dict(patch_size=patch_size, step=step, window=window, k=k)
    expected = nlmeans_reference(image.astype(np.float64), SIGMA, **params)
    outputs = {f: clpatch.nlmeans(image, SIGMA, runtime=family_runtime(runtime, f), **params)
               for f in FAMILIES}
    check_filter(outputs, expected, f"nlmeans {params}")


def test_bm3d_every_profile(runtime):
    image = photo_uint8(40, 44, seed=5)
    expected = bm3d_reference(image.astype(np.float64), SIGMA)
    outputs = {f: clpatch.bm3d(image, SIGMA, runtime=family_runtime(runtime, f))
               for f in FAMILIES}
    check_filter(outputs, expected, "bm3d")


def test_vbm3d_every_profile(runtime):
    video = photo_uint8(28, 30, seed=6, frames=3)
    expected = vbm3d_ref.vbm3d_reference(video.astype(np.float64), SIGMA, temporal_radius=1)
    outputs = {f: clpatch.vbm3d(video, SIGMA, temporal_radius=1,
                                runtime=family_runtime(runtime, f)) for f in FAMILIES}
    check_filter(outputs, expected, "vbm3d")


@pytest.mark.slow
@pytest.mark.parametrize("variant", SEARCH_VARIANTS)
def test_filters_every_profile_and_search_variant(runtime, variant):
    image = photo_uint8(40, 44, seed=7)
    if variant == "square":
        params = dict(patch_size=8, step=4)
    else:
        params = dict(patch_size=5, step=1 if variant == "convolution" else 3)
    expected = nlmeans_reference(image.astype(np.float64), SIGMA, window=11, k=16, **params)
    outputs = {f: clpatch.nlmeans(image, SIGMA, window=11, k=16, variant=variant,
                                  runtime=family_runtime(runtime, f), **params)
               for f in FAMILIES}
    check_filter(outputs, expected, f"nlmeans/{variant}")
    if variant != "square":
        params = dict(patch_size=8, step=2 if variant == "convolution" else 3)
    bm3d_params = dict(window=11, **params)
    expected = bm3d_reference(image.astype(np.float64), SIGMA, **bm3d_params)
    outputs = {f: clpatch.bm3d(image, SIGMA, variant=variant,
                               runtime=family_runtime(runtime, f), **bm3d_params)
               for f in FAMILIES}
    check_filter(outputs, expected, f"bm3d/{variant}")


@pytest.mark.slow
def test_bm3d_reference_preset_every_profile(runtime):
    """The staggered grid (column search with shifts) of the reference preset."""
    image = photo_uint8(40, 44, seed=8)
    expected = bm3d_reference(image.astype(np.float64), SIGMA, "reference", window=15)
    outputs = {f: clpatch.bm3d(image, SIGMA, preset="reference", window=15,
                               runtime=family_runtime(runtime, f)) for f in FAMILIES}
    check_filter(outputs, expected, "bm3d reference preset")


@pytest.mark.slow
@pytest.mark.parametrize("variant", VIDEO_SEARCHES)
def test_vbm3d_every_profile_and_search_variant(runtime, variant):
    video = photo_uint8(28, 30, seed=9, frames=4)
    expected = vbm3d_ref.vbm3d_reference(video.astype(np.float64), SIGMA, temporal_radius=1)
    outputs = {f: clpatch.vbm3d(video, SIGMA, temporal_radius=1, variant=variant,
                                runtime=family_runtime(runtime, f)) for f in FAMILIES}
    check_filter(outputs, expected, f"vbm3d/{variant}")
