"""NumPy reference of clpatch's improved patchwise NL-means (the oracle of the kernels).

Written for clarity, in float64, from the definition in clpatch/nlmeans.py's docstring:
eq. 4 weights on the per-pixel mean squared distance, per-channel flat-patch test,
bilinear aggregation of the whole estimated patch, orthonormal opponent colour space.
With a guide image (KNLMeansCL's rclip) the search and the weights are the guide's (with the
guide's noise level guide_sigma), the averaged values and the flat-patch test the image's.
"""

from __future__ import annotations

import numpy as np

from .search import as_video, brute_force_search, grid

S3, S2, S6 = np.sqrt(3.0), np.sqrt(2.0), np.sqrt(6.0)


def to_opponent(vol: np.ndarray) -> np.ndarray:
    r, g, b = vol[..., 0], vol[..., 1], vol[..., 2]
    return np.stack([(r + g + b) / S3, (r - b) / S2, (r - 2 * g + b) / S6], axis=-1)


def from_opponent(vol: np.ndarray) -> np.ndarray:
    y, u, v = vol[..., 0] / S3, vol[..., 1] / S2, vol[..., 2] / S6
    return np.stack([y + u + v, y - 2 * v, y - u + v], axis=-1)


def bilinear(patch: int) -> np.ndarray:
    i = np.arange(patch)
    return (2 * np.minimum(i, patch - 1 - i) + 1) / patch


def nlmeans_reference(image: np.ndarray, sigma: float, *, patch_size: int, step: int, window: int,
                      k: int, h: float | None = None, flat_beta: float = 1.05,
                      temporal_window: int = 0, video: bool = False,
                      search_channels: str = "luminance", search=None, guide=None,
                      guide_sigma: float | None = None) -> np.ndarray:
    """Denoised float64 image of the input's shape.

    k: the number of neighbours of every reference patch (clpatch.nlmeans's k).
    search: optional (positions, distances) of the neighbours, shaped like clpatch's
    SearchResult for a video ((T, gy, gx, k, 3) / (T, gy, gx, k)); by default the brute-force
    reference search is run (on the opponent luminance for colour with "luminance").
    guide: optional image of the input's shape: the search runs on it (converted like the
    image) and the weights use its distances with guide_sigma (None: sigma) for sigma.
    """
    h = sigma if h is None else h
    if guide is None and guide_sigma is not None:
        raise ValueError("guide_sigma needs a guide")
    if guide is not None and np.shape(guide) != np.shape(image):
        raise ValueError(f"guide shape {np.shape(guide)} != image shape {np.shape(image)}")
    search_sigma = sigma if guide_sigma is None else guide_sigma
    vol = as_video(image, video)                       # (T, H, W, C)
    gvol = vol if guide is None else as_video(guide, video)
    frames, rows, cols, channels = vol.shape
    colour = channels == 3
    if colour:
        vol = to_opponent(vol)
        gvol = to_opponent(gvol)
    searched = gvol[..., :1] if colour and search_channels == "luminance" else gvol
    p = patch_size
    if search is None:
        _, _, distances, positions = brute_force_search(searched, p, step, window, k, "l2",
                                                        temporal_window=temporal_window, video=True)
    else:
        positions, distances = search
    gy, gx = grid(rows, p, step), grid(cols, p, step)
    norm = 1.0 / (p * p * searched.shape[-1])
    bw = bilinear(p)
    weight2d = bw[:, None] * bw[None, :]
    num = np.zeros((frames, rows, cols, channels))
    den = np.zeros((rows, cols))
    for t in range(frames):
        for a, ry in enumerate(gy):
            for b, rx in enumerate(gx):
                pos = positions[t, a, b]
                d = distances[t, a, b].astype(np.float64)
                w = np.exp(-np.maximum(d * norm - 2 * search_sigma ** 2, 0) / h ** 2)
                stack = np.stack([vol[q[0], q[1]:q[1] + p, q[2]:q[2] + p] if len(q) == 3 else
                                  vol[t, q[0]:q[0] + p, q[1]:q[1] + p] for q in pos])
                estimate = np.tensordot(w, stack, axes=1) / w.sum()     # (p, p, C)
                for c in range(channels):
                    values = stack[..., c]
                    if values.var() < flat_beta * sigma ** 2:
                        estimate[..., c] = values.mean()
                num[t, ry:ry + p, rx:rx + p] += weight2d[..., None] * estimate
                if t == 0:
                    den[ry:ry + p, rx:rx + p] += weight2d
    out = num / den[None, ..., None]
    if colour:
        out = from_opponent(out)
    if not video:
        out = out[0]
    return out.reshape(np.asarray(image).shape)
