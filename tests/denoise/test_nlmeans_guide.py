"""NL-means with a guide image (`guide=`, `guide_sigma=`): against the NumPy oracle for
grayscale, colour, video and every aggregation; device arrays, tiles and bands, the burst
plan; bit-identity with the unguided filter for guide=image; a clean guide helps; bad input."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.denoise.nlmeans import NLMeansPlan
from tests.denoise.test_nlmeans import SIGMA, TOL, aggregations, noisy
from tests.helpers import assert_close, load_image, random_image
from tests.reference.nlmeans import nlmeans_reference


def guide_for(image: np.ndarray, seed: int) -> np.ndarray:
    """Another noisy observation of roughly the same content: close enough to the image
    that it finds similar patches, different enough that it changes the result."""
    rng = np.random.default_rng(seed)
    return (image + rng.normal(0, SIGMA / 2, image.shape)).astype(np.float32)


def psnr(x: np.ndarray, clean: np.ndarray) -> float:
    return 10 * np.log10(255.0 ** 2 / np.mean((np.clip(x, 0, 255) - clean) ** 2))


# ---- against the oracle ------------------------------------------------------------------------

@pytest.mark.parametrize("guide_sigma", [None, 4.0, 0.0])
def test_gray_every_aggregation_matches_reference(runtime, guide_sigma):
    image = noisy((37, 45), seed=1)
    guide = guide_for(image, seed=2)
    expected = nlmeans_reference(image, SIGMA, patch_size=8, step=4, window=21, k=16,
                                 guide=guide, guide_sigma=guide_sigma)
    unguided = nlmeans_reference(image, SIGMA, patch_size=8, step=4, window=21, k=16)
    assert np.abs(expected - unguided).max() > 1.0          # the guide changes the result
    for aggregation in aggregations(runtime):
        out = clpatch.nlmeans(image, SIGMA, guide=guide, guide_sigma=guide_sigma,
                              aggregation=aggregation, runtime=runtime)
        assert out.dtype == np.float32 and out.shape == image.shape
        assert_close(out, expected, **TOL, what=f"guided {aggregation}, gs={guide_sigma}")


def test_naive_averaging_and_other_parameters(runtime):
    image = noisy((29, 34), seed=3)
    guide = guide_for(image, seed=4)
    expected = nlmeans_reference(image, SIGMA, patch_size=5, step=2, window=11, k=8, h=25.0,
                                 flat_beta=1.2, guide=guide, guide_sigma=10.0)
    for aggregation in aggregations(runtime, 5, 2):
        out = clpatch.nlmeans(image, SIGMA, patch_size=5, step=2, window=11, k=8, h=25.0,
                              flat_beta=1.2, guide=guide, guide_sigma=10.0,
                              aggregation=aggregation, averaging="naive", runtime=runtime)
        assert_close(out, expected, **TOL, what=f"guided naive {aggregation}")


@pytest.mark.parametrize("search_channels", ["luminance", "all"])
def test_colour_matches_reference(runtime, search_channels):
    image = noisy((23, 30, 3), seed=5)
    guide = guide_for(image, seed=6)
    expected = nlmeans_reference(image, SIGMA, patch_size=6, step=3, window=9, k=8,
                                 search_channels=search_channels, guide=guide, guide_sigma=8.0)
    for aggregation in aggregations(runtime, 6, 3):
        out = clpatch.nlmeans(image, SIGMA, patch_size=6, step=3, window=9, k=8,
                              search_channels=search_channels, guide=guide, guide_sigma=8.0,
                              aggregation=aggregation, runtime=runtime)
        assert_close(out, expected, **TOL,
                     what=f"guided colour, search on {search_channels}, {aggregation}")


def test_other_channel_counts_and_channel_axis(runtime):
    four = noisy((17, 20, 4), seed=7)
    guide = guide_for(four, seed=8)
    expected = nlmeans_reference(four, SIGMA, patch_size=5, step=3, window=7, k=6, guide=guide)
    out = clpatch.nlmeans(four, SIGMA, patch_size=5, step=3, window=7, k=6, guide=guide,
                          aggregation="buffers", runtime=runtime)
    assert_close(out, expected, **TOL, what="guided 4 channels")
    # Channels first: the guide is laid out like the image.
    first = np.ascontiguousarray(np.moveaxis(four, -1, 0))
    guide_first = np.ascontiguousarray(np.moveaxis(guide, -1, 0))
    moved = clpatch.nlmeans(first, SIGMA, patch_size=5, step=3, window=7, k=6,
                            guide=guide_first, channel_axis=0, aggregation="buffers",
                            runtime=runtime)
    np.testing.assert_array_equal(np.moveaxis(moved, 0, -1), out)


@pytest.mark.parametrize("channels", [1, 3])
def test_video_matches_reference(runtime, channels):
    shape = (5, 21, 24) + ((3,) if channels == 3 else ())
    frames = noisy(shape, seed=9)
    guide = guide_for(frames, seed=10)
    expected = nlmeans_reference(frames, SIGMA, patch_size=6, step=3, window=9, k=8,
                                 temporal_window=2, video=True, guide=guide, guide_sigma=5.0)
    for aggregation in aggregations(runtime, 6, 3):
        out = clpatch.nlmeans_video(frames, SIGMA, temporal_window=2, patch_size=6, step=3,
                                    window=9, k=8, aggregation=aggregation, guide=guide,
                                    guide_sigma=5.0, runtime=runtime)
        assert out.shape == frames.shape
        assert_close(out, expected, **TOL, what=f"guided video {aggregation}")


def test_clean_guide_improves_psnr(runtime):
    # A textured crop (the camera and the man's coat): the clean guide's neighbours are the
    # truly similar patches. (On a flat crop the noisy search wins: its neighbours pass the
    # flat-patch test more often, and that test sees the noisy image in both cases.)
    clean = load_image("camera")[64:128, 160:224].astype(np.float64)
    image = (clean + np.random.default_rng(11).normal(0, SIGMA, clean.shape)).astype(np.float32)
    plain = clpatch.nlmeans(image, SIGMA, runtime=runtime)
    guided = clpatch.nlmeans(image, SIGMA, guide=clean.astype(np.uint8), guide_sigma=0,
                             runtime=runtime)
    assert psnr(guided, clean) > psnr(plain, clean) + 0.5
    assert np.abs(guided - plain).max() > 1.0
    expected = nlmeans_reference(image, SIGMA, patch_size=8, step=4, window=21, k=16,
                                 guide=clean, guide_sigma=0.0)
    assert_close(guided, expected, **TOL, what="clean guide, guide_sigma 0")
    # guide_sigma 0 weighs a clean guide's distances as they are: other weights than sigma's.
    with_sigma = clpatch.nlmeans(image, SIGMA, guide=clean, runtime=runtime)
    assert np.abs(with_sigma - guided).max() > 0.1


# ---- bit-identity with the unguided filter ------------------------------------------------------

@pytest.mark.parametrize("shape,video,kwargs", [
    ((37, 45), False, {}),
    ((23, 30, 3), False, dict(patch_size=6, step=3, window=9, k=8)),
    ((23, 30, 3), False, dict(patch_size=6, step=3, window=9, k=8, search_channels="all")),
    ((4, 21, 24), True, dict(temporal_window=1, patch_size=6, step=3, window=9, k=8)),
], ids=["gray", "colour-luminance", "colour-all", "video"])
def test_guide_equal_to_image_is_bit_identical(runtime, shape, video, kwargs):
    image = noisy(shape, seed=12)
    run = clpatch.nlmeans_video if video else clpatch.nlmeans
    # "cas" adds in a varying order: its last bits differ between any two runs.
    for aggregation in [a for a in aggregations(runtime, kwargs.get("patch_size", 8),
                                                kwargs.get("step", 4)) if a != "cas"]:
        plain = run(image, SIGMA, aggregation=aggregation, runtime=runtime, **kwargs)
        for guide in (image, image.copy(), image.astype(np.float64)):
            same = run(image, SIGMA, guide=guide, aggregation=aggregation, runtime=runtime,
                       **kwargs)
            np.testing.assert_array_equal(same, plain, err_msg=aggregation)


def test_guide_is_searched_not_averaged(runtime):
    """A guide shifted in value leaves the search unchanged (distances are differences)
    and the averaged values are the image's: the result is the unguided one, to rounding."""
    image = noisy((30, 30), seed=13)
    plain = clpatch.nlmeans(image, SIGMA, patch_size=6, step=3, window=9, k=8, runtime=runtime)
    shifted = clpatch.nlmeans(image, SIGMA, patch_size=6, step=3, window=9, k=8,
                              guide=image + 1000.0, runtime=runtime)
    np.testing.assert_allclose(shifted, plain, rtol=1e-4, atol=1e-2)


# ---- arrays, tiles, plans ------------------------------------------------------------------------

def test_device_array_guides(runtime):
    image = noisy((33, 35), seed=14)
    guide = guide_for(image, seed=15)
    host = clpatch.nlmeans(image, SIGMA, guide=guide, guide_sigma=6.0, runtime=runtime)
    q = runtime.queue
    mixed = clpatch.nlmeans(image, SIGMA, guide=cla.to_device(q, guide), guide_sigma=6.0,
                            runtime=runtime)
    assert isinstance(mixed, np.ndarray)
    np.testing.assert_array_equal(mixed, host)
    for g in (cla.to_device(q, guide), guide):
        device = clpatch.nlmeans(cla.to_device(q, image), SIGMA, guide=g, guide_sigma=6.0,
                                 runtime=runtime)
        assert isinstance(device, cla.Array)
        np.testing.assert_array_equal(device.get(), host)
    # A strided device view and another dtype are converted like an image.
    wide = cla.to_device(q, np.ascontiguousarray(np.repeat(guide, 2, axis=1)))
    strided = clpatch.nlmeans(image, SIGMA, guide=wide[:, ::2], guide_sigma=6.0,
                              runtime=runtime)
    np.testing.assert_array_equal(strided, host)
    listed = clpatch.nlmeans(image, SIGMA, guide=guide.tolist(), guide_sigma=6.0,
                             runtime=runtime)
    np.testing.assert_array_equal(listed, host)
    rounded = np.clip(guide, 0, 255).round()
    np.testing.assert_array_equal(
        clpatch.nlmeans(image, SIGMA, guide=rounded.astype(np.uint8), runtime=runtime),
        clpatch.nlmeans(image, SIGMA, guide=rounded.astype(np.float32), runtime=runtime))


@pytest.mark.parametrize("video", [False, True])
def test_tiles_give_identical_results(runtime, video):
    shape = (4, 53, 41) if video else (61, 47)
    image = noisy(shape, seed=16)
    guide = guide_for(image, seed=17)
    frames, rows, cols = (shape if video else (1, *shape))
    tw = 1 if video else 0
    for aggregation in [a for a in aggregations(runtime) if a != "cas"]:
        kwargs = dict(temporal_window=tw, video=video, aggregation=aggregation)
        whole = NLMeansPlan(runtime, frames, rows, cols, 1, **kwargs)
        tiled = NLMeansPlan(runtime, frames, rows, cols, 1,
                            tile_bytes=200_000 if video else 80_000, **kwargs)
        assert len(whole.tiles_for(True)) == 1
        # The guide's block counts: a guided run may need more tiles than an unguided one.
        assert len(tiled.tiles_for(True)) > 2 and len(tiled.tiles_for(True)) >= len(tiled.tiles)
        expected = whole.run(image, SIGMA, guide=guide, guide_sigma=3.0)
        np.testing.assert_array_equal(tiled.run(image, SIGMA, guide=guide, guide_sigma=3.0),
                                      expected)
        # The same plans still run without a guide.
        np.testing.assert_array_equal(tiled.run(image, SIGMA), whole.run(image, SIGMA))


def test_pipelined_bands_give_identical_results(runtime, monkeypatch):
    from clpatch.denoise import nlmeans_plan, nlmeans_tiles

    image = noisy((73, 47), seed=18)
    guide = guide_for(image, seed=19)
    whole = NLMeansPlan(runtime, 1, 73, 47, 1, aggregation="buffers")
    monkeypatch.setattr(nlmeans_plan, "PIPELINE_BYTES", 0)
    banded = NLMeansPlan(runtime, 1, 73, 47, 1, aggregation="buffers")
    assert banded.pipelined and len(banded.tiles_for(True)) >= nlmeans_tiles.PIPELINE_BANDS
    expected = whole.run(image, SIGMA, guide=guide)
    for _ in range(2):                      # the second run reuses every slot
        np.testing.assert_array_equal(banded.run(image, SIGMA, guide=guide), expected)
    assert any(name == "guide upload" for name, _ in banded.last_events)


def test_colour_tiles_with_fixed_point(runtime):
    """Colour and "fixed" measure the image's peak before averaging, tile by tile."""
    if not runtime.profile.int64_atomics:
        pytest.skip("no 64-bit atomics")
    image = noisy((45, 38, 3), seed=20)
    guide = guide_for(image, seed=21)
    kwargs = dict(patch_size=6, step=2, window=9, n=8, aggregation="fixed")
    whole = NLMeansPlan(runtime, 1, 45, 38, 3, **kwargs)
    tiled = NLMeansPlan(runtime, 1, 45, 38, 3, tile_bytes=120_000, **kwargs)
    assert len(tiled.tiles_for(True)) > 2
    expected = whole.run(image, SIGMA, guide=guide)
    np.testing.assert_array_equal(tiled.run(image, SIGMA, guide=guide), expected)
    reference = nlmeans_reference(image, SIGMA, patch_size=6, step=2, window=9, k=8, guide=guide)
    assert_close(expected, reference, **TOL, what="guided colour fixed")


def test_guide_does_not_set_the_peak(runtime):
    """The fixed-point scale and `peak=` are the image's: a guide of larger values is fine."""
    image = noisy((30, 30), seed=22)
    peak = float(np.abs(image).max())
    guide = 4.0 * image
    out = clpatch.nlmeans(image, SIGMA, patch_size=6, step=3, window=9, k=8, peak=peak,
                          guide=guide, guide_sigma=4 * SIGMA, h=4 * SIGMA, runtime=runtime)
    expected = nlmeans_reference(image, SIGMA, patch_size=6, step=3, window=9, k=8,
                                 h=4 * SIGMA, guide=guide, guide_sigma=4 * SIGMA)
    assert_close(out, expected, **TOL, what="guide above the image's peak")


def test_burst_plan_takes_a_guide(runtime):
    """The burst's plan (a reference frame, candidates from the clustering ANN) searches
    on the guide through the same apply."""
    clean = random_image((1, 32, 32), seed=23).repeat(4, axis=0)
    rng = np.random.default_rng(24)
    frames = (clean + rng.normal(0, SIGMA, clean.shape)).astype(np.float32)
    plan = NLMeansPlan(runtime, 4, 32, 32, 1, patch_size=8, step=4, window=16, n=8,
                       video=True, search="ann", reference=1,
                       search_options={"tile": 16, "reference": 1})
    plain = plan.run(frames, SIGMA)
    np.testing.assert_array_equal(plan.run(frames, SIGMA, guide=frames), plain)
    guided = plan.run(frames, SIGMA, guide=clean, guide_sigma=0)
    assert guided.shape == (32, 32)
    assert np.abs(guided - plain).max() > 1.0
    assert psnr(guided, clean[1]) > psnr(plain, clean[1])


# ---- bad input -----------------------------------------------------------------------------------

def test_bad_guides_are_named(runtime):
    image = noisy((20, 20), seed=25)

    def run(**kwargs):
        return clpatch.nlmeans(image, SIGMA, patch_size=5, step=3, window=7, k=4,
                               aggregation="buffers", runtime=runtime, **kwargs)

    with pytest.raises(ValueError, match=r"guide.*\(20, 21\).*\(20, 20\)"):
        run(guide=np.zeros((20, 21), np.float32))
    with pytest.raises(ValueError, match="guide"):
        run(guide=np.zeros((20, 20, 1), np.float32))
    bad = image.copy()
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="guide contains NaN"):
        run(guide=bad)
    bad[3, 4] = np.inf
    with pytest.raises(ValueError, match="guide contains NaN"):
        run(guide=bad)
    with pytest.raises(ValueError, match="guide contains NaN"):
        run(guide=cla.to_device(runtime.queue, bad))
    with pytest.raises(ValueError, match="guide values must"):
        run(guide=np.full((20, 20), 1e30, np.float32))
    with pytest.raises(TypeError, match="guide"):
        run(guide="guide.png")
    with pytest.raises(TypeError, match="guide"):
        run(guide=np.zeros((20, 20), np.complex64))
    # The image is still named for its own bad values.
    with pytest.raises(ValueError, match="image contains NaN"):
        clpatch.nlmeans(bad, SIGMA, patch_size=5, step=2, window=7, k=4, guide=image,
                        runtime=runtime)
    # After a failed check, the next guided run checks its own guide only.
    np.testing.assert_array_equal(run(guide=image), run())


@pytest.mark.parametrize("kwargs,error,words", [
    (dict(guide_sigma=5.0), ValueError, "guide_sigma"),
    (dict(guide_sigma=0.0), ValueError, "guide_sigma"),
    (dict(guide=True, guide_sigma=-1.0), ValueError, "guide_sigma"),
    (dict(guide=True, guide_sigma=float("nan")), ValueError, "guide_sigma"),
    (dict(guide=True, guide_sigma="2"), TypeError, "guide_sigma"),
])
def test_bad_guide_sigma_is_named(runtime, kwargs, error, words):
    image = noisy((20, 20), seed=26)
    if kwargs.pop("guide", False):
        kwargs["guide"] = image
    with pytest.raises(error, match=words):
        clpatch.nlmeans(image, SIGMA, patch_size=5, step=2, window=7, k=4, runtime=runtime,
                        **kwargs)
    plan = NLMeansPlan(runtime, 1, 20, 20, 1, patch_size=5, step=2, window=7, n=4)
    with pytest.raises(error, match=words):
        plan.run(image, SIGMA, **kwargs)


def test_plan_checks_the_guide(runtime):
    frames = noisy((3, 20, 20), seed=27)
    plan = NLMeansPlan(runtime, 3, 20, 20, 1, patch_size=5, step=2, window=7, n=4,
                       temporal_window=1, video=True)
    with pytest.raises(ValueError, match=r"guide.*\(2, 20, 20\).*\(3, 20, 20\)"):
        plan.run(frames, SIGMA, guide=frames[:2])
    with pytest.raises(ValueError, match="guide"):
        clpatch.nlmeans_video(frames, SIGMA, temporal_window=1, patch_size=5, step=2,
                              window=7, k=4, guide=frames[..., None], runtime=runtime)


def test_guide_sigma_checked_once_per_call(runtime, monkeypatch):
    import clpatch.denoise.strength as strength_module

    image = noisy((24, 26), seed=28)
    clpatch.nlmeans(image, SIGMA, guide=image, guide_sigma=3.0, runtime=runtime)
    seen: list[str] = []
    original = strength_module.check_float

    def counting(name, value, **kw):
        seen.append(name)
        return original(name, value, **kw)

    monkeypatch.setattr(strength_module, "check_float", counting)
    clpatch.nlmeans(image, SIGMA, guide=image, guide_sigma=3.0, runtime=runtime)
    assert seen.count("guide_sigma") == 1 and seen.count("sigma") == 1
