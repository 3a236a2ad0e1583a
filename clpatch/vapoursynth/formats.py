"""VapourSynth clip formats as clpatch sees them: the checks, the units, the planes.

A clip must have a constant format and size (variable ones are refused, naming the filter).
Values keep the clip's units: integer formats their code values (0 … 2^bits − 1), float
formats [0, 1] by VapourSynth's convention. `sigma` is given in 8-bit units whatever the bit
depth, as BM3DCUDA's `sigma` and KNLMeansCL's `h` are, and scaled here by the format's peak
(× 257 for 16-bit, × 1023 / 255 for 10-bit, / 255 for float).

The filters pass clpatch `data_range` = the format's peak (so BM3D's matching thresholds and
presets read the values as 0–255 data would) and a fixed `peak` for the fixed-point
aggregation: the format's peak for integer formats (no value can exceed it), `FLOAT_PEAK`
for float formats (a frame beyond it raises clpatch's ValueError). A fixed peak spares the
device a read-back per frame and makes every chunk of a video round exactly as one call on
the whole video does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import vapoursynth as vs

__all__ = ["FLOAT_PEAK", "ClipFormat", "clip_format", "plane_sigmas"]

#: The largest |value| a float clip may hold (4 × its nominal range, as clpatch's streams
#: assume when no peak is given).
FLOAT_PEAK = 4.0


@dataclass(frozen=True)
class ClipFormat:
    """What the filters need of a clip's format: its colour family ("gray", "yuv", "rgb"),
    the NumPy dtype of its samples, the nominal peak (2^bits − 1, or 1.0 for float), the
    plane count and the size of every plane."""

    family: str
    dtype: np.dtype
    integer: bool
    bits: int
    peak: float
    name: str
    plane_shapes: tuple[tuple[int, int], ...]
    subsampled: bool

    @property
    def planes(self) -> int:
        return len(self.plane_shapes)

    @property
    def fixed_peak(self) -> float:
        """The `peak` the filters pass clpatch (module doc)."""
        return self.peak if self.integer else FLOAT_PEAK

    @property
    def chroma_offset(self) -> float:
        """The value of neutral chroma in a YUV clip's U and V planes (0 for float)."""
        return float(1 << (self.bits - 1)) if self.integer else 0.0

    def to_native(self, sigma8: float) -> float:
        """An 8-bit-units strength in the clip's units."""
        return float(sigma8) * self.peak / 255.0


_FAMILIES = {vs.GRAY: "gray", vs.YUV: "yuv", vs.RGB: "rgb"}


def clip_format(clip: Any, filter_name: str, what: str = "clip") -> ClipFormat:
    """The format of `clip`; TypeError when it is no VideoNode, ValueError for a variable
    format or size, and for formats the filters do not take."""
    if not isinstance(clip, vs.VideoNode):
        raise TypeError(f"{filter_name}: {what} must be a vapoursynth.VideoNode, got "
                        f"{type(clip).__name__}")
    fmt = clip.format
    if fmt is None or fmt.id == vs.NONE or fmt.color_family not in _FAMILIES:
        raise ValueError(f"{filter_name}: {what} has a variable format; convert it to one "
                         "format first (e.g. core.resize.Point(clip, format=vs.YUV420P8))")
    if clip.width == 0 or clip.height == 0:
        raise ValueError(f"{filter_name}: {what} has a variable frame size; resize it to one "
                         "size first (e.g. core.resize.Spline36(clip, 1920, 1080))")
    integer = fmt.sample_type == vs.INTEGER
    if integer:
        dtype = np.dtype(np.uint8 if fmt.bytes_per_sample == 1 else np.uint16)
        peak = float((1 << fmt.bits_per_sample) - 1)
    else:
        dtype = np.dtype(np.float16 if fmt.bytes_per_sample == 2 else np.float32)
        peak = 1.0
    shapes = [(clip.height, clip.width)]
    for _ in range(1, fmt.num_planes):
        shapes.append((clip.height >> fmt.subsampling_h, clip.width >> fmt.subsampling_w))
    return ClipFormat(_FAMILIES[fmt.color_family], dtype, integer, fmt.bits_per_sample, peak,
                      fmt.name, tuple(shapes),
                      bool(fmt.subsampling_w or fmt.subsampling_h))


def plane_sigmas(sigma: Any, fmt: ClipFormat, planes: Any, filter_name: str,
                 default_planes: tuple[int, ...]) -> tuple[float, ...]:
    """Per-plane strengths in 8-bit units (0: the plane is copied) from `sigma` (one number
    for every filtered plane, or one per plane, BM3DCUDA's convention) and `planes` (the
    planes to filter; None: `default_planes`)."""
    count = fmt.planes
    if planes is None:
        chosen = default_planes
    else:
        if isinstance(planes, int) and not isinstance(planes, bool):
            planes = [planes]
        try:
            chosen = tuple(sorted({int(p) for p in planes}))
        except (TypeError, ValueError):
            raise TypeError(f"{filter_name}: planes must be a plane index or a list of them, "
                            f"got {planes!r}") from None
        if not chosen or any(p < 0 or p >= count for p in chosen):
            raise ValueError(f"{filter_name}: planes must be indices in [0, {count}) of the "
                             f"{fmt.name} clip, got {list(planes)}")
    if np.ndim(sigma) == 0:
        values = [sigma] * count
    else:
        values = list(sigma)
        if len(values) == 1:
            values = values * count
        if len(values) != count:
            raise ValueError(f"{filter_name}: sigma takes one value or one per plane "
                             f"({count} for {fmt.name}), got {len(values)}")
    out = []
    for p, value in enumerate(values):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{filter_name}: sigma must be numbers, got {value!r}") from None
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"{filter_name}: sigma must be finite and >= 0 (8-bit units), "
                             f"got {value} for plane {p}")
        out.append(value if p in chosen else 0.0)
    if not any(out):
        raise ValueError(f"{filter_name}: nothing to filter: every chosen plane has sigma 0")
    return tuple(out)
