"""BM3D's exact noise variances (the reference preset's `exact_variance`, Mäkinen, Azzari and
Foi 2020): the oracle's variances against the explicit linear map from the noise to the 3-D
coefficients, the kernel's Haar-tree generator against T·C·Tᵀ, the kernels against the oracle
on both work-group layouts and every device profile, and the parameter's checks."""

from __future__ import annotations

import re

import numpy as np
import pytest

import clpatch
from clpatch.core.profiles import FAMILIES
from clpatch.denoise import clgen as gen
from clpatch.denoise.bm3d_params import EXACT_STAGE1_WEIGHT_MAX, PRESETS, stage_params
from clpatch.denoise.transforms import transform_pair
from tests.helpers import assert_close, family_runtime, smooth_noisy
from tests.reference.bm3d import bm3d_reference
from tests.reference.bm3d_stages import group_variance

SIGMA = 20.0
ATOL = 1e-3   # float32 kernels against the float64 oracle, on 0-255 data


# ---- the variances themselves (no device) ------------------------------------------------------

def linear_map_variances(positions, p, t2, t1, size=24):
    """Each 3-D coefficient as an explicit linear function of the pixels of a size² image
    (2-D transform of every patch, then the 1-D transform along the group): its variance under
    white noise of variance 1 is the squared norm of that function's weights."""
    k = len(positions)
    f2 = np.asarray(transform_pair(t2, p)[0])
    f1 = np.asarray(transform_pair(t1, k)[0])
    coeff = np.zeros((k, p, p, size, size))          # coefficient (i, a, b) of patch i
    for i, (y, x) in enumerate(positions):
        coeff[i, :, :, y:y + p, x:x + p] = np.einsum("au,bv->abuv", f2, f2)
    spec = np.einsum("ci,iabuv->cabuv", f1, coeff)
    return (spec ** 2).sum(axis=(-2, -1))


@pytest.mark.parametrize("t2, t1, k", [("bior1.5", "haar", 8), ("dct", "haar", 16),
                                       ("dct", "hadamard", 4)])
def test_group_variance_is_the_linear_maps(t2, t1, k):
    rng = np.random.default_rng(k)
    positions = rng.integers(0, 17, size=(k, 2))     # 8x8 patches in a 24x24 image: overlaps
    positions[1] = positions[0] + [1, 0]             # and certainly one close pair
    want = linear_map_variances(positions, 8, t2, t1)
    got = group_variance(positions[None], 8, t2, t1)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_group_variance_without_overlaps_is_one_patchs():
    positions = np.array([[0, 0], [0, 8], [8, 0], [16, 16]])
    f2 = np.asarray(transform_pair("bior1.5", 8)[0])
    norms = (f2 ** 2).sum(axis=1)
    got = group_variance(positions, 8, "bior1.5", "haar")
    np.testing.assert_allclose(got, np.broadcast_to(np.outer(norms, norms), got.shape), atol=1e-12)


@pytest.mark.parametrize("size", [1, 2, 4, 8, 16, 32])
def test_haar_tree_generator_is_t_c_tt(size):
    """clgen.haar_variances (what the kernel computes) equals diag(T C Tᵀ) for a covariance C
    whose diagonal is one member's variance."""
    rng = np.random.default_rng(size)
    a = rng.normal(size=(size, size))
    cov = a @ a.T
    np.fill_diagonal(cov, 3.0)
    t = np.asarray(transform_pair("haar", size)[0])
    code = gen.haar_variances(size, "3.0", [f"out[{c}]" for c in range(size)],
                              lambda lo, h: repr(float(cov[lo:lo + h, lo + h:lo + 2 * h].sum())))
    python = re.sub(r"(\d)f\b", r"\1", code.replace("const float ", "")).replace(";", "")
    out = [0.0] * size
    exec("\n".join(line for line in python.splitlines() if line not in "{}"), {"out": out})
    np.testing.assert_allclose(out, np.diag(t @ cov @ t.T), rtol=1e-12, atol=1e-12)


def test_lag_products_are_the_autocorrelation():
    f2 = np.asarray(transform_pair("bior1.5", 8)[0])
    r = gen.lag_products(f2)
    assert r.shape == (8, 8)
    np.testing.assert_allclose(r[:, 0], (f2 ** 2).sum(axis=1))
    np.testing.assert_allclose(r[3, 2], float(np.dot(f2[3, :6], f2[3, 2:])))


@pytest.mark.parametrize("t2", ["bior1.5", "dct"])
def test_stage1_weight_bound(t2):
    """A stage-1 weight is at most 1 / v(DC) <= 1 / ‖F_0‖⁴ (the fixed-point scales' bound):
    the DC row's lag products are >= 0, so overlapping members only raise the DC's variance."""
    f2 = np.asarray(transform_pair(t2, 8)[0])
    assert (gen.lag_products(f2)[0] >= 0).all()
    assert 1.0 / (f2[0] @ f2[0]) ** 2 <= EXACT_STAGE1_WEIGHT_MAX


# ---- the kernels against the oracle --------------------------------------------------------------

def check(out, image, what, **params):
    expected = bm3d_reference(np.asarray(image, dtype=np.float64), SIGMA, "reference", **params)
    assert np.isfinite(out).all(), what
    assert_close(out, expected, rtol=0.0, atol=ATOL, what=what)


def test_reference_preset_takes_exact_variances():
    p1, p2, _ = stage_params("reference")
    assert p1.exact_variance and p2.exact_variance
    assert (p1.lambda_3d, p1.mu2) == (3.0, 0.4)
    assert not any(p.exact_variance for p in stage_params("fast")[:2])
    assert PRESETS["reference"]["exact_variance"] and not PRESETS["fast"]["exact_variance"]


def test_exact_variance_matters(runtime):
    """The same preset with and without: both equal their oracle, and they differ."""
    image = smooth_noisy((40, 45))
    on = clpatch.bm3d(image, SIGMA, preset="reference", window=15, runtime=runtime)
    check(on, image, "exact variances", window=15)
    off = clpatch.bm3d(image, SIGMA, preset="reference", window=15, exact_variance=False,
                       runtime=runtime)
    check(off, image, "sigma^2 everywhere", window=15, exact_variance=False)
    assert np.abs(on - off).max() > 0.5


@pytest.mark.parametrize("params", [
    dict(patch_size=5, step=2, window=9, k=(8, 16)),        # the padded generic layout
    dict(patch_size=12, step=4, window=17, k=(4, 16)),      # two pixels per work-item
], ids=["patch5", "patch12"])
def test_generic_layouts(runtime, params):
    image = smooth_noisy((33, 38), seed=1)
    out = clpatch.bm3d(image, SIGMA, preset="reference", runtime=runtime, **params)
    check(out, image, f"exact variances {params}", **params)


def test_colour(runtime):
    image = smooth_noisy((30, 33, 3), seed=2)
    out = clpatch.bm3d(image, SIGMA, preset="reference", window=11, runtime=runtime)
    check(out, image, "CBM3D with exact variances", window=11)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_profile(runtime, family):
    """Algorithm 10's layout puts a coefficient on another work-item for each bank padding:
    the variances must follow it (stage 1: the layout is the same in stage 2)."""
    image = smooth_noisy((30, 34), seed=3)
    out = clpatch.bm3d(image, SIGMA, preset="reference", window=11, stages=1,
                       runtime=family_runtime(runtime, family))
    check(out, image, f"{family} profile, stage 1", window=11, stages=1)


# ---- checks ------------------------------------------------------------------------------------

def test_bad_arguments():
    image = np.zeros((20, 20), np.float32)
    with pytest.raises(ValueError, match="exact_variance.*haar"):
        clpatch.bm3d(image, SIGMA, preset="reference", transform_1d="hadamard")
    with pytest.raises(ValueError, match="exact_variance.*haar"):
        clpatch.bm3d(image, SIGMA, exact_variance=True)             # fast: Hadamard
    with pytest.raises(TypeError, match="exact_variance"):
        clpatch.bm3d(image, SIGMA, preset="reference", exact_variance="yes")
    assert clpatch.bm3d(image, SIGMA, exact_variance=True, transform_1d="haar").shape == (20, 20)
