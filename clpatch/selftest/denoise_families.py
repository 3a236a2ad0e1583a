"""Self-test families of the filters: NL-means with each aggregation the device supports (and
colour), BM3D (grayscale with each aggregation, the reference preset, colour) and VBM3D (each
video search variant, grayscale and colour), and the noise estimate, against
`oracles/nlmeans.py`, `bm3d.py`, `vbm3d.py` and `noise_level.py`.

Criteria are the tests': the filters' float32 outputs match the float64 oracles to the tests'
tolerances (NL-means |delta| <= 2e-3 + 1e-4 |x|, BM3D and VBM3D |delta| <= 1e-3 on 0-255
data); the VBM3D search, on an integer-valued video, equals the oracle's bit for bit; the
noise estimate matches its oracle to rtol 1e-4 (tests/denoise/test_estimate_sigma.py's).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ..core.runtime import Runtime
from ..denoise.bm3d import bm3d
from ..denoise.nlm_aggregation import AGGREGATIONS as NLM_AGGREGATIONS
from ..denoise.nlmeans import nlmeans
from ..denoise.noise_level import estimate_sigma
from ..denoise.vbm3d import VBM3DPlan, vbm3d
from ..denoise.vbm3d_params import VIDEO_SEARCHES, video_stage_params
from .compare import Family, Unsupported, close, host, matches_equal, shape
from .inputs import SIGMA, integer_video, noisy_half_flat, smooth_noisy, smooth_video
from .oracles import oracle

NLM_TOL = dict(rtol=1e-4, atol=2e-3)
FILTER_TOL = dict(rtol=0.0, atol=1e-3)

#: 8×8 patches on a step-4 grid: K = 2, so the atomic-free "buffers" aggregation applies.
NLM_PARAMS = dict(patch_size=8, step=4, window=21, k=16)
NLM_COLOUR_PARAMS = dict(patch_size=6, step=3, window=9, k=8)


def check_output(out: Any, want: np.ndarray, *, tol: dict[str, float]) -> list[str]:
    """A filter's output: float32, the input's shape, finite, and the oracle's values."""
    out = host(out)
    found = shape(out, want.shape, "output pixels", np.float32)
    if found:
        return found
    if not np.isfinite(out).all():
        found.append(f"{int((~np.isfinite(out)).sum())} of {out.size} output pixels are not finite")
    return found + close(out, want, what="output pixels", **tol)


def _needs_aggregation(runtime: Runtime, aggregation: str) -> None:
    if aggregation == "fixed" and not runtime.profile.int64_atomics:
        raise Unsupported("the device lacks 64-bit integer atomics (cl_khr_int64_base_atomics)")


def run_nlmeans(aggregation: str, runtime: Runtime) -> list[str]:
    """Grayscale, both averaging kernels, with one aggregation."""
    _needs_aggregation(runtime, aggregation)
    image = noisy_half_flat((29, 34), 1)
    want = oracle("nlmeans").nlmeans_reference(image, SIGMA, **NLM_PARAMS)
    found = []
    for averaging in ("columns", "naive"):
        out = nlmeans(image, SIGMA, aggregation=aggregation, averaging=averaging, runtime=runtime,
                      **NLM_PARAMS)
        found += [f"{averaging} averaging: {line}" for line in
                  check_output(out, want, tol=NLM_TOL)]
    return found


def run_nlmeans_colour(runtime: Runtime) -> list[str]:
    """Colour (opponent space, weights from the luminance), the device's default aggregation."""
    image = noisy_half_flat((24, 27, 3), 2)
    want = oracle("nlmeans").nlmeans_reference(image, SIGMA, **NLM_COLOUR_PARAMS)
    return check_output(nlmeans(image, SIGMA, runtime=runtime, **NLM_COLOUR_PARAMS), want,
                        tol=NLM_TOL)


#: Family -> (input, bm3d keyword arguments). The fast preset with its step 4 leaves the last
#: grid row and column off the lattice; the reference preset adds Haar, n 16/32, stagger.
BM3D_CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "bm3d/gray/fixed": (partial(smooth_noisy, (33, 37), 1), dict(aggregation="fixed")),
    "bm3d/gray/cas": (partial(smooth_noisy, (33, 37), 1), dict(aggregation="cas")),
    "bm3d/gray/reference": (partial(smooth_noisy, (30, 34), 2),
                            dict(preset="reference", window=15)),
    "bm3d/colour": (partial(smooth_noisy, (29, 33, 3), 3), {}),
}

BM3D_WHAT = {
    "bm3d/gray/fixed": "BM3D, grayscale, fixed-point aggregation (64-bit atomics)",
    "bm3d/gray/cas": "BM3D, grayscale, compare-and-swap aggregation",
    "bm3d/gray/reference": "BM3D, grayscale, reference preset (Haar, 16/32 patches, staggered grid)",
    "bm3d/colour": "CBM3D (colour, opponent space), the device's default aggregation",
}


def run_bm3d(name: str, runtime: Runtime) -> list[str]:
    make, kwargs = BM3D_CASES[name]
    kwargs = dict(kwargs)
    if "aggregation" in kwargs:
        _needs_aggregation(runtime, kwargs["aggregation"])
    image = make()
    out = bm3d(image, SIGMA, runtime=runtime, **kwargs)
    oracle_kwargs = {k: v for k, v in kwargs.items() if k not in ("aggregation", "preset")}
    want = oracle("bm3d").bm3d_reference(image.astype(np.float64), SIGMA,
                                         kwargs.get("preset", "fast"), **oracle_kwargs)
    return check_output(out, want, tol=FILTER_TOL)


def run_vbm3d_search(variant: str, runtime: Runtime) -> list[str]:
    """The predictive video search of every frame (5 frames, radius 2: the first and last
    references search fewer frames), exactly."""
    video = integer_video(5, 31, 38, 0)
    p1, p2, stages, radius = video_stage_params(temporal_radius=2)
    plan = VBM3DPlan(runtime, 31, 38, 1, (p1, p2), stages, radius, variant=variant)
    found = []
    for t in range(len(video)):
        positions, distances = plan.search(video, t)
        _, _, want_pos, want_dist = oracle("vbm3d").vbm3d_search(
            video.astype(np.float64), t, p1.patch_size, p1.step, p1.window_ref, p1.window_pred,
            p1.q, p1.n, radius)
        found += [f"frame {t}: {line}" for line in
                  matches_equal(positions, distances, want_pos, want_dist)]
    return found


#: Family -> (input, temporal radius). 8 frames at radius 1 wrap the plan's rings of frames.
VBM3D_CASES = {
    "vbm3d/gray": (partial(smooth_video, 8, 24, 27, 4), 1),
    "vbm3d/colour": (partial(smooth_video, 4, 22, 25, 5, 3), 1),
}


def run_vbm3d(name: str, runtime: Runtime) -> list[str]:
    make, radius = VBM3D_CASES[name]
    video = make()
    out = vbm3d(video, SIGMA, temporal_radius=radius, runtime=runtime)
    want = oracle("vbm3d").vbm3d_reference(video.astype(np.float64), SIGMA,
                                           temporal_radius=radius)
    return check_output(out, want, tol=FILTER_TOL)


def run_noise_level(runtime: Runtime) -> list[str]:
    """`estimate_sigma` of a colour image, one sigma per channel."""
    image = smooth_noisy((40, 52, 3), 7)
    want = np.asarray(oracle("noise_level").estimate_sigma(image), np.float64)
    got = np.asarray(estimate_sigma(image, runtime=runtime), np.float64)
    return shape(got, want.shape, "sigmas") or close(got, want, rtol=1e-4, atol=0.0,
                                                     what="sigma per channel")


FAMILIES = (
    *(Family(f"nlmeans/{aggregation}", partial(run_nlmeans, aggregation),
             f"NL-means, grayscale, {aggregation} aggregation, both averaging kernels")
      for aggregation in NLM_AGGREGATIONS),
    Family("nlmeans/colour", run_nlmeans_colour, "NL-means, colour (opponent space)"),
    *(Family(name, partial(run_bm3d, name), what) for name, what in BM3D_WHAT.items()),
    *(Family(f"vbm3d/search/{variant}", partial(run_vbm3d_search, variant),
             f"VBM3D predictive search, {variant} variant") for variant in VIDEO_SEARCHES),
    Family("vbm3d/gray", partial(run_vbm3d, "vbm3d/gray"), "VBM3D, grayscale"),
    Family("vbm3d/colour", partial(run_vbm3d, "vbm3d/colour"), "VBM3D, colour (opponent space)"),
    Family("noise_level", run_noise_level, "noise estimation (estimate_sigma), colour"),
)
