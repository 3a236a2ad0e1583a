"""The fast preset's stage-1 matching threshold grows with the noise: max(2500, 3.125 σ²) for
σ <= 40 in 0–255 units (25000 above, the high-noise settings); the reference preset's is
3000 + 2σ² at every σ. The settings, the float-image ambiguity of `switch_noise`, the CLI's
description, and the device against the NumPy oracle (which states the rules itself)."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.cli.denoise import method_line
from clpatch.core.volumes import as_volume
from clpatch.denoise.bm3d import noise_255
from clpatch.denoise.bm3d_params import (
    TAU_GROWTH_SIGMA,
    noise_distance_tau,
    preset_settings,
    settings_note,
    stage_params,
    switch_noise,
)
from clpatch.denoise.strength import Strength
from tests.helpers import assert_close
from tests.reference import bm3d as R

# float32 kernels against the float64 oracle on 8-bit data (see tests/denoise/test_bm3d.py).
ATOL = 1e-3
SHAPE = (40, 44)


def noisy_8bit(sigma: float, seed: int = 0) -> np.ndarray:
    """A smooth 0–255 image plus N(0, sigma) noise, rounded and clipped to uint8 (patch
    distances are then integers, exact in float32 and float64 alike)."""
    y, x = np.mgrid[:SHAPE[0], :SHAPE[1]].astype(np.float64)
    clean = 128 + 60 * np.sin(y / 5) * np.cos(x / 7)
    noisy = clean + np.random.default_rng(seed).normal(0.0, sigma, SHAPE)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


# ---- the settings ---------------------------------------------------------------------------


@pytest.mark.parametrize("sigma,tau1,tau2", [
    (20.0, 2500.0, 400.0), (28.0, 2500.0, 400.0), (29.0, 3.125 * 29 ** 2, 400.0),
    (35.0, 3828.125, 400.0), (40.0, 5000.0, 400.0), (41.0, 25000.0, 3500.0)])
def test_fast_stage1_tau_follows_sigma(sigma, tau1, tau2):
    p1, p2, _ = stage_params("fast", sigma)
    assert (p1.tau_match, p2.tau_match) == pytest.approx((tau1, tau2), rel=1e-12)
    # Nothing but the stage-1 threshold moves below the switch.
    n1, n2, _ = stage_params("fast")
    if sigma <= 40:
        assert (p1.lambda_3d, p2) == (n1.lambda_3d, n2)
    # The oracle states the same rule.
    o1, o2, _ = R.stage_params("fast", sigma)
    assert (o1.tau_match, o2.tau_match) == pytest.approx((p1.tau_match, p2.tau_match), rel=1e-12)


def test_rule_boundary_and_reference_preset():
    assert TAU_GROWTH_SIGMA == pytest.approx(math.sqrt(800.0))
    assert stage_params("fast", TAU_GROWTH_SIGMA)[0].tau_match == pytest.approx(2500.0)
    assert stage_params("fast", TAU_GROWTH_SIGMA + 0.01)[0].tau_match > 2500.0
    for sigma in (5.0, 20.0, 35.0, 40.0, 60.0, 100.0):
        p1, p2, _ = stage_params("reference", sigma)
        assert (p1.tau_match, p2.tau_match) == pytest.approx((3000.0 + 2 * sigma ** 2, 400.0))
        assert p2 == stage_params("reference")[1]
        assert [asdict(p) for p in (p1, p2)] == \
            [asdict(p) for p in R.stage_params("reference", sigma)[:2]]
    assert preset_settings("reference", 20.0)["tau_match"] == (3800.0, 400.0)
    assert noise_distance_tau(3000.0, 100.0) == 23000.0
    # preset_settings (the burst takes its stage-1 tau from it) follows the same rule.
    assert preset_settings("fast", 40.0)["tau_match"] == (5000.0, 400.0)
    assert preset_settings("fast")["tau_match"] == (2500.0, 400.0)
    with pytest.raises(ValueError, match="noise"):
        preset_settings("fast", float("nan"))


def test_explicit_tau_match_wins():
    p1, p2, _ = stage_params("fast", 35.0, tau_match=(2500, 400))
    assert (p1.tau_match, p2.tau_match) == (2500.0, 400.0)
    p1, p2, _ = stage_params("fast", 35.0, tau_match=3000)
    assert (p1.tau_match, p2.tau_match) == (3000.0, 3000.0)
    o1, o2, _ = R.stage_params("fast", 35.0, tau_match=(2500, 400))
    assert (o1.tau_match, o2.tau_match) == (2500.0, 400.0)


def test_settings_note_and_cli_line():
    assert settings_note("fast", None) == ""
    assert settings_note("fast", 20.0) == ""
    assert settings_note("reference", 35.0) == ""      # its one rule at every sigma
    assert settings_note("reference", 60.0) == ""
    assert settings_note("fast", 40.0) == " (stage-1 tau 5000)"
    assert settings_note("fast", 60.0) == " (high-noise settings, stage-1 tau 25000)"
    line = method_line("bm3d", clpatch.bm3d, 40.0, {}, 40.0)
    assert "preset fast (stage-1 tau 5000), patch 8, step 6/5, window 35/21, k 16/16" in line
    line = method_line("bm3d", clpatch.bm3d, 20.0, {}, 20.0)
    assert "preset fast, patch 8" in line


# ---- σ in 0–255 units: when the image's range must be measured --------------------------------


def test_switch_noise_ambiguous_window():
    f32 = np.float32
    # A float image without data_range and peak: range 1 or 255. 0.12 reads 0.12 or 30.6,
    # which give different stage-1 thresholds: the peak is needed.
    assert switch_noise(0.12, None, f32, None) is None
    assert switch_noise(30.0, None, f32, None) is None        # 30 or 7650
    assert switch_noise(40.0, None, f32, None) is None        # 40 or 10200
    # For "fast": both readings at or below 28.28 (0.1 or 25.5), or both above 40: no peak
    # needed.
    assert switch_noise(0.1, None, f32, None, "fast") == pytest.approx(0.1)
    assert switch_noise(41.0, None, f32, None, "fast") == pytest.approx(41.0)
    # "reference" (its stage-1 tau follows sigma at every level), and any preset (None),
    # need it.
    for sigma in (0.1, 0.12, 41.0, 1000.0):
        assert switch_noise(sigma, None, f32, None, "reference") is None
        assert switch_noise(sigma, None, f32, None) is None
    assert switch_noise(41.0, None, np.uint8, None, "reference") == pytest.approx(41.0)
    # Otherwise the exact value, from the given range, the dtype or the peak.
    assert switch_noise(0.12, 1.0, f32, None) == pytest.approx(30.6)
    assert switch_noise(0.12, None, f32, 0.9) == pytest.approx(30.6)
    assert switch_noise(35.0, None, f32, 200.0) == pytest.approx(35.0)
    assert switch_noise(35.0, None, np.uint8, None) == pytest.approx(35.0)
    assert switch_noise(35 * 257.0, None, np.uint16, None) == pytest.approx(35.0)


def test_noise_255_measures_the_range(runtime):
    def noise(image, sigma, **kw):
        return noise_255(as_volume(image, video=False), Strength.check(sigma, **kw), runtime)

    unit = np.full((16, 16), 0.5, np.float32)
    assert noise(unit, 0.12) == pytest.approx(30.6)                    # range 1
    assert noise(unit * 255, 35.0) == pytest.approx(35.0)              # range 255
    assert noise(cla.to_device(runtime.queue, unit), 0.12) == pytest.approx(30.6)
    assert noise(unit, 0.12, data_range=255.0) == pytest.approx(0.12)
    # The reference preset's settings depend on the range at every sigma.
    assert noise_255(as_volume(unit, video=False), Strength.check(0.1), runtime,
                     "reference") == pytest.approx(25.5)
    assert noise_255(as_volume(unit, video=False), Strength.check(0.1), runtime,
                     "fast") == pytest.approx(0.1)


# ---- the device against the oracle -------------------------------------------------------------


def test_device_matches_the_oracle_at_sigma_35(runtime):
    sigma = 35.0
    image = noisy_8bit(sigma)
    data = image.astype(np.float64)
    expected = R.bm3d_reference(data, sigma, "fast")
    old = R.bm3d_reference(data, sigma, "fast", tau_match=(2500.0, 400.0))
    # The rule changes the result on this image (so the comparison below can tell).
    assert np.abs(expected - old).max() > 0.5
    out = clpatch.bm3d(image, sigma, runtime=runtime)
    assert out.dtype == np.float32 and out.shape == SHAPE
    assert_close(out, expected, rtol=0.0, atol=ATOL, what="fast at sigma 35 vs oracle")
    # An explicit tau_match wins over the rule, on the device as in the oracle.
    out = clpatch.bm3d(image, sigma, tau_match=(2500.0, 400.0), runtime=runtime)
    assert_close(out, old, rtol=0.0, atol=ATOL, what="explicit tau_match vs oracle")


def test_float_image_in_unit_range_gets_the_same_settings(runtime):
    # sigma 35/255 on a float image in [0, 1]: the range (1) comes from the image's peak, so
    # the stage-1 threshold is the one of sigma 35, as for the same data on 0–255.
    sigma = 35.0
    image = noisy_8bit(sigma, seed=1).astype(np.float32)
    full = clpatch.bm3d(image, sigma, runtime=runtime)
    unit = clpatch.bm3d(image / 255, sigma / 255, runtime=runtime)
    assert_close(unit * 255, full, rtol=0.0, atol=2e-3, what="[0, 1] vs 0-255 data")
    old = clpatch.bm3d(image, sigma, tau_match=(2500.0, 400.0), runtime=runtime)
    assert np.abs(old - full).max() > 0.5


def test_reference_rule_on_the_device(runtime):
    # The reference preset's stage-1 tau 3000 + 2 sigma^2 (sigma 45: 7050; no high-noise
    # switch), device against oracle on 8-bit data, then the same data as floats in [0, 1]
    # (the range, hence the threshold, from the image's peak). A small window keeps it quick.
    sigma = 45.0
    image = noisy_8bit(sigma, seed=2)
    data = image.astype(np.float64)
    expected = R.bm3d_reference(data, sigma, "reference", window=11)
    fixed = R.bm3d_reference(data, sigma, "reference", window=11, tau_match=(3000.0, 400.0))
    assert np.abs(expected - fixed).max() > 0.5          # the rule changes the result here
    out = clpatch.bm3d(image, sigma, preset="reference", window=11, runtime=runtime)
    assert_close(out, expected, rtol=0.0, atol=ATOL, what="reference at sigma 45 vs oracle")
    unit = clpatch.bm3d(image.astype(np.float32) / 255, sigma / 255, preset="reference",
                        window=11, runtime=runtime)
    assert_close(unit * 255, out, rtol=0.0, atol=2e-3, what="[0, 1] vs 0-255 data")
