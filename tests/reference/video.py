"""Synthetic test videos with camera motion, noise and the quality measures of the video tests
and benchmarks (NumPy only).

- :func:`motion_video`: crops of a still image following a smooth random sub-pixel camera
  trajectory, resampled with bilinear interpolation, deterministic for a seed;
- :func:`add_noise`: additive white Gaussian noise (float64, no clipping);
- :func:`psnr` and :func:`temporal_flicker` (mean absolute frame-to-frame change of the error).

Note that bilinear resampling low-passes each frame by an amount that depends on its
fractional shift (none for integer shifts), so frames of a clean video are not exact shifts of
each other; that is fine for denoising tests (the noise is added afterwards).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: Where :func:`load_image` looks for images: the repository's test copies, then the shared
#: project images.
IMAGE_DIRS = (Path(__file__).resolve().parents[1] / "data",
              Path(__file__).resolve().parents[3] / "shared" / "data" / "images")


def load_image(name: str, gray: bool = False) -> np.ndarray:
    """float64 image ``name`` (a path, or a stem like ``"camera"`` looked up in
    :data:`IMAGE_DIRS`), (H, W) or (H, W, 3) (an alpha channel is dropped); gray: convert
    colour to luminance with Pillow's ``"L"`` mode."""
    from PIL import Image

    path = Path(name)
    if not path.is_file():
        found = [d / f"{name}.png" for d in IMAGE_DIRS if (d / f"{name}.png").is_file()]
        if not found:
            raise FileNotFoundError(f"image {name!r} not found in {[str(d) for d in IMAGE_DIRS]}")
        path = found[0]
    with Image.open(path) as img:
        if img.mode.startswith(("L", "I", "F")) and img.mode != "LA":
            return np.asarray(img).astype(np.float64)        # single channel, 8/16/32 bit
        return np.asarray(img.convert("L" if gray else "RGB")).astype(np.float64)


def _trajectory(frames: int, max_speed: float, rng: np.random.Generator) -> np.ndarray:
    """(frames, 2) smooth random path starting at (0, 0), speeds <= max_speed px/frame.

    A random walk on the velocity (random initial direction and speed), smoothed by a moving
    average, rescaled so that its largest speed is ``max_speed`` times a random factor in
    [0.6, 1]."""
    angle = rng.uniform(0, 2 * np.pi)
    v0 = np.array([np.sin(angle), np.cos(angle)])
    walk = v0 + np.cumsum(0.35 * rng.standard_normal((frames + 4, 2)), axis=0)
    kernel = np.ones(5) / 5
    vel = np.stack([np.convolve(walk[:, i], kernel, mode="valid") for i in (0, 1)], -1)[:frames - 1]
    speed = np.linalg.norm(vel, axis=1).max(initial=0.0)
    if speed > 0:
        vel *= max_speed * rng.uniform(0.6, 1.0) / speed
    return np.concatenate([np.zeros((1, 2)), np.cumsum(vel, axis=0)])


def _bilinear_crop(image: np.ndarray, y0: float, x0: float, h: int, w: int) -> np.ndarray:
    """image sampled at (y0 + i, x0 + j), i < h, j < w (all inside the image)."""
    iy, ix = int(np.floor(y0)), int(np.floor(x0))
    fy, fx = y0 - iy, x0 - ix
    rows, cols = image.shape[:2]
    # The (+1) neighbours; clamped so that an exact edge coordinate (weight 0) stays in range.
    iy1, ix1 = min(iy + 1, rows - h), min(ix + 1, cols - w)
    a = image[iy:iy + h, ix:ix + w]
    b = image[iy:iy + h, ix1:ix1 + w]
    c = image[iy1:iy1 + h, ix:ix + w]
    d = image[iy1:iy1 + h, ix1:ix1 + w]
    return (1 - fy) * ((1 - fx) * a + fx * b) + fy * ((1 - fx) * c + fx * d)


def motion_video(image, frames: int = 24, size: tuple[int, int] = (256, 256), seed: int = 0,
                 max_speed: float = 1.5, margin: int | None = None):
    """A clean video of ``frames`` crops of ``size`` (h, w) following a smooth random camera path.

    image: (H, W) gray or (H, W, C) colour, any real dtype. The path is a smoothed random walk
    on the velocity with speeds up to ``max_speed`` pixels per frame (sub-pixel positions);
    its start is drawn uniformly among those for which every crop of the path lies inside the
    image at least ``margin`` pixels from its border (None: 0). Frame t samples the image at
    ``(trajectory[t, 0] + i, trajectory[t, 1] + j)`` by bilinear interpolation.

    Returns ``(clean (T, h, w[, C]) float64, trajectory (T, 2) float64)``, the trajectory
    being the top-left (y, x) of each crop in image coordinates. Deterministic for a seed.
    Raises ValueError when the image cannot hold the path's crops.
    """
    img = np.asarray(image, dtype=np.float64)
    if img.ndim not in (2, 3):
        raise ValueError(f"image must be (H, W) or (H, W, C), got shape {img.shape}")
    h, w = (int(s) for s in size)
    frames = int(frames)
    if frames < 1 or h < 1 or w < 1:
        raise ValueError(f"frames and size must be >= 1, got {frames}, {size}")
    if not max_speed >= 0:
        raise ValueError(f"max_speed must be >= 0, got {max_speed}")
    margin = 0 if margin is None else int(margin)
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    rng = np.random.default_rng(seed)
    path = _trajectory(frames, float(max_speed), rng)
    lo, hi = path.min(0), path.max(0)
    rows, cols = img.shape[:2]
    # Start s: s + lo >= margin and s + hi + (h − 1) <= rows − 1 − margin (resp. columns).
    low = margin - lo
    high = np.array([rows - 1 - margin - (h - 1), cols - 1 - margin - (w - 1)]) - hi
    if np.any(high < low):
        raise ValueError(f"image {rows}×{cols} is too small for {h}×{w} crops along a path "
                         f"spanning {hi[0] - lo[0]:.1f}×{hi[1] - lo[1]:.1f} pixels with margin "
                         f"{margin}")
    trajectory = path + rng.uniform(low, high)
    # Guard the bounds against rounding (the bilinear sampling must not leave the image).
    bound = np.array([rows - h - margin, cols - w - margin], dtype=np.float64)
    trajectory = np.clip(trajectory, margin, bound)
    clean = np.stack([_bilinear_crop(img, y, x, h, w) for y, x in trajectory])
    return clean, trajectory


def add_noise(video, sigma: float, seed: int = 0) -> np.ndarray:
    """video + sigma·N(0, 1) (float64, no clipping), deterministic for a seed."""
    video = np.asarray(video, dtype=np.float64)
    return video + float(sigma) * np.random.default_rng(seed).standard_normal(video.shape)


def psnr(a, b, peak: float = 255.0) -> float:
    """10·log10(peak² / mean squared difference) in dB (inf when equal)."""
    mse = np.mean((np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(peak * peak / mse))


def temporal_flicker(estimate, clean) -> float:
    """Mean over t >= 1 of the mean of ``|(e_t − c_t) − (e_{t−1} − c_{t−1})|``: how much the
    error changes from one frame to the next (0 for an error constant in time). Videos are
    (T, …) with T >= 2."""
    err = np.asarray(estimate, dtype=np.float64) - np.asarray(clean, dtype=np.float64)
    if err.ndim < 2 or err.shape[0] < 2:
        raise ValueError(f"temporal_flicker needs a video of at least 2 frames, got shape {err.shape}")
    return float(np.mean(np.abs(np.diff(err, axis=0))))
