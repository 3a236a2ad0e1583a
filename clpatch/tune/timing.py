"""Benchmark helpers shared by `benchmarks/*.py`: kernel timing with OpenCL profiling
events, device ceilings (arithmetic rate, memory bandwidth), and test images of
realistic content at any size. Timings are medians over repeats after warm-up; inputs
rotate between several noisy versions so caches do not flatter small images."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyopencl as cl
from PIL import Image

from ..core.kernels import kernel
from ..core.resources import sample_image_path
from ..core.runtime import Runtime


def event_ms(event: Any) -> float:
    """Duration of a finished event in milliseconds (profiling must be enabled)."""
    return (event.profile.end - event.profile.start) * 1e-6


@dataclass
class Timing:
    """Per-repeat kernel times in milliseconds, split by stage name, and each repeat's wall
    clock (`wall`, ms: the call and the wait for its events; empty where not measured)."""

    samples: dict[str, list[float]]
    wall: list[float] = field(default_factory=list)

    def wall_median(self) -> float:
        """Median wall clock of a synchronised call, in milliseconds."""
        return statistics.median(self.wall)

    def median(self, stage: str | None = None) -> float:
        if stage is None:
            totals = [sum(values) for values in zip(*self.samples.values(), strict=True)]
            return statistics.median(totals)
        return statistics.median(self.samples[stage])

    def spread(self, stage: str | None = None) -> tuple[float, float]:
        """(first, third) quartile of the per-repeat totals (or of one stage)."""
        if stage is None:
            values = [sum(v) for v in zip(*self.samples.values(), strict=True)]
        else:
            values = self.samples[stage]
        if len(values) < 2:
            return values[0], values[0]
        q = statistics.quantiles(values, n=4)
        return q[0], q[2]


def time_events(run: Callable[[int], Sequence[tuple[str, Any]]], *, warmup: int = 3,
                repeats: int = 15) -> Timing:
    """Call `run(i)` warmup + repeats times; it returns (stage, event) pairs. The events of
    the timed repeats are summed per stage; each repeat's wall clock runs from the call to
    the end of its events (`Timing.wall`)."""
    for i in range(warmup):
        cl.wait_for_events([e for _, e in run(i)])
    samples: dict[str, list[float]] = {}
    wall: list[float] = []
    for i in range(repeats):
        start = time.perf_counter()
        events = run(warmup + i)
        cl.wait_for_events([e for _, e in events])
        wall.append((time.perf_counter() - start) * 1e3)
        per_stage: dict[str, float] = {}
        for stage, event in events:
            per_stage[stage] = per_stage.get(stage, 0.0) + event_ms(event)
        for stage, ms in per_stage.items():
            samples.setdefault(stage, []).append(ms)
    return Timing(samples, wall)


def measure_ceilings(runtime: Runtime) -> dict[str, float]:
    """Arithmetic rate (GFLOP/s, float32 multiply-add) and copy bandwidth (GB/s, bytes read
    plus written) of the runtime's device, measured with OpenCL kernels."""
    if not runtime.profiling:
        raise ValueError("measure_ceilings needs Runtime(profiling=True)")
    ctx, queue = runtime.context, runtime.queue
    chains, iterations = 8, 4096
    program = runtime.programs.get("lib/ceilings.cl.mako", chains=chains, iterations=iterations)
    fma = kernel(program, "fma_rate")
    copy = kernel(program, "copy")
    items = runtime.profile.compute_units * 2048
    out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, items * 4)

    def run_fma(_: int):
        return [("fma", fma(queue, (items,), None, out, np.float32(0.999), np.float32(1e-3)))]

    flops = items * chains * iterations * 2
    gflops = flops / (time_events(run_fma, warmup=2, repeats=7).median() * 1e-3) / 1e9

    nbytes = min(256 << 20, runtime.profile.max_mem_alloc_size // 4) // 16 * 16
    src = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    dst = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    cl.enqueue_fill_buffer(queue, src, np.float32(1.0), 0, nbytes)

    def run_copy(_: int):
        return [("copy", copy(queue, (nbytes // 16,), None, src, dst))]

    gbps = 2 * nbytes / (time_events(run_copy, warmup=2, repeats=7).median() * 1e-3) / 1e9
    return {"fma_gflops": gflops, "copy_gbps": gbps}


def photo_mosaic(rows: int, cols: int, *, sigma: float = 20.0, seed: int = 0,
                 images: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """A (rows, cols) float32 image of real photographic content: tiles of grayscale photos
    (mirrored so edges stay continuous), plus Gaussian noise of `sigma` (0–255 units)."""
    if images is None:
        images = [np.asarray(Image.open(sample_image_path()).convert("L"), np.float32)]
    rng = np.random.default_rng(seed)
    tiles = []
    for k, base in enumerate(images):
        tiles.append(base)
        tiles.append(base[:, ::-1] if k % 2 else base[::-1, :])
    th = min(t.shape[0] for t in tiles)
    tw = min(t.shape[1] for t in tiles)
    out = np.empty((rows, cols), np.float32)
    k = 0
    for y in range(0, rows, th):
        for x in range(0, cols, tw):
            tile = tiles[k % len(tiles)][:th, :tw]
            k += 1
            out[y:y + th, x:x + tw] = tile[:min(th, rows - y), :min(tw, cols - x)]
    if sigma:
        out += rng.normal(0.0, sigma, out.shape).astype(np.float32)
    return out


def pan_video(frames: int, rows: int, cols: int, *, sigma: float = 20.0, seed: int = 0,
              shift: tuple[int, int] = (1, 2)) -> np.ndarray:
    """A (frames, rows, cols) float32 video of `photo_mosaic` content seen through a window
    moving `shift` (dy, dx) whole pixels per frame (a camera pan), plus Gaussian noise of
    `sigma` drawn anew for every frame. Two frames with a larger `shift` make an image pair
    of the same scene moved (for the NNF)."""
    dy, dx = shift
    base = photo_mosaic(rows + dy * (frames - 1), cols + dx * (frames - 1), sigma=0.0)
    out = np.stack([base[t * dy:t * dy + rows, t * dx:t * dx + cols] for t in range(frames)])
    if sigma:
        out += np.random.default_rng(seed).normal(0.0, sigma, out.shape).astype(np.float32)
    return out
