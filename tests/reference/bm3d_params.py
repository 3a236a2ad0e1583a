"""Parameter tables of the BM3D / CBM3D oracle (tests/reference/bm3d.py, which documents the
algorithm and re-exports these names): the presets, the high-noise settings, the σ-dependent
stage-1 matching thresholds and `stage_params`, which checks a preset plus overrides into one
`StageParams` per stage.

Nothing is imported from clpatch: the oracle states its own parameter tables, so that a
mistake in the library's cannot hide in both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_PATCH, MAX_GROUP, MAX_WINDOW = 16, 32, 127

#: The presets: "fast" = Davy–Ehret's transforms and thresholds (their Table 7) with 16
#: patches per group on steps 6 / 5 and windows 35 / 21; "reference" = the bm3d package's
#: default profile for white noise (the original BM3D's normal profile with stage-1 tau
#: 3000) on its staggered grid, with the exact noise variances of the group's 3-D
#: coefficients and the package's λ = 3.0, μ² = 0.4 tuned for them.
PRESETS: dict[str, dict[str, Any]] = {
    "fast": dict(patch_size=8, window=(35, 21), step=(6, 5), n=(16, 16),
                 transform_2d=("bior1.5", "dct"), transform_1d="hadamard",
                 tau_match=(2500.0, 400.0), lambda_3d=3.0, mu2=1.0, beta=2.0, stagger=False,
                 exact_variance=False, stages=2),
    "reference": dict(patch_size=8, window=39, step=3, n=(16, 32),
                      transform_2d=("bior1.5", "dct"), transform_1d="haar",
                      tau_match=(3000.0, 400.0), lambda_3d=3.0, mu2=0.4, beta=2.0, stagger=True,
                      exact_variance=True, stages=2),
}
PER_STAGE = ("patch_size", "window", "step", "n", "transform_2d", "transform_1d", "tau_match",
             "beta")

#: Above σ = 40 (0–255 units) these replace a preset's settings (explicit overrides still win):
#: "fast" takes BM3D.m's (Dabov et al.) high-noise matching thresholds and lambda
#: (tau_match = 25000, tau_match_wiener = 3500, lambda_thr3D = 2.8); "reference" keeps its
#: settings at every σ, as the bm3d package's default profile does (see
#: :func:`reference_stage1_tau`).
HIGH_NOISE_SIGMA = 40.0
HIGH_NOISE: dict[str, dict[str, Any]] = {
    "fast": dict(tau_match=(25000.0, 3500.0), lambda_3d=2.8),
}


def reference_stage1_tau(base: float, noise: float) -> float:
    """The "reference" preset's stage-1 matching threshold at σ = ``noise`` (0–255 units),
    any σ, for a noise-free threshold ``base`` (3000): ``base + 2σ²``. Two patches of the same
    content under independent noise lie 2σ² apart per pixel on average."""
    return float(base) + 2.0 * float(noise) ** 2


def fast_stage1_tau(noise: float) -> float:
    """The "fast" preset's stage-1 matching threshold at σ = ``noise`` (0–255 units) up to
    HIGH_NOISE_SIGMA: 2500 or 3.125·σ², whichever is larger (so 2500 up to σ = √800, 5000
    at σ = 40). Two patches of pure noise lie 2σ² apart per pixel on average, more than
    2500 from σ ≈ 35 on."""
    return max(2500.0, 3.125 * float(noise) ** 2)


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


def pair(name: str, value: Any) -> tuple[Any, Any]:
    """(stage 1, stage 2) values of a per-stage parameter: a scalar is both."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{name} must be a scalar or a (stage 1, stage 2) pair, got {value!r}")
        return tuple(value)
    return (value, value)


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return int(value)


def _number(name: str, value: Any, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value}")
    return value


def stage_params(preset: str = "fast", noise: float | None = None,
                 **overrides: Any) -> tuple[StageParams, StageParams, int]:
    """(stage-1 params, stage-2 params, number of stages) of a preset plus overrides.

    noise: σ in 0–255 units or None; above HIGH_NOISE_SIGMA the "fast" preset's HIGH_NOISE
    settings are its defaults, at or below it its stage-1 tau_match is
    :func:`fast_stage1_tau`; the "reference" preset's is :func:`reference_stage1_tau` at
    every σ (an explicit tau_match replaces both stages'). patch_size,
    window, step, n, transform_2d, transform_1d, tau_match and beta take a scalar (both
    stages) or a (stage 1, stage 2) pair; lambda_3d, mu2, stagger, exact_variance and stages
    one value;
    None keeps the preset's. A stage whose patch size is not 8 has the
    DCT as default 2-D transform (Bior1.5 exists on 8 points only).
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    cfg = dict(PRESETS[preset])
    if noise is not None and float(noise) > HIGH_NOISE_SIGMA and preset in HIGH_NOISE:
        cfg.update(HIGH_NOISE[preset])
    elif noise is not None and preset == "fast":
        cfg["tau_match"] = (fast_stage1_tau(noise), cfg["tau_match"][1])
    if noise is not None and preset == "reference":
        cfg["tau_match"] = (reference_stage1_tau(cfg["tau_match"][0], noise), cfg["tau_match"][1])
    for key, value in overrides.items():
        if key not in cfg:
            raise TypeError(f"unknown BM3D parameter {key!r}; accepted: {sorted(cfg)}")
        if value is not None:
            cfg[key] = value
    stages = _int("stages", cfg["stages"], 1, 2)
    for key in ("stagger", "exact_variance"):
        if not isinstance(cfg[key], (bool, np.bool_)):
            raise TypeError(f"{key} must be True or False, got {cfg[key]!r}")
    per = {key: pair(key, cfg[key]) for key in PER_STAGE}
    out = []
    for s in (0, 1):
        p = _int("patch_size", per["patch_size"][s], 2, MAX_PATCH)
        if p != 8 and overrides.get("transform_2d") is None:
            per["transform_2d"] = tuple("dct" if i == s else t
                                        for i, t in enumerate(per["transform_2d"]))
        if overrides.get("step") is None:       # the preset's step, capped at the patch size
            per["step"] = tuple(min(v, p) if i == s else v for i, v in enumerate(per["step"]))
        n = _int("n", per["n"][s], 1, MAX_GROUP)
        if n & (n - 1):
            raise ValueError(f"n must be a power of 2, got {n}")
        t2, t1 = per["transform_2d"][s], per["transform_1d"][s]
        if t2 not in ("dct", "bior1.5") or t1 not in ("hadamard", "haar"):
            raise ValueError(f"transforms must be dct/bior1.5 (2-D) and hadamard/haar (1-D), "
                             f"got {t2!r}, {t1!r}")
        if t2 == "bior1.5" and p != 8:
            raise ValueError(f"transform_2d='bior1.5' needs patch_size=8, got {p}")
        out.append(StageParams(
            stage=s + 1, patch_size=p, step=_int("step", per["step"][s], 1, p),
            window=_int("window", per["window"][s], 1, MAX_WINDOW), n=n,
            tau_match=_number("tau_match", per["tau_match"][s], positive=False),
            transform_2d=t2, transform_1d=t1, lambda_3d=_number("lambda_3d", cfg["lambda_3d"]),
            beta=_number("beta", per["beta"][s], positive=False), mu2=_number("mu2", cfg["mu2"]),
            stagger=bool(cfg["stagger"]), exact_variance=bool(cfg["exact_variance"])))
    return out[0], out[1], stages
