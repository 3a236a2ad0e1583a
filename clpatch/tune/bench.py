"""`clpatch bench`: median kernel and wall times of each method on this device, per stage.

Kernel time comes from OpenCL profiling events (the plan's `last_events`: warm-up, then the
median of repeats); wall time is the median of the same repeats' wall clocks, each from the
call to the end of its events (a synchronised call, on the profiling queue). The inputs are
photographic test images with σ = 20 noise that stay on the device, rotating between two
versions so caches do not flatter small images; host transfers are not counted.

What each method runs, at every --size (rows x cols):
- search: `search_patches`' defaults (patch 8, step 4, k 16, window 21);
- nlmeans: `nlmeans` with those, sigma 20; bm3d: the "fast" preset, sigma 20;
- vbm3d: `vbm3d`'s defaults, sigma 20, on a video of `frames` frames of the size (a camera
  pan of 1 row and 2 columns a frame, `pan_video`): its times are those of the whole video;
- knn: the exhaustive self-search of `knn` with patch 8, step 4, k 16, l2 (its default
  step 1 searches 16 times the queries); its time grows with the square of the pixel
  count: 42 s a call at 512x512 on 2 CPU cores (PoCL), where --size 128x128 suits better;
- nnf: `nnf`'s defaults (patch 8, k 1, PCA 10, 8 candidates, its PCA model fitted on every
  call) from an image to another: the same scene moved by (5, 11) pixels, its own noise.
Per-method benchmark scripts in `benchmarks/` build on these functions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import Any

import pyopencl.array as cla

from ..core.runtime import Runtime
from ..core.volumes import as_volume
from ..denoise.bm3d import BM3DPlan
from ..denoise.bm3d_params import stage_params
from ..denoise.nlmeans import NLMeansPlan
from ..denoise.vbm3d_params import video_stage_params
from ..denoise.vbm3d_plan import VBM3DPlan
from ..match.knn.search import knn_request, plan_knn
from ..match.nnf.search import NnfPlan, nnf_request
from ..match.window.config import SearchRequest, choose_search
from ..match.window.plan import SearchPlan
from .timing import Timing, pan_video, photo_mosaic, time_events

METHODS = ("search", "nlmeans", "bm3d", "vbm3d", "knn", "nnf")
#: Frames of vbm3d's video unless run_bench is told otherwise (`clpatch bench --frames`).
DEFAULT_FRAMES = 8
#: The NNF pair's motion (rows, columns) from a to b.
NNF_SHIFT = (5, 11)


class BenchInputs:
    """The device inputs of one size, each made on first use in two versions (their noise
    differs) that runs rotate between: images (rows, cols), NNF pairs (a, b) and videos
    (frames, rows, cols), float32."""

    def __init__(self, runtime: Runtime, rows: int, cols: int, frames: int) -> None:
        self.runtime, self.rows, self.cols, self.frames = runtime, rows, cols, frames

    def _device(self, array: Any) -> Any:
        return cla.to_device(self.runtime.queue, array)

    @cached_property
    def images(self) -> list[Any]:
        return [self._device(photo_mosaic(self.rows, self.cols, seed=k)) for k in range(2)]

    @cached_property
    def pairs(self) -> list[tuple[Any, Any]]:
        out = []
        for k in range(2):
            a, b = pan_video(2, self.rows, self.cols, seed=10 + k, shift=NNF_SHIFT)
            out.append((self._device(a), self._device(b)))
        return out

    @cached_property
    def videos(self) -> list[Any]:
        return [self._device(pan_video(self.frames, self.rows, self.cols, seed=20 + k))
                for k in range(2)]


def _bench_search(runtime: Runtime, inputs: BenchInputs, repeats: int) -> tuple[str, Timing]:
    images = inputs.images
    rows, cols = images[0].shape
    request = SearchRequest(8, 4, 16, 21)
    config = choose_search(request, runtime.profile, None, runtime.tuning)
    plan = SearchPlan(runtime, 1, rows, cols, 1, request, config, device_output=True)

    def run(i: int) -> list[tuple[str, Any]]:
        plan.run(images[i % len(images)])
        return plan.last_events

    label = f"p8 s4 k16 w21: {plan.config.describe()} [{plan.config.source}]"
    return label, time_events(run, repeats=repeats)


def _bench_nlmeans(runtime: Runtime, inputs: BenchInputs, repeats: int) -> tuple[str, Timing]:
    images = inputs.images
    rows, cols = images[0].shape
    plan = NLMeansPlan(runtime, 1, rows, cols, 1, patch_size=8, step=4, window=21, n=16,
                       device_output=True)

    def run(i: int) -> list[tuple[str, Any]]:
        plan.run(images[i % len(images)], 20.0)
        return plan.last_events

    label = (f"p8 s4 k16 w21 sigma 20: {plan.aggregation} aggregation, {plan.averaging} averaging; "
             f"search {plan.config.describe()} [{plan.config.source}]")
    return label, time_events(run, repeats=repeats)


def _bench_bm3d(runtime: Runtime, inputs: BenchInputs, repeats: int) -> tuple[str, Timing]:
    images = inputs.images
    rows, cols = images[0].shape
    p1, p2, stages = stage_params("fast")
    plan = BM3DPlan(runtime, rows, cols, 1, (p1, p2), stages, device_output=True)

    def run(i: int) -> list[tuple[str, Any]]:
        plan.run(images[i % len(images)], 20.0, data_range=255.0)
        return plan.last_events

    searches = ", ".join(f"{s.search.config.describe()} [{s.search.config.source}]"
                         for s in plan.stages)
    label = f"fast preset sigma 20: {plan.aggregation} aggregation; searches {searches}"
    return label, time_events(run, repeats=repeats)


def _bench_vbm3d(runtime: Runtime, inputs: BenchInputs, repeats: int) -> tuple[str, Timing]:
    videos = inputs.videos
    frames, rows, cols = videos[0].shape
    p1, p2, stages, radius = video_stage_params()
    plan = VBM3DPlan(runtime, rows, cols, 1, (p1, p2), stages, radius)
    plan.keep_events = True          # every event of the video, not only the last

    def run(i: int) -> list[tuple[str, Any]]:
        plan.run(videos[i % len(videos)], 20.0, data_range=255.0)
        return plan.last_events

    label = (f"{frames} frames (times per video), defaults sigma 20: {plan.variant} search, "
             f"{plan.aggregation} aggregation")
    return label, time_events(run, repeats=repeats)


def _bench_knn(runtime: Runtime, inputs: BenchInputs, repeats: int) -> tuple[str, Timing]:
    images = inputs.images
    volume = as_volume(images[0], name="image", video=False)
    request = knn_request(runtime, volume, volume, True, patch_size=8, k=16, metric="l2",
                          step=4, method=None)
    plan = plan_knn(runtime, volume, volume, request, device_output=False)

    def run(i: int) -> list[tuple[str, Any]]:
        plan.run(images[i % len(images)])      # waits for the run's value check too
        return plan.last_events

    layout = getattr(plan, "layout", None)     # a banded plan (beyond the device's memory)
    bands = "" if layout is None else f", {layout.pairs} window/band pairs"
    label = f"p8 s4 k16 l2 self-search: {plan.config.describe()}{bands}"
    return label, time_events(run, repeats=repeats)


def _bench_nnf(runtime: Runtime, inputs: BenchInputs, repeats: int) -> tuple[str, Timing]:
    pairs = inputs.pairs
    a, b = pairs[0]
    va, vb = (as_volume(x, name=n, video=False) for x, n in ((a, "a"), (b, "b")))
    p, k, dims, m, leaf, seed = nnf_request(va, vb, patch_size=8, k=1, pca_dims=10,
                                            candidates=8, leaf_size=None, seed=0)
    plan = NnfPlan(runtime, va.rows, va.cols, vb.rows, vb.cols, va.channels, patch_size=p,
                   k=k, pca_dims=dims, candidates=m, leaf_size=leaf, seed=seed,
                   device_output=False)

    def run(i: int) -> list[tuple[str, Any]]:
        plan.run(*pairs[i % len(pairs)])
        return plan.last_events

    bands = f", {len(plan.bands)} bands of rows" if len(plan.bands) > 1 else ""
    label = (f"p{plan.p} k{plan.k} PCA {plan.dims} candidates {plan.m} leaf {plan.leaf}, "
             f"model fitted per call, b moved by {NNF_SHIFT}{bands}")
    return label, time_events(run, repeats=repeats)


BENCHES: dict[str, Callable[[Runtime, BenchInputs, int], tuple[str, Timing]]] = {
    "search": _bench_search,
    "nlmeans": _bench_nlmeans,
    "bm3d": _bench_bm3d,
    "vbm3d": _bench_vbm3d,
    "knn": _bench_knn,
    "nnf": _bench_nnf,
}


def run_bench(runtime: Runtime, methods: Iterable[str], sizes: Iterable[tuple[int, int]], *,
              repeats: int = 15, frames: int = DEFAULT_FRAMES) -> list[dict[str, Any]]:
    """Benchmark `methods` at `sizes` ((rows, cols)); one row per (method, size): its
    configuration, the median kernel time (`total_ms`) and per stage (`stages_ms`), the
    median wall clock of a synchronised call (`wall_ms`) and the seconds the whole method
    took, its plan and warm-up included (`wall_s`). vbm3d runs videos of `frames` frames
    (its row says `frames`; its times are per video)."""
    if not runtime.profiling:
        raise ValueError("benchmarks need a Runtime(profiling=True)")
    methods = list(methods)
    for method in methods:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS} or 'all', got {method!r}")
    for name, value in (("repeats", repeats), ("frames", frames)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    rows_out = []
    for rows, cols in sizes:
        inputs = BenchInputs(runtime, rows, cols, frames)
        for method in methods:
            start = time.perf_counter()
            label, timing = BENCHES[method](runtime, inputs, repeats)
            stages = {stage: timing.median(stage) for stage in timing.samples}
            row = {"method": method, "size": [rows, cols], "config": label,
                   "total_ms": timing.median(), "stages_ms": stages,
                   "wall_ms": timing.wall_median(), "repeats": repeats}
            if method == "vbm3d":
                row["frames"] = frames
            row["wall_s"] = time.perf_counter() - start
            rows_out.append(row)
    return rows_out


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows of `run_bench` as text, one line each."""
    lines = [f"{'method':8s} {'size':>11s} {'kernel ms':>10s} {'wall ms':>10s}  "
             "stages (median kernel ms)  configuration"]
    for row in rows:
        stages = ", ".join(f"{k} {v:.3f}" for k, v in row["stages_ms"].items())
        size = f"{row['size'][0]}x{row['size'][1]}"
        lines.append(f"{row['method']:8s} {size:>11s} {row['total_ms']:10.3f} "
                     f"{row['wall_ms']:10.3f}  {stages}  {row['config']}")
    return "\n".join(lines)


def parse_size(text: str) -> tuple[int, int]:
    """'512x512' or '3456x4608' (rows x cols) -> (rows, cols)."""
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"size must look like 512x512 (rows x columns), got {text!r}") from None
    if rows < 16 or cols < 16:
        raise ValueError(f"size must be at least 16x16, got {text!r}")
    return rows, cols

