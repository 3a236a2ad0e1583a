"""scikit-image's ``denoise_nl_means`` and ``estimate_sigma``, computed by clpatch.

``from clpatch.compat.skimage import denoise_nl_means, estimate_sigma`` in place of
``from skimage.restoration import ...``: the same argument names, defaults, scales and return
dtypes (scikit-image 0.19 and later, ``channel_axis``; checked against 0.26). What differs:

- NL-means is clpatch's (`clpatch.nlmeans`: Davy–Ehret's patchwise NL-means), not
  scikit-image's pixelwise one: the references are the patches of a grid of step
  ``max(1, patch_size // 3)`` (not every pixel's), each averages its `K` = 16 nearest patches
  of the search window (not every patch of it), whole estimated patches are aggregated,
  and a group of patches whose variance is below ``1.05 sigma²`` is replaced by its mean
  (clpatch's flat-patch test; only with ``sigma > 0``). ``fast_mode`` is accepted and does
  not change the algorithm. Borders are clpatch's (windows clipped to the image), not a
  reflect padding.
- The weights are scikit-image's: ``exp(-max(d - 2 sigma², 0) / h²)`` with ``d`` the mean
  squared difference per pixel and channel of two patches (colour distances on all
  channels, in clpatch's orthonormal opponent space, which keeps them). But the reference
  patch itself (d = 0) weighs 1 where scikit-image gives the centre pixel the largest weight
  of the others: with ``sigma=0`` (the default: nothing subtracted) the reference dominates
  and the result is much noisier than scikit-image's (a warning says so); pass the noise's
  ``sigma`` (e.g. from `estimate_sigma`) and ``h`` about ``0.8 * sigma``, as scikit-image
  advises for its fast mode. Measured (PoCL) on 64 x 64 grayscale crops of camera,
  astronaut, grass and coins at sigma = 0.1: with sigma given and h = 0.08, +0.5 to +1.8 dB
  above scikit-image (astronaut in colour +2.2 dB); with the defaults (sigma = 0,
  h = 0.1), -3.9 dB (camera), -1.2 (coins), +0.3 (astronaut), +1.5 (grass).
- Images: 2-D grayscale, or 2-D with channels (``channel_axis``, at most 8 channels);
  scikit-image's 3-D and 4-D volumes raise a ValueError. ``patch_size`` is at most 32 and
  ``patch_distance`` at most 63 (clpatch's window of ``2 * patch_distance + 1`` ≤ 127).
- ``estimate_sigma`` is clpatch's estimator (weak-texture patches and the eigenvalues of
  their covariance, `clpatch.estimate_sigma`), not the wavelet median absolute deviation:
  it is not inflated by fine texture, and needs at least 26 x 26 pixels. Like
  scikit-image's it works in the image's own units (no conversion of integer images), gives
  a float for a grayscale image, a list of floats per channel, or their plain mean with
  ``average_sigmas=True``.
"""

from __future__ import annotations

import math
import operator
import warnings
from typing import Any

import numpy as np

from clpatch import estimate_sigma as clpatch_estimate_sigma
from clpatch import nlmeans

__all__ = ["denoise_nl_means", "estimate_sigma", "img_as_float"]

#: clpatch's NL-means takes sigma > 0: scikit-image's sigma = 0 runs with this one, whose
#: 2 sigma² and flat-patch threshold are 0 in float32.
NO_NOISE = 1e-30
#: Nearest patches each reference averages (clpatch's default).
K = 16
#: Largest patch side and patch_distance clpatch's search takes.
MAX_PATCH_SIZE = 32
MAX_PATCH_DISTANCE = 63


def img_as_float(image: Any, preserve_range: bool = False) -> np.ndarray:
    """`image` as floats the way scikit-image's NL-means converts it: float16 to float32,
    float32 and float64 kept; other dtypes to float64, unsigned integers divided by the
    dtype's maximum, signed ones too and clipped at -1, booleans 0 and 1 (with
    ``preserve_range``: values kept)."""
    image = np.asarray(image)
    kind = image.dtype.kind
    if kind not in "biuf":
        raise TypeError(f"image must hold real numbers, got dtype {image.dtype}")
    if image.dtype == np.float16:
        return image.astype(np.float32)
    if image.dtype in (np.float32, np.float64):
        return image
    if kind == "f" or kind == "b" or preserve_range:
        return image.astype(np.float64)
    scaled = image.astype(np.float64) / float(np.iinfo(image.dtype).max)
    return np.maximum(scaled, -1.0) if kind == "i" else scaled


def _channels_last(image: np.ndarray, channel_axis: Any, what: str) -> tuple[np.ndarray, int | None]:
    """`image` with its channels last, and where they were (None: grayscale)."""
    if channel_axis is None:
        if image.ndim != 2:
            raise ValueError(f"{what}: clpatch takes 2-D images: with channel_axis=None the image "
                             f"must be (H, W), got shape {image.shape} (scikit-image's 3-D and "
                             "4-D volumes are not supported; for channels pass channel_axis)")
        return image, None
    try:
        axis = operator.index(channel_axis)
    except TypeError:
        raise TypeError(f"channel_axis must be an int or None, got {channel_axis!r}") from None
    if image.ndim != 3:
        raise ValueError(f"{what}: with channel_axis the image must be 2-D with channels (3 "
                         f"axes), got shape {image.shape} (volumes are not supported)")
    if not -3 <= axis < 3:
        raise ValueError(f"channel_axis must be in [-3, 2] for a 3-axis image, got {axis}")
    return np.moveaxis(image, axis, -1), axis


def _check_int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r}") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be from {low} to {high} for clpatch, got {value}")
    return value


def _check_number(name: str, value: Any, *, positive: bool) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, "
                         f"got {value}")
    return value


def denoise_nl_means(image: Any, patch_size: int = 7, patch_distance: int = 11, h: float = 0.1,
                     fast_mode: bool = True, sigma: float = 0.0, *, preserve_range: bool = False,
                     channel_axis: int | None = None) -> np.ndarray:
    """Non-local means denoising with scikit-image's signature, computed by `clpatch.nlmeans`.

    image: (H, W) grayscale, or 2-D with channels on ``channel_axis`` (at most 8). Converted
        like scikit-image: integer and boolean images to floats in [0, 1] ([-1, 1] signed)
        unless ``preserve_range``; float images as they are.
    patch_size: patch side (1 to 32). patch_distance: search radius: the window is
        ``2 * patch_distance + 1`` pixels wide (0 to 63).
    h: weight bandwidth (> 0) in the converted image's units; about ``0.8 * sigma`` with
        sigma given.
    fast_mode: accepted for compatibility; the algorithm is clpatch's either way.
    sigma: the noise's standard deviation (>= 0), subtracted in the weights as scikit-image
        does (``max(d - 2 sigma², 0)``) and clpatch's flat-patch level (``1.05 sigma²``);
        0 subtracts nothing, warns, and denoises much less than scikit-image (module doc).
    preserve_range, channel_axis: as in scikit-image.
    Returns the denoised image of `image`'s shape: float32 for float16/float32 input, else
    float64 (scikit-image's dtypes). Differences from scikit-image: the module doc.
    """
    image = np.asarray(image)
    moved, axis = _channels_last(image, channel_axis, "denoise_nl_means")
    data = img_as_float(moved, bool(preserve_range))
    p = _check_int("patch_size", patch_size, 1, MAX_PATCH_SIZE)
    distance = _check_int("patch_distance", patch_distance, 0, MAX_PATCH_DISTANCE)
    h = _check_number("h", h, positive=True)
    sigma = _check_number("sigma", sigma, positive=False)
    if p > min(data.shape[0], data.shape[1]):
        raise ValueError(f"patch_size {p} is larger than the image ({data.shape[0]} x "
                         f"{data.shape[1]}): clpatch needs whole patches")
    if sigma == 0:
        warnings.warn("denoise_nl_means with sigma=0: clpatch's NL-means keeps each reference "
                      "patch at weight 1, so without the noise level it denoises much less "
                      "than scikit-image's; pass sigma (e.g. estimate_sigma(image)) and "
                      "h about 0.8 * sigma", UserWarning, stacklevel=2)
    out = nlmeans(data, sigma if sigma > 0 else NO_NOISE, patch_size=p, step=max(1, p // 3),
                  window=2 * distance + 1, k=K, h=h, search_channels="all",
                  channel_axis=None if axis is None else -1)
    out = np.asarray(out, dtype=data.dtype)
    return out if axis is None else np.moveaxis(out, -1, axis)


def estimate_sigma(image: Any, average_sigmas: bool = False, *,
                   channel_axis: int | None = None) -> Any:
    """The noise's standard deviation with scikit-image's signature, estimated by
    `clpatch.estimate_sigma` (the module doc says how it differs).

    image: (H, W) grayscale, or 2-D with channels on ``channel_axis``; at least 26 x 26
        pixels; its own units (integer images are not converted, as in scikit-image).
    average_sigmas: with channels, return the plain mean of the channels' sigmas (as
        scikit-image; `clpatch.estimate_sigma` takes their root mean square).
    Returns a NumPy float64 for a grayscale image or with ``average_sigmas``, else a list of
    one float64 per channel (scikit-image's types).
    """
    image = np.asarray(image)
    moved, axis = _channels_last(image, channel_axis, "estimate_sigma")
    if axis is None:
        return np.float64(clpatch_estimate_sigma(moved))
    sigmas = [np.float64(s) for s in np.atleast_1d(clpatch_estimate_sigma(moved, channel_axis=-1))]
    if average_sigmas:
        return np.float64(np.mean(sigmas))
    return sigmas
