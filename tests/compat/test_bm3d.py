"""clpatch.compat.bm3d against the bm3d package: signature, quality, stages, errors.

The comparisons with the package run where it is installed (skipped otherwise). PSNR
tolerance: 0.1 dB (clpatch's grid, borders and stage-1 threshold differ; measured on these
crops from -0.08 dB, the basic estimate of grass, to +2.1 dB, astronaut in colour).
"""

from __future__ import annotations

import enum
import inspect

import numpy as np
import pytest

import clpatch
from clpatch.compat.bm3d import BM3DStages, bm3d
from tests.compat.common import SIGMA, noisy_crop, psnr

TOLERANCE_DB = 0.1


def _comparable(default):
    return (type(default).__name__, default.name, default.value) \
        if isinstance(default, enum.Enum) else default


def test_signature_matches_the_package():
    package = pytest.importorskip("bm3d")
    ours = inspect.signature(bm3d).parameters.values()
    theirs = inspect.signature(package.bm3d).parameters.values()
    assert [(p.name, _comparable(p.default), p.kind) for p in ours] == \
           [(p.name, _comparable(p.default), p.kind) for p in theirs]
    assert [(s.name, s.value) for s in BM3DStages] == \
           [(s.name, s.value) for s in package.BM3DStages]


@pytest.mark.parametrize("name", ["camera", "coins", "astronaut"])
def test_psnr_at_least_the_package(name):
    package = pytest.importorskip("bm3d")
    clean, noisy = noisy_crop(name)
    ours, theirs = bm3d(noisy, SIGMA), package.bm3d(noisy, SIGMA)
    assert ours.dtype == theirs.dtype == np.float64 and ours.shape == theirs.shape
    assert psnr(ours, clean) >= psnr(theirs, clean) - TOLERANCE_DB, \
        (psnr(ours, clean), psnr(theirs, clean))


def test_stages_with_the_package_enum_and_a_basic_estimate():
    package = pytest.importorskip("bm3d")
    clean, noisy = noisy_crop("camera")
    basic = package.bm3d(noisy, SIGMA, stage_arg=package.BM3DStages.HARD_THRESHOLDING)
    ours = bm3d(noisy, SIGMA, stage_arg=package.BM3DStages.HARD_THRESHOLDING)
    assert psnr(ours, clean) >= psnr(basic, clean) - TOLERANCE_DB
    np.testing.assert_array_equal(ours, bm3d(noisy, SIGMA, stage_arg=BM3DStages.HARD_THRESHOLDING))
    final = bm3d(noisy, SIGMA, stage_arg=basic)
    theirs = package.bm3d(noisy, SIGMA, stage_arg=basic)
    assert psnr(final, clean) >= psnr(theirs, clean) - TOLERANCE_DB
    assert psnr(final, clean) > psnr(basic, clean)


# --------------------------------------------------------------------------- without the package


def test_stages_and_scales():
    clean, noisy = noisy_crop("coins")
    full = bm3d(noisy, SIGMA)
    basic = bm3d(noisy, SIGMA, stage_arg=BM3DStages.HARD_THRESHOLDING)
    assert full.dtype == basic.dtype == np.float64
    assert psnr(full, clean) > psnr(basic, clean) > psnr(noisy, clean) + 3
    # One level per channel, all equal, is white noise.
    assert np.array_equal(bm3d(noisy, [SIGMA]), full)
    assert np.array_equal(bm3d(noisy[..., None], np.array(SIGMA))[..., 0], full)
    # A noisy float image beyond [0, 1] keeps the package's [0, 1] thresholds (data_range 1,
    # where clpatch's default would judge it a 0-255 image).
    assert noisy.max() > 1
    reference = clpatch.bm3d(noisy, SIGMA, preset="reference", data_range=1.0)
    assert np.array_equal(full, np.asarray(reference, np.float64))
    u8 = np.clip(np.round(noisy * 255), 0, 255).astype(np.uint8)
    np.testing.assert_allclose(bm3d(u8, 255 * SIGMA) / 255, bm3d(u8 / 255.0, SIGMA), atol=1e-3)


def test_colour_with_equal_channel_levels():
    clean, noisy = noisy_crop("astronaut", size=48)
    out = bm3d(noisy, [SIGMA] * 3)
    assert out.shape == noisy.shape and psnr(out, clean) > psnr(noisy, clean) + 5


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"profile": "refilter"}, ValueError, "profile: .*only 'np'"),
    ({"profile": "vn"}, ValueError, "profile"),
    ({"profile": object()}, ValueError, "profile"),
    ({"sigma_psd": np.full((32, 32), 0.01)}, ValueError, "sigma_psd: .*coloured-noise PSD"),
    ({"sigma_psd": [0.1, 0.2]}, ValueError, "sigma_psd"),
    ({"sigma_psd": 0.0}, ValueError, "sigma_psd must"),
    ({"sigma_psd": float("inf")}, ValueError, "sigma_psd must"),
    ({"sigma_psd": "0.1"}, TypeError, "sigma_psd"),
    ({"stage_arg": BM3DStages.WIENER_FILTERING}, ValueError, "stage_arg: WIENER_FILTERING"),
    ({"stage_arg": np.zeros((8, 8))}, ValueError, "stage_arg: the basic estimate"),
    ({"stage_arg": 3}, TypeError, "stage_arg"),
    ({"blockmatches": (True, False)}, ValueError, "blockmatches"),
])
def test_errors_name_the_argument(kwargs, error, match):
    _, noisy = noisy_crop("camera", size=32)
    args = {"sigma_psd": SIGMA, **kwargs}
    with pytest.raises(error, match=match):
        bm3d(noisy, **args)


def test_other_channel_counts_and_colour_levels_are_refused():
    with pytest.raises(ValueError, match="z must be"):
        bm3d(np.zeros((32, 32, 4)), SIGMA)
    with pytest.raises(ValueError, match="z must be"):
        bm3d(np.zeros((4, 32, 32, 3)), SIGMA)
    with pytest.raises(ValueError, match="different levels per channel"):
        bm3d(np.zeros((32, 32, 3)), [0.1, 0.1, 0.2])
