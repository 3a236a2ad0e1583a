"""BM3D's parameters: presets, per-stage parameters and their checks, the aggregation
choice, fixed-point scales, the data range, the colour transform and the filter's layout
(what `clpatch.bm3d`, VBM3D and `clpatch explain` share)."""


from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.validate import check_bool, check_choice, check_float, check_int, stage_pair
from ..core.volumes import default_data_range
from ..match.window.params import MAX_WINDOW

AGGREGATIONS = ("fixed", "cas")
MAX_PATCH = 16
MAX_GROUP = 32
# Floor of the Wiener energy Σw² (stage 2 weights are 1 / (σ² max(Σw², floor))).
WIENER_ENERGY_FLOOR = 2.0 ** -10
# CBM3D's opponent colour transform and its exact inverse.
OPPONENT = np.array([[1 / 3, 1 / 3, 1 / 3], [1 / 2, 0, -1 / 2], [1 / 4, -1 / 2, 1 / 4]])
OPPONENT_INV = np.array([[1, 1, 2 / 3], [1, 0, -4 / 3], [1, -1, 2 / 3]])


@dataclass(frozen=True)
class StageParams:
    """Parameters of one BM3D stage (1: hard thresholding, 2: Wiener)."""

    stage: int
    patch_size: int
    step: int
    window: int
    n: int
    tau_match: float
    transform_2d: str
    transform_1d: str
    lambda_3d: float = 2.7
    beta: float = 2.0
    mu2: float = 1.0
    stagger: bool = False
    exact_variance: bool = False


PRESETS: dict[str, dict[str, Any]] = {
    # Davy–Ehret's design (their Table 7: Bior1.5/DCT, Hadamard, the thresholds 2500 / 400)
    # with 16 patches per group in both stages on a coarser grid (step 6, then 5) and a
    # wider stage-1 window (35; stage 2 keeps 21), and the hard threshold at 3.0σ. Chosen by
    # measurement against bm3d-triton on the 10 shared images × σ 5-100 (same noisy inputs):
    # Davy–Ehret's own settings (window 21, step 4, 8/8 patches) were up to 1.00 dB below it
    # on brick.png (a regular texture needs the larger groups and the wider window); these
    # are within 0.26 dB on every case, at 1.22× the kernel time on a 4608×3456 image (H100;
    # benchmarks/results/h100_session12.md; 3.0 beat 2.8, 2.9 and 3.1 there).
    "fast": dict(patch_size=8, window=(35, 21), step=(6, 5), n=(16, 16),
                 transform_2d=("bior1.5", "dct"), transform_1d="hadamard",
                 tau_match=(2500.0, 400.0), lambda_3d=3.0, mu2=1.0, beta=2.0, stagger=False,
                 exact_variance=False, stages=2),
    # The bm3d package's (Tampere's current implementation) default profile 'np' for white
    # noise: the original BM3D's normal profile with stage-1 tau_match 3000, on its
    # staggered grid, with the exact noise variances of a group's 3-D coefficients
    # (`exact_variance`, Mäkinen et al. 2020) and the package's lambda 3.0 / mu2 0.4 tuned
    # for them. Its stage-1 tau_match grows with the noise (`noise_distance_tau`).
    "reference": dict(patch_size=8, window=39, step=3, n=(16, 32),
                      transform_2d=("bior1.5", "dct"), transform_1d="haar",
                      tau_match=(3000.0, 400.0), lambda_3d=3.0, mu2=0.4, beta=2.0, stagger=True,
                      exact_variance=True, stages=2),
}

#: Noise level (σ in 0–255 units) above which a preset takes its high-noise settings.
HIGH_NOISE_SIGMA = 40.0
#: The settings that replace a preset's when σ > HIGH_NOISE_SIGMA (explicit arguments still
#: win). "fast": matching thresholds 25000 / 3500 and lambda 2.8 (those BM3D.m of Dabov et
#: al. takes above σ = 40) on Davy–Ehret's patches, grid and groups (at σ > 40 the noise
#: alone puts patches 2σ² > 3200 apart, so tau_match 2500 leaves groups of 1).
#: "reference" has none: like the bm3d package's default profile it keeps its normal
#: settings at every σ, its stage-1 threshold following the noise (NOISE_DISTANCE_TAU).
#: (BM3D.m's own switch, the 'vn' profile: patch_size=(8, 11), step=(4, 6), n=(32, 32),
#: tau_match=(25000, 3500), lambda_3d=2.8, reachable as arguments, is up to 1.0 dB above
#: the package on smooth images at σ = 100 and up to 0.2 dB below it on others at σ = 40.)
HIGH_NOISE: dict[str, dict[str, Any]] = {
    "fast": dict(tau_match=(25000.0, 3500.0), lambda_3d=2.8),
}

#: Presets whose stage-1 matching threshold adds the noise's share of a patch distance at
#: every σ: tau_match = the preset's + 2σ² (`noise_distance_tau`). Two patches of the same
#: content under independent noise of σ lie 2σ² apart per pixel on average, so the preset's
#: threshold keeps its meaning for the noise-free content. "reference": with it the preset
#: follows the bm3d package up to σ = 100 (PoCL, 256² crops of the shared images: −0.03,
#: −0.00, −0.04 dB on average at σ = 40, 60, 100, where the fixed 2500 and the 'vn' switch
#: gave −0.30, +0.07, +0.24; benchmarks/results/quality_bm3d_high.md).
NOISE_DISTANCE_TAU = ("reference",)
#: The noise's share of stage 1's threshold per unit of σ² in that rule.
NOISE_DISTANCE_PER_VARIANCE = 2.0

#: Presets whose stage-1 matching threshold grows with the noise up to HIGH_NOISE_SIGMA:
#: tau_match = max(the preset's, TAU_PER_VARIANCE · σ²), σ in 0–255 units (`noisy_tau`).
#: Pure noise puts two patches 2σ² apart (mean squared difference per pixel), so the fixed
#: 2500 (2σ² at σ ≈ 35) leaves most of the fast preset's groups with one patch as σ nears
#: 40; at σ = 40 tau 5000 instead of 2500 gained 0.27–0.84 dB on every shared image (PoCL,
#: benchmarks/quality_triton.py).
GROWING_TAU = ("fast",)
#: tau_match of stage 1 per unit of σ² in the rule above (5000 at σ = 40: 1.5625 · 2σ²).
TAU_PER_VARIANCE = 3.125
#: σ (0–255 units) up to which the rule keeps the preset's 2500: √(2500 / 3.125) = √800
#: ≈ 28.28; between it and HIGH_NOISE_SIGMA the settings depend on σ's exact value.
TAU_GROWTH_SIGMA = math.sqrt(PRESETS["fast"]["tau_match"][0] / TAU_PER_VARIANCE)


def noise_distance_tau(base: float, noise: float) -> float:
    """Stage 1's matching threshold of a NOISE_DISTANCE_TAU preset whose noise-free one is
    `base`, for noise of σ = `noise` in 0–255 units: base + 2σ² (3800 at σ = 20 for the
    reference preset's 3000, 23000 at σ = 100)."""
    return float(base) + NOISE_DISTANCE_PER_VARIANCE * noise * noise


def noisy_tau(base: float, noise: float) -> float:
    """Stage 1's matching threshold of a GROWING_TAU preset whose normal one is `base`, for
    noise of σ = `noise` in 0–255 units at most HIGH_NOISE_SIGMA: max(base, 3.125 σ²)."""
    return max(float(base), TAU_PER_VARIANCE * noise * noise)


_PER_STAGE = ("patch_size", "window", "step", "n", "transform_2d", "transform_1d", "tau_match",
              "beta")
TRANSFORMS_2D = ("dct", "bior1.5")
TRANSFORMS_1D = ("hadamard", "haar")


def merge_params(defaults: dict[str, Any], overrides: dict[str, Any],
                 what: str) -> tuple[dict[str, Any], int]:
    """(the defaults with the non-None overrides applied, patch size): unknown keys are a
    TypeError; with a patch size other than 8 the 2-D transform defaults to the DCT in both
    stages (Bior1.5 is defined on 8 points only)."""
    cfg = dict(defaults)
    for key, value in overrides.items():
        if key not in cfg:
            raise TypeError(f"unknown {what} parameter {key!r}; accepted: {sorted(cfg)}")
        if value is not None:
            cfg[key] = value
    p = check_int("patch_size", cfg["patch_size"], 2, MAX_PATCH)
    if p != 8 and overrides.get("transform_2d") is None:
        cfg["transform_2d"] = "dct"
    return cfg, p


def capped_steps(steps: tuple[Any, Any], sizes: tuple[int, int]) -> tuple[Any, Any]:
    """A default (step 1, step 2) lowered to each stage's patch size where it is larger
    (anything but an int is left for the step's check to refuse)."""
    return tuple(st if isinstance(st, bool) or not isinstance(st, int) else min(st, p)
                 for st, p in zip(steps, sizes, strict=True))


def group_and_transforms(per: dict[str, tuple[Any, Any]], s: int,
                         patch_size: int) -> tuple[int, str, str]:
    """(n, transform_2d, transform_1d) of stage s + 1, checked, from per-stage pairs."""
    n = check_int("k", per["n"][s], 1, MAX_GROUP)
    if n & (n - 1):
        raise ValueError(f"k must be a power of 2 (1, 2, 4, 8, 16 or 32), got {n}")
    t2, t1 = per["transform_2d"][s], per["transform_1d"][s]
    check_choice("transform_2d", t2, TRANSFORMS_2D)
    check_choice("transform_1d", t1, TRANSFORMS_1D)
    if t2 == "bior1.5" and patch_size != 8:
        raise ValueError(f"transform_2d='bior1.5' needs patch_size=8, got {patch_size}")
    return n, t2, t1


def preset_settings(preset: str, noise: float | None = None) -> dict[str, Any]:
    """The settings of a preset for noise of σ = `noise` in 0–255 units (None: the preset's
    normal settings): above HIGH_NOISE_SIGMA (40) its HIGH_NOISE settings (if any) replace
    them; at most 40, a GROWING_TAU preset ("fast") has the stage-1 tau_match `noisy_tau`
    (2500 up to σ ≈ 28.28, 3.125 σ² above: 5000 at σ = 40); a NOISE_DISTANCE_TAU preset
    ("reference") has the stage-1 tau_match `noise_distance_tau` (3000 + 2σ²) at every σ."""
    check_choice("preset", preset, sorted(PRESETS))
    cfg = dict(PRESETS[preset])
    if noise is None:
        return cfg
    noise = check_float("noise", noise)
    tau1, tau2 = cfg["tau_match"]
    if noise > HIGH_NOISE_SIGMA and preset in HIGH_NOISE:
        cfg.update(HIGH_NOISE[preset])
    elif preset in GROWING_TAU:
        cfg["tau_match"] = (noisy_tau(tau1, noise), tau2)
    if preset in NOISE_DISTANCE_TAU:
        cfg["tau_match"] = (noise_distance_tau(tau1, noise), tau2)
    return cfg


def settings_note(preset: str, noise: float | None) -> str:
    """What the noise level changes in a preset's settings, for one-line descriptions: ""
    (its normal settings), else " (high-noise settings, stage-1 tau 25000)" or
    " (stage-1 tau 5000)" (the fast preset). A NOISE_DISTANCE_TAU preset's stage-1 tau
    (reference: 3000 + 2σ²) follows σ at every level as its one rule: not noted."""
    cfg = preset_settings(preset, noise)
    notes = (["high-noise settings"]
             if preset in HIGH_NOISE and noise is not None and noise > HIGH_NOISE_SIGMA else [])
    tau = cfg["tau_match"][0]
    if preset not in NOISE_DISTANCE_TAU and tau != PRESETS[preset]["tau_match"][0]:
        notes.append(f"stage-1 tau {tau:g}")
    return f" ({', '.join(notes)})" if notes else ""


def switch_noise(sigma: float, data_range: float | None, dtype: Any,
                 peak: float | None, preset: str | None = None) -> float | None:
    """σ in 0–255 units as the presets' settings see it: sigma · 255 / data_range, the data
    range being the given one, else `default_data_range` of `dtype` and `peak`. None when
    that needs the image's peak and none is given: a float image whose range may be 1 or
    255, where the two readings give `preset` different settings (`preset_settings`; None:
    any preset's). "fast" gets the same settings from both unless TAU_GROWTH_SIGMA/255
    (≈ 0.111) < sigma <= 40 (at most 28.28: the normal settings, above 40: the high-noise
    ones); "reference", whose stage-1 tau_match follows σ at every level, never does."""
    if data_range is None:
        if np.dtype(dtype).kind != "f" or peak is not None:
            data_range = default_data_range(dtype, peak)
        else:
            presets = sorted(PRESETS) if preset is None else [preset]
            if all(preset_settings(name, sigma) == preset_settings(name, sigma * 255.0)
                   for name in presets):
                return sigma    # the same settings for a range of 1 and of 255 alike
            return None
    return sigma * 255.0 / data_range


def stage_params(preset: str = "fast", noise: float | None = None,
                 **overrides: Any) -> tuple[StageParams, StageParams, int]:
    """(stage-1 params, stage-2 params, number of stages) for a preset plus overrides.

    noise: σ in 0–255 units (sigma · 255 / data_range), or None; above 40 the fast preset's
    high-noise settings (HIGH_NOISE) are its defaults, from 28.28 to 40 its stage-1
    tau_match grows as 3.125 σ²; the reference preset's is 3000 + 2σ² at every σ
    (`preset_settings`). patch_size, window, step, n, transform_2d, transform_1d, tau_match
    and beta take a scalar (both stages) or a (stage 1, stage 2) pair; lambda_3d, mu2,
    stagger, exact_variance (needs transform_1d "haar") and stages one value; None keeps
    the preset's. A stage whose patch size is not 8 defaults to the DCT as 2-D transform
    (Bior1.5 is defined on 8 points only), and the preset's step is capped at the patch size.
    """
    cfg = preset_settings(preset, noise)
    for key, value in overrides.items():
        if key not in cfg:
            raise TypeError(f"unknown BM3D parameter {key!r}; accepted: {sorted(cfg)}")
        if value is not None:
            cfg[key] = value
    # (n, the group size, is `k` to the caller: the errors name it so)
    per = {k: stage_pair("k" if k == "n" else k, cfg[k]) for k in _PER_STAGE}
    sizes = tuple(check_int("patch_size", v, 2, MAX_PATCH) for v in per["patch_size"])
    if overrides.get("transform_2d") is None:
        per["transform_2d"] = tuple(t if p == 8 else "dct"
                                    for t, p in zip(per["transform_2d"], sizes, strict=True))
    if overrides.get("step") is None:   # a preset's step never exceeds a given patch size
        per["step"] = capped_steps(per["step"], sizes)
    stages = check_int("stages", cfg["stages"], 1, 2)
    lam = check_float("lambda_3d", cfg["lambda_3d"])
    mu2 = check_float("mu2", cfg["mu2"])
    stagger = check_bool("stagger", cfg["stagger"])
    exact = check_bool("exact_variance", cfg["exact_variance"])
    out = []
    for s in (0, 1):
        p = sizes[s]
        n, t2, t1 = group_and_transforms(per, s, p)
        if exact and t1 != "haar":
            raise ValueError(f"exact_variance=True needs transform_1d='haar' (the variances "
                             f"follow the Haar tree of a group), got {t1!r}")
        out.append(StageParams(
            stage=s + 1, patch_size=p, step=check_int("step", per["step"][s], 1, p),
            window=check_int("window", per["window"][s], 1, MAX_WINDOW), n=n,
            tau_match=check_float("tau_match", per["tau_match"][s], positive=False),
            transform_2d=t2, transform_1d=t1, lambda_3d=lam,
            beta=check_float("beta", per["beta"][s], positive=False), mu2=mu2,
            stagger=bool(stagger), exact_variance=exact))
    return out[0], out[1], stages


def stagger_shifts(step: int) -> tuple[int, ...]:
    """Column shifts of a staggered grid, one per reference row in turn: row i's references
    sit i mod step columns right of a lattice column (as shifts left, kept >= 0), so the
    patch edges of neighbouring rows never line up. For step 3 this is the bm3d package's
    pattern (0, 1, 2 to the right); step 1 has nothing to stagger."""
    return tuple((-i) % step for i in range(step)) if step > 1 else ()


def choose_aggregation(profile: Any, aggregation: str | None = None) -> tuple[str, str]:
    """(strategy, reason) of BM3D's aggregation on a device."""
    if aggregation is not None:
        check_choice("aggregation", aggregation, AGGREGATIONS, allow_none=True)
        if aggregation == "fixed" and not profile.int64_atomics:
            raise ValueError("aggregation='fixed' needs 64-bit integer atomics "
                             "(cl_khr_int64_base_atomics), which this device lacks")
        return aggregation, "forced"
    if profile.int64_atomics:
        return "fixed", "64-bit integer atomics on fixed point: deterministic (Davy-Ehret 4.4.3)"
    return "cas", "no 64-bit atomics: float atomics emulated with compare-and-swap"


def channel_sigmas(sigma: float, colour: bool) -> np.ndarray:
    """The noise level of each filtered channel: σ, or σ·‖row‖ of the opponent transform
    for colour (CBM3D filters Y, U and V with their own noise levels)."""
    return sigma * np.sqrt((OPPONENT ** 2).sum(1)) if colour else np.array([sigma])


#: Bound of a stage-1 group weight with exact variances: 1 / Σ v over the coefficients
#: kept is at most 1 / v(3-D DC) <= 1 / ‖F_0‖⁴ (the DC's variance is at least that of one
#: patch's, as neighbouring patches' DC coefficients are positively correlated): 1.12
#: for Bior1.5, 1 for the DCT.
EXACT_STAGE1_WEIGHT_MAX = 2.0


def fixed_point_scales(stage: int, contributions: int, peak: float,
                       sigmas: np.ndarray, exact_variance: bool = False) -> tuple[float, float]:
    """(numerator, denominator) fixed-point scales of a stage: powers of two for which no
    pixel's sum can leave int64, given at most `contributions` patches per pixel, |values|
    <= peak, and the stage's largest group weight (stage 1: 1, or EXACT_STAGE1_WEIGHT_MAX
    with exact variances; stage 2: 1 / (σ² · Wiener floor))."""
    if stage == 1:
        w_max = EXACT_STAGE1_WEIGHT_MAX if exact_variance else 1.0
    else:
        w_max = 1.0 / (float(np.min(sigmas)) ** 2 * WIENER_ENERGY_FLOOR)
    den = contributions * w_max
    num = den * max(peak, 1e-30) * 16.0  # filtered values may overshoot the input
    num_scale, den_scale = (2.0 ** max(-100, min(100, math.floor(math.log2(2.0 ** 62 / b))))
                            for b in (num, den))
    return num_scale, den_scale


def filter_layout(params: StageParams, profile: Any) -> str:
    """How the fused filter kernel maps a group onto a work-group (for `explain`)."""
    p, n = params.patch_size, params.n
    zg = min(n, 8)
    x = int(profile.bank_padding)
    paper = p == 8 and zg == 8 and x in (1, 2, 4, 8)
    return (f"{zg * p} work-items per reference ({zg} patches x {p} columns, {n // zg} "
            f"slice(s)), transposes padded by x={x} (profile bank_padding), "
            + ("Algorithm 10's rotated layout" if paper else "a padded generic layout"))
