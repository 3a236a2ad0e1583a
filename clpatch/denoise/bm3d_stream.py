"""BM3D on a stream of frames (a video denoised frame by frame), copies overlapping kernels.

Frame k + 1 is copied to the device (pinned slot, transfer queue) and its kernels are
enqueued before frame k's result is read back, so on a GPU the copies of one frame run
while another's kernels do. Two slots of staging and output buffers alternate; every reuse
waits for the event of the previous use. The fixed-point scales need a peak before any
frame is filtered: `peak` (default 4 · data_range, as VBM3D's stream), and each frame's own
peak, measured by the conversion kernel and read back without a sync, must stay within it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..core.transfer import Transfers
from ..core.upload import check_peak
from ..core.validate import check_float
from ..core.volumes import as_volume, check_planned, default_data_range
from .bm3d_params import channel_sigmas


def stream(plan: Any, frames: Iterable[Any], sigma: float, *, data_range: float | None = None,
           peak: float | None = None) -> Iterator[np.ndarray]:
    """Yield `plan` (a BM3DPlan for NumPy frames whose frame is one tile) applied to every
    frame of `frames` (arrays of the planned shape, any real dtype)."""
    sigma = check_float("sigma", sigma)
    if data_range is not None:
        data_range = check_float("data_range", data_range)
    if peak is not None:
        peak = check_float("peak", peak)
    if plan.device_output or len(plan.tiles) != 1:
        raise ValueError("BM3DPlan.stream needs a plan for NumPy frames that fit the device in "
                         "one tile (use run() frame by frame otherwise)")
    return _frames(plan, iter(frames), sigma, data_range, peak)


def _frames(plan: Any, frames: Iterator[Any], sigma: float, data_range: float | None,
            bound: float | None) -> Iterator[np.ndarray]:
    if plan.stream_transfers is None:        # made once per plan, reused by every stream
        plan.stream_transfers = plan.transfers or Transfers(plan.runtime)
    transfers = plan.stream_transfers
    stage0 = plan.stages[0]
    uploader, limit = stage0.search.uploader, stage0.search.check_limit()
    tile = plan.tiles[0]
    sigmas = channel_sigmas(sigma, plan.colour)
    peaks = [np.zeros(1, np.uint32), np.zeros(1, np.uint32)]
    nbytes = plan.rows * plan.cols * plan.channels * 4
    scales: list[tuple[float, float]] = []
    tau_unit = 1.0
    pending = None
    for k, frame in enumerate(frames):
        frame = np.asarray(frame)
        volume = as_volume(frame, name=f"frame {k}", video=False)
        check_planned(volume, (1, plan.rows, plan.cols, plan.channels), False,
                      plan.runtime.context)
        if k == 0:
            if data_range is None:      # as VBM3D's stream: from the first frame
                data_range = default_data_range(volume.dtype, float(np.abs(frame).max()))
            if bound is None:
                bound = 4.0 * data_range
            scales = plan.scales(bound, sigmas)
            tau_unit = (data_range / 255.0) ** 2
        slot = k % 2
        events: list[tuple[str, Any]] = []
        uploader.begin()
        kept = {"noisy": plan.upload_noisy(stage0, volume, tile.chunks[0], events,
                                           staging=f"staging{slot}", transfers=transfers)}
        measured = uploader.read_peak(peaks[slot])
        output = np.empty(frame.shape, np.float32)
        for s, stage in enumerate(plan.stages):
            plan.run_stage(s, stage, volume, tile, sigmas, scales[s], tau_unit,
                           s == len(plan.stages) - 1, output, kept, events, slot=slot)
        plan.stream_downloads[slot] = transfers.start_download(
            plan.pool.get(f"out{slot}", nbytes), nbytes, f"out{slot}", wait_for=[events[-1][1]])
        plan.last_events = events
        if pending is not None:
            yield _finish(transfers, *pending, limit, bound)
        pending = (k, slot, output, measured, peaks[slot])
    if pending is not None:
        yield _finish(transfers, *pending, limit, bound)


def _finish(transfers: Transfers, k: int, slot: int, output: np.ndarray, measured: Any,
            word: np.ndarray, limit: float, bound: float) -> np.ndarray:
    transfers.finish_download(f"out{slot}", output)
    measured.wait()
    top = float(word.view(np.float32)[0])
    check_peak(top, limit, f"frame {k}")
    if top > bound:
        raise ValueError(f"frame {k} has values up to {top:.6g}, beyond the assumed peak "
                         f"{bound:.6g}; pass peak= (or data_range=) to BM3DPlan.stream")
    return output
