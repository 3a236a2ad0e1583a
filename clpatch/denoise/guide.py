"""The checks every filter makes of a guide image (`guide=` of nlmeans, nlmeans_video,
bm3d and vbm3d): one shape rule, one layout rule and one device rule, with one wording.

A guide has exactly the input's shape in the caller's layout (`channel_axis` applies to it
as to the input), any real dtype, and is a NumPy array, an array-like or a pyopencl array
of the runtime's context (of either kind, whatever the input's kind; a float64 device guide
needs fp64). Its values are checked by the conversion that uploads it (each engine's
`clpatch.core.upload.Uploader`), whose errors also name the guide.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.volumes import Volume, as_array, as_volume, channels_last

__all__ = ["check_guide_shape", "guide_like", "guide_volume"]


def check_guide_shape(guide_shape: tuple[int, ...], shape: tuple[int, ...],
                      what: str = "image") -> None:
    """ValueError naming the guide when its shape is not the input's (`what`: "image" or
    "frames", for the message)."""
    if tuple(guide_shape) != tuple(shape):
        owner = "frames'" if what == "frames" else f"{what}'s"
        raise ValueError(f"guide shape {tuple(guide_shape)} differs from the {owner}: the "
                         f"guide must have the {owner} shape {tuple(shape)}, got "
                         f"{tuple(guide_shape)}")


def guide_like(guide: Any, image: Any, channel_axis: int | None, video: bool = False,
               what: str = "image") -> Any:
    """`guide` checked against the caller's `image` (both before `channels_last`: the same
    shape, an array of real numbers) and with its channels moved as the image's are."""
    guide = as_array(guide, name="guide")
    check_guide_shape(tuple(guide.shape), tuple(as_array(image).shape), what)
    try:
        moved, _ = channels_last(guide, channel_axis, video)
    except ValueError as exc:
        raise ValueError(f"guide: {exc}") from None
    return moved


def guide_volume(guide: Any, volume: Volume, runtime: Any, what: str = "image") -> Volume:
    """The guide of one run as a Volume of the input `volume`'s shape (channels last, as
    the plans take the input): a NumPy array or a device array of `runtime`'s context, and
    a float64 device array only where the device has fp64."""
    found = as_volume(guide, name="guide", video=volume.video)
    check_guide_shape(tuple(found.array.shape), tuple(volume.array.shape), what)
    if found.on_device:
        if found.array.context != runtime.context:
            raise ValueError("guide lives in another OpenCL context than the runtime's")
        if found.dtype == np.float64 and not runtime.profile.fp64:
            raise TypeError("guide: float64 device arrays need a device with fp64 support")
    return found
