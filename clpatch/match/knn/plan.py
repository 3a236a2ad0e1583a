"""The exhaustive kNN's plan: for a query image and a reference image of given shapes,
patch size, k and metric, the compiled kernels and buffers, reused between runs.

A run converts both images to planar float32 on the device (checking their values), then
handles the query grid in blocks of grid rows whose heaps fit the memory budget: the heaps
are cleared, the search kernels add every candidate of the reference in launches of
bounded work, and the finishing kernel sorts (and re-scores) each heap into the block's
Matches rows. Every launch waits for the previous one through events.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.buffers import BufferPool, int_buffer, memory_limits
from ...core.kernels import kernel
from ...core.plans import Plan
from ...core.runtime import Runtime
from ...core.sinks import MatchesSink
from ...core.upload import check_peak
from ...core.volumes import Volume, as_volume, magnitude_limit
from ..matches import Matches, grid_positions
from .config import TOPK_HEAP, KnnConfig, heap_level_fits, team_buffer, team_rows, topk_variant
from .gemm import GemmSearch

__all__ = ["WORK_PER_LAUNCH", "KnnPlan", "checked_name", "heap_slots", "launch_work",
           "query_bytes"]

#: Work (pairs times the per-pair cost below) of one launch on a device of up to
#: LAUNCH_UNITS compute units: a launch stays well under a second on a large GPU and under a
#: display watchdog's limit on a small one. NVIDIA and AMD GPUs with more units (streaming
#: multiprocessors, compute units: each of comparable throughput) take proportionally more,
#: up to MAX_LAUNCH_SCALE times (`launch_work`), as every launch costs its start, the reload
#: of its heaps' top levels and its last partial wave of work-groups: on the H100 (132
#: units; 256x256 RGB self-search, 11x11, offsets engine) k = 256 took 45.7 ms in 11
#: launches and 31.3 ms in one, k = 1 20.7 and 19.9 ms. (Intel GPUs count execution units,
#: CPUs cores: those keep the base.)
WORK_PER_LAUNCH = 1 << 33
LAUNCH_UNITS = 8
MAX_LAUNCH_SCALE = 16
#: At most this many work-groups share one tile's candidates (the GEMM: a block of rows).
MAX_SPLITS = 8
MAX_GEMM_SPLITS = 2
#: Each split of a tile's candidates keeps its own k best (its own insertions; the offsets
#: engine's splits of a query share the smallest k-th distance as a bound): at most
#: max(MIN_SPLITS, SPLIT_ENTRIES // k) splits (the direct and offsets engines), aiming at
#: GROUPS_PER_UNIT work-groups per compute unit. On the H100 (Table 4 case, 256x256 RGB,
#: p 11; search + finish kernels) k = 1 took 23.3 / 20.3 ms with 3 / 7 splits, k = 16
#: 25.1 / 22.4, k = 128 35.0 / 37.4 with 3 / 6, k = 256 45.6 with 3 (60.4 with one, 54.6
#: with 4 before the heaps' top levels moved to registers and local memory).
SPLIT_ENTRIES = 384
MIN_SPLITS = 3
GROUPS_PER_UNIT = 24
#: Candidates the GEMM engine keeps beyond k (re-scored exactly, then dropped): its values
#: carry the rounding of ||r||^2 - 2 q.r, which can swap near-equal neighbours at the k-th.
GEMM_MARGIN = 4
#: The finishing kernel sorts a grid point's entries of every split in local memory, one
#: work-group per grid point, from this many entries per heap up, where they fit
#: SORTED_MAX keys (below: a work-item per grid point heap-sorts them).
SORTED_FROM = 32
SORTED_MAX = 2048
#: Work-items of the sorting finish (fewer where the device's work-group is smaller).
SORTED_GROUP = 256


def checked_name(self_search: bool, names: tuple[str, str]) -> str:
    """The input a failed value check of a kNN run names: both images are folded into one
    check, so a two-image search names both."""
    return names[0] if self_search else f"{names[0]} or {names[1]}"


def launch_work(profile: Any) -> int:
    """The work of one launch on the device of `profile` (see WORK_PER_LAUNCH)."""
    scale = 1
    if profile.family in ("nvidia", "amd"):
        scale = max(1, min(MAX_LAUNCH_SCALE, int(profile.compute_units) // LAUNCH_UNITS))
    return WORK_PER_LAUNCH * scale


def heap_slots(entries: int) -> int:
    """Slots (8-byte keys) of one heap of `entries` entries (cl_src/lib/topk.mako: entry j
    in slot j + 3, the four children of an entry one aligned group of four slots; the last
    group a heap reads ends below this, a multiple of 4)."""
    return 4 if entries <= 1 else -(-entries // 4) * 4 + 4


def kept_entries(config: KnnConfig, k: int, candidates: int) -> int:
    """Entries per heap: the GEMM's values carry the rounding of ||r||^2 - 2 q.r, so it
    keeps a margin of candidates, all re-scored exactly before the k best are chosen."""
    return k if config.method != "gemm" else min(candidates, k + GEMM_MARGIN)


def planned_sets(config: KnnConfig) -> int:
    """Heap sets per query patch that a block's memory is planned for: the GEMM's one per
    work-item column and split; the other engines fit their splits into what is left."""
    return config.tile_x * MAX_GEMM_SPLITS if config.method == "gemm" else 1


def query_bytes(config: KnnConfig, k: int, candidates: int) -> int:
    """Device bytes per query patch of a block: its heaps (8 bytes a slot), the team
    top-k's candidate buffers and staged results (12 bytes a neighbour)."""
    buffer = team_buffer(config) if config.topk != TOPK_HEAP and k >= config.topk_k else 0
    return 12 * k + 8 * (heap_slots(kept_entries(config, k, candidates)) + buffer) \
        * planned_sets(config)


class KnnPlan(Plan):
    """kNN of every grid patch of a (rows, cols, channels) query image among all patches of
    a (ref_rows, ref_cols, channels) reference (`self_search`: the query is the reference).
    `run(query, reference=None)` returns Matches (NumPy or device arrays like the input);
    `last_events` holds the (stage, event) pairs of the last run. A
    `clpatch.core.plans.Plan`: `clpatch.make_plan("knn", ...)` makes one; its `enqueue`
    waits for nothing: the conversion stores the values the check refuses (NaN, or beyond
    the distances' magnitude limit) as 0, so the search kernels never see them (a NaN in
    the heaps' comparisons is not safe on every device), and the check is judged later.
    `pool`: a buffer pool shared with other plans run in turn on the same queue (the
    banded plan's pairs), instead of one of its own."""

    method = "knn"
    input_names = ("query", "reference")

    def __init__(self, runtime: Runtime, rows: int, cols: int, channels: int,
                 ref_rows: int, ref_cols: int, *, patch_size: int, k: int, metric: str,
                 step: int, config: KnnConfig, self_search: bool, device_output: bool,
                 rescore: bool, memory_bytes: int | None = None,
                 pool: BufferPool | None = None) -> None:
        super().__init__(runtime)
        if pool is not None:
            self.pool = pool
        self.config = config
        self.rows, self.cols, self.channels = rows, cols, channels
        self.ref_rows, self.ref_cols = ref_rows, ref_cols
        self.p, self.k, self.metric, self.step = patch_size, k, metric, step
        self.self_search, self.device_output = self_search, device_output
        self.grid_y = grid_positions(rows, patch_size, step)
        self.grid_x = grid_positions(cols, patch_size, step)
        self.cand_rows, self.cand_cols = ref_rows - patch_size + 1, ref_cols - patch_size + 1
        self.candidates = self.cand_rows * self.cand_cols
        self.kept = kept_entries(config, k, self.candidates)
        self.slots = heap_slots(self.kept)
        ctx = runtime.context
        self._grid_y = int_buffer(ctx, self.grid_y)
        self._grid_x = int_buffer(ctx, self.grid_x)
        p, c = patch_size, channels
        programs = runtime.programs
        self.work_per_launch = launch_work(runtime.profile)
        self._gemm: GemmSearch | None = None
        #: The offsets engine's top-k variant for this k (knn_config.TOPK_*).
        self.topk = TOPK_HEAP
        if config.method == "gemm":
            largest, total = memory_limits(runtime, memory_bytes)
            self._gemm = GemmSearch(
                runtime, self.pool, config, channels=c, patch=p, k=self.kept,
                candidates=self.candidates, cand_cols=self.cand_cols,
                work_per_launch=self.work_per_launch, matrix_bytes=min(largest, total // 4))
        elif config.method == "offsets":
            row_of = np.full(rows - p + 1, -1, np.int32)
            row_of[self.grid_y] = np.arange(len(self.grid_y))
            col_of = np.full(cols - p + 1, -1, np.int32)
            col_of[self.grid_x] = np.arange(len(self.grid_x))
            self._row_of, self._col_of = int_buffer(ctx, row_of), int_buffer(ctx, col_of)
            self.topk = topk_variant(config, runtime.profile, patch=p, channels=c, k=k)
            self._search = kernel(programs.get(
                "match/knn_offsets.cl.mako", patch=p, channels=c, metric=metric,
                tile_x=config.tile_x, tile_y=config.tile_y, offsets=config.offsets,
                dys=config.dys, topk=self.topk,
                heap_local=self.topk == TOPK_HEAP and heap_level_fits(
                    config, runtime.profile, patch=p, channels=c),
                team_rows=team_rows(config, k) if self.topk != TOPK_HEAP else 1,
                ptx=runtime.profile.subgroup_ops == "ptx"),
                "knn_offsets")
        else:
            self._search = kernel(programs.get(
                "match/knn_direct.cl.mako", patch=p, channels=c, metric=metric,
                group=config.group), "knn_direct")
        # Sliding sums (offsets) are exact for integer-valued inputs only; the GEMM's
        # expanded squares never are.
        self.rescore = metric in ("l2", "l1") and (
            config.method == "gemm" or (rescore and config.method == "offsets"))
        self.memory_bytes = memory_bytes
        self.block_rows = self._block_rows(memory_bytes)
        self.splits = self._splits()
        sets = self._gemm.heap_sets(self.splits) if self._gemm is not None else self.splits
        #: Whether the finish sorts in local memory, a work-group per grid point.
        self.sorted_finish = (self.kept >= SORTED_FROM
                              and sets * (1 << (self.kept - 1).bit_length()) <= SORTED_MAX
                              and 16 * SORTED_MAX + 1024 <= int(runtime.profile.local_mem_size))
        #: Work-items per grid point of the sorting finish.
        self.sorted_group = min(SORTED_GROUP, int(runtime.profile.max_work_group_size))
        finish = programs.get("match/knn_finish.cl.mako", patch=p, channels=c, metric=metric,
                              rescore=self.rescore, group=config.group,
                              sorted_max=SORTED_MAX if self.sorted_finish else 0,
                              sorted_group=self.sorted_group)
        self._finish = kernel(finish, "knn_finish_sorted" if self.sorted_finish
                              else "knn_finish")
        self._clear = kernel(finish, "knn_clear")

    # ---- memory and work ---------------------------------------------------------------

    def _block_rows(self, memory_bytes: int | None) -> int:
        """Grid rows per block: heaps (8 bytes a slot) and staged results (12) fit."""
        largest, total = memory_limits(self.runtime, memory_bytes)
        images = 4 * self.channels * (self.rows * self.cols
                                      + (0 if self.self_search else self.ref_rows * self.ref_cols))
        sets = planned_sets(self.config)
        per_row = len(self.grid_x) * query_bytes(self.config, self.k, self.candidates)
        if self.config.method == "gemm":       # the query matrix and the reference chunk
            per_row += len(self.grid_x) * 4 * self._gemm.ld
            # (the query matrix rounds its rows up to a block: one more block at most)
            images += 4 * (self._gemm.chunk_stride * (self._gemm.ld + 1)
                           + self._gemm.block_m * self._gemm.ld)
        room = min(largest // (len(self.grid_x) * self.slots * 8 * sets),
                   max(total - images, 0) // per_row)
        return int(max(1, min(len(self.grid_y), room)))

    def _splits(self) -> int:
        """Work-groups sharing each tile's candidates (each with its own heaps): enough
        work-groups to fill the device, GROUPS_PER_UNIT per compute unit, when the grid
        alone has too few, within the memory budget of the heaps."""
        gx, cfg = len(self.grid_x), self.config
        rows = min(self.block_rows, len(self.grid_y))
        if cfg.method == "gemm":
            groups = -(-rows * gx // self._gemm.block_m)
            return int(max(1, min(MAX_GEMM_SPLITS,
                                  -(-8 * int(self.runtime.profile.compute_units) // groups))))
        if cfg.method == "offsets":
            span = int(self.grid_y[rows - 1]) - int(self.grid_y[0]) + 1
            groups = -(-(self.cols - self.p + 1) // cfg.tile_x) * -(-span // cfg.tile_y)
        else:
            groups = -(-gx // cfg.group) * rows
        want = -(-GROUPS_PER_UNIT * int(self.runtime.profile.compute_units) // max(groups, 1))
        largest, total = memory_limits(self.runtime, self.memory_bytes)
        fit = max(1, min(largest, total // 3) // max(1, rows * gx * self.slots * 8))
        # Each split keeps its own k best, so a split costs heap insertions of its own:
        # large k gets fewer splits.
        return int(max(1, min(want, fit, MAX_SPLITS, max(MIN_SPLITS, SPLIT_ENTRIES // self.k))))

    def _pair_cost(self) -> int:
        p, c = self.p, self.channels
        if self.config.method == "offsets":
            return 2 * c + 4
        if self.metric in ("l2", "l1"):
            return p * p * c
        return p ** 4 * c

    def check_limit(self) -> float:
        """The largest |value| the distances can take without overflow (Chamfer only
        compares values: any finite value)."""
        if self.metric in ("l2", "l1"):
            return magnitude_limit(self.p, self.channels)
        return float(np.finfo(np.float32).max)

    # ---- running -------------------------------------------------------------------------

    def run(self, query: Any, reference: Any = None, *,
            names: tuple[str, str] = ("query", "reference")) -> Matches:
        """The matches of `query` in `reference` (None: in itself); errors name the inputs
        `names`. Waits for the run and its value check."""
        q = as_volume(query, name=names[0], video=False)
        r = q if reference is None else as_volume(reference, name=names[1], video=False)
        found, last = self.launch(q, r, None, None)
        check_peak(self.uploader.peak(last), self.check_limit(), self.checked_name(names))
        return found

    def enqueue_arrays(self, query: Any, reference: Any = None, *, out: Any,
                       wait_for: list[Any] | None) -> tuple[Matches, list[Any]]:
        """The plan's `enqueue` (`clpatch.core.plans.Plan`): the kNN of device `query` in
        device `reference` (none for a self-search plan) into device Matches, the inputs'
        value check deferred."""
        if not self.device_output:
            raise TypeError("this plan was made for NumPy arrays; make_plan's plans take both")
        q = as_volume(query, name="query", video=False)
        r = q if reference is None else as_volume(reference, name="reference", video=False)
        found, last = self.launch(q, r, out, wait_for)
        self.defer_check(last, self.check_limit(), self.checked_name(("query", "reference")))
        return found, last

    def checked_name(self, names: tuple[str, str]) -> str:
        """The input a failed value check names (`checked_name`)."""
        return checked_name(self.self_search, names)

    def launch(self, q: Volume, r: Volume, out: Any,
               wait_for: list[Any] | None) -> tuple[Matches, list[Any]]:
        """Enqueue the run (uploads, blocks of grid rows, copies back for NumPy output);
        returns the Matches and the last launches' events, without waiting. The values of
        both inputs are folded into the uploader's check word of this run (read it with
        `uploader.peak` / `defer_check` after the returned events); those it refuses
        reach the search kernels as 0."""
        events: list[tuple[str, Any]] = []
        limit = self.check_limit()
        self.uploader.begin()
        qbuf = self.pool.get("query", 4 * self.channels * self.rows * self.cols)
        events += self.uploader.convert(q, 0, 1, 0, self.rows, qbuf, staging="stage_q",
                                        wait_for=wait_for, limit=limit)
        if self.self_search:
            rbuf = qbuf
        else:
            rbuf = self.pool.get("reference", 4 * self.channels * self.ref_rows * self.ref_cols)
            events += self.uploader.convert(r, 0, 1, 0, self.ref_rows, rbuf, staging="stage_r",
                                            wait_for=[events[-1][1]], limit=limit)
        gy, gx, k = len(self.grid_y), len(self.grid_x), self.k
        sink = MatchesSink(self, (), gy, gx, k, 2, device=self.device_output, out=out)
        images = (qbuf, np.int32(self.rows), np.int32(self.cols), rbuf,
                  np.int32(self.ref_rows), np.int32(self.ref_cols))
        last = [events[-1][1]]
        if self._gemm is not None:
            centred = self._gemm.begin(images[3:], last)
            events.append(("centre", centred))
            last = [centred]
        for g0 in range(0, gy, self.block_rows):
            g1 = min(gy, g0 + self.block_rows)
            last = self._block(g0, g1, images, sink, events, last)
        self.last_events = events
        positions, distances = sink.arrays()
        return (Matches(positions, distances, self.grid_y.copy(), self.grid_x.copy(), self.p,
                        self.step, 0, k, self.metric, 0, self.config), last)

    def _block(self, g0: int, g1: int, images: tuple, sink: MatchesSink,
               events: list[tuple[str, Any]], wait: list[Any]) -> list[Any]:
        queue, gx = self.runtime.queue, len(self.grid_x)
        slots = (g1 - g0) * gx * self.slots        # heap slots of one set
        sets = self._gemm.heap_sets(self.splits) if self._gemm is not None else self.splits
        stored = slots * sets
        heaps = self.pool.get("heaps", 8 * stored)
        lx = self.config.group
        cleared = [self._clear(queue, (-(-stored // lx) * lx,), (lx,), heaps,
                               np.int32(stored), wait_for=wait)]
        events += [("clear", e) for e in cleared]
        if self._gemm is not None:
            last = self._gemm.enqueue(images[:3], images[3:], (self._grid_y, self._grid_x, g0, gx),
                                      (g1 - g0) * gx, heaps, self.slots, self.splits, events,
                                      cleared)
        elif self.config.method == "offsets":
            last = self._offsets(g0, g1, images, heaps, slots, events, cleared)
        else:
            last = self._direct(g0, g1, images, heaps, slots, events, cleared)
        out_pos, out_dist, _, out_row0, _ = sink.target(0, 1, g0, g1)
        if self.sorted_finish:
            width, lx = gx * self.sorted_group, self.sorted_group
        else:
            width = -(-gx // lx) * lx
        finished = self._finish(queue, (width, g1 - g0), (lx, 1), *images,
                                self._grid_y, self._grid_x, np.int32(g0), np.int32(gx),
                                np.int32(sets), np.int32(slots), np.int32(self.kept),
                                np.int32(self.slots), np.int32(self.k), heaps,
                                out_pos, out_dist, np.int32(out_row0), wait_for=last)
        events.append(("finish", finished))
        sink.store(0, 1, g0, g1, (out_pos, out_dist), [finished])
        return [finished]

    def _offsets(self, g0: int, g1: int, images: tuple, heaps: Any, stride: int,
                 events: list[tuple[str, Any]], wait: list[Any]) -> list[Any]:
        """Launches over pieces of the dy range, each under `work_per_launch` (`stride`:
        heap slots between two splits' heap sets)."""
        cfg, p = self.config, self.p
        qy0 = int(self.grid_y[g0])
        span = int(self.grid_y[g1 - 1]) - qy0 + 1
        tiles_x = -(-(self.cols - p + 1) // cfg.tile_x)
        tiles_y = -(-span // cfg.tile_y)
        dy_lo, dy_hi = -(self.rows - p), self.cand_rows
        per_dy = tiles_x * tiles_y * cfg.tile_x * cfg.tile_y * (self.cand_cols + cfg.tile_x)
        # Whole groups of the kernel's consecutive dy per launch (a launch of fewer would
        # compute the group's other offsets for nothing), even past `work_per_launch`.
        dys = max(1, self.work_per_launch // max(1, per_dy * self._pair_cost()))
        dys = max(cfg.dys, dys - dys % cfg.dys)
        team = ()
        if self.topk != TOPK_HEAP:          # the team top-k's candidate buffers
            count = self.splits * (stride // self.slots) * team_buffer(cfg)
            team = (self.pool.get("team_d", 4 * count), self.pool.get("team_i", 4 * count))
        last = wait
        for a in range(dy_lo, dy_hi, dys):
            event = self._search(
                self.runtime.queue, (tiles_x * cfg.tile_x, tiles_y * cfg.tile_y, self.splits),
                (cfg.tile_x, cfg.tile_y, 1), *images, self._row_of, self._col_of,
                np.int32(qy0), np.int32(g0), np.int32(g1), np.int32(len(self.grid_x)),
                np.int32(a), np.int32(min(dy_hi, a + dys)), np.int32(stride), np.int32(self.k),
                np.int32(self.slots), heaps, *team, wait_for=last)
            events.append(("search", event))
            last = [event]
        return last

    def _direct(self, g0: int, g1: int, images: tuple, heaps: Any, stride: int,
                events: list[tuple[str, Any]], wait: list[Any]) -> list[Any]:
        """Launches over pieces of the candidate range, each under `work_per_launch`
        (`stride`: heap slots between two splits' heap sets)."""
        lx, gx = self.config.group, len(self.grid_x)
        per_candidate = (g1 - g0) * gx * self._pair_cost()
        count = max(1, self.work_per_launch // max(1, per_candidate))
        last = wait
        for a in range(0, self.candidates, count):
            event = self._search(
                self.runtime.queue, (-(-gx // lx) * lx, g1 - g0, self.splits), (lx, 1, 1),
                *images, self._grid_y, self._grid_x, np.int32(g0), np.int32(g0), np.int32(gx),
                np.int32(a), np.int32(min(self.candidates, a + count)),
                np.int32(stride), np.int32(self.k), np.int32(self.slots), heaps,
                wait_for=last)
            events.append(("search", event))
            last = [event]
        return last

