"""VBM3D on given matches (`clpatch.vbm3d(..., matches=)`, clpatch/denoise/vbm3d_given.py):
bit-identical to vbm3d's own call on the matches its video search finds (stage 1, both
stages, device matches), the NumPy oracle (tests/reference/vbm3d.py) fed the same matches
for other ones (the windowed search's, a shifted search's, random ones in grayscale and
colour), the fixed-point bound measured on the matches, plans and streams, and every
refusal."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.denoise.vbm3d import VBM3DPlan
from clpatch.denoise.vbm3d_params import contributions, video_stage_params
from tests.denoise.test_vbm3d import ATOL, SIGMA, smooth_video
from tests.helpers import assert_close, assert_same
from tests.reference import vbm3d as ref
from tests.reference.search import grid

SHAPE = (6, 30, 34)      # 6 frames: with radius 4 every reference keeps 8 (q 2 x 5 frames)


def own_matches(runtime, video, stage=1, **params):
    """The video search's own Matches of every frame of `video` (`VBM3DPlan.search`),
    stage `stage`'s parameters (`params`: vbm3d's)."""
    p1, p2, stages, radius = video_stage_params(**params)
    channels = video.shape[3] if video.ndim == 4 else 1
    plan = VBM3DPlan(runtime, video.shape[1], video.shape[2], channels, (p1, p2), 2, radius)
    found = [plan.search(video, t, stage=stage) for t in range(len(video))]
    sp = (p1, p2)[stage - 1]
    s = plan.stages[stage - 1]
    return clpatch.Matches(np.stack([f[0] for f in found]), np.stack([f[1] for f in found]),
                           s.grid_y, s.grid_x, sp.patch_size, sp.step, sp.window_ref, sp.n,
                           "l2", radius, None)


def on_device(runtime, m):
    q = runtime.queue
    return clpatch.Matches(**{**vars(m), "positions": cla.to_device(q, m.positions),
                              "distances": cla.to_device(q, m.distances)})


def random_matches(video, patch_size, step, k, radius, seed, *, tau=None):
    """k random positions per reference of every frame, within `radius` frames of it,
    anywhere in the frame; their true l2 distances on `video`'s first channel (or, with
    `tau`, drawn across tau·p², so group sizes vary), ascending."""
    rng = np.random.default_rng(seed)
    frames, rows, cols = video.shape[:3]
    plane = np.asarray(video, np.float64)
    plane = plane[..., 0] if plane.ndim == 4 else plane
    p = patch_size
    gy, gx = grid(rows, p, step), grid(cols, p, step)
    shape = (frames, len(gy), len(gx), k)
    t_ref = np.arange(frames)[:, None, None, None]
    t = np.clip(t_ref + rng.integers(-radius, radius + 1, shape), 0, frames - 1)
    pos = np.stack([t, rng.integers(0, rows - p + 1, shape), rng.integers(0, cols - p + 1, shape)],
                   -1).astype(np.int32)
    if tau is None:
        d = np.empty(shape)
        for f, a, b in np.ndindex(shape[:3]):
            r = plane[f, gy[a]:gy[a] + p, gx[b]:gx[b] + p]
            d[f, a, b] = [np.sum((plane[e[0], e[1]:e[1] + p, e[2]:e[2] + p] - r) ** 2)
                          for e in pos[f, a, b]]
    else:
        d = rng.uniform(0, 2 * tau * p * p, shape)
    order = np.argsort(d, axis=-1, kind="stable")
    pos = np.take_along_axis(pos, order[..., None], 3)
    d = np.take_along_axis(d, order, 3).astype(np.float32)
    return clpatch.Matches(pos, d, gy.astype(np.int32), gx.astype(np.int32), p, step, 0, k,
                           "l2", radius, None)


def host(m):
    return np.asarray(m.positions), np.asarray(m.distances)


def check_oracle(out, video, matches, *, what, **params):
    pair = tuple(None if m is None else host(m) for m in matches)
    expected = ref.vbm3d_reference(np.asarray(video, np.float64), SIGMA, matches=pair, **params)
    assert out.dtype == np.float32 and out.shape == video.shape, what
    assert_close(out, expected, rtol=0.0, atol=ATOL, what=what)


# ---- the video search's own matches: bit for bit ---------------------------------------------

#: A peak far above the frames' values makes the "fixed" aggregation's scales small enough to
#: round its sums: the results then differ with the scales (a bound twice as large changes
#: them), so the same bits mean the same scales. (At the frames' own peak the sums of these
#: small videos are exact at any scale within a factor of 2^10.)
PEAK = 2.0 ** 28


def test_own_search_gives_the_same_result(runtime):
    """vbm3d's defaults (radius 4, groups of 8): the matches of its stage-1 search give its
    basic estimate and, with stage 2 searching, its result; NumPy and device matches; the
    patch size, step and radius are the matches' (none given)."""
    video = smooth_video(*SHAPE, seed=1)
    m = own_matches(runtime, video)
    assert m.k == 8 and m.temporal_window == 4 and np.all(m.positions >= 0)
    assert_same(clpatch.vbm3d(video, SIGMA, stages=1, matches=m, peak=PEAK, runtime=runtime),
                clpatch.vbm3d(video, SIGMA, stages=1, peak=PEAK, runtime=runtime), runtime, "stage 1")
    expected = clpatch.vbm3d(video, SIGMA, peak=PEAK, runtime=runtime)
    assert_same(clpatch.vbm3d(video, SIGMA, matches=(m, None), peak=PEAK, runtime=runtime),
                expected, runtime, "stage 1 given, stage 2 searched")
    assert_same(clpatch.vbm3d(video, SIGMA, matches=(on_device(runtime, m), None),
                                      peak=PEAK, runtime=runtime),
                expected, runtime, "device matches")
    assert_same(clpatch.vbm3d(video, SIGMA, matches=(m, None), runtime=runtime),
                clpatch.vbm3d(video, SIGMA, runtime=runtime), runtime, "the frames' peak")


def test_own_search_of_both_stages(runtime):
    """Stage 2's own matches: the search of the basic estimate (`stages=1`'s output) with
    stage 2's parameters; with stage 1's, both stages given give vbm3d's result."""
    video = smooth_video(*SHAPE, seed=2)
    basic = clpatch.vbm3d(video, SIGMA, stages=1, peak=PEAK, runtime=runtime)
    m1, m2 = own_matches(runtime, video), own_matches(runtime, basic, stage=2)
    assert (m1.step, m2.step) == (6, 4)
    assert_same(clpatch.vbm3d(video, SIGMA, matches=(m1, m2), peak=PEAK, runtime=runtime),
                clpatch.vbm3d(video, SIGMA, peak=PEAK, runtime=runtime), runtime, "both stages")


# ---- other matches: the oracle -----------------------------------------------------------------

def test_windowed_and_shifted_searches_match_oracle(runtime):
    """The windowed search's video matches (every frame within 1, one Matches for both
    stages); then a search of the video shifted by a column (positions of this video,
    distances of another), for stage 2 beside a searched stage 1."""
    video = smooth_video(5, 29, 33, seed=3)
    m = clpatch.search_patches(video, patch_size=8, step=4, window=9, k=8, temporal_window=1,
                               video=True, runtime=runtime)
    out = clpatch.vbm3d(video, SIGMA, matches=m, runtime=runtime)
    check_oracle(out, video, (m, m), what="windowed search", step=4, temporal_radius=1, k=8)
    shifted = clpatch.search_patches(np.roll(video, 1, axis=2), patch_size=8, step=4, window=9,
                                     k=8, temporal_window=1, video=True, runtime=runtime)
    out = clpatch.vbm3d(video, SIGMA, matches=(None, shifted), temporal_radius=1, k=4,
                        runtime=runtime)
    check_oracle(out, video, (None, shifted), what="shifted, stage 2", step=(6, 4),
                 temporal_radius=1, k=4)


@pytest.mark.parametrize("channels", [1, 3])
def test_random_matches_match_oracle(runtime, channels):
    """Matches anywhere in the frames within the radius (groups reach far; the reference is
    rarely among them and is put first), distances across stage 2's threshold (group sizes
    vary); k 8 lowered to 4 by the call's k."""
    video = smooth_video(4, 26, 28, seed=4, channels=channels)
    r1 = random_matches(video, 6, 3, 8, 1, seed=5)
    r2 = random_matches(video, 6, 3, 8, 1, seed=6, tau=1500.0)
    out = clpatch.vbm3d(video, SIGMA, matches=(r1, r2), k=4, runtime=runtime)
    check_oracle(out, video, (r1, r2), what=f"random, {channels} channel(s)", patch_size=6,
                 step=3, temporal_radius=1, k=4)
    device = clpatch.vbm3d(video, SIGMA, matches=(on_device(runtime, r1), r2), k=4,
                           runtime=runtime)
    np.testing.assert_array_equal(device, out)


# ---- the fixed-point bound -----------------------------------------------------------------------

def covering(matches, n, shape):
    """The most patches that the reference and the first n matches of each reference (the
    most its group can hold, and one more) put on one pixel, by brute force."""
    pos = np.asarray(matches.positions)[..., :n, :]
    count = np.zeros(shape, int)
    p = matches.patch_size
    for f, a, b in np.ndindex(pos.shape[:3]):
        reference = (f, int(matches.grid_y[a]), int(matches.grid_x[b]))
        members = [tuple(e) for e in pos[f, a, b]]
        if reference in members:
            members.remove(reference)
        for t, y, x in [reference, *members]:
            count[t, y:y + p, x:x + p] += 1
    return int(count.max())


def test_bound_is_measured_on_the_matches(runtime):
    """Every match of every reference in the next frame (the last frame's: in the one
    before), 10 rows down (clipped): the bound counts 8 patches a reference in each of
    those frames at that reach, and the reference in its own, far above the predictive
    search's; it holds the brute-force count; NumPy and device matches agree. A match
    beyond the radius is refused."""
    frames, rows, cols = 4, 40, 44
    gy, gx = grid(rows, 8, 6), grid(cols, 8, 6)
    shape = (frames, len(gy), len(gx), 8)
    t_ref = np.arange(frames)[:, None, None, None]
    t = np.where(t_ref < frames - 1, t_ref + 1, t_ref - 1) + np.zeros(shape, int)
    y = np.minimum(gy[:, None, None] + 10, rows - 8) + np.zeros(shape, int)
    x = gx[None, :, None] + np.zeros(shape, int)
    m = clpatch.Matches(np.stack([t, y, x], -1).astype(np.int32), np.zeros(shape, np.float32),
                        gy, gx, 8, 6, 0, 8, "l2", 1, None)
    video = smooth_video(frames, rows, cols, seed=7)
    p1, p2, _, _ = video_stage_params(temporal_radius=1, step=6)
    plan = VBM3DPlan(runtime, rows, cols, 1, (p1, p2), 1, 1, given=(True,), frames=frames)
    plan.use_matches((m, None))
    bound = plan.stages[0].measured
    own = contributions(plan.stages[0].params, 1)
    per = [-(-(2 * reach + 1) // 6) + 1 for reach in (7, 17)]    # reference; 10 rows away
    assert bound == per[0] ** 2 * 1 + 2 * per[1] ** 2 * 8 > own
    assert covering(m, 8, video.shape) <= bound
    plan.use_matches((on_device(runtime, m), None))
    assert plan.stages[0].measured == bound
    far = clpatch.Matches(**{**vars(m), "temporal_window": 0})
    with pytest.raises(ValueError, match="matches reach frames 1 away.*temporal_radius=0"):
        clpatch.vbm3d(video, SIGMA, matches=far, runtime=runtime)
    # The plan keeps no matches that failed: a run then raises instead of reading frames
    # its rings do not hold.
    farther = m.positions.copy()
    farther[0, ..., 0] = 2
    with pytest.raises(ValueError, match="reach frames 2 away"):
        plan.use_matches((clpatch.Matches(**{**vars(m), "positions": farther}), None))
    with pytest.raises(RuntimeError, match="must come before a run"):
        plan.run(video, SIGMA)


# ---- plans and streams ---------------------------------------------------------------------------

def test_plans_and_streams_take_matches(runtime):
    video = smooth_video(5, 26, 28, seed=8)
    m = random_matches(video, 8, 4, 8, 2, seed=9)
    expected = clpatch.vbm3d(video, SIGMA, matches=m, runtime=runtime)
    plan = clpatch.make_plan("vbm3d", video.shape, sigma=SIGMA, matches=m, runtime=runtime)
    np.testing.assert_array_equal(plan(video), expected)
    result, event = plan.enqueue(cla.to_device(runtime.queue, video))
    event.wait()
    np.testing.assert_array_equal(result.get(), expected)
    # A stream's fixed-point peak is 4 x data_range, not the video's: the last bits differ.
    np.testing.assert_allclose(np.stack(list(plan.stream(video))), expected, atol=1e-3)
    with pytest.raises(ValueError, match="plan's matches hold 5"):
        list(plan.stream(video[:4]))
    with pytest.raises(ValueError, match="more frames than the 5"):
        list(plan.stream(np.concatenate([video, video[:1]])))
    with pytest.raises(ValueError, match="frames has 4 frames; the plan's matches hold 5"):
        plan.run(video[:4], SIGMA)


# ---- refusals ----------------------------------------------------------------------------------

def test_bad_matches_are_refused(runtime):
    video = smooth_video(4, 26, 28, seed=10)
    m = random_matches(video, 8, 4, 8, 1, seed=11)

    def changed(**fields):
        return clpatch.Matches(**{**vars(m), **fields})

    def refused(error, match, **kw):
        with pytest.raises(error, match=match):
            clpatch.vbm3d(video, SIGMA, runtime=runtime, **kw)

    refused(TypeError, "matches must be a clpatch.Matches", matches=np.zeros(3))
    refused(TypeError, r"matches\[0\] must be a clpatch.Matches", matches=(np.zeros(3), None))
    refused(TypeError, "pair", matches=(m, m, m))
    refused(ValueError, "filter's grid", matches=m, step=2)
    refused(ValueError, "filter's grid", matches=m, patch_size=6)
    refused(ValueError, r"matches\[1\] must sit on the filter's grid", matches=(m, changed()),
            step=(4, 5))
    refused(ValueError, "l2 distances", matches=changed(metric="l1"))
    with pytest.raises(ValueError, match=r"matches.positions must have shape \(3, "):
        clpatch.vbm3d(video[:3], SIGMA, matches=m, runtime=runtime)
    image = clpatch.search_patches(video[0], patch_size=8, step=4, window=9, k=8,
                                   runtime=runtime)
    refused(ValueError, "matches.positions must have shape", matches=image)
    missing = m.positions.copy()
    missing[0, 1, 2, 5:] = -1            # entries the video search leaves empty
    refused(ValueError, "positions must be top-left corners", matches=changed(positions=missing))
    inf = m.distances.copy()
    inf[0, 1, 2, 5:] = np.inf
    refused(ValueError, "finite and non-negative", matches=changed(distances=inf))
    unsorted = m.distances.copy()
    unsorted[1, 0, 0, :2] = (5.0, 1.0)
    refused(ValueError, "ascending", matches=changed(distances=unsorted))
    refused(ValueError, "reach frames 1 away", matches=m, temporal_radius=0)
    refused(TypeError, "no guide=", matches=m, guide=video)
    refused(TypeError, "no variant=", matches=m, variant="naive")
    refused(ValueError, "ascending", matches=on_device(runtime, changed(distances=unsorted)))
    with pytest.raises(TypeError, match="no guide="):
        clpatch.make_plan("vbm3d", video.shape, sigma=SIGMA, matches=m, guide=True,
                          runtime=runtime)
