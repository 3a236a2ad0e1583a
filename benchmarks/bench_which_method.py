"""Which method for my problem: every filter and every search engine on one image at σ = 20,
speed and quality side by side (the table of docs/which-method.md).

    python benchmarks/bench_which_method.py OUT.md [--device SPEC] [--size 512] [--frames 8]
                                                   [--repeats 7] [--json FILE] [--tiny]
                                                   [--only METHOD ...]

Inputs: the library's sample photograph (camera.png, 512×512; `--size` crops it, or tiles it
mirrored beyond 512: `clpatch.tune.timing.photo_mosaic`), σ = 20 Gaussian noise (seed 0),
values 0–255 float32. Video: `--frames` frames of a pan over the same mosaic (1 px down, 2 px
right a frame, fresh noise each frame). Burst: `--frames` shaken views of the image
(`clpatch.io.noise.synthetic_burst`, seed 0), frame 0 the reference. NNF: frame 0 of the pan
against frame 1 (the same scene moved, other noise).

Rows: `nlmeans`; `bm3d` fast and reference; `vbm3d` on the video; `burst_denoise` (NL-means
and BM3D); `search_patches` (window 21), `knn` (exhaustive), `ann_search` on the noisy
image (p 8, step 4, k 16); `nnf` (p 8, k 1) between the two frames.

Wall clock: the one-shot call on device arrays (`pyopencl.array.Array` in and out), the queue
finished before the clock stops, median of `--repeats` after warm-up calls
(`bench_overhead.wall_ms`: calls under 2 ms get 101 samples after a second of calls).
Kernel time: the same method as a plan (`clpatch.make_plan`) on a second runtime with
profiling, its events of one call summed (uploads apart), median of the repeats; "–" where
the plan keeps no events. Quality: PSNR (dB, peak 255, output clipped to 0–255) against the
clean image (the whole video for VBM3D, frame 0 for the burst); for the searches, the mean
distance of the k matches over the exhaustive kNN's on the same grid (1.000 = exact; the
windowed search and the ANN see fewer candidates), for the NNF the mean first-neighbour
distance over the exact field's (`knn(a, b, k=1)`).

`--tiny` (64×64, 4 frames, 3 repeats) checks the script on a CPU device (about a minute on
two cores through PoCL once the kernels are cached); `--only` keeps the rows named.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl.array as cla
from bench_overhead import wall_ms

import clpatch
from clpatch.io.noise import synthetic_burst
from clpatch.tune.timing import event_ms, pan_video, photo_mosaic

SIGMA = 20.0
SEARCH = dict(patch_size=8, step=4, k=16)


@dataclass
class Row:
    group: str
    method: str
    call: str
    wall_ms: float
    kernel_ms: float | None
    quality: str
    note: str = ""


@dataclass
class Case:
    """One row to measure: the one-shot call on device inputs, its plan for kernel time,
    and its quality from a host result."""

    group: str
    method: str
    call: str
    run: Callable[[list[Any], clpatch.Runtime], Any]
    plan: tuple[str, tuple[int, ...], dict[str, Any]]
    inputs: list[np.ndarray]
    quality: Callable[[Any], str]
    note: str = ""


def psnr(clean: np.ndarray, estimate: Any) -> float:
    estimate = np.clip(np.asarray(estimate, np.float64), 0, 255)
    return float(10 * np.log10(255.0 ** 2 / np.mean((estimate - clean) ** 2)))


def host(a: Any) -> np.ndarray:
    return a.get() if isinstance(a, cla.Array) else np.asarray(a)


def mean_distance(m: Any, first_only: bool = False) -> float:
    d = host(m.distances).astype(np.float64)
    return float((d[..., 0] if first_only else d).mean())


def inputs(size: int, frames: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    clean = photo_mosaic(size, size, sigma=0.0, seed=0)
    video_clean = pan_video(frames, size, size, sigma=0.0, seed=0)
    burst, _ = synthetic_burst(clean, frames, SIGMA, seed=0)
    return {
        "clean": clean,
        "noisy": (clean + rng.normal(0, SIGMA, clean.shape)).astype(np.float32),
        "video_clean": video_clean,
        "video": (video_clean + rng.normal(0, SIGMA, video_clean.shape)).astype(np.float32),
        "burst": burst,
    }


def cases(data: dict[str, np.ndarray], rt: clpatch.Runtime) -> list[Case]:
    clean, noisy, video = data["clean"], data["noisy"], data["video"]
    shape, frames = noisy.shape, len(video)
    a, b = video[0], video[1]
    exact = clpatch.knn(noisy, patch_size=SEARCH["patch_size"], k=SEARCH["k"], step=SEARCH["step"],
                        runtime=rt)
    exact_field = clpatch.knn(a, b, patch_size=SEARCH["patch_size"], k=1, runtime=rt)

    def denoised(reference: np.ndarray) -> Callable[[Any], str]:
        return lambda out: f"{psnr(reference, host(out)):.2f} dB"

    def searched(m: Any) -> str:
        found, best = host(m.distances), host(exact.distances)
        if found.shape != best.shape:
            return f"grid {found.shape} differs from the exact kNN's {best.shape}"
        return f"distance ×{mean_distance(m) / mean_distance(exact):.3f} the exact"

    def field(m: Any) -> str:
        ratio = mean_distance(m, True) / mean_distance(exact_field, True)
        return f"distance ×{ratio:.3f} the exact field"

    bm3d = dict(sigma=SIGMA, data_range=255.0)
    p, s, k = SEARCH["patch_size"], SEARCH["step"], SEARCH["k"]
    return [
        Case("denoise", "nlmeans", "nlmeans(noisy, 20)",
             lambda x, r: clpatch.nlmeans(x[0], SIGMA, runtime=r),
             ("nlmeans", shape, dict(sigma=SIGMA)), [noisy], denoised(clean)),
        Case("denoise", "bm3d fast", "bm3d(noisy, 20)",
             lambda x, r: clpatch.bm3d(x[0], SIGMA, data_range=255.0, runtime=r),
             ("bm3d", shape, bm3d), [noisy], denoised(clean)),
        Case("denoise", "bm3d reference", 'bm3d(noisy, 20, preset="reference")',
             lambda x, r: clpatch.bm3d(x[0], SIGMA, data_range=255.0, preset="reference", runtime=r),
             ("bm3d", shape, dict(bm3d, preset="reference")), [noisy], denoised(clean)),
        Case("denoise", "vbm3d", f"vbm3d(video, 20), {frames} frames",
             lambda x, r: clpatch.vbm3d(x[0], SIGMA, data_range=255.0, runtime=r),
             ("vbm3d", video.shape, bm3d), [video], denoised(data["video_clean"]),
             "whole video; PSNR over every frame"),
        Case("denoise", "burst nlmeans", f"burst_denoise(frames, 20), {frames} frames",
             lambda x, r: clpatch.burst_denoise(x[0], SIGMA, runtime=r),
             ("burst", data["burst"].shape, dict(sigma=SIGMA)), [data["burst"]], denoised(clean),
             "frame 0 denoised with every frame's patches"),
        Case("denoise", "burst bm3d", f'burst_denoise(frames, 20, method="bm3d"), {frames} frames',
             lambda x, r: clpatch.burst_denoise(x[0], SIGMA, method="bm3d", runtime=r),
             ("burst", data["burst"].shape, dict(sigma=SIGMA, method="bm3d")), [data["burst"]],
             denoised(clean)),
        Case("search", "search_patches", f"search_patches(noisy, p {p}, step {s}, window 21, k {k})",
             lambda x, r: clpatch.search_patches(x[0], window=21, runtime=r, **SEARCH),
             ("search", shape, dict(SEARCH, window=21)), [noisy], searched),
        Case("search", "knn", f"knn(noisy, p {p}, step {s}, k {k})",
             lambda x, r: clpatch.knn(x[0], runtime=r, **SEARCH),
             ("knn", shape, dict(SEARCH)), [noisy], searched, "exhaustive: the reference"),
        Case("search", "ann_search", f"ann_search(noisy, p {p}, step {s}, k {k})",
             lambda x, r: clpatch.ann_search(x[0], runtime=r, **SEARCH),
             ("ann", shape, dict(SEARCH)), [noisy], searched),
        Case("search", "nnf", f"nnf(frame 0, frame 1, p {p}, k 1)",
             lambda x, r: clpatch.nnf(x[0], x[1], patch_size=p, runtime=r),
             ("nnf", a.shape, dict(patch_size=p, reference_shape=b.shape)), [a, b], field,
             "every patch of a (step 1)"),
    ]


def kernel_ms(prof: clpatch.Runtime, case: Case, repeats: int) -> float | None:
    """The median over repeats of one plan call's events (uploads apart), or None."""
    method, shape, params = case.plan
    plan = clpatch.make_plan(method, shape, runtime=prof, **params)
    if hasattr(plan, "keep_events"):  # VBM3D keeps every event of a video only when asked
        plan.keep_events = True
    device = [cla.to_device(prof.queue, x) for x in case.inputs]
    times = []
    for _ in range(repeats + 1):
        plan(*device)
        prof.queue.finish()
        events = [e for name, e in plan.last_events if name != "upload"]
        times.append(sum(event_ms(e) for e in events) if events else None)
    times = [t for t in times[1:] if t is not None]
    return statistics.median(times) if times else None


def measure(case: Case, rt: clpatch.Runtime, prof: clpatch.Runtime, repeats: int) -> Row:
    device = [cla.to_device(rt.queue, x) for x in case.inputs]
    result = case.run(device, rt)
    rt.queue.finish()
    quality = case.quality(result)
    wall = wall_ms(lambda: case.run(device, rt), rt.queue.finish, repeats)
    try:
        kernels = kernel_ms(prof, case, max(3, repeats // 2))
    except (clpatch.ClpatchError, TypeError, ValueError) as exc:
        print(f"  {case.method}: no kernel time ({exc})", flush=True)
        kernels = None
    return Row(case.group, case.method, case.call, wall, kernels, quality, case.note)


def markdown(rows: list[Row], meta: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f}" if v < 10 else f"{v:.1f}"

    lines = [
        f"# Which method: speed and quality on one image, σ = {SIGMA:g}",
        "",
        f"{meta['device']} ({meta['platform']}, driver {meta['driver']}), clpatch "
        f"{meta['version']}, {meta['date']}; `{meta['command']}`.",
        f"Image: {meta['image']}; noisy {meta['noisy_psnr']:.2f} dB. Wall clock: one-shot call on "
        "device arrays, synchronised, median; kernels: the same method's plan, profiling events "
        "summed (uploads apart), median (`benchmarks/bench_which_method.py`).",
        "",
        "| group | method | call | wall ms | kernel ms | quality | note |",
        "|---|---|---|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r.group} | {r.method} | `{r.call}` | {ms(r.wall_ms)} | {ms(r.kernel_ms)} "
                     f"| {r.quality} | {r.note} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the markdown table to write")
    parser.add_argument("--device", default=None, help="clpatch device spec (default: the best)")
    parser.add_argument("--size", type=int, default=512, help="image side in pixels (512)")
    parser.add_argument("--frames", type=int, default=8, help="video and burst frames (8)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per row (7)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    parser.add_argument("--tiny", action="store_true",
                        help="64×64, 4 frames, 3 repeats: check the script on a CPU device")
    parser.add_argument("--only", nargs="+", default=None, metavar="METHOD",
                        help="measure only these rows (e.g. nlmeans 'bm3d fast' nnf)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.size, args.frames, args.repeats = 64, 4, 3

    rt = clpatch.Runtime(args.device)
    prof = clpatch.Runtime(rt.device, profiling=True)
    print(f"device: {rt.device.name.strip()} ({rt.device.platform.name.strip()}, "
          f"driver {rt.device.driver_version}); {args.size}x{args.size}, {args.frames} frames",
          flush=True)
    data = inputs(args.size, args.frames)
    rows = []
    chosen = [c for c in cases(data, rt) if args.only is None or c.method in args.only]
    if not chosen:
        parser.error(f"--only matches no row; rows: {', '.join(c.method for c in cases(data, rt))}")
    for case in chosen:
        start = time.perf_counter()
        row = measure(case, rt, prof, args.repeats)
        rows.append(row)
        print(f"  {row.method:16s} wall {row.wall_ms:10.3f} ms  kernels "
              f"{'-' if row.kernel_ms is None else f'{row.kernel_ms:.3f}':>10s} ms  {row.quality}"
              f"  ({time.perf_counter() - start:.1f} s)", flush=True)
    meta = {
        "device": rt.device.name.strip(), "platform": rt.device.platform.name.strip(),
        "driver": rt.device.driver_version, "version": clpatch.__version__,
        "date": datetime.date.today().isoformat(),
        "command": " ".join(["python", "benchmarks/bench_which_method.py",
                             *(sys.argv[1:] if argv is None else argv)]),
        "image": f"camera.png {args.size}×{args.size}" if args.size <= 512 else
                 f"a {args.size}×{args.size} mosaic of camera.png",
        "noisy_psnr": psnr(data["clean"], data["noisy"]), "size": args.size, "frames": args.frames,
        "repeats": args.repeats,
    }
    args.out.write_text(markdown(rows, meta), encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
