"""The clustering ANN (Tsai, Steinberger, Pająk and Pulli, §3–§4): its algorithm, fixed so
that a NumPy implementation reproduces it exactly (tests/reference/ann.py), its parameters
and its tile geometry.

Positions. The top-left corners of the p × p patches of an H × W image form the plane
0 … Py − 1 × 0 … Px − 1 (Py = H − p + 1, Px = W − p + 1). Each axis is cut into
non-overlapping runs of `tile` positions, the last run absorbing the remainder: run i
starts at i · tile, there are max(1, Py // tile) runs, and the last one ends at Py (so a
run holds `tile` to 2 · tile − 1 positions, or all Py when Py < tile). A tile is a run of
rows × a run of columns; for a burst of T frames a tile holds the positions of every frame
at that location. A tile's patches start in the order (frame, row, column): that order
numbers its slots 0 … M − 1.

A tiling may have an origin o along an axis (0 ≤ o < tile, leaving at least two runs:
Py − o ≥ 2 · tile): its run boundaries are then o + i · tile, i ≥ 1, so there are
(Py − o) // tile runs, the first one [0, o + tile) absorbing the o leading positions and
the last one the remainder; every run still holds `tile` to 2 · tile − 1 positions
(`tile_edges`; origin 0 is the plain tiling above). The filters' ANN (`search="ann"`,
clpatch/match/ann/search.py) runs two tilings of one image: the plain one and the one of origin
tile // 2 on each axis where that leaves two runs (`pair_origin`; else 0 on that axis). It
answers each reference from the tiling in which it lies nearer its tile's centre: there
its distance is max(|2y − (y0 + y1 − 1)|, |2x − (x0 + x1 − 1)|) for its tile
[y0, y1) × [x0, x1) (`centre_distance` gives either axis's term), and the plain tiling
answers where the two are equal. A reference then has candidates at least about a quarter
of a tile away on every side, where one tiling leaves those at a tile's edge with
candidates on one side only (BM3D on the ANN gained about 0.1 dB on the test photographs:
benchmarks/results/quality_ann.md).

Patch vectors have D = C · p · p values, ordered (channel, row, column). Every distance is
the sum of squared differences over d = 0 … D − 1 in that order, in float32, each
difference, product and sum rounded on its own (FP_CONTRACT off), so it is the same number
on every device and in NumPy; so are the clustering's sums below (it divides by nothing
but powers of two). (The query's patch-to-patch sums use fused multiply-adds,
correctly rounded by OpenCL's definition: the same on every device, and equal to the
separate operations whenever the values are integers, as in the tests.)

Clustering (§3.1, hierarchical splits, balanced, along a principal direction). A node is
a run of slots [lo, hi); the root is the whole tile. A node of at most `LEAF` (32) patches
is a leaf. A larger node of m patches is split:
1. Sub-sample: the `SAMPLES` (16) patches s_j at slots lo + (j · m) // 16, j = 0 … 15.
2. Their mean mu (per value: the samples' values summed in j order, times 1/16, exact);
   the centred samples z_j = s_j − mu (per value, float32).
3. Their Gram matrix G_ij = sum over d of z_i,d · z_j,d in d order (so G_ij = G_ji). If
   its trace (the diagonal summed in j order) is 0 (the samples are all equal), the node
   is split in halves: its first m // 2 slots and the rest, order kept.
4. `POWER_ITERATIONS` (8) power iterations from v = diag(G): w_i = sum over j of
   G_ij · v_j in j order; t = max_i |w_i|; when 0 < t < inf, v = w · 2^−e, e the exponent
   of t (t = f · 2^e, 0.5 ≤ f < 1: a scaling by a power of two, exact), else v stays.
5. Direction u = sum over j of v_j · z_j (per value, in j order): the samples' principal
   direction. Every patch's key is the sum over d of x_d · u_d, in float32 in d order,
   each product and sum rounded on its own: its projection on that direction.
6. Median split: a patch's rank is the number of the node's patches with a smaller key or
   an equal key at an earlier slot; the m // 2 patches of rank below m // 2 form the left
   child, the others the right one, each in slot order (a stable partition).
Tsai split a node by 2-means on 8 samples (a sub-sampled K-means++ start, at most five
rounds) and assign every patch to the nearer centre, which on noisy images gives lopsided
splits (clusters of 11 patches on average, about 19 splits per 225-patch tile). Cutting at
the median gives children of m // 2 and m − m // 2 patches, so a tile's tree depends on its
patch count alone (a 225-patch tile: 7 splits, 8 clusters of 28–29). Along the principal
direction of 16 samples the cut separates the node better than along the line through two
2-means centres of 8 samples (on the 10 shared images at σ = 20, k 16, tile 15: recall
39.2 % → 41.7 %, D_ann / D_knn 1.179 → 1.158, measured on the NumPy oracle), for about the
same work: a 16 × 16 Gram matrix and eight 16-by-16 products in place of five 2-means
rounds. The children [lo, lo + m // 2) and [lo + m // 2, hi) are split the same way until
every node is a leaf. The result does not depend on the order in which nodes are split;
the leaves, in slot order, are the tile's clusters (depth first, left child first).

Query (§3.2). The candidates of a patch are the patches of its cluster and of its
`neighbour_clusters` nearest clusters in that order (the next, the previous, the one after
the next, …; at a tile's first or last cluster the sequence goes on on the other side),
with clusters added in the same order while they hold fewer than k patches in all. Being
adjacent clusters, they are one run of slots. The result of a reference patch is its k
candidates of smallest distance, the patch itself first, then by (distance, slot after the
clustering): the voting of Tsai's Fig. 4 ranks each candidate by counting the candidates
before it.

References are the patches on the project's grid (0, step, 2·step, … plus the last
position of each axis), of the reference frame for a burst; their candidates come from
every frame.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.validate import check_int

__all__ = ["LEAF", "MAX_K", "MAX_NEIGHBOUR_CLUSTERS", "MAX_PATCH", "MAX_TILE", "MAX_VALUES",
           "POWER_ITERATIONS", "SAMPLES", "AnnConfig", "AnnRequest", "candidate_bound",
           "centre_distance", "check_ann_request", "cluster_count", "largest_k", "pair_origin",
           "tile_edges", "tile_of"]

LEAF = 32                    # patches per cluster at most (Tsai: twice the 16 candidates)
SAMPLES = 16                 # sub-sample of a node (a power of two; Tsai: "e.g., 8")
POWER_ITERATIONS = 8         # for the samples' principal direction
MAX_K = LEAF
MAX_TILE = 64                # a tile's rows and columns are packed in 7 bits each
MAX_PATCH = 32
MAX_VALUES = 1024            # C · p · p: a node's mean and direction live in local memory
MAX_STEP = 64
MAX_NEIGHBOUR_CLUSTERS = 2   # Tsai searched "two neighboring clusters" at most
MAX_FRAMES = 4096            # a slot's frame is packed in 17 bits


@functools.lru_cache(maxsize=256)
def cluster_count(patches: int) -> int:
    """The clusters of a tile of `patches` slots: the leaves of its tree (a node of more
    than LEAF slots has children of m // 2 and m - m // 2), as the clustering counts them."""
    if patches <= LEAF:
        return 1
    half = patches // 2
    return cluster_count(half) + cluster_count(patches - half)


def candidate_bound(k: int, neighbour_clusters: int) -> int:
    """The most candidates one query can have. A node of more than LEAF patches is split
    into halves of at least LEAF // 2, so every cluster of a tile of more than LEAF
    patches holds LEAF // 2 to LEAF of them (a smaller tile is one cluster of at least k
    patches): when the cluster and its neighbours hold k patches at least, no further
    cluster is added."""
    taken = 1 + neighbour_clusters
    if taken * (LEAF // 2) >= k:
        return LEAF * taken
    return max(LEAF * taken, k - 1 + LEAF)


@dataclass(frozen=True)
class AnnRequest:
    """A checked request: patch side, grid step, k, tile side, neighbour clusters."""

    patch_size: int
    step: int
    k: int
    tile: int
    neighbour_clusters: int
    channels: int = 1


@dataclass(frozen=True)
class AnnConfig:
    """How the engine runs on a device: work-items per tile, whether the partition scans,
    power iterations and symmetric distance tables use warp ballots and shuffles (inline
    PTX) or local memory, whether a tile's pixels are copied to local memory; the same
    matches every way."""

    group: int
    ballot: bool
    tile: int
    neighbour_clusters: int
    reason: str = ""
    source: str = "rule"
    local_pixels: bool = True     # a tile's pixels copied to local memory where they fit
    query_group: int = 64         # work-items per tile of the query kernel

    def describe(self) -> str:
        scan = "warp ballots and shuffles" if self.ballot else "local-memory scans"
        pixels = "pixels in local memory" if self.local_pixels else "pixels from global memory"
        return (f"clustering ANN: tiles of {self.tile}, {LEAF}-patch clusters, "
                f"{self.neighbour_clusters} neighbour cluster(s); {self.group} + "
                f"{self.query_group} work-items per tile, {scan}, {pixels} (where a tile "
                "fits)")


def tile_edges(positions: int, tile: int, origin: int = 0) -> np.ndarray:
    """Start of every run of one axis, then its end: [0, origin + tile, origin + 2·tile, …,
    positions] (origin 0: [0, tile, 2·tile, …, positions])."""
    if origin and positions - origin < 2 * tile:
        raise ValueError(f"origin {origin} leaves fewer than two runs of {tile} in "
                         f"{positions} positions")
    runs = max(1, (positions - origin) // tile)
    starts = origin + np.arange(runs) * tile
    starts[0] = 0
    return np.append(starts, positions).astype(np.int64)


def tile_of(coordinate: Any, positions: int, tile: int, origin: int = 0) -> Any:
    """Index of the run holding `coordinate` (array or int) along an axis of `positions`."""
    runs = max(1, (positions - origin) // tile)
    return np.clip((np.asarray(coordinate) - origin) // tile, 0, runs - 1)


def pair_origin(positions: int, tile: int) -> int:
    """The second tiling's origin along an axis of `positions` (see the module doc): tile // 2
    where that leaves at least two runs, else 0 (the plain tiling's)."""
    origin = tile // 2
    return origin if positions - origin >= 2 * tile else 0


def centre_distance(positions: int, tile: int, origin: int = 0) -> np.ndarray:
    """|2c − (start + end − 1)| of every coordinate c of one axis, [start, end) its run of
    the tiling at `origin`: twice its distance from its run's centre (int32)."""
    edges = tile_edges(positions, tile, origin)
    c = np.arange(positions)
    run = tile_of(c, positions, tile, origin)
    return np.abs(2 * c - (edges[run] + edges[run + 1] - 1)).astype(np.int32)


def largest_k(rows: int, cols: int, patch_size: int, tile: int, frames: int = 1) -> int:
    """The patch count of the smallest tile (k may not exceed it), capped at MAX_K."""
    py, px = rows - patch_size + 1, cols - patch_size + 1
    return min(MAX_K, min(py, tile) * min(px, tile) * frames)


def check_ann_request(*, patch_size: Any, step: Any, k: Any, tile: Any,
                      neighbour_clusters: Any, channels: int, rows: int, cols: int,
                      frames: int = 1) -> AnnRequest:
    """The checked request (ValueError/TypeError naming the argument otherwise)."""
    p = check_int("patch_size", patch_size, 1, MAX_PATCH)
    s = check_int("step", step, 1, MAX_STEP)
    kk = check_int("k", k, 1, MAX_K)
    t = check_int("tile", tile, 1, MAX_TILE)
    nc = check_int("neighbour_clusters", neighbour_clusters, 0, MAX_NEIGHBOUR_CLUSTERS)
    if channels * p * p > MAX_VALUES:
        raise ValueError(f"patch_size {p} with {channels} channel(s) gives {channels * p * p} "
                         f"values per patch; the ANN takes at most {MAX_VALUES}")
    if frames > MAX_FRAMES:
        raise ValueError(f"the ANN clusters at most {MAX_FRAMES} frames together, got {frames}")
    if p > rows or p > cols:
        raise ValueError(f"patch_size {p} is larger than the image ({rows}x{cols})")
    top = largest_k(rows, cols, p, t, frames)
    if kk > top:
        raise ValueError(f"k={kk} is larger than the smallest tile's patch count: the "
                         f"largest valid k is {top} (tile={t}, patch_size={p}, image "
                         f"{rows}x{cols}" + (f", {frames} frames" if frames > 1 else "") + ")")
    return AnnRequest(p, s, kk, t, nc, channels)
