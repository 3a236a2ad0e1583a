"""BM3D/CBM3D with a guide image (`guide=`, `guide_role=`) against the NumPy oracle
tests/reference/bm3d.py: both roles, grayscale and colour, both presets, both aggregations,
device-array guides, tiles, streams, the guide never setting the peak or data range, and
bad arguments. Criteria as tests/denoise/test_bm3d.py (float32 kernels vs the float64 oracle
within ATOL; bit-identical where the "fixed" aggregation makes the runs deterministic)."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.denoise.bm3d import BM3DPlan
from clpatch.denoise.bm3d_params import stage_params
from clpatch.denoise.strength import Strength
from tests.denoise.test_bm3d import ATOL, SIGMA, fixed_available, psnr
from tests.helpers import assert_close, assert_same, load_image, smooth_noisy
from tests.reference.bm3d import bm3d_reference

GRAY, COLOUR = (37, 45), (29, 33, 3)


def pair(shape, seed):
    """(noisy image, guide): the guide is the same smooth picture with lighter noise of its
    own (sigma 5), so that its patch distances sit away from ties and thresholds."""
    return smooth_noisy(shape, seed=seed), smooth_noisy(shape, seed=seed + 50, sigma=5.0)


def oracle(image, guide, preset="fast", **kwargs):
    return bm3d_reference(np.asarray(image, np.float64), SIGMA, preset,
                          guide=None if guide is None else np.asarray(guide, np.float64),
                          **kwargs)


def check(out, expected, what, atol=ATOL):
    assert out.dtype == np.float32 and out.shape == expected.shape, what
    assert np.isfinite(out).all(), f"{what}: non-finite output"
    assert_close(out, expected, rtol=0.0, atol=atol, what=what)


def fixed_or_skip(runtime) -> str:
    if not fixed_available(runtime):
        pytest.skip("no 64-bit atomics: no deterministic aggregation")
    return "fixed"


# ---- the oracle's own guide semantics ------------------------------------------------------

def test_oracle_guide_semantics():
    """In float64 the NumPy oracle's roles are exact: matching stage 1 on the image itself
    is no guide; the basic estimate as "oracle" guide is the two-stage run; a guide of
    another picture changes both stages."""
    image, guide = pair((30, 34), 21)
    basic = oracle(image, None, stages=1)
    np.testing.assert_array_equal(oracle(image, image, stages=1), basic)
    np.testing.assert_array_equal(oracle(image, basic, guide_role="oracle"), oracle(image, None))
    assert np.abs(oracle(image, guide, stages=1) - basic).max() > 0.1
    rgb = smooth_noisy((24, 26, 3), seed=22)
    np.testing.assert_allclose(oracle(rgb, oracle(rgb, None, stages=1), guide_role="oracle"),
                               oracle(rgb, None), rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="guide_role"):
        oracle(image, None, guide_role="oracle")
    with pytest.raises(ValueError, match="stages=2"):
        oracle(image, guide, guide_role="oracle", stages=1)
    with pytest.raises(ValueError, match="guide shape"):
        oracle(image, guide[:-1])


# ---- against the oracle -------------------------------------------------------------------

@pytest.mark.parametrize("shape", [GRAY, COLOUR], ids=["gray", "colour"])
@pytest.mark.parametrize("stages", [1, 2])
def test_match_role_matches_reference(runtime, shape, stages):
    image, guide = pair(shape, 1)
    out = clpatch.bm3d(image, SIGMA, guide=guide, stages=stages, runtime=runtime)
    check(out, oracle(image, guide, stages=stages), f"match role, {shape}, {stages} stage(s)")
    plain = clpatch.bm3d(image, SIGMA, stages=stages, runtime=runtime)
    assert np.abs(out - plain).max() > 0.1, "the guide did not change the matching"


@pytest.mark.parametrize("shape", [GRAY, COLOUR], ids=["gray", "colour"])
def test_oracle_role_matches_reference(runtime, shape):
    image, guide = pair(shape, 2)
    out = clpatch.bm3d(image, SIGMA, guide=guide, guide_role="oracle", runtime=runtime)
    check(out, oracle(image, guide, guide_role="oracle"), f"oracle role, {shape}")
    matched = clpatch.bm3d(image, SIGMA, guide=guide, runtime=runtime)
    assert np.abs(out - matched).max() > 0.1, "the roles gave the same result"


@pytest.mark.parametrize("role", ["match", "oracle"])
def test_reference_preset_tiny(runtime, role):
    # n = 16/32, Haar, step 3, staggered grid, window 39 wider than the image.
    image, guide = pair((24, 26), 3)
    out = clpatch.bm3d(image, SIGMA, preset="reference", guide=guide, guide_role=role,
                       runtime=runtime)
    check(out, oracle(image, guide, "reference", guide_role=role), f"reference preset, {role}")


def test_ann_search_with_guide(runtime):
    """The guide reaches the ANN search's input as the window search's: stages=1 on the
    image itself is the unguided run; another guide changes it."""
    image, guide = pair((40, 44), 19)
    plain = clpatch.bm3d(image, SIGMA, stages=1, search="ann", runtime=runtime)
    assert_same(clpatch.bm3d(image, SIGMA, stages=1, search="ann", guide=image, runtime=runtime),
         plain, runtime, "ann, guide=image")
    other = clpatch.bm3d(image, SIGMA, stages=1, search="ann", guide=guide, runtime=runtime)
    assert np.isfinite(other).all() and np.abs(other - plain).max() > 0.1


@pytest.mark.parametrize("role", ["match", "oracle"])
def test_cas_aggregation(runtime, role):
    image, guide = pair(GRAY, 4)
    out = clpatch.bm3d(image, SIGMA, guide=guide, guide_role=role, aggregation="cas",
                       runtime=runtime)
    check(out, oracle(image, guide, guide_role=role), f"cas, {role}")


# ---- what each role replaces ---------------------------------------------------------------

@pytest.mark.parametrize("shape", [GRAY, COLOUR], ids=["gray", "colour"])
def test_guide_equal_to_image(runtime, shape):
    """stages=1: matching on the image itself is the unguided run, bit for bit; two stages
    in the "match" role differ from the unguided run (stage 2 matches on the noisy image
    instead of the basic estimate) and follow the oracle given the same guide."""
    image = smooth_noisy(shape, seed=5)
    one = clpatch.bm3d(image, SIGMA, guide=image, stages=1, runtime=runtime)
    assert_same(one, clpatch.bm3d(image, SIGMA, stages=1, runtime=runtime), runtime,
         "stages=1, guide=image vs no guide")
    two = clpatch.bm3d(image, SIGMA, guide=image.copy(), runtime=runtime)
    check(two, oracle(image, image), f"guide=image, 2 stages, {shape}")


@pytest.mark.parametrize("shape", [GRAY, COLOUR], ids=["gray", "colour"])
def test_oracle_role_with_own_basic_estimate(runtime, shape):
    """The device's basic estimate (stages=1) as the "oracle" guide reproduces the two-stage
    run. Grayscale: the estimate comes back as float32 and is uploaded unchanged, so the
    result is bit-identical. Colour: the estimate leaves the device in RGB (inverse opponent
    transform in float32) and goes back to the opponent space on upload, which moves it by
    float32 rounding (~1e-5): equal within the oracle tolerance."""
    aggregation = fixed_or_skip(runtime)
    image = smooth_noisy(shape, seed=6)
    basic = clpatch.bm3d(image, SIGMA, stages=1, aggregation=aggregation, runtime=runtime)
    out = clpatch.bm3d(image, SIGMA, guide=basic, guide_role="oracle", aggregation=aggregation,
                       runtime=runtime)
    full = clpatch.bm3d(image, SIGMA, aggregation=aggregation, runtime=runtime)
    if len(shape) == 2:
        np.testing.assert_array_equal(out, full)
    else:
        check(out, full.astype(np.float64), "colour, own basic estimate as oracle")


def test_clean_guide_improves_the_result(runtime):
    """The clean image as guide: on a camera.png crop both roles beat the unguided run
    (measured: unguided 31.10 dB, "match" 31.20 dB, "oracle" 33.64 dB, as the oracle's).
    Matching on a clean guide is no sure gain: on a smooth synthetic image "match" loses
    0.45 dB, in the oracle too, while "oracle" gains 2.6 dB."""
    clean = load_image("camera", np.float32)[200:264, 200:264]
    noisy = (clean + np.random.default_rng(7).normal(0, SIGMA, clean.shape)).astype(np.float32)
    plain = clpatch.bm3d(noisy, SIGMA, runtime=runtime)
    for role, gain in (("match", 0.05), ("oracle", 1.5)):
        guided = clpatch.bm3d(noisy, SIGMA, guide=clean, guide_role=role, runtime=runtime)
        assert np.abs(guided - plain).max() > 0.5, role
        assert psnr(guided, clean) > psnr(plain, clean) + gain, \
            f"{role}: {psnr(guided, clean):.2f} dB vs {psnr(plain, clean):.2f} dB unguided"


def test_guide_never_sets_peak_or_data_range(runtime):
    """Shifting the guide by a constant moves no patch distance (exact on these values) but
    raises its peak far above the image's: a guide's peak or range reaching the fixed-point
    scales or the thresholds would change the result."""
    aggregation = fixed_or_skip(runtime)
    rng = np.random.default_rng(8)
    image = rng.integers(0, 256, GRAY).astype(np.float32)
    plain = clpatch.bm3d(image, SIGMA, stages=1, aggregation=aggregation, runtime=runtime)
    out = clpatch.bm3d(image, SIGMA, stages=1, aggregation=aggregation, guide=image + 4096,
                       runtime=runtime)
    np.testing.assert_array_equal(out, plain)
    unit = image / 256.0                    # data_range 1 from the image; the guide exceeds 1
    plain = clpatch.bm3d(unit, SIGMA / 255, stages=1, aggregation=aggregation, runtime=runtime)
    out = clpatch.bm3d(unit, SIGMA / 255, stages=1, aggregation=aggregation, guide=unit + 2,
                       runtime=runtime)
    np.testing.assert_array_equal(out, plain)


# ---- arrays, layouts, tiles, streams -------------------------------------------------------

@pytest.mark.parametrize("shape", [GRAY, COLOUR], ids=["gray", "colour"])
def test_device_array_guides(runtime, shape):
    image, guide = pair(shape, 9)
    expected = clpatch.bm3d(image, SIGMA, guide=guide, runtime=runtime)
    d_image = cla.to_device(runtime.queue, image)
    d_guide = cla.to_device(runtime.queue, guide)
    assert_same(clpatch.bm3d(image, SIGMA, guide=d_guide, runtime=runtime), expected, runtime,
         "NumPy image, device guide")
    for g in (guide, d_guide, guide.astype(np.float64)):
        out = clpatch.bm3d(d_image, SIGMA, guide=g, runtime=runtime)
        assert isinstance(out, cla.Array)
        assert_same(out.get(), expected, runtime, f"device image, guide {type(g).__name__}")


def test_uint8_and_list_guides(runtime):
    image = smooth_noisy(GRAY, seed=10)
    guide = np.clip(smooth_noisy(GRAY, seed=11, sigma=5.0), 0, 255).round().astype(np.uint8)
    expected = clpatch.bm3d(image, SIGMA, guide=guide.astype(np.float32), runtime=runtime)
    assert_same(clpatch.bm3d(image, SIGMA, guide=guide, runtime=runtime), expected, runtime, "uint8")
    assert_same(clpatch.bm3d(image, SIGMA, guide=guide.tolist(), runtime=runtime), expected, runtime,
         "nested lists")


def test_channel_axis_applies_to_the_guide(runtime):
    image, guide = pair(COLOUR, 12)
    expected = clpatch.bm3d(image, SIGMA, guide=guide, runtime=runtime)
    out = clpatch.bm3d(np.moveaxis(image, -1, 0), SIGMA, guide=np.moveaxis(guide, -1, 0),
                       channel_axis=0, runtime=runtime)
    assert_same(np.moveaxis(out, 0, -1), expected, runtime, "channel_axis=0")


@pytest.mark.parametrize("shape,tile_bytes", [((80, 36), 140_000), ((56, 32, 3), 260_000)])
def test_tiles_are_bit_identical(runtime, shape, tile_bytes):
    """Bands (the basic estimate through the host, the guide uploaded band by band) give
    the untiled guided result, in both roles."""
    aggregation = fixed_or_skip(runtime)
    image, guide = pair(shape, 13)
    channels = shape[2] if len(shape) == 3 else 1
    p1, p2, stages = stage_params("fast")
    whole = BM3DPlan(runtime, *shape[:2], channels, (p1, p2), stages, aggregation=aggregation)
    tiled = BM3DPlan(runtime, *shape[:2], channels, (p1, p2), stages, aggregation=aggregation,
                     tile_bytes=tile_bytes)
    assert len(whole.tiles_for(True)) == 1 and len(tiled.tiles_for(True)) > 1
    for role in ("match", "oracle"):
        expected = whole.run(image, SIGMA, guide=guide, guide_role=role)
        np.testing.assert_array_equal(tiled.run(image, SIGMA, guide=guide, guide_role=role),
                                      expected, err_msg=role)
    check(expected, oracle(image, guide, guide_role="oracle"), f"{shape} untiled")


def test_tiles_with_cas_match_the_reference(runtime):
    image, guide = pair((80, 36), 14)
    p1, p2, stages = stage_params("fast")
    tiled = BM3DPlan(runtime, 80, 36, 1, (p1, p2), stages, aggregation="cas",
                     tile_bytes=120_000)
    assert len(tiled.tiles_for(True)) > 1
    check(tiled.run(image, SIGMA, guide=guide), oracle(image, guide), "tiled cas, match")


def test_plan_takes_a_guide_or_none_in_turn(runtime):
    image, guide = pair(GRAY, 15)
    p1, p2, stages = stage_params("fast")
    plan = BM3DPlan(runtime, *GRAY, 1, (p1, p2), stages)
    plain = plan.run(image, SIGMA)
    guided = plan.run(image, SIGMA, guide=guide)
    assert_same(plan.run(image, SIGMA), plain, runtime, "unguided after a guided run")
    assert_same(plan.run(image, SIGMA, guide=guide), guided, runtime, "guided again")
    check(guided, oracle(image, guide), "plan.run with a guide")


@pytest.mark.parametrize("role", ["match", "oracle"])
def test_stream_with_guide_frames(runtime, role):
    rng = np.random.default_rng(16)
    frames = [smooth_noisy((45, 38), seed=20 + k) for k in range(3)]
    guides = [f + rng.normal(0, 3, f.shape).astype(np.float32) for f in frames]
    given = [guides[0], cla.to_device(runtime.queue, guides[1]), guides[2].astype(np.float64)]
    p1, p2, stages = stage_params("fast")
    plan = BM3DPlan(runtime, 45, 38, 1, (p1, p2), stages)
    out = list(plan.stream(frames, SIGMA, data_range=255.0, peak=300.0,
                           guide=iter(given), guide_role=role))
    assert len(out) == 3
    strength = Strength.check(SIGMA, data_range=255.0, peak=300.0)
    for k, (frame, g) in enumerate(zip(frames, guides, strict=True)):
        expected = plan.apply(frame, strength, guide=g, guide_role=role)
        assert_same(out[k], expected, runtime, f"stream frame {k}, {role}")
    bad = [g.copy() for g in guides]
    bad[1][2, 3] = np.inf
    with pytest.raises(ValueError, match="guide frame 1 contains NaN or infinite"):
        list(plan.stream(frames, SIGMA, guide=bad, guide_role=role))
    with pytest.raises(ValueError, match="guide has fewer frames"):
        list(plan.stream(frames, SIGMA, guide=guides[:2], guide_role=role))
    with pytest.raises(ValueError, match="guide has more frames"):
        list(plan.stream(frames[:2], SIGMA, guide=guides, guide_role=role))


# ---- bad arguments -------------------------------------------------------------------------

def test_bad_guides_and_roles(runtime):
    image, guide = pair(GRAY, 17)
    with pytest.raises(ValueError, match=r"guide must have the image's shape \(37, 45\), "
                                         r"got \(37, 44\)"):
        clpatch.bm3d(image, SIGMA, guide=guide[:, :44], runtime=runtime)
    with pytest.raises(ValueError, match="guide must have the image's shape"):
        clpatch.bm3d(image, SIGMA, guide=guide[..., None], runtime=runtime)
    for value in (np.nan, np.inf):
        bad = guide.copy()
        bad[5, 6] = value
        with pytest.raises(ValueError, match="guide contains NaN or infinite"):
            clpatch.bm3d(image, SIGMA, guide=bad, runtime=runtime)
    with pytest.raises(ValueError, match="guide values must satisfy"):
        clpatch.bm3d(image, SIGMA, guide=np.full(GRAY, 1e30, np.float32), runtime=runtime)
    with pytest.raises(TypeError, match="guide must be"):
        clpatch.bm3d(image, SIGMA, guide="camera.png", runtime=runtime)
    with pytest.raises(TypeError, match="guide must have a real numeric dtype"):
        clpatch.bm3d(image, SIGMA, guide=guide.astype(np.complex64), runtime=runtime)
    with pytest.raises(ValueError, match="guide_role must be one of"):
        clpatch.bm3d(image, SIGMA, guide=guide, guide_role="ref", runtime=runtime)
    with pytest.raises(ValueError, match="guide_role='oracle' needs a guide"):
        clpatch.bm3d(image, SIGMA, guide_role="oracle", runtime=runtime)
    with pytest.raises(ValueError, match="guide_role='oracle'.*stages=2"):
        clpatch.bm3d(image, SIGMA, guide=guide, guide_role="oracle", stages=1,
                     runtime=runtime)
    assert_close(clpatch.bm3d(image, SIGMA, guide_role="match", runtime=runtime),
                 clpatch.bm3d(image, SIGMA, runtime=runtime), rtol=0, atol=ATOL,
                 what="the default role without a guide")


def test_plan_refuses_bad_guides(runtime):
    image, guide = pair(GRAY, 18)
    p1, p2, _ = stage_params("fast")
    basic_only = BM3DPlan(runtime, *GRAY, 1, (p1, p2), 1)
    with pytest.raises(ValueError, match="guide_role='oracle'.*stages=2"):
        basic_only.run(image, SIGMA, guide=guide, guide_role="oracle")
    with pytest.raises(ValueError, match="guide must have the image's shape"):
        basic_only.run(image, SIGMA, guide=guide.T)
    with pytest.raises(ValueError, match="guide_role"):
        basic_only.run(image, SIGMA, guide_role="oracle")
    plan = BM3DPlan(runtime, *GRAY, 1, (p1, p2), 2)
    with pytest.raises(TypeError, match="iterable of guide frames"):
        plan.stream([image], SIGMA, guide=guide)
