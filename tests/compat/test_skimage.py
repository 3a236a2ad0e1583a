"""clpatch.compat.skimage against scikit-image: signatures, scales and dtypes, quality, errors.

The comparisons with scikit-image run where it is installed (skipped otherwise); the
conventions and errors are checked without it.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

from clpatch.compat import skimage as compat
from tests.compat.common import SIGMA, noisy_crop, psnr


def nlm(image, **kwargs):
    """The compat call with sigma given (no sigma=0 warning)."""
    kwargs.setdefault("sigma", SIGMA)
    kwargs.setdefault("h", 0.8 * kwargs["sigma"])
    return compat.denoise_nl_means(image, **kwargs)


# --------------------------------------------------------------------------- against scikit-image


@pytest.mark.parametrize("name", ["denoise_nl_means", "estimate_sigma"])
def test_signatures_match_scikit_image(name):
    restoration = pytest.importorskip("skimage.restoration")
    ours = inspect.signature(getattr(compat, name)).parameters
    theirs = inspect.signature(getattr(restoration, name)).parameters
    assert [(p.name, p.default, p.kind) for p in ours.values()] == \
           [(p.name, p.default, p.kind) for p in theirs.values()]


@pytest.mark.parametrize("name", ["camera", "coins", "astronaut"])
def test_nl_means_psnr_at_least_scikit_image(name):
    """With the noise level given (scikit-image's advice: h = 0.8 sigma): clpatch is +0.5 to
    +1.8 dB above on these crops; no tolerance."""
    restoration = pytest.importorskip("skimage.restoration")
    clean, noisy = noisy_crop(name)
    axis = -1 if noisy.ndim == 3 else None
    ours = nlm(noisy, channel_axis=axis)
    theirs = restoration.denoise_nl_means(noisy, h=0.8 * SIGMA, sigma=SIGMA, channel_axis=axis)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert psnr(ours, clean) >= psnr(theirs, clean), (psnr(ours, clean), psnr(theirs, clean))


def test_dtypes_match_scikit_image():
    restoration = pytest.importorskip("skimage.restoration")
    clean, noisy = noisy_crop("coins", size=32)
    u8 = np.clip(np.round(noisy * 255), 0, 255).astype(np.uint8)
    for image, kw in [(noisy, {}), (noisy.astype(np.float32), {}), (noisy.astype(np.float16), {}),
                      (u8, {}), (u8, {"preserve_range": True, "h": 20.0, "sigma": 25.0})]:
        args = {"h": 0.08, "sigma": SIGMA, **kw}
        ours = compat.denoise_nl_means(image, **args)
        theirs = restoration.denoise_nl_means(image, **args)
        assert ours.dtype == theirs.dtype, (image.dtype, kw)
        assert abs(float(ours.mean()) - float(theirs.mean())) < 0.02 * max(1.0, theirs.max())


def test_img_as_float_matches_scikit_image():
    skimage = pytest.importorskip("skimage")
    for values in ([0, 1, 200, 255], [-128, -1, 0, 127], [-32768, 0, 32767], [0, 65535],
                   [-2**31, 2**31 - 1], [True, False]):
        for dtype in (np.uint8, np.int8, np.int16, np.uint16, np.int32, np.bool_):
            try:
                image = np.array(values, dtype=dtype)
            except OverflowError:
                continue
            if not np.array_equal(image, np.array(values)):
                continue
            expected = skimage.img_as_float(image)
            ours = compat.img_as_float(image)
            assert ours.dtype == expected.dtype and np.allclose(ours, expected), (dtype, values)


def test_estimate_sigma_types_and_accuracy_against_scikit_image():
    pytest.importorskip("pywt")     # scikit-image's estimate_sigma needs PyWavelets
    restoration = pytest.importorskip("skimage.restoration")
    _, gray = noisy_crop("camera")
    _, colour = noisy_crop("astronaut")
    ours, theirs = compat.estimate_sigma(gray), restoration.estimate_sigma(gray)
    assert type(ours) is type(theirs)
    assert abs(ours - SIGMA) <= abs(theirs - SIGMA) + 0.01
    ours = compat.estimate_sigma(colour, channel_axis=-1)
    theirs = restoration.estimate_sigma(colour, channel_axis=-1)
    assert isinstance(ours, list) and len(ours) == len(theirs) == 3
    assert all(type(a) is type(b) for a, b in zip(ours, theirs, strict=True))
    mean = compat.estimate_sigma(colour, average_sigmas=True, channel_axis=-1)
    assert type(mean) is type(restoration.estimate_sigma(colour, average_sigmas=True,
                                                         channel_axis=-1))
    assert mean == pytest.approx(np.mean(ours))
    assert mean == pytest.approx(SIGMA, rel=0.1)


# --------------------------------------------------------------------------- conventions


def test_uint8_gives_floats_in_unit_range_and_preserve_range_keeps_the_scale():
    clean, noisy = noisy_crop("camera", size=48)
    u8 = np.clip(np.round(noisy * 255), 0, 255).astype(np.uint8)
    unit = nlm(u8)
    assert unit.dtype == np.float64 and unit.shape == u8.shape
    assert -0.05 <= unit.min() and unit.max() <= 1.05
    assert psnr(unit, clean) > psnr(u8 / 255.0, clean) + 3
    kept = nlm(u8, preserve_range=True, sigma=255 * SIGMA)       # h = 0.8 sigma: same scale
    assert kept.dtype == np.float64 and kept.max() > 2
    np.testing.assert_allclose(kept / 255.0, unit, atol=1e-4)
    np.testing.assert_allclose(nlm(noisy.astype(np.float32)), nlm(noisy), atol=1e-5)
    assert nlm(noisy.astype(np.float32)).dtype == np.float32


def test_channel_axis_moves_channels():
    _, colour = noisy_crop("astronaut", size=32)
    first = np.moveaxis(colour, -1, 0)
    np.testing.assert_array_equal(np.moveaxis(nlm(first, channel_axis=0), 0, -1),
                                  nlm(colour, channel_axis=-1))
    assert compat.estimate_sigma(first, channel_axis=0) == compat.estimate_sigma(colour,
                                                                              channel_axis=2)


def test_sigma_zero_warns_and_runs():
    _, noisy = noisy_crop("coins", size=32)
    with pytest.warns(UserWarning, match="sigma=0"):
        out = compat.denoise_nl_means(noisy)
    assert out.shape == noisy.shape and np.isfinite(out).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nlm(noisy)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"patch_size": 33}, ValueError, "patch_size"),
    ({"patch_size": 40}, ValueError, "patch_size"),
    ({"patch_size": 2.5}, TypeError, "patch_size"),
    ({"patch_distance": 64}, ValueError, "patch_distance"),
    ({"patch_distance": -1}, ValueError, "patch_distance"),
    ({"h": 0.0}, ValueError, "h must"),
    ({"sigma": -0.1, "h": 0.1}, ValueError, "sigma must"),
    ({"sigma": float("nan"), "h": 0.1}, ValueError, "sigma must"),
    ({"channel_axis": 0}, ValueError, "channel_axis"),
    ({"channel_axis": "last"}, TypeError, "channel_axis"),
])
def test_errors_name_the_argument(kwargs, error, match):
    _, noisy = noisy_crop("camera", size=32)
    with pytest.raises(error, match=match):
        nlm(noisy, **kwargs)


def test_volumes_and_other_inputs_are_refused():
    volume = np.zeros((8, 32, 32))
    with pytest.raises(ValueError, match="volumes"):
        nlm(volume)
    with pytest.raises(ValueError, match="volumes"):
        compat.estimate_sigma(volume)
    with pytest.raises(ValueError, match="channel_axis"):
        nlm(np.zeros((4, 8, 32, 32)), channel_axis=-1)
    with pytest.raises(ValueError, match="patch_size 7 is larger"):
        nlm(np.zeros((5, 40)))
    with pytest.raises(TypeError, match="real numbers"):
        nlm(np.zeros((16, 16), complex))
    with pytest.raises(ValueError, match="too small"):
        compat.estimate_sigma(np.zeros((16, 16)))
