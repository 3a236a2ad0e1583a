"""`clpatch.burst_denoise(..., method="bm3d")`: BM3D's two stages on groups drawn by the
clustering ANN from every frame of a burst (clpatch/denoise/burst_bm3d.py).

The device result is checked against a NumPy oracle fed with the device's own ANN matches
(the ANN itself is checked against its oracle in tests/match/test_ann.py, and may change
its split rule: nothing here depends on which candidates it returns), the quality against
BM3D on the reference frame alone, one frame against `clpatch.bm3d(search="ann")`. Bursts
stay small (at most 8 frames of 48x64): CI runs these on a 2-core CPU (PoCL).
"""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
import clpatch.match.ann.search as ann_module
from clpatch.io.noise import psnr, synthetic_burst
from clpatch.match.ann.params import check_ann_request
from clpatch.match.ann.plan import AnnPlan
from tests.helpers import assert_close, load_image
from tests.reference.bm3d import PRESETS as ORACLE_PRESETS
from tests.reference.burst import burst_bm3d_reference

SIGMA = 12.0
# BM3D's stage-1 matching threshold (mean squared difference per pixel, 0-255 units).
TAU = 2500.0


def camera_burst(frames: int, rows: int = 48, cols: int = 64, seed: int = 0):
    clean = load_image("camera")[100:100 + rows, 150:150 + cols]
    return synthetic_burst(clean, frames, SIGMA, seed=seed)


def colour_burst(frames: int, rows: int = 48, cols: int = 64, seed: int = 1):
    clean = load_image("astronaut")[60:60 + rows, 150:150 + cols]
    return synthetic_burst(clean, frames, SIGMA, seed=seed)


# ---- the oracle ---------------------------------------------------------------------------

def burst_matches(runtime, noisy, reference, *, patch_size=8, step=3, k=16, tile=15):
    """The device's ANN matches of a grayscale burst (what the filter is given)."""
    frames, rows, cols = noisy.shape
    request = check_ann_request(patch_size=patch_size, step=step, k=k, tile=tile,
                                neighbour_clusters=0, channels=1, rows=rows, cols=cols,
                                frames=frames)
    plan = AnnPlan(runtime, frames, rows, cols, 1, request, video=True, reference=reference)
    return plan.run(noisy)


def oracle(noisy, sigma, matches, reference, *, stages=2, patch_size=8):
    """Burst BM3D in NumPy (float64, tests/reference/burst.py) on the device's `matches`:
    each reference patch's group is itself then its matches, stage 1 hard thresholding
    (Bior1.5), stage 2 Wiener (DCT) on the same groups with the basic estimate as oracle;
    every filtered patch aggregated into its own frame. Returns the reference frame."""
    return burst_bm3d_reference(noisy, sigma, matches.positions, matches.distances,
                                reference=reference, grid_y=matches.grid_y,
                                grid_x=matches.grid_x, stages=stages, patch_size=patch_size,
                                tau=TAU, lambda_3d=ORACLE_PRESETS["fast"]["lambda_3d"])


@pytest.mark.parametrize("stages", [1, 2])
def test_burst_bm3d_equals_the_oracle(runtime, stages):
    noisy, _ = camera_burst(4, 32, 40, seed=5)
    matches = burst_matches(runtime, noisy, 2, k=8)
    out = clpatch.burst_denoise(noisy, SIGMA, method="bm3d", reference=2, k=8, stages=stages,
                                runtime=runtime)
    # Groups really span frames (else this would test one image's BM3D).
    assert np.any(matches.positions[..., 1:, 0] != 2)
    want = oracle(noisy, SIGMA, matches, 2, stages=stages)
    assert_close(out, want, rtol=0.0, atol=2e-3, what=f"burst bm3d, {stages} stage(s)")


# ---- quality ------------------------------------------------------------------------------

@pytest.mark.slow       # a quality check (18 s on PoCL); the oracle tests run in CI
def test_burst_bm3d_beats_bm3d_on_the_reference_frame(runtime):
    noisy, clean = camera_burst(8)
    out = clpatch.burst_denoise(noisy, SIGMA, method="bm3d", runtime=runtime)
    assert out.shape == noisy.shape[1:] and out.dtype == np.float32
    assert isinstance(out, np.ndarray) and np.isfinite(out).all()
    alone = clpatch.bm3d(noisy[0], SIGMA, runtime=runtime)
    before, single, got = (psnr(x, clean[0]) for x in (noisy[0], alone, out))
    print(f"burst {noisy.shape}: noisy {before:.2f} dB, bm3d alone {single:.2f} dB, "
          f"burst bm3d {got:.2f} dB")
    assert got > single + 0.6, f"burst bm3d {got:.2f} dB vs bm3d alone {single:.2f} dB"
    # The Wiener stage improves on the basic estimate.
    basic = clpatch.burst_denoise(noisy, SIGMA, method="bm3d", stages=1, runtime=runtime)
    assert got > psnr(basic, clean[0]) + 0.1


def test_burst_bm3d_denoises_the_reference_frame(runtime):
    noisy, clean = camera_burst(4, seed=2)
    out = clpatch.burst_denoise(noisy, SIGMA, method="bm3d", reference=3, runtime=runtime)
    assert psnr(out, clean[3]) > psnr(noisy[3], clean[3]) + 4.0
    assert psnr(out, clean[3]) > psnr(out, clean[0]) + 1.0


def test_burst_bm3d_colour(runtime):
    noisy, clean = colour_burst(4)
    assert noisy.shape == (4, 48, 64, 3)
    out = clpatch.burst_denoise(noisy, SIGMA, method="bm3d", runtime=runtime)
    assert out.shape == (48, 64, 3) and out.dtype == np.float32 and np.isfinite(out).all()
    alone = clpatch.bm3d(noisy[0], SIGMA, runtime=runtime)              # CBM3D
    before, single, got = (psnr(x, clean[0]) for x in (noisy[0], alone, out))
    print(f"colour burst {noisy.shape}: noisy {before:.2f} dB, cbm3d alone {single:.2f} dB, "
          f"burst bm3d {got:.2f} dB")
    assert got > single + 1.0


def test_burst_bm3d_device_arrays_stay_on_the_device(runtime):
    noisy, _ = camera_burst(3, 32, 40, seed=6)
    host = clpatch.burst_denoise(noisy, SIGMA, method="bm3d", runtime=runtime)
    device = clpatch.burst_denoise(cla.to_device(runtime.queue, noisy), SIGMA, method="bm3d",
                                   runtime=runtime)
    assert isinstance(device, cla.Array) and device.dtype == np.float32
    assert device.shape == noisy.shape[1:]
    if runtime.profile.int64_atomics:
        np.testing.assert_array_equal(device.get(), host)
    else:
        assert_close(device.get(), host, rtol=0.0, atol=1e-3, what="device burst bm3d")


# ---- one frame ----------------------------------------------------------------------------

def test_one_frame_basic_estimate_is_bm3d_on_ann_matches(runtime, monkeypatch):
    """T = 1: stage 1 is exactly `clpatch.bm3d(search="ann", stages=1)` with the same patch,
    step and group size (same threshold, same fixed-point scales), once the filters' ANN is
    set to the burst's (tiles of 15, the patch's own cluster, one tiling; the filters' own
    default searches wider)."""
    noisy, _ = camera_burst(1, seed=3)
    out = clpatch.burst_denoise(noisy, SIGMA, method="bm3d", k=8, step=4, stages=1,
                                runtime=runtime)
    monkeypatch.setattr(ann_module, "FILTER_TILE", ann_module.DEFAULT_TILE)
    monkeypatch.setattr(ann_module, "FILTER_NEIGHBOUR_CLUSTERS", 0)
    monkeypatch.setattr(ann_module, "FILTER_TILINGS", 1)
    runtime.plan_cache().clear()        # no plan made with the filters' own ANN settings
    try:
        want = clpatch.bm3d(noisy[0], SIGMA, search="ann", stages=1, k=8, step=4,
                            patch_size=8, runtime=runtime)
    finally:
        runtime.plan_cache().clear()    # nor one with these left for later tests
    if runtime.profile.int64_atomics:
        np.testing.assert_array_equal(out, want)
    else:
        assert_close(out, want, rtol=0.0, atol=1e-3, what="one frame, stage 1")


def test_one_frame_two_stages_is_close_to_bm3d_on_ann_matches(runtime):
    """T = 1, two stages: the burst's stage 2 reuses stage 1's groups where `clpatch.bm3d`
    matches again on the basic estimate; the results differ, the quality hardly."""
    noisy, clean = camera_burst(1, seed=3)
    out = clpatch.burst_denoise(noisy, SIGMA, method="bm3d", k=8, step=4, runtime=runtime)
    want = clpatch.bm3d(noisy[0], SIGMA, search="ann", k=8, step=4, patch_size=8,
                        runtime=runtime)
    got, ref = psnr(out, clean[0]), psnr(want, clean[0])
    print(f"one frame: burst bm3d {got:.2f} dB, bm3d(search='ann') {ref:.2f} dB")
    assert got > psnr(noisy[0], clean[0]) + 4.0
    assert abs(got - ref) < 0.5


# ---- bad arguments ------------------------------------------------------------------------

def test_burst_bm3d_bad_arguments(runtime):
    noisy, _ = camera_burst(3, 32, 40, seed=4)

    def refused(error, match, **kwargs):
        with pytest.raises(error, match=match):
            clpatch.burst_denoise(noisy, SIGMA, runtime=runtime, **kwargs)

    refused(ValueError, r"method must be one of \('nlmeans', 'bm3d'\)", method="bm4d")
    refused(ValueError, "k must be a power of 2 .* got 12", method="bm3d", k=12)
    refused(ValueError, "k must be a power of 2 .* got 64", method="bm3d", k=64)
    refused(TypeError, "k must be an integer", method="bm3d", k=8.0)
    refused(ValueError, "h is NL-means' bandwidth", method="bm3d", h=10.0)
    refused(ValueError, "stages applies to method='bm3d' only", stages=1)
    refused(ValueError, "stages", method="bm3d", stages=3)
    refused(ValueError, "reference", method="bm3d", reference=3)
    refused(ValueError, "step", method="bm3d", step=9)
    refused(ValueError, "largest valid k is 12", method="bm3d", tile=2, k=16)
    with pytest.raises(ValueError, match="1 or 3 channels"):
        clpatch.burst_denoise(np.stack([noisy] * 2, -1), SIGMA, method="bm3d",
                              runtime=runtime)
    with pytest.raises(ValueError, match=r"\(T, H, W\)"):
        clpatch.burst_denoise(noisy[0], SIGMA, method="bm3d", runtime=runtime)
    with pytest.raises(ValueError, match="sigma"):
        clpatch.burst_denoise(noisy, -1.0, method="bm3d", runtime=runtime)
