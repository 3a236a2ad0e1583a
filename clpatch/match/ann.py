"""`ann_search`: the clustering ANN of Tsai et al. (tiled hierarchical 2-means, then each
cluster's kNN by voting) as one call, and as the filters' `search="ann"` engine.

The algorithm and its exact rules are in `clpatch.match.ann_params`; the device code in
`clpatch.match.ann_plan` and `cl_src/match/ann.cl.mako`.
"""

from __future__ import annotations

from typing import Any

from ..core.runtime import Runtime, resolve_runtime
from ..core.volumes import as_volume
from .ann_params import AnnRequest, check_ann_request, largest_k
from .ann_plan import AnnPlan
from .matcher import register_engine
from .matches import Matches

__all__ = ["DEFAULT_TILE", "ann_matcher", "ann_search", "filter_request"]

#: Tsai's preferred tile (their Table 2: larger tiles gain little).
DEFAULT_TILE = 15
#: ANN plans kept per runtime.
PLANS_KEPT = 8


def ann_search(image: Any, *, patch_size: int = 8, k: int = 16, tile: int = DEFAULT_TILE,
               step: int = 1, neighbour_clusters: int = 0,
               runtime: Runtime | None = None) -> Matches:
    """The `k` approximate nearest patches of every reference patch, from its own tile.

    image: (H, W) or (H, W, C) NumPy or device array of any real dtype.
    patch_size: side p of the square patches (C · p² ≤ 1024).   k: neighbours, 1–32, at
        most the patch count of the smallest tile (the error names the largest valid k).
    tile: side of the square tiles of top-left positions, 1–64 (the last tile of each axis
        absorbs the remainder, so tiles hold tile to 2·tile − 1 positions per axis).
    step: grid step of the reference patches (0, step, … plus the last position).
    neighbour_clusters: 0–2 adjacent clusters searched besides a patch's own.
    runtime: device to run on (default: the input's queue, else the default device).
    Returns `Matches` (positions (y, x) and squared L2 distances, ascending, each patch's
    own position first; `window` holds the tile side). NumPy in → NumPy out, device in →
    device out.
    """
    volume = as_volume(image, video=False)
    request = check_ann_request(patch_size=patch_size, step=step, k=k, tile=tile,
                                neighbour_clusters=neighbour_clusters,
                                channels=volume.channels, rows=volume.rows, cols=volume.cols)
    rt = resolve_runtime(runtime, image)
    key = ("ann", volume.rows, volume.cols, volume.channels, volume.on_device, request)
    plan = rt.plan_cache().plan(key, lambda: AnnPlan(
        rt, 1, volume.rows, volume.cols, volume.channels, request,
        device_output=volume.on_device), PLANS_KEPT)
    return plan.run(image)


def filter_request(*, patch_size: int, step: int, n: int, channels: int, rows: int,
                   cols: int, metric: str = "l2", several_frames: bool = False,
                   frames: int = 1, tile: int = DEFAULT_TILE,
                   neighbour_clusters: int = 0) -> AnnRequest:
    """The checked ANN request of a filter's `search="ann"` (k = the filter's n): refused
    for several frames that are not a burst (`several_frames`) and for other metrics than
    L2; `frames` > 1 only for a burst."""
    if several_frames:
        raise ValueError("search='ann' filters single images; for several frames of one "
                         "scene use clpatch.burst_denoise")
    if metric != "l2":
        raise ValueError("search='ann' measures L2 distances only")
    return check_ann_request(patch_size=patch_size, step=step, k=n, tile=tile,
                             neighbour_clusters=neighbour_clusters, channels=channels,
                             rows=rows, cols=cols, frames=frames)


def ann_matcher(runtime: Runtime, frames: int, rows: int, cols: int, channels: int,
                request: Any, config: Any = None, *, temporal_window: int = 0,
                video: bool = False, stagger: tuple[int, ...] = (),
                tile: int = DEFAULT_TILE, neighbour_clusters: int = 0,
                reference: int | None = None) -> AnnPlan:
    """The ANN as the filters' matcher (`search="ann"`): k = the filter's n, tiles of
    `tile`; the filter's window and search configuration do not apply. With `reference`
    (a burst: video=True), the references are that frame's and the candidates come from
    every frame."""
    burst = reference is not None
    checked = filter_request(
        patch_size=request.patch_size, step=request.step, n=request.n, channels=channels,
        rows=rows, cols=cols, metric=getattr(request, "metric", "l2"),
        several_frames=not burst and bool(video or temporal_window or frames != 1),
        frames=frames if burst else 1, tile=tile, neighbour_clusters=neighbour_clusters)
    return AnnPlan(runtime, frames, rows, cols, channels, checked, video=burst,
                   reference=reference or 0, stagger=stagger)


def ann_capacity(rows: int, cols: int, frames: int, patch_size: int, window: int,
                 temporal_window: int) -> int:
    """The fewest candidates a reference has with the filters' ANN: the smallest tile's
    patch count (the window does not apply)."""
    return largest_k(rows, cols, patch_size, DEFAULT_TILE)


register_engine("ann", ann_matcher,
                "the clustering ANN (Tsai et al.): candidates from the patch's own cluster "
                f"in tiles of {DEFAULT_TILE}", ann_capacity)
