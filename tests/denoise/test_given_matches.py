"""Filters on given matches (`matches=`, clpatch/match/given.py): NL-means (images and video)
and BM3D held to their NumPy oracles fed the same matches (the windowed search's, the kNN's,
the NNF's, and arbitrary valid ones), bit-identical to the filters' own search where the
matches are that search's, device matches, plans, and every refusal."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.match.given import GivenMatcher
from clpatch.match.window.config import SearchRequest
from tests.denoise.test_bm3d import ATOL, fixed_available
from tests.helpers import assert_close, smooth_noisy
from tests.reference.bm3d import bm3d_reference
from tests.reference.nlmeans import nlmeans_reference
from tests.reference.search import grid

SIGMA = 20.0
TOL = dict(rtol=1e-4, atol=2e-3)      # as tests/denoise/test_nlmeans.py


def random_matches(image, patch_size, step, k, seed, *, distances=None):
    """A Matches of k random valid positions per reference of the plain grid, with their
    true l2 distances on `image` (gray) or `distances` drawn at random, ascending."""
    rng = np.random.default_rng(seed)
    rows, cols = image.shape[:2]
    p = patch_size
    gy, gx = grid(rows, p, step), grid(cols, p, step)
    pos = np.stack([rng.integers(0, rows - p + 1, (len(gy), len(gx), k)),
                    rng.integers(0, cols - p + 1, (len(gy), len(gx), k))], -1).astype(np.int32)
    if distances is None:
        img = np.asarray(image, np.float64)
        d = np.empty(pos.shape[:3])
        for a, ry in enumerate(gy):
            for b, rx in enumerate(gx):
                ref = img[ry:ry + p, rx:rx + p]
                d[a, b] = [np.sum((img[y:y + p, x:x + p] - ref) ** 2) for y, x in pos[a, b]]
    else:
        d = rng.uniform(0, distances, pos.shape[:3])
    order = np.argsort(d, axis=-1, kind="stable")
    pos = np.take_along_axis(pos, order[..., None], 2)
    d = np.take_along_axis(d, order, 2).astype(np.float32)
    return clpatch.Matches(pos, d, gy.astype(np.int32), gx.astype(np.int32), p, step, 0, k,
                           "l2", 0, None)


def host(m):
    return np.asarray(m.positions), np.asarray(m.distances)


# ---- NL-means --------------------------------------------------------------------------------

def test_nlmeans_on_its_own_search_is_the_same(runtime):
    image = smooth_noisy((37, 45), seed=1)
    m = clpatch.search_patches(image, patch_size=8, step=4, window=21, k=16, runtime=runtime)
    for k in (16, 8):
        np.testing.assert_array_equal(
            clpatch.nlmeans(image, SIGMA, matches=m, k=k, runtime=runtime),
            clpatch.nlmeans(image, SIGMA, k=k, runtime=runtime), err_msg=f"k={k}")


@pytest.mark.parametrize("shape,search_channels", [((37, 45), "luminance"),
                                                   ((29, 33, 3), "luminance"),
                                                   ((29, 33, 3), "all")])
def test_nlmeans_on_random_matches_matches_oracle(runtime, shape, search_channels):
    image = smooth_noisy(shape, seed=2)
    colour = len(shape) == 3
    m = random_matches(image, 6, 3, 5, seed=3,
                       distances=36 * 3 * 4 * SIGMA ** 2 if colour else None)
    out = clpatch.nlmeans(image, SIGMA, patch_size=6, step=3, matches=m,
                          search_channels=search_channels, runtime=runtime)
    pos, dist = host(m)
    expected = nlmeans_reference(image, SIGMA, patch_size=6, step=3, window=21, k=5,
                                 search_channels=search_channels, search=(pos[None], dist[None]))
    assert_close(out, expected, **TOL, what=f"{shape} {search_channels}")


def test_nlmeans_on_an_nnf_and_knn_matches_oracle(runtime):
    """A field between two images (a's patches found in b) denoises b on a's grid; the
    kNN's matches likewise."""
    a, b = smooth_noisy((30, 34), seed=4), smooth_noisy((30, 34), seed=5)
    for m, step in ((clpatch.nnf(a, b, patch_size=7, k=2, runtime=runtime), 1),
                    (clpatch.knn(b, patch_size=7, k=4, step=3, runtime=runtime), 3)):
        out = clpatch.nlmeans(b, SIGMA, patch_size=7, step=step, matches=m, runtime=runtime)
        pos, dist = host(m)
        expected = nlmeans_reference(b, SIGMA, patch_size=7, step=step, window=21, k=m.k,
                                     search=(pos[None], dist[None]))
        assert_close(out, expected, **TOL, what=f"step {step}")


def test_nlmeans_video_on_its_own_search_is_the_same(runtime):
    frames = np.stack([smooth_noisy((24, 27), seed=10 + t) for t in range(5)])
    kw = dict(patch_size=8, step=4, window=11, temporal_window=2)
    m = clpatch.search_patches(frames, k=8, video=True, runtime=runtime, **kw)
    np.testing.assert_array_equal(
        clpatch.nlmeans_video(frames, SIGMA, k=8, matches=m, runtime=runtime, **kw),
        clpatch.nlmeans_video(frames, SIGMA, k=8, runtime=runtime, **kw))


def test_device_matches_and_device_image(runtime):
    image = smooth_noisy((37, 45), seed=6)
    q = runtime.queue
    m = clpatch.search_patches(cla.to_device(q, image), patch_size=8, step=4, window=21, k=16,
                               runtime=runtime)
    assert isinstance(m.positions, cla.Array)
    expected = clpatch.nlmeans(image, SIGMA, runtime=runtime)
    np.testing.assert_array_equal(clpatch.nlmeans(image, SIGMA, matches=m, runtime=runtime),
                                  expected)
    out = clpatch.nlmeans(cla.to_device(q, image), SIGMA, matches=m, runtime=runtime)
    np.testing.assert_array_equal(out.get(), expected)


def test_plans_take_matches(runtime):
    image = smooth_noisy((37, 45), seed=7)
    m = random_matches(image, 8, 4, 6, seed=8)
    plan = clpatch.make_plan("nlmeans", image.shape, sigma=SIGMA, matches=m, runtime=runtime)
    expected = clpatch.nlmeans(image, SIGMA, matches=m, runtime=runtime)
    np.testing.assert_array_equal(plan(image), expected)
    result, event = plan.enqueue(cla.to_device(runtime.queue, image))
    event.wait()
    np.testing.assert_array_equal(result.get(), expected)
    plan = clpatch.make_plan("bm3d", image.shape, sigma=SIGMA, data_range=255, matches=m,
                             k=4, runtime=runtime)
    np.testing.assert_array_equal(
        plan(image), clpatch.bm3d(image, SIGMA, data_range=255, matches=m, k=4,
                                  runtime=runtime))


# ---- BM3D ------------------------------------------------------------------------------------

def bm3d_oracle(image, matches, **overrides):
    pair = tuple(None if m is None else host(m) for m in matches)
    return bm3d_reference(np.asarray(image, np.float64), SIGMA, "fast", matches=pair,
                          **overrides)


def test_bm3d_on_searched_matches_matches_oracle(runtime):
    image = smooth_noisy((37, 45), seed=9)
    m = clpatch.search_patches(image, patch_size=8, step=5, window=21, k=16, runtime=runtime)
    out = clpatch.bm3d(image, SIGMA, matches=m, k=16, runtime=runtime)
    expected = bm3d_oracle(image, (m, m), patch_size=8, step=5, k=16)
    assert_close(out, expected, rtol=0.0, atol=ATOL, what="both stages")


def test_bm3d_on_random_and_knn_matches_matches_oracle(runtime):
    """Groups whose reference is not among the matches (random ones: it is put first and
    counts as similar), a stage of given matches beside a searched one."""
    image = smooth_noisy((33, 40), seed=11)
    # Distances drawn across stage 2's threshold (tau 400 per pixel): group sizes vary.
    r = random_matches(image, 8, 4, 8, seed=12, distances=2 * 400 * 64)
    out = clpatch.bm3d(image, SIGMA, matches=(None, r), step=4, k=8, runtime=runtime)
    expected = bm3d_oracle(image, (None, r), step=4, k=8, window=(35, 21))
    assert_close(out, expected, rtol=0.0, atol=ATOL, what="stage 2 random")
    q = clpatch.knn(image, patch_size=8, k=8, step=4, runtime=runtime)
    out = clpatch.bm3d(image, SIGMA, matches=(q, r), k=8, runtime=runtime)
    expected = bm3d_oracle(image, (q, r), step=4, k=8)
    assert_close(out, expected, rtol=0.0, atol=ATOL, what="knn, random")


def test_bm3d_stage1_on_its_own_search_is_the_same(runtime):
    """The same groups give the same result, fixed-point scales included: at 96x128 a
    scale bounded by the whole image (not the search's window) would round differently."""
    image = smooth_noisy((96, 128), seed=13)
    # The fast preset's stage 1: 8x8 patches, step 6, window 35, groups of 16.
    m = clpatch.search_patches(image, patch_size=8, step=6, window=35, k=16, runtime=runtime)
    out = clpatch.bm3d(image, SIGMA, matches=(m, None), runtime=runtime)
    expected = clpatch.bm3d(image, SIGMA, runtime=runtime)
    if fixed_available(runtime):
        np.testing.assert_array_equal(out, expected)
    else:
        assert_close(out, expected, rtol=0.0, atol=ATOL, what="stage 1 given")


# ---- refusals --------------------------------------------------------------------------------

def test_bad_matches_are_refused(runtime):
    image = smooth_noisy((37, 45), seed=14)
    m = clpatch.search_patches(image, patch_size=8, step=4, window=21, k=16, runtime=runtime)

    def changed(**fields):
        out = clpatch.Matches(**{**vars(m), **fields})
        return out

    def refused(error, match, **kw):
        for f in (clpatch.nlmeans, clpatch.bm3d):
            with pytest.raises(error, match=match):
                f(image, SIGMA, runtime=runtime, **kw)

    refused(TypeError, "matches must be a clpatch.Matches", matches=np.zeros(3))
    with pytest.raises(TypeError, match=r"matches\[0\] must be a clpatch.Matches or None"):
        clpatch.bm3d(image, SIGMA, runtime=runtime, matches=(np.zeros(3), None))
    refused(ValueError, "filter's grid", matches=m, step=2)
    refused(ValueError, "l2 distances", matches=changed(metric="l1"))
    bad = m.positions.copy()
    bad[1, 2, 3] = (-1, 0)
    refused(ValueError, "positions must be top-left corners", matches=changed(positions=bad))
    nan = m.distances.copy()
    nan[0, 0, 1] = np.nan
    refused(ValueError, "finite and non-negative", matches=changed(distances=nan))
    unsorted = m.distances.copy()
    unsorted[0, 0, :2] = (5.0, 1.0)
    refused(ValueError, "ascending", matches=changed(distances=unsorted))
    refused(ValueError, "shape", matches=changed(distances=m.distances[:, :, :4]))
    refused(ValueError, "must be int32", matches=changed(positions=m.positions.astype(np.int64)))
    refused(TypeError, "search= or matches=", matches=m, search="ann")
    refused(TypeError, "no guide=", matches=m, guide=image)
    # Device matches are checked on the device.
    q = runtime.queue
    refused(ValueError, "positions must be top-left corners",
            matches=changed(positions=cla.to_device(q, bad),
                            distances=cla.to_device(q, m.distances)))
    refused(ValueError, "ascending", matches=changed(positions=cla.to_device(q, m.positions),
                                                     distances=cla.to_device(q, unsorted)))
    with pytest.raises(TypeError, match="pair"):
        clpatch.bm3d(image, SIGMA, matches=(m, m, m), runtime=runtime)
    with pytest.raises(ValueError, match=r"matches\[1\] must sit on the filter's grid"):
        clpatch.bm3d(image, SIGMA, matches=(m, changed()), step=(4, 5), runtime=runtime)


def test_reach_is_the_matches_spread_or_their_window(runtime):
    """BM3D's fixed-point scales follow `reach`: the windowed search's matches keep its
    half window (so the scales, hence the bits, are that search's, which the test above
    checks where the device has the "fixed" aggregation); other matches their spread,
    measured on the host or, for device matches, by the check kernel."""
    image = smooth_noisy((40, 52), seed=15)
    searched = clpatch.search_patches(image, patch_size=8, step=4, window=21, k=8,
                                      runtime=runtime)
    r = random_matches(image, 8, 4, 8, seed=16)
    gy, gx = grid(40, 8, 4), grid(52, 8, 4)
    spread = max(np.abs(r.positions[..., 0] - gy[:, None, None]).max(),
                 np.abs(r.positions[..., 1] - gx[None, :, None]).max())
    request = SearchRequest(8, 4, 8, 21, 1, "l2", False)
    matcher = GivenMatcher(runtime, 1, 40, 52, 1, request)
    assert matcher.reach == 52 - 8                      # before any matches: anywhere
    q = runtime.queue
    for m, expected in ((searched, 10), (r, spread)):
        matcher.use(m)
        assert matcher.reach == max(expected, 10 if m is searched else 0)
        device = clpatch.Matches(**{**vars(m), "positions": cla.to_device(q, m.positions),
                                    "distances": cla.to_device(q, m.distances)})
        matcher.use(device)
        assert matcher.reach == max(expected, 10 if m is searched else 0)
