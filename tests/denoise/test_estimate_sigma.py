"""`clpatch.estimate_sigma` against its NumPy oracle (tests/reference/noise_level.py), on
random and real images, grayscale and colour, NumPy and device arrays, and its argument checks.

Tolerance against the oracle: rtol 1e-4 on sigma. The device sums float32 products of
mean-removed pixels (scaled to magnitudes below 1), a tile at a time and then over tiles and
work-groups (Kahan), so each statistic carries a relative error near 1e-6; the oracle works
in float64. The selections agree unless a texture strength lies within float32 rounding of a
threshold (none does on these seeded inputs), and Chen's criterion, a choice among
eigenvalue counts, does not move under such perturbations on them; sigma then differs by
about 1e-8 (rtol 1e-4 leaves room for other devices' rounding).
"""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core.volumes import as_volume
from clpatch.denoise import noise_level
from tests.helpers import assert_close, load_image
from tests.reference import noise_level as ref

RTOL = 1e-4


def noisy(image: np.ndarray, sigma: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.asarray(image, np.float64) + sigma * rng.standard_normal(image.shape)


def test_oracle_defaults_are_the_library_s():
    assert (ref.PATCH, ref.CONFIDENCE, ref.MIN_PATCHES_PER_DIMENSION, ref.MAX_ITERATIONS,
            ref.RTOL, ref.BINS) == (
        noise_level.PATCH, noise_level.CONFIDENCE, noise_level.MIN_PATCHES_PER_DIMENSION,
        noise_level.MAX_ITERATIONS, noise_level.RTOL, noise_level.BINS)
    assert noise_level.threshold_factor() == pytest.approx(ref.threshold_factor(), rel=1e-12)


# ---- against the oracle ---------------------------------------------------------------------

@pytest.mark.parametrize("shape,seed", [((48, 64), 1), ((37, 53), 2), ((26, 26), 3),
                                        ((9, 340), 4)])
def test_random_gray_matches_oracle(runtime, shape, seed):
    rng = np.random.default_rng(seed)
    # smooth random structure plus noise, so that the selection has something to reject
    y, x = np.mgrid[:shape[0], :shape[1]]
    clean = 100 + 60 * np.sin(x / 5.0 + rng.random()) * np.cos(y / 7.0)
    image = noisy(clean, 8.0, seed)
    sigma = clpatch.estimate_sigma(image, runtime=runtime)
    assert isinstance(sigma, float)
    assert sigma == pytest.approx(ref.estimate_sigma(image), rel=RTOL)


def test_statistics_of_one_pass_match_oracle(runtime):
    image = noisy(load_image("camera")[200:240, 100:150], 10.0, 5)
    plan = noise_level.NoiseLevelPlan(runtime, 40, 50, 1)
    # a threshold halfway across the widest gap between middle strengths: no strength lies
    # within rounding of it
    ts = np.sort(ref.texture_strength(image).reshape(-1))
    middle = np.arange(len(ts) // 3, 2 * len(ts) // 3)
    k = middle[np.argmax(ts[middle + 1] - ts[middle])]
    threshold = float(ts[k] + ts[k + 1]) / 2
    (count, sums, products), = plan.statistics(as_volume(image), [threshold])
    want_count, want_sums, want_products = ref.patch_statistics(image, threshold)
    assert count == want_count > 0
    scale = np.abs(want_products).max()
    assert_close(products, want_products, rtol=1e-5, atol=1e-6 * scale, what="sum of v v^T")
    assert_close(sums, want_sums, rtol=1e-5, atol=1e-5 * np.sqrt(scale * count),
                 what="sum of v")
    stages = {stage for stage, _ in plan.last_events}
    assert {"convert", "texture", "scatter", "reduce"} <= stages


def test_real_colour_matches_oracle_per_channel(runtime):
    image = noisy(load_image("astronaut")[60:110, 80:140], 12.0, 6)
    sigma = clpatch.estimate_sigma(image, runtime=runtime)
    assert isinstance(sigma, np.ndarray) and sigma.shape == (3,) and sigma.dtype == np.float64
    assert_close(sigma, ref.estimate_sigma(image), rtol=RTOL, atol=0, what="sigma per channel")


def test_channel_axis_and_device_arrays(runtime):
    image = noisy(load_image("motorcycle_left")[:64, :72], 15.0, 7).astype(np.float32)
    expected = clpatch.estimate_sigma(image, runtime=runtime)
    first = np.ascontiguousarray(np.moveaxis(image, -1, 0))
    np.testing.assert_array_equal(clpatch.estimate_sigma(first, channel_axis=0,
                                                         runtime=runtime), expected)
    np.testing.assert_array_equal(clpatch.estimate_sigma(image, channel_axis=-1,
                                                         runtime=runtime), expected)
    device = cla.to_device(runtime.queue, image)
    np.testing.assert_array_equal(clpatch.estimate_sigma(device, runtime=runtime), expected)
    np.testing.assert_array_equal(clpatch.estimate_sigma(device), expected)  # its queue's runtime
    gray = cla.to_device(runtime.queue, np.ascontiguousarray(image[..., 1]))
    assert clpatch.estimate_sigma(gray, runtime=runtime) == expected[1]
    one = clpatch.estimate_sigma(image[..., :1], runtime=runtime)
    assert one.shape == (1,) and one[0] == expected[0]


# ---- accuracy ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,sigma", [("camera", 5), ("moon", 10), ("coins", 20),
                                        ("brick", 40)])
def test_within_ten_percent_on_real_images(runtime, name, sigma):
    clean = load_image(name)[:256, :256]
    estimate = clpatch.estimate_sigma(noisy(clean, sigma, 8), runtime=runtime)
    assert abs(estimate / sigma - 1) < 0.10, f"{name}: {estimate:.3f} for sigma {sigma}"


def test_pure_noise_and_constant_images(runtime):
    rng = np.random.default_rng(9)
    assert clpatch.estimate_sigma(rng.standard_normal((60, 70)) * 3.0 + 50,
                                  runtime=runtime) == pytest.approx(3.0, rel=0.05)
    uniform = rng.random((60, 70)) * 255.0   # variance 255^2 / 12
    assert clpatch.estimate_sigma(uniform, runtime=runtime) == pytest.approx(
        255 / np.sqrt(12), rel=0.05)
    for constant in (np.zeros((30, 30), np.uint8), np.full((40, 33, 3), -7.5)):
        assert np.all(np.asarray(clpatch.estimate_sigma(constant, runtime=runtime)) == 0.0)


def test_dtypes_and_units(runtime):
    image = noisy(load_image("camera")[100:180, 150:230], 6.0, 10)
    as8 = np.clip(np.rint(image), 0, 255).astype(np.uint8)
    sigma8 = clpatch.estimate_sigma(as8, runtime=runtime)
    assert sigma8 == pytest.approx(ref.estimate_sigma(as8), rel=RTOL)
    assert sigma8 == clpatch.estimate_sigma(as8.astype(np.float64), runtime=runtime)
    as16 = as8.astype(np.uint16) * 257          # the same image in 16-bit units
    assert clpatch.estimate_sigma(as16, runtime=runtime) == pytest.approx(257 * sigma8, rel=RTOL)
    # scaling by a power of two changes nothing but the units, exactly
    tiny = image * 2.0 ** -30
    assert clpatch.estimate_sigma(tiny, runtime=runtime) == \
        clpatch.estimate_sigma(image, runtime=runtime) * 2.0 ** -30
    assert clpatch.estimate_sigma(image.astype(np.int16), runtime=runtime) > 0
    assert clpatch.estimate_sigma(image.tolist(), runtime=runtime) == pytest.approx(
        clpatch.estimate_sigma(image, runtime=runtime), rel=RTOL)


# ---- sizes and bad arguments -------------------------------------------------------------------

def test_smallest_images(runtime):
    rng = np.random.default_rng(11)
    for shape in ((26, 26), (9, 332), (332, 9)):
        assert clpatch.estimate_sigma(rng.random(shape) * 10, runtime=runtime) > 0
    for shape in ((25, 26), (26, 25), (8, 2000), (9, 331)):
        with pytest.raises(ValueError, match=r"image is too small to estimate noise: it needs "
                                             r"at least 324 patches of 9x9.*e\.g\. 26x26"):
            clpatch.estimate_sigma(np.zeros(shape), runtime=runtime)


@pytest.mark.parametrize("image,kwargs,error,fragment", [
    (np.zeros(100), {}, ValueError, r"image must be \(H, W\) grayscale or \(H, W, C\)"),
    (np.zeros((2, 30, 30, 3)), {}, ValueError, r"image must be \(H, W\) grayscale"),
    (np.zeros((30, 30), complex), {}, TypeError, "image must have a real numeric dtype"),
    (np.zeros((30, 30), bool), {}, TypeError, "image must have a real numeric dtype"),
    ("camera.png", {}, TypeError, "image must be a NumPy array"),
    (None, {}, TypeError, "image must be a NumPy array"),
    (np.zeros((0, 30)), {}, ValueError, "image is empty"),
    (np.zeros((30, 30)), {"channel_axis": 0}, ValueError, "channel_axis=0 needs a 3-D input"),
    (np.zeros((30, 30, 3)), {"channel_axis": 3}, ValueError, r"channel_axis must be in \[-3, 2\]"),
    (np.zeros((30, 30, 3)), {"channel_axis": 1.0}, TypeError, "channel_axis must be an integer"),
    (np.zeros((30, 30)), {"runtime": "pocl"}, TypeError, "runtime must be a clpatch.Runtime"),
])
def test_bad_arguments(image, kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        clpatch.estimate_sigma(image, **kwargs)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values(runtime, bad):
    image = np.random.default_rng(12).random((40, 40)).astype(np.float32)
    image[17, 23] = bad
    with pytest.raises(ValueError, match="image contains NaN or infinite values"):
        clpatch.estimate_sigma(image, runtime=runtime)
    device = cla.to_device(runtime.queue, image)
    with pytest.raises(ValueError, match="image contains NaN or infinite values"):
        clpatch.estimate_sigma(device, runtime=runtime)


def test_sigma_stays_required():
    for function in (clpatch.nlmeans, clpatch.bm3d):
        with pytest.raises(TypeError, match="sigma"):
            function(np.zeros((32, 32)))


@pytest.mark.parametrize("channels", [1, 3])
def test_images_larger_than_the_memory_limit_go_in_bands(runtime, channels):
    clean = load_image("astronaut")[40:140, 60:150]
    image = noisy(clean if channels == 3 else clean[..., 1], 10.0, 13).astype(np.float32)
    whole = np.atleast_1d(clpatch.estimate_sigma(image, runtime=runtime))
    small = clpatch.Runtime(runtime.device, memory_limit=60000 * channels)
    plan = noise_level.NoiseLevelPlan(small, *image.shape[:2], channels)
    assert len(plan.bands) >= 3
    bands = plan.bands
    assert bands[0].y0 == 0 and bands[-1].y0 + bands[-1].ph == plan.ph
    assert all(a.y0 + a.ph == b.y0 for a, b in zip(bands[:-1], bands[1:], strict=True))
    banded = plan.run(as_volume(image))
    # the statistics are summed over bands in float64: equal to one band's to rounding
    assert_close(banded, whole, rtol=1e-5, atol=0, what="sigma in bands")
    assert_close(banded, np.atleast_1d(ref.estimate_sigma(image)), rtol=RTOL, atol=0,
                 what="sigma in bands against the oracle")
    device = cla.to_device(small.queue, image)
    np.testing.assert_array_equal(np.atleast_1d(clpatch.estimate_sigma(device, runtime=small)),
                                  banded)
    # one pass's statistics in bands: the same selection as the oracle's
    (count, _, _), *_ = plan.statistics(as_volume(image), [3e4] * channels)
    assert count == ref.patch_statistics(image[..., 0] if channels == 3 else image, 3e4)[0]


def test_not_even_one_band_fits(runtime):
    small = clpatch.Runtime(runtime.device, memory_limit=20000)
    with pytest.raises(clpatch.DeviceResourceError, match="not even one row of 9x9 patches"):
        clpatch.estimate_sigma(np.zeros((100, 100)), runtime=small)


def test_colour_sigmas_compose_with_the_filters(runtime):
    """estimate_sigma gives one sigma per channel for colour, which the filters refuse with
    a TypeError saying what to pass; average_sigmas=True gives the one they take (the root
    mean square of the channels')."""
    rng = np.random.default_rng(7)
    image = (np.full((64, 64, 3), 128.0) + rng.normal(0, [5.0, 10.0, 20.0], (64, 64, 3))
             ).astype(np.float32)
    per_channel = clpatch.estimate_sigma(image, runtime=runtime)
    one = clpatch.estimate_sigma(image, average_sigmas=True, runtime=runtime)
    assert isinstance(one, float) and one == pytest.approx(np.sqrt(np.mean(per_channel ** 2)))
    for fn in (clpatch.bm3d, clpatch.nlmeans):
        with pytest.raises(TypeError, match="average_sigmas=True"):
            fn(image, per_channel, runtime=runtime)
    assert clpatch.bm3d(image, one, runtime=runtime).shape == image.shape
    gray = image[..., 0]
    assert clpatch.estimate_sigma(gray, average_sigmas=True, runtime=runtime) == \
        clpatch.estimate_sigma(gray, runtime=runtime)
    with pytest.raises(TypeError, match="average_sigmas"):
        clpatch.estimate_sigma(image, average_sigmas="yes", runtime=runtime)
