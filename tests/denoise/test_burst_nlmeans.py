"""`clpatch.burst_denoise(..., method="nlmeans")` (clpatch/denoise/burst.py) against its NumPy
oracle: the clustering ANN's candidates of the reference frame's patches from every frame
(tests/reference/ann.py), then NL-means over them with h = 0.75 σ
(tests/reference/burst.py); and burst.py's documented constants, pinned.

On integer-valued frames the ANN oracle's matches are the device's bit for bit (held in
tests/match/test_ann.py), so the gray case is the oracle end to end; a colour burst is
searched on its float luminance, for which the device's own ANN matches feed the oracle.
Bursts stay small (4 frames of 32x40): CI runs these on a 2-core CPU (PoCL).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import clpatch
from clpatch.denoise import burst as burst_module
from clpatch.io.noise import psnr, synthetic_burst
from clpatch.match.ann.params import check_ann_request
from clpatch.match.ann.plan import AnnPlan
from tests.helpers import assert_close, load_image
from tests.reference import ann as ann_oracle
from tests.reference.burst import burst_nlmeans_reference

SIGMA = 12.0
TOL = dict(rtol=1e-4, atol=2e-3)      # as tests/denoise/test_nlmeans.py
#: burst_denoise's documented NL-means defaults, written out: the oracle does not take them
#: from the library.
H_FACTOR, PATCH, STEP, TILE, K = 0.75, 12, 2, 15, 16


def integer_burst(frames: int = 4, rows: int = 32, cols: int = 40, *, colour: bool = False,
                  seed: int = 5):
    """(noisy, clean): a synthetic burst of a camera (or astronaut) crop, the noisy frames
    rounded to integers and clipped to 0-255 (float32)."""
    clean = (load_image("astronaut")[60:60 + rows, 150:150 + cols] if colour
             else load_image("camera")[100:100 + rows, 150:150 + cols])
    noisy, clean = synthetic_burst(clean, frames, SIGMA, seed=seed)
    return np.clip(np.rint(noisy), 0, 255).astype(np.float32), clean


def luminance(frames: np.ndarray) -> np.ndarray:
    """The opponent luminance the NL-means kernels search colour on, in float32 as they
    compute it: (r + g + b) / sqrt(3)."""
    r, g, b = (frames[..., c] for c in range(3))
    return ((r + g) + b) * np.float32(0.57735026918962576)


def device_matches(runtime, plane, reference, *, patch_size=PATCH, step=STEP, k=K, tile=TILE):
    """The device ANN's matches of a burst's search plane (T, H, W): the burst's own search
    (tiles of `tile`, no sibling clusters, one tiling); positions (gy, gx, k, 3)."""
    frames, rows, cols = plane.shape
    request = check_ann_request(patch_size=patch_size, step=step, k=k, tile=tile,
                                neighbour_clusters=0, channels=1, rows=rows, cols=cols,
                                frames=frames)
    found = AnnPlan(runtime, frames, rows, cols, 1, request, video=True,
                    reference=reference).run(plane)
    return np.asarray(found.positions), np.asarray(found.distances)


@pytest.mark.parametrize("reference", [0, 2])
def test_burst_nlmeans_equals_the_oracle(runtime, reference):
    noisy, _ = integer_burst()
    out = clpatch.burst_denoise(noisy, SIGMA, reference=reference, runtime=runtime)
    pos, dist = ann_oracle.ann(noisy[..., None], patch_size=PATCH, k=K, tile=TILE, step=STEP,
                               reference=reference)
    # Candidates really come from other frames (else this would test one image's NL-means).
    assert np.mean(pos[..., 1:, 0] != reference) > 0.3
    want = burst_nlmeans_reference(noisy, SIGMA, pos, dist, reference=reference,
                                   patch_size=PATCH, step=STEP, h=H_FACTOR * SIGMA)
    assert_close(out, want, **TOL, what=f"burst nlmeans, reference {reference}")


def test_burst_nlmeans_options_equal_the_oracle(runtime):
    """Patch, step, tile, k and h given: the oracle with the same."""
    noisy, _ = integer_burst(4, 40, 48, seed=6)
    kw = dict(patch_size=5, step=3, tile=10, k=8)
    out = clpatch.burst_denoise(noisy, SIGMA, reference=1, h=15.0, runtime=runtime, **kw)
    pos, dist = ann_oracle.ann(noisy[..., None], reference=1, **kw)
    want = burst_nlmeans_reference(noisy, SIGMA, pos, dist, reference=1, patch_size=5, step=3,
                                   h=15.0)
    assert_close(out, want, **TOL, what="burst nlmeans, options")


def test_colour_burst_nlmeans_equals_the_oracle(runtime):
    noisy, _ = integer_burst(colour=True, seed=7)
    out = clpatch.burst_denoise(noisy, SIGMA, reference=1, runtime=runtime)
    pos, dist = device_matches(runtime, luminance(noisy), 1)
    want = burst_nlmeans_reference(noisy, SIGMA, pos, dist, reference=1, patch_size=PATCH,
                                   step=STEP, h=H_FACTOR * SIGMA)
    assert_close(out, want, **TOL, what="colour burst nlmeans")


def test_the_oracle_denoises():
    """The oracle itself is a denoiser: it gains on the reference frame alone (so a wrong
    oracle that the library happened to follow would show)."""
    noisy, clean = integer_burst(seed=8)
    pos, dist = ann_oracle.ann(noisy[..., None], patch_size=PATCH, k=K, tile=TILE, step=STEP)
    want = burst_nlmeans_reference(noisy, SIGMA, pos, dist, reference=0, patch_size=PATCH,
                                   step=STEP, h=H_FACTOR * SIGMA)
    assert psnr(want, clean[0]) > psnr(noisy[0], clean[0]) + 5.0


def test_documented_constants():
    """burst.py's documented constants and burst_denoise's defaults, by value: a change to
    any of them is a change of the documented behaviour (docs, CLI help, sweeps)."""
    assert burst_module.H_FACTOR == 0.75
    assert burst_module.BURST_METHODS == ("nlmeans", "bm3d")
    assert burst_module.DEFAULTS == {"nlmeans": {"patch_size": 12, "step": 2},
                                     "bm3d": {"patch_size": 8, "step": 3}}
    assert burst_module.PLANS_KEPT == 4
    assert burst_module.burst_defaults("nlmeans") == {"patch_size": 12, "step": 2,
                                                      "h_factor": 0.75}
    assert burst_module.burst_defaults("bm3d") == {"patch_size": 8, "step": 3, "stages": 2}
    defaults = {name: p.default for name, p in
                inspect.signature(clpatch.burst_denoise).parameters.items()}
    assert {name: defaults[name] for name in ("reference", "method", "tile", "k")} == \
        {"reference": 0, "method": "nlmeans", "tile": 15, "k": 16}
