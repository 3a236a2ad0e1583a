"""The NNF's plan: for two image shapes and the parameters, the compiled kernels and the
device buffers, reused between runs (`cl_src/match/nnf_index.cl.mako`,
`nnf_search.cl.mako` and `nnf_rank.cl.mako` hold the kernels and their launch layouts; the
algorithm is the module doc of clpatch/match/nnf.py).

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

from ..core.kernels import kernel
from ..core.plans import Plan
from ..core.runtime import Runtime
from ..core.sinks import MatchesSink
from ..core.upload import check_peak
from ..core.volumes import Volume, as_volume, magnitude_limit
from .matches import Matches
from .nnf_pca import fit_rows, patch_vectors, sample_picks

__all__ = ["BAND", "EFFORT_DIMS", "EXPAND", "EXPAND_LEAVES", "EXPAND_VISITS", "POLISH",
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
    `clpatch.core.plans.Plan` (`clpatch.make_plan("nnf", ...)` makes one), whose `enqueue`
    waits once per run: the PCA model is fit on the host, to a sample of the inputs'
    patches (`waits_for_sample`)."""

    method = "nnf"
    input_names = ("a", "b")
    #: `enqueue` reads the inputs' value checks and the PCA sample back before the search.
    waits_for_sample = True

    def __init__(self, runtime: Runtime, ha: int, wa: int, hb: int, wb: int, channels: int, *,
                 patch_size: int, k: int, pca_dims: int, candidates: int, leaf_size: int,
                 seed: int, device_output: bool) -> None:
        super().__init__(runtime)
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
        self._program = program
        # One kernel object per bitonic step, so a rerun sets no argument again.
        self._steps: dict[tuple[int, int], Any] = {}
        # Two buffers serve two arrays each, one live while the other is not: the tree's
        # sort keys, then the candidate distances; the tree's order, then every query's
        # searched leaves. Each is sized once for both, so neither use reallocates it.
        self._keys_cand_d_bytes = max(8 * self.n_pad, 4 * self.na * candidates)
        self._order_searched_bytes = max(4 * self.n_pad, 8 * self.na)

    # ---- pieces ----------------------------------------------------------------------

    def _step(self, keys: Any, vals: Any, m_log2: int, s_log2: int) -> Any:
        """The bitonic step kernel of phase 2^m_log2, stride 2^s_log2 (flip: -1), its
        arguments set once: the plan's key and value buffers do not change between runs,
        so a rerun enqueues ~400 steps without touching an argument."""
        found = self._steps.get((m_log2, s_log2))
        if found is None or found[1] is not keys or found[2] is not vals:
            if m_log2 < 0:      # two strides, 2^s_log2 and half that, in one pass
                raw = cl.Kernel(self._program, "nnf_sort_step2")
                raw.set_args(keys, vals, np.int32(s_log2))
            else:
                raw = cl.Kernel(self._program, "nnf_sort_step")
                raw.set_args(keys, vals, np.int32(m_log2), np.int32(s_log2))
            found = self._steps[(m_log2, s_log2)] = (raw, keys, vals)
        return found[0]

    def _sort(self, keys: Any, vals: Any, seg_log2: int, events: list, wait: list) -> list:
        """Sort (keys, vals) within aligned segments of 2^seg_log2 pairs."""
        queue, sb = self.runtime.queue, self.sort_block
        half = (self.n_pad // 2,)
        sb_log2 = sb.bit_length() - 1
        block_log2 = min(seg_log2, sb_log2)
        last = [self._k["nnf_sort_block"](queue, half, (sb // 2,), keys, vals,
                                          np.int32(block_log2), wait_for=wait)]
        events.append(("tree", last[0]))
        quarter = (self.n_pad // 4,)
        for m_log2 in range(sb_log2 + 1, seg_log2 + 1):
            last = [cl.enqueue_nd_range_kernel(queue, self._step(keys, vals, m_log2, -1),
                                               half, None, wait_for=last)]
            events.append(("tree", last[0]))
            s_log2 = m_log2 - 2
            while s_log2 >= sb_log2:        # the global strides, two per pass where possible
                if s_log2 - 1 >= sb_log2:
                    step, size, s_next = self._step(keys, vals, -1, s_log2), quarter, s_log2 - 2
                else:
                    step, size, s_next = self._step(keys, vals, m_log2, s_log2), half, s_log2 - 1
                last = [cl.enqueue_nd_range_kernel(queue, step, size, None, wait_for=last)]
                events.append(("tree", last[0]))
                s_log2 = s_next
            last = [self._k["nnf_sort_merge"](queue, half, (sb // 2,), keys, vals,
                                              wait_for=last)]
            events.append(("tree", last[0]))
        return last

    def _tree(self, rb: Any, events: list, wait: list) -> tuple[Any, ...]:
        """The k-d tree over b's reduced points: (dims, med, leaf_pts, leaf_pid, leaf_of)."""
        queue, i32, dr = self.runtime.queue, np.int32, self.dims
        nodes = max(2, 1 << self.levels)
        dims = self.pool.get("dims", 4 * nodes)
        med = self.pool.get("med", 4 * nodes)
        lo = self.pool.get("lo", 4 * nodes * dr)
        hi = self.pool.get("hi", 4 * nodes * dr)
        keys = self.pool.get("keys_cand_d", self._keys_cand_d_bytes)
        order = self.pool.get("order_searched", self._order_searched_bytes)
        last = wait
        if not self.levels:     # one leaf: the identity order (nnf_keys writes it otherwise)
            last = [cl.enqueue_copy(queue, order, np.arange(self.n_pad, dtype=np.int32),
                                    wait_for=wait, is_blocking=False)]
        else:
            last = [self._k["nnf_bounds"](queue, (256, dr), (256, 1), rb, i32(self.nb), lo,
                                          hi, wait_for=last)]
            last = [self._k["nnf_root"](queue, (1,), None, lo, hi, dims, wait_for=last)]
            events += [("tree", e) for e in last]
        total_log2 = self.n_pad.bit_length() - 1
        for level in range(self.levels):
            seg_log2 = total_log2 - level
            last = [self._k["nnf_keys"](queue, (self.n_pad,), None, rb, i32(self.nb), dims,
                                        i32(level), i32(seg_log2), order, keys,
                                        wait_for=last)]
            events.append(("tree", last[0]))
            last = self._sort(keys, order, seg_log2, events, last)
            count = 1 << level
            last = [self._k["nnf_medians"](
                queue, (-(-count // 64) * 64,), (64,), rb, i32(self.nb), order, i32(level),
                i32(seg_log2), i32(level + 1 < self.levels), dims, med, lo, hi,
                wait_for=last)]
            events.append(("tree", last[0]))
        leaf_pts = self.pool.get("leaf_pts", 4 * self.n_pad * dr)
        leaf_pid = self.pool.get("leaf_pid", 4 * self.n_pad)
        leaf_of = self.pool.get("leaf_of", 4 * self.nb)
        last = [self._k["nnf_leaves"](queue, (self.n_pad,), None, rb, i32(self.nb), order,
                                      leaf_pts, leaf_pid, leaf_of, wait_for=last)]
        events.append(("tree", last[0]))
        return (dims, med, leaf_pts, leaf_pid, leaf_of), last

    def _sample(self, va: Any, abuf: Any, vb: Any, bbuf: Any, events: list) -> np.ndarray:
        """The PCA model's sample rows (float64, in draw order; nnf_pca.py's rule): a host
        image's patches are read on the host, a device image's gathered on the device from
        its converted copy (the same float32 values) so that only they are downloaded."""
        p, d, queue = self.p, self.p * self.p * self.channels, self.runtime.queue
        picks = sample_picks(self.na, self.nb, self.seed)
        rows = np.empty((picks.size, d), np.float64)
        in_a = picks < self.na
        parts = ((va, abuf, self.ha, self.wa, in_a, picks[in_a]),
                 (vb, bbuf, self.hb, self.wb, ~in_a, picks[~in_a] - self.na))
        on_device = [part for part in parts if part[0].on_device and part[5].size]
        for volume, _, _, _, where, index in parts:
            if not volume.on_device:
                rows[where] = patch_vectors(_host_image(volume), p, index)
        if on_device:
            count = sum(part[5].size for part in on_device)
            out = self.pool.get("sample", 4 * count * d)
            last, first, held = [events[-1][1]], 0, []     # after the conversions
            for _, buf, h, w, _, index in on_device:
                chosen = np.ascontiguousarray(index, np.int32)
                held.append(chosen)         # alive until the blocking download below
                pbuf = self.pool.get(f"picks{first}", max(4, chosen.nbytes))
                copy = cl.enqueue_copy(queue, pbuf, chosen, is_blocking=False)
                n = chosen.size * d
                last = [self._k["nnf_sample"](queue, (-(-n // 128) * 128,), (128,), buf,
                                              np.int32(h), np.int32(w), pbuf,
                                              np.int32(chosen.size), np.int32(first), out,
                                              wait_for=[copy, *last])]
                events.append(("sample", last[0]))
                first += chosen.size
            gathered = np.empty((count, d), np.float32)
            cl.enqueue_copy(queue, gathered, out, wait_for=last)
            first = 0
            for _, _, _, _, where, index in on_device:
                rows[where] = gathered[first:first + index.size]
                first += index.size
        return rows

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

    # ---- running -----------------------------------------------------------------------

    def run(self, a: Any, b: Any) -> Matches:
        """The field of `a` in `b` (the planned shapes; NumPy in → NumPy out, device in →
        device out)."""
        return self._launch(as_volume(a, name="a", video=False),
                            as_volume(b, name="b", video=False), None)[0]

    def enqueue_arrays(self, a: Any, b: Any, *, out: Any,
                       wait_for: list[Any] | None) -> tuple[Matches, list[Any]]:
        """The plan's `enqueue` (`clpatch.core.plans.Plan`): the field of device `a` in
        device `b` into device Matches (`out`: a Matches or (positions, distances) of the
        caller's); it waits for the value checks and the PCA sample (`waits_for_sample`)."""
        if not self.device_output:
            raise TypeError("this plan was made for NumPy arrays; make_plan's plans take both")
        return self._launch(as_volume(a, name="a", video=False),
                            as_volume(b, name="b", video=False), out)

    def _launch(self, va: Volume, vb: Volume, out: Any) -> tuple[Matches, list[Any]]:
        queue, i32 = self.runtime.queue, np.int32
        events: list[tuple[str, Any]] = []
        self.uploader.begin()
        c = self.channels
        abuf = self.pool.get("a", 4 * c * self.ha * self.wa)
        bbuf = self.pool.get("b", 4 * c * self.hb * self.wb)
        limit = magnitude_limit(self.p, c)
        events += self.uploader.convert(va, 0, 1, 0, self.ha, abuf, staging="stage_a")
        peak_a = self.uploader.peak([events[-1][1]])      # one check per image: the error
        self.uploader.begin()                             # names the one that fails
        events += self.uploader.convert(vb, 0, 1, 0, self.hb, bbuf, staging="stage_b")
        check_peak(peak_a, limit, "a")
        check_peak(self.uploader.peak([events[-1][1]]), limit, "b")
        mean, basis = fit_rows(self._sample(va, abuf, vb, bbuf, events), self.dims)
        mbuf = self.pool.get("mean", mean.nbytes)
        wbuf = self.pool.get("basis", basis.nbytes)
        last = [cl.enqueue_copy(queue, mbuf, mean, is_blocking=False),
                cl.enqueue_copy(queue, wbuf, basis, is_blocking=False), events[-1][1]]
        ra = self.pool.get("ra", 4 * self.na * self.dims)
        rb = self.pool.get("rb", 4 * self.nb * self.dims)
        last = self._project(abuf, (self.ha, self.wa), mbuf, wbuf, ra, self.na, events, last)
        last = self._project(bbuf, (self.hb, self.wb), mbuf, wbuf, rb, self.nb, events, last)
        (dims, med, leaf_pts, leaf_pid, leaf_of), last = self._tree(rb, events, last)
        m = self.m
        cd = self.pool.get("keys_cand_d", self._keys_cand_d_bytes)
        ci = self.pool.get("cand_i", 4 * self.na * m)
        searched = self.pool.get("order_searched", self._order_searched_bytes)
        levels, nb = i32(self.levels), i32(self.nb)
        last = [self._k["nnf_contain"](queue, (-(-self.na // 64) * 64,), (64,), ra,
                                       i32(self.na), dims, med, levels, leaf_pts, leaf_pid,
                                       nb, cd, ci, searched, wait_for=last)]
        events.append(("contain", last[0]))
        bands = -(-self.hac // BAND)
        cols = (-(-self.wac // 64) * 64, bands)
        last = [self._k["nnf_exact"](queue, cols, (64, 1), ra, i32(self.hac), i32(self.wac),
                                     dims, med, levels, leaf_pts, leaf_pid, nb, cd, ci,
                                     searched, wait_for=last)]
        events.append(("exact", last[0]))
        for t in range(1, min(BAND, self.hac)):
            last = [self._k["nnf_propagate"](
                queue, cols, (64, 1), ra, i32(self.hac), i32(self.wac), i32(t), leaf_pts,
                leaf_pid, leaf_of, nb, i32(self.hbc), i32(self.wbc), cd, ci, searched,
                wait_for=last)]
            events.append(("propagate", last[0]))
        grid = (-(-((self.wac + 1) // 2) // 64) * 64, self.hac)
        for _ in range(REFINE):
            for colour in (0, 1):       # a checkerboard: each half reads the other's lists
                last = [self._k["nnf_refine"](
                    queue, grid, (64, 1), ra, i32(self.hac), i32(self.wac), rb, i32(self.hbc),
                    i32(self.wbc), i32(colour), cd, ci, wait_for=last)]
                events.append(("refine", last[0]))
        positions, distances, last = self._rerank(
            abuf, bbuf, (ra, dims, med, leaf_pts, leaf_pid, leaf_of, cd, ci), events, last,
            out)
        self.last_events = events
        grid_y = np.arange(self.hac, dtype=np.int32)
        grid_x = np.arange(self.wac, dtype=np.int32)
        return (Matches(positions, distances, grid_y, grid_x, self.p, 1, 0, self.k, "l2", 0,
                        None), last)

    def projections(self) -> tuple[np.ndarray, np.ndarray]:
        """The last run's reduced points of a and b: float32 (Na, pca_dims), (Nb, pca_dims)
        (what the tests feed the NumPy oracle, so that its tree and search see the device's
        own coordinates)."""
        ra = np.empty((self.na, self.dims), np.float32)
        rb = np.empty((self.nb, self.dims), np.float32)
        cl.enqueue_copy(self.runtime.queue, ra, self.pool.get("ra", ra.nbytes))
        cl.enqueue_copy(self.runtime.queue, rb, self.pool.get("rb", rb.nbytes))
        return ra, rb

    def _rerank(self, abuf: Any, bbuf: Any, search: tuple, events: list,
                wait: list, out: Any = None) -> tuple[Any, Any, list]:
        """Re-ranking, expansion and polish: `search` is (ra, dims, med, leaf_pts, leaf_pid,
        leaf_of, cd, ci), the reduced points of a, the tree (split dimensions, medians,
        leaves) and the candidate lists; into `out` (a Matches or pair) when given."""
        queue, i32, k = self.runtime.queue, np.int32, self.k
        ra, tdims, tmed, leaf_pts, leaf_pid, leaf_of, cd, ci = search
        sink = MatchesSink(self, (), self.hac, self.wac, k, 2, device=self.device_output,
                           out=out)
        out_pos, out_dist = sink.target(0, 1, 0, self.hac)[:2]
        last = [self._k["nnf_rerank"](
            queue, (-(-self.wac // 64) * 64, self.hac), (64, 1), abuf, i32(self.ha),
            i32(self.wa), bbuf, i32(self.hb), i32(self.wb), i32(0), i32(self.hac),
            i32(self.wac), ci, i32(k), out_pos, out_dist, wait_for=wait)]
        events.append(("rerank", last[0]))
        if self.expand and self.expand_leaves:
            last = [self._k["nnf_expand"](
                queue, (-(-self.wac // 64) * 64, self.hac), (64, 1), abuf, i32(self.ha),
                i32(self.wa), bbuf, i32(self.hb), i32(self.wb), i32(self.hac), i32(self.wac),
                ra, tdims, tmed, i32(self.levels), leaf_pts, leaf_pid, leaf_of, cd, ci, i32(k),
                out_pos, out_dist,
                wait_for=last)]
            events.append(("expand", last[0]))
        grid = (-(-((self.wac + 1) // 2) // 64) * 64, self.hac)
        for _ in range(POLISH):
            for colour in (0, 1):       # a checkerboard: each half reads the other's matches
                last = [self._k["nnf_polish"](
                    queue, grid, (64, 1), abuf, i32(self.ha), i32(self.wa), bbuf,
                    i32(self.hb), i32(self.wb), i32(self.hac), i32(self.wac), i32(colour), cd,
                    i32(k), out_pos, out_dist, wait_for=last)]
                events.append(("polish", last[0]))
        if not self.device_output:     # blocking copies: nothing left to wait for
            sink.store(0, 1, 0, self.hac, (out_pos, out_dist), last)
            last = []
        positions, distances = sink.arrays()
        return positions, distances, last


def _host_image(volume: Any) -> np.ndarray:
    """(H, W, C) host view (or copy, for a device array) of a checked 2-D or 3-D image
    volume, in its own dtype (the PCA sample converts what it takes)."""
    array = volume.array.get() if volume.on_device else np.asarray(volume.array)
    return array.reshape(volume.rows, volume.cols, volume.channels)
