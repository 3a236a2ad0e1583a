"""VBM3D (clpatch.vbm3d) against the NumPy oracle tests/reference/vbm3d.py: every search
variant (exactly, ties included, on integer-valued videos), the whole pipeline (grayscale,
colour, both aggregations, bank paddings of the three GPU families), streaming over rings of
frame slots (videos longer than the rings), frames split into bands of rows (bit for bit
the untiled result), device arrays, dtypes, tiny inputs, bad arguments; and the quality
criterion of the issue on a camera-motion video.
"""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core.errors import DeviceResourceError
from clpatch.denoise.vbm3d import VBM3DPlan
from clpatch.denoise.vbm3d_params import (
    DEFAULTS,
    VIDEO_SEARCHES,
    choose_video_search,
    search_layout,
    video_stage_params,
)
from clpatch.denoise.vbm3d_tiles import band_sizes
from clpatch.selftest.inputs import integer_video
from tests.helpers import assert_close
from tests.reference import vbm3d as ref
from tests.reference.video import add_noise, load_image, motion_video, psnr, temporal_flicker

SIGMA = 20.0
ATOL = 1e-3   # float32 kernels against the float64 oracle (observed ~1e-4 on 0-255 data)


def smooth_video(frames: int, rows: int, cols: int, seed: int = 0, channels: int = 1):
    """A smooth moving pattern plus N(0, σ) noise: clear matches, few distances near the
    matching thresholds."""
    y, x = np.mgrid[:rows, :cols].astype(np.float64)
    clean = np.stack([np.stack([128 + 60 * np.sin((y + 0.7 * t) / 5 + c) * np.cos((x - 0.4 * t) / 7 - c)
                                for c in range(channels)], -1) for t in range(frames)])
    if channels == 1:
        clean = clean[..., 0]
    return (clean + np.random.default_rng(seed).normal(0, SIGMA, clean.shape)).astype(np.float32)


def plan_for(runtime, shape, variant=None, **params):
    p1, p2, stages, radius = video_stage_params(**params)
    channels = shape[3] if len(shape) == 4 else 1
    return VBM3DPlan(runtime, shape[1], shape[2], channels, (p1, p2), stages, radius,
                     variant=variant)


def check_search(plan, video, t):
    p = plan.stages[0].params
    positions, distances = plan.search(video, t)
    guide = np.asarray(video, np.float64)
    if guide.ndim == 4:
        guide = guide[..., 0]
    _, _, want_pos, want_dist = ref.vbm3d_search(guide, t, p.patch_size, p.step, p.window_ref,
                                                 p.window_pred, p.q, p.n, plan.radius)
    np.testing.assert_array_equal(positions, want_pos, err_msg=f"positions of frame {t}")
    np.testing.assert_array_equal(distances, want_dist.astype(np.float32),
                                  err_msg=f"distances of frame {t}")


# ---- the search ---------------------------------------------------------------------------

@pytest.mark.parametrize("variant", VIDEO_SEARCHES)
def test_search_matches_oracle_exactly(runtime, variant):
    # 31 x 38 with step 6: the last grid row and column are off the lattice; 5 frames with
    # radius 2: the first and last references search fewer frames.
    video = integer_video(5, 31, 38)
    plan = plan_for(runtime, video.shape, variant, temporal_radius=2)
    for t in range(5):
        check_search(plan, video, t)


@pytest.mark.parametrize("variant", VIDEO_SEARCHES)
def test_search_other_sizes(runtime, variant):
    # Patch 5 (not a power of 2: the patch variant sums through local memory everywhere),
    # q 3 of n 16, windows 9 and 3, and ties: a constant region in every frame.
    video = integer_video(4, 26, 29, seed=3)
    video[:, 5:17, 4:20] = 100.0
    plan = plan_for(runtime, video.shape, variant, patch_size=5, step=3, q=3, n=16,
                    window_ref=9, window_pred=3, temporal_radius=3)
    for t in (0, 2, 3):
        check_search(plan, video, t)


def test_search_of_float_video(runtime):
    # Float data: distances agree to float tolerance; the choices agree where no two
    # candidates are nearly tied (almost everywhere on random data).
    video = np.random.default_rng(5).normal(0.0, 1.0, (4, 24, 27)).astype(np.float32)
    plan = plan_for(runtime, video.shape, temporal_radius=2)
    p = plan.stages[0].params
    positions, distances = plan.search(video, 1)
    _, _, want_pos, want_dist = ref.vbm3d_search(video.astype(np.float64), 1, 8, p.step,
                                                 p.window_ref, p.window_pred, p.q, p.n, 2)
    same = (positions == want_pos).all(-1).all(-1)
    assert same.mean() > 0.9
    np.testing.assert_allclose(distances[same], want_dist[same], rtol=1e-4, atol=1e-4)


def test_single_frame_pads_results(runtime):
    video = integer_video(1, 12, 12)
    plan = plan_for(runtime, video.shape, temporal_radius=4)
    positions, distances = plan.search(video, 0)
    # One frame keeps q = 2 candidates: the rest of the n = 8 entries are empty.
    assert (positions[..., 2:, :] == -1).all() and np.isinf(distances[..., 2:]).all()
    assert (positions[..., :2, 0] == 0).all() and np.isfinite(distances[..., :2]).all()


def test_search_layout_and_rule(runtime):
    p1, _, _, _ = video_stage_params()
    assert search_layout("window", p1) == (8, 8)       # windows 7 and 5 -> 8 lanes
    assert search_layout("patch", p1) == (8, 8)
    assert choose_video_search(runtime.profile, "naive") == ("naive", "forced")
    variant, reason = choose_video_search(runtime.profile)
    assert variant in VIDEO_SEARCHES and reason.startswith("rule")
    intel = runtime.profile.with_overrides(subgroup_ops="intel")
    assert choose_video_search(intel)[0] == "patch"
    with pytest.raises(ValueError, match="variant"):
        choose_video_search(runtime.profile, "square")


def test_explain(runtime):
    from clpatch.tune.explain import explain

    text = str(explain("vbm3d", runtime=runtime))
    assert "video search" in text and "why:  rule" in text and "stage 2: patch 8, step 4" in text
    forced = str(explain("vbm3d", variant="naive", channels=3, runtime=runtime))
    assert "runs: naive" in forced and "why:  forced" in forced and "colour" in forced


# ---- the pipeline -------------------------------------------------------------------------

def check_reference(out, video, *, what, atol=ATOL, **params):
    expected = ref.vbm3d_reference(np.asarray(video, np.float64), SIGMA, **params)
    assert out.dtype == np.float32 and out.shape == np.shape(video), what
    assert_close(out, expected, rtol=0.0, atol=atol, what=what)


def test_pipeline_matches_oracle(runtime):
    # 12 frames with radius 2: rings of 10 frame slots and 6 accumulator slots wrap around.
    video = smooth_video(12, 37, 45)
    out = clpatch.vbm3d(video, SIGMA, temporal_radius=2, runtime=runtime)
    check_reference(out, video, what="vbm3d, radius 2", temporal_radius=2)


def test_basic_estimate_and_radius_1(runtime):
    video = smooth_video(9, 29, 33, seed=2)
    out = clpatch.vbm3d(video, SIGMA, temporal_radius=1, stages=1, runtime=runtime)
    check_reference(out, video, what="stage 1, radius 1", temporal_radius=1, stages=1)


def test_colour_matches_oracle(runtime):
    video = smooth_video(5, 27, 30, seed=4, channels=3)
    out = clpatch.vbm3d(video, SIGMA, temporal_radius=1, runtime=runtime)
    check_reference(out, video, what="colour", temporal_radius=1)


def test_cas_aggregation(runtime):
    video = smooth_video(6, 25, 28, seed=6)
    out = clpatch.vbm3d(video, SIGMA, temporal_radius=2, aggregation="cas", runtime=runtime)
    check_reference(out, video, what="cas", temporal_radius=2)


@pytest.mark.parametrize("padding", [2, 4])
def test_other_bank_paddings(runtime, padding):
    # The filter's transposes as specialised for AMD (x = 2) and Intel (x = 4) profiles.
    rt = clpatch.Runtime(runtime.device, profile_overrides={"bank_padding": padding})
    video = smooth_video(5, 24, 26, seed=padding)
    out = clpatch.vbm3d(video, SIGMA, temporal_radius=1, runtime=rt)
    check_reference(out, video, what=f"bank padding {padding}", temporal_radius=1)


def test_other_parameters(runtime):
    video = smooth_video(6, 23, 27, seed=8)
    params = dict(patch_size=4, step=(2, 3), k=(4, 16), q=(2, 4), window_ref=(5, 9),
                  window_pred=(3, 5), transform_1d="hadamard", temporal_radius=2)
    out = clpatch.vbm3d(video, SIGMA, runtime=runtime, **params)
    check_reference(out, video, what="p4", **params)


def test_default_step_is_capped_at_a_small_patch_size(runtime):
    """vbm3d(patch_size=3) without a step: the default steps (6, 4) are lowered to the patch
    size, as BM3D's presets' are (the fuzz test found them refused: 'step must be in
    [1, p]'); a given step above the patch size is still refused."""
    p1, p2, _, _ = video_stage_params(patch_size=3)
    assert (p1.step, p2.step) == (3, 3)
    p1, p2, _, _ = video_stage_params(patch_size=5)
    assert (p1.step, p2.step) == (5, 4)
    video = smooth_video(4, 17, 19, seed=12)
    out = clpatch.vbm3d(video, SIGMA, runtime=runtime, patch_size=3, temporal_radius=1)
    check_reference(out, video, what="p3", patch_size=3, step=3, temporal_radius=1)
    with pytest.raises(ValueError, match="step"):
        clpatch.vbm3d(video, SIGMA, runtime=runtime, patch_size=3, step=4)


@pytest.mark.parametrize("variant", VIDEO_SEARCHES)
def test_variants_give_identical_results(runtime, variant):
    video = smooth_video(5, 22, 25, seed=9)
    out = clpatch.vbm3d(video, SIGMA, temporal_radius=1, variant=variant, aggregation="fixed"
                        if runtime.profile.int64_atomics else "cas", runtime=runtime)
    base = clpatch.vbm3d(video, SIGMA, temporal_radius=1, variant="naive", aggregation="fixed"
                         if runtime.profile.int64_atomics else "cas", runtime=runtime)
    np.testing.assert_array_equal(out, base)


# ---- streaming, arrays, dtypes ------------------------------------------------------------

def test_stream_equals_run(runtime):
    video = smooth_video(11, 21, 24, seed=10)
    plan = plan_for(runtime, video.shape, temporal_radius=2)
    whole = plan.run(video, SIGMA, data_range=255.0)
    frames = list(plan.stream((f for f in video), SIGMA, data_range=255.0, peak=float(np.abs(video).max())))
    assert len(frames) == 11 and frames[0].shape == (21, 24)
    if plan.aggregation == "fixed":
        np.testing.assert_array_equal(np.stack(frames), whole)
    else:
        np.testing.assert_allclose(np.stack(frames), whole, atol=1e-3)


def test_stream_is_lazy(runtime):
    # Output frame t needs input frames up to t + 4 radius: no more are read.
    video = smooth_video(9, 16, 16, seed=11)
    read = []

    def frames():
        for t, f in enumerate(video):
            read.append(t)
            yield f

    plan = plan_for(runtime, video.shape, temporal_radius=1)
    stream = plan.stream(frames(), SIGMA)
    next(stream)
    assert max(read) == 4


def test_device_arrays(runtime):
    video = smooth_video(4, 20, 22, seed=12)
    host = clpatch.vbm3d(video, SIGMA, temporal_radius=1, runtime=runtime)
    device = cla.to_device(runtime.queue, video)
    out = clpatch.vbm3d(device, SIGMA, temporal_radius=1, runtime=runtime)
    assert isinstance(out, cla.Array) and out.shape == video.shape
    np.testing.assert_allclose(out.get(), host, atol=1e-4)
    # A non-contiguous view (every other column of a wider video) is read in place.
    wide = np.repeat(video, 2, axis=2)
    view = cla.to_device(runtime.queue, wide)[:, :, ::2]
    np.testing.assert_allclose(clpatch.vbm3d(view, SIGMA, temporal_radius=1,
                                             runtime=runtime).get(), host, atol=1e-4)


def test_uint8_equals_float32(runtime):
    video = np.clip(smooth_video(4, 18, 21, seed=13), 0, 255).round().astype(np.uint8)
    a = clpatch.vbm3d(video, SIGMA, temporal_radius=1, runtime=runtime)
    b = clpatch.vbm3d(video.astype(np.float32), SIGMA, temporal_radius=1, runtime=runtime)
    np.testing.assert_allclose(a, b, atol=1e-4)


def test_unit_range_scales_the_thresholds(runtime):
    video = smooth_video(4, 18, 21, seed=14)
    full = clpatch.vbm3d(video, SIGMA, temporal_radius=1, runtime=runtime)
    unit = clpatch.vbm3d(video / 255.0, SIGMA / 255.0, temporal_radius=1, runtime=runtime)
    np.testing.assert_allclose(unit * 255.0, full, atol=2e-3)


@pytest.mark.parametrize("shape", [(1, 8, 8), (2, 9, 11), (3, 8, 13, 3)])
def test_tiny_videos(runtime, shape):
    rng = np.random.default_rng(15)
    video = (128 + rng.normal(0, SIGMA, shape)).astype(np.float32)
    out = clpatch.vbm3d(video, SIGMA, runtime=runtime)
    check_reference(out, video, what=f"tiny {shape}")


def test_channel_axis(runtime):
    video = smooth_video(3, 16, 18, seed=16, channels=3)
    a = clpatch.vbm3d(video, SIGMA, temporal_radius=1, runtime=runtime)
    b = clpatch.vbm3d(np.moveaxis(video, -1, 1), SIGMA, temporal_radius=1, channel_axis=1,
                      runtime=runtime)
    np.testing.assert_allclose(np.moveaxis(b, 1, -1), a, atol=1e-5)


# ---- errors -------------------------------------------------------------------------------

BAD = [
    (dict(sigma=0), ValueError, "sigma"),
    (dict(sigma="20"), TypeError, "sigma"),
    (dict(variant="square"), ValueError, "variant"),
    (dict(aggregation="float"), ValueError, "aggregation"),
    (dict(k=12), ValueError, "power of 2"),
    (dict(q=16), ValueError, "q must be in"),
    (dict(temporal_radius=-1), ValueError, "temporal_radius"),
    (dict(window_ref=0), ValueError, "window_ref"),
    (dict(window_pred=33), ValueError, "window_pred"),
    (dict(step=9), ValueError, "step"),
    (dict(patch_size=17), ValueError, "patch_size"),
    (dict(patch_size=7, transform_2d="bior1.5"), ValueError, "bior1.5"),
    (dict(transform_1d="dct"), ValueError, "transform_1d"),
    (dict(tau_match=-1.0), ValueError, "tau_match"),
    (dict(stages=3), ValueError, "stages"),
    (dict(data_range=0), ValueError, "data_range"),
    (dict(colour=True), TypeError, "unexpected keyword"),
]


@pytest.mark.parametrize("kwargs,error,match", BAD, ids=[str(b[0]) for b in BAD])
def test_bad_arguments(runtime, kwargs, error, match):
    video = smooth_video(3, 16, 16)
    kwargs = dict(kwargs)
    sigma = kwargs.pop("sigma", SIGMA)
    with pytest.raises(error, match=match):
        clpatch.vbm3d(video, sigma, runtime=runtime, **kwargs)


def test_bad_videos(runtime):
    with pytest.raises(ValueError, match="T, H, W"):
        clpatch.vbm3d(np.zeros((4, 16, 16, 2), np.float32), SIGMA, runtime=runtime)
    with pytest.raises(ValueError, match="larger than the frames"):
        clpatch.vbm3d(np.zeros((4, 7, 16), np.float32), SIGMA, runtime=runtime)
    with pytest.raises(ValueError, match="NaN"):
        video = smooth_video(3, 16, 16)
        video[1, 3, 3] = np.nan
        clpatch.vbm3d(video, SIGMA, runtime=runtime)
    with pytest.raises(TypeError, match="frames must be a NumPy array"):
        clpatch.vbm3d("video.npy", SIGMA, runtime=runtime)


def test_stream_errors(runtime):
    plan = plan_for(runtime, (1, 16, 16), temporal_radius=1)
    with pytest.raises(ValueError, match="empty"):
        list(plan.stream(iter([]), SIGMA))
    with pytest.raises(ValueError, match="frame 1 has shape"):
        list(plan.stream([np.zeros((16, 16)), np.zeros((16, 17))], SIGMA))
    with pytest.raises(ValueError, match="frame 0 contains NaN"):
        list(plan.stream([np.full((16, 16), np.nan)], SIGMA))
    if plan.aggregation == "fixed":
        # Without a peak, values beyond 4 x data_range would overflow the fixed point.
        with pytest.raises(ValueError, match="beyond the assumed peak"):
            list(plan.stream([np.zeros((16, 16)), np.full((16, 16), 5000.0)], SIGMA))
    with pytest.raises(ValueError, match="sigma"):
        plan.stream([np.zeros((16, 16))], -1.0)


def test_stream_checks_frames_without_waiting(runtime, monkeypatch):
    """The stream reads each frame's check word behind its conversion and judges it before
    the next output (no wait per frame): a NaN in frame 3 of 8 raises before any output it
    reaches (frames 3 - 2 radius on, two stages) is yielded, and a clean stream never waits
    on the uploader's peak."""
    video = smooth_video(8, 20, 22, seed=13)
    want = plan_for(runtime, video.shape, temporal_radius=1).run(video, SIGMA,
                                                                  data_range=255.0)
    plan = plan_for(runtime, video.shape, temporal_radius=1)
    monkeypatch.setattr(plan.uploader, "peak", lambda *a, **k: pytest.fail("waited"))
    got = list(plan.stream(iter(video), SIGMA, data_range=255.0))
    np.testing.assert_array_equal(np.stack(got), want)
    bad = video.copy()
    bad[3, 5, 7] = np.nan
    yielded = []
    with pytest.raises(ValueError, match="frame 3 contains NaN"):
        for out in plan.stream(iter(bad), SIGMA, data_range=255.0):
            yielded.append(out)
    assert len(yielded) <= 3 - 2 * 1
    for t, out in enumerate(yielded):
        np.testing.assert_array_equal(out, want[t])


def test_memory_limit_is_a_clear_error(runtime):
    p1, p2, stages, radius = video_stage_params()
    with pytest.raises(DeviceResourceError, match="temporal_radius"):
        VBM3DPlan(runtime, 64, 64, 1, (p1, p2), stages, radius, memory_bytes=100_000)


# ---- bands: frames larger than the device -------------------------------------------------

# Small windows and radius 1: a band of one output row holds about 34 rows, so frames of
# 60 to 100 rows split into several bands.
BAND_PARAMS = dict(patch_size=4, step=(3, 2), window_ref=5, window_pred=3, q=2, n=(4, 8),
                   temporal_radius=1)


def banded_pair(runtime, shape, share, **params):
    """An untiled plan and one whose budget is `share` of the untiled plan's memory."""
    p1, p2, stages, radius = video_stage_params(**{**BAND_PARAMS, **params})
    rows, cols = shape[1:3]
    channels = shape[3] if len(shape) == 4 else 1
    whole = VBM3DPlan(runtime, rows, cols, channels, (p1, p2), stages, radius,
                      aggregation="fixed")
    budget = int(share * sum(band_sizes(whole, whole.bands[0]).values()))
    tiled = VBM3DPlan(runtime, rows, cols, channels, (p1, p2), stages, radius,
                      aggregation="fixed", tile_bytes=budget)
    assert len(whole.bands) == 1 and len(tiled.bands) >= 3
    assert [(b.a, b.b) for b in tiled.bands] == list(zip(
        [0] + [b.b for b in tiled.bands[:-1]], [b.b for b in tiled.bands], strict=True))
    assert tiled.bands[-1].b == rows and max(b.rows for b in tiled.bands) < rows
    return whole, tiled, budget


def in_one_buffer(video):
    """The frames of `video`, each written into the same array."""
    buffer = np.empty_like(video[0])
    for frame in video:
        buffer[...] = frame
        yield buffer


@pytest.mark.parametrize("shape,share,stages", [((13, 97, 17), 0.5, 2),
                                                ((9, 89, 15, 3), 0.5, 2),
                                                ((11, 61, 23), 0.4, 1)],
                         ids=["gray", "colour", "stage-1"])
def test_bands_are_bit_identical(runtime, shape, share, stages):
    if not runtime.profile.int64_atomics:
        pytest.skip("bit-identical results need the fixed-point aggregation (int64 atomics)")
    video = smooth_video(shape[0], shape[1], shape[2], seed=17,
                         channels=shape[3] if len(shape) == 4 else 1)
    whole, tiled, budget = banded_pair(runtime, video.shape, share, stages=stages)
    expected = whole.run(video, SIGMA, data_range=255.0)
    np.testing.assert_array_equal(tiled.run(video, SIGMA, data_range=255.0), expected)
    # Device memory follows the band, not the frame.
    assert tiled.pool.held_bytes() <= budget
    # Streams go through the bands in chunks of frames, each with the frames around it:
    # chunks of 1 to 3 frames (halo 2 or 4) put chunk edges everywhere. The frames come
    # from one reused buffer: the stream keeps copies.
    peak = float(np.abs(video).max())
    for chunk in (1, 2, 3):
        tiled.chunk_frames = chunk
        out = list(tiled.stream(in_one_buffer(video), SIGMA, data_range=255.0, peak=peak))
        assert len(out) == len(video)
        np.testing.assert_array_equal(np.stack(out), expected, err_msg=f"chunks of {chunk}")


def test_bands_of_device_videos(runtime):
    if not runtime.profile.int64_atomics:
        pytest.skip("bit-identical results need the fixed-point aggregation (int64 atomics)")
    video = smooth_video(5, 71, 19, seed=18)
    whole, tiled, budget = banded_pair(runtime, video.shape, 0.5)
    expected = whole.run(video, SIGMA)
    device = tiled.run(cla.to_device(runtime.queue, video), SIGMA)
    assert isinstance(device, cla.Array)
    np.testing.assert_array_equal(device.get(), expected)
    assert tiled.pool.held_bytes() <= budget


def test_band_budget_too_small_is_a_clear_error(runtime):
    p1, p2, stages, radius = video_stage_params(**BAND_PARAMS)
    with pytest.raises(DeviceResourceError, match="even in bands of one output row.*temporal_radius"):
        VBM3DPlan(runtime, 97, 17, 1, (p1, p2), stages, radius, tile_bytes=50_000)


def test_defaults_are_the_papers():
    p1, p2, stages, radius = video_stage_params()
    assert (p1.patch_size, p1.step, p1.window_ref, p1.window_pred, p1.q, p1.n) == (8, 6, 7, 5, 2, 8)
    assert (p2.patch_size, p2.step, p2.n) == (8, 4, 8)
    assert (p1.tau_match, p2.tau_match, stages, radius) == (3000.0, 1500.0, 2, 4)
    assert ref.DEFAULTS["step"] == DEFAULTS["step"]


# ---- quality (the criterion) ------------------------------------------------------

def test_vbm3d_beats_per_frame_bm3d_on_a_moving_camera(runtime):
    # 24 frames of 256 x 256 crops of camera.png along a smooth sub-pixel path, sigma 20.
    clean, _ = motion_video(load_image("camera", gray=True), frames=24, size=(256, 256), seed=0)
    noisy = add_noise(clean, SIGMA, seed=1).astype(np.float32)
    video = np.clip(clpatch.vbm3d(noisy, SIGMA, runtime=runtime), 0, 255)
    frames = np.clip(np.stack([clpatch.bm3d(f, SIGMA, runtime=runtime) for f in noisy]), 0, 255)
    gain = psnr(video, clean) - psnr(frames, clean)
    assert gain >= 1.0, f"VBM3D gains only {gain:.2f} dB over per-frame BM3D"
    assert temporal_flicker(video, clean) < temporal_flicker(frames, clean)
