"""NumPy float64 references of burst denoising (clpatch.burst_denoise): NL-means and BM3D on
the candidates of the burst's reference frame drawn from every frame.

Both filters take the matches as given: positions (gy, gx, k, 3) as (t, y, x) and ascending
distances (gy, gx, k) of the reference frame's grid patches (`tests/reference/ann.ann`
computes them; so does clpatch's ANN). Only the reference frame is returned.

NL-means (:func:`burst_nlmeans_reference`), the rule of `tests/reference/nlmeans.py` with the
candidates taken from their own frames: frames (T, H, W) or (T, H, W, C) (C = 3: the
orthonormal opponent space, the distances those of the luminance plane); each grid
reference's estimate is the weighted mean of its k candidate patches (all channels), weights
``exp(−max(d / (p²·C_s) − 2σ², 0) / h²)`` with C_s the searched channels (1 for colour,
else C); a channel whose candidate values have variance ``< flat_beta·σ²`` takes their mean
instead; the estimates are aggregated into the reference frame with the bilinear patch
weights and normalised.

BM3D (:func:`burst_bm3d_reference`), grayscale: each reference's group is itself then its
matches (`tests/reference/vbm3d.build_groups`: the largest power of 2 ≤ the matches within
``tau·p²``), stage 1 hard thresholding (Bior1.5 for 8 × 8 patches, else the DCT; Hadamard
along the group), stage 2 Wiener shrinkage (DCT) on the same groups with the basic estimate
as oracle; every filtered patch aggregated into its own frame with its group's weight times
the Kaiser window (β = 2).

Imports nothing from clpatch.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .bm3d_stages import filter_stack
from .bm3d_transforms import kaiser_window
from .nlmeans import bilinear, from_opponent, to_opponent
from .search import grid
from .vbm3d import build_groups


def burst_nlmeans_reference(frames, sigma: float, positions, distances, *, reference: int,
                            patch_size: int, step: int, h: float,
                            flat_beta: float = 1.05) -> np.ndarray:
    """NL-means of frame `reference` of a burst on the given matches (see the module doc);
    float64 (H, W) or (H, W, C) like one frame."""
    data = np.asarray(frames).astype(np.float32).astype(np.float64)
    shape = data.shape[1:]
    if data.ndim == 3:
        data = data[..., None]
    _, rows, cols, channels = data.shape
    colour = channels == 3
    if colour:
        data = to_opponent(data)
    searched = 1 if colour else channels
    p = patch_size
    gy, gx = grid(rows, p, step), grid(cols, p, step)
    positions = np.asarray(positions)
    distances = np.asarray(distances, dtype=np.float64)
    if positions.shape[:2] != (len(gy), len(gx)) or positions.shape[-1] != 3:
        raise ValueError(f"positions {positions.shape} are not (gy, gx, k, 3) of the "
                         f"{len(gy)} x {len(gx)} grid")
    norm = 1.0 / (p * p * searched)
    bw = bilinear(p)
    weight2d = bw[:, None] * bw[None, :]
    num = np.zeros((rows, cols, channels))
    den = np.zeros((rows, cols))
    for a, ry in enumerate(gy):
        for b, rx in enumerate(gx):
            w = np.exp(-np.maximum(distances[a, b] * norm - 2 * sigma ** 2, 0) / h ** 2)
            stack = np.stack([data[t, y:y + p, x:x + p] for t, y, x in positions[a, b]])
            estimate = np.tensordot(w, stack, axes=1) / w.sum()            # (p, p, C)
            for c in range(channels):
                values = stack[..., c]
                if values.var() < flat_beta * sigma ** 2:
                    estimate[..., c] = values.mean()
            num[ry:ry + p, rx:rx + p] += weight2d[..., None] * estimate
            den[ry:ry + p, rx:rx + p] += weight2d
    out = num / den[..., None]
    if colour:
        out = from_opponent(out)
    return out.reshape(shape)


def burst_bm3d_reference(frames, sigma: float, positions, distances, *, reference: int,
                         grid_y, grid_x, stages: int = 2, patch_size: int = 8,
                         tau: float = 2500.0, lambda_3d: float = 3.0) -> np.ndarray:
    """Burst BM3D of grayscale `frames` (T, H, W) on the given matches of the reference
    frame's grid (grid_y, grid_x); `tau`: the matching threshold per pixel, `lambda_3d` the
    hard threshold in units of sigma; stages 1 returns the basic estimate (see the module
    doc). Float64 (H, W)."""
    noisy = np.asarray(frames, np.float64)
    count, rows, cols = noisy.shape
    p = patch_size
    members, sizes = build_groups(positions, distances, reference, grid_y, grid_x, tau, p)
    members = members.reshape(-1, *members.shape[-2:])
    sizes = sizes.ravel()
    kaiser = kaiser_window(p, 2.0)
    a = np.arange(p)

    def stage(number, basic):
        num = np.zeros(count * rows * cols)
        den = np.zeros(count * rows * cols)
        views = sliding_window_view(noisy, (p, p), axis=(1, 2))
        oracles = None if basic is None else sliding_window_view(basic, (p, p), axis=(1, 2))
        for k in np.unique(sizes):
            mem = members[sizes == k, :k]
            ts, ys, xs = mem[..., 0], mem[..., 1], mem[..., 2]
            flat = (((ts[..., None, None] * rows + ys[..., None, None] + a[:, None]) * cols)
                    + xs[..., None, None] + a[None, :]).ravel()
            transform = "bior1.5" if number == 1 and p == 8 else "dct"
            est, weight = filter_stack(views[ts, ys, xs], sigma, stage=number,
                                       oracle=None if oracles is None else oracles[ts, ys, xs],
                                       transform_2d=transform, lambda_3d=lambda_3d)
            wk = np.broadcast_to(weight[:, None, None, None] * kaiser, est.shape)
            num += np.bincount(flat, weights=(wk * est).ravel(), minlength=num.size)
            den += np.bincount(flat, weights=wk.ravel(), minlength=den.size)
        with np.errstate(invalid="ignore", divide="ignore"):   # pixels no group reached
            return (num / den).reshape(count, rows, cols)

    basic = stage(1, None)
    return basic[reference] if stages == 1 else stage(2, basic)[reference]
