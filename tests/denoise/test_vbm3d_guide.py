"""VBM3D with a guide video (clpatch.vbm3d's guide=, guide_role=): the "match" role (the
searches of both stages on the guide) and the "oracle" role (the guide is the basic
estimate) against the NumPy oracle tests/reference/vbm3d.py; guide = frames reproducing the
unguided one-stage result bit for bit; the device's own basic estimate as "oracle" guide
reproducing the two-stage result; a clean guide improving the result; bands (forced small
memory budgets) bit for bit the unbanded guided run, whole videos and streams; device
arrays, dtypes, channel_axis; data_range and peak taken from the frames only; bad guides.
"""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.denoise.vbm3d import VBM3DPlan
from clpatch.denoise.vbm3d_params import video_stage_params
from clpatch.denoise.vbm3d_tiles import band_sizes
from clpatch.selftest.inputs import integer_video
from tests.helpers import assert_close
from tests.reference import vbm3d as ref
from tests.reference.video import psnr

SIGMA = 20.0
ATOL = 1e-3   # float32 kernels against the float64 oracle, as tests/denoise/test_vbm3d.py


def clean_video(frames: int, rows: int, cols: int, channels: int = 1) -> np.ndarray:
    """The smooth moving pattern of test_vbm3d.smooth_video, without noise (float64)."""
    y, x = np.mgrid[:rows, :cols].astype(np.float64)
    clean = np.stack([np.stack([128 + 60 * np.sin((y + 0.7 * t) / 5 + c)
                                * np.cos((x - 0.4 * t) / 7 - c) for c in range(channels)], -1)
                      for t in range(frames)])
    return clean[..., 0] if channels == 1 else clean


def noisy(clean: np.ndarray, seed: int, sigma: float = SIGMA) -> np.ndarray:
    return (clean + np.random.default_rng(seed).normal(0, sigma, clean.shape)).astype(np.float32)


def fixed(runtime) -> str:
    if not runtime.profile.int64_atomics:
        pytest.skip("bit-identical results need the fixed-point aggregation (int64 atomics)")
    return "fixed"


def check_reference(out, video, *, what, atol=ATOL, **params):
    expected = ref.vbm3d_reference(np.asarray(video, np.float64), SIGMA, **params)
    assert out.dtype == np.float32 and out.shape == np.shape(video), what
    assert_close(out, expected, rtol=0.0, atol=atol, what=what)


# ---- guide = frames -----------------------------------------------------------------------

@pytest.mark.parametrize("channels", [1, 3])
def test_frames_as_guide_of_one_stage_is_unguided(runtime, channels):
    # One stage: only stage 1's matching reads the guide, which holds the frames' values
    # (also as float64, a different dtype, and as a device array).
    video = noisy(clean_video(5, 24, 28, channels), seed=1)
    kw = dict(temporal_radius=1, stages=1, aggregation=fixed(runtime), runtime=runtime)
    base = clpatch.vbm3d(video, SIGMA, **kw)
    np.testing.assert_array_equal(clpatch.vbm3d(video, SIGMA, guide=video, **kw), base)
    np.testing.assert_array_equal(
        clpatch.vbm3d(video, SIGMA, guide=video.astype(np.float64), **kw), base)
    device = cla.to_device(runtime.queue, video)
    np.testing.assert_array_equal(clpatch.vbm3d(video, SIGMA, guide=device, **kw), base)
    np.testing.assert_array_equal(clpatch.vbm3d(device, SIGMA, guide=video, **kw).get(), base)


def test_frames_as_guide_of_two_stages_follows_the_oracle(runtime):
    # Two stages: stage 2 then matches on the noisy frames instead of the basic estimate.
    video = noisy(clean_video(5, 24, 28), seed=2)
    out = clpatch.vbm3d(video, SIGMA, temporal_radius=1, guide=video, runtime=runtime)
    check_reference(out, video, what="guide = frames", temporal_radius=1, guide=video)
    unguided = clpatch.vbm3d(video, SIGMA, temporal_radius=1, runtime=runtime)
    assert np.abs(out - unguided).max() > 0.1


# ---- the "match" role against the oracle --------------------------------------------------

@pytest.mark.parametrize("stages", [1, 2])
def test_match_role_matches_oracle(runtime, stages):
    # The guide: another noisy take of the same scene (random distances, no near ties).
    clean = clean_video(6, 27, 30)
    video, guide = noisy(clean, seed=3), noisy(clean, seed=4, sigma=10.0)
    out = clpatch.vbm3d(video, SIGMA, temporal_radius=2, stages=stages, guide=guide,
                        runtime=runtime)
    check_reference(out, video, what=f"match, {stages} stage(s)", temporal_radius=2,
                    stages=stages, guide=guide)
    unguided = clpatch.vbm3d(video, SIGMA, temporal_radius=2, stages=stages, runtime=runtime)
    assert np.abs(out - unguided).max() > 0.1


def test_colour_match_role_matches_oracle(runtime):
    clean = clean_video(4, 22, 25, channels=3)
    video, guide = noisy(clean, seed=5), noisy(clean, seed=6, sigma=10.0)
    out = clpatch.vbm3d(video, SIGMA, temporal_radius=1, guide=guide, runtime=runtime)
    check_reference(out, video, what="colour match", temporal_radius=1, guide=guide)


def test_integer_guide_matches_oracle_exactly_chosen(runtime):
    # An integer-valued guide: every distance is exact in float32, ties are real ties, so
    # the groups are the oracle's whatever the frames.
    guide = integer_video(5, 26, 30, seed=7)
    video = noisy(np.asarray(guide, np.float64), seed=8)
    out = clpatch.vbm3d(video, SIGMA, temporal_radius=2, guide=guide, runtime=runtime)
    check_reference(out, video, what="integer guide", temporal_radius=2, guide=guide)


# ---- the "oracle" role --------------------------------------------------------------------

def test_own_basic_estimate_as_oracle_is_two_stages(runtime):
    # Grayscale: the one-stage output is the basic estimate stage 2 reads, bit for bit (the
    # same division of the same fixed-point sums), so the result is the two-stage one.
    video = noisy(clean_video(6, 26, 29), seed=9)
    kw = dict(temporal_radius=2, aggregation=fixed(runtime), runtime=runtime)
    basic = clpatch.vbm3d(video, SIGMA, stages=1, **kw)
    out = clpatch.vbm3d(video, SIGMA, guide=basic, guide_role="oracle", **kw)
    np.testing.assert_array_equal(out, clpatch.vbm3d(video, SIGMA, **kw))


def test_own_colour_basic_estimate_as_oracle(runtime):
    # Colour: the one-stage output is back in RGB; the guide goes to the opponent space
    # again, which rounds (float32): within float rounding of the two-stage result (observed
    # 6e-5 on 0-255 values: a few ulps).
    video = noisy(clean_video(4, 22, 25, channels=3), seed=10)
    kw = dict(temporal_radius=1, aggregation=fixed(runtime), runtime=runtime)
    basic = clpatch.vbm3d(video, SIGMA, stages=1, **kw)
    out = clpatch.vbm3d(video, SIGMA, guide=basic, guide_role="oracle", **kw)
    assert_close(out, clpatch.vbm3d(video, SIGMA, **kw), rtol=0.0, atol=2e-4,
                 what="colour basic estimate as oracle")


@pytest.mark.parametrize("channels", [1, 3])
def test_oracle_role_matches_oracle(runtime, channels):
    clean = clean_video(5, 23, 27, channels)
    video, guide = noisy(clean, seed=11), noisy(clean, seed=12, sigma=5.0)
    out = clpatch.vbm3d(video, SIGMA, temporal_radius=1, guide=guide, guide_role="oracle",
                        runtime=runtime)
    check_reference(out, video, what=f"oracle role, {channels} channel(s)", temporal_radius=1,
                    guide=guide, guide_role="oracle")


def test_clean_guide_improves_the_result(runtime):
    clean = clean_video(6, 32, 32)
    video = noisy(clean, seed=13)
    kw = dict(temporal_radius=2, runtime=runtime)
    unguided = clpatch.vbm3d(video, SIGMA, **kw)
    match = clpatch.vbm3d(video, SIGMA, guide=clean, **kw)
    oracle = clpatch.vbm3d(video, SIGMA, guide=clean, guide_role="oracle", **kw)
    base = psnr(unguided, clean)
    assert psnr(match, clean) > base + 0.1, (psnr(match, clean), base)
    assert psnr(oracle, clean) > base + 0.5, (psnr(oracle, clean), base)
    assert np.abs(match - unguided).max() > 0.1 and np.abs(oracle - unguided).max() > 0.1


# ---- the frames alone set data_range and peak ---------------------------------------------

def test_guide_never_sets_data_range_or_peak(runtime):
    # Integer values: a guide offset by 5000 (exact in float32) has the frames' distances,
    # so one stage gives the unguided result; had its dtype (uint16: data_range 65535) or
    # its values (beyond 4 x data_range) set the thresholds or the fixed-point peak, it
    # would not (or the stream would refuse it).
    video = integer_video(5, 24, 26, seed=14)
    kw = dict(temporal_radius=1, stages=1, aggregation=fixed(runtime))
    base = clpatch.vbm3d(video, SIGMA, runtime=runtime, **kw)
    for guide in (video.astype(np.uint16), video + 5000.0):
        np.testing.assert_array_equal(clpatch.vbm3d(video, SIGMA, guide=guide, runtime=runtime,
                                                    **kw), base)
    plan = plan_for(runtime, video.shape, temporal_radius=1, stages=1)
    streamed = list(plan.stream(iter(video), SIGMA, guide=iter(video + 5000.0)))
    np.testing.assert_array_equal(np.stack(streamed), base)


# ---- plans, streams, bands ----------------------------------------------------------------

def plan_for(runtime, shape, aggregation="fixed", tile_bytes=None, **params):
    p1, p2, stages, radius = video_stage_params(**params)
    channels = shape[3] if len(shape) == 4 else 1
    return VBM3DPlan(runtime, shape[1], shape[2], channels, (p1, p2), stages, radius,
                     aggregation=aggregation, tile_bytes=tile_bytes)


@pytest.mark.parametrize("role", ["match", "oracle"])
def test_stream_equals_run(runtime, role):
    fixed(runtime)
    clean = clean_video(9, 20, 23)
    video, guide = noisy(clean, seed=15), noisy(clean, seed=16, sigma=5.0)
    plan = plan_for(runtime, video.shape, temporal_radius=1)
    whole = plan.run(video, SIGMA, guide=guide, guide_role=role)
    frames = list(plan.stream(iter(video), SIGMA, peak=float(np.abs(video).max()),
                              guide=(g for g in guide), guide_role=role))
    np.testing.assert_array_equal(np.stack(frames), whole)
    # The same plan without a guide afterwards: the unguided result.
    np.testing.assert_array_equal(plan.run(video, SIGMA),
                                  clpatch.vbm3d(video, SIGMA, temporal_radius=1,
                                                aggregation="fixed", runtime=runtime))


# Small windows and radius 1 (as test_vbm3d's band tests): frames of 60 to 90 rows split
# into several bands.
BAND_PARAMS = dict(patch_size=4, step=(3, 2), window_ref=5, window_pred=3, q=2, n=(4, 8),
                   temporal_radius=1)


def in_one_buffer(video):
    buffer = np.empty_like(video[0])
    for frame in video:
        buffer[...] = frame
        yield buffer


@pytest.mark.parametrize("shape,stages,role", [((9, 73, 17), 2, "match"),
                                               ((7, 89, 15, 3), 2, "match"),
                                               ((9, 67, 17), 1, "match"),
                                               ((9, 73, 17), 2, "oracle")],
                         ids=["gray", "colour", "stage-1", "oracle"])
def test_bands_are_bit_identical(runtime, shape, stages, role):
    fixed(runtime)
    channels = shape[3] if len(shape) == 4 else 1
    clean = clean_video(shape[0], shape[1], shape[2], channels)
    video, guide = noisy(clean, seed=17), noisy(clean, seed=18, sigma=8.0)
    whole = plan_for(runtime, video.shape, stages=stages, **BAND_PARAMS)
    budget = int(0.5 * sum(band_sizes(whole, whole.bands[0], guided=True).values()))
    tiled = plan_for(runtime, video.shape, tile_bytes=budget, stages=stages, **BAND_PARAMS)
    layout = tiled.layout(role == "match")
    assert len(whole.layout(role == "match").bands) == 1 and len(layout.bands) >= 2
    expected = whole.run(video, SIGMA, data_range=255.0, guide=guide, guide_role=role)
    np.testing.assert_array_equal(
        tiled.run(video, SIGMA, data_range=255.0, guide=guide, guide_role=role), expected)
    assert tiled.pool.held_bytes() <= budget
    # Streams by chunks of 1 and 3 frames, frames and guide frames from reused buffers.
    peak = float(np.abs(video).max())
    for chunk in (1, 3):
        tiled.chunk_frames = chunk
        out = list(tiled.stream(in_one_buffer(video), SIGMA, data_range=255.0, peak=peak,
                                guide=in_one_buffer(guide), guide_role=role))
        np.testing.assert_array_equal(np.stack(out), expected, err_msg=f"chunks of {chunk}")
    # Device videos and guides through the bands.
    device = tiled.run(cla.to_device(runtime.queue, video), SIGMA, data_range=255.0,
                       guide=cla.to_device(runtime.queue, guide), guide_role=role)
    np.testing.assert_array_equal(device.get(), expected)
    # The same plan without a guide: its own bands, within the budget.
    np.testing.assert_array_equal(tiled.run(video, SIGMA, data_range=255.0),
                                  whole.run(video, SIGMA, data_range=255.0))
    assert tiled.pool.held_bytes() <= budget


def test_channel_axis_applies_to_the_guide(runtime):
    clean = clean_video(3, 16, 18, channels=3)
    video, guide = noisy(clean, seed=19), noisy(clean, seed=20, sigma=5.0)
    a = clpatch.vbm3d(video, SIGMA, temporal_radius=1, guide=guide, runtime=runtime)
    b = clpatch.vbm3d(np.moveaxis(video, -1, 1), SIGMA, temporal_radius=1, channel_axis=1,
                      guide=np.moveaxis(guide, -1, 1), runtime=runtime)
    np.testing.assert_allclose(np.moveaxis(b, 1, -1), a, atol=1e-5)


# ---- errors -------------------------------------------------------------------------------

def test_bad_guides(runtime):
    video = noisy(clean_video(3, 16, 16), seed=21)
    with pytest.raises(ValueError, match="guide_role"):
        clpatch.vbm3d(video, SIGMA, guide=video, guide_role="basic", runtime=runtime)
    with pytest.raises(ValueError, match="guide_role"):
        clpatch.vbm3d(video, SIGMA, guide_role="oracle", runtime=runtime)
    with pytest.raises(ValueError, match="guide_role.*stages"):
        clpatch.vbm3d(video, SIGMA, stages=1, guide=video, guide_role="oracle", runtime=runtime)
    with pytest.raises(ValueError, match=r"guide shape \(3, 16, 17\).*\(3, 16, 16\)"):
        clpatch.vbm3d(video, SIGMA, guide=np.zeros((3, 16, 17)), runtime=runtime)
    with pytest.raises(ValueError, match=r"guide shape \(2, 16, 16\)"):
        clpatch.vbm3d(video, SIGMA, guide=video[:2], runtime=runtime)
    with pytest.raises(TypeError, match="guide must be"):
        clpatch.vbm3d(video, SIGMA, guide="guide.npy", runtime=runtime)
    with pytest.raises(TypeError, match="guide must have a real numeric dtype"):
        clpatch.vbm3d(video, SIGMA, guide=video.astype(complex), runtime=runtime)
    bad = video.copy()
    bad[1, 2, 3] = np.inf
    with pytest.raises(ValueError, match="guide contains NaN"):
        clpatch.vbm3d(video, SIGMA, guide=bad, runtime=runtime)
    with pytest.raises(ValueError, match="guide contains NaN"):
        clpatch.vbm3d(video, SIGMA, guide=cla.to_device(runtime.queue, bad), runtime=runtime)
    with pytest.raises(ValueError, match="guide values must satisfy"):
        clpatch.vbm3d(video, SIGMA, guide=video * 1e20, runtime=runtime)


def test_bad_stream_guides(runtime):
    video = noisy(clean_video(4, 16, 16), seed=22)
    plan = plan_for(runtime, video.shape, temporal_radius=1)
    with pytest.raises(ValueError, match="guide_role"):
        plan.stream(iter(video), SIGMA, guide_role="oracle")
    with pytest.raises(TypeError, match="guide must be an iterable"):
        plan.stream(iter(video), SIGMA, guide=3.0)
    with pytest.raises(ValueError, match="guide ended after 2 frames"):
        list(plan.stream(iter(video), SIGMA, guide=iter(video[:2])))
    with pytest.raises(ValueError, match="guide has more frames"):
        list(plan.stream(iter(video[:3]), SIGMA, guide=iter(video)))
    with pytest.raises(ValueError, match=r"guide frame 0 has shape \(16, 15\), expected \(16, 16\)"):
        list(plan.stream(iter(video), SIGMA, guide=iter(video[:, :, :15])))
    bad = video.copy()
    bad[2, 0, 0] = np.nan
    with pytest.raises(ValueError, match="guide frame 2 contains NaN"):
        list(plan.stream(iter(video), SIGMA, guide=iter(bad)))
