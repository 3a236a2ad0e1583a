"""`ann_search`: the clustering ANN of Tsai et al. (tiled hierarchical clustering, then each
cluster's kNN by voting) as one call, and as the filters' `search="ann"` engine.

The algorithm and its exact rules are in `clpatch.match.ann.params`; the device code in
`clpatch.match.ann.plan` and `cl_src/match/ann.cl.mako`.
"""

from __future__ import annotations

from typing import Any

from ...core.runtime import Runtime, resolve_runtime
from ...core.volumes import Volume, as_volume
from ..matches import Matches
from .pair import AnnPair
from .params import AnnRequest, check_ann_request, largest_k
from .plan import AnnPlan

__all__ = ["DEFAULT_TILE", "FILTER_NEIGHBOUR_CLUSTERS", "FILTER_TILE", "FILTER_TILINGS",
           "ann_matcher", "ann_search", "filter_request"]

#: Tsai's preferred tile (their Table 2: larger tiles gain little).
DEFAULT_TILE = 15
#: The filters' ANN (`search="ann"` of nlmeans and bm3d on an image; see filter_request):
#: tiles of FILTER_TILE, each reference's cluster and its FILTER_NEIGHBOUR_CLUSTERS nearest
#: sibling clusters searched (Tsai §3.2: "two neighboring clusters" at most). With tiles of
#: 15 and the cluster alone (k = n of its ~28 patches) the filters lost to the windowed
#: search (21 x 21) on the shared images at σ = 20 (H100): NL-means 0.89 dB (cell 2.15),
#: BM3D 0.11 dB (brick 0.25). NL-means averages all of its n patches: it needs nearer ones
#: (two sibling clusters: ~84 candidates) and a wider scope (even the exact kNN of a 15-tile
#: loses ~0.9 dB on cell); BM3D's loss is the scope alone (the same with 0, 1 or 2 sibling
#: clusters). Measured on PoCL (cell, brick, moon; Δ dB against the window, 15-tiles with
#: 2 sibling clusters → 21-tiles with 2): NL-means −0.99/−0.81/−0.37 → −0.67/−0.75/−0.17,
#: BM3D −0.19/−0.30/−0.20 → +0.08/−0.06/−0.00 (31-tiles gain little more for twice the
#: clustering). The cost: the query's table grows with the candidates (about 3x), but the
#: filters query their grid references only (step 3-4); the clustering takes one more
#: depth for the 441 patches of a 21-tile, and a node's ranks grow with its size (about 2x).
#: `ann_search` keeps its defaults (tile 15, no neighbour clusters); a burst keeps its own
#: tile and no neighbour clusters (its clusters gather every frame's patches).
FILTER_TILE = 21
FILTER_NEIGHBOUR_CLUSTERS = 2
#: The filters' ANN on an image runs FILTER_TILINGS tilings, the plain one and one offset
#: by half a tile, each reference answered by the one where it lies nearer its tile's
#: centre (`AnnPair`; 1: the plain tiling alone). With one tiling a reference at a tile's
#: edge has candidates on one side only; BM3D (fast) on the ANN then lost 0.149 dB to the
#: window search against 0.036 dB with two (NumPy oracles, 256² crops of six test
#: photographs, σ = 20), for twice the clustering.
FILTER_TILINGS = 2
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
    request = ann_request(volume, patch_size=patch_size, k=k, tile=tile, step=step,
                          neighbour_clusters=neighbour_clusters)
    rt = resolve_runtime(runtime, image)
    key = ("ann", volume.rows, volume.cols, volume.channels, volume.on_device, request)
    with rt.plan_cache().using(key, lambda: AnnPlan(
            rt, 1, volume.rows, volume.cols, volume.channels, request,
            device_output=volume.on_device), PLANS_KEPT) as plan:
        return plan.run(image)


def ann_request(volume: Volume, *, patch_size: Any, k: Any, tile: Any, step: Any,
                neighbour_clusters: Any) -> AnnRequest:
    """The ANN request of `ann_search`'s arguments on an input like `volume`, checked."""
    return check_ann_request(patch_size=patch_size, step=step, k=k, tile=tile,
                             neighbour_clusters=neighbour_clusters, channels=volume.channels,
                             rows=volume.rows, cols=volume.cols)


def filter_request(*, patch_size: int, step: int, n: int, channels: int, rows: int,
                   cols: int, metric: str = "l2", several_frames: bool = False,
                   frames: int = 1, tile: int = FILTER_TILE,
                   neighbour_clusters: int = FILTER_NEIGHBOUR_CLUSTERS) -> AnnRequest:
    """The checked ANN request of a filter's `search="ann"` (k = the filter's n, tiles of
    `tile`, the patch's cluster and `neighbour_clusters` sibling clusters searched): refused for several
    frames that are not a burst (`several_frames`) and for other metrics than L2; `frames`
    > 1 only for a burst."""
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
                tile: int | None = None, neighbour_clusters: int | None = None,
                tilings: int | None = None, reference: int | None = None) -> AnnPlan:
    """The ANN as the filters' matcher (`search="ann"`): k = the filter's n, tiles of
    `tile`, `neighbour_clusters` sibling clusters searched, `tilings` tilings (None:
    FILTER_TILE, FILTER_NEIGHBOUR_CLUSTERS and FILTER_TILINGS for an image; DEFAULT_TILE,
    0 and 1 for a burst, whose clusters already gather a location's patches from every
    frame); the filter's window and search configuration do not apply. With `reference`
    (a burst: video=True), the references are that frame's and the candidates come from
    every frame."""
    burst = reference is not None
    if tilings is None:
        tilings = 1 if burst else FILTER_TILINGS
    if isinstance(tilings, bool) or tilings not in (1, 2) or (burst and tilings != 1):
        raise ValueError(f"tilings must be 1 or 2 (1 for a burst), got {tilings!r}")
    if tile is None:
        tile = DEFAULT_TILE if burst else FILTER_TILE
    if neighbour_clusters is None:
        neighbour_clusters = 0 if burst else FILTER_NEIGHBOUR_CLUSTERS
    checked = filter_request(
        patch_size=request.patch_size, step=request.step, n=request.n, channels=channels,
        rows=rows, cols=cols, metric=getattr(request, "metric", "l2"),
        several_frames=not burst and bool(video or temporal_window or frames != 1),
        frames=frames if burst else 1, tile=tile, neighbour_clusters=neighbour_clusters)
    if tilings == 2:
        return AnnPair(runtime, rows, cols, channels, checked, stagger=stagger)
    return AnnPlan(runtime, frames, rows, cols, channels, checked, video=burst,
                   reference=reference or 0, stagger=stagger)


def ann_capacity(rows: int, cols: int, frames: int, patch_size: int, window: int,
                 temporal_window: int) -> int:
    """The fewest candidates a reference has with the filters' ANN: the smallest tile's
    patch count (the window does not apply)."""
    return largest_k(rows, cols, patch_size, FILTER_TILE)

