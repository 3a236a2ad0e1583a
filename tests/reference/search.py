"""NumPy brute force of the windowed patch search: the oracle every kernel variant is
checked against. Written for clarity, in float64, following DESIGN.md's semantics."""

from __future__ import annotations

import numpy as np


def grid(size: int, patch: int, step: int) -> np.ndarray:
    last = size - patch
    values = list(range(0, last + 1, step))
    if values[-1] != last:
        values.append(last)
    return np.array(values)


def as_video(image: np.ndarray, video: bool) -> np.ndarray:
    """(T, H, W, C) float64 view of an input, through float32 as the kernels see it."""
    data = np.asarray(image).astype(np.float32).astype(np.float64)
    if not video:
        data = data[None]
    if data.ndim == 3:
        data = data[..., None]
    return data


def box_sum(terms: np.ndarray, patch: int) -> np.ndarray:
    """Sums of terms over every patch×patch window (top-left indexed), via an integral image."""
    s = np.zeros((terms.shape[0] + 1, terms.shape[1] + 1))
    s[1:, 1:] = terms.cumsum(0).cumsum(1)
    return s[patch:, patch:] - s[:-patch, patch:] - s[patch:, :-patch] + s[:-patch, :-patch]


def distance_maps(vol: np.ndarray, t: int, patch: int, window: int, temporal_window: int,
                  metric: str):
    """Yield (dt, dy, dx, D) where D[y, x] is the distance between the patch at (t, y, x)
    and the patch at (t + dt, y + dy, x + dx), NaN where the candidate is not valid."""
    frames, rows, cols, _ = vol.shape
    half = window // 2
    for tc in range(max(0, t - temporal_window), min(frames, t + temporal_window + 1)):
        for dy in range(-half, half + 1):
            for dx in range(-half, half + 1):
                shifted = np.full(vol.shape[1:], np.nan)
                ys = slice(max(0, -dy), min(rows, rows - dy))
                xs = slice(max(0, -dx), min(cols, cols - dx))
                if ys.start < ys.stop and xs.start < xs.stop:
                    shifted[ys, xs] = vol[tc, ys.start + dy:ys.stop + dy,
                                          xs.start + dx:xs.stop + dx]
                diff = vol[t] - shifted
                terms = diff * diff if metric == "l2" else np.abs(diff)
                d = box_sum(np.nan_to_num(terms.sum(-1), nan=0.0), patch)
                valid = np.zeros_like(d, dtype=bool)
                yy = np.arange(rows - patch + 1)[:, None] + dy
                xx = np.arange(cols - patch + 1)[None, :] + dx
                valid[:] = (yy >= 0) & (yy <= rows - patch) & (xx >= 0) & (xx <= cols - patch)
                yield tc - t, dy, dx, np.where(valid, d, np.nan)


def brute_force_search(image: np.ndarray, patch: int, step: int, window: int, k: int,
                       metric: str = "l2", temporal_window: int = 0, video: bool = False):
    """Reference result: (grid_y, grid_x, distances, positions) shaped like clpatch's
    (with a leading frame axis only for video). Ties are broken by offset order: of
    candidates at equal distances, the one of smaller (dt, dy, dx), compared
    lexicographically (the smaller (t, y, x) of its top-left corner in raster order), comes
    first: the one tie rule every kernel variant follows on every device profile."""
    vol = as_video(image, video)
    frames, rows, cols, _ = vol.shape
    gy, gx = grid(rows, patch, step), grid(cols, patch, step)
    all_d, all_p = [], []
    for t in range(frames):
        ds, offsets = [], []
        for dt, dy, dx, d in distance_maps(vol, t, patch, window, temporal_window, metric):
            ds.append(d[np.ix_(gy, gx)])
            offsets.append((dt, dy, dx))
        stack = np.stack(ds, -1)                       # (gy, gx, candidates)
        stack = np.where(np.isnan(stack), np.inf, stack)
        order = np.argsort(stack, axis=-1, kind="stable")[..., :k]
        dist = np.take_along_axis(stack, order, -1)
        off = np.asarray(offsets)[order]               # (gy, gx, k, 3)
        pos = np.stack([t + off[..., 0], gy[:, None, None] + off[..., 1],
                        gx[None, :, None] + off[..., 2]], -1)
        all_d.append(dist)
        all_p.append(pos)
    distances = np.stack(all_d)
    positions = np.stack(all_p)
    if not video:
        return gy, gx, distances[0], positions[0, ..., 1:]
    return gy, gx, distances, positions


def patch_distance(vol: np.ndarray, a: tuple[int, int, int], b: tuple[int, int, int],
                   patch: int, metric: str) -> float:
    """Distance between the patches with top-left (t, y, x) a and b of a (T, H, W, C) volume."""
    pa = vol[a[0], a[1]:a[1] + patch, a[2]:a[2] + patch]
    pb = vol[b[0], b[1]:b[1] + patch, b[2]:b[2] + patch]
    diff = pa - pb
    return float((diff * diff).sum() if metric == "l2" else np.abs(diff).sum())
