"""One VBM3D stage on the device: its video search (a `clpatch.match.window.video.VideoSearch`),
or the matches a caller gives it (a `clpatch.match.given.GivenMatcher`, see
`clpatch.denoise.vbm3d_given`), and the collaborative filter's programs, launched on a band
of rows of a ring of frames."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl.array as cla

from ..core.buffers import int_buffer
from ..match.given import GivenMatcher
from ..match.window.config import SearchRequest
from ..match.window.video import VideoSearch
from .collaborative import FilterKernels
from .vbm3d_given import measured_contributions
from .vbm3d_params import VideoStageParams


class VideoStage:
    """The video search (or the given matches) and the filter programs of one stage."""

    def __init__(self, plan: Any, params: VideoStageParams, given: bool = False) -> None:
        """`given`: the groups come from matches the caller gives (`use`) to a plan of
        `plan.frames` frames, instead of the video search."""
        rt = plan.runtime
        self.runtime = rt
        self.params = params
        self.search: VideoSearch | None = None
        self.given: GivenMatcher | None = None
        #: The patches one pixel gathers from the given matches, at most (`use`).
        self.measured: int | None = None
        if given:
            request = SearchRequest(params.patch_size, params.step, params.n, params.window_ref,
                                    1, "l2", True)
            self.given = GivenMatcher(rt, plan.frames, plan.rows, plan.cols, 1, request,
                                      video=True)
            self.grid_y, self.grid_x = self.given.grid_y, self.given.grid_x
            self.xs = int_buffer(rt.context, self.grid_x)
            self._grid = (cla.to_device(rt.queue, self.grid_y),
                          cla.to_device(rt.queue, self.grid_x))
        else:
            self.search = VideoSearch(rt, plan.rows, plan.cols, plan.channels,
                                      patch_size=params.patch_size, step=params.step,
                                      window_ref=params.window_ref,
                                      window_pred=params.window_pred, q=params.q, n=params.n,
                                      variant=plan.variant)
            self.grid_y, self.grid_x = self.search.grid_y, self.search.grid_x
            self.xs = self.search.xs
        kernels = FilterKernels(rt, params, channels=plan.channels,
                                aggregation=plan.aggregation, colour=plan.colour, video=True)
        self.filter, self.work_group = kernels.filter, kernels.group
        self.finalize, self.finalize_planar = kernels.finalize, kernels.finalize_planar
        self.clear, self.opponent = kernels.clear, kernels.opponent
        self._ys: dict[tuple[int, int, int], Any] = {}

    def use(self, matches: Any, name: str, radius: int) -> None:
        """Take the given `matches` (a stage planned `given`): checked (`GivenMatcher.use`,
        then their frames within `radius` of their references'), and measured for the
        fixed-point scales (`clpatch.denoise.vbm3d_given.measured_contributions`). Matches
        that fail the first check leave the stage's matches as they were; matches that
        fail the second leave it none (a run then raises)."""
        if self.given is None:
            raise RuntimeError("this stage searches: it was not planned for given matches")
        self.given.use(matches, name)
        try:
            measured = measured_contributions(self.runtime, matches, self._grid, self.params,
                                              radius, name)
        except ValueError:
            self.given.matches = None
            raise
        self.measured = measured

    def copy_band(self, t: int, g0: int, g1: int, out_pos: Any, out_dist: Any) -> Any:
        """The given matches of the references of grid rows [g0, g1) of frame t, copied into
        `out_pos`/`out_dist` as `search_band` writes them (positions in frame coordinates:
        a pass on given matches has one band, of whole frames); returns the event."""
        given = self.given
        if given is None:
            raise RuntimeError("this stage searches: it was not planned for given matches")
        chunk = given.chunk(t, t + 1, g0, g1)
        return given.enqueue_chunk(None, chunk, out_pos, out_dist, out_rows=g1 - g0)[0]

    def band_ys(self, g0: int, g1: int, y0: int) -> Any:
        """Rows [g0, g1) of the reference grid in the coordinates of a band starting at
        frame row y0, as a device buffer (kept for the next video)."""
        found = self._ys.get((g0, g1, y0))
        if found is None:
            found = self._ys[(g0, g1, y0)] = int_buffer(self.runtime.context,
                                                        self.grid_y[g0:g1] - y0)
        return found

    def search_band(self, frames: Any, slots: int, rows: int, ys: Any, gy: int, t: int,
                    t_lo: int, t_hi: int, out_pos: Any, out_dist: Any) -> Any:
        """`VideoSearch.enqueue` on a band: the `gy` references of rows `ys` (band
        coordinates, from `band_ys`) of frame t, every column, searched among frames
        [t_lo, t_hi] of a ring of `slots` planar frames of `rows` rows. Positions come out
        in band coordinates; returns the event."""
        i32 = np.int32
        search = self.search
        global_size, local_size = search.sizes()
        global_size = (*global_size[:-1], gy)      # the last axis runs over grid rows
        return search.kernel(self.runtime.queue, global_size, local_size, frames, i32(slots),
                             i32(rows), i32(search.cols),
                             i32(0), i32(t), i32(t_lo), i32(t_hi), ys, search.xs, i32(gy),
                             i32(len(self.grid_x)), out_pos, out_dist)
