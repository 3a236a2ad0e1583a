"""NL-means against its NumPy reference: every averaging kernel and aggregation strategy,
grayscale, colour, other channel counts, video, tiles, device arrays, dtypes, bad input."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.denoise.nlm_aggregation import bilinear_weights, choose_aggregation, coverage
from clpatch.denoise.nlmeans import NLMeansPlan
from clpatch.tune.explain import explain
from tests.helpers import assert_close, load_image, random_image
from tests.reference.nlmeans import nlmeans_reference

SIGMA = 20.0
# float32 kernels against a float64 reference: weights and sums of up to 32 x 32 x 32 terms.
TOL = dict(rtol=1e-4, atol=2e-3)


def aggregations(runtime, patch_size=8, step=4):
    out = ["cas"]
    if runtime.profile.int64_atomics:
        out.append("fixed")
    if -(-patch_size // step) <= 2:
        out.append("buffers")
    return out


def noisy(shape, seed=0):
    """Structured content plus noise, so that flat and textured patches both occur."""
    rng = np.random.default_rng(seed)
    base = random_image(shape, seed=seed)
    base[: shape[0] // 2] = 128.0  # a flat half
    return (base + rng.normal(0, SIGMA, shape)).astype(np.float32)


# ---- every kernel against the reference ---------------------------------------------------

@pytest.mark.parametrize("averaging", ["columns", "naive"])
def test_gray_all_strategies_match_reference(runtime, averaging):
    # 37 x 45 with p 8, step 4: the last grid row and column are off the lattice.
    image = noisy((37, 45), seed=1)
    expected = nlmeans_reference(image, SIGMA, patch_size=8, step=4, window=21, k=16)
    for aggregation in aggregations(runtime):
        out = clpatch.nlmeans(image, SIGMA, aggregation=aggregation, averaging=averaging,
                              runtime=runtime)
        assert out.dtype == np.float32 and out.shape == image.shape
        assert_close(out, expected, **TOL, what=f"{aggregation}/{averaging}")


@pytest.mark.parametrize("patch_size,step,window,k", [(5, 1, 11, 8), (7, 3, 13, 32), (4, 4, 7, 5),
                                                      (3, 2, 5, 6), (16, 8, 21, 16)])
def test_other_patch_sizes_and_steps(runtime, patch_size, step, window, k):
    image = noisy((29, 34), seed=patch_size)
    expected = nlmeans_reference(image, SIGMA, patch_size=patch_size, step=step, window=window,
                                 k=k, h=25.0, flat_beta=1.2)
    for aggregation in aggregations(runtime, patch_size, step):
        out = clpatch.nlmeans(image, SIGMA, patch_size=patch_size, step=step, window=window, k=k,
                              h=25.0, flat_beta=1.2, aggregation=aggregation, runtime=runtime)
        assert_close(out, expected, **TOL, what=f"p{patch_size} s{step} {aggregation}")


@pytest.mark.parametrize("search_channels", ["luminance", "all"])
def test_colour_matches_reference(runtime, search_channels):
    image = noisy((23, 30, 3), seed=3)
    expected = nlmeans_reference(image, SIGMA, patch_size=6, step=3, window=9, k=8,
                                 search_channels=search_channels)
    out = clpatch.nlmeans(image, SIGMA, patch_size=6, step=3, window=9, k=8,
                          search_channels=search_channels, runtime=runtime)
    assert_close(out, expected, **TOL, what=f"colour, search on {search_channels}")


def test_channel_axis_and_other_channel_counts(runtime):
    image = noisy((19, 21, 3), seed=4)
    first = np.ascontiguousarray(np.moveaxis(image, -1, 0))
    a = clpatch.nlmeans(image, SIGMA, patch_size=5, step=2, window=7, k=6, runtime=runtime)
    b = clpatch.nlmeans(first, SIGMA, patch_size=5, step=2, window=7, k=6, channel_axis=0,
                        runtime=runtime)
    assert b.shape == first.shape
    np.testing.assert_array_equal(np.moveaxis(b, 0, -1), a)
    # Four channels are filtered as they are (no colour transform), searched together.
    four = noisy((17, 20, 4), seed=5)
    expected = nlmeans_reference(four, SIGMA, patch_size=5, step=2, window=7, k=6)
    out = clpatch.nlmeans(four, SIGMA, patch_size=5, step=2, window=7, k=6, runtime=runtime)
    assert_close(out, expected, **TOL, what="4 channels")


@pytest.mark.parametrize("channels", [1, 3])
def test_video_matches_reference(runtime, channels):
    shape = (5, 21, 24) + ((3,) if channels == 3 else ())
    frames = noisy(shape, seed=6)
    expected = nlmeans_reference(frames, SIGMA, patch_size=6, step=3, window=9, k=8,
                                 temporal_window=2, video=True)
    for aggregation in aggregations(runtime, 6, 3):
        out = clpatch.nlmeans_video(frames, SIGMA, temporal_window=2, patch_size=6, step=3,
                                    window=9, k=8, aggregation=aggregation, runtime=runtime)
        assert out.shape == frames.shape
        assert_close(out, expected, **TOL, what=f"video {aggregation}")


# ---- tiles, streaming, determinism ------------------------------------------------------------

@pytest.mark.parametrize("video", [False, True])
def test_tiles_give_identical_results(runtime, video):
    shape = (4, 53, 41) if video else (61, 47)
    image = noisy(shape, seed=7)
    frames, rows, cols = (shape if video else (1, *shape))
    tw = 1 if video else 0
    for aggregation in [a for a in aggregations(runtime) if a != "cas"]:
        kwargs = dict(temporal_window=tw, video=video, aggregation=aggregation)
        whole = NLMeansPlan(runtime, frames, rows, cols, 1, **kwargs)
        tiled = NLMeansPlan(runtime, frames, rows, cols, 1, tile_bytes=150_000 if video else 50_000,
                            **kwargs)
        assert len(whole.tiles) == 1 and len(tiled.tiles) > 2
        np.testing.assert_array_equal(tiled.run(image, SIGMA), whole.run(image, SIGMA))


def test_runs_after_runs_need_no_clear_and_equal_fresh_plans(runtime):
    """A one-tile run's finalize leaves the accumulation zeroed, so the next run on the plan
    skips the clearing launch: a sequence of runs (other images, a tiled plan sharing
    nothing) gives what a fresh plan gives for each image, for every aggregation."""
    images = [noisy((37, 45), seed=s) for s in (21, 22, 23)]
    for aggregation in aggregations(runtime, 6, 3):
        kwargs = dict(patch_size=6, step=3, window=9, n=8, aggregation=aggregation)
        plan = NLMeansPlan(runtime, 1, 37, 45, 1, **kwargs)
        for i, image in enumerate(images):
            got = plan.run(image, SIGMA)
            stages = [name for name, _ in plan.last_events]
            assert stages.count("clear") == (1 if i == 0 else 0), (aggregation, stages)
            fresh = NLMeansPlan(runtime, 1, 37, 45, 1, **kwargs).run(image, SIGMA)
            if aggregation == "cas":        # float atomics: the order rounds differently
                np.testing.assert_allclose(got, fresh, rtol=0, atol=1e-3, err_msg=aggregation)
            else:
                np.testing.assert_array_equal(got, fresh, err_msg=aggregation)
    # A tiled plan (finalizes that read part of the buffer each) clears before every tile.
    tiled = NLMeansPlan(runtime, 1, 61, 47, 1, tile_bytes=50_000)
    assert len(tiled.tiles) > 2
    for image in (noisy((61, 47), seed=24), noisy((61, 47), seed=25)):
        tiled.run(image, SIGMA)
        assert [name for name, _ in tiled.last_events].count("clear") == len(tiled.tiles)


def test_planar_device_image_is_searched_as_it_is(runtime):
    """A float32 one-channel device image needs no conversion: the search reads its buffer
    and checks its values in its first launch (no "convert" stage), with the same result as
    the NumPy path, and NaN still refused, for every aggregation."""
    image = noisy((37, 45), seed=31).astype(np.float32)
    for aggregation in aggregations(runtime, 6, 3):
        kwargs = dict(patch_size=6, step=3, window=9, k=8, aggregation=aggregation,
                      runtime=runtime)
        expected = clpatch.nlmeans(image, SIGMA, **kwargs)
        device = cla.to_device(runtime.queue, image)
        got = clpatch.nlmeans(device, SIGMA, **kwargs)
        plan = [p for p in runtime.plan_cache().values() if isinstance(p, NLMeansPlan)][-1]
        assert "convert" not in [name for name, _ in plan.last_events], aggregation
        if aggregation != "cas":            # ("cas": float atomics, rounding differs)
            np.testing.assert_array_equal(got.get(), expected, err_msg=aggregation)
        bad = image.copy()
        bad[5, 7] = np.nan
        with pytest.raises(ValueError, match="NaN"):
            clpatch.nlmeans(cla.to_device(runtime.queue, bad), SIGMA, **kwargs)
        if aggregation != "cas":
            again = clpatch.nlmeans(device, SIGMA, **kwargs)
            np.testing.assert_array_equal(again.get(), expected, err_msg=aggregation)


@pytest.mark.parametrize("channels", [1, 2])
def test_pipelined_bands_give_identical_results(runtime, monkeypatch, channels):
    """NumPy images above PIPELINE_BYTES go in bands whose copies run on the transfer queue
    through pinned slots (two of each, reused every other band): same result as one pass."""
    from clpatch.denoise import nlmeans_plan, nlmeans_tiles

    shape = (73, 47) if channels == 1 else (73, 47, 2)
    image = noisy(shape, seed=17)
    whole = NLMeansPlan(runtime, 1, 73, 47, channels, aggregation="buffers")
    monkeypatch.setattr(nlmeans_plan, "PIPELINE_BYTES", 0)
    banded = NLMeansPlan(runtime, 1, 73, 47, channels, aggregation="buffers")
    assert not whole.pipelined and banded.pipelined
    assert len(whole.tiles) == 1 and len(banded.tiles) >= nlmeans_tiles.PIPELINE_BANDS
    expected = whole.run(image, SIGMA)
    for _ in range(2):                      # the second run reuses every slot
        np.testing.assert_array_equal(banded.run(image, SIGMA), expected)
    assert any(name == "upload" for name, _ in banded.last_events)


@pytest.mark.parametrize("shape", [(73, 47), (41, 37, 3), (6, 30, 28)])
@pytest.mark.parametrize("peak", [None, 400.0])
def test_large_fixed_images_move_through_pinned_slots(runtime, monkeypatch, shape, peak):
    """"fixed" is not pipelined, but a NumPy image above PIPELINE_BYTES still moves through
    the transfer queues' pinned slots (upload and download): the same bits as pageable
    copies, run after run."""
    if not runtime.profile.int64_atomics:
        pytest.skip("no 64-bit atomics")
    from clpatch.denoise import nlmeans_plan
    from clpatch.denoise.strength import Strength

    video = len(shape) == 3 and shape[-1] != 3
    frames, rows, cols = shape if video else (1, *shape[:2])
    channels = 3 if len(shape) == 3 and not video else 1
    kw = dict(patch_size=5, step=2, window=9, n=8, aggregation="fixed", video=video,
              temporal_window=1 if video else 0)
    image = noisy(shape, seed=23)
    plain = NLMeansPlan(runtime, frames, rows, cols, channels, **kw)
    monkeypatch.setattr(nlmeans_plan, "PIPELINE_BYTES", 0)
    pinned = NLMeansPlan(runtime, frames, rows, cols, channels, **kw)
    assert plain.transfers is None and pinned.transfers is not None and not pinned.pipelined
    strength = Strength.check(SIGMA, peak=peak)
    expected = plain.apply(image, strength)
    for _ in range(2):                      # the second run reuses the slots
        np.testing.assert_array_equal(pinned.apply(image, strength), expected)
    assert any(name == "upload" for name, _ in pinned.last_events)


def test_video_is_streamed_in_bounded_tiles(runtime):
    frames = noisy((20, 18, 18), seed=8)
    plan = NLMeansPlan(runtime, 20, 18, 18, 1, patch_size=6, step=3, window=7, n=4,
                       temporal_window=1, video=True)
    assert len(plan.tiles) > 1
    assert max(t.chunk.f_hi - t.chunk.f_lo for t in plan.tiles) <= 10
    expected = nlmeans_reference(frames, SIGMA, patch_size=6, step=3, window=7, k=4,
                                 temporal_window=1, video=True)
    assert_close(plan.run(frames, SIGMA), expected, **TOL, what="streamed video")


def test_fixed_point_is_deterministic(runtime):
    if not runtime.profile.int64_atomics:
        pytest.skip("no 64-bit atomics")
    image = noisy((40, 40), seed=9)
    runs = [clpatch.nlmeans(image, SIGMA, patch_size=5, step=1, window=9, k=8,
                            aggregation="fixed", runtime=runtime) for _ in range(3)]
    for other in runs[1:]:
        np.testing.assert_array_equal(other, runs[0])


def test_default_aggregation_follows_capabilities(runtime):
    assert choose_aggregation(8, 4, runtime.profile)[0] == "buffers"
    expected = "fixed" if runtime.profile.int64_atomics else "cas"
    assert choose_aggregation(5, 1, runtime.profile)[0] == expected


def test_coverage_is_the_total_bilinear_weight():
    bw = bilinear_weights(8)
    np.testing.assert_allclose(bw, [1, 3, 5, 7, 7, 5, 3, 1] / np.float64(8))
    grid = np.array([0, 4, 8, 9])
    total = coverage(17, 8, grid)
    manual = np.zeros(17)
    for g in grid:
        manual[g:g + 8] += bw
    np.testing.assert_allclose(total, manual)
    assert total.min() > 0


# ---- arrays, dtypes, sizes ---------------------------------------------------------------------

def test_device_arrays_stay_on_the_device(runtime):
    image = noisy((33, 35), seed=10)
    host = clpatch.nlmeans(image, SIGMA, runtime=runtime)
    device = clpatch.nlmeans(cla.to_device(runtime.queue, image), SIGMA, runtime=runtime)
    assert isinstance(device, cla.Array) and device.dtype == np.float32
    np.testing.assert_array_equal(device.get(), host)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float64, np.int16])
def test_dtypes(runtime, dtype):
    image = np.clip(noisy((26, 27), seed=11), 0, 255).round()
    expected = clpatch.nlmeans(image.astype(np.float32), SIGMA, runtime=runtime)
    out = clpatch.nlmeans(image.astype(dtype), SIGMA, runtime=runtime)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("shape", [(8, 8), (9, 13), (8, 30), (3, 3)])
def test_tiny_images(runtime, shape):
    image = noisy(shape, seed=12)
    p = min(8, *shape)
    out = clpatch.nlmeans(image, SIGMA, patch_size=p, step=max(1, p // 2), runtime=runtime)
    # k is capped at the candidates of a corner reference.
    from clpatch.match.matches import min_candidates

    k = min(16, min_candidates(shape[0], shape[1], 1, p, 21, 0))
    expected = nlmeans_reference(image, SIGMA, patch_size=p, step=max(1, p // 2), window=21, k=k)
    assert_close(out, expected, **TOL, what=f"tiny {shape}")


def test_flat_image_stays_flat(runtime):
    # Pure noise on a constant: every patch is flat, every estimate a mean of means.
    rng = np.random.default_rng(13)
    image = (100.0 + rng.normal(0, SIGMA, (48, 48))).astype(np.float32)
    out = clpatch.nlmeans(image, SIGMA, runtime=runtime)
    assert abs(float(out.mean()) - 100.0) < 1.0
    assert float(out.std()) < SIGMA / 4


def test_real_photograph_is_denoised(runtime):
    clean = load_image("camera")[:128, 160:288].astype(np.float64)
    image = (clean + np.random.default_rng(14).normal(0, SIGMA, clean.shape)).astype(np.float32)

    def psnr(x):
        return 10 * np.log10(255.0 ** 2 / np.mean((np.clip(x, 0, 255) - clean) ** 2))

    out = clpatch.nlmeans(image, SIGMA, runtime=runtime)
    assert psnr(out) > psnr(image) + 6.0
    expected = nlmeans_reference(image, SIGMA, patch_size=8, step=4, window=21, k=16)
    assert_close(out, expected, **TOL, what="camera crop")


# ---- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,error,words", [
    (dict(sigma=0), ValueError, "sigma"),
    (dict(sigma=-1.0), ValueError, "sigma"),
    (dict(sigma=float("nan")), ValueError, "sigma"),
    (dict(sigma="20"), TypeError, "sigma"),
    (dict(h=0.0), ValueError, "h must"),
    (dict(flat_beta=-1), ValueError, "flat_beta"),
    (dict(step=9), ValueError, "step"),
    (dict(patch_size=0), ValueError, "patch_size"),
    (dict(k=33), ValueError, "k must"),
    (dict(aggregation="atomic"), ValueError, "aggregation"),
    (dict(patch_size=5, step=1, aggregation="buffers"), ValueError, "buffers"),
    (dict(averaging="fast"), ValueError, "averaging"),
    (dict(search_channels="red"), ValueError, "search_channels"),
    (dict(channel_axis=2), ValueError, "channel_axis"),
])
def test_bad_arguments_are_named(runtime, kwargs, error, words):
    kwargs = dict(kwargs)
    sigma = kwargs.pop("sigma", SIGMA)
    with pytest.raises(error, match=words):
        clpatch.nlmeans(noisy((20, 20), seed=15), sigma, runtime=runtime, **kwargs)


def test_bad_images_are_named(runtime):
    with pytest.raises(ValueError, match="NaN"):
        clpatch.nlmeans(np.full((20, 20), np.nan, np.float32), SIGMA, runtime=runtime)
    with pytest.raises(ValueError, match="channels"):
        clpatch.nlmeans(np.zeros((20, 20, 9), np.float32), SIGMA, runtime=runtime)
    with pytest.raises(ValueError, match="larger than the image"):
        clpatch.nlmeans(np.zeros((5, 40), np.float32), SIGMA, runtime=runtime)
    with pytest.raises(TypeError, match="image"):
        clpatch.nlmeans("camera.png", SIGMA, runtime=runtime)
    with pytest.raises(ValueError, match="video"):
        clpatch.nlmeans_video(np.zeros((20, 20), np.float32), SIGMA, runtime=runtime)


def test_explain_names_the_aggregation(runtime):
    text = str(explain("nlmeans", patch_size=8, step=4, runtime=runtime))
    assert "aggregation 'buffers'" in text and "rule" in text
    text = str(explain("nlmeans", patch_size=5, step=1, runtime=runtime))
    assert ("aggregation 'fixed'" if runtime.profile.int64_atomics else "aggregation 'cas'") in text
