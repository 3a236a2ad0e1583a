"""NumPy brute force of the exhaustive k-nearest-patch search (`clpatch.knn`) and of the
k nearest vectors (`clpatch.knn_vectors`): the oracle the engine is checked against.

Written for clarity, in float64, from the specification alone (nothing of clpatch is used).

Definitions
-----------
- Images are (H, W) or (H, W, C); they are taken through float32 (as the kernels see them)
  and then computed on in float64. A (H, W) image is one channel.
- Query patches: top-left corners (qy, qx) on the grid of each axis: 0, step, 2·step, …,
  plus the last valid position size − p when it is not already on the lattice (`grid`).
- Candidates: every valid patch of the reference image, top-left (cy, cx) with
  0 <= cy <= Hr − p and 0 <= cx <= Wr − p; its index is cy · (Wr − p + 1) + cx.
- Distances between a query patch Q and a candidate R (both p × p × C):
    "l2":   Σ over the patch pixels and channels of (Q − R)²;
    "l1":   Σ |Q − R|;
    "chamfer": Tang's one-way Chamfer distance Q → R (eq. 4): for every pixel (i, j) of Q,
            the smallest L∞ offset max(|i − x|, |j − y|) to a pixel (x, y) of R carrying
            the same label (the pixel's value; with several channels all channels must be
            equal), or 2·(p − 1) when no pixel of R carries it; summed over the p² pixels of Q;
    "chamfer_sym": chamfer(Q → R) + chamfer(R → Q).
- Result: for every query patch the k candidates of smallest key (distance, index), in
  ascending key order: equal distances go to the smaller index (row-major (cy, cx)).
- `knn_vectors_brute`: the same for rows of (N, D) queries against rows of (M, D)
  references, with metrics "l2" (sum of squared differences) and "l1"; ties by smaller row.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

METRICS = ("l2", "l1", "chamfer", "chamfer_sym")


def grid(size: int, patch_size: int, step: int) -> np.ndarray:
    """Top-left coordinates of the query patches along one axis: 0, step, … plus size − p."""
    last = size - patch_size
    values = list(range(0, last + 1, step))
    if values[-1] != last:
        values.append(last)
    return np.array(values, dtype=np.int64)


def as_image(image) -> np.ndarray:
    """(H, W, C) float64 copy of an image, through float32 as the kernels see it."""
    data = np.asarray(image).astype(np.float32).astype(np.float64)
    if data.ndim == 2:
        data = data[..., None]
    assert data.ndim == 3, f"image must be (H, W) or (H, W, C), got shape {data.shape}"
    return data


def _as_patch(patch) -> np.ndarray:
    data = np.asarray(patch, dtype=np.float64)
    return data[..., None] if data.ndim == 2 else data


def chamfer_pair(q, r) -> float:
    """Tang's one-way Chamfer distance from patch q to patch r ((p, p) or (p, p, C)),
    written as the definition reads (loops)."""
    q, r = _as_patch(q), _as_patch(r)
    p = q.shape[0]
    assert q.shape == r.shape and q.shape[1] == p, "patches must be square and alike"
    missing = 2 * (p - 1)
    total = 0
    for i in range(p):
        for j in range(p):
            best = missing
            for x in range(p):
                for y in range(p):
                    if np.array_equal(q[i, j], r[x, y]):
                        best = min(best, max(abs(i - x), abs(j - y)))
            total += best
    return float(total)


def _linf_offsets(p: int) -> np.ndarray:
    """(p, p, p, p): max(|i − x|, |j − y|) for query pixel (i, j) and candidate pixel (x, y)."""
    a = np.arange(p)
    di = np.abs(a[:, None, None, None] - a[None, None, :, None])
    dj = np.abs(a[None, :, None, None] - a[None, None, None, :])
    return np.maximum(di, dj)


def _chamfer_one_way(q: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """Chamfer from the patch q (p, p, C) to every patch of windows (..., p, p, C)."""
    p = q.shape[0]
    # equal[..., i, j, x, y]: pixel (i, j) of q has the label of pixel (x, y) of the window
    equal = np.all(q[:, :, None, None, :] == windows[..., None, None, :, :, :], axis=-1)
    cost = np.where(equal, _linf_offsets(p), 2 * (p - 1))
    return cost.min(axis=(-1, -2)).sum(axis=(-1, -2)).astype(np.float64)


def _chamfer_from_windows(windows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Chamfer from every patch of windows (..., p, p, C) to the patch q (the R → Q half)."""
    p = q.shape[0]
    # equal[..., x, y, i, j]: pixel (x, y) of the window has the label of pixel (i, j) of q
    equal = np.all(windows[..., :, :, None, None, :] == q[None, None, None, None, :, :, :],
                   axis=-1)
    cost = np.where(equal, _linf_offsets(p), 2 * (p - 1))
    return cost.min(axis=(-1, -2)).sum(axis=(-1, -2)).astype(np.float64)


def patch_windows(reference: np.ndarray, patch_size: int) -> np.ndarray:
    """(Hr − p + 1, Wr − p + 1, p, p, C) view of every candidate patch of a (H, W, C) image."""
    win = sliding_window_view(reference, (patch_size, patch_size), axis=(0, 1))
    return np.moveaxis(win, 2, -1)   # (ny, nx, C, p, p) -> (ny, nx, p, p, C)


def patch_distances(query, reference, patch_size: int, metric: str, qy: int, qx: int
                    ) -> np.ndarray:
    """float64 (Hr − p + 1, Wr − p + 1): distance from the query patch at (qy, qx) to every
    candidate of `reference` (None: the query image itself)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}")
    q_img = as_image(query)
    r_img = q_img if reference is None else as_image(reference)
    p = patch_size
    q = q_img[qy:qy + p, qx:qx + p]
    assert q.shape[:2] == (p, p), "query patch outside the query image"
    windows = patch_windows(r_img, p)
    if metric == "l2":
        diff = windows - q
        return (diff * diff).sum(axis=(-1, -2, -3))
    if metric == "l1":
        return np.abs(windows - q).sum(axis=(-1, -2, -3))
    # Chamfer: one candidate row at a time keeps the (p^4 · C) comparisons small.
    out = np.empty(windows.shape[:2])
    for cy in range(windows.shape[0]):
        row = windows[cy:cy + 1]
        d = _chamfer_one_way(q, row)
        if metric == "chamfer_sym":
            d = d + _chamfer_from_windows(row, q)
        out[cy] = d[0]
    return out


def smallest_keys(distances: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k smallest keys (distance, index) of a 1-D array, ascending."""
    index = np.arange(distances.size)
    order = np.lexsort((index, distances))
    return order[:k]


def knn_brute(query, reference, patch_size: int, k: int, metric: str = "l2", step: int = 1):
    """(positions int32 (gy, gx, k, 2) as (y, x), distances float64 (gy, gx, k)) of the
    k nearest candidates of every query patch on the grid (see the module doc)."""
    q_img = as_image(query)
    r_img = q_img if reference is None else as_image(reference)
    p = patch_size
    gy = grid(q_img.shape[0], p, step)
    gx = grid(q_img.shape[1], p, step)
    ncols = r_img.shape[1] - p + 1
    n_candidates = (r_img.shape[0] - p + 1) * ncols
    assert 1 <= k <= n_candidates, f"k={k} outside [1, {n_candidates}]"
    positions = np.empty((len(gy), len(gx), k, 2), dtype=np.int32)
    distances = np.empty((len(gy), len(gx), k))
    for a, qy in enumerate(gy):
        for b, qx in enumerate(gx):
            d = patch_distances(q_img, r_img, p, metric, int(qy), int(qx)).reshape(-1)
            best = smallest_keys(d, k)
            positions[a, b, :, 0] = best // ncols
            positions[a, b, :, 1] = best % ncols
            distances[a, b] = d[best]
    return positions, distances


def vector_distances(queries, references, metric: str = "l2") -> np.ndarray:
    """float64 (N, M): distance of every query row to every reference row ("cosine":
    1 - cos; "ip": minus the inner product, so that ascending is the inner product's
    descending order)."""
    q = np.asarray(queries).astype(np.float32).astype(np.float64)
    r = np.asarray(references).astype(np.float32).astype(np.float64)
    assert q.ndim == 2 and r.ndim == 2 and q.shape[1] == r.shape[1]
    if metric == "cosine":
        unit_q = q / np.linalg.norm(q, axis=1, keepdims=True)
        unit_r = r / np.linalg.norm(r, axis=1, keepdims=True)
        return 1.0 - unit_q @ unit_r.T
    if metric == "ip":
        return -(q @ r.T)
    out = np.empty((q.shape[0], r.shape[0]))
    for start in range(0, q.shape[0], 64):
        diff = q[start:start + 64, None, :] - r[None, :, :]
        if metric == "l2":
            out[start:start + 64] = (diff * diff).sum(-1)
        elif metric == "l1":
            out[start:start + 64] = np.abs(diff).sum(-1)
        else:
            raise ValueError(f"unknown metric {metric!r}")
    return out


def knn_vectors_brute(queries, references, k: int, metric: str = "l2"):
    """(indices int32 (N, k), distances float64 (N, k)): the k nearest reference rows of
    every query row, ascending, ties to the smaller row index ("ip": the k largest inner
    products, returned as they are, descending)."""
    d = vector_distances(queries, references, metric)
    assert 1 <= k <= d.shape[1], f"k={k} outside [1, {d.shape[1]}]"
    indices = np.empty((d.shape[0], k), dtype=np.int32)
    for row in range(d.shape[0]):
        indices[row] = smallest_keys(d[row], k)
    found = np.take_along_axis(d, indices.astype(np.int64), axis=1)
    return indices, -found if metric == "ip" else found
