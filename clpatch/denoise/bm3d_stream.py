"""BM3D on a stream of frames (a video denoised frame by frame), copies overlapping kernels.

Frame k + 1 is copied to the device (pinned slot, transfer queue) and its kernels are
enqueued before frame k's result is read back, so on a GPU the copies of one frame run
while another's kernels do. Two slots of staging and output buffers alternate; every reuse
waits for the event of the previous use. The fixed-point scales need a peak before any
frame is filtered: `peak` (default 4 · data_range, as VBM3D's stream), and each frame's own
peak, measured by the conversion kernel and read back without a sync, must stay within it.

A guide (`guide=`, an iterable of guide frames in step with the frames, as `BM3DPlan.run`'s
guide for each frame, in the role `guide_role`) is uploaded through the same slots (staging
buffers of its own) and its values are checked the same way, into a word of its own; there
must be exactly one guide frame per frame.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..core.transfer import Transfers
from ..core.upload import check_peak
from ..core.validate import check_float
from ..core.volumes import as_volume, check_planned, default_data_range
from .bm3d_guide import check_guide_role, guide_volume, upload_guide
from .bm3d_params import channel_sigmas

_NO_FRAME = object()


def stream(plan: Any, frames: Iterable[Any], sigma: float, *, data_range: float | None = None,
           peak: float | None = None, guide: Iterable[Any] | None = None,
           guide_role: str = "match") -> Iterator[np.ndarray]:
    """Yield `plan` (a BM3DPlan for NumPy frames whose frame is one tile) applied to every
    frame of `frames` (arrays of the planned shape, any real dtype); `guide`: None or an
    iterable of guide frames, one per frame (see `BM3DPlan.run`)."""
    sigma = check_float("sigma", sigma)
    if data_range is not None:
        data_range = check_float("data_range", data_range)
    if peak is not None:
        peak = check_float("peak", peak)
    role = check_guide_role(guide_role, guide is not None, len(plan.stages))
    guides = None
    if guide is not None:
        if isinstance(guide, np.ndarray) or not isinstance(guide, Iterable):
            raise TypeError("guide of BM3DPlan.stream must be an iterable of guide frames (a "
                            f"list or generator of arrays), got {type(guide).__name__}")
        guides = iter(guide)
    if plan.device_output or len(plan.tiles_for(guide is not None)) != 1:
        raise ValueError("BM3DPlan.stream needs a plan for NumPy frames that fit the device in "
                         "one tile (use run() frame by frame otherwise)")
    return _frames(plan, iter(frames), sigma, data_range, peak, guides, role)


def _frames(plan: Any, frames: Iterator[Any], sigma: float, data_range: float | None,
            bound: float | None, guides: Iterator[Any] | None,
            role: str) -> Iterator[np.ndarray]:
    if plan.stream_transfers is None:        # made once per plan, reused by every stream
        plan.stream_transfers = plan.transfers or Transfers(plan.runtime)
    transfers = plan.stream_transfers
    stage0 = plan.stages[0]
    uploader, limit = stage0.search.uploader, stage0.search.check_limit()
    tile = plan.tiles[0]
    sigmas = channel_sigmas(sigma, plan.colour)
    peaks = [np.zeros(1, np.uint32), np.zeros(1, np.uint32)]
    guide_peaks = [np.zeros(1, np.uint32), np.zeros(1, np.uint32)]
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
        kept = {"single": True,
                "noisy": plan.upload_noisy(stage0, volume, tile.chunks[0], events,
                                           staging=f"staging{slot}", transfers=transfers)}
        measured = uploader.read_peak(peaks[slot])
        guided = guide_measured = None
        if guides is not None:
            given = next(guides, _NO_FRAME)
            if given is _NO_FRAME:
                raise ValueError(f"guide has fewer frames than frames: none for frame {k}")
            guided = guide_volume(given, volume, plan.runtime)
            plan.guide_uploader.begin()
            kept["guide"] = upload_guide(plan, stage0, guided, tile.chunks[0], events,
                                         staging=f"guide_staging{slot}", transfers=transfers)
            guide_measured = plan.guide_uploader.read_peak(guide_peaks[slot])
        output = np.empty(frame.shape, np.float32)
        run = [1] if role == "oracle" else range(len(plan.stages))
        for s in run:
            plan.run_stage(s, plan.stages[s], volume, tile, sigmas, scales[s], tau_unit,
                           s == len(plan.stages) - 1, output, kept, events, slot=slot,
                           guide=guided, guide_role=role)
        plan.stream_downloads[slot] = transfers.start_download(
            plan.pool.get(f"out{slot}", nbytes), nbytes, f"out{slot}", wait_for=[events[-1][1]])
        plan.last_events = events
        if pending is not None:
            yield _finish(transfers, *pending, limit, bound)
        pending = (k, slot, output, measured, peaks[slot], guide_measured, guide_peaks[slot])
    if pending is not None:
        yield _finish(transfers, *pending, limit, bound)
    if guides is not None and next(guides, _NO_FRAME) is not _NO_FRAME:
        raise ValueError("guide has more frames than frames")


def _finish(transfers: Transfers, k: int, slot: int, output: np.ndarray, measured: Any,
            word: np.ndarray, guide_measured: Any, guide_word: np.ndarray, limit: float,
            bound: float) -> np.ndarray:
    transfers.finish_download(f"out{slot}", output)
    if guide_measured is not None:          # the guide frame's check word
        guide_measured.wait()
        check_peak(float(guide_word.view(np.float32)[0]), limit, f"guide frame {k}")
    measured.wait()
    top = float(word.view(np.float32)[0])
    check_peak(top, limit, f"frame {k}")
    if top > bound:
        raise ValueError(f"frame {k} has values up to {top:.6g}, beyond the assumed peak "
                         f"{bound:.6g}; pass peak= (or data_range=) to BM3DPlan.stream")
    return output
