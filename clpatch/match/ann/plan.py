"""`AnnPlan`: the clustering ANN (clpatch/match/ann/params.py) compiled for one input shape,
as a matcher (clpatch/match/matcher.py).

Two kernels, one work-group per tile each (`cl_src/match/ann.cl.mako`): the first
clusters the tile, the second answers its references cluster by cluster. A chunk of work
is a band of whole tile rows: a reference's candidates all lie in its tile, so a band needs
only its own image rows, and a filter that tiles its output asks `reach` how far (in rows)
a candidate can lie from its reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.buffers import int_buffer, memory_limits
from ...core.errors import DeviceResourceError
from ...core.kernels import kernel, render
from ...core.runtime import Runtime
from ...core.sinks import MatchesSink
from ...core.volumes import Volume, magnitude_limit
from ..matcher_plan import MatcherPlan
from ..matches import Matches, grid_positions
from ..window.layout import Chunk, upload_chunk
from .layout import REGISTER_VOTE, ann_config, pitch_order, query_bytes, split_nodes
from .params import (
    LEAF,
    POWER_ITERATIONS,
    SAMPLES,
    AnnConfig,
    AnnRequest,
    candidate_bound,
    centre_distance,
    cluster_count,
    tile_edges,
    tile_of,
)

__all__ = ["AnnPlan"]

#: Tile rows per launch at most (a launch's work-groups stay well below driver limits).
TILE_ROWS_PER_LAUNCH = 256
#: A node of more patches than this finds its median split by selecting the code of rank
#: m / 2 digit by digit; a smaller one counts each patch's rank against every other (O(m^2),
#: fewer barriers). Both give the same split (cl_src/match/ann.cl.mako, step 6).
RANK_SELECT = 256


class AnnPlan(MatcherPlan):
    """A compiled clustering ANN for inputs of (frames, rows, cols, channels) (a
    `clpatch.core.plans.Plan`: `clpatch.make_plan("ann", ...)` makes one).

    video: a burst of `frames` frames: every frame's patches at a tile location are
    clustered together and the references are those of frame `reference` (positions
    (t, y, x)). `stagger` gives BM3D's staggered grid (see `SearchPlan`). `tile_bytes`
    bounds the memory of one band of tile rows (default: the device's). `origin` is the
    tiling's (y, x) origin; with `versus`, the other tiling's origin, this plan answers
    only the references nearer their tile's centre here than there (ties: the tiling of
    origin (0, 0); see `clpatch.match.ann.params` and `AnnPair`). `last_events` holds the
    (stage, event) pairs of the last `run`: upload, convert, ann (two launches per band:
    clustering, query).
    """

    method = "ann"

    def __init__(self, runtime: Runtime, frames: int, rows: int, cols: int, channels: int,
                 request: AnnRequest, config: AnnConfig | None = None, *, video: bool = False,
                 reference: int = 0, stagger: tuple[int, ...] = (),
                 device_output: bool = False, tile_bytes: int | None = None,
                 origin: tuple[int, int] = (0, 0),
                 versus: tuple[int, int] | None = None) -> None:
        if not (video or frames == 1):
            raise ValueError(f"an image has one frame, got {frames} (pass video=True for a burst)")
        if not 0 <= reference < frames:
            raise ValueError(f"reference must be a frame index in [0, {frames}), got {reference}")
        super().__init__(runtime)
        self.frames, self.rows, self.cols, self.channels = frames, rows, cols, channels
        self.request = request
        self.reference = reference
        self.device_output = device_output
        p, s, t = request.patch_size, request.step, request.tile
        self.py, self.px = rows - p + 1, cols - p + 1
        self.origin = (int(origin[0]), int(origin[1]))
        self.edges_y = tile_edges(self.py, t, self.origin[0])
        self.edges_x = tile_edges(self.px, t, self.origin[1])
        tiles = (len(self.edges_y) - 1) * (len(self.edges_x) - 1)
        # The largest tile's rows and columns of positions (the last run of each axis).
        self.tile_rows = int(np.diff(self.edges_y).max())
        self.tile_cols = int(np.diff(self.edges_x).max())
        self.config = config or ann_config(request, runtime.profile, tiles=0 if video else tiles,
                                           largest_tile=self.tile_rows * self.tile_cols)
        self.grid_y = grid_positions(rows, p, s)
        self.grid_x = grid_positions(cols, p, s)
        self.video = video
        self.dim = 3 if video else 2
        # How far a candidate can lie from its reference along an axis: the largest tile side - 1.
        self.reach = max(self.tile_rows, self.tile_cols) - 1
        self.stagger = tuple(int(v) for v in stagger) if any(stagger) else ()
        self.ref_x = None
        ref_row = np.full(self.py, -1, np.int32)
        ref_row[self.grid_y] = np.arange(len(self.grid_y))
        if self.stagger:
            if video:
                raise ValueError("a staggered grid is for images, not bursts")
            if any(not 0 <= v < s for v in self.stagger):
                raise ValueError(f"stagger shifts must lie in [0, step={s}), got {stagger}")
            lattice = self.grid_x[:-(-(cols - p) // s)]
            shifts = np.array(self.stagger)[np.arange(len(self.grid_y)) % len(self.stagger)]
            self.ref_x = np.concatenate(
                [np.maximum(lattice[None, :] - shifts[:, None], 0),
                 np.broadcast_to(self.grid_x[len(lattice):], (len(shifts), 1))],
                axis=1).astype(np.int32)
            ref_col = np.full((len(self.grid_y), self.px), -1, np.int32)
            rows_idx = np.repeat(np.arange(len(self.grid_y)), self.ref_x.shape[1])
            ref_col[rows_idx, self.ref_x.ravel()] = np.tile(np.arange(self.ref_x.shape[1]),
                                                            len(self.grid_y))
        else:
            ref_col = np.full(self.px, -1, np.int32)
            ref_col[self.grid_x] = np.arange(len(self.grid_x))
        ctx = runtime.context
        self._ref_row, self._ref_col = int_buffer(ctx, ref_row), int_buffer(ctx, ref_col)
        self.choose = 0
        centres = np.zeros((2, 1), np.int32)
        if versus is not None:      # own distance in bits 0-15, the other tiling's above
            if (0, 0) not in (self.origin, tuple(versus)):
                raise ValueError("one of two tilings must have the origin (0, 0)")
            self.choose = 1 if self.origin == (0, 0) else 2
            centres = [centre_distance(n, t, o) | centre_distance(n, t, v) << 16
                       for n, o, v in zip((self.py, self.px), self.origin, versus, strict=True)]
        self._centres = [int_buffer(ctx, c) for c in centres]
        self._cluster, self._query = self._build()
        self.units = self._query_units()
        self.chunks = self._plan_chunks(tile_bytes)

    # ---- kernels ---------------------------------------------------------------------------

    def _local_sizes(self) -> tuple[int, int, int, int, int]:
        """(block, brows, bpitch, slots, area): floats of local memory for a tile's pixels
        (the largest tile, every frame and channel; 0 when they and the tile's slots do not
        fit beside the kernels' other local arrays: the patches are then read from global
        memory), the block's rows and row pitch per frame and channel (the pitch of fewest
        bank conflicts that fits: `pitch_order`), the most slots of a tile and its most
        positions in one frame.

        These are compiled in, so a burst's are those of the largest tile any frame size
        can have, 2 · tile − 1 positions a side (`tile_edges`), where they fit: one program
        then serves every frame size (before, each new size compiled the ANN again, 8–10 s
        on PoCL). An image's are its own largest tile's (the block's pitch is chosen for
        its width: H100 notes in `pitch_order`), except without a block: slots and area
        are then only bounds (of the query's table of references and of a slot's bits in
        the median's rank codes; any bound at least the true one gives the same results),
        so they too are the largest tile's where the query's local memory holds them."""
        p, d = self.request.patch_size, self.channels * self.request.patch_size ** 2
        c = self.config
        nodes = split_nodes(c.group, d)
        # Gram, vectors, flags, and the median's selection (16-bin histogram, rank, code)
        per_node = SAMPLES * (SAMPLES + 1) + 3 * SAMPLES + 5 + 19
        cluster = 4 * (2 * d * nodes + c.group + per_node * nodes + 1) + 8 * d  # + offsets
        local = self.runtime.profile.local_mem_size
        packed = not self._dense()

        def query(area: int) -> int:
            return query_bytes(self.request, c.query_group, area, packed=packed)

        side = 2 * self.request.tile - 1
        tiles = [(side, side)] if self.video else []
        tiles.append((self.tile_rows, self.tile_cols))
        for th, tw in tiles if c.local_pixels else ():
            area, rows = th * tw, th + p - 1
            for pitch in pitch_order(tw + p - 1, rows, p, self.channels):
                block = self.frames * self.channels * rows * pitch
                if 4 * (block + 2 * self.frames * area) + max(cluster, query(area)) <= local:
                    return block, rows, pitch, self.frames * area, area
        area = side * side
        if max(cluster, query(area)) > local:
            area = self.tile_rows * self.tile_cols
        return 0, 0, 0, self.frames * area, area

    def _dense(self) -> bool:
        """Whether every position of the image is a reference (the query's dense path)."""
        return self.request.step == 1 and not self.video and not self.stagger

    def _build(self) -> Any:
        r, c = self.request, self.config
        if c.group % 32 or c.query_group % 32:
            raise ValueError(f"the ANN's work-group sizes must be multiples of 32, got "
                             f"{c.group} and {c.query_group}")
        candidates = candidate_bound(r.k, r.neighbour_clusters)
        params = dict(patch=r.patch_size, channels=self.channels, k=r.k, group=c.group,
                      qgroup=c.query_group, ballot=c.ballot, neighbours=r.neighbour_clusters,
                      stagger=bool(self.stagger), dim=self.dim, leaf=LEAF, samples=SAMPLES,
                      power=POWER_ITERATIONS, candidates=candidates,
                      nodes=split_nodes(c.group, self.channels * r.patch_size ** 2),
                      dense=self._dense(),
                      rank_select=RANK_SELECT, rvote=candidates <= REGISTER_VOTE,
                      choose=self.choose)
        (params["block"], params["brows"], params["bpitch"], params["slots"],
         params["area"]) = self._local_sizes()
        self.block = params["block"]
        rt = self.runtime
        source = render("match/ann.cl.mako", rt.profile, **params)
        program = rt.programs.build(source, template="match/ann.cl.mako", params=params)
        return kernel(program, "ann_cluster"), kernel(program, "ann_query")

    def _query_units(self) -> tuple[int, int, int, int]:
        """The query's units of work (see the kernel): (run, parts, parts_last, units per
        row). The smallest tile is one unit of `run` clusters or fewer; a larger one (the
        last row's and column's absorb the remainder, and with an origin the first's the
        leading positions: up to 4x the clusters) is cut into runs of as many, each a
        work-group, so that its clusters do not keep the launch waiting (H100, 512x512,
        tile 15: the 25x25 corner's 32 clusters took its work-group 4 rounds of 8)."""
        sizes_y, sizes_x = np.diff(self.edges_y), np.diff(self.edges_x)
        warps = self.config.query_group // 32
        run = -(-cluster_count(self.frames * int(sizes_y.min() * sizes_x.min())) // warps) * warps
        parts = parts_last = units = 0
        # (the rows and columns before the last: the parts of their largest tile)
        for shift, th in ((0, int(sizes_y[:-1].max(initial=0))), (8, int(sizes_y[-1]))):
            pa, pb = (-(-cluster_count(self.frames * th * int(tw)) // run)
                      for tw in (sizes_x[:-1].max(initial=0), sizes_x[-1]))
            assert pa < 256 and pb < 256
            parts, parts_last = parts | pa << shift, parts_last | pb << shift
            units = max(units, (len(sizes_x) - 1) * pa + pb)
        return run, parts, parts_last, units

    # ---- the matcher's face ----------------------------------------------------------------

    def _tile_rows(self, g0: int, g1: int) -> tuple[int, int]:
        """Tile rows [a, b) holding grid rows [g0, g1)."""
        t, o = self.request.tile, self.origin[0]
        return (int(tile_of(self.grid_y[g0], self.py, t, o)),
                int(tile_of(self.grid_y[g1 - 1], self.py, t, o)) + 1)

    def chunk(self, r0: int, r1: int, g0: int, g1: int) -> Chunk:
        """Grid rows [g0, g1) of the reference frame: the whole tile rows holding them."""
        a, b = self._tile_rows(g0, g1)
        p = self.request.patch_size
        return Chunk(r0, r1, 0, self.frames, g0, g1, int(self.edges_y[a]),
                     int(self.edges_y[b]) - 1 + p)

    def upload(self, volume: Volume, chunk: Chunk, name: str = "planar", *,
               staging: str = "staging", transfers: Any = None,
               wait_for: list[Any] | None = None) -> tuple[Any, list[tuple[str, Any]]]:
        """The chunk's rows of every frame and channel as planar float32 (see
        `SearchPlan.upload`)."""
        return upload_chunk(self.pool, self.uploader, volume, chunk, name, staging=staging,
                            transfers=transfers, wait_for=wait_for)

    def enqueue_chunk(self, planar: Any, chunk: Chunk, out_pos: Any, out_dist: Any, *,
                      out_rows: int, out_row0: int = 0, out_f0: int = 0,
                      wait_for: list[Any] | None = None) -> list[Any]:
        """Cluster the chunk's tiles and write its grid rows' matches (see
        `SearchPlan.enqueue_chunk` for the output arguments)."""
        i32 = np.int32
        a, b = self._tile_rows(chunk.g0, chunk.g1)
        nty, ntx = len(self.edges_y) - 1, len(self.edges_x) - 1
        group, qgroup = self.config.group, self.config.query_group
        run, parts, parts_last, units = self.units
        queue = self.runtime.queue
        events: list[Any] = []
        for t0 in range(a, b, TILE_ROWS_PER_LAUNCH):
            t1 = min(b, t0 + TILE_ROWS_PER_LAUNCH)
            sy0 = int(self.edges_y[t0])
            slots = self.frames * (int(self.edges_y[t1]) - sy0) * self.px
            perm = self.pool.get("perm", slots * 4)
            perm2 = self.pool.get("perm2", slots * 4)
            counts = self.pool.get("counts", (t1 - t0) * ntx * 4)
            common = (planar, i32(chunk.y_hi - chunk.y_lo), i32(self.cols), i32(chunk.y_lo),
                      i32(self.frames), i32(self.py), i32(self.px), i32(self.request.tile),
                      i32(nty), i32(ntx), i32(t0), perm, perm2, counts, i32(sy0),
                      i32(self.origin[0]), i32(self.origin[1]))
            clustered = self._cluster(queue, (group * ntx, t1 - t0), (group, 1), *common,
                                      wait_for=(events[-1:] or wait_for))
            gx = len(self.grid_x) if self.ref_x is None else self.ref_x.shape[1]
            events += [clustered, self._query(
                queue, (qgroup * units, t1 - t0), (qgroup, 1), *common, self._ref_row,
                self._ref_col, *self._centres, i32(self.reference), i32(chunk.g0), i32(chunk.g1), i32(gx),
                out_pos, out_dist, i32(out_rows), i32(out_row0), i32(out_f0), i32(run),
                i32(parts), i32(parts_last), wait_for=[clustered])]
        return events

    def check_limit(self) -> float:
        """The largest |value| the float32 distances can take."""
        return magnitude_limit(self.request.patch_size, self.channels)

    # ---- running ---------------------------------------------------------------------------

    #: Sets of clustering scratch one band takes (AnnPair: one per tiling).
    scratch_sets = 1

    def _plan_chunks(self, tile_bytes: int | None) -> list[Chunk]:
        """Bands of tile rows whose buffers fit the device's memory (or `tile_bytes`, the
        plans' common limit: tests force bands with it)."""
        largest, total = memory_limits(self.runtime, tile_bytes)
        gx = len(self.grid_x) if self.ref_x is None else self.ref_x.shape[1]
        k, dim, ch, tf = self.request.k, self.dim, self.channels, self.frames
        t = self.request.tile
        nty = len(self.edges_y) - 1
        tile_rows_of = tile_of(self.grid_y, self.py, t, self.origin[0])

        def sizes(a: int, b: int) -> tuple[int, int]:
            g = np.flatnonzero((tile_rows_of >= a) & (tile_rows_of < b))
            rows = int(self.edges_y[b] - self.edges_y[a]) + self.request.patch_size - 1
            if len(g):      # (the image rows of the band's chunk: those of both tilings)
                c = self.chunk(self.reference, self.reference + 1, int(g[0]), int(g[-1]) + 1)
                rows = c.y_hi - c.y_lo
            refs = len(g) * gx
            parts = [tf * ch * rows * self.cols * 4, tf * ch * rows * self.cols * 8,
                     self.scratch_sets * 2 * tf * rows * self.px * 4,
                     refs * k * 4 * dim, refs * k * 4]
            return max(parts), sum(parts)

        per = nty
        while per > 1 and any(big > largest or whole > total
                              for big, whole in (sizes(a, min(nty, a + per))
                                                 for a in range(0, nty, per))):
            per = (per + 1) // 2
        big, whole = sizes(0, 1)
        if per == 1 and (big > largest or whole > total):
            raise DeviceResourceError(
                f"one row of tiles of this input does not fit the device's memory ({largest} "
                "bytes per buffer); reduce the image width, the tile or k")
        chunks = []
        for a in range(0, nty, per):
            b = min(nty, a + per)
            g = np.flatnonzero((tile_rows_of >= a) & (tile_rows_of < b))
            if len(g):
                chunks.append(self.chunk(self.reference, self.reference + 1, int(g[0]),
                                         int(g[-1]) + 1))
        return chunks

    def _launch(self, volume: Volume, out: Any,
                wait_for: list[Any] | None) -> tuple[Matches, list[Any]]:
        """Enqueue the run on `volume` (uploads, the two kernels per band, copies back for
        NumPy output); returns the Matches and the last launches' events."""
        gy, gx = len(self.grid_y), (len(self.grid_x) if self.ref_x is None
                                    else self.ref_x.shape[1])
        k = self.request.k
        sink = MatchesSink(self, (), gy, gx, k, self.dim, device=self.device_output, out=out)
        events: list[tuple[str, Any]] = []
        self.uploader.begin()
        last = wait_for
        for chunk in self.chunks:
            planar, uploads = self.upload(volume, chunk, wait_for=last)
            events.extend(uploads)
            out_pos, out_dist, out_rows, out_row0, _ = sink.target(0, 1, chunk.g0, chunk.g1)
            done = self.enqueue_chunk(planar, chunk, out_pos, out_dist, out_rows=out_rows,
                                      out_row0=out_row0, wait_for=[uploads[-1][1]])
            events.extend(("ann", e) for e in done)
            last = done
            sink.store(0, 1, chunk.g0, chunk.g1, (out_pos, out_dist), done)
        self.last_events = events
        positions, distances = sink.arrays()
        r = self.request
        grid_x = self.ref_x.copy() if self.ref_x is not None else self.grid_x.copy()
        return (Matches(positions, distances, self.grid_y.copy(), grid_x, r.patch_size, r.step,
                        r.tile, r.k, "l2", 0, self.config), last)
