"""The exhaustive kNN's plan for inputs larger than the device: the query in windows, the
reference in bands (`clpatch.match.knn.bands.band_layout`), every (window, band) pair
searched by an ordinary `KnnPlan` and the bands' matches merged on the device.

A window's pairs run in band order on the plan's in-order queue: pair b's matches (a
buffer of the plan) are merged with the window's matches of bands 0 … b − 1 (one of two
running buffers, in turn) by `cl_src/match/knn_merge.cl.mako`; the last band's merge
writes the window's place in the result (device output), or a window buffer that is
copied into the NumPy result. The pairs' plans share this plan's buffer pool and its
checking conversion, so the device holds one window, one band and one set of heaps at a
time, and each pair's value check is read back like any run's (`defer_check`): `enqueue`
waits for nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl.array as cla

from ...core.kernels import kernel
from ...core.plans import Plan
from ...core.runtime import Runtime
from ...core.sinks import MatchesSink
from ...core.staging import download
from ...core.volumes import Volume, as_volume
from ..matches import Matches, grid_positions
from .bands import BandLayout, window_view
from .config import KnnConfig
from .plan import KnnPlan, checked_name

__all__ = ["BandedKnnPlan", "MERGE_GROUP"]

#: Work-items of a merge work-group (along the window's grid columns).
MERGE_GROUP = 64


class BandedKnnPlan(Plan):
    """kNN of every grid patch of a (rows, cols, channels) query image among all patches of
    a (ref_rows, ref_cols, channels) reference, pair by pair of `layout` (see the module
    doc); the same Matches as one `KnnPlan` run. `run(query, reference=None)` (NumPy or
    device arrays like the query); `clpatch.make_plan("knn", ...)` makes one when the
    request does not fit one pass."""

    method = "knn"
    input_names = ("query", "reference")

    def __init__(self, runtime: Runtime, rows: int, cols: int, channels: int, ref_rows: int,
                 ref_cols: int, *, layout: BandLayout, patch_size: int, k: int, metric: str,
                 step: int, config: KnnConfig, self_search: bool, device_output: bool,
                 rescore: bool) -> None:
        super().__init__(runtime)
        self.rows, self.cols, self.channels = rows, cols, channels
        self.ref_rows, self.ref_cols = ref_rows, ref_cols
        self.layout, self.p, self.k, self.metric, self.step = layout, patch_size, k, metric, step
        self.config, self.self_search, self.device_output = config, self_search, device_output
        p = patch_size
        self.grid_y = grid_positions(rows, p, step)
        self.grid_x = grid_positions(cols, p, step)
        self.cand_cols = ref_cols - p + 1
        group = min(MERGE_GROUP, int(runtime.profile.max_work_group_size))
        self.group = 1 << (group.bit_length() - 1)
        self._merge = kernel(runtime.programs.get("match/knn_merge.cl.mako", group=self.group),
                             "knn_merge")
        #: Every query window and reference band (`_windows`, `_bands`), fixed by the layout.
        self.windows, self.bands = self._windows(), self._bands()
        #: The pairs' plans by (window rows, window cols, band rows, band cols, k of the
        #: band): made here, so that runs allocate nothing new after the first.
        self.pairs: dict[tuple[int, int, int, int, int], KnnPlan] = {}
        for window in self.windows:
            for band in self.bands:
                key = self._pair_key(window, band)
                if key not in self.pairs:
                    sub = KnnPlan(runtime, key[0], key[1], channels, key[2], key[3],
                                  patch_size=p, k=key[4], metric=metric, step=step,
                                  config=config, self_search=False, device_output=True,
                                  rescore=rescore, pool=self.pool)
                    sub.uploader = self.uploader
                    self.pairs[key] = sub
                sub = self.pairs[key]
                (g0, g1), (c0, c1), (y0, _), (x0, _) = window
                if not (np.array_equal(sub.grid_y + y0, self.grid_y[g0:g1])
                        and np.array_equal(sub.grid_x + x0, self.grid_x[c0:c1])):
                    raise RuntimeError("a query window's grid differs from the request's")
        self.limit = next(iter(self.pairs.values())).check_limit()

    # ---- the layout ---------------------------------------------------------------------

    def _windows(self) -> list[tuple[tuple[int, int], ...]]:
        """Every query window: (grid rows, grid columns, pixel rows, pixel columns) ranges."""
        found, p = [], self.p
        for g0, g1 in self.layout.row_blocks:
            rows = (int(self.grid_y[g0]), int(self.grid_y[g1 - 1]) + p)
            for c0, c1 in self.layout.col_blocks:
                found.append(((g0, g1), (c0, c1), rows,
                              (int(self.grid_x[c0]), int(self.grid_x[c1 - 1]) + p)))
        return found

    def _bands(self) -> list[tuple[tuple[int, int], tuple[int, int], int]]:
        """Every reference band: (pixel rows, pixel columns, its candidates), in candidate
        order."""
        p, found = self.p, []
        for a, b in self.layout.bands:
            if self.layout.band_axis == 0:
                found.append(((a, b + p - 1), (0, self.ref_cols), (b - a) * self.cand_cols))
            else:
                found.append(((0, self.ref_rows), (a, b + p - 1),
                              (b - a) * (self.ref_rows - p + 1)))
        return found

    def _pair_key(self, window: tuple, band: tuple) -> tuple[int, int, int, int, int]:
        (y0, y1), (x0, x1) = window[2], window[3]
        (r0, r1), (s0, s1), candidates = band
        return (y1 - y0, x1 - x0, r1 - r0, s1 - s0, min(self.k, candidates))

    # ---- running -------------------------------------------------------------------------

    def run(self, query: Any, reference: Any = None, *,
            names: tuple[str, str] = ("query", "reference"),
            device: bool | None = None) -> Matches:
        """The matches of `query` in `reference` (None: in itself); errors name the inputs
        `names`. Device arrays for a plan of device output (unless `device` says). Waits
        for the run and its value checks (and earlier enqueues')."""
        q = as_volume(query, name=names[0], video=False)
        r = q if reference is None else as_volume(reference, name=names[1], video=False)
        found, _ = self.launch(q, r, None, None, names,
                               self.device_output if device is None else device)
        self.check()
        return found

    def call_host(self, arrays: list[np.ndarray]) -> Matches:
        """The synchronous call on NumPy arrays: converted window by window and band by
        band from the host (never whole on the device), NumPy Matches."""
        return self.run(*arrays, device=False)

    def enqueue_arrays(self, query: Any, reference: Any = None, *, out: Any,
                       wait_for: list[Any] | None) -> tuple[Matches, list[Any]]:
        """The plan's `enqueue` (`clpatch.core.plans.Plan`): device Matches, the value
        checks deferred."""
        if not self.device_output:
            raise TypeError("this plan was made for NumPy arrays; make_plan's plans take both")
        q = as_volume(query, name="query", video=False)
        r = q if reference is None else as_volume(reference, name="reference", video=False)
        return self.launch(q, r, out, wait_for, ("query", "reference"), True)

    def launch(self, q: Volume, r: Volume, out: Any, wait_for: list[Any] | None,
               names: tuple[str, str], device: bool) -> tuple[Matches, list[Any]]:
        """Enqueue every pair and merge; returns the Matches (device arrays, or NumPy
        arrays complete on return, the windows copied back in turn) and the last events."""
        queue, k = self.runtime.queue, self.k
        gy, gx = len(self.grid_y), len(self.grid_x)
        sink = MatchesSink(self, (), gy, gx, k, 2, device=device, out=out)
        name = checked_name(self.self_search, names)
        events: list[tuple[str, Any]] = []
        last = wait_for
        for window in self.windows:
            (g0, g1), (c0, c1), rows, cols = window
            wgy, wgx = g1 - g0, c1 - c0
            points = wgy * wgx
            query_window = as_volume(window_view(q.array, rows, cols), name=names[0],
                                     video=False)
            running, count = None, 0
            for b, band in enumerate(self.bands):
                sub = self.pairs[self._pair_key(window, band)]
                reference_band = as_volume(window_view(r.array, band[0], band[1]),
                                           name=names[1], video=False)
                k_band = sub.k
                found_pos = self.pool.get("band_pos", 8 * points * k)
                found_dist = self.pool.get("band_dist", 4 * points * k)
                band_out = (_array(queue, (wgy, wgx, k_band, 2), np.int32, found_pos),
                            _array(queue, (wgy, wgx, k_band), np.float32, found_dist))
                _, last = sub.launch(query_window, reference_band, band_out, last)
                events += sub.last_events
                self.defer_check(last, self.limit, name)
                merged = min(k, count + k_band)
                if b == len(self.bands) - 1 and device:
                    target, base, row = (sink.positions.data, sink.distances.data), \
                        g0 * gx + c0, gx
                elif b == len(self.bands) - 1:
                    target = (self.pool.get("window_pos", 8 * points * k),
                              self.pool.get("window_dist", 4 * points * k))
                    base, row = 0, wgx
                else:
                    slot = f"run{b % 2}"
                    target = (self.pool.get(f"{slot}_pos", 8 * points * k),
                              self.pool.get(f"{slot}_dist", 4 * points * k))
                    base, row = 0, wgx
                shift = (band[0][0], 0) if self.layout.band_axis == 0 else (0, band[1][0])
                # (the window's first band: no running list, nothing of it is read)
                source = running if running is not None else (found_pos, found_dist)
                event = self._merge(
                    queue, (-(-wgx // self.group) * self.group, wgy), (self.group, 1),
                    source[0], source[1], np.int32(count), found_pos, found_dist,
                    np.int32(k_band), np.int32(shift[0]), np.int32(shift[1]),
                    target[0], target[1], np.int32(merged), np.int32(base), np.int32(row),
                    np.int32(k), np.int32(wgy), np.int32(wgx), wait_for=last)
                events.append(("merge", event))
                last = [event]
                running, count = target, merged
            if not device:
                download(queue, sink.positions[0, g0:g1, c0:c1], running[0],
                         shape=(wgy, wgx, k, 2), wait_for=last)
                download(queue, sink.distances[0, g0:g1, c0:c1], running[1],
                         shape=(wgy, wgx, k), wait_for=last)
        self.last_events = events
        positions, distances = sink.arrays()
        return (Matches(positions, distances, self.grid_y.copy(), self.grid_x.copy(), self.p,
                        self.step, 0, k, self.metric, 0, self.config), last)


def _array(queue: Any, shape: tuple[int, ...], dtype: Any, buffer: Any) -> Any:
    """A device array of `shape` over the start of pool buffer `buffer`."""
    return cla.Array(queue, shape, dtype, data=buffer)
