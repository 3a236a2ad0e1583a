"""The filters on the clustering ANN (`search="ann"`, clpatch/match/ann/search.py) and the burst
denoiser built on it (`clpatch.burst_denoise`): NL-means and BM3D held to their NumPy oracles
fed the ANN's matches, quality on photographs against the exact windowed search, tiles,
colour, device arrays, tiny images, bad arguments.

The ANN's matches themselves are checked against their oracle in tests/match/test_ann.py
and test_ann_pair.py; here they feed NL-means and BM3D (burst NL-means against its oracle:
tests/denoise/test_burst_nlmeans.py; burst BM3D: test_burst_bm3d.py). Images stay small: CI
runs these on a 2-core CPU (PoCL).
"""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.denoise.bm3d import BM3DPlan
from clpatch.denoise.bm3d_params import stage_params
from clpatch.denoise.nlmeans import NLMeansPlan
from clpatch.io.noise import psnr, synthetic_burst
from clpatch.match.ann import search as ann_search_module
from clpatch.match.ann.params import largest_k
from clpatch.match.ann.search import ann_matcher
from clpatch.match.matcher import available_candidates, searches
from clpatch.match.window.config import SearchRequest
from tests.helpers import assert_close, assert_same, load_image, tiered
from tests.reference import bm3d as bm3d_oracle
from tests.reference.ann import ann_pair_image
from tests.reference.bm3d_grouping import matched_groups
from tests.reference.nlmeans import nlmeans_reference
from tests.reference.search import grid

SIGMA = 20.0
BURST_SIGMA = 12.0
# search="ann" may lose a little to the exact windowed search, never much.
MARGIN_DB = 1.5


def _noisy(clean: np.ndarray, sigma: float, seed: int) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(0.0, sigma, clean.shape)
    return (clean + noise).astype(np.float32)


def camera_crop(rows: int = 64, cols: int = 72) -> np.ndarray:
    return load_image("camera")[100:100 + rows, 150:150 + cols]


def astronaut_crop(rows: int = 64, cols: int = 72) -> np.ndarray:
    return load_image("astronaut")[60:60 + rows, 150:150 + cols]


# ---- against the oracles, on the ANN's matches -------------------------------------------------

NLM_TOL = dict(rtol=1e-4, atol=2e-3)      # as tests/denoise/test_nlmeans.py (window search)
BM3D_ATOL = 1e-3                          # as tests/denoise/test_bm3d.py (window search)
#: The filters' ANN as clpatch/match/ann/search.py documents it (FILTER_TILE,
#: FILTER_NEIGHBOUR_CLUSTERS, FILTER_TILINGS), written out for the oracles.
ANN_TILE, ANN_SIBLINGS, ANN_TILINGS = 21, 2, 2


def test_the_filters_ann_is_the_documented_one():
    assert (ann_search_module.FILTER_TILE, ann_search_module.FILTER_NEIGHBOUR_CLUSTERS,
            ann_search_module.FILTER_TILINGS) == (ANN_TILE, ANN_SIBLINGS, ANN_TILINGS)


def integer_noisy(clean: np.ndarray, seed: int) -> np.ndarray:
    """`clean` plus noise, rounded and clipped to 0-255: the ANN oracle's matches are then the
    device's bit for bit."""
    return np.clip(np.rint(_noisy(clean, SIGMA, seed)), 0, 255).astype(np.float32)


def filter_matches(runtime, plane: np.ndarray, *, patch_size: int, step: int, k: int,
                   stagger: tuple[int, ...] = ()):
    """The device ANN's matches of a single-channel `plane` as the filters search it
    (tiles of 21, 2 sibling clusters, 2 tilings; `stagger`: a staggered grid's shifts)."""
    rows, cols = plane.shape
    request = SearchRequest(patch_size, step, k, ANN_TILE, 1, "l2", False)
    matcher = ann_matcher(runtime, 1, rows, cols, 1, request, stagger=stagger, tile=ANN_TILE,
                          neighbour_clusters=ANN_SIBLINGS, tilings=ANN_TILINGS)
    return matcher.run(plane)


def test_nlmeans_equals_the_oracle_on_the_ann_matches(runtime):
    """Gray, integer-valued: the ANN oracle's matches (two tilings, tests/reference/ann.py)
    fed to the NL-means oracle: no clpatch code in the expected values."""
    image = integer_noisy(camera_crop(), seed=11)       # 64 x 72: both tilings answer
    out = clpatch.nlmeans(image, SIGMA, search="ann", runtime=runtime)
    pos, dist = ann_pair_image(image, patch_size=8, k=16, tile=ANN_TILE, step=4,
                               neighbour_clusters=ANN_SIBLINGS)
    want = nlmeans_reference(image, SIGMA, patch_size=8, step=4, window=21, k=16,
                             search=(pos[None], dist[None]))
    assert_close(out, want, **NLM_TOL, what="nlmeans on the ANN")


def luminance(image: np.ndarray) -> np.ndarray:
    """The opponent luminance NL-means searches colour on, in float32 as its kernel
    computes it: (r + g + b) / sqrt(3)."""
    r, g, b = (image[..., c] for c in range(3))
    return ((r + g) + b) * np.float32(0.57735026918962576)


def test_colour_nlmeans_equals_the_oracle_on_the_ann_matches(runtime):
    """Colour is searched on its float luminance: the device ANN's matches of it feed the
    oracle (which averages all three opponent channels)."""
    image = integer_noisy(astronaut_crop(), seed=12)
    out = clpatch.nlmeans(image, SIGMA, search="ann", runtime=runtime)
    found = filter_matches(runtime, luminance(image), patch_size=8, step=4, k=16)
    want = nlmeans_reference(image, SIGMA, patch_size=8, step=4, window=21, k=16,
                             search=(found.positions[None], found.distances[None]))
    assert_close(out, want, **NLM_TOL, what="colour nlmeans on the ANN")


def bm3d_groups(found, params, rows: int, cols: int):
    """The oracle's groups of one stage from the device ANN's matches, on the oracle's own
    grid (staggered as the stage says), which the matches' grid must be."""
    gy = grid(rows, params.patch_size, params.step)
    shifts = (bm3d_oracle.stagger_shifts(params.step) or (0,)) if params.stagger else (0,)
    table = bm3d_oracle.staggered_columns(cols, params.patch_size, params.step, shifts)
    gx = table[np.arange(len(gy)) % len(table)]
    np.testing.assert_array_equal(found.grid_y, gy)
    np.testing.assert_array_equal(np.broadcast_to(found.grid_x, gx.shape), gx)
    return matched_groups(found.positions, found.distances, gy, gx, params.n,
                          params.tau_match, params.patch_size)


# CI: the fast preset, and the reference preset's stage 1 (its stage 2, groups of 32 with
# exact variances: 8 s in the oracle, make test-slow).
@pytest.mark.parametrize("preset,stages", [
    ("fast", 2), ("reference", 1), pytest.param("reference", 2, marks=pytest.mark.slow)])
def test_bm3d_equals_the_oracle_on_the_ann_matches(runtime, preset, stages):
    """Each stage's groups from the device ANN's matches (stage 1 on the noisy image, stage 2
    on the device's basic estimate), filtered by the oracle. The noise is not rounded: on
    integer-valued images a coefficient can fall exactly on the hard threshold (at sigma 20:
    lambda sigma = 60), which float32 and float64 then decide differently."""
    image = _noisy(camera_crop(), SIGMA, seed=13)
    rows, cols = image.shape
    p1, p2, _ = bm3d_oracle.stage_params(preset, SIGMA)
    basic_out = clpatch.bm3d(image, SIGMA, preset=preset, search="ann", stages=1,
                             runtime=runtime)
    work = image.astype(np.float64)[..., None]

    def matches(plane, params):
        shifts = bm3d_oracle.stagger_shifts(params.step) if params.stagger else ()
        found = filter_matches(runtime, plane, patch_size=params.patch_size,
                               step=params.step, k=params.n, stagger=shifts)
        return bm3d_groups(found, params, rows, cols)

    basic = bm3d_oracle.bm3d_stage(work, [SIGMA], p1, groups=matches(image, p1))
    assert_close(basic_out, basic[..., 0], rtol=0.0, atol=BM3D_ATOL,
                 what=f"{preset}: basic estimate on the ANN")
    if stages == 2:
        out = clpatch.bm3d(image, SIGMA, preset=preset, search="ann", runtime=runtime)
        final = bm3d_oracle.bm3d_stage(work, [SIGMA], p2, basic=basic,
                                       groups=matches(basic_out, p2))
        assert_close(out, final[..., 0], rtol=0.0, atol=BM3D_ATOL,
                     what=f"{preset}: final estimate on the ANN")


# ---- quality on a photograph ---------------------------------------------------------------

FILTERS = {
    "nlmeans": lambda image, rt, **kw: clpatch.nlmeans(image, SIGMA, runtime=rt, **kw),
    "bm3d-fast": lambda image, rt, **kw: clpatch.bm3d(image, SIGMA, runtime=rt, **kw),
    "bm3d-reference": lambda image, rt, **kw: clpatch.bm3d(image, SIGMA, preset="reference",
                                                           runtime=rt, **kw),
}


# CI: BM3D (both stages on the ANN); make test-slow: every filter.
@pytest.mark.parametrize("name", tiered([(n,) for n in FILTERS], keep=lambda n: n == "bm3d-fast"))
def test_photograph_is_denoised_close_to_the_window_search(runtime, name):
    clean = camera_crop()
    noisy = _noisy(clean, SIGMA, seed=1)
    ann = FILTERS[name](noisy, runtime, search="ann")
    assert ann.shape == noisy.shape and ann.dtype == np.float32
    assert np.isfinite(ann).all()
    window = FILTERS[name](noisy, runtime, search="window")
    before, after, exact = psnr(noisy, clean), psnr(ann, clean), psnr(window, clean)
    print(f"{name} {noisy.shape}: noisy {before:.2f} dB, ann {after:.2f} dB, "
          f"window {exact:.2f} dB")
    assert after > before + 4.0, f"ann gains only {after - before:.2f} dB"
    assert after > exact - MARGIN_DB, f"ann {after:.2f} dB vs window {exact:.2f} dB"
    # The matches differ from the window search's: so do the outputs.
    assert np.abs(ann - window).max() > 0.01


# ---- tiles ------------------------------------------------------------------------------------

# Bands of output rows: each band runs the ANN on the whole tile rows its references need.
NLM_TILE_BYTES = {"buffers": 120_000, "fixed": 80_000}


@pytest.mark.parametrize("aggregation", ["buffers", "fixed"])
def test_nlmeans_tiles_give_identical_results(runtime, aggregation):
    if aggregation == "fixed" and not runtime.profile.int64_atomics:
        pytest.skip("no 64-bit atomics")
    image = _noisy(camera_crop(64, 72), SIGMA, seed=2)
    # Tiles of 15 (not the filters' 21): 64 rows then hold 4 tile rows, enough bands.
    kwargs = dict(aggregation=aggregation, search="ann", search_options={"tile": 15})
    whole = NLMeansPlan(runtime, 1, 64, 72, 1, **kwargs)
    tiled = NLMeansPlan(runtime, 1, 64, 72, 1, tile_bytes=NLM_TILE_BYTES[aggregation], **kwargs)
    assert len(whole.tiles) == 1 and len(tiled.tiles) > 2, len(tiled.tiles)
    assert tiled.tiles[0].a == 0 and tiled.tiles[-1].b == 64
    np.testing.assert_array_equal(tiled.run(image, SIGMA), whole.run(image, SIGMA))


# 109 x 72 (fast) and 130 x 72 (reference): the filters' tiles of 21 to 41 rows, so a
# band's groups reach up to 40 rows beyond it; each size still gives at least 2 bands.
BM3D_TILE_BYTES = {"fast": 320_000, "reference": 700_000}
BM3D_ROWS = {"fast": 109, "reference": 130}


# CI: the fast preset (the reference preset: 59 s on PoCL, make test-slow).
@pytest.mark.parametrize("preset", ["fast", pytest.param("reference", marks=pytest.mark.slow)])
def test_bm3d_tiles_are_bit_identical_with_fixed_point(runtime, preset):
    if not runtime.profile.int64_atomics:
        pytest.skip("no 64-bit atomics")
    rows, cols = BM3D_ROWS[preset], 72
    image = _noisy(camera_crop(rows, cols), SIGMA, seed=3)
    p1, p2, stages = stage_params(preset)
    kwargs = dict(aggregation="fixed", search="ann")
    whole = BM3DPlan(runtime, rows, cols, 1, (p1, p2), stages, **kwargs)
    tiled = BM3DPlan(runtime, rows, cols, 1, (p1, p2), stages,
                     tile_bytes=BM3D_TILE_BYTES[preset], **kwargs)
    assert len(whole.tiles) == 1 and len(tiled.tiles) > 1, len(tiled.tiles)
    # The reference preset's staggered grid is the ANN's too.
    assert [s.staggered for s in whole.stages] == [preset == "reference"] * 2
    assert [(t.a, t.b) for t in tiled.tiles] == list(zip(
        [0] + [t.b for t in tiled.tiles[:-1]], [t.b for t in tiled.tiles], strict=True))
    assert tiled.tiles[-1].b == rows
    np.testing.assert_array_equal(tiled.run(image, SIGMA), whole.run(image, SIGMA))


# ---- colour, device arrays, tiny images -------------------------------------------------------

@pytest.mark.parametrize("name", ["nlmeans", "bm3d-fast"])
def test_colour(runtime, name):
    clean = astronaut_crop()
    noisy = _noisy(clean, SIGMA, seed=4)
    out = FILTERS[name](noisy, runtime, search="ann")
    assert out.shape == noisy.shape and out.dtype == np.float32
    before, after = psnr(noisy, clean), psnr(out, clean)
    print(f"{name} colour {noisy.shape}: noisy {before:.2f} dB, ann {after:.2f} dB")
    assert after > before + 3.0


def test_nlmeans_device_arrays_stay_on_the_device(runtime):
    image = _noisy(camera_crop(), SIGMA, seed=5)
    host = clpatch.nlmeans(image, SIGMA, search="ann", runtime=runtime)
    device = clpatch.nlmeans(cla.to_device(runtime.queue, image), SIGMA, search="ann",
                             runtime=runtime)
    assert isinstance(device, cla.Array) and device.dtype == np.float32
    assert device.shape == image.shape
    np.testing.assert_array_equal(device.get(), host)


def test_tiny_image_caps_n(runtime):
    # 12 x 12, patch 8: one tile of 5 x 5 positions, so at most 25 candidates.
    assert available_candidates("ann", 12, 12, 1, 8, 21, 0) == 25 == largest_k(12, 12, 8, 15)
    image = _noisy(camera_crop(12, 12), SIGMA, seed=6)
    out = clpatch.nlmeans(image, SIGMA, k=32, search="ann", runtime=runtime)
    assert out.shape == image.shape and out.dtype == np.float32 and np.isfinite(out).all()
    # Exactly 25: the plan for n=25 gives the same (a plan for 26 would be refused).
    plan = NLMeansPlan(runtime, 1, 12, 12, 1, n=25, search="ann")
    np.testing.assert_array_equal(plan.run(image, SIGMA), out)
    with pytest.raises(ValueError, match="largest valid k is 25"):
        NLMeansPlan(runtime, 1, 12, 12, 1, n=26, search="ann")
    out = clpatch.bm3d(image, SIGMA, search="ann", runtime=runtime)
    assert out.shape == image.shape and np.isfinite(out).all()


# ---- bad arguments ----------------------------------------------------------------------------

def test_ann_refuses_video(runtime):
    frames = _noisy(np.stack([camera_crop(24, 24)] * 3), SIGMA, seed=7)
    with pytest.raises(ValueError, match="burst_denoise"):
        clpatch.nlmeans_video(frames, SIGMA, temporal_window=1, patch_size=8, step=4,
                              search="ann", runtime=runtime)


@pytest.mark.parametrize("name", ["nlmeans", "bm3d-fast"])
def test_unknown_search_lists_the_engines(runtime, name):
    assert {"window", "ann"} <= set(searches())
    image = _noisy(camera_crop(24, 24), SIGMA, seed=8)
    with pytest.raises(ValueError, match="search must be one of") as info:
        FILTERS[name](image, runtime, search="kdtree")
    assert "'window'" in str(info.value) and "'ann'" in str(info.value)


# ---- burst_denoise ------------------------------------------------------------------------------

def burst(frames: int = 6, rows: int = 56, cols: int = 64, colour: bool = False, seed: int = 0):
    clean = astronaut_crop(rows, cols) if colour else camera_crop(rows, cols)
    return synthetic_burst(clean, frames, BURST_SIGMA, seed=seed)


@pytest.mark.slow       # a quality check (27 s on PoCL); the oracle tests run in CI
def test_burst_beats_the_single_frame(runtime):
    noisy, clean = burst()
    out = clpatch.burst_denoise(noisy, BURST_SIGMA, runtime=runtime)
    assert out.shape == noisy.shape[1:] and out.dtype == np.float32
    assert isinstance(out, np.ndarray) and np.isfinite(out).all()
    single = clpatch.nlmeans(noisy[0], BURST_SIGMA, step=2, runtime=runtime)
    before = psnr(noisy[0], clean[0])
    got, alone = psnr(out, clean[0]), psnr(single, clean[0])
    print(f"burst {noisy.shape}: noisy {before:.2f} dB, one frame {alone:.2f} dB, "
          f"burst {got:.2f} dB")
    assert got > alone, f"burst {got:.2f} dB is no better than one frame {alone:.2f} dB"


def test_burst_reference_frame(runtime):
    noisy, clean = burst()
    out = clpatch.burst_denoise(noisy, BURST_SIGMA, reference=3, runtime=runtime)
    assert out.shape == noisy.shape[1:]
    before, after = psnr(noisy[3], clean[3]), psnr(out, clean[3])
    print(f"burst reference 3: noisy {before:.2f} dB, burst {after:.2f} dB")
    assert after > before + 3.0
    # It is frame 3 that was denoised, not frame 0.
    assert psnr(out, clean[3]) > psnr(out, clean[0]) + 1.0


def test_burst_colour(runtime):
    noisy, clean = burst(colour=True, seed=1)
    assert noisy.shape == (6, 56, 64, 3)
    out = clpatch.burst_denoise(noisy, BURST_SIGMA, runtime=runtime)
    assert out.shape == (56, 64, 3) and out.dtype == np.float32
    before, after = psnr(noisy[0], clean[0]), psnr(out, clean[0])
    print(f"colour burst {noisy.shape}: noisy {before:.2f} dB, burst {after:.2f} dB")
    assert after > before + 3.0


def test_burst_device_arrays_stay_on_the_device(runtime):
    noisy, _ = burst(seed=2)
    host = clpatch.burst_denoise(noisy, BURST_SIGMA, runtime=runtime)
    device = clpatch.burst_denoise(cla.to_device(runtime.queue, noisy), BURST_SIGMA,
                                   runtime=runtime)
    assert isinstance(device, cla.Array) and device.dtype == np.float32
    assert device.shape == noisy.shape[1:]
    assert_same(device.get(), host, runtime, "device burst")


def test_single_frame_burst(runtime):
    noisy, clean = burst(1, seed=3)
    assert noisy.shape == (1, 56, 64)
    out = clpatch.burst_denoise(noisy, BURST_SIGMA, runtime=runtime)
    assert out.shape == (56, 64) and out.dtype == np.float32
    assert psnr(out, clean[0]) > psnr(noisy[0], clean[0]) + 2.0


def test_burst_bad_arguments(runtime):
    noisy, _ = burst(3, 32, 40, seed=4)
    with pytest.raises(ValueError, match="reference"):
        clpatch.burst_denoise(noisy, BURST_SIGMA, reference=3, runtime=runtime)
    with pytest.raises(ValueError, match="reference"):
        clpatch.burst_denoise(noisy, BURST_SIGMA, reference=-1, runtime=runtime)
    with pytest.raises(ValueError, match=r"method must be one of \('nlmeans', 'bm3d'\)"):
        clpatch.burst_denoise(noisy, BURST_SIGMA, method="bm4d", runtime=runtime)
    # tile 2: the smallest tile holds 2 x 2 positions in each of the 3 frames.
    assert largest_k(32, 40, 8, 2, 3) == 12
    with pytest.raises(ValueError, match="largest valid k is 12"):
        clpatch.burst_denoise(noisy, BURST_SIGMA, tile=2, k=16, runtime=runtime)
    with pytest.raises(ValueError, match="k must"):
        clpatch.burst_denoise(noisy, BURST_SIGMA, k=33, runtime=runtime)
    with pytest.raises(ValueError, match=r"\(T, H, W\)"):
        clpatch.burst_denoise(noisy[0], BURST_SIGMA, runtime=runtime)
