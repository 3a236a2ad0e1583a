"""What a call costs beyond its kernels: wall clock per call against kernel time, for device
arrays and NumPy arrays, with bm3d-triton timed the same way in the same run.

    python benchmarks/bench_overhead.py [--device SPEC] [--json FILE] [--markdown FILE]
                                        [--repeats 7] [--quick] [--no-peers] [--no-video]

Cases (σ = 20 noise on a photo mosaic, 0–255 float32):
- the issue's calls: `search_patches` on 512×512 (p 8, step 4, n 16, window 21), BM3D fast
  and NL-means on 256×256, each with a device array and with a NumPy array; BM3D fast and
  NL-means on 4608×3456 with NumPy in and out;
- a size sweep 256² … 8192² of the three calls (device array and NumPy);
- video: a 24-frame 1920×1080 clip, NumPy frames in and out, BM3D fast frame by frame
  (`clpatch.bm3d` on each frame, and `BM3DPlan.stream`) and VBM3D streamed (frames/s).

Wall clock: `time.perf_counter` around the call, the queue finished before the clock stops
(a device result is synchronised; a NumPy result is complete when returned); median of
`--repeats` after 2 warm-up calls (calls under 2 ms: median of 101 after at least 50 and a
second of calls); video: frames/s of the median of 3 passes over the clip after one. Kernel
time: the same call on a second runtime with profiling enabled, the durations of its
plan's events summed (host copies counted apart as "transfer"). bm3d-triton: wall clock
around `denoise` on a CUDA tensor with `torch.cuda.synchronize()` before the clock stops,
and its CUDA events; for the NumPy case the tensor is made from and returned to NumPy
inside the clock.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl.array as cla

import clpatch
from clpatch.denoise.bm3d_params import stage_params
from clpatch.denoise.vbm3d_params import video_stage_params
from clpatch.tune.timing import event_ms, photo_mosaic

SIGMA = 20.0
SEARCH = dict(patch_size=8, step=4, window=21, n=16)
#: Seconds of repeated calls before a small call is timed (see `wall_ms`).
WARMUP_SECONDS = 1.0
#: Timed passes over the video clip (after one untimed pass); the median is reported.
VIDEO_PASSES = 3


def wall_ms(call: Callable[[], Any], finish: Callable[[], None], repeats: int,
            warmup: int = 2) -> float:
    """Median wall clock of `repeats` calls after `warmup`; calls under 2 ms get 101
    samples after at least 50 warm-up calls and WARMUP_SECONDS of calls (a few warm-up
    calls leave them to the host's noise and the GPU's clock ramp, which an idle H100
    starts at 345 MHz: benchmarks/bench_small_calls.py shows the spread)."""
    start = time.perf_counter()
    call()
    finish()
    if time.perf_counter() - start < 2e-3:
        warmup, repeats = 50, max(repeats, 101)
        until = time.perf_counter() + WARMUP_SECONDS
        while time.perf_counter() < until:
            call()
            finish()
    for _ in range(warmup):
        call()
        finish()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        finish()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def rgb_mosaic(rows: int, cols: int, seed: int) -> np.ndarray:
    """An 8-bit RGB photo mosaic (light noise, sigma 5), channel c drawn with seed + c: the
    two-image benchmarks' inputs (the NNF's pairs)."""
    return np.clip(np.stack([photo_mosaic(rows, cols, sigma=5.0, seed=seed + c)
                             for c in range(3)], -1), 0, 255).astype(np.uint8)


def same_matches(found: Any, expected: Any) -> bool:
    """Whether two Matches (NumPy or device arrays) hold the same positions and distances."""
    def host(a: Any) -> np.ndarray:
        return a.get() if isinstance(a, cla.Array) else np.asarray(a)

    return bool(np.array_equal(host(found.positions), host(expected.positions))
                and np.array_equal(host(found.distances), host(expected.distances)))


def last_plan(rt: clpatch.Runtime) -> Any:
    cache = rt.plan_cache()
    return cache[next(reversed(cache))]


def kernel_ms(rt: clpatch.Runtime, call: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """(kernel ms, transfer ms): medians over repeats of the last plan's events."""
    call()
    rt.queue.finish()
    kernels, transfers = [], []
    for _ in range(repeats):
        call()
        rt.queue.finish()
        events = last_plan(rt).last_events
        kernels.append(sum(event_ms(e) for k, e in events if k != "upload"))
        transfers.append(sum(event_ms(e) for k, e in events if k == "upload"))
    return statistics.median(kernels), statistics.median(transfers)


def calls(method: str, image: np.ndarray) -> Callable[[Any], Any]:
    if method == "search":
        return lambda x, rt: clpatch.search_patches(x, runtime=rt, **SEARCH)
    if method == "bm3d":
        return lambda x, rt: clpatch.bm3d(x, SIGMA, data_range=255.0, runtime=rt)
    return lambda x, rt: clpatch.nlmeans(x, SIGMA, runtime=rt)


def case(method: str, shape: tuple[int, int], rt: clpatch.Runtime, prof: clpatch.Runtime,
         repeats: int, kinds: tuple[str, ...] = ("device", "numpy")) -> dict[str, Any]:
    image = photo_mosaic(*shape, seed=1)
    fn = calls(method, image)
    row: dict[str, Any] = {"method": method, "shape": list(shape)}
    for kind in kinds:
        if kind == "device":
            x, xp = cla.to_device(rt.queue, image), cla.to_device(prof.queue, image)
        else:
            x = xp = image
        row[f"{kind}_wall_ms"] = wall_ms(lambda x=x: fn(x, rt), rt.queue.finish, repeats)
        k, t = kernel_ms(prof, lambda xp=xp: fn(xp, prof), max(3, repeats // 2))
        row[f"{kind}_kernel_ms"], row[f"{kind}_transfer_ms"] = k, t
    return row


def triton_case(shape: tuple[int, int], repeats: int) -> dict[str, Any] | str:
    try:
        import bm3d_triton
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        return f"unavailable: {exc}"
    if not torch.cuda.is_available():
        return "unavailable: no CUDA device"
    image = photo_mosaic(*shape, seed=1)
    x = torch.from_numpy(image / 255.0).float().cuda()[None, None]
    sync = torch.cuda.synchronize
    row: dict[str, Any] = {"method": "bm3d-triton", "shape": list(shape)}
    row["device_wall_ms"] = wall_ms(lambda: bm3d_triton.denoise(x, SIGMA / 255.0), sync, repeats)

    def numpy_call() -> np.ndarray:
        t = torch.from_numpy(image / np.float32(255.0)).cuda()[None, None]
        return (bm3d_triton.denoise(t, SIGMA / 255.0)[0, 0] * 255.0).cpu().numpy()

    row["numpy_wall_ms"] = wall_ms(numpy_call, sync, repeats)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        bm3d_triton.denoise(x, SIGMA / 255.0)
        end.record()
        sync()
        times.append(start.elapsed_time(end))
    row["device_kernel_ms"] = statistics.median(times)
    return row


def video_case(rt: clpatch.Runtime, frames: int, shape: tuple[int, int]) -> dict[str, Any]:
    clip = [photo_mosaic(*shape, seed=10 + t) for t in range(frames)]
    out: dict[str, Any] = {"frames": frames, "shape": list(shape)}

    def fps(run: Callable[[], None]) -> float:
        """Frames per second of `run` (one pass over the clip): one untimed pass (builds,
        plans, the GPU's clocks), then the median of VIDEO_PASSES timed passes."""
        run()
        times = []
        for _ in range(VIDEO_PASSES):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return frames / statistics.median(times)

    def frame_by_frame() -> None:
        for f in clip:
            clpatch.bm3d(f, SIGMA, data_range=255.0, runtime=rt)

    out["bm3d_fast_fps"] = fps(frame_by_frame)
    p1, p2, count = stage_params("fast")
    plan = clpatch.BM3DPlan(rt, *shape, 1, (p1, p2), count)
    out["bm3d_fast_stream_fps"] = fps(lambda: all(True for _ in plan.stream(
        clip, SIGMA, data_range=255.0)))
    s1, s2, stages, radius = video_stage_params()
    video_plan = clpatch.VBM3DPlan(rt, *shape, 1, (s1, s2), stages, radius)
    out["vbm3d_fps"] = fps(lambda: all(True for _ in video_plan.stream(
        clip, SIGMA, peak=255.0 + 6 * SIGMA)))
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# Call overhead on {result['device']}", "",
             "Wall clock per call (synchronised, median after warm-up) against the kernel "
             "time of the same call (OpenCL profiling events, summed; host copies apart).", "",
             "| call | size | device in: wall | kernels | NumPy in: wall | kernels | copies |",
             "|---|---|---|---|---|---|---|"]
    keys = ("device_wall_ms", "device_kernel_ms", "numpy_wall_ms", "numpy_kernel_ms",
            "numpy_transfer_ms")
    for row in result["cases"]:
        cells = " | ".join(f"{row[k]:.3f} ms" if k in row else "–" for k in keys)
        lines.append(f"| {row['method']} | {row['shape'][1]}×{row['shape'][0]} | {cells} |")
    if result.get("video"):
        v = result["video"]
        lines += ["", f"Video, {v['frames']} frames of {v['shape'][1]}×{v['shape'][0]}, NumPy in "
                  f"and out: BM3D fast frame by frame {v['bm3d_fast_fps']:.1f} frames/s "
                  f"(`clpatch.bm3d` per frame), {v['bm3d_fast_stream_fps']:.1f} frames/s "
                  f"(`BM3DPlan.stream`, copies overlapping kernels); VBM3D streamed "
                  f"{v['vbm3d_fps']:.1f} frames/s."]
    lines += [""] + [f"- {n}" for n in result.get("notes", [])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="small sizes only (a smoke test)")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-video", action="store_true")
    args = ap.parse_args(argv)

    rt = clpatch.Runtime(args.device)
    prof = clpatch.Runtime(rt.device, profiling=True)
    repeats = 3 if args.quick else args.repeats
    cases: list[dict[str, Any]] = []
    notes: list[str] = []
    issue = [("search", (512, 512)), ("bm3d", (256, 256)), ("nlmeans", (256, 256))]
    large = [] if args.quick else [("bm3d", (3456, 4608)), ("nlmeans", (3456, 4608))]
    sweep = [256, 512] if args.quick else [256, 512, 1024, 2048, 4096, 8192]
    for method, shape in issue:
        cases.append(case(method, shape, rt, prof, repeats))
    for method, shape in large:
        cases.append(case(method, shape, rt, prof, repeats, kinds=("numpy",)))
    for size in sweep:
        for method in ("search", "bm3d", "nlmeans"):
            if (method, (size, size)) not in issue:
                cases.append(case(method, (size, size), rt, prof, repeats))
    if not args.no_peers:
        for shape in [(256, 256)] + ([] if args.quick else [(3456, 4608)]):
            peer = triton_case(shape, repeats)
            if isinstance(peer, str):
                notes.append(f"bm3d-triton: {peer}")
                break
            cases.append(peer)
    video = None
    if not args.no_video:
        video = video_case(rt, 6 if args.quick else 24, (64, 96) if args.quick else (1080, 1920))
    result = {"device": rt.device.name.strip(), "platform": rt.device.platform.name.strip(),
              "driver": rt.device.driver_version, "host": platform.node(),
              "repeats": repeats, "sigma": SIGMA, "cases": cases, "video": video, "notes": notes}
    text = markdown(result)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
