"""Which planes of a frame go to clpatch together, and how (`PlaneJob`).

- GRAY: the plane alone. YUV: each filtered plane alone, at its own size (subsampled
  chroma included), with its own sigma — KNLMeansCL's `channels="Y"` / `"UV"`, BM3DCUDA's
  per-plane sigma; the planes not filtered are copied.
- RGB: the three planes as one colour image `(H, W, 3)`: clpatch's colour path (CBM3D's
  opponent space for BM3D and VBM3D, NL-means' opponent space), one sigma.
- YUV444 with `chroma=True` (BM3D and VBM3D, as BM3DCUDA's `chroma=True`): the three planes
  filtered together through CBM3D's opponent transform, groups matched on the luma. clpatch
  takes RGB and computes Y = (R+G+B)/3, U = (R−B)/2, V = (R−2G+B)/4 with noise σ‖row‖ in
  each; the job gives it the pseudo-RGB A⁻¹ (s ⊙ P) of the planes P (chroma centred on 0),
  each scaled by s_k so that the transform gives back s ⊙ P exactly (up to float rounding)
  with the noise clpatch assumes: s_k σ_k = σ‖A_k‖ with σ = √3 σ_Y, so s_Y = 1 and the luma
  the groups are matched on is the clip's own. The result is transformed back the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .formats import ClipFormat

__all__ = ["PlaneJob", "plane_jobs"]

#: CBM3D's opponent transform (clpatch.bm3d's doc): rows Y, U, V of RGB.
OPPONENT = np.array([[1 / 3, 1 / 3, 1 / 3], [1 / 2, 0.0, -1 / 2], [1 / 4, -1 / 2, 1 / 4]])
_INVERSE = np.linalg.inv(OPPONENT)
_NORMS = np.linalg.norm(OPPONENT, axis=1)


@dataclass(frozen=True)
class PlaneJob:
    """Planes `planes` of each frame, filtered as one clpatch image of `shape` ((H, W) or
    (H, W, 3)) and `dtype`, with clpatch's `sigma`, `data_range` and `peak` in the values
    clpatch is given. `kind`: "gray", "rgb" or "yuv" (YUV444 through the opponent space,
    with `scales` s_k and `offset` the chroma's neutral value)."""

    planes: tuple[int, ...]
    kind: str
    shape: tuple[int, ...]
    dtype: np.dtype
    sigma: float
    data_range: float
    peak: float
    scales: tuple[float, ...] = ()
    offset: float = 0.0

    @property
    def key(self) -> tuple:
        return (self.planes, self.kind, self.shape, self.dtype.str, self.sigma)

    def pack(self, planes: list[np.ndarray]) -> np.ndarray:
        """The image clpatch is given, from the job's planes (VapourSynth plane views)."""
        if self.kind == "gray":
            return planes[0]
        if self.kind == "rgb":
            return np.stack(planes, axis=-1)
        p = np.stack([np.asarray(a, np.float32) for a in planes], axis=-1)
        p[..., 1:] -= self.offset
        p *= np.asarray(self.scales, np.float32)
        return p @ _INVERSE.T.astype(np.float32)

    def unpack(self, result: np.ndarray) -> list[np.ndarray]:
        """The job's planes (float32, in the clip's units) of clpatch's result."""
        if self.kind == "gray":
            return [result]
        if self.kind == "rgb":
            return [result[..., c] for c in range(3)]
        p = result @ OPPONENT.T.astype(np.float32)
        p /= np.asarray(self.scales, np.float32)
        p[..., 1:] += self.offset
        return [p[..., c] for c in range(3)]


def plane_jobs(fmt: ClipFormat, sigmas: tuple[float, ...], chroma: bool,
               filter_name: str, colour: str = "opponent") -> list[PlaneJob]:
    """The jobs of a clip of format `fmt` with per-plane strengths `sigmas` (8-bit units, 0:
    copied). `chroma`: YUV444's planes together (needs `colour` "opponent", i.e. BM3D or
    VBM3D). RGB is one colour job and takes one sigma."""
    if fmt.family == "rgb":
        if len(set(sigmas)) != 1:
            raise ValueError(f"{filter_name}: an RGB clip is filtered as one colour image: give "
                             f"one sigma for its three planes, got {list(sigmas)}")
        return [PlaneJob((0, 1, 2), "rgb", (*fmt.plane_shapes[0], 3), fmt.dtype,
                         fmt.to_native(sigmas[0]), fmt.peak, fmt.fixed_peak)]
    if chroma:
        if fmt.family != "yuv" or fmt.subsampled:
            raise ValueError(f"{filter_name}: chroma=True takes YUV444 clips (the three planes "
                             f"of one size), got {fmt.name}")
        if colour != "opponent":
            raise ValueError(f"{filter_name}: chroma=True is for bm3d and vbm3d; filter the "
                             "planes one by one (planes=[0, 1, 2]) or convert to RGB")
        if not all(sigmas):
            raise ValueError(f"{filter_name}: chroma=True filters the three planes together: "
                             f"every sigma must be > 0, got {list(sigmas)}")
        native = [fmt.to_native(s) for s in sigmas]
        sigma = math.sqrt(3.0) * native[0]
        scales = tuple(float(sigma * n / s) for n, s in zip(_NORMS, native, strict=True))
        # |pseudo-RGB| <= sum_j |inverse_ij| s_j |P_j|, every |P_j| within the format's peak
        peak = float((np.abs(_INVERSE) @ np.asarray(scales)).max() * fmt.fixed_peak)
        return [PlaneJob((0, 1, 2), "yuv", (*fmt.plane_shapes[0], 3), np.dtype(np.float32),
                         sigma, fmt.peak, peak, scales, fmt.chroma_offset)]
    return [PlaneJob((p,), "gray", fmt.plane_shapes[p], fmt.dtype, fmt.to_native(s), fmt.peak,
                     fmt.fixed_peak)
            for p, s in enumerate(sigmas) if s > 0]
