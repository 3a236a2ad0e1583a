"""How the clustering ANN's kernels are laid out on a device: work-group sizes, the nodes
split at once, the query's local memory, and the rule that picks them (`ann_config`). Any
layout gives the same matches (clpatch/match/ann/params.py); `AnnPlan`
(clpatch/match/ann/plan.py) builds and runs the kernels with one.
"""

from __future__ import annotations

from typing import Any

from .params import LEAF, SAMPLES, AnnConfig, AnnRequest, candidate_bound

__all__ = ["BANKS", "CENTRE_FLOATS", "DEEP_TILE_GROUP", "DEEP_TILE_PER_UNIT", "DEEP_TILE_RATIO",
           "GROUP", "MANY_TILES_GROUP", "MANY_TILES_PER_UNIT",
           "QUERY_GROUP", "REGISTER_VOTE", "ann_config", "pitch_order", "query_bytes",
           "split_nodes"]

#: Work-items per tile of the clustering and of the query kernel, multiples of 32 (any
#: such sizes give the same matches).
GROUP = 128
#: (H100, query kernel: 512x512 0.159 ms with 256, 0.240 with 128; 4608x3456 6.25 and
#: 7.34 ms: eight warps answer a 225-patch tile's eight clusters at once.)
QUERY_GROUP = 256
#: From this many tiles per compute unit on, an image's clustering takes MANY_TILES_GROUP
#: work-items per tile: more tiles resident at once pay more than fewer work-items per
#: tile cost (H100, clustering kernel: 4608x3456, 459 tiles per unit, 7.08 ms with 64 and
#: 7.84 ms with 128; 512x512, 8 tiles per unit, 0.299 and 0.275 ms). Not for bursts,
#: whose tiles hold every frame's patches (16 frames of 1.4 MP: 43.1 ms with 64, 41.7 ms
#: with 128).
MANY_TILES_PER_UNIT = 16
MANY_TILES_GROUP = 64
#: On images of at most DEEP_TILE_PER_UNIT tiles per compute unit whose largest tile (the
#: corner one, which absorbs both axes' remainders) holds at least DEEP_TILE_RATIO times an
#: inner tile's patches, the clustering takes DEEP_TILE_GROUP work-items per tile: the
#: launch then waits for that one tile, and more work-items shorten it. (H200,
#: benchmarks/results/ann_groups_h200.md, clustering + query kernels, 128 -> 192 work-items:
#: 512x512, 8.2 tiles per unit and a 625-patch corner tile, 0.311 -> 0.294 ms; 502x502, all
#: tiles of 225 patches, 0.250 -> 0.267; 600x600, 11.5 tiles per unit and a 529-patch
#: corner, 0.351 -> 0.375.)
DEEP_TILE_PER_UNIT = 10
DEEP_TILE_RATIO = 2.5
DEEP_TILE_GROUP = 192
#: Queries of at most this many candidates vote in registers and keep their results in the
#: rows of their distance table (no separate result arrays in local memory).
REGISTER_VOTE = 32
#: Floats of local memory for the means and directions of the nodes split at once, at most.
CENTRE_FLOATS = 2048


#: Banks of 4 bytes that local memory is spread over (NVIDIA, AMD): a warp's read takes as
#: many passes as the most distinct addresses it asks of one bank.
BANKS = 32


def _passes(offsets: list[int]) -> int:
    """Passes of a warp's read of these float offsets of local memory."""
    per_bank: dict[int, set[int]] = {}
    for o in offsets:
        per_bank.setdefault(o % BANKS, set()).add(o)
    return max(len(v) for v in per_bank.values())


def pitch_order(width: int, rows: int, patch: int, channels: int) -> list[int]:
    """Row pitches (floats) for a tile's pixels in local memory, `rows` rows of `width`
    values per channel, best first: width ... width + BANKS - 1 by the passes of the
    kernels' two kinds of read, then the smaller. The reads: a warp's 32 consecutive values
    of one patch (a sample's mean, direction), and one value of each of the patches at a
    4 x 8 block of positions (keys, distances: a cluster's patches are often neighbours).
    (H100, 512x512: a pitch of 32, the corner tile's 25 + 7 columns, put each column of a
    patch in one bank.)"""
    def cost(pitch: int) -> tuple[int, int]:
        values = [c * rows * pitch + dy * pitch + dx for c in range(channels)
                  for dy in range(patch) for dx in range(patch)]
        one = max(_passes(values[i:i + BANKS]) for i in range(0, len(values), BANKS))
        block = _passes([y * pitch + x for y in range(4) for x in range(8)])
        return one + block, pitch

    return sorted(range(width, width + BANKS), key=cost)


def split_nodes(group: int, values: int) -> int:
    """Nodes of one depth that the clustering kernel splits at once: one per SAMPLES
    work-items (each node's power iteration keeps SAMPLES busy), their samples' mean and
    direction of `values` floats each within CENTRE_FLOATS."""
    return max(1, min(group // SAMPLES, CENTRE_FLOATS // (2 * values)))


def query_bytes(request: AnnRequest, query_group: int, area: int, packed: bool = True) -> int:
    """Bytes of local memory the query kernel declares besides a tile's pixels and slots:
    per warp a distance table of LEAF rows (and its results, when a query may have more
    than REGISTER_VOTE candidates: fewer keep them in the table's rows), a row of LEAF ints
    for the members' output indices and, where the grid is not dense (`packed`), one for
    the references among them; and the output index of each of the tile's `area` positions.
    (H100, 4608x3456 at step 1: counting the packed row where the kernel has none left the
    tile's pixels out of local memory, 12.8 -> 14.2 ms.)"""
    candidates = candidate_bound(request.k, request.neighbour_clusters)
    results = 0 if candidates <= REGISTER_VOTE else 2 * request.k
    rows = (candidates | 1) + 1 + int(packed) + results
    return 4 * (query_group // 32 * LEAF * rows + area + 64)


def ann_config(request: AnnRequest, profile: Any, group: int | None = None,
               tiles: int = 0, largest_tile: int = 0) -> AnnConfig:
    """The configuration for `profile` on an image of `tiles` tiles (0: unknown, or a
    burst) whose largest holds `largest_tile` patches: warp ballots where the profile has inline
    PTX; MANY_TILES_GROUP clustering work-items per tile on images of many tiles per compute
    unit, DEEP_TILE_GROUP on images of few tiles and a deep corner tile, else GROUP;
    QUERY_GROUP query work-items, fewer where the device's local memory cannot hold their
    tables."""
    units = max(1, int(profile.compute_units))
    many = tiles >= MANY_TILES_PER_UNIT * units
    deep = (0 < tiles <= DEEP_TILE_PER_UNIT * units
            and largest_tile >= DEEP_TILE_RATIO * request.tile ** 2)
    if group is None:
        group = MANY_TILES_GROUP if many else DEEP_TILE_GROUP if deep else GROUP
    ballot = profile.subgroup_ops == "ptx" and group % 32 == 0
    reason = ("NVIDIA: inline-PTX warp ballots and shuffles for the partition scans, "
              "power iterations and distance tables" if ballot else
              "portable local-memory scans (no warp ballots on this profile)")
    reason += (f"; clustering work-groups of {MANY_TILES_GROUP} work-items on images of "
               f"{MANY_TILES_PER_UNIT} tiles per compute unit or more, {DEEP_TILE_GROUP} on "
               f"images of at most {DEEP_TILE_PER_UNIT} whose corner tile holds "
               f"{DEEP_TILE_RATIO:g} times an inner tile's patches or more, else {GROUP}")
    # (sizes within the device's work-group limit, in whole warps of 32, and the query's
    # tables within its local memory for the largest tile: 2 * tile - 1 positions a side)
    largest = max(32, int(profile.max_work_group_size) // 32 * 32)
    query_group = min(QUERY_GROUP, largest)
    while (query_group > 32 and query_bytes(request, query_group, (2 * request.tile - 1) ** 2)
           > int(profile.local_mem_size)):
        query_group //= 2
    return AnnConfig(min(group, largest), ballot, request.tile, request.neighbour_clusters,
                     reason, query_group=query_group)
