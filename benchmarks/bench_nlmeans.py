"""Kernel time of NL-means per aggregation strategy and stage, with CPU libraries for scale.

    python benchmarks/bench_nlmeans.py [--device SPEC] [--json FILE] [--markdown FILE]
                                       [--repeats 15] [--threads N] [--cpu-budget S] [--quick]

Cases, all with σ = 20 noise (0–255 units), window 21, n 16:

- camera.png 512×512, p 8 step 4 (the defaults) and p 5 step 1;
- a 4608×3456 photo mosaic (the size of Davy–Ehret's CMLA image), defaults;
- a 960×540 video of 9 frames (a photo mosaic panning 2 px down and 3 px right per frame),
  `nlmeans_video`'s defaults: p 16, step 8, temporal window 4 (all 9 frames searched);
  reported per output frame (the run's time / 9).

Each applicable aggregation strategy (buffers, fixed, cas) is timed with OpenCL profiling
events — warm-up, median of repeats, inputs rotating between 2 noisy versions that stay on
the device, so host transfers are not counted — split by stage (convert, transform, search,
clear, average, finalize); on camera both averaging kernels (columns, naive) too. The
end-to-end wall time of the public call with NumPy in and out (transfers included) is
recorded for the default configuration.

CPU libraries, wall time (median of 3 runs, 1 for long ones): OpenCV `fastNlMeansDenoising`
(h = σ, template 7, search 21; all cores unless --threads), for the video
`fastNlMeansDenoisingMulti` (temporal window 9, per output frame); scikit-image
`denoise_nl_means` (fast mode, patch 5, distance 6, h = 0.8σ; one thread). A call expected
to take longer than --cpu-budget seconds (from its time per pixel on camera) runs on a
centred crop instead, and its time is scaled to the full image by pixel count; the output
says so. --quick shrinks every case (a smoke test, e.g. on PoCL).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl.array as cla
from PIL import Image

import clpatch
from clpatch.denoise.nlm_aggregation import AGGREGATIONS, buffer_classes, choose_aggregation
from clpatch.denoise.nlmeans_plan import AVERAGINGS, NLMeansPlan
from clpatch.tune.timing import measure_ceilings, photo_mosaic, time_events

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "tests" / "data"
SIGMA = 20.0
WINDOW, N = 21, 16

try:
    import cv2
except ImportError:  # pragma: no cover - depends on the environment
    cv2 = None
try:
    from skimage.restoration import denoise_nl_means
except ImportError:  # pragma: no cover - depends on the environment
    denoise_nl_means = None


def load_gray(name: str) -> np.ndarray:
    return np.asarray(Image.open(IMAGES / f"{name}.png").convert("L"), np.float32)


def noisy(clean: np.ndarray, seed: int) -> np.ndarray:
    return (clean + np.random.default_rng(seed).normal(0, SIGMA, clean.shape)).astype(np.float32)


def panning_video(frames: int, rows: int, cols: int, photos: list[np.ndarray], seed: int) -> np.ndarray:
    """(frames, rows, cols) float32: a clean photo mosaic seen through a window moving 2 px
    down and 3 px right per frame, plus independent σ noise in every frame."""
    dy, dx = 2, 3
    scene = photo_mosaic(rows + dy * (frames - 1), cols + dx * (frames - 1), sigma=0.0, images=photos)
    clean = np.stack([scene[t * dy:t * dy + rows, t * dx:t * dx + cols] for t in range(frames)])
    return noisy(clean, seed)


def centre_crop(image: np.ndarray, pixels: int) -> np.ndarray:
    """The centred crop of about `pixels` pixels with the image's aspect ratio (2-D or video)."""
    rows, cols = image.shape[-2:]
    scale = min(1.0, math.sqrt(pixels / (rows * cols)))
    r, c = max(32, int(rows * scale)), max(32, int(cols * scale))
    y, x = (rows - r) // 2, (cols - c) // 2
    return np.ascontiguousarray(image[..., y:y + r, x:x + c])


def cases(quick: bool, photos: list[np.ndarray]) -> list[dict[str, Any]]:
    """Each case: label, 2 noisy inputs, video flag, NL-means parameters, output frames."""
    camera = load_gray("camera")
    if quick:
        camera = camera[192:320, 192:320]
        big_rows, big_cols, vid = 240, 320, (5, 96, 160)
    else:
        big_rows, big_cols, vid = 3456, 4608, (9, 540, 960)
    cam_label = f"camera {camera.shape[1]}x{camera.shape[0]}"
    cam = [noisy(camera, k) for k in range(2)]
    big = [photo_mosaic(big_rows, big_cols, seed=k, images=photos) for k in range(2)]
    video = [panning_video(*vid, photos, seed=k) for k in range(2)]
    defaults = dict(patch_size=8, step=4, temporal_window=0)
    return [
        dict(label=cam_label, inputs=cam, video=False, params=defaults, averagings=True),
        dict(label=cam_label, inputs=cam, video=False, averagings=True,
             params=dict(patch_size=5, step=1, temporal_window=0)),
        dict(label=f"mosaic {big_cols}x{big_rows}", inputs=big, video=False, params=defaults,
             averagings=False),
        dict(label=f"video {vid[2]}x{vid[1]}x{vid[0]}", inputs=video, video=True, averagings=False,
             params=dict(patch_size=16, step=8, temporal_window=4)),
    ]


def aggregations(rt: clpatch.Runtime, p: int, s: int) -> list[str]:
    out = []
    for agg in AGGREGATIONS:
        if agg == "buffers" and buffer_classes(p, s) > 2:
            continue
        if agg == "fixed" and not rt.profile.int64_atomics:
            continue
        out.append(agg)
    return out


def wall_median(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---- GPU (OpenCL) -------------------------------------------------------------------------

def bench_case(rt: clpatch.Runtime, case: dict[str, Any], repeats: int) -> list[dict[str, Any]]:
    inputs = case["inputs"]
    shape = inputs[0].shape
    frames, rows, cols = shape if case["video"] else (1, *shape)
    out_frames = frames if case["video"] else 1
    params = case["params"]
    p, s, tw = params["patch_size"], params["step"], params["temporal_window"]
    default_agg, _ = choose_aggregation(p, s, rt.profile)
    device_inputs = [cla.to_device(rt.queue, im) for im in inputs]
    averagings = AVERAGINGS if case["averagings"] else (AVERAGINGS[0],)
    rows_out = []
    for agg in aggregations(rt, p, s):
        for avg in averagings:
            tag = f"{case['label']} p{p} s{s}" + (f" tw{tw}" if case["video"] else "")
            try:
                plan = NLMeansPlan(rt, frames, rows, cols, 1, patch_size=p, step=s, window=WINDOW,
                                   n=N, temporal_window=tw, video=case["video"], aggregation=agg,
                                   averaging=avg, device_output=True)
            except clpatch.ClpatchError as exc:
                print(f"  {tag}: {agg}/{avg} unavailable: {exc}", flush=True)
                continue

            def run(i, plan=plan):
                plan.run(device_inputs[i % len(device_inputs)], SIGMA)
                return plan.last_events

            start = time.perf_counter()
            timing = time_events(run, repeats=repeats)
            wall = time.perf_counter() - start
            total = timing.median()
            q1, q3 = timing.spread()
            stages = {stage: timing.median(stage) for stage in timing.samples}
            row = {
                "image": case["label"], "frames": frames, "rows": rows, "cols": cols,
                "patch_size": p, "step": s, "window": WINDOW, "n": N, "temporal_window": tw,
                "aggregation": plan.aggregation, "averaging": plan.averaging,
                "search_config": plan.config.describe(), "tiles": len(plan.tiles),
                "default": plan.aggregation == default_agg and plan.averaging == AVERAGINGS[0],
                "total_ms_median": total, "total_ms_q1": q1, "total_ms_q3": q3,
                "per_frame_ms": total / out_frames, "stages_ms": stages,
                "ms_per_megapixel": total / (out_frames * rows * cols / 1e6),
                "repeats": repeats, "wall_s": wall,
            }
            rows_out.append(row)
            split = ", ".join(f"{k} {v:.3f}" for k, v in stages.items())
            per_frame = f" = {row['per_frame_ms']:.3f} ms/frame" if case["video"] else ""
            print(f"  {tag:34s} {plan.aggregation:7s} {plan.averaging:7s} {total:9.3f} ms{per_frame}"
                  f"  (q1 {q1:.3f}, q3 {q3:.3f}; {split}){'  <- default' if row['default'] else ''}",
                  flush=True)
            del plan
    return rows_out


def end_to_end(rt: clpatch.Runtime, case: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Wall time of the public call, NumPy in and out, default aggregation (after a warm-up)."""
    params = case["params"]
    image = case["inputs"][0]
    if case["video"]:
        def call():
            return clpatch.nlmeans_video(image, SIGMA, temporal_window=params["temporal_window"],
                                         patch_size=params["patch_size"], step=params["step"],
                                         window=WINDOW, k=N, runtime=rt)
    else:
        def call():
            return clpatch.nlmeans(image, SIGMA, patch_size=params["patch_size"], step=params["step"],
                                   window=WINDOW, k=N, runtime=rt)
    call()
    seconds = wall_median(call, repeats)
    frames = image.shape[0] if case["video"] else 1
    return {"image": case["label"], "patch_size": params["patch_size"], "step": params["step"],
            "temporal_window": params["temporal_window"], "wall_s": seconds,
            "per_frame_s": seconds / frames, "repeats": repeats}


# ---- CPU libraries ----------------------------------------------------------------------

def to_uint8(image: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def opencv_temporal(frames: int) -> int:
    """OpenCV's temporal window (odd, at most 9 = clpatch's temporal_window 4) for `frames`."""
    return min(9, frames if frames % 2 else frames - 1)


def cpu_methods(threads: int) -> tuple[dict[str, Callable[[np.ndarray, bool], Any]], list[str]]:
    """name -> f(image, video) (video: denoise the middle frame using its neighbours)."""
    methods: dict[str, Callable[[np.ndarray, bool], Any]] = {}
    notes = []
    if cv2 is not None:
        cv2.setNumThreads(threads)

        def opencv(image, video):
            if video:
                frames = [to_uint8(f) for f in image]
                return cv2.fastNlMeansDenoisingMulti(frames, len(frames) // 2, opencv_temporal(len(frames)),
                                                     None, SIGMA, 7, 21)
            return cv2.fastNlMeansDenoising(to_uint8(image), None, SIGMA, 7, 21)

        methods["opencv"] = opencv
    else:
        notes.append("OpenCV (cv2) missing: skipped")
    if denoise_nl_means is not None:
        def skimage_nlm(image, video):
            if video:
                return None  # no video NL-means in scikit-image
            return denoise_nl_means(image.astype(np.float64) / 255.0, patch_size=5, patch_distance=6,
                                    h=0.8 * SIGMA / 255.0, fast_mode=True, sigma=SIGMA / 255.0)

        methods["skimage"] = skimage_nlm
    else:
        notes.append("scikit-image missing: skipped")
    return methods, notes


def cpu_seconds(fn: Callable[[np.ndarray, bool], Any], image: np.ndarray, video: bool) -> float:
    """Wall time of one call; the median of 3 for calls under 2 s."""
    times = [wall_median(lambda: fn(image, video), 1)]
    if times[0] < 2.0:
        times += [wall_median(lambda: fn(image, video), 1) for _ in range(2)]
    return statistics.median(times)


def bench_cpu(methods, all_cases: list[dict[str, Any]], budget: float) -> list[dict[str, Any]]:
    """Wall times; seconds per pixel measured on the first case set each later call's crop."""
    rows_out = []
    per_pixel: dict[str, float] = {}
    seen = set()
    for case in all_cases:
        if case["label"] in seen:   # camera appears twice (two patch sizes): time it once
            continue
        seen.add(case["label"])
        image = case["inputs"][0]
        video = case["video"]
        for name, fn in methods.items():
            if video and name == "skimage":
                print(f"  {case['label']:22s} {name:8s} no video NL-means in scikit-image: skipped")
                continue
            # A video call denoises one frame from 9: its cost scales with the frame's pixels.
            full_pixels = image.shape[-2] * image.shape[-1]
            estimate = per_pixel.get(name, 0.0) * full_pixels * (9 if video else 1)
            target = image
            if estimate > budget:
                target = centre_crop(image, int(full_pixels * budget / (2 * estimate)))
            pixels = target.shape[-2] * target.shape[-1]
            fn(target[..., :64, :64], video)   # warm-up (thread pools, imports)
            seconds = cpu_seconds(fn, target, video)
            if not video:
                per_pixel.setdefault(name, seconds / pixels)
            scaled = seconds * full_pixels / pixels
            cropped = pixels < full_pixels
            row = {"image": case["label"], "method": name, "wall_s": scaled,
                   "measured_s": seconds, "measured_shape": list(target.shape[-2:]),
                   "cropped": cropped, "per_output_frame": video,
                   "temporal_window_size": opencv_temporal(image.shape[0]) if video else None}
            rows_out.append(row)
            note = (f"  (measured on a {target.shape[-1]}x{target.shape[-2]} centre crop in "
                    f"{seconds:.2f} s, scaled by pixel count)" if cropped else "")
            print(f"  {case['label']:22s} {name:8s} {scaled * 1e3:11.1f} ms"
                  f"{' per output frame' if video else ''}{note}", flush=True)
    return rows_out


# ---- report -------------------------------------------------------------------------------

def markdown(result: dict[str, Any]) -> str:
    lines = [f"NL-means, σ = {SIGMA:g}, window {WINDOW}, n {N}, on {result['device']} "
             f"({result['platform']}, driver {result['driver']}); kernel time from OpenCL profiling "
             f"events (median of {result['repeats']}), host transfers excluded.", "",
             "| input | p | step | aggregation | averaging | total ms | per frame ms | ms / Mpx "
             "| stages (ms) |",
             "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | --- |"]
    for r in result["results"]:
        stages = ", ".join(f"{k} {v:.3f}" for k, v in r["stages_ms"].items())
        mark = " (default)" if r["default"] else ""
        lines.append(f"| {r['image']} | {r['patch_size']} | {r['step']} | {r['aggregation']}{mark} | "
                     f"{r['averaging']} | {r['total_ms_median']:.3f} | {r['per_frame_ms']:.3f} | "
                     f"{r['ms_per_megapixel']:.3f} | {stages} |")
    if result["end_to_end"]:
        lines += ["", "End to end (public call, NumPy in and out, transfers and host work included):", "",
                  "| input | p | step | wall ms | per frame ms |", "| --- | ---: | ---: | ---: | ---: |"]
        for r in result["end_to_end"]:
            lines.append(f"| {r['image']} | {r['patch_size']} | {r['step']} | {r['wall_s'] * 1e3:.1f} | "
                         f"{r['per_frame_s'] * 1e3:.1f} |")
    if result["cpu"]:
        lines += ["", f"CPU libraries, wall time ({result['cpu_info']}):", "",
                  "| input | library | wall ms | note |", "| --- | --- | ---: | --- |"]
        for r in result["cpu"]:
            notes = []
            if r["per_output_frame"]:
                notes.append(f"per output frame (fastNlMeansDenoisingMulti, "
                             f"{r['temporal_window_size']} frames)")
            if r["cropped"]:
                shape = r["measured_shape"]
                notes.append(f"measured on a {shape[1]}x{shape[0]} crop, scaled by pixel count")
            lines.append(f"| {r['image']} | {r['method']} | {r['wall_s'] * 1e3:.1f} | {'; '.join(notes)} |")
    for note in result["notes"]:
        lines.append(f"\nNote: {note}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="OpenCV threads (default: all cores)")
    parser.add_argument("--cpu-budget", type=float, default=30.0,
                        help="seconds one CPU-library call may take before a crop is used")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU libraries")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    args = parser.parse_args(argv)

    rt = clpatch.Runtime(args.device, profiling=True)
    ceilings = measure_ceilings(rt)
    print(f"device: {rt.device.name.strip()} ({rt.device.platform.name.strip()}, driver "
          f"{rt.device.driver_version}); profile {rt.profile.family}; 64-bit atomics: "
          f"{bool(rt.profile.int64_atomics)}")
    print(f"measured ceilings: {ceilings['fma_gflops']:.0f} GFLOP/s multiply-add, "
          f"{ceilings['copy_gbps']:.0f} GB/s copy")

    photos = [load_gray(n) for n in ("camera", "brick", "moon", "coins", "text")
              if (IMAGES / f"{n}.png").exists()]
    all_cases = cases(args.quick, photos)
    rows_out: list[dict[str, Any]] = []
    e2e = []
    print("OpenCL kernel time:")
    for case in all_cases:
        rows_out += bench_case(rt, case, args.repeats)
        e2e.append(end_to_end(rt, case, 3))
        print(f"  {case['label']} p{case['params']['patch_size']} s{case['params']['step']}: "
              f"end to end (NumPy in/out) {e2e[-1]['wall_s'] * 1e3:.1f} ms", flush=True)

    cpu_rows: list[dict[str, Any]] = []
    notes: list[str] = []
    cpu_info = ""
    if not args.no_cpu:
        methods, notes = cpu_methods(args.threads)
        cpu_info = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; OpenCV "
                    f"threads {cv2.getNumThreads() if cv2 is not None else '-'}, scikit-image 1 thread")
        print(f"CPU libraries ({cpu_info}):")
        cpu_rows = bench_cpu(methods, all_cases, args.cpu_budget)
    for note in notes:
        print(f"note: {note}")

    result = {
        "benchmark": "nlmeans", "date": time.strftime("%Y-%m-%d"), "quick": args.quick,
        "device": rt.device.name.strip(), "platform": rt.device.platform.name.strip(),
        "driver": rt.device.driver_version, "profile": rt.profile.family,
        "int64_atomics": bool(rt.profile.int64_atomics),
        "ceilings": ceilings, "python": platform.python_version(), "clpatch": clpatch.__version__,
        "opencv": getattr(cv2, "__version__", None),
        "skimage": __import__("skimage").__version__ if denoise_nl_means is not None else None,
        "sigma": SIGMA, "repeats": args.repeats, "cpu_info": cpu_info, "cpu_budget_s": args.cpu_budget,
        "results": rows_out, "end_to_end": e2e, "cpu": cpu_rows, "notes": notes,
    }
    text = markdown(result)
    print()
    print(text)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}")
    else:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
