"""The ``bm3d`` package's ``bm3d`` call for white noise, computed by clpatch.

``from clpatch.compat.bm3d import bm3d, BM3DStages`` in place of ``from bm3d import ...``:
the same signature as bm3d 4.0 (``bm3d(z, sigma_psd, profile='np', stage_arg=
BM3DStages.ALL_STAGES, blockmatches=(False, False))``) and a float64 result. The package's
own ``BM3DStages`` members are accepted too (by name). The computation is
`clpatch.bm3d` with ``preset="reference"``, clpatch's setting of the package's 'np' profile
(window 39, step 3 staggered, 16/32 patches per group, Bior1.5/DCT and Haar, exact variances,
``lambda_3d`` 3.0 and ``mu2`` 0.4). What is supported and what differs:

- ``sigma_psd``: the white noise's standard deviation in the image's scale (a number, or
  one per channel all equal). Coloured noise (a 2-D or 3-D PSD) and different levels per
  channel raise a ValueError.
- ``profile``: only ``'np'``; 'refilter', 'vn', 'vn_old', 'high', 'deb' and BM3DProfile
  objects raise a ValueError.
- ``stage_arg``: ``ALL_STAGES`` (both stages), ``HARD_THRESHOLDING`` (the basic estimate
  only, clpatch's ``stages=1``), or a basic estimate of ``z``'s shape: stage 2 only, matched
  on it and taking its Wiener oracle from it (clpatch's ``guide=``, ``guide_role="oracle"``).
  ``WIENER_FILTERING`` without an estimate raises a ValueError (the package fails on it).
- ``blockmatches``: only ``(False, False)``; clpatch does not return or take the package's
  block-matching arrays (see `clpatch.Matches` and ``matches=`` for clpatch's own).
- Colour: an (M, N, 3) ``z`` is CBM3D (groups matched on the luminance of clpatch's
  opponent colour space, every channel filtered in it); the package filters the three
  channels as they are, matched on the first. Other channel counts raise a ValueError.
- Scale: the package's matching thresholds are set for images in [0, 1]; float ``z`` is
  matched on that scale here too (``data_range=1``), integer ``z`` on its dtype's range
  (255 for 8-bit), where the package would still assume 1.
- The stage-1 matching threshold is ``3000 + 2σ²`` (σ in 0-255 units) where the package's is
  3000 (clpatch.denoise.bm3d's module doc); the grid, borders and aggregation are clpatch's.
  Measured (PoCL, 64 x 64 grayscale crops at σ = 0.1, PSNR minus the package's): both
  stages +0.02 dB (camera), -0.01 (astronaut), -0.01 (grass), +0.17 (coins); the basic
  estimate 0.00, +0.04, -0.08, +0.06; astronaut in colour +2.1 dB (CBM3D).
"""

from __future__ import annotations

import enum
import math
from typing import Any

import numpy as np

from clpatch import bm3d as clpatch_bm3d

__all__ = ["BM3DStages", "bm3d"]

PROFILES = ("np", "refilter", "vn", "vn_old", "high", "deb")


class BM3DStages(enum.Enum):
    """The ``bm3d`` package's stages (same names and values)."""

    HARD_THRESHOLDING = 1
    WIENER_FILTERING = 2
    ALL_STAGES = 3


def _white_sigma(sigma_psd: Any, channels: int) -> float:
    """The one noise level of `sigma_psd`, or a ValueError saying what is supported."""
    values = np.asarray(sigma_psd)
    if values.dtype.kind not in "iuf":
        raise TypeError(f"sigma_psd must be a number, got {sigma_psd!r}")
    if values.ndim >= 2 and values.size > 1:
        raise ValueError(f"sigma_psd: clpatch's bm3d takes white noise only (a standard "
                         f"deviation); a coloured-noise PSD of shape {values.shape} is not "
                         "supported")
    flat = values.reshape(-1).astype(np.float64)
    if flat.size == 0 or (flat.size > 1 and flat.size != channels):
        raise ValueError(f"sigma_psd must be one standard deviation (or one per channel, "
                         f"{channels}), got {flat.size} values")
    if np.any(flat != flat[0]):
        raise ValueError(f"sigma_psd: clpatch filters all channels with one noise level; "
                         f"different levels per channel ({flat.tolist()}) are not supported")
    sigma = float(flat[0])
    if not math.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma_psd must be a finite standard deviation > 0, got {sigma}")
    return sigma


def _stages(stage_arg: Any, shape: tuple[int, ...]) -> dict[str, Any]:
    """clpatch's stages / guide arguments for the package's `stage_arg`."""
    if isinstance(stage_arg, enum.Enum):
        if stage_arg.name == "ALL_STAGES":
            return {"stages": 2}
        if stage_arg.name == "HARD_THRESHOLDING":
            return {"stages": 1}
        if stage_arg.name == "WIENER_FILTERING":
            raise ValueError("stage_arg: WIENER_FILTERING needs a basic estimate: pass the "
                             "estimate itself (an array of z's shape) as stage_arg")
        raise ValueError(f"stage_arg must be a BM3DStages member or an array, got {stage_arg!r}")
    if isinstance(stage_arg, np.ndarray):
        if stage_arg.shape != shape:
            raise ValueError(f"stage_arg: the basic estimate must have z's shape {shape}, got "
                             f"{stage_arg.shape}")
        return {"stages": 2, "guide": stage_arg, "guide_role": "oracle"}
    raise TypeError(f"stage_arg must be BM3DStages.ALL_STAGES, BM3DStages.HARD_THRESHOLDING or "
                    f"a basic estimate (an array of z's shape), got {type(stage_arg).__name__}")


def bm3d(z: Any, sigma_psd: Any, profile: Any = "np", stage_arg: Any = BM3DStages.ALL_STAGES,
         blockmatches: tuple = (False, False)) -> np.ndarray:
    """BM3D with the ``bm3d`` package's signature, computed by `clpatch.bm3d` (reference
    preset). The module doc says what is supported and how the result differs.

    z: noisy image, (M, N), (M, N, 1) or (M, N, 3); float in [0, 1] as the package expects
        (integer images are matched on their dtype's range).
    sigma_psd: the white noise's standard deviation in z's scale.
    profile: 'np'. stage_arg: BM3DStages.ALL_STAGES, BM3DStages.HARD_THRESHOLDING, or a
        basic estimate (stage 2 only). blockmatches: (False, False).
    Returns the denoised image, float64, of z's shape.
    """
    if not isinstance(profile, str) or profile != "np":
        name = profile if isinstance(profile, str) else type(profile).__name__
        raise ValueError(f"profile: clpatch.compat.bm3d supports only 'np' (clpatch's reference "
                         f"preset), got {name!r}; {PROFILES[1:]} and BM3DProfile objects are "
                         "not supported")
    if (not isinstance(blockmatches, (tuple, list)) or len(blockmatches) != 2
            or any(b is not False for b in blockmatches)):
        raise ValueError("blockmatches: clpatch.compat.bm3d supports only (False, False); it "
                         "neither returns nor takes the package's block-matching arrays")
    z = np.asarray(z)
    if z.ndim not in (2, 3) or (z.ndim == 3 and z.shape[2] not in (1, 3)):
        raise ValueError(f"z must be (M, N), (M, N, 1) or (M, N, 3) for clpatch, got shape "
                         f"{z.shape}")
    if z.dtype.kind not in "biuf":
        raise TypeError(f"z must hold real numbers, got dtype {z.dtype}")
    if z.dtype.kind == "b":
        z = z.astype(np.float64)
    sigma = _white_sigma(sigma_psd, 1 if z.ndim == 2 else z.shape[2])
    stages = _stages(stage_arg, z.shape)
    data_range = 1.0 if z.dtype.kind == "f" else None
    out = clpatch_bm3d(z, sigma, preset="reference", data_range=data_range,
                       channel_axis=-1 if z.ndim == 3 else None, **stages)
    return np.asarray(out, dtype=np.float64)
