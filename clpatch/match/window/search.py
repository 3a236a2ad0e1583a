"""`search_patches`: the exact windowed patch search as one call.

Semantics (fixed by the design so that every variant is checkable against NumPy):

- reference patches have their top-left corner on the grid 0, step, 2·step, … of each
  axis, plus the last valid position H − p (W − p), so borders are always covered;
- candidates are all valid patch positions whose top-left corner lies in the window of
  half-width window // 2 around the reference's, clipped to the image (the reference
  itself is a candidate); for video, in frames t − tw … t + tw, clipped to the video;
- the distance is the sum over the patch and its channels of squared (L2) or absolute
  (L1) differences;
- the result is the k candidates of smallest distance, ascending;
- equal distances (common on 8-bit images, whose distances are exact integers) resolve by
  one rule in every variant and on every device profile: the candidate of smaller offset
  (dt, dy, dx) from the reference, compared lexicographically, i.e. the smaller (t, y, x)
  of its top-left corner in raster order, comes first. Profiles change speed, never results.
"""

from __future__ import annotations

from typing import Any

from ...core.runtime import Runtime, resolve_runtime
from ...core.validate import check_int, k_or_n
from ...core.volumes import Volume, as_volume
from ..matches import Matches
from .config import SearchConfig, choose_search
from .params import MAX_TEMPORAL_WINDOW, check_fits, check_search_request
from .plan import SearchPlan

#: Search plans kept per runtime (least recently used dropped first).
PLANS_KEPT = 16


def search_patches(image: Any, patch_size: int = 8, step: int = 4, window: int = 21, k: int = 16,
                   metric: str = "l2", variant: str | SearchConfig | None = None,
                   temporal_window: int = 0, runtime: Runtime | None = None, *,
                   video: bool | None = None, n: int | None = None) -> Matches:
    """Find the `k` most similar patches of every reference patch, exactly.

    image: (H, W) or (H, W, C) NumPy or device array of any real dtype; video as
           (T, H, W[, C]) (a 3-D array is taken as video when temporal_window > 0 or video=True).
    patch_size: side p of the square patches, 1–32.   step: grid step of reference patches.
    window: side of the search window (half-width window // 2), 1–127.
    k: neighbours per reference, 1–32; at most the candidates of a corner reference (a
           larger k is refused: the result has a fixed k axis). n: its former name
           (deprecated).
    metric: "l2" (sum of squared differences) or "l1" (sum of absolute differences).
    variant: None (the scheduler's choice), "naive", "convolution", "square", "column",
             or a SearchConfig forcing every knob.
    temporal_window: for video, frames t − tw … t + tw are searched.
    runtime: device to run on (default: the input's queue, else the default device).
    Returns `Matches` (alias `SearchResult`): NumPy arrays for NumPy input, device arrays
    for device input. Equal distances are ordered by the candidate's (t, y, x) in raster
    order (the module doc's tie rule), whatever the variant and device.
    """
    n = k_or_n(k, n, 16, "search_patches")
    rt = resolve_runtime(runtime, image)
    # The plan cache is keyed by the arguments as given, each with its type, so a repeated
    # call finds its plan without checking them again (the plan was made from the same
    # values, checked then); a miss checks everything and makes the plan. The configuration
    # is chosen when the plan is made (use_tuning drops the plans).
    volume = as_volume(image, video=video, temporal_window=temporal_window
                       if isinstance(temporal_window, int) else 0)
    key = ("search", volume.frames, volume.rows, volume.cols, volume.channels, volume.video,
           volume.on_device, *_typed(patch_size, step, window, n, metric, temporal_window,
                                     video), variant)

    def make() -> SearchPlan:
        checked = as_volume(image, video=video, temporal_window=temporal_window
                            if isinstance(temporal_window, int) else 0)
        return plan_search(rt, checked, patch_size=patch_size, step=step, window=window, n=n,
                           metric=metric, variant=variant, temporal_window=temporal_window,
                           video=video, fused_check=True)

    with rt.plan_cache().using(key, make, PLANS_KEPT) as plan:
        return plan.run(volume)


def _typed(*values: Any) -> tuple[Any, ...]:
    """(type, value) of each value: equal values of different types (8 and 8.0, True and 1)
    make different keys, since the checks accept one and refuse the other."""
    return tuple((type(v), v) for v in values)


def plan_search(rt: Runtime, volume: Volume, *, patch_size: Any, step: Any, window: Any,
                n: Any, metric: Any, variant: Any, temporal_window: Any, video: Any,
                fused_check: bool) -> SearchPlan:
    """The search plan of `volume`'s shape (device output for a device volume), every
    argument checked as `search_patches` documents them."""
    tw = check_int("temporal_window", temporal_window, 0, MAX_TEMPORAL_WINDOW)
    if tw and not volume.video:
        raise ValueError("temporal_window > 0 needs a video input (T, H, W[, C])")
    request = check_search_request(patch_size=patch_size, step=step, n=n, window=window,
                                   channels=volume.channels, metric=metric,
                                   video=volume.video)
    available = check_fits(request, volume.frames, volume.rows, volume.cols, tw)
    if request.n > available:
        raise ValueError(f"k={request.n} is larger than the number of candidates of a "
                         f"corner reference ({available} with window={request.window}, "
                         f"patch_size={request.patch_size}"
                         + (f", temporal_window={tw}" if volume.video else "") + ")")
    if not (variant is None or isinstance(variant, (str, SearchConfig))):
        raise TypeError(f"variant must be a string, a SearchConfig or None, "
                        f"got {type(variant).__name__}")
    return SearchPlan(rt, volume.frames, volume.rows, volume.cols, volume.channels, request,
                      choose_search(request, rt.profile, variant, rt.tuning,
                                    size=(volume.rows, volume.cols)),
                      temporal_window=tw, device_output=volume.on_device, video=volume.video,
                      fused_check=fused_check)
