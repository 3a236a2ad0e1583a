"""Shared by the VapourSynth tests: the module-level skip where VapourSynth is missing, and
small noisy videos of a moving camera (tests/reference/video.py)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.reference.video import add_noise, load_image, motion_video

try:
    import vapoursynth as vs
except ImportError:
    vs = None

SKIP_REASON = (f"VapourSynth is not installed: its wheels need Python >= 3.12 (this is "
               f"{sys.version_info.major}.{sys.version_info.minor}); "
               "benchmarks/gpu/issue41_vs.sh runs these tests on the GPU machine")


def require_vapoursynth() -> None:
    """Skip the calling test module where VapourSynth cannot be imported."""
    if vs is None:
        pytest.skip(SKIP_REASON, allow_module_level=True)


def gray_video(frames: int = 12, size: tuple[int, int] = (32, 40), sigma: float = 20.0,
               seed: int = 0) -> np.ndarray:
    """uint8 (T, H, W): a moving crop of camera.png plus Gaussian noise, rounded."""
    clean, _ = motion_video(load_image("camera", gray=True), frames=frames, size=size, seed=seed)
    return np.clip(np.rint(add_noise(clean, sigma, seed=seed)), 0, 255).astype(np.uint8)


def rgb_video(frames: int = 12, size: tuple[int, int] = (32, 40), sigma: float = 20.0,
              seed: int = 0) -> np.ndarray:
    """float32 (T, H, W, 3) in [0, 1] by VapourSynth's convention (noise not clipped)."""
    gray, _ = motion_video(load_image("camera", gray=True), frames=frames, size=size, seed=seed)
    clean = np.stack([gray, gray[:, ::-1], 255 - gray], axis=-1)
    return (add_noise(clean, sigma, seed=seed) / 255.0).astype(np.float32)


def to_uint8(values: np.ndarray) -> np.ndarray:
    """clpatch's float32 result in an 8-bit clip's format (as the filters write it)."""
    return np.clip(np.rint(values), 0, 255).astype(np.uint8)
