"""One VBM3D stage on the device: its video search (a `clpatch.match.window.video.VideoSearch`)
and the collaborative filter's programs, launched on a band of rows of a ring of frames."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.buffers import int_buffer
from ..match.window.video import VideoSearch
from .collaborative import FilterKernels
from .vbm3d_params import VideoStageParams


class VideoStage:
    """The video search and the filter programs of one stage."""

    def __init__(self, plan: Any, params: VideoStageParams) -> None:
        rt = plan.runtime
        self.runtime = rt
        self.params = params
        self.search = VideoSearch(rt, plan.rows, plan.cols, plan.channels,
                                  patch_size=params.patch_size, step=params.step,
                                  window_ref=params.window_ref, window_pred=params.window_pred,
                                  q=params.q, n=params.n, variant=plan.variant)
        self.grid_y, self.grid_x = self.search.grid_y, self.search.grid_x
        kernels = FilterKernels(rt, params, channels=plan.channels,
                                aggregation=plan.aggregation, colour=plan.colour, video=True)
        self.filter, self.work_group = kernels.filter, kernels.group
        self.finalize, self.finalize_planar = kernels.finalize, kernels.finalize_planar
        self.clear, self.opponent = kernels.clear, kernels.opponent
        self._ys: dict[tuple[int, int, int], Any] = {}

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
