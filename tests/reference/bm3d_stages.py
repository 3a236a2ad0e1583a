"""Collaborative filtering and one stage of the BM3D / CBM3D oracle (tests/reference/bm3d.py
documents both stages and re-exports these names): `filter_stack` (stage 1's hard
thresholding, stage 2's empirical Wiener shrinkage, with the group weights),
`group_variance` (the exact noise variances of a group's 3-D coefficients) and
`bm3d_stage` (match, filter and aggregate with the Kaiser window one working-space image).
Imports nothing from clpatch.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .bm3d_grouping import match_groups
from .bm3d_params import StageParams
from .bm3d_transforms import inverse_transform_3d, kaiser_window, transform_3d, transform_pair

#: Floor of the Wiener energy Σw² (stage 2 group weight ``1 / (mu2·σ² max(Σw², floor))``).
WIENER_ENERGY_FLOOR = 2.0 ** -10


def group_variance(positions: np.ndarray, patch_size: int, transform_2d: str,
                   transform_1d: str) -> np.ndarray:
    """Noise variances of the 3-D coefficients of groups under white noise of variance 1.

    positions: (..., k, 2) top-left (y, x) of each group's patches, in group order. The
    2-D coefficient (a, b) of the patch at (y, x) is Σ F[a, u] F[b, v] z[y + u, x + v], so
    two patches i, j of a group share noise where they overlap: the covariance of their
    coefficients (a, b) is r_a(y_j − y_i) · r_b(x_j − x_i), with r_a(d) = Σ_u F[a, u] F[a, u + d]
    (0 for |d| >= p). The 3-D coefficient (c, a, b) = Σ_i T[c, i] · coefficient (a, b) of patch i
    (T: the 1-D transform of size k) has variance Σ_i Σ_j T[c, i] T[c, j] r_a(dy_ij) r_b(dx_ij):
    ‖F_a‖² ‖F_b‖² when no two patches overlap (Mäkinen, Azzari and Foi, IEEE TIP 2020: the
    exact transform-domain variance the bm3d package computes). Returns (..., k, p, p).
    """
    positions = np.asarray(positions)
    k, p = positions.shape[-2], int(patch_size)
    f2 = np.asarray(transform_pair(transform_2d, p)[0])
    t1 = np.asarray(transform_pair(transform_1d, k)[0])
    lags = np.arange(-(p - 1), p)
    # r[a, d + p − 1] for d = −(p − 1) … p − 1, and 0 beyond.
    r = np.array([[np.dot(f2[a, max(0, -d):p - max(0, d)], f2[a, max(0, d):p + min(0, d)])
                   for d in lags] for a in range(p)])
    dy = positions[..., None, :, 0] - positions[..., :, None, 0]          # (..., i, j)
    dx = positions[..., None, :, 1] - positions[..., :, None, 1]
    near = (np.abs(dy) < p) & (np.abs(dx) < p)
    ra = np.where(near[..., None], r[:, np.clip(dy, 1 - p, p - 1) + p - 1].transpose(
        *range(1, dy.ndim + 1), 0), 0.0)                                  # (..., i, j, a)
    rb = np.where(near[..., None], r[:, np.clip(dx, 1 - p, p - 1) + p - 1].transpose(
        *range(1, dx.ndim + 1), 0), 0.0)
    return np.einsum("ci,cj,...ija,...ijb->...cab", t1, t1, ra, rb)


def filter_stack(stack: np.ndarray, sigma: float, *, stage: int = 1, oracle: np.ndarray | None = None,
                 transform_2d: str = "bior1.5", transform_1d: str = "hadamard",
                 lambda_3d: float = 2.7, mu2: float = 1.0,
                 variance: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """BM3D's collaborative filtering of groups.

    stack: (..., k, p, p) noisy patches (leading axes: a batch of groups), k a power of 2.
    stage 1: hard thresholding at ``lambda_3d·sigma``; stage 2: Wiener shrinkage with
    ``oracle`` (same shape: the groups cut from the basic estimate).
    Returns (estimates (..., k, p, p), group weights (...)): the weight is 1/N (stage 1, N
    coefficients kept, the 3-D DC included) or 1/(mu2·σ² max(Σ w², WIENER_ENERGY_FLOOR))
    (stage 2); the Kaiser window is applied at aggregation, not here.
    variance: None (σ² for every coefficient, as above) or each coefficient's noise variance
    in units of σ² (`group_variance`, broadcastable to the spectrum): stage 1 keeps
    ``|c| > lambda_3d·σ·√v`` and weighs 1 / Σ v over the coefficients kept (the DC
    included); stage 2 shrinks by ``B² / (B² + mu2·σ²·v)`` and weighs
    1/(mu2·σ² max(Σ w² v, WIENER_ENERGY_FLOOR)): each group's weight is the inverse of its
    estimate's noise variance up to a factor that is the same for every group of a channel.
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
    v = np.ones(spec.shape[-3:]) if variance is None else np.broadcast_to(variance, spec.shape)
    if stage == 1:
        keep = (spec * spec > (lambda_3d * sigma) ** 2 * v) | dc
        spec = np.where(keep, spec, 0.0)
        kept = np.where(keep, v, 0.0).sum(axis=axes)
        weight = 1.0 / kept         # the DC's variance is at least ‖F_0‖⁴ > 0: never 0
    elif stage == 2:
        if oracle is None:
            raise ValueError("stage 2 needs the oracle (the basic estimate's groups)")
        oracle = np.asarray(oracle, dtype=np.float64)
        if oracle.shape != stack.shape:
            raise ValueError(f"oracle shape {oracle.shape} != stack shape {stack.shape}")
        b2 = transform_3d(oracle, transform_2d, transform_1d) ** 2
        w = np.where(dc, 1.0, b2 / (b2 + mu2 * sigma * sigma * v))
        spec = spec * w
        energy = (w * w * v).sum(axis=axes)
        weight = 1.0 / (mu2 * sigma * sigma * np.maximum(energy, WIENER_ENERGY_FLOOR))
    else:
        raise ValueError(f"stage must be 1 or 2, got {stage}")
    return inverse_transform_3d(spec, transform_2d, transform_1d), weight


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
        variance = None
        if params.exact_variance:       # in batches: group_variance holds (B, k, k, p) arrays
            variance = np.concatenate([
                group_variance(pos[b:b + 256], p, params.transform_2d, params.transform_1d)
                for b in range(0, len(pos), 256)])
        for c in range(channels):
            view = sliding_window_view(noisy[..., c], (p, p))
            oracle = None
            if params.stage == 2:
                oracle = sliding_window_view(basic[..., c], (p, p))[ys, xs]
            est, weight = filter_stack(view[ys, xs], sigmas[c], stage=params.stage, oracle=oracle,
                                       transform_2d=params.transform_2d,
                                       transform_1d=params.transform_1d, lambda_3d=params.lambda_3d,
                                       mu2=params.mu2, variance=variance)
            wk = weight[:, None, None, None] * kaiser              # (B, k, p, p) by broadcasting
            wk = np.broadcast_to(wk, est.shape)
            num[c] += np.bincount(flat, weights=(wk * est).ravel(), minlength=rows * cols)
            den[c] += np.bincount(flat, weights=wk.ravel(), minlength=rows * cols)
    return (num / den).T.reshape(rows, cols, channels)
