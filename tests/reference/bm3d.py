"""NumPy float64 reference of BM3D / CBM3D: the oracle of clpatch's BM3D kernels.

Written for clarity from Dabov et al. (2007) as summarised in Davy–Ehret §2.2/§4.4, with the
semantics fixed by the clpatch issue. Everything is in the image's own units and the
matching thresholds assume 0–255 data (sigma like 20).

Block matching (both stages, on one guide channel):
- reference patches: top-left corners on the grid ``0, step, 2·step, …`` plus the last
  position ``H−p`` (resp. ``W−p``), as clpatch's search (``tests/reference/search.grid``);
- candidates: every valid top-left within ``±window//2`` of the reference, clipped to the image;
- distance: sum of squared differences over the p×p patch; a candidate is *similar* when
  ``distance / p² <= tau`` (tau = 2500 (fast) or 3000 + 2σ² (reference) in stage 1 on the
  noisy image, 400 in stage 2 on the basic estimate, in 8-bit units²; the "fast" preset's
  stage 1 grows with σ, see :func:`fast_stage1_tau` and :func:`reference_stage1_tau`);
- the group holds the k most similar (ascending distance, ties by raster offset order with the
  reference itself first), k = the largest power of 2 <= min(n, number similar). The reference
  is always similar to itself, so k >= 1.

Group filtering (:func:`filter_stack`), per channel:
- 3-D transform: 2-D transform on each patch (``F @ P @ F.T``), then the 1-D transform of size
  k along the stack (k = 1: identity);
- stage 1: hard thresholding: every coefficient with ``|c| <= lambda_3d·σ`` is set to 0
  except the 3-D DC (coefficient [0, 0, 0]: the group's mean), which is always kept, so
  the mean level survives any σ (thresholding it darkened dark regions at σ = 100 and
  blackened the image at σ = 1000); group weight ``1 / N`` with N the number of
  coefficients kept, the DC included (so N >= 1);
- stage 2: empirical Wiener shrinkage ``w = B² / (B² + mu2·σ²)`` (mu2 = 1: the original's)
  with B the 3-D spectrum of the same group cut from the basic estimate (the oracle),
  applied to the noisy spectrum, except w = 1 on the 3-D DC; group weight
  ``1 / (mu2·σ² max(Σ w², 2⁻¹⁰))`` (clpatch's floor, see clpatch/denoise/bm3d.py);
- inverse 3-D transform. The threshold is uniform: the coefficients are thresholded as they
  come out of the transform, also for Bior1.5 whose rows 0 and 1 are not of unit norm
  (scaling the threshold by the row norms instead moved stage 1 by ~0.02 dB on camera).

Aggregation: numerator += weight·K·patch, denominator += weight·K on every pixel of every
filtered patch (K: p×p Kaiser window, β = 2); estimate = numerator / denominator.

CBM3D: RGB → the opponent space of the CBM3D paper (Dabov et al., ICIP 2007)
``Y = (R+G+B)/3, U = (R−B)/2, V = (R−2G+B)/4``; the groups of both stages are matched on Y
(the noisy Y in stage 1, the basic estimate's Y in stage 2) and shared by the three channels;
each channel is filtered with its own noise level ``σ_c = σ·‖row_c‖`` (σ/√3, σ/√2, σ√6/4)
and aggregated separately; the result goes back to RGB with the exact inverse.
Grid: references every ``step`` rows and columns plus the last row and column; with
``stagger`` (the reference preset) grid row i uses the columns of :func:`staggered_columns`
for the shift ``stagger_shifts(step)[i % step]`` (clpatch's shifts, the bm3d package's pattern
for step 3).
Guide image (``bm3d_reference(..., guide=, guide_role=)``, clpatch's ``guide=``): an image
of the input's shape, put through the same opponent transform for colour, whose (Y) plane
the groups are matched on: role ``"match"`` matches the groups of both stages on it (stage
1 instead of the noisy image, stage 2 instead of the basic estimate; the filtering and the
stage-2 oracle are unchanged); role ``"oracle"`` takes it as the basic estimate: stage 1 is
skipped, stage 2 matches on it and uses it as the Wiener oracle (two stages needed).
High noise: above σ = 40 (0–255 units) the "fast" preset takes the settings of
``HIGH_NOISE`` (BM3D.m's matching thresholds and λ); "reference" keeps its settings at
every σ as the bm3d package's default profile does, its stage-1 threshold ``3000 + 2σ²``
(:func:`reference_stage1_tau`). patch_size may differ per stage (BM3D.m's 'vn' profile,
11×11 patches in stage 2, is reachable through the overrides). At σ <= 40 the "fast"
preset's stage-1 threshold is ``max(2500, 3.125·σ²)`` (:func:`fast_stage1_tau`).
Exact variances (``exact_variance``, the reference preset, with its λ = 3.0 and μ² = 0.4):
:func:`group_variance` gives each 3-D coefficient's noise variance v (in units of σ²) for
the group's patch positions, from the formula in float64 (every pair of members, the full
transform matrices; the kernel's Haar-tree evaluation is not copied); stage 1 keeps
``c² > (lambda_3d·σ)²·v`` and weighs ``1 / Σ v`` over the coefficients kept, stage 2 shrinks
by ``B² / (B² + mu2·σ²·v)`` and weighs ``1 / (mu2·σ² max(Σ w² v, 2⁻¹⁰))`` (σ² for every
coefficient is v = 1, the formulas above).

Modules: this one holds the colour handling and :func:`bm3d_reference`, and re-exports the
parts from bm3d_params (presets, thresholds, :func:`stage_params`), bm3d_transforms (the
transform matrices, the 3-D transform, the Kaiser window), bm3d_grouping (the grid and
:func:`block_match`) and bm3d_stages (:func:`filter_stack`, :func:`bm3d_stage`).
"""

from __future__ import annotations

import numpy as np

from .bm3d_grouping import (
    block_match,
    given_groups,
    match_groups,
    stagger_shifts,
    staggered_columns,
    window_offsets,
)
from .bm3d_params import (
    HIGH_NOISE,
    HIGH_NOISE_SIGMA,
    MAX_GROUP,
    MAX_PATCH,
    MAX_WINDOW,
    PER_STAGE,
    PRESETS,
    StageParams,
    fast_stage1_tau,
    pair,
    reference_stage1_tau,
    stage_params,
)
from .bm3d_stages import WIENER_ENERGY_FLOOR, bm3d_stage, filter_stack, group_variance
from .bm3d_transforms import inverse_transform_3d, kaiser_window, transform_3d, transform_pair

# Nothing is imported from clpatch: the oracle states its own parameter tables, transforms
# and window, so that a mistake in the library's cannot hide in both.

__all__ = [
    "HIGH_NOISE", "HIGH_NOISE_SIGMA", "MAX_GROUP", "MAX_PATCH", "MAX_WINDOW", "OPP", "OPP_INV",
    "PER_STAGE", "PRESETS", "WIENER_ENERGY_FLOOR", "StageParams", "block_match",
    "bm3d_reference", "bm3d_stage", "fast_stage1_tau", "filter_stack", "group_variance",
    "inverse_transform_3d",
    "kaiser_window", "match_groups", "pair", "reference_stage1_tau", "stage_params",
    "stagger_shifts", "staggered_columns", "transform_3d", "transform_pair", "window_offsets",
]

#: CBM3D's opponent transform (rows Y, U, V) and its exact inverse.
OPP = np.array([[1 / 3, 1 / 3, 1 / 3], [1 / 2, 0, -1 / 2], [1 / 4, -1 / 2, 1 / 4]])
OPP_INV = np.array([[1, 1, 2 / 3], [1, 0, -4 / 3], [1, -1, 2 / 3]])


def _check_image(image) -> tuple[np.ndarray, bool]:
    img = np.asarray(image, dtype=np.float64)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.ndim == 2:
        return img[..., None], False
    if img.ndim == 3 and img.shape[-1] == 3:
        return img, True
    raise ValueError(f"image must be (H, W), (H, W, 1) or (H, W, 3), got shape {np.shape(image)}")


def bm3d_reference(image, sigma: float, preset: str = "fast", *, k=None, guide=None,
                   guide_role: str = "match", noise: float | None = None,
                   matches=None, **overrides) -> np.ndarray:
    """BM3D (grayscale) or CBM3D ((H, W, 3) RGB) of ``image``; float64, the input's shape.

    k: the largest group (clpatch.bm3d's k; a scalar or a (stage 1, stage 2) pair; None: the
    preset's), the ``n`` of :func:`stage_params` and :class:`StageParams`.
    overrides: patch_size, step, window, transform_2d, transform_1d, tau_match, lambda_3d,
    mu2, beta (scalars or (stage 1, stage 2) pairs where per-stage), stagger, stages (1 = basic
    estimate only).
    guide: None or an image of ``image``'s shape; guide_role: "match" (both stages match
    their groups on the guide) or "oracle" (the guide is the basic estimate: stage 2 only,
    matched on the guide, the guide as Wiener oracle); see the module doc.
    noise: σ in 0–255 units that picks the preset's settings (None: sigma, 0–255 data
    assumed); above 40 the "fast" preset's HIGH_NOISE settings apply, below it its
    stage-1 threshold follows :func:`fast_stage1_tau`; the "reference" preset's follows
    :func:`reference_stage1_tau` at every σ.
    matches: None, or a (stage 1, stage 2) pair of given matches (positions, distances) on
    the stage's plain grid, or None for a stage that matches as usual: the stage's groups
    are :func:`given_groups` of them (grayscale, no guide).
    """
    sigma = float(sigma)
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma must be a finite number > 0, got {sigma}")
    if guide_role not in ("match", "oracle"):
        raise ValueError(f"guide_role must be 'match' or 'oracle', got {guide_role!r}")
    if "n" in overrides:
        raise TypeError("bm3d_reference takes the largest group as k, not n")
    p1, p2, stages = stage_params(preset, sigma if noise is None else noise, n=k, **overrides)
    img, colour = _check_image(image)
    work_guide = None
    if guide is not None:
        if np.shape(guide) != np.shape(image):
            raise ValueError(f"guide shape {np.shape(guide)} != image shape {np.shape(image)}")
        work_guide, _ = _check_image(guide)
    elif guide_role != "match":
        raise ValueError("guide_role 'oracle' needs a guide")
    if colour:
        work = img @ OPP.T
        sigmas = sigma * np.sqrt((OPP ** 2).sum(1))
        if work_guide is not None:
            work_guide = work_guide @ OPP.T
    else:
        work = img
        sigmas = np.array([sigma])
    if matches is not None:
        if colour or work_guide is not None:
            raise ValueError("given matches are for grayscale images without a guide")
        rows, cols = work.shape[:2]
        groups = [None if m is None else given_groups(m[0], m[1], sp.patch_size, sp.step, sp.n,
                                                      sp.tau_match, rows, cols)
                  for m, sp in zip(matches, (p1, p2), strict=True)]
        basic = bm3d_stage(work, sigmas, p1, groups=groups[0])
        out = basic if stages == 1 else bm3d_stage(work, sigmas, p2, basic=basic,
                                                   groups=groups[1])
    elif work_guide is None:
        basic = bm3d_stage(work, sigmas, p1)
        out = basic if stages == 1 else bm3d_stage(work, sigmas, p2, basic=basic)
    elif guide_role == "oracle":
        if stages != 2:
            raise ValueError("guide_role 'oracle' needs stages=2")
        out = bm3d_stage(work, sigmas, p2, basic=work_guide)      # matched on the guide's Y
    else:
        plane = work_guide[..., 0]
        basic = bm3d_stage(work, sigmas, p1, groups=match_groups(plane, p1))
        out = basic if stages == 1 else bm3d_stage(work, sigmas, p2, basic=basic,
                                                   groups=match_groups(plane, p2))
    if colour:
        return out @ OPP_INV.T
    return out.reshape(np.shape(image))
