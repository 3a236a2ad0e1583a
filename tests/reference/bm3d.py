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
Not reproduced: the bm3d package's exact noise variances of the 3-D coefficients of
groups of overlapping patches (and its λ = 3.0 and μ² = 0.4 tuned for them; reachable
through ``lambda_3d`` and ``mu2`` with σ² for every coefficient).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .search import grid

# Nothing is imported from clpatch: the oracle states its own parameter tables, transforms
# and window, so that a mistake in the library's cannot hide in both.

# --------------------------------------------------------------------------- parameters

#: CBM3D's opponent transform (rows Y, U, V) and its exact inverse.
OPP = np.array([[1 / 3, 1 / 3, 1 / 3], [1 / 2, 0, -1 / 2], [1 / 4, -1 / 2, 1 / 4]])
OPP_INV = np.array([[1, 1, 2 / 3], [1, 0, -4 / 3], [1, -1, 2 / 3]])

#: Floor of the Wiener energy Σw² (stage 2 group weight ``1 / (mu2·σ² max(Σw², floor))``).
WIENER_ENERGY_FLOOR = 2.0 ** -10

MAX_PATCH, MAX_GROUP, MAX_WINDOW = 16, 32, 127

#: The presets: "fast" = Davy–Ehret's defaults (their Table 7); "reference" = the bm3d
#: package's default profile for white noise (the original BM3D's normal profile with
#: stage-1 tau 3000) on its staggered grid.
PRESETS: dict[str, dict[str, Any]] = {
    "fast": dict(patch_size=8, window=21, step=4, n=(8, 8), transform_2d=("bior1.5", "dct"),
                 transform_1d="hadamard", tau_match=(2500.0, 400.0), lambda_3d=3.0, mu2=1.0,
                 beta=2.0, stagger=False, stages=2),
    "reference": dict(patch_size=8, window=39, step=3, n=(16, 32),
                      transform_2d=("bior1.5", "dct"), transform_1d="haar",
                      tau_match=(3000.0, 400.0), lambda_3d=2.7, mu2=1.0, beta=2.0, stagger=True,
                      stages=2),
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
    stages) or a (stage 1, stage 2) pair; lambda_3d, mu2, stagger and stages one value;
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
    if not isinstance(cfg["stagger"], (bool, np.bool_)):
        raise TypeError(f"stagger must be True or False, got {cfg['stagger']!r}")
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
            stagger=bool(cfg["stagger"])))
    return out[0], out[1], stages


def stagger_shifts(step: int) -> tuple[int, ...]:
    """Column shifts (to the left) of a staggered grid's rows in turn: row i's references sit
    i mod step columns right of a lattice column; for step 3 that is (0, 2, 1), the bm3d
    package's pattern. Step 1 has nothing to stagger: ()."""
    return tuple((-i) % step for i in range(step)) if step > 1 else ()


# --------------------------------------------------------------------------- transforms


def kaiser_window(p: int, beta: float) -> np.ndarray:
    """p×p aggregation window: the outer product of the 1-D Kaiser window
    ``w[i] = I0(β √(1 − (2i/(p−1) − 1)²)) / I0(β)`` (``numpy.kaiser``) with itself."""
    w = np.kaiser(int(p), float(beta))
    return np.outer(w, w)


def _haar(n: int) -> np.ndarray:
    """Orthonormal Haar matrix, full decomposition, rows ``[a_L, d_L, …, d_1]`` (pywt's
    ``wavedec`` order) with ``d[k] = (x[2k] − x[2k+1]) / √2`` at every level."""
    if n == 1:
        return np.ones((1, 1))
    half = _haar(n // 2)
    return np.vstack([np.kron(half, [1.0, 1.0]), np.kron(np.eye(n // 2), [1.0, -1.0])]) / math.sqrt(2)


def _bior15() -> np.ndarray:
    """The 8-point Bior1.5 matrix of the Tampere BM3D (the bm3d package's hard-coded one).

    Rows 4–7: the finest details ``(x[2k] − x[2k+1]) / √2``. Rows 0–3: the 4-point transform
    ``[sum / 2, (second half − first half) / 2, (a0 − a1) / √2, (a2 − a3) / √2]`` of the
    level-1 approximation ``a[k] = c (128 (x[2k] + x[2k+1]) + 22 (x[2k+2] − x[2k+3])
    − 22 (x[2k−2] − x[2k−1]))`` (indices mod 8: the periodised CDF 1,5 low-pass √2/256·[3, −3,
    −22, 22, 128, 128, 22, −22, −3, 3] wrapped onto 8 samples, where its ±3 taps cancel), with
    c = √2/256 divided by the norm of that wrapped filter (‖·‖² = 17352/16384).
    """
    low = np.zeros((4, 8))
    for k in range(4):
        for offset, tap in ((0, 128), (1, 128), (2, 22), (3, -22), (-2, -22), (-1, 22)):
            low[k, (2 * k + offset) % 8] += tap
    low *= math.sqrt(2) / 256 / math.sqrt(17352 / 16384)
    r2 = 1 / math.sqrt(2)
    coarse = np.array([[0.5, 0.5, 0.5, 0.5], [-0.5, -0.5, 0.5, 0.5], [r2, -r2, 0, 0], [0, 0, r2, -r2]])
    fine = np.kron(np.eye(4), [r2, -r2])
    return np.vstack([coarse @ low, fine])


@cache
def transform_pair(name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(forward, inverse) matrices of a transform on n points, acting on column vectors:
    ``dct`` (orthonormal DCT-II), ``hadamard`` (Sylvester order, /√n), ``haar`` (any power of
    2) and ``bior1.5`` (n = 8; not orthogonal: its inverse is the matrix inverse)."""
    if name == "dct":
        k, i = np.arange(n)[:, None], np.arange(n)[None, :]
        forward = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * math.sqrt(2 / n)
        forward[0] = math.sqrt(1 / n)
    elif name == "hadamard":
        forward = np.ones((1, 1))
        while forward.shape[0] < n:
            forward = np.kron([[1.0, 1.0], [1.0, -1.0]], forward)
        forward = forward / math.sqrt(n)
    elif name == "haar":
        forward = _haar(n)
    elif name == "bior1.5" and n == 8:
        forward = _bior15()
    else:
        raise ValueError(f"no transform {name!r} on {n} points")
    if forward.shape != (n, n):
        raise ValueError(f"{name} needs a power of 2 size, got {n}")
    inverse = forward.T.copy() if name != "bior1.5" else np.linalg.inv(forward)
    forward.setflags(write=False)
    inverse.setflags(write=False)
    return forward, inverse


# --------------------------------------------------------------------------- block matching


def window_offsets(window: int) -> np.ndarray:
    """(dy, dx) offsets of the search window, (0, 0) first, then raster order."""
    half = window // 2
    r = np.arange(-half, half + 1)
    dy, dx = np.meshgrid(r, r, indexing="ij")
    offs = np.stack([dy.ravel(), dx.ravel()], -1)
    zero = (offs[:, 0] == 0) & (offs[:, 1] == 0)
    return np.concatenate([offs[zero], offs[~zero]])


def _box_sum(terms: np.ndarray, p: int) -> np.ndarray:
    s = np.zeros((terms.shape[0] + 1, terms.shape[1] + 1))
    s[1:, 1:] = terms.cumsum(0).cumsum(1)
    return s[p:, p:] - s[:-p, p:] - s[p:, :-p] + s[:-p, :-p]


def staggered_columns(cols: int, patch_size: int, step: int, shifts) -> np.ndarray:
    """(len(shifts), m) reference columns of a staggered grid, one row per shift s.

    Every row has the same m columns: the lattice ``j·step`` (j·step < last), each moved left
    by s and kept >= 0 (so column 0 is always a reference), then the border column
    ``last = cols - patch_size``. With ``shifts = (0,)`` this is the plain grid. Shifts
    (0, 2, 1) give the pattern of the ``bm3d`` PyPI package for step 3: consecutive rows of
    references start 0, 1 and 2 columns to the right of a multiple of 3, so the edges of
    neighbouring rows' patches never line up.
    """
    last = cols - patch_size
    if any(not 0 <= s < step for s in shifts) or not len(shifts):
        raise ValueError(f"shifts must be in [0, step), got {shifts}")
    if len(shifts) == 1 and shifts[0] == 0:
        return grid(cols, patch_size, step)[None]
    lattice = np.arange(0, last, step) if last > 0 else np.zeros(0, dtype=int)
    return np.array([np.concatenate([np.maximum(lattice - s, 0), [last]]) for s in shifts])


def block_match(guide: np.ndarray, patch_size: int, step: int, window: int, n: int, tau: float,
                shifts=(0,)):
    """Groups of similar patches on a single-channel guide (H, W).

    Returns (grid_y, grid_x, positions, distances, counts): positions (gy, gx, n, 2) as (y, x),
    ascending distance, the reference first; distances (gy, gx, n); counts (gy, gx) = the
    group size k (power of 2). Entries beyond k are the next candidates in order (or -1/inf
    when there are none) and are not part of the group. ``shifts``: reference row i uses
    the columns of shift ``shifts[i % len(shifts)]`` (:func:`staggered_columns`); grid_x is
    1-D for the plain grid, else (gy, gx) per row.
    """
    guide = np.asarray(guide, dtype=np.float64)
    rows, cols = guide.shape
    p = patch_size
    gy = grid(rows, p, step)
    table = staggered_columns(cols, p, step, tuple(shifts))
    gxs = table[np.arange(len(gy)) % len(table)]              # (gy, gx)
    offsets = window_offsets(window)
    vy, vx = rows - p + 1, cols - p + 1                     # valid top-left positions
    dist = np.full(gxs.shape + (len(offsets),), np.inf)
    for o, (dy, dx) in enumerate(offsets):
        ys = slice(max(0, -dy), min(rows, rows - dy))
        xs = slice(max(0, -dx), min(cols, cols - dx))
        if ys.start >= ys.stop or xs.start >= xs.stop:
            continue
        diff = np.zeros_like(guide)
        diff[ys, xs] = guide[ys, xs] - guide[ys.start + dy:ys.stop + dy, xs.start + dx:xs.stop + dx]
        d = _box_sum(diff * diff, p)[gy[:, None], gxs]
        ok = ((gy + dy >= 0) & (gy + dy < vy))[:, None] & ((gxs + dx >= 0) & (gxs + dx < vx))
        dist[..., o] = np.where(ok, d, np.inf)
    order = np.argsort(dist, axis=-1, kind="stable")[..., :n]
    best = np.take_along_axis(dist, order, -1)
    pos = np.stack([gy[:, None, None] + offsets[order, 0], gxs[:, :, None] + offsets[order, 1]], -1)
    pos = np.where(np.isfinite(best)[..., None], pos, -1)
    similar = np.sum(best <= tau * p * p, axis=-1)           # the reference (d = 0) always counts
    counts = 2 ** np.floor(np.log2(np.maximum(similar, 1))).astype(int)
    return gy, (gxs[0] if len(table) == 1 else gxs), pos, best, counts


# --------------------------------------------------------------------------- group filtering


def transform_3d(stack: np.ndarray, transform_2d: str, transform_1d: str) -> np.ndarray:
    """3-D spectrum of stacks (..., k, p, p): 2-D transform of each patch, then 1-D along k."""
    k, p = stack.shape[-3], stack.shape[-1]
    f2, _ = transform_pair(transform_2d, p)
    f1, _ = transform_pair(transform_1d, k)
    spec = np.einsum("ij,...zjl,ml->...zim", f2, stack, f2)
    return np.einsum("yz,...zim->...yim", f1, spec)


def inverse_transform_3d(spec: np.ndarray, transform_2d: str, transform_1d: str) -> np.ndarray:
    k, p = spec.shape[-3], spec.shape[-1]
    _, i2 = transform_pair(transform_2d, p)
    _, i1 = transform_pair(transform_1d, k)
    stack = np.einsum("zy,...yim->...zim", i1, spec)
    return np.einsum("ij,...zjl,ml->...zim", i2, stack, i2)


def filter_stack(stack: np.ndarray, sigma: float, *, stage: int = 1, oracle: np.ndarray | None = None,
                 transform_2d: str = "bior1.5", transform_1d: str = "hadamard",
                 lambda_3d: float = 2.7, mu2: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """BM3D's collaborative filtering of groups.

    stack: (..., k, p, p) noisy patches (leading axes: a batch of groups), k a power of 2.
    stage 1: hard thresholding at ``lambda_3d·sigma``; stage 2: Wiener shrinkage with
    ``oracle`` (same shape: the groups cut from the basic estimate).
    Returns (estimates (..., k, p, p), group weights (...)): the weight is 1/N (stage 1, N
    coefficients kept, 1 when none) or 1/(σ² Σ w²) (stage 2); the Kaiser window is applied
    at aggregation, not here.
    """
    stack = np.asarray(stack, dtype=np.float64)
    if stack.ndim < 3 or stack.shape[-1] != stack.shape[-2]:
        raise ValueError(f"stack must be (..., k, p, p), got shape {stack.shape}")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    spec = transform_3d(stack, transform_2d, transform_1d)
    axes = (-3, -2, -1)
    dc = np.zeros(spec.shape[-3:], dtype=bool)
    dc[0, 0, 0] = True                                      # the 3-D DC: never shrunk
    if stage == 1:
        keep = (np.abs(spec) > lambda_3d * sigma) | dc
        spec = np.where(keep, spec, 0.0)
        kept = keep.sum(axis=axes)
        weight = np.where(kept > 0, 1.0 / np.maximum(kept, 1), 1.0)
    elif stage == 2:
        if oracle is None:
            raise ValueError("stage 2 needs the oracle (the basic estimate's groups)")
        oracle = np.asarray(oracle, dtype=np.float64)
        if oracle.shape != stack.shape:
            raise ValueError(f"oracle shape {oracle.shape} != stack shape {stack.shape}")
        b2 = transform_3d(oracle, transform_2d, transform_1d) ** 2
        w = np.where(dc, 1.0, b2 / (b2 + mu2 * sigma * sigma))
        spec = spec * w
        energy = (w * w).sum(axis=axes)
        weight = 1.0 / (mu2 * sigma * sigma * np.maximum(energy, WIENER_ENERGY_FLOOR))
    else:
        raise ValueError(f"stage must be 1 or 2, got {stage}")
    return inverse_transform_3d(spec, transform_2d, transform_1d), weight


# --------------------------------------------------------------------------- stages


def _check_image(image) -> tuple[np.ndarray, bool]:
    img = np.asarray(image, dtype=np.float64)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.ndim == 2:
        return img[..., None], False
    if img.ndim == 3 and img.shape[-1] == 3:
        return img, True
    raise ValueError(f"image must be (H, W), (H, W, 1) or (H, W, 3), got shape {np.shape(image)}")


def match_groups(plane: np.ndarray, params: StageParams):
    """:func:`block_match` of one stage's parameters (its grid staggered when
    ``params.stagger``) on the single-channel image ``plane``."""
    shifts = (stagger_shifts(params.step) or (0,)) if params.stagger else (0,)
    return block_match(plane, params.patch_size, params.step, params.window, params.n,
                       params.tau_match, shifts)


def bm3d_stage(noisy: np.ndarray, sigmas, params: StageParams, basic: np.ndarray | None = None,
               groups=None) -> np.ndarray:
    """One BM3D stage on a working-space image (H, W, C) (opponent space for colour).

    sigmas: per-channel noise std (length C). Channel 0 is the guide: the groups are matched
    on ``noisy[..., 0]`` (stage 1) or ``basic[..., 0]`` (stage 2) unless ``groups`` (the output
    of :func:`block_match`) is given; ``params.stagger`` staggers the reference grid
    (:func:`staggered_columns` with clpatch's shift table). Returns the stage's estimate.
    """
    noisy = np.asarray(noisy, dtype=np.float64)
    rows, cols, channels = noisy.shape
    p = params.patch_size
    if rows < p or cols < p:
        raise ValueError(f"image {rows}×{cols} is smaller than the patch size {p}")
    sigmas = np.broadcast_to(np.asarray(sigmas, dtype=np.float64), (channels,))
    if params.stage == 2:
        if basic is None:
            raise ValueError("stage 2 needs the basic estimate")
        basic = np.asarray(basic, dtype=np.float64)
    if groups is None:
        groups = match_groups(noisy[..., 0] if params.stage == 1 else basic[..., 0], params)
    _, _, positions, _, counts = groups
    kaiser = kaiser_window(p, params.beta)
    num = np.zeros((channels, rows * cols))
    den = np.zeros((channels, rows * cols))
    a = np.arange(p)
    for k in np.unique(counts):
        sel = counts == k
        pos = positions[sel][:, :k]                               # (B, k, 2)
        ys, xs = pos[..., 0], pos[..., 1]
        flat = ((ys[..., None, None] + a[:, None]) * cols + xs[..., None, None] + a[None, :]).ravel()
        for c in range(channels):
            view = sliding_window_view(noisy[..., c], (p, p))
            oracle = None
            if params.stage == 2:
                oracle = sliding_window_view(basic[..., c], (p, p))[ys, xs]
            est, weight = filter_stack(view[ys, xs], sigmas[c], stage=params.stage, oracle=oracle,
                                       transform_2d=params.transform_2d,
                                       transform_1d=params.transform_1d, lambda_3d=params.lambda_3d,
                                       mu2=params.mu2)
            wk = weight[:, None, None, None] * kaiser              # (B, k, p, p) by broadcasting
            wk = np.broadcast_to(wk, est.shape)
            num[c] += np.bincount(flat, weights=(wk * est).ravel(), minlength=rows * cols)
            den[c] += np.bincount(flat, weights=wk.ravel(), minlength=rows * cols)
    return (num / den).T.reshape(rows, cols, channels)


def bm3d_reference(image, sigma: float, preset: str = "fast", *, guide=None,
                   guide_role: str = "match", noise: float | None = None,
                   **overrides) -> np.ndarray:
    """BM3D (grayscale) or CBM3D ((H, W, 3) RGB) of ``image``; float64, the input's shape.

    overrides: patch_size, step, window, n, transform_2d, transform_1d, tau_match, lambda_3d,
    mu2, beta (scalars or (stage 1, stage 2) pairs where per-stage), stagger, stages (1 = basic
    estimate only).
    guide: None or an image of ``image``'s shape; guide_role: "match" (both stages match
    their groups on the guide) or "oracle" (the guide is the basic estimate: stage 2 only,
    matched on the guide, the guide as Wiener oracle); see the module doc.
    noise: σ in 0–255 units that picks the preset's settings (None: sigma, 0–255 data
    assumed); above 40 the "fast" preset's HIGH_NOISE settings apply, below it its
    stage-1 threshold follows :func:`fast_stage1_tau`; the "reference" preset's follows
    :func:`reference_stage1_tau` at every σ.
    """
    sigma = float(sigma)
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma must be a finite number > 0, got {sigma}")
    if guide_role not in ("match", "oracle"):
        raise ValueError(f"guide_role must be 'match' or 'oracle', got {guide_role!r}")
    p1, p2, stages = stage_params(preset, sigma if noise is None else noise, **overrides)
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
    if work_guide is None:
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
