"""One VBM3D stage on the device: its reference grid, its video search and filter programs,
and their launch sizes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl

from ..core.kernels import kernel
from ..match.matches import grid_positions
from .vbm3d_params import VideoStageParams, search_layout


def int_buffer(runtime: Any, values: np.ndarray) -> Any:
    """A read-only int32 device buffer holding `values`."""
    return cl.Buffer(runtime.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                     hostbuf=np.ascontiguousarray(values, dtype=np.int32))


class VideoStage:
    """The programs and the reference grid of one stage."""

    def __init__(self, plan: Any, params: VideoStageParams) -> None:
        rt = plan.runtime
        self.params = params
        self.grid_y = grid_positions(plan.rows, params.patch_size, params.step)
        self.grid_x = grid_positions(plan.cols, params.patch_size, params.step)
        self.lanes, self.group = search_layout(plan.variant, params)
        if plan.variant == "naive":
            self.group = max(1, min(int(rt.profile.naive_group_size), 256))
        search = rt.programs.get(
            "match/video_search.cl.mako", variant=plan.variant, patch=params.patch_size, n=params.n,
            q=params.q, window_ref=params.window_ref, window_pred=params.window_pred,
            channels=plan.channels, lanes=self.lanes, group=self.group)
        self.search = kernel(search, "vbm3d_search")
        program = rt.programs.get(
            "denoise/collaborative.cl.mako", patch=params.patch_size, n=params.n,
            channels=plan.channels,
            stage=params.stage, transform_2d=params.transform_2d,
            transform_1d=params.transform_1d, beta=params.beta, aggregation=plan.aggregation,
            video=True, colour=plan.colour)
        self.filter = kernel(program, "bm3d_filter")
        self.work_group = min(params.n, 8) * params.patch_size
        self.finalize = kernel(program, "bm3d_finalize")
        self.finalize_planar = kernel(program, "bm3d_finalize_planar")
        self.clear = kernel(program, "bm3d_clear")
        self.opponent = kernel(program, "bm3d_to_opponent") if plan.colour else None
        self.ys = int_buffer(rt, self.grid_y)
        self.xs = int_buffer(rt, self.grid_x)

    def search_sizes(self, variant: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(global, local) sizes of the search: naive (columns, rows); the others (lanes,
        columns, rows), each work-group `group` references of `lanes` work-items."""
        gy, gx = len(self.grid_y), len(self.grid_x)
        if variant == "naive":
            local = self.group
            return (-(-gx // local) * local, gy), (local, 1)
        return ((self.lanes, -(-gx // self.group) * self.group, gy), (self.lanes, self.group, 1))
