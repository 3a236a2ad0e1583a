"""The NNF's plan: for two image shapes and the parameters, the compiled kernels and the
device buffers, reused between runs (`cl_src/match/nnf_index.cl.mako`,
`nnf_search.cl.mako` and `nnf_rank.cl.mako` hold the kernels and their launch layouts; the
algorithm is the module doc of clpatch/match/nnf/search.py).

A run uploads both images (checked by the conversion), fits the PCA model on the host from
a seeded sample, projects every patch on the device, builds the k-d tree level by level
(a bitonic sort of every node's points on its split dimension, then the medians), searches
every query's containing leaf, completes the exact rows by backtracking, propagates down
each band of rows, refines the lists, re-ranks the candidates on the full patches and
polishes the field on full distances where the lists cannot vouch for it. Every launch
waits for the previous one through events; `last_events` keeps (stage, event) pairs for
profiling.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl

from ...core.buffers import memory_limits
from ...core.kernels import kernel
from ...core.plans import Plan
from ...core.runtime import Runtime
from ...core.sinks import MatchesSink
from ...core.upload import check_peak
from ...core.volumes import Volume, as_volume, magnitude_limit
from ..matches import Matches
from .bands import NnfBand, plan_bands, rows_per_band
from .pca import NnfModel, fit_rows
from .sample import sample_rows
from .tree import KdTree

__all__ = ["BAND", "EFFORT_DIMS", "EXPAND", "EXPAND_LEAVES", "EXPAND_VISITS", "HALO", "POLISH",
           "REFINE", "SORT_BLOCK", "VISITS", "NnfPlan", "hard_effort", "tree_levels"]

#: Rows per propagation band: rows 0, BAND, 2·BAND, … are searched by backtracking, and
#: the rows between them are propagated from the row above, all bands at once.
BAND = 16
#: Leaves a backtracking search visits at most (the paper's bound on a traversal): a
#: traversal is a single work-item's sequential walk, so this bounds the launch's latency.
VISITS = 32
#: Refinement passes after the propagation (every query, from its four neighbours).
REFINE = 2
#: The expansion of the queries whose lists cannot vouch for their matches: the points
#: of the leaves of their first EXPAND_LEAVES distinct candidates' leaves, the EXPAND
#: nearest in the reduced space, are re-ranked too (either 0: no expansion).
EXPAND = 16
EXPAND_LEAVES = 4
#: Up to 10 reduced dimensions the hard queries get the effort above; in more, where the
#: reduced distance holds more of the full one (so an approximate list passes the test
#: more often without being the nearest) and a k-d tree's neighbourhoods spread over more
#: leaves, `hard_effort` scales it (see there).
EFFORT_DIMS = 10
#: Leaves the expansion's traversal visits per step of the scale (0 up to EFFORT_DIMS).
EXPAND_VISITS = 8
#: Polish passes after the re-ranking (the queries whose lists cannot vouch for their
#: matches, from their four neighbours' first matches, on full distances).
POLISH = 2
#: Pairs a work-group sorts in local memory (at most; a power of two).
SORT_BLOCK = 2048
#: Rows beyond its own that a query's field depends on through the checkerboard passes
#: (one per half-pass of the refinement and of the polish; `clpatch.match.nnf.bands`).
HALO = 2 * (REFINE + POLISH)


def hard_effort(dims: int) -> tuple[float, int, int, int]:
    """(slack, expand, expand_leaves, expand_visits) of the hard queries in a reduced space
    of `dims` dimensions, with f = ceil(dims / EFFORT_DIMS) clipped to 1–4: a query is hard
    when its k-th full distance exceeds slack · its list's M-th reduced distance, slack =
    sqrt(min(1, EFFORT_DIMS / dims)) as float32 (0.7071 at 20 dimensions); its expansion
    takes the EXPAND · f nearest other points of the leaves of its first EXPAND_LEAVES · f
    distinct candidates' leaves and of a traversal of the tree visiting
    EXPAND_VISITS · (f − 1) leaves. Up to EFFORT_DIMS dimensions: (1.0, EXPAND,
    EXPAND_LEAVES, 0)."""
    f = min(4, max(1, -(-dims // EFFORT_DIMS)))
    slack = float(np.float32(np.sqrt(min(1.0, EFFORT_DIMS / dims))))
    return slack, EXPAND * f, EXPAND_LEAVES * f, EXPAND_VISITS * (f - 1)


def tree_levels(points: int, leaf: int) -> int:
    """Levels of internal nodes over `points` points in leaves of `leaf` slots."""
    levels = 0
    while (leaf << levels) < points:
        levels += 1
    return levels


class NnfPlan(Plan):
    """NNF of every patch of an (ha, wa, channels) image among the patches of an (hb, wb,
    channels) one. `run(a, b)` returns Matches (NumPy or device arrays like `a`). A
    `clpatch.core.plans.Plan` (`clpatch.make_plan("nnf", ...)` makes one). Without a
    `model` its runs wait once: the PCA model is fit on the host, to a sample of the
    inputs' patches (`waits_for_sample`); with one (a checked `NnfModel`, uploaded here)
    they wait for nothing, the value checks deferred (`enqueue`) or read at the end
    (`run`), and the conversion keeps values the checks refuse away from the kernels."""

    method = "nnf"
    input_names = ("a", "b")

    def __init__(self, runtime: Runtime, ha: int, wa: int, hb: int, wb: int, channels: int, *,
                 patch_size: int, k: int, pca_dims: int, candidates: int, leaf_size: int,
                 seed: int, device_output: bool, tile_bytes: int | None = None,
                 model: NnfModel | None = None) -> None:
        """`tile_bytes`: the memory a run may take (None: the device's, see
        `clpatch.core.buffers.memory_limits`); a larger `a` is searched in bands of rows
        (`clpatch.match.nnf.bands`), with the same field."""
        super().__init__(runtime)
        self.model = model
        if model is not None:       # on the device once: a run copies nothing from the host
            for name, values in (("mean", model.mean), ("basis", model.basis)):
                cl.enqueue_copy(runtime.queue, self.pool.get(name, values.nbytes), values)
        self.ha, self.wa, self.hb, self.wb, self.channels = ha, wa, hb, wb, channels
        self.p, self.k, self.dims, self.m = patch_size, k, pca_dims, candidates
        self.leaf, self.seed, self.device_output = leaf_size, seed, device_output
        p = patch_size
        self.hac, self.wac = ha - p + 1, wa - p + 1
        self.hbc, self.wbc = hb - p + 1, wb - p + 1
        self.na, self.nb = self.hac * self.wac, self.hbc * self.wbc
        self.levels = tree_levels(self.nb, leaf_size)
        self.n_pad = leaf_size << self.levels
        group = int(runtime.profile.max_work_group_size)
        self.sort_block = min(SORT_BLOCK, self.n_pad, 2 * (1 << (group.bit_length() - 1)))
        program = runtime.programs.get(
            "match/nnf_index.cl.mako", patch=p, channels=channels, dims=pca_dims,
            leaf=leaf_size, sort_block=self.sort_block)
        search = runtime.programs.get(
            "match/nnf_search.cl.mako", patch=p, channels=channels, dims=pca_dims,
            leaf=leaf_size, cand=candidates, band=BAND, visits=VISITS)
        self.slack, self.expand, self.expand_leaves, self.expand_visits = hard_effort(pca_dims)
        rank = runtime.programs.get(
            "match/nnf_rank.cl.mako", patch=p, channels=channels, cand=candidates,
            dims=pca_dims, leaf=leaf_size, expand=max(self.expand, 1),
            expand_leaves=max(self.expand_leaves, 1), slack=self.slack,
            expand_visits=self.expand_visits)
        self._k = {name: kernel(program, name) for name in (
            "nnf_sample", "nnf_project", "nnf_bounds", "nnf_root", "nnf_keys", "nnf_sort_block",
            "nnf_medians", "nnf_leaves", "nnf_sort_merge")}
        self._k.update({name: kernel(search, name) for name in (
            "nnf_contain", "nnf_exact", "nnf_propagate", "nnf_refine")})
        self._k.update({name: kernel(rank, name) for name in (
            "nnf_rerank", "nnf_expand", "nnf_polish")})
        self.tile_bytes = tile_bytes
        self.bands = self._plan_bands(tile_bytes)
        #: Patch-grid rows a band computes at most (all of a's in one pass).
        self.band_rows = max(band.e - band.s for band in self.bands)
        na = self.band_rows * self.wac
        # Two buffers serve two arrays each, one live while the other is not: the tree's
        # sort keys, then the candidate distances; the tree's order, then every query's
        # searched leaves. Each is sized once for both, so neither use reallocates it.
        self.tree = KdTree(runtime, self.pool, program, self._k, points=self.nb,
                           levels=self.levels, n_pad=self.n_pad, sort_block=self.sort_block,
                           dims=pca_dims, keys_bytes=max(8 * self.n_pad, 4 * na * candidates),
                           order_bytes=max(4 * self.n_pad, 8 * na))

    def _plan_bands(self, tile_bytes: int | None) -> list[NnfBand]:
        """a's bands (one when a fits beside b; `clpatch.match.nnf.bands`)."""
        c, dr, m, k = self.channels, self.dims, self.m, self.k
        largest, total = memory_limits(self.runtime, tile_bytes)
        nodes = max(2, 1 << self.levels)
        tree = [4 * self.n_pad * dr, 8 * self.n_pad, 4 * self.n_pad, 4 * self.nb,
                16 * nodes * (dr + 2)]
        fixed = [4 * c * self.hb * self.wb, 4 * self.nb * dr, *tree]
        if self.device_output:          # the result's arrays
            fixed += [8 * k * self.na, 4 * k * self.na]
        wac = self.wac
        # Per row of a band: a's image row, reduced points, candidate lists, searched
        # leaves, and the band's matches.
        row = [4 * c * self.wa, 4 * wac * dr, 8 * wac * m, 8 * wac, 12 * wac * k]
        kept = rows_per_band(self.hac, fixed_bytes=sum(fixed), fixed_largest=max(fixed),
                             row_bytes=sum(row), row_largest=max(4 * wac * m, 4 * wac * dr,
                                                                 8 * wac * k),
                             largest=largest, total=total, halo=HALO, align=BAND,
                             what=f"b ({self.hb}x{self.wb})")
        return plan_bands(self.hac, kept, HALO, BAND)

    # ---- pieces ----------------------------------------------------------------------

    def _project(self, image: Any, shape: tuple[int, int], mean: Any, basis: Any, out: Any,
                 count: int, events: list, wait: list) -> list:
        queue, i32 = self.runtime.queue, np.int32
        step = 1 << 22
        last = wait
        for first in range(0, count, step):
            n = min(step, count - first)
            last = [self._k["nnf_project"](queue, (-(-n // 128) * 128,), (128,), image,
                                           i32(shape[0]), i32(shape[1]), mean, basis,
                                           i32(first), i32(n), out, wait_for=last)]
            events.append(("project", last[0]))
        return last

    @property
    def waits_for_sample(self) -> bool:
        """Whether `enqueue` reads the inputs' value checks and the PCA sample back before
        the search: when the plan was given no model."""
        return self.model is None

    # ---- running -----------------------------------------------------------------------

    def run(self, a: Any, b: Any) -> Matches:
        """The field of `a` in `b` (the planned shapes; NumPy in → NumPy out, device in →
        device out)."""
        found = self._launch(as_volume(a, name="a", video=False),
                             as_volume(b, name="b", video=False), None)[0]
        self.check()
        return found

    def enqueue_arrays(self, a: Any, b: Any, *, out: Any,
                       wait_for: list[Any] | None) -> tuple[Matches, list[Any]]:
        """The plan's `enqueue` (`clpatch.core.plans.Plan`): the field of device `a` in
        device `b` into device Matches (`out`: a Matches or (positions, distances) of the
        caller's); without a model it waits for the value checks and the PCA sample
        (`waits_for_sample`)."""
        if not self.device_output:
            raise TypeError("this plan was made for NumPy arrays; make_plan's plans take both")
        return self._launch(as_volume(a, name="a", video=False),
                            as_volume(b, name="b", video=False), out)

    def _launch(self, va: Volume, vb: Volume, out: Any) -> tuple[Matches, list[Any]]:
        queue, c = self.runtime.queue, self.channels
        events: list[tuple[str, Any]] = []
        banded = len(self.bands) > 1
        limit = magnitude_limit(self.p, c)
        # a's check (whole, or band by band through the band's buffer), then b's: one
        # check per image, so that the error names the one that fails. Values the check
        # refuses are stored as 0 (a given model's run reads the checks only later).
        self.uploader.begin()
        abuf = self.pool.get("a", 4 * c * (self.band_rows + self.p - 1) * self.wa)
        for band in self.bands:
            events += self.uploader.convert(va, 0, 1, band.a0, band.a1 + self.p - 1, abuf,
                                            staging="stage_a", limit=limit)
        if self.model is None:
            peak_a = self.uploader.peak([events[-1][1]])
        else:
            self.defer_check([events[-1][1]], limit, "a")
        self.uploader.begin()
        bbuf = self.pool.get("b", 4 * c * self.hb * self.wb)
        events += self.uploader.convert(vb, 0, 1, 0, self.hb, bbuf, staging="stage_b",
                                        limit=limit)
        mbuf = self.pool.get("mean", 4 * self.p * self.p * c)
        wbuf = self.pool.get("basis", 4 * self.p * self.p * c * self.dims)
        if self.model is None:
            check_peak(peak_a, limit, "a")
            check_peak(self.uploader.peak([events[-1][1]]), limit, "b")
            model = fit_rows(sample_rows(self, self._k["nnf_sample"], va,
                                         None if banded else abuf, vb, bbuf, events),
                             self.dims)
            # (the run waited already: these copies end at once)
            last = [cl.enqueue_copy(queue, mbuf, model.mean, is_blocking=False),
                    cl.enqueue_copy(queue, wbuf, model.basis, is_blocking=False),
                    events[-1][1]]
        else:
            self.defer_check([events[-1][1]], limit, "b")
            last = [events[-1][1]]
        rb = self.pool.get("rb", 4 * self.nb * self.dims)
        last = self._project(bbuf, (self.hb, self.wb), mbuf, wbuf, rb, self.nb, events, last)
        tree, last = self.tree.build(rb, events, last)
        sink = MatchesSink(self, (), self.hac, self.wac, self.k, 2, device=self.device_output,
                           out=out)
        row_bytes = 4 * self.wac * self.k       # of distances; positions take twice that
        ra = self.pool.get("ra", 4 * self.band_rows * self.wac * self.dims)
        for band in self.bands:
            rows = band.e - band.s
            if banded:      # the band's rows of a, then its matches into a buffer of its own
                events += self.uploader.convert(va, 0, 1, band.s, band.e + self.p - 1, abuf,
                                                staging="stage_a", wait_for=last, limit=limit)
                last = [events[-1][1]]
                out_pos = self.pool.get("band_pos", 2 * self.band_rows * row_bytes)
                out_dist = self.pool.get("band_dist", self.band_rows * row_bytes)
            else:
                out_pos, out_dist = sink.target(0, 1, 0, self.hac)[:2]
            last = self._project(abuf, (rows + self.p - 1, self.wa), mbuf, wbuf, ra,
                                 rows * self.wac, events, last)
            last = self._search_rows(abuf, rows, bbuf, ra, rb, tree, out_pos, out_dist,
                                     events, last)
            if banded:      # the rows kept, into the result
                pos_t, dist_t, _, row0, _ = sink.target(0, 1, band.a0, band.a1)
                kept, skip = band.a1 - band.a0, band.a0 - band.s
                last = [cl.enqueue_copy(queue, pos_t, out_pos, byte_count=2 * kept * row_bytes,
                                        src_offset=2 * skip * row_bytes,
                                        dst_offset=2 * row0 * row_bytes, wait_for=last),
                        cl.enqueue_copy(queue, dist_t, out_dist, byte_count=kept * row_bytes,
                                        src_offset=skip * row_bytes,
                                        dst_offset=row0 * row_bytes, wait_for=last)]
                sink.store(0, 1, band.a0, band.a1, (pos_t, dist_t), last)
            elif not self.device_output:    # blocking copies: nothing left to wait for
                sink.store(0, 1, 0, self.hac, (out_pos, out_dist), last)
        if not self.device_output:
            last = []
        self.last_events = events
        positions, distances = sink.arrays()
        grid_y = np.arange(self.hac, dtype=np.int32)
        grid_x = np.arange(self.wac, dtype=np.int32)
        return (Matches(positions, distances, grid_y, grid_x, self.p, 1, 0, self.k, "l2", 0,
                        None), last)

    def _search_rows(self, abuf: Any, rows: int, bbuf: Any, ra: Any, rb: Any,
                     tree: tuple[Any, ...], out_pos: Any, out_dist: Any, events: list,
                     wait: list) -> list:
        """The field of `rows` patch-grid rows of a (their image rows in `abuf`, their
        reduced points in `ra`) in b (its reduced points `rb`, its `tree`) into `out_pos`/
        `out_dist`: containing leaves, exact rows, propagation, refinement, then the
        re-ranking, expansion and polish. Returns the last launches' events."""
        queue, i32, m, wac = self.runtime.queue, np.int32, self.m, self.wac
        dims, med, leaf_pts, leaf_pid, leaf_of = tree
        na = rows * wac
        cd = self.pool.get("keys_cand_d", self.tree.keys_bytes)
        ci = self.pool.get("cand_i", 4 * self.band_rows * wac * m)
        searched = self.pool.get("order_searched", self.tree.order_bytes)
        levels, nb = i32(self.levels), i32(self.nb)
        last = [self._k["nnf_contain"](queue, (-(-na // 64) * 64,), (64,), ra, i32(na), dims,
                                       med, levels, leaf_pts, leaf_pid, nb, cd, ci, searched,
                                       wait_for=wait)]
        events.append(("contain", last[0]))
        bands = -(-rows // BAND)
        cols = (-(-wac // 64) * 64, bands)
        last = [self._k["nnf_exact"](queue, cols, (64, 1), ra, i32(rows), i32(wac), dims, med,
                                     levels, leaf_pts, leaf_pid, nb, cd, ci, searched,
                                     wait_for=last)]
        events.append(("exact", last[0]))
        for t in range(1, min(BAND, rows)):
            last = [self._k["nnf_propagate"](
                queue, cols, (64, 1), ra, i32(rows), i32(wac), i32(t), leaf_pts, leaf_pid,
                leaf_of, nb, i32(self.hbc), i32(self.wbc), cd, ci, searched, wait_for=last)]
            events.append(("propagate", last[0]))
        grid = (-(-((wac + 1) // 2) // 64) * 64, rows)
        for _ in range(REFINE):
            for colour in (0, 1):       # a checkerboard: each half reads the other's lists
                last = [self._k["nnf_refine"](
                    queue, grid, (64, 1), ra, i32(rows), i32(wac), rb, i32(self.hbc),
                    i32(self.wbc), i32(colour), cd, ci, wait_for=last)]
                events.append(("refine", last[0]))
        return self._rerank(abuf, rows, bbuf, (ra, *tree, cd, ci), out_pos, out_dist, events,
                            last)

    def projections(self) -> tuple[np.ndarray, np.ndarray]:
        """The last run's reduced points of a and b: float32 (Na, pca_dims), (Nb, pca_dims)
        (what the tests feed the NumPy oracle, so that its tree and search see the device's
        own coordinates); only for a plan whose `a` is searched in one pass)."""
        if len(self.bands) > 1:
            raise RuntimeError("projections() reads a's reduced points of one pass; this "
                               "plan searches a in bands")
        ra = np.empty((self.na, self.dims), np.float32)
        rb = np.empty((self.nb, self.dims), np.float32)
        cl.enqueue_copy(self.runtime.queue, ra, self.pool.get("ra", ra.nbytes))
        cl.enqueue_copy(self.runtime.queue, rb, self.pool.get("rb", rb.nbytes))
        return ra, rb

    def _rerank(self, abuf: Any, rows: int, bbuf: Any, search: tuple, out_pos: Any,
                out_dist: Any, events: list, wait: list) -> list:
        """Re-ranking, expansion and polish of `rows` patch-grid rows of a (image rows in
        `abuf`): `search` is (ra, dims, med, leaf_pts, leaf_pid, leaf_of, cd, ci), the reduced
        points of a, the tree (split dimensions, medians, leaves) and the candidate lists;
        into `out_pos`/`out_dist`."""
        queue, i32, k, wac = self.runtime.queue, np.int32, self.k, self.wac
        ra, tdims, tmed, leaf_pts, leaf_pid, leaf_of, cd, ci = search
        ha, cols = rows + self.p - 1, (-(-wac // 64) * 64, rows)
        last = [self._k["nnf_rerank"](
            queue, cols, (64, 1), abuf, i32(ha), i32(self.wa), bbuf, i32(self.hb),
            i32(self.wb), i32(0), i32(rows), i32(wac), ci, i32(k), out_pos, out_dist,
            wait_for=wait)]
        events.append(("rerank", last[0]))
        if self.expand and self.expand_leaves:
            last = [self._k["nnf_expand"](
                queue, cols, (64, 1), abuf, i32(ha), i32(self.wa), bbuf, i32(self.hb),
                i32(self.wb), i32(rows), i32(wac), ra, tdims, tmed, i32(self.levels),
                leaf_pts, leaf_pid, leaf_of, cd, ci, i32(k), out_pos, out_dist,
                wait_for=last)]
            events.append(("expand", last[0]))
        grid = (-(-((wac + 1) // 2) // 64) * 64, rows)
        for _ in range(POLISH):
            for colour in (0, 1):       # a checkerboard: each half reads the other's matches
                last = [self._k["nnf_polish"](
                    queue, grid, (64, 1), abuf, i32(ha), i32(self.wa), bbuf,
                    i32(self.hb), i32(self.wb), i32(rows), i32(wac), i32(colour), cd,
                    i32(k), out_pos, out_dist, wait_for=last)]
                events.append(("polish", last[0]))
        return last

