"""`clpatch bench`: median kernel times of each method on this device, per stage.

Kernel time comes from OpenCL profiling events (warm-up, then the median of repeats),
on photographic test images with σ = 20 noise that stay on the device, rotating between
two versions so caches do not flatter small images. Host transfers are not counted.
Per-method benchmark scripts in `benchmarks/` build on these functions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import pyopencl.array as cla

from ..core.runtime import Runtime
from ..denoise.bm3d import BM3DPlan
from ..denoise.bm3d_params import stage_params
from ..denoise.nlmeans import NLMeansPlan
from ..match.window.config import SearchRequest, choose_search
from ..match.window.plan import SearchPlan
from .timing import photo_mosaic, time_events

METHODS = ("search", "nlmeans", "bm3d")


def _device_images(runtime: Runtime, rows: int, cols: int) -> list[Any]:
    return [cla.to_device(runtime.queue, photo_mosaic(rows, cols, seed=k)) for k in range(2)]


def _bench_search(runtime: Runtime, images: list[Any], repeats: int) -> tuple[str, Any]:
    rows, cols = images[0].shape
    request = SearchRequest(8, 4, 16, 21)
    config = choose_search(request, runtime.profile, None, runtime.tuning)
    plan = SearchPlan(runtime, 1, rows, cols, 1, request, config, device_output=True)

    def run(i: int) -> list[tuple[str, Any]]:
        plan.run(images[i % len(images)])
        return plan.last_events

    label = f"p8 s4 n16 w21: {plan.config.describe()} [{plan.config.source}]"
    return label, time_events(run, repeats=repeats)


def _bench_nlmeans(runtime: Runtime, images: list[Any], repeats: int) -> tuple[str, Any]:
    rows, cols = images[0].shape
    plan = NLMeansPlan(runtime, 1, rows, cols, 1, patch_size=8, step=4, window=21, n=16,
                       device_output=True)

    def run(i: int) -> list[tuple[str, Any]]:
        plan.run(images[i % len(images)], 20.0)
        return plan.last_events

    label = (f"p8 s4 n16 w21 sigma 20: {plan.aggregation} aggregation, {plan.averaging} averaging; "
             f"search {plan.config.describe()} [{plan.config.source}]")
    return label, time_events(run, repeats=repeats)


def _bench_bm3d(runtime: Runtime, images: list[Any], repeats: int) -> tuple[str, Any]:
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


BENCHES: dict[str, Callable[[Runtime, list[Any], int], tuple[str, Any]]] = {
    "search": _bench_search,
    "nlmeans": _bench_nlmeans,
    "bm3d": _bench_bm3d,
}


def run_bench(runtime: Runtime, methods: Iterable[str], sizes: Iterable[tuple[int, int]], *,
              repeats: int = 15) -> list[dict[str, Any]]:
    """Benchmark `methods` at `sizes` ((rows, cols)); one row per (method, size)."""
    if not runtime.profiling:
        raise ValueError("benchmarks need a Runtime(profiling=True)")
    methods = list(methods)
    for method in methods:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS} or 'all', got {method!r}")
    rows_out = []
    for rows, cols in sizes:
        images = _device_images(runtime, rows, cols)
        for method in methods:
            start = time.perf_counter()
            label, timing = BENCHES[method](runtime, images, repeats)
            stages = {stage: timing.median(stage) for stage in timing.samples}
            rows_out.append({"method": method, "size": [rows, cols], "config": label,
                             "total_ms": timing.median(), "stages_ms": stages,
                             "repeats": repeats, "wall_s": time.perf_counter() - start})
    return rows_out


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'method':8s} {'size':>11s} {'total ms':>10s}  stages (median ms)  configuration"]
    for row in rows:
        stages = ", ".join(f"{k} {v:.3f}" for k, v in row["stages_ms"].items())
        size = f"{row['size'][0]}x{row['size'][1]}"
        lines.append(f"{row['method']:8s} {size:>11s} {row['total_ms']:10.3f}  {stages}  {row['config']}")
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

