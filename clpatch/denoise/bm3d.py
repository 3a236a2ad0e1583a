"""BM3D and CBM3D (Dabov et al. 2007; Davy–Ehret §2.2, §4.4): `bm3d` and `BM3DPlan`.

Two stages, each a windowed patch search (`clpatch.search`) followed by the fused filter
kernel of Davy–Ehret Algorithm 6 (one work-group per reference patch holds the whole group
in registers; the 3-D transform is three 1-D passes joined by the local-memory transposes of
Algorithms 9 and 10, padded by the device profile's ``bank_padding``):

1. *basic estimate*: groups matched on the noisy image (similar when the mean squared
   difference per pixel is ``<= tau_match[0]`` in 8-bit units²: in the fast preset 2500,
   ``max(2500, 3.125σ²)`` up to σ = 40; in the reference preset ``3000 + 2σ²``: see
   below), hard thresholding of the 3-D spectrum at ``lambda_3d · σ`` (3.0σ in both presets),
   group weight ``1 / kept coefficients``;
2. *final estimate*: groups matched on the basic estimate (``tau_match[1]`` = 400), empirical
   Wiener shrinkage ``w = B² / (B² + mu2·σ²)`` with B the spectrum of the same group cut from
   the basic estimate (``mu2`` = 1, the original's, in the fast preset), group weight
   ``1 / (mu2·σ² · max(Σ w², 2⁻¹⁰))``.

Exact variances (``exact_variance``, the reference preset; Mäkinen, Azzari and Foi, IEEE TIP
2020, as the ``bm3d`` package): patches of a group that overlap share noise, so a 3-D
coefficient's noise variance is not σ² but ``σ²·v``, ``v = Σ_i Σ_j T[c,i] T[c,j]
r_a(dy_ij) r_b(dx_ij)`` (T the Haar transform along the group, ``r_a(d) = Σ_u F[a,u]
F[a,u+d]`` the lag products of 2-D transform row a, dy, dx the members' offsets; ``‖F_a‖²
‖F_b‖²`` when no two overlap). The kernel computes it per group over the Haar tree (each
pair's covariance counted once, at the node where the two members part). Stage 1 keeps
``|c| > lambda_3d·σ·√v`` and weighs ``1 / Σ v`` over the coefficients kept; stage 2
shrinks by ``B² / (B² + mu2·σ²·v)`` and weighs ``1 / (mu2·σ² · max(Σ w² v, 2⁻¹⁰))``:
each group's weight is the inverse of its estimate's noise variance. With them the preset
takes the package's ``lambda_3d`` 3.0 and ``mu2`` 0.4 (tuned for exact variances). It
costs 19 % more kernel time on a 4608×3456 image (H100: 133 → 158 ms; the stage-2 filter
55 → 79 ms).

The mean level: the 3-D DC of every group (its mean) is never thresholded in stage 1 (it
counts as a kept coefficient) and passes stage 2 with ``w = 1``, so the estimate keeps the
image's mean level at any σ. (Thresholding it, as a literal reading of the original does,
zeroes groups whose mean is below ``lambda_3d·σ / (p·√k)``: dark regions darkened at
σ = 100 and the whole image went black at σ = 1000. At σ ≤ 40 the DC of natural images is
far above the threshold and nothing changes.)

Noise-dependent settings (σ in 0–255 units, ``sigma · 255 / data_range``, the data range
as the run resolves it; arguments given explicitly win over them):

- "reference" follows the ``bm3d`` package's default profile ('np', Mäkinen, Azzari and Foi
  2020) at every σ: no switch of profile, and a stage-1 ``tau_match`` of ``3000 + 2σ²``
  (`clpatch.denoise.bm3d_params.noise_distance_tau`): 3000 is the package's threshold,
  and ``2σ²`` is what independent noise adds on average to the distance of two patches,
  so the threshold keeps its meaning for the content at any σ (with the fixed 2500 the
  noise alone put patches apart beyond it from σ ≈ 35, and groups shrank to one patch).
  Against the package (PoCL, 256² crops of the ten shared images,
  benchmarks/results/quality_bm3d_high.md): +0.02, +0.03 and −0.01 dB on average at
  σ = 40, 60 and 100 (every image within −0.06 … +0.21 dB), where tau 2500 up to σ = 40
  and BM3D.m's high-noise profile above ('vn': 32 patches per group in both stages, stage
  1 on step 4 with ``tau_match`` 25000 and ``lambda_3d`` 2.8, stage 2 with 11×11 DCT
  patches on step 6 and ``tau_match`` 3500, σ² for every coefficient) gave −0.30, +0.07
  and +0.24 (−0.46 … +0.86). Those settings remain reachable as arguments
  (``patch_size=(8, 11), step=(4, 6), n=32, tau_match=(25000, 3500), lambda_3d=2.8,
  mu2=1.0, exact_variance=False``): at σ = 100 they are 0.24 dB above the package on
  average (up to 0.86 dB on smooth images), at σ = 40 0.05 dB below.
- "fast" takes the high-noise settings above σ = 40
  (`clpatch.denoise.bm3d_params.HIGH_NOISE`): BM3D.m's matching thresholds 25000 / 3500
  and ``lambda_3d`` 2.8 on its own patches, grid and groups; below, its stage-1
  ``tau_match`` grows with the noise: ``max(2500, 3.125σ²)``, 2500 up to σ = √800 ≈
  28.28 and 5000 at σ = 40 (`clpatch.denoise.bm3d_params.noisy_tau`; at σ = 40 it gained
  0.3–0.8 dB over 2500 on the shared images).

What still differs from the package (white noise, grayscale): it computes exact variances
for only the first k = 4 "layers" of a group's spectrum and approximates the others (how is
not in its Python code; its core is a binary library), where this filter computes every
coefficient's. On 256² crops of the ten shared images at σ = 5 … 100 (PoCL,
benchmarks/results/quality_bm3d_high*.md) the reference preset is within 0.05 dB of the
package in 44 of 60 cases: from −0.08 dB (natural photographs at σ = 5–10, where the
package with k = 32 would be 0.00–0.06 dB higher still) to +0.21 dB (brick.png at σ = 60;
on brick the package with k = 32 gained 0.07 dB on a 128² crop at σ = 20).

References lie on a grid of step ``step`` plus the last row and column; with ``stagger``
(the reference preset) grid row i's references sit i mod step columns right of the lattice
(column 0 and the last column stay references of every row), as in the ``bm3d`` package,
so the patch edges of neighbouring rows do not line up.

A group is the reference patch followed by its nearest neighbours in ascending distance;
its size is the largest power of 2 ≤ min(n, number of similar patches). Every filtered
patch is aggregated with its group's weight times a Kaiser window (β = 2) into a numerator
and a denominator; the estimate is their ratio.

The floor 2⁻¹⁰ of the Wiener energy (the original has none) bounds the weights, so the
deterministic fixed-point aggregation cannot overflow; it only matters for groups whose
oracle is ~0 everywhere (black, clipped regions), where every group is floored alike.

Colour ``(H, W, 3)`` is CBM3D: the opponent space ``Y = (R+G+B)/3, U = (R−B)/2,
V = (R−2G+B)/4``, groups matched on Y and shared by the three channels, each channel
filtered with its own noise level ``σ·‖row‖`` and aggregated with its own weights.

Aggregation: ``"fixed"`` (64-bit integer atomics on fixed point, bit-for-bit deterministic,
the default where the device has them) or ``"cas"`` (float atomics emulated with
compare-and-swap, any device). The matching thresholds are in units of a 0–255 image and
are rescaled by ``(data_range / 255)²``.

Guide image (``guide=``, KNLMeansCL's ``rclip``, BM3D-CUDA's ``ref``): an image of the
input's shape and units (e.g. a pre-filtered image, or another exposure) that the groups are
matched on, in the role ``guide_role``:

- ``"match"`` (default): the groups of BOTH stages are matched on the guide — stage 1 on it
  instead of the noisy image, stage 2 on it instead of the basic estimate. The hard
  thresholding and the Wiener filtering still act on the noisy image, and stage 2's Wiener
  oracle is still stage 1's basic estimate. With ``stages=1`` only stage 1's matching
  changes, so ``guide=image`` then gives exactly the unguided result; with two stages it
  does not (stage 2 then matches on the noisy image instead of the basic estimate).
- ``"oracle"``: the guide IS the basic estimate: stage 1 is skipped, and stage 2 matches
  its groups on the guide and takes its Wiener oracle (the spectra B) from it. It needs
  ``stages=2``; the device's own basic estimate (``stages=1``) as guide gives the two-stage
  result.

Colour: the guide goes through the same opponent transform; its Y plane is matched on, and
in the "oracle" role its three opponent channels are the basic estimate of the three
channels. The matching thresholds, data_range and the fixed-point peak come from the image
only, never from the guide. A guide of another dtype or kind of array than the image (NumPy
or device) is accepted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from ..core.buffers import BufferPool
from ..core.runtime import Runtime, resolve_runtime
from ..core.upload import Uploader
from ..core.validate import k_or_n
from ..core.volumes import Volume, as_volume, channels_last
from ..match.given import check_given
from ..match.matcher import available_candidates, check_search
from ..match.matches import usable_n
from ..match.window.config import SearchConfig
from .bm3d_guide import check_guide_role, guide_like
from .bm3d_params import PRESETS, stage_params, switch_noise
from .bm3d_plan import BM3DPlan
from .given import stage_label, stage_matches
from .strength import Strength

__all__ = ["BM3DPlan", "bm3d", "plan_for"]

#: BM3D plans kept per runtime (least recently used dropped first).
PLANS_KEPT = 4
#: Largest scratch band in which a device image's peak is measured before planning.
PEAK_SCRATCH_BYTES = 16 << 20


def bm3d(image: Any, sigma: float, *, preset: str = "fast", patch_size: int | None = None,
         step: Any = None, window: Any = None, k: Any = None, transform_2d: Any = None,
         transform_1d: Any = None, stages: int | None = None, lambda_3d: float | None = None,
         mu2: float | None = None, tau_match: Any = None, stagger: bool | None = None,
         exact_variance: bool | None = None,
         aggregation: str | None = None, data_range: float | None = None,
         channel_axis: int | None = None, variant: str | SearchConfig | None = None,
         search: str = "window", peak: float | None = None, guide: Any = None,
         guide_role: str = "match", matches: Any = None, runtime: Runtime | None = None,
         n: Any = None) -> Any:
    """Denoise an image with BM3D (grayscale) or CBM3D (RGB), Davy–Ehret's GPU design.

    image: (H, W), (H, W, 1) or (H, W, 3) RGB, any real dtype, NumPy or pyopencl array.
    sigma: standard deviation of the noise, in the image's units (20 for a 0–255 image).
    preset: "fast" (Davy–Ehret's design with larger groups: windows 35/21, steps 6/5,
        16/16 neighbours, Bior1.5/DCT, Hadamard) or "reference" (the original BM3D:
        window 39, step 3, 16/32 neighbours, Bior1.5/DCT, Haar, on the staggered grid: the
        bm3d package's default profile).
        The reference preset's stage-1 tau_match is 3000 + 2σ² at every σ (σ in 0–255
        units); the fast one's is 3.125σ² from σ ≈ 28.28 to 40 (5000 at 40), and above 40
        it takes its high-noise settings (see the module doc). Every other argument
        overrides the preset; patch_size, window, step, k, transform_2d ("bior1.5" | "dct"),
        transform_1d ("hadamard" | "haar") and tau_match take one value or a (stage 1,
        stage 2) pair.
    patch_size: 8 (2 to 16; a stage whose size is not 8 uses the DCT; the preset's step is
        capped at it; a preset's size larger than a tiny image is lowered to the image's,
        down to 8); k: the group size, a power of 2 up to 32 (capped for tiny images; n is
        its deprecated name); stages: 2, or 1 for the basic estimate only; lambda_3d: hard
        threshold in units of sigma (3.0 in both presets); mu2: Wiener regularisation, w =
        B² / (B² + mu2·σ²) (fast 1, the original's; reference 0.4, the `bm3d` package's for
        white noise);
        tau_match: matching thresholds (fast 2500, 400; reference 3000 + 2σ², 400; see
        preset for the noise-dependent defaults), mean squared difference per pixel on a
        0–255 scale; stagger: the reference patches of consecutive grid rows start 0, 1,
        …, step − 1 columns right of the step lattice, so their edges never line up (the
        bm3d package's grid; True in the reference preset, False in the fast one).
    exact_variance: shrink every 3-D coefficient against its exact noise variance for the
        group's patch positions (see the module doc; True in the reference preset, False in
        the fast one; needs transform_1d="haar" in both stages).
    aggregation: None (device's best), "fixed" or "cas" (see the module doc).
    data_range: the image's nominal range, scaling the matching thresholds by
        (data_range / 255)²; None: 255 for 8-bit data and floats above 1, the dtype's
        maximum for wider integers, 1 for float images within [-1, 1].
    channel_axis: where the colour channels are (None: last for 3-D input).
    variant: the search variant (None: the scheduler's choice).
    search: the search engine the groups come from (`clpatch.match.matcher.searches()`):
        "window" (the exact windowed search) or "ann" (the tiled clustering ANN).
    peak: the largest |value| the fixed-point aggregation is scaled for, and that the default
        data_range is judged from (None: the image's own). Pieces of one larger image pass
        the whole image's peak so that each gives exactly what one call on the whole image
        would (`clpatch.dask` does); a ValueError is raised when the image exceeds it.
    guide: None, or an image of exactly `image`'s shape (before `channel_axis` is applied,
        which applies to it alike) in the image's units, any real dtype, NumPy, array-like
        or pyopencl array (of either kind, whatever the image's), finite, that the groups
        are matched on (see the module doc); it never sets data_range or peak.
    guide_role: what the guide replaces: "match" (default: the matching of both stages;
        the filtering and stage 2's Wiener oracle still use the noisy image and the basic
        estimate) or "oracle" (the guide is the basic estimate: stage 1 is skipped, stage 2
        matches on the guide and takes its Wiener oracle from it; needs stages=2). A role
        other than "match" needs a guide.
    matches: groups given instead of searched (not with search=, guide= or variant=): a
        `clpatch.Matches` for both stages, or a (stage 1, stage 2) pair whose None stage
        searches as usual (stage 2 on the basic estimate). Any engine's or a plan's, NumPy
        or device arrays, l2 distances (thresholded by the stage's tau_match), on the grid
        of the stage's patch_size and step (None takes the matches'; no staggered grid). A
        group is the reference patch, then its matches in order without it, k (lowered to
        the matches' k, a power of 2) at most. See `clpatch.match.given`.
    Returns float32 of the input's shape, NumPy for NumPy input, device array for device input.
    """
    strength = Strength.check(sigma, data_range=data_range, peak=peak)
    check_guide_role(guide_role, guide is not None, stages if isinstance(stages, int) else None)
    given = stage_matches(matches, search, guide=guide, variant=variant)
    original = image
    image, restore = channels_last(image, channel_axis, video=False)
    if guide is not None:       # checked against the caller's layout, then moved alike
        guide = guide_like(guide, original, channel_axis)
    volume = as_volume(image, video=False)
    if volume.channels not in (1, 3):
        raise ValueError(f"image must be (H, W), (H, W, 1) or (H, W, 3), got shape {image.shape}")
    rt = resolve_runtime(runtime, image)
    with plan_for(rt, volume.rows, volume.cols, volume.channels,
                  device_output=volume.on_device, preset=preset,
                  noise=noise_255(volume, strength, rt, preset), patch_size=patch_size,
                  step=step, window=window, n=k_or_n(k, n, None, "bm3d"),
                  transform_2d=transform_2d,
                  transform_1d=transform_1d, stages=stages, lambda_3d=lambda_3d, mu2=mu2,
                  tau_match=tau_match, stagger=stagger, exact_variance=exact_variance,
                  aggregation=aggregation, variant=variant, search=search,
                  matches=given) as plan:
        return restore(plan.apply(image, strength, guide=guide, guide_role=guide_role))


def noise_255(volume: Volume, strength: Strength, runtime: Runtime,
              preset: str | None = None) -> float:
    """σ in 0–255 units for the noise-dependent settings of `preset` (None: of any preset):
    the fast preset's high-noise switch above 40 and stage-1 tau_match from 28.28 to 40,
    the reference preset's stage-1 tau_match 3000 + 2σ². It is sigma · 255 / data_range,
    with the data range the run will use (the given one, else `default_data_range` of the
    dtype and the peak). The image is looked at only where the settings depend on it
    (`switch_noise` returns None): a float image without a given peak or data range (for
    "fast" only with 28.28/255 < sigma <= 40), whose range is 1 when every |value| is at
    most 1 (a sample of rows first, the whole image only when the sample stays within)."""
    noise = switch_noise(strength.sigma, strength.data_range, volume.dtype, strength.peak,
                         preset)
    if noise is None:
        data_range = 255.0 if _beyond_one(volume, runtime) else 1.0
        noise = strength.sigma * 255.0 / data_range
    return noise


def _probe(runtime: Runtime) -> tuple[BufferPool, Uploader]:
    pool = BufferPool(runtime.context)
    return pool, Uploader(runtime, pool)


def _beyond_one(volume: Volume, runtime: Runtime) -> bool:
    """Whether some |value| of the image exceeds 1 (NaN does not)."""
    if not volume.on_device:
        array = np.asarray(volume.array)
        rows = array.shape[-3] if volume.channels > 1 or array.ndim == 3 else array.shape[-2]
        sample = array[::max(1, rows // 32)]
        return bool(np.any(np.abs(sample) > 1.0) or np.any(np.abs(array) > 1.0))
    # A device image: its peak as the checking conversion measures it, a first band alone
    # first (a photograph's values exceed 1 there), then the rest band by band.
    with runtime.plan_cache().using(("bm3d-peak",), lambda: _probe(runtime), 1) as probe:
        pool, uploader = probe
        uploader.begin()
        row_bytes = volume.cols * volume.channels * 4
        band = max(1, min(volume.rows, PEAK_SCRATCH_BYTES // row_bytes))
        scratch = pool.get("peak", band * row_bytes)
        first = min(volume.rows, 16)
        uploader.convert(volume, 0, 1, 0, first, scratch)
        if uploader.peak() > 1.0:
            return True
        for a in range(first, volume.rows, band):
            uploader.convert(volume, 0, 1, a, min(volume.rows, a + band), scratch)
        return uploader.peak() > 1.0


@contextlib.contextmanager
def plan_for(runtime: Runtime, rows: int, cols: int, channels: int, *,
             device_output: bool = False, preset: str = "fast", noise: float | None = None,
             aggregation: str | None = None, variant: str | SearchConfig | None = None,
             search: str = "window", matches: tuple[Any, Any] = (None, None),
             **params: Any) -> Iterator[BM3DPlan]:
    """The runtime's cached BM3DPlan, this thread's for the `with` block
    (`PlanCache.using`), given `matches`, for images of (rows, cols, channels) and the
    parameters `bm3d` takes (`params`: patch_size, step, window, n, ..., None keeps the
    preset's; `noise`: σ in 0–255 units that picks the preset's defaults, see
    `stage_params`); n is lowered on images too small to offer it (the project's policy for n),
    and a preset's patch size (not a given one) on images smaller than it."""
    capped, count = sized_stages(rows, cols, preset=preset, noise=noise, search=search,
                                 matches=matches, **params)
    given = tuple(m is not None for m in matches)
    key = ("bm3d", rows, cols, channels, device_output, capped, count, aggregation, variant,
           search, given)
    with runtime.plan_cache().using(key, lambda: BM3DPlan(
            runtime, rows, cols, channels, capped, count, aggregation=aggregation,
            variant=variant, device_output=device_output, search=search, given=given),
            PLANS_KEPT) as plan:
        plan.use_matches(matches)
        yield plan



def sized_stages(rows: int, cols: int, *, preset: str, noise: float | None, search: str,
                 matches: tuple[Any, Any] = (None, None),
                 **params: Any) -> tuple[tuple[Any, Any], int]:
    """(the two stages' parameters, the stage count) of `bm3d`'s arguments on images of
    (rows, cols) (see `plan_for`), every argument checked. `matches`: a stage's given
    matches (`stage_matches`) set its patch size and step where the caller gave none, its
    group size at most their k, and no staggered grid."""
    check_search(search)
    if any(m is not None for m in matches):
        params = dict(params)
        preset_stages = stage_params(preset, noise, **params)[:2]
        for key in ("patch_size", "step"):
            if params.get(key) is None:
                params[key] = tuple(getattr(m if m is not None else sp, key)
                                    for m, sp in zip(matches, preset_stages, strict=True))
    p1, p2, count = stage_params(preset, noise, **params)
    side = min(rows, cols)
    if params.get("patch_size") is None and PRESETS[preset]["patch_size"] <= side:
        # The high-noise stage 2's 11x11 patches on images smaller than that.
        p1, p2 = (sp if sp.patch_size <= side else
                  replace(sp, patch_size=side, step=min(sp.step, side),
                          transform_2d=sp.transform_2d if side == 8 else "dct")
                  for sp in (p1, p2))
    for sp in (p1, p2)[:count]:
        if sp.patch_size > rows or sp.patch_size > cols:
            raise ValueError(f"patch_size {sp.patch_size} is larger than the image "
                             f"({rows}x{cols})")
    # Tiny images: n is capped at the candidates of a corner reference (a power of 2), or
    # at the k of the stage's given matches.
    capped = []
    for s, (sp, m) in enumerate(zip((p1, p2), matches, strict=True)):
        if m is None or s >= count:
            available = available_candidates(search, rows, cols, 1, sp.patch_size, sp.window, 0)
        else:
            available = check_given(m, rows=rows, cols=cols, frames=1, patch_size=sp.patch_size,
                                    step=sp.step, video=False,
                                    name=stage_label(matches, s)).k
            sp = replace(sp, stagger=False)
        capped.append(replace(sp, n=usable_n(sp.n, available, power_of_two=True)))
    return tuple(capped), count
