"""The guide image of BM3D/CBM3D (`guide=`, `guide_role=`): its checks and its upload.

A guide is an image of exactly the input's shape (any real dtype, NumPy, array-like or
pyopencl array) in the input's units. It goes through the same conversion (and, for colour,
the same opponent transform) as the noisy image, into its own planar buffer, so that the
search kernels read it where they would read the noisy image or the basic estimate. Its
values are checked (finite, within the search's float32 range) by a conversion of its own,
whose peak never reaches the image's: the fixed-point scales and the default data range
come from the image only.

Roles (`clpatch.denoise.bm3d` documents them for users):
- "match": the groups of both stages are matched on the guide (stage 1 instead of the
  noisy image, stage 2 instead of the basic estimate); the filtering still acts on the noisy
  image and stage 2's Wiener oracle is still the basic estimate;
- "oracle" (BM3D-CUDA's ``ref``): the guide is the basic estimate: stage 1 is skipped and
  stage 2 matches its groups on the guide and takes its Wiener oracle from it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.validate import check_choice
from ..core.volumes import Volume
from .guide import guide_like, guide_volume

__all__ = ["GUIDE_ROLES", "check_guide_role", "guide_like", "guide_volume", "upload_guide"]

#: What a guide may stand for (see the module doc).
GUIDE_ROLES = ("match", "oracle")


def check_guide_role(guide_role: Any, guided: bool, stages: int | None = None,
                     what: str = "image") -> str:
    """`guide_role` checked: one of GUIDE_ROLES; a role other than "match" needs a guide
    (`what`: "image" or "video", for the message); "oracle" needs both stages (`stages`: the
    number run, None when not known yet). Shared by BM3D and VBM3D."""
    check_choice("guide_role", guide_role, GUIDE_ROLES)
    if not guided and guide_role != "match":
        raise ValueError(f"guide_role={guide_role!r} needs a guide {what} (guide=None was given)")
    if guide_role == "oracle" and stages == 1:
        raise ValueError("guide_role='oracle' makes the guide the basic estimate and runs "
                         "stage 2 only; it needs stages=2, got stages=1")
    return guide_role


def upload_guide(plan: Any, stage: Any, volume: Volume, chunk: Any,
                 events: list[tuple[str, Any]], *, staging: str = "guide_staging",
                 transfers: Any = None) -> Any:
    """Convert the chunk of the guide `volume` into `plan`'s planar buffer "guide" (opponent
    colours for colour, as `BM3DPlan.upload_noisy` does for the image) through the plan's
    guide uploader, appending the events; returns the buffer."""
    hb = chunk.y_hi - chunk.y_lo
    frames = chunk.f_hi - chunk.f_lo
    planar = plan.pool.get("guide", frames * volume.channels * hb * volume.cols * 4)
    try:
        events.extend(plan.guide_uploader.convert(
            volume, chunk.f_lo, chunk.f_hi, chunk.y_lo, chunk.y_hi, planar, staging=staging,
            transfers=transfers or plan.transfers))
    except TypeError as exc:        # e.g. a float64 device array on a device without fp64
        raise TypeError(f"guide: {exc}") from None
    if plan.colour:
        i32 = np.int32
        events.append(("transform", stage.opponent(
            plan.runtime.queue, (plan.cols, hb, 1), None, planar, i32(0), i32(1), i32(hb),
            i32(plan.cols), planar, i32(0))))
    return planar
