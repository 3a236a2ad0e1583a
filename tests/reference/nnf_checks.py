"""Accuracy checks beside the NNF oracle (tests/reference/nnf.py re-exports these names):
`exact_nnf`, the brute-force exact k nearest patches, and `reconstruct`, the voting
reconstruction of a from the first matches. Imports nothing from clpatch.
"""

from __future__ import annotations

import numpy as np

from .nnf_pca import as_image, corner_grid, patch_matrix

# ----------------------------------------------------------------------------- checks


def exact_nnf(a, b, *, patch_size: int, k: int):
    """(positions (Hac, Wac, k, 2) int32, distances (Hac, Wac, k) float32): the exact k
    nearest b patches of every a patch by full L2 (computed in float64 from the float32
    values, then cast to float32), ascending by (float32 distance, pid)."""
    p = patch_size
    img_a, img_b = as_image(a), as_image(b)
    assert img_a.shape[2] == img_b.shape[2], "a and b must have the same number of channels"
    hac, wac = corner_grid(img_a, p)
    _, wbc = corner_grid(img_b, p)
    pa = patch_matrix(img_a, p).astype(np.float64)
    pb = patch_matrix(img_b, p).astype(np.float64)
    nb = pb.shape[0]
    assert 1 <= k <= nb, f"k={k} outside [1, {nb}]"
    best_pid = np.empty((pa.shape[0], k), dtype=np.int64)
    best_dist = np.empty((pa.shape[0], k), dtype=np.float32)
    chunk = max(1, 4_000_000 // max(1, nb * pa.shape[1]))
    pids = np.broadcast_to(np.arange(nb), (chunk, nb))
    for start in range(0, pa.shape[0], chunk):
        diff = pa[start:start + chunk, None, :] - pb[None, :, :]
        d = (diff * diff).sum(-1).astype(np.float32)
        order = np.lexsort((pids[:d.shape[0]], d), axis=-1)[:, :k]
        best_pid[start:start + chunk] = order
        best_dist[start:start + chunk] = np.take_along_axis(d, order, axis=1)
    positions = np.stack([best_pid // wbc, best_pid % wbc], axis=-1).astype(np.int32)
    return positions.reshape(hac, wac, k, 2), best_dist.reshape(hac, wac, k)


def reconstruct(positions: np.ndarray, b, patch_size: int) -> np.ndarray:
    """Voting reconstruction (float32, shape (Hac + p − 1, Wac + p − 1[, C]) following b's
    rank): every pixel is the mean, over the query patches covering it, of the pixel at the
    same offset of the query's first match (k index 0); computed in float64."""
    p = patch_size
    img_b = np.asarray(b).astype(np.float32).astype(np.float64)
    two_d = img_b.ndim == 2
    if two_d:
        img_b = img_b[..., None]
    positions = np.asarray(positions)
    hac, wac = positions.shape[:2]
    cy = positions[:, :, 0, 0].astype(np.int64)
    cx = positions[:, :, 0, 1].astype(np.int64)
    out = np.zeros((hac + p - 1, wac + p - 1, img_b.shape[2]))
    count = np.zeros((hac + p - 1, wac + p - 1, 1))
    for i in range(p):
        for jj in range(p):
            out[i:i + hac, jj:jj + wac] += img_b[cy + i, cx + jj]
            count[i:i + hac, jj:jj + wac] += 1
    out = (out / count).astype(np.float32)
    return out[..., 0] if two_d else out
