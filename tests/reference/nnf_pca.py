"""Patch vectors, PCA model and projection of the NNF oracle: sections 1 and 2 of the
specification in tests/reference/nnf.py (which re-exports these names).

Patches: `as_image`, `corner_grid`, `patch_matrix` (patch vectors in (c, i, jj) order);
`fit_pca` (section 1: the seeded-subset float64 PCA); `project` (section 2: the reduced
coordinates, every float32 operation rounded separately). Imports nothing from clpatch.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

# ----------------------------------------------------------------------------- patches


def as_image(img) -> np.ndarray:
    """(H, W, C) float32 copy of an image (values as float32, no scaling)."""
    data = np.asarray(img).astype(np.float32)
    if data.ndim == 2:
        data = data[..., None]
    assert data.ndim == 3, f"image must be (H, W) or (H, W, C), got shape {data.shape}"
    return data


def corner_grid(img, p: int) -> tuple[int, int]:
    """(rows, columns) of patch top-left corners of an image for patch size p."""
    shape = np.shape(img)
    assert 1 <= p <= min(shape[0], shape[1]), f"patch size {p} does not fit image {shape}"
    return shape[0] - p + 1, shape[1] - p + 1


def patch_matrix(img, p: int) -> np.ndarray:
    """(N, d) float32: row y · Wc + x is the patch vector of corner (y, x); element
    j = (c · p + i) · p + jj holds img[y + i, x + jj, c]."""
    data = as_image(img)
    rows, cols = corner_grid(data, p)
    win = sliding_window_view(data, (p, p), axis=(0, 1))     # (rows, cols, C, p, p)
    return np.ascontiguousarray(win.reshape(rows * cols, -1), dtype=np.float32)


# ----------------------------------------------------------------------------- 1. PCA


def fit_pca(a, b, p: int, dims: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean32 (d,), W32 (d, dims)) float32: the PCA model of section 1."""
    pa, pb = patch_matrix(a, p), patch_matrix(b, p)
    assert pa.shape[1] == pb.shape[1], "a and b must have the same number of channels"
    d = pa.shape[1]
    assert 1 <= dims <= d, f"pca_dims={dims} outside [1, d={d}]"
    na, nb = pa.shape[0], pb.shape[0]
    n_all = na + nb
    rng = np.random.default_rng(seed)
    n_m = min(1000, n_all)
    picks = rng.choice(n_all, size=n_m, replace=False)
    both = np.concatenate([pa, pb], axis=0)          # index < na: a's q; else b's pid + na
    x = both[picks].astype(np.float64)
    mean = x.mean(axis=0)
    xc = x - mean
    cov = xc.T @ xc / max(n_m - 1, 1)
    w, v = np.linalg.eigh(cov)
    order = np.argsort(-w, kind="stable")            # descending; ties: lower eigh index first
    wm = v[:, order[:dims]].copy()
    for col in range(dims):
        big = int(np.argmax(np.abs(wm[:, col])))     # first index on ties
        if wm[big, col] < 0:
            wm[:, col] = -wm[:, col]
    return mean.astype(np.float32), wm.astype(np.float32)


# ----------------------------------------------------------------------------- 2. projection


def project(P: np.ndarray, mean32: np.ndarray, W32: np.ndarray) -> np.ndarray:
    """(N, dims) float32: r[q][k] = Σ_j ((P[q][j] − mean32[j]) · W32[j][k]), j ascending,
    each subtraction, product and addition rounded to float32 (no fused multiply-add)."""
    P = np.asarray(P, dtype=np.float32)
    mean32 = np.asarray(mean32, dtype=np.float32)
    W32 = np.asarray(W32, dtype=np.float32)
    n, d = P.shape
    assert mean32.shape == (d,) and W32.shape[0] == d
    out = np.empty((n, W32.shape[1]), dtype=np.float32)
    for k in range(W32.shape[1]):
        acc = np.zeros(n, dtype=np.float32)
        for j in range(d):
            centred = P[:, j] - mean32[j]            # float32 array − float32 scalar
            acc = acc + centred * W32[j, k]          # product rounded, then the sum rounded
        out[:, k] = acc
    return out
