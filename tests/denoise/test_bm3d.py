"""BM3D/CBM3D (clpatch.bm3d) against the NumPy oracle tests/reference/bm3d.py: presets,
colour, other patch and group sizes, both aggregations, tiles, device arrays, dtypes,
data ranges, tiny images, bad arguments; plus the code generators of clpatch.denoise.clgen.

Every configuration of the filter is a kernel build (5-15 s on a CPU device), so the default
run sticks to a dozen of them; the wider sweeps are marked slow (CLPATCH_SLOW=1).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core.volumes import default_data_range
from clpatch.denoise import clgen as gen
from clpatch.denoise.bm3d import BM3DPlan
from clpatch.denoise.bm3d import bm3d as bm3d_fn
from clpatch.denoise.bm3d_params import PRESETS, choose_aggregation, stage_params
from clpatch.denoise.transforms import (
    bior15_matrices,
    dct_matrix,
    haar_matrix,
    hadamard_matrix,
    transform_pair,
)
from clpatch.match.window.config import SearchConfig
from tests.helpers import assert_close, assert_same, load_image, smooth_noisy
from tests.reference.bm3d import bm3d_reference

SIGMA = 20.0
# float32 kernels against the float64 oracle: the observed difference is ~1e-4 on 0-255 data.
ATOL = 1e-3


def check_reference(out, image, preset="fast", *, what, sigma=SIGMA, atol=ATOL, **overrides):
    expected = bm3d_reference(np.asarray(image, dtype=np.float64), sigma, preset, **overrides)
    assert out.dtype == np.float32 and out.shape == np.shape(image), what
    assert np.isfinite(out).all(), f"{what}: non-finite output"
    assert_close(out, expected, rtol=0.0, atol=atol, what=what)


def fixed_available(runtime) -> bool:
    return bool(runtime.profile.int64_atomics)


def psnr(estimate, clean) -> float:
    mse = np.mean((np.asarray(estimate, dtype=np.float64) - clean) ** 2)
    return float(10 * np.log10(255.0 ** 2 / mse))


# ---- the pipeline against the reference ---------------------------------------------------

def test_fast_preset_matches_reference(runtime):
    # 37 x 45 with step 4: the last grid row and column are off the lattice.
    image = smooth_noisy((37, 45), seed=1)
    out = clpatch.bm3d(image, SIGMA, runtime=runtime)
    check_reference(out, image, what="fast, 2 stages")


def test_reference_preset_basic_estimate(runtime):
    # n = 16, Haar along the stack, step 3, window 39 (wider than the image).
    image = smooth_noisy((30, 34), seed=2)
    out = clpatch.bm3d(image, SIGMA, preset="reference", stages=1, runtime=runtime)
    check_reference(out, image, "reference", stages=1, what="reference preset, stage 1")


def test_cbm3d_matches_reference(runtime):
    image = smooth_noisy((29, 33, 3), seed=3)
    out = clpatch.bm3d(image, SIGMA, runtime=runtime)
    check_reference(out, image, what="CBM3D fast")


def test_patch_size_5(runtime):
    # DCT in both stages, 4 then 16 patches per group: work-groups of 20 and 40 work-items,
    # two pixels per work-item along the stack, no conflict-free (paper) layout.
    image = smooth_noisy((23, 27), seed=4)
    params = dict(patch_size=5, step=2, window=9, k=(4, 16))
    out = clpatch.bm3d(image, SIGMA, runtime=runtime, **params)
    check_reference(out, image, what="patch 5", **params)


def test_cas_aggregation(runtime):
    image = smooth_noisy((37, 45), seed=1)
    out = clpatch.bm3d(image, SIGMA, aggregation="cas", runtime=runtime)
    check_reference(out, image, what="cas aggregation")


STAGGERED = [
    # (shape, params, variant): last column on the step-3 lattice (29 - 8 = 21) or off it
    # (31 - 8 = 23), windows >= 11 so that n = 32 is not capped for tiny images;
    # step 2 (shifts 0, 1) and step 4 (square -> column); every variant.
    ((31, 29), dict(preset="reference", window=11), "naive"),
    ((31, 31), dict(preset="reference", window=13), "convolution"),
    ((30, 29), dict(preset="reference", window=11), SearchConfig("column", rows=2, batch=4)),
    ((29, 34), dict(preset="reference", window=15), SearchConfig("column", rows=3)),
    ((27, 23), dict(stagger=True, step=2, window=7), "column"),
    ((37, 45), dict(stagger=True), None),
]


@pytest.mark.parametrize("shape,params,variant", STAGGERED,
                         ids=[f"{s[0]}x{s[1]}-{i}" for i, (s, _, _) in enumerate(STAGGERED)])
def test_staggered_grid(runtime, shape, params, variant):
    params = dict(params)
    preset = params.pop("preset", "fast")
    image = smooth_noisy(shape, seed=shape[0] + shape[1])
    out = clpatch.bm3d(image, SIGMA, preset=preset, variant=variant, runtime=runtime, **params)
    check_reference(out, image, preset, what=f"staggered {shape} {params} {variant}", **params)


def test_staggered_colour_cas(runtime):
    image = smooth_noisy((26, 31, 3), seed=9)
    out = clpatch.bm3d(image, SIGMA, preset="reference", window=11, aggregation="cas",
                       runtime=runtime)
    check_reference(out, image, "reference", what="staggered CBM3D, cas", window=11)


def test_stagger_changes_the_grid(runtime):
    image = smooth_noisy((40, 40), seed=10)
    plain = clpatch.bm3d(image, SIGMA, preset="reference", stagger=False, runtime=runtime)
    check_reference(plain, image, "reference", what="plain reference grid", stagger=False)
    staggered = clpatch.bm3d(image, SIGMA, preset="reference", runtime=runtime)
    assert np.abs(plain - staggered).max() > 0.01


@pytest.mark.parametrize("aggregation", ["fixed", "cas"])
def test_wiener_mu2(runtime, aggregation):
    # The bm3d package's white-noise shrinkage (lambda 3.0, mu2 0.4). mu2 < 1 raises the
    # Wiener weights by 1 / mu2, which the fixed-point scales must allow for.
    if aggregation == "fixed" and not fixed_available(runtime):
        pytest.skip("no 64-bit atomics")
    image = smooth_noisy((37, 45), seed=7)
    params = dict(lambda_3d=3.0, mu2=0.4)
    out = clpatch.bm3d(image, SIGMA, aggregation=aggregation, runtime=runtime, **params)
    check_reference(out, image, what=f"mu2 0.4, {aggregation}", **params)
    default = clpatch.bm3d(image, SIGMA, lambda_3d=3.0, runtime=runtime)
    assert np.abs(out - default).max() > 0.1, "mu2 changed nothing"


@pytest.mark.slow
def test_smallest_groups_patch_4(runtime):
    # Groups of 1 then 2 patches of 4 x 4.
    image = smooth_noisy((12, 13), seed=5)
    params = dict(patch_size=4, k=(1, 2), window=7)
    out = clpatch.bm3d(image, SIGMA, runtime=runtime, **params)
    check_reference(out, image, what="patch 4, k=(1, 2)", **params)


SWEEP = [
    dict(transform_2d="dct", transform_1d="haar", k=32, window=15),
    dict(transform_1d="hadamard", k=32, window=15),
    dict(preset="reference"),
    dict(patch_size=16, step=8, window=21, k=(8, 16)),
    dict(patch_size=2, step=1, window=5, k=(4, 8)),
    dict(patch_size=7, step=3, window=11, k=(2, 32)),
    dict(patch_size=12, step=5, window=15, k=(16, 4), transform_1d=("haar", "hadamard")),
    dict(transform_1d=("haar", "hadamard"), tau_match=(3000.0, 300.0), lambda_3d=3.0),
]


@pytest.mark.slow
@pytest.mark.parametrize("params", SWEEP, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
def test_parameter_sweep(runtime, params):
    params = dict(params)
    preset = params.pop("preset", "fast")
    image = smooth_noisy((33, 38), seed=6)
    out = clpatch.bm3d(image, SIGMA, preset=preset, runtime=runtime, **params)
    check_reference(out, image, preset, what=str(params), **params)


@pytest.mark.slow
@pytest.mark.parametrize("aggregation", ["cas", "fixed"])
def test_cbm3d_sweep(runtime, aggregation):
    if aggregation == "fixed" and not fixed_available(runtime):
        pytest.skip("no 64-bit atomics")
    image = smooth_noisy((26, 31, 3), seed=7)
    out = clpatch.bm3d(image, SIGMA, preset="reference", aggregation=aggregation, runtime=runtime)
    check_reference(out, image, "reference", what=f"CBM3D reference {aggregation}")


# ---- what the filter computes, independent of the reference --------------------------------

@pytest.mark.parametrize("shape", [(37, 45), (29, 33, 3)])
def test_keeping_every_coefficient_reproduces_the_input(runtime, shape):
    # lambda ~ 0: every 3-D coefficient survives the hard threshold, so every filtered patch
    # is the noisy patch itself and any weighted average of them is the input.
    image = smooth_noisy(shape, seed=8)
    out = clpatch.bm3d(image, SIGMA, lambda_3d=1e-6, stages=1, runtime=runtime)
    assert_close(out, image, rtol=0.0, atol=ATOL, what="transform round trip")


def test_constant_image_keeps_its_dc(runtime):
    # On a constant c every group is 8 identical flat patches (all distances 0), whose only
    # non-zero 3-D coefficient is the DC. The DC is never thresholded (stage 1) nor shrunk
    # (stage 2: w = 1 on the DC), so c comes back, also when its DC is far below 2.7 sigma;
    # the coefficients beside it are zero, so the group weights are 1 and 1 / sigma^2.
    f, _ = bior15_matrices()
    bior_dc = float(f[0].sum()) ** 2 * math.sqrt(8)        # stage-1 DC of a flat group of 1s
    threshold = PRESETS["fast"]["lambda_3d"] * SIGMA
    shape = (37, 45)
    kept, small = 3.0, 2.0
    assert kept * bior_dc > 1.05 * threshold and small * bior_dc < 0.95 * threshold
    for value in (kept, small):
        for stages in (1, 2):
            out = clpatch.bm3d(np.full(shape, value, np.float32), SIGMA, stages=stages,
                               runtime=runtime)
            np.testing.assert_allclose(out, value, rtol=1e-5)
        np.testing.assert_allclose(bm3d_reference(np.full(shape, value), SIGMA), value, rtol=1e-9)


# ---- tiles, determinism ------------------------------------------------------------------

def _tiled_pair(runtime, shape, tile_bytes, **kwargs):
    rows, cols = shape[:2]
    channels = shape[2] if len(shape) == 3 else 1
    p1, p2, stages = stage_params("fast")
    whole = BM3DPlan(runtime, rows, cols, channels, (p1, p2), stages, **kwargs)
    tiled = BM3DPlan(runtime, rows, cols, channels, (p1, p2), stages, tile_bytes=tile_bytes,
                     **kwargs)
    assert len(whole.tiles) == 1 and len(tiled.tiles) > 1
    assert [(t.a, t.b) for t in tiled.tiles] == list(zip(
        [0] + [t.b for t in tiled.tiles[:-1]], [t.b for t in tiled.tiles], strict=True))
    assert tiled.tiles[-1].b == rows
    return whole, tiled


@pytest.mark.parametrize("shape,tile_bytes", [((80, 36), 105_000), ((56, 32, 3), 190_000)])
def test_tiles_are_bit_identical_with_fixed_point(runtime, shape, tile_bytes):
    if not fixed_available(runtime):
        pytest.skip("no 64-bit atomics")
    image = smooth_noisy(shape, seed=9)
    whole, tiled = _tiled_pair(runtime, shape, tile_bytes, aggregation="fixed")
    expected = whole.run(image, SIGMA)
    np.testing.assert_array_equal(tiled.run(image, SIGMA), expected)
    check_reference(expected, image, what=f"{shape} untiled")


def test_tiles_with_cas_match_the_reference(runtime):
    # (taller than the fixed-point case: 32-bit accumulators leave a band of 80 rows whole)
    image = smooth_noisy((120, 36), seed=9)
    _, tiled = _tiled_pair(runtime, image.shape, 120_000, aggregation="cas")
    check_reference(tiled.run(image, SIGMA), image, what="tiled cas")


def test_fixed_point_is_deterministic(runtime):
    if not fixed_available(runtime):
        pytest.skip("no 64-bit atomics")
    image = smooth_noisy((37, 45), seed=10)
    runs = [clpatch.bm3d(image, SIGMA, aggregation="fixed", runtime=runtime) for _ in range(3)]
    for other in runs[1:]:
        np.testing.assert_array_equal(other, runs[0])


def test_default_aggregation_follows_capabilities(runtime):
    expected = "fixed" if fixed_available(runtime) else "cas"
    assert choose_aggregation(runtime.profile)[0] == expected
    assert choose_aggregation(runtime.profile, "cas") == ("cas", "forced")


# ---- arrays, dtypes, layouts, ranges -------------------------------------------------------

@pytest.mark.parametrize("shape", [(37, 45), (29, 33, 3)])
def test_device_arrays_stay_on_the_device(runtime, shape):
    image = smooth_noisy(shape, seed=11)
    host = clpatch.bm3d(image, SIGMA, runtime=runtime)
    device = clpatch.bm3d(cla.to_device(runtime.queue, image), SIGMA, runtime=runtime)
    assert isinstance(device, cla.Array) and device.dtype == np.float32
    assert device.shape == image.shape
    assert_same(device.get(), host, runtime, "device array")


def test_non_contiguous_inputs(runtime):
    big = smooth_noisy((41, 50), seed=12)
    view = big[2:39, 3:48]
    expected = clpatch.bm3d(np.ascontiguousarray(view), SIGMA, runtime=runtime)
    assert_same(clpatch.bm3d(view, SIGMA, runtime=runtime), expected, runtime, "NumPy view")
    # A transposed (Fortran-ordered) view.
    tview = np.ascontiguousarray(view.T).T
    assert_same(clpatch.bm3d(tview, SIGMA, runtime=runtime), expected, runtime, "transposed view")
    # A device view (not contiguous): its peak for the fixed-point scale is measured on a
    # planar copy, since pyopencl reduces contiguous arrays only.
    dview = cla.to_device(runtime.queue, big)[2:39, 3:48]
    out = clpatch.bm3d(dview, SIGMA, runtime=runtime)
    assert isinstance(out, cla.Array)
    assert_same(out.get(), expected, runtime, "device view")


def test_uint8_equals_float32_of_the_same_values(runtime):
    values = np.clip(np.rint(smooth_noisy((37, 45), seed=13)), 0, 255)
    a = clpatch.bm3d(values.astype(np.uint8), SIGMA, runtime=runtime)
    b = clpatch.bm3d(values.astype(np.float32), SIGMA, runtime=runtime)
    assert a.dtype == np.float32 and a.shape == values.shape
    assert_same(a, b, runtime, "uint8 vs float32")


def test_single_channel_axis_keeps_its_shape(runtime):
    image = smooth_noisy((37, 45), seed=14)
    flat = clpatch.bm3d(image, SIGMA, runtime=runtime)
    out = clpatch.bm3d(image[..., None], SIGMA, runtime=runtime)
    assert out.shape == (37, 45, 1)
    assert_same(out[..., 0], flat, runtime, "(H, W, 1)")


def test_channel_axis(runtime):
    image = smooth_noisy((29, 33, 3), seed=15)
    last = clpatch.bm3d(image, SIGMA, runtime=runtime)
    first = np.ascontiguousarray(np.moveaxis(image, -1, 0))
    out = clpatch.bm3d(first, SIGMA, channel_axis=0, runtime=runtime)
    assert out.shape == first.shape
    assert_same(np.moveaxis(out, 0, -1), last, runtime, "channel_axis=0")
    assert_same(clpatch.bm3d(image, SIGMA, channel_axis=-1, runtime=runtime), last, runtime,
          "channel_axis=-1")


def test_unit_range_floats(runtime):
    clean = np.clip(smooth_noisy((37, 45), seed=16), 0, 255)
    unit = (clean / 255).astype(np.float32)
    assert default_data_range(unit.dtype, float(np.abs(unit).max())) == 1.0
    out = clpatch.bm3d(unit, SIGMA / 255, runtime=runtime)
    full = clpatch.bm3d(clean, SIGMA, runtime=runtime)
    assert_close(out, full / 255, rtol=0.0, atol=1e-4, what="[0, 1] vs [0, 255] / 255")
    # The matching thresholds are rescaled by (data_range / 255)^2 ...
    scale = (1 / 255) ** 2
    check_reference(out, unit, sigma=SIGMA / 255, atol=ATOL / 255, what="[0, 1] vs reference",
                    tau_match=(2500 * scale, 400 * scale))
    assert_same(clpatch.bm3d(unit, SIGMA / 255, data_range=1.0, runtime=runtime), out, runtime,
          "explicit data_range=1")
    # ... so a smaller claimed range leaves fewer similar patches: smaller groups. (sigma is
    # then 200 in 0-255 units, where the preset would switch to its high-noise settings:
    # the normal ones are passed.)
    narrow = clpatch.bm3d(unit, SIGMA / 255, data_range=0.1, runtime=runtime,
                          tau_match=(2500.0, 400.0), lambda_3d=3.0)
    scale = (0.1 / 255) ** 2
    check_reference(narrow, unit, sigma=SIGMA / 255, atol=ATOL / 255, what="data_range=0.1",
                    tau_match=(2500 * scale, 400 * scale))
    assert np.abs(narrow - out).max() > 1e-3


def test_default_data_range():
    assert default_data_range(np.uint8, 200.0) == 255.0
    assert default_data_range(np.uint16, None) == 65535.0
    assert default_data_range(np.int16, 5.0) == 32767.0
    assert default_data_range(np.float32, 0.9) == 1.0
    assert default_data_range(np.float32, 1.0) == 1.0
    assert default_data_range(np.float64, 1.5) == 255.0
    assert default_data_range(np.float32, None) == 255.0


@pytest.mark.parametrize("shape", [(8, 8), (9, 11)])
def test_tiny_images(runtime, shape):
    # 8 x 8 has a single patch (groups of 1 in both stages: n is capped to 1); 9 x 11 has 8.
    image = smooth_noisy(shape, seed=17)
    out = clpatch.bm3d(image, SIGMA, runtime=runtime)
    check_reference(out, image, what=f"tiny {shape}")


# ---- a photograph ----------------------------------------------------------------------------

def test_camera_is_denoised(runtime):
    clean = load_image("camera", np.float64)[200:264, 200:264]
    noisy = (clean + SIGMA * np.random.default_rng(18).standard_normal(clean.shape)).astype(np.float32)
    out = clpatch.bm3d(noisy, SIGMA, runtime=runtime)
    gain = psnr(out, clean) - psnr(noisy, clean)
    assert gain > 5.0, f"PSNR gain {gain:.2f} dB"
    check_reference(out, noisy, what="camera 64x64")


# ---- bad arguments -----------------------------------------------------------------------------

GRAY = smooth_noisy((37, 45), seed=19)

BAD = [
    (dict(sigma=0.0), ValueError, "sigma"),
    (dict(sigma=-1.0), ValueError, "sigma"),
    (dict(sigma=float("nan")), ValueError, "sigma"),
    (dict(sigma=float("inf")), ValueError, "sigma"),
    (dict(sigma="20"), TypeError, "sigma"),
    (dict(preset="slow"), ValueError, "preset"),
    (dict(k=3), ValueError, "k must be a power of 2"),
    (dict(k=(8, 12)), ValueError, "k must be a power of 2"),
    (dict(k=64), ValueError, r"k must be in \[1, 32\]"),
    (dict(k=(8, 8, 8)), ValueError, "k must be a scalar or a"),
    (dict(patch_size=5, transform_2d="bior1.5"), ValueError, "bior1.5.*patch_size"),
    (dict(patch_size=5, transform_2d=("dct", "bior1.5")), ValueError, "bior1.5.*patch_size"),
    (dict(transform_2d="haar"), ValueError, "transform_2d"),
    (dict(transform_2d="wavelet"), ValueError, "transform_2d"),
    (dict(transform_1d="dct"), ValueError, "transform_1d"),
    (dict(patch_size=17), ValueError, "patch_size"),
    (dict(patch_size=1), ValueError, "patch_size"),
    (dict(patch_size=8.0), TypeError, "patch_size"),
    (dict(step=0), ValueError, "step"),
    (dict(step=9), ValueError, "step"),
    (dict(window=0), ValueError, "window"),
    (dict(stages=3), ValueError, "stages"),
    (dict(stages=0), ValueError, "stages"),
    (dict(lambda_3d=0.0), ValueError, "lambda_3d"),
    (dict(mu2=0.0), ValueError, "mu2"),
    (dict(stagger=1), TypeError, "stagger"),
    (dict(mu2="1"), TypeError, "mu2"),
    (dict(tau_match=-1.0), ValueError, "tau_match"),
    (dict(aggregation="atomic"), ValueError, "aggregation"),
    (dict(data_range=0.0), ValueError, "data_range"),
    (dict(data_range=float("nan")), ValueError, "data_range"),
    (dict(channel_axis=5), ValueError, "channel_axis"),
    (dict(channel_axis=1.0), TypeError, "channel_axis"),
]


@pytest.mark.parametrize("kwargs,error,match", BAD,
                         ids=[",".join(f"{k}={v}" for k, v in b[0].items()) for b in BAD])
def test_bad_arguments(runtime, kwargs, error, match):
    kwargs = dict(kwargs)
    sigma = kwargs.pop("sigma", SIGMA)
    image = GRAY[..., None] if "channel_axis" in kwargs else GRAY
    with pytest.raises(error, match=match):
        clpatch.bm3d(image, sigma, runtime=runtime, **kwargs)


def test_unknown_keyword(runtime):
    with pytest.raises(TypeError):
        clpatch.bm3d(GRAY, SIGMA, runtime=runtime, patchsize=8)
    with pytest.raises(TypeError, match="unknown BM3D parameter 'h'"):
        stage_params("fast", h=3)


@pytest.mark.parametrize("shape", [(37, 45, 2), (37, 45, 4)])
def test_channel_counts(runtime, shape):
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        clpatch.bm3d(np.zeros(shape, np.float32), SIGMA, runtime=runtime)
    with pytest.raises(ValueError, match="grayscale .* or RGB"):
        BM3DPlan(runtime, shape[0], shape[1], shape[2], stage_params("fast")[:2])


def test_bad_images(runtime):
    with pytest.raises(ValueError, match="patch_size 8 is larger than the image"):
        clpatch.bm3d(np.zeros((7, 20), np.float32), SIGMA, runtime=runtime)
    with pytest.raises(ValueError, match="patch_size 5 is larger than the image"):
        clpatch.bm3d(np.zeros((20, 4), np.float32), SIGMA, patch_size=5, runtime=runtime)
    for bad in (np.nan, np.inf):
        image = GRAY.copy()
        image[3, 4] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            clpatch.bm3d(image, SIGMA, runtime=runtime)
    with pytest.raises(ValueError, match="image must be"):
        clpatch.bm3d(np.zeros((3, 20, 20, 3), np.float32), SIGMA, runtime=runtime)
    with pytest.raises(TypeError):
        clpatch.bm3d(GRAY.astype(np.complex64), SIGMA, runtime=runtime)
    device = cla.to_device(runtime.queue, np.zeros((3, 20, 21), np.float32))
    with pytest.raises(ValueError, match="channels last"):
        clpatch.bm3d(device, SIGMA, channel_axis=0, runtime=runtime)
    with pytest.raises(ValueError, match="3-D input"):
        clpatch.bm3d(GRAY, SIGMA, channel_axis=0, runtime=runtime)


def test_plan_refuses_other_shapes_and_kinds(runtime):
    p1, p2, stages = stage_params("fast")
    plan = BM3DPlan(runtime, 37, 45, 1, (p1, p2), stages)
    with pytest.raises(ValueError, match="planned shape"):
        plan.run(GRAY[:36], SIGMA)
    with pytest.raises(TypeError, match="NumPy arrays"):
        plan.run(cla.to_device(runtime.queue, GRAY), SIGMA)


def test_stage_params():
    p1, p2, stages = stage_params("fast")
    assert stages == 2
    assert (p1.stage, p1.transform_2d, p1.n, p1.window, p1.step) == (1, "bior1.5", 16, 35, 6)
    assert (p2.stage, p2.transform_2d, p2.tau_match, p2.n, p2.window, p2.step) == \
        (2, "dct", 400.0, 16, 21, 5)
    p1, p2, stages = stage_params("reference", stages=1, n=(4, 16), patch_size=6)
    assert stages == 1 and (p1.n, p2.n) == (4, 16)
    # Sizes other than 8 default to the DCT in both stages.
    assert p1.transform_2d == p2.transform_2d == "dct" and p1.transform_1d == "haar"


# ---- clpatch._clgen: the emitted C computes the matrix products ---------------------------------

_FLOAT = re.compile(r"(?<![\w.])((?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)f\b")


def run_c(code: str, env: dict) -> dict:
    """Execute the straight-line C emitted by _clgen with Python floats.

    Handles what the generators emit: float literals with an f suffix, `{` `}` blocks,
    `const float a = x, b = y;` declarations, `x = expr;` and `x *= c;` statements."""
    code = _FLOAT.sub(r"\1", code).replace("{", ";").replace("}", ";")
    for statement in code.split(";"):
        statement = statement.strip()
        if not statement:
            continue
        if statement.startswith("const float "):
            for decl in statement[len("const float "):].split(","):
                exec(decl.strip(), {}, env)
        else:
            assert re.match(r"^[\w\[\]]+\s*\*?=", statement), statement
            exec(statement, {}, env)
    return env


def apply_matvec(matrix, vector):
    n = len(vector)
    env = {"x": [float(v) for v in vector], "y": [0.0] * matrix.shape[0]}
    code = gen.matvec(matrix, [f"x[{j}]" for j in range(n)], [f"y[{i}]" for i in range(len(matrix))])
    return np.array(run_c(code, env)["y"]), code


def apply_in_place(code_for, vector):
    env = {"v": [float(x) for x in vector]}
    code = code_for([f"v[{j}]" for j in range(len(vector))])
    return np.array(run_c(code, env)["v"]), code


def _matrices():
    out = [(f"dct{n}", dct_matrix(n)) for n in (1, 2, 3, 4, 5, 7, 8, 12, 16)]
    out += [(f"hadamard{n}", hadamard_matrix(n)) for n in (2, 4, 8, 16, 32)]
    out += [(f"haar{n}", haar_matrix(n)) for n in (2, 4, 8, 16, 32)]
    out += [(f"haar{n}.T", haar_matrix(n).T) for n in (4, 32)]
    f, i = bior15_matrices()
    out += [("bior1.5", f), ("bior1.5 inverse", i)]
    return out


MATRICES = _matrices()


@pytest.mark.parametrize("name,matrix", MATRICES, ids=[m[0] for m in MATRICES])
def test_matvec_computes_the_product(name, matrix):
    rng = np.random.default_rng(len(name))
    for _ in range(3):
        x = rng.normal(0, 50, matrix.shape[1])
        y, code = apply_matvec(matrix, x)
        np.testing.assert_allclose(y, matrix @ x, rtol=1e-6, atol=1e-6 * np.abs(x).sum(), err_msg=code)
    # One statement per output, each reading only the inputs of its row's non-zero coefficients.
    lines = code.splitlines()
    assert len(lines) == matrix.shape[0]
    for i, line in enumerate(lines):
        used = {int(j) for j in re.findall(r"x\[(\d+)\]", line)}
        assert used == set(np.flatnonzero(np.abs(matrix[i]) > 1e-12)), line


@pytest.mark.parametrize("name,matrix", MATRICES, ids=[m[0] for m in MATRICES])
def test_transform_in_place(name, matrix):
    x = np.random.default_rng(1 + len(name)).normal(0, 50, matrix.shape[1])
    y, code = apply_in_place(lambda v: gen.transform_in_place(matrix, v, "t"), x)
    np.testing.assert_allclose(y, matrix @ x, rtol=1e-6, atol=1e-6 * np.abs(x).sum(), err_msg=code)
    assert code.startswith("{\n") and code.endswith("\n}")     # temporaries are block-scoped


def test_rows_of_equal_magnitude_use_one_multiplication():
    code = gen.matvec(hadamard_matrix(8), [f"x[{j}]" for j in range(8)], [f"y[{i}]" for i in range(8)])
    assert all(line.count("*") == 1 for line in code.splitlines()), code
    # Haar's rows are +-c on a subset of the inputs: one multiplication each as well.
    code = gen.matvec(haar_matrix(8), [f"x[{j}]" for j in range(8)], [f"y[{i}]" for i in range(8)])
    assert all(line.count("*") == 1 for line in code.splitlines()), code
    # A +-1 row needs none; a zero row is a plain zero.
    code = gen.matvec(np.array([[1.0, -1.0], [0.0, 0.0]]), ["a", "b"], ["c", "d"])
    assert code.splitlines() == ["c = a - b;", "d = 0.0f;"]


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32])
def test_hadamard_in_place(n):
    x = np.random.default_rng(n).normal(0, 50, n)
    y, code = apply_in_place(lambda v: gen.hadamard_in_place(v, "h"), x)
    np.testing.assert_allclose(y, hadamard_matrix(n) @ x, rtol=1e-6, atol=1e-5 * np.abs(x).sum(),
                               err_msg=code)
    if n == 1:
        assert code == ""
    else:
        # n log2(n) / 2 butterflies and n scalings, no general multiply-adds.
        assert code.count("a + ") == n * int(math.log2(n)) // 2
        assert code.count("*=") == n


def test_hadamard_in_place_needs_a_power_of_two():
    with pytest.raises(ValueError, match="power-of-2"):
        gen.hadamard_in_place(["a", "b", "c"], "h")


@pytest.mark.parametrize("value", [0.0, 1.0, -2.5, 1 / 3, math.sqrt(0.5), 2.0 ** -10, 1e-7, 3e8,
                                   0.35355339059327373])
def test_literal_round_trips_to_float32(value):
    text = gen.literal(value)
    assert text.endswith("f") and _FLOAT.sub(r"\1", text.lstrip("-")) != text.lstrip("-")
    assert np.float32(float(text[:-1])) == np.float32(value)


def test_generated_transforms_match_transform_pair():
    # The kernels' 2-D passes use transform_pair's matrices: forward then inverse is the identity.
    for name, size in [("dct", 5), ("dct", 8), ("bior1.5", 8), ("haar", 16), ("hadamard", 32)]:
        f, i = transform_pair(name, size)
        x = np.random.default_rng(size).normal(0, 50, size)
        y, _ = apply_in_place(lambda v, f=f: gen.transform_in_place(f, v, "t"), x)
        z, _ = apply_in_place(lambda v, i=i: gen.transform_in_place(i, v, "t"), y)
        np.testing.assert_allclose(z, x, rtol=1e-5, atol=1e-4, err_msg=name)


def test_public_names():
    assert clpatch.bm3d is bm3d_fn and clpatch.BM3DPlan is BM3DPlan


@pytest.mark.parametrize("channels", [1, 3])
def test_pinned_transfers_give_identical_results(runtime, monkeypatch, channels):
    """Large NumPy images move through pinned slots on the transfer queue (PINNED_BYTES):
    the same result as the plain copies, tiled or not."""
    from clpatch.core import transfer
    from clpatch.denoise import bm3d_plan as bm3d_module

    shape = (70, 53) if channels == 1 else (70, 53, 3)
    image = (np.random.default_rng(21).random(shape) * 255).astype(np.float32)
    p1, p2, stages = stage_params("fast")
    plain = BM3DPlan(runtime, 70, 53, channels, (p1, p2), stages)
    monkeypatch.setattr(bm3d_module, "PINNED_BYTES", 0)
    monkeypatch.setattr(transfer, "PIECE_BYTES", 1 << 12)
    pinned = BM3DPlan(runtime, 70, 53, channels, (p1, p2), stages)
    tiled = BM3DPlan(runtime, 70, 53, channels, (p1, p2), stages,
                     tile_bytes=140_000 if channels == 1 else 380_000)
    assert plain.transfers is None and pinned.transfers is not None and len(tiled.tiles) > 1
    expected = plain.run(image, 20.0)
    for _ in range(2):
        np.testing.assert_array_equal(pinned.run(image, 20.0), expected)
    if plain.aggregation == "fixed":          # "cas" is not bit-for-bit reproducible
        np.testing.assert_array_equal(tiled.run(image, 20.0), expected)


def test_stream_matches_run_frame_by_frame(runtime, monkeypatch):
    """BM3DPlan.stream overlaps frames (two alternating slots) and gives what run() gives
    with the same peak; a frame beyond the assumed peak, or with NaN, is refused."""
    from clpatch.core import transfer

    monkeypatch.setattr(transfer, "PIECE_BYTES", 1 << 12)
    rng = np.random.default_rng(31)
    frames = [(rng.random((45, 38)) * 255).astype(np.float32) for _ in range(5)]
    p1, p2, stages = stage_params("fast")
    plan = BM3DPlan(runtime, 45, 38, 1, (p1, p2), stages)
    out = list(plan.stream(frames, 20.0, data_range=255.0, peak=300.0))
    assert len(out) == 5
    for frame, denoised in zip(frames, out, strict=True):
        single = BM3DPlan(runtime, 45, 38, 1, (p1, p2), stages)
        expected = list(single.stream([frame], 20.0, data_range=255.0, peak=300.0))[0]
        np.testing.assert_array_equal(denoised, expected)
        if plan.aggregation == "fixed":
            # run() takes the frame's own peak for its scales: same filter, other rounding.
            assert_close(denoised, single.run(frame, 20.0, data_range=255.0), rtol=0, atol=1e-3,
                         what="stream vs run")
    with pytest.raises(ValueError, match="beyond the assumed peak"):
        list(plan.stream([frames[0], frames[1] * 2], 20.0, data_range=255.0, peak=300.0))
    bad = frames[0].copy()
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="frame 1 contains NaN"):
        list(plan.stream([frames[0], bad], 20.0, data_range=255.0))
    with pytest.raises(ValueError, match="one tile"):
        BM3DPlan(runtime, 45, 38, 1, (p1, p2), stages, device_output=True).stream(frames, 20.0)
