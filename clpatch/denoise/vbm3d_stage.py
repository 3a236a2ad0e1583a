"""One VBM3D stage on the device: its video search (a `clpatch.match.video.VideoSearch`)
and the collaborative filter's programs."""

from __future__ import annotations

from typing import Any

from ..match.video import VideoSearch
from .collaborative import FilterKernels
from .vbm3d_params import VideoStageParams


class VideoStage:
    """The video search and the filter programs of one stage."""

    def __init__(self, plan: Any, params: VideoStageParams) -> None:
        rt = plan.runtime
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
