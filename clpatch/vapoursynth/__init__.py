"""clpatch's filters for VapourSynth: BM3D, VBM3D and NL-means on any OpenCL device.

    import vapoursynth as vs
    import clpatch.vapoursynth as cvs
    clip = cvs.bm3d(clip, sigma=5)                  # 8-bit units, whatever the bit depth
    clip = cvs.vbm3d(clip, sigma=5, radius=4)
    clip = cvs.nlmeans(clip, sigma=5, temporal_radius=2)

Each returns a VideoNode in the clip's format (GRAY, YUV, RGB; 8–16-bit integer or float)
whose frames equal clpatch's own functions on the same frames (docs/vapoursynth.md). It
needs VapourSynth (API 4; `pip install "clpatch[vapoursynth]"`, Python 3.12 and later for
its wheels); `import clpatch` never imports this package.
"""

from __future__ import annotations

try:
    import vapoursynth as _vs  # noqa: F401  (the check only)
except ImportError as exc:      # pragma: no cover - depends on the environment
    raise ImportError(
        "clpatch.vapoursynth needs VapourSynth: pip install \"clpatch[vapoursynth]\" "
        "(VapourSynth's wheels need Python >= 3.12)") from exc

from .arrays import clip_from_array, clip_to_array, frames
from .filters import bm3d, nlmeans, vbm3d

__all__ = ["bm3d", "clip_from_array", "clip_to_array", "frames", "nlmeans", "vbm3d"]
