"""Kernel time of every windowed-search variant, against the device's arithmetic floor.

    python benchmarks/bench_search.py [--device SPEC] [--json FILE] [--repeats 15] [--quick]

For camera.png (512×512) and a 4608×3456 photo mosaic (the size of Davy–Ehret's CMLA
image), both with σ = 20 noise, and for (p 8, step 4, n 16, w 21) and (p 5, step 1,
n 16, w 21), each applicable variant × neighbour table is timed with OpenCL profiling
events (warm-up, median of repeats, inputs rotating between noisy versions, data on the
device so host transfers are not counted). The floor is what the device's measured
multiply-add rate needs for the distance arithmetic:

- direct: every (reference, valid candidate) pair costs p²·C subtract + multiply-add
  pairs (2 operations each) — what an algorithm without work sharing must do;
- shared: every pixel's difference to each window offset is computed once (2 operations
  per pixel, channel and offset) — what perfect sharing between overlapping patches needs.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl.array as cla
from PIL import Image

import clpatch
from clpatch.match.matches import grid_positions
from clpatch.match.window.config import SearchRequest, choose_search
from clpatch.match.window.plan import SearchPlan
from clpatch.tune.timing import measure_ceilings, photo_mosaic, time_events

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "tests" / "data"


def load_gray(name: str) -> np.ndarray:
    return np.asarray(Image.open(IMAGES / f"{name}.png").convert("L"), np.float32)


def valid_pairs(rows: int, cols: int, p: int, s: int, w: int) -> int:
    """Number of (reference, valid candidate) pairs of a search."""
    half = w // 2

    def axis(size: int) -> int:
        return int(sum(min(size - p, g + half) - max(0, g - half) + 1
                       for g in grid_positions(size, p, s)))

    return axis(rows) * axis(cols)


def configs(p: int, s: int, quick: bool):
    variants = ["square", "column", "convolution", "naive"] if (p, s) == (8, 4) else \
        ["convolution", "column", "naive"]
    tables = ["ordered"] if quick else ["ordered", "unordered"]
    return [clpatch.SearchConfig(v, table=t) for v in variants for t in tables]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="ordered tables only, camera only")
    args = parser.parse_args(argv)

    rt = clpatch.Runtime(args.device, profiling=True)
    ceilings = measure_ceilings(rt)
    print(f"device: {rt.device.name.strip()} ({rt.device.platform.name.strip()}, driver "
          f"{rt.device.driver_version}); profile {rt.profile.family}")
    print(f"measured ceilings: {ceilings['fma_gflops']:.0f} GFLOP/s multiply-add, "
          f"{ceilings['copy_gbps']:.0f} GB/s copy")

    camera = load_gray("camera")
    photos = [load_gray(n) for n in ("camera", "brick", "moon", "coins", "text")
              if (IMAGES / f"{n}.png").exists()]
    sizes = [("camera 512x512", [camera + np.random.default_rng(k).normal(0, 20, camera.shape)
                                 .astype(np.float32) for k in range(4)])]
    if not args.quick:
        sizes.append(("mosaic 4608x3456", [photo_mosaic(3456, 4608, seed=k, images=photos)
                                           for k in range(2)]))
    requests = [(8, 4, 16, 21), (5, 1, 16, 21)]

    rows_out = []
    for label, images in sizes:
        device_images = [cla.to_device(rt.queue, im) for im in images]
        h, w_ = images[0].shape
        for p, s, n, w in requests:
            request = SearchRequest(p, s, n, w)
            rule = choose_search(request, rt.profile)
            pairs = valid_pairs(h, w_, p, s, w)
            direct_ms = pairs * p * p * 2 / (ceilings["fma_gflops"] * 1e9) * 1e3
            shared_ms = h * w_ * (w * w) * 2 / (ceilings["fma_gflops"] * 1e9) * 1e3
            refs = len(grid_positions(h, p, s)) * len(grid_positions(w_, p, s))
            memory_ms = (h * w_ * 4 + refs * n * 12) / (ceilings["copy_gbps"] * 1e9) * 1e3
            for config in configs(p, s, args.quick):
                full = choose_search(request, rt.profile, config)
                try:
                    plan = SearchPlan(rt, 1, h, w_, 1, request, full, device_output=True)
                except clpatch.ClpatchError as exc:
                    print(f"  {label} p{p} s{s}: {config.variant}/{config.table} unavailable: {exc}")
                    continue

                def run(i, plan=plan, inputs=device_images):
                    plan.run(inputs[i % len(inputs)])
                    return plan.last_events

                start = time.perf_counter()
                timing = time_events(run, repeats=args.repeats)
                wall = time.perf_counter() - start
                search_ms = timing.median("search")
                q1, q3 = timing.spread("search")
                row = {
                    "image": label, "patch_size": p, "step": s, "n": n, "window": w,
                    "variant": plan.config.variant, "table": plan.config.table,
                    "config": plan.config.describe(),
                    "rule_choice": full.variant == rule.variant and full.table == rule.table
                    and full.group == rule.group and full.tile == rule.tile,
                    "search_ms_median": search_ms, "search_ms_q1": q1, "search_ms_q3": q3,
                    "convert_ms_median": timing.median("convert"),
                    "pairs": pairs, "direct_floor_ms": direct_ms, "shared_floor_ms": shared_ms,
                    "memory_floor_ms": memory_ms, "repeats": args.repeats, "wall_s": wall,
                }
                rows_out.append(row)
                print(f"  {label:17s} p{p} s{s} n{n} w{w}  {plan.config.describe():48s} "
                      f"{search_ms:9.3f} ms  (q1 {q1:.3f}, q3 {q3:.3f})"
                      f"{'  <- rule' if row['rule_choice'] else ''}", flush=True)
            print(f"  floors for {label} p{p} s{s}: direct {direct_ms:.3f} ms, shared "
                  f"{shared_ms:.3f} ms, memory {memory_ms:.3f} ms", flush=True)

    result = {
        "benchmark": "search", "date": time.strftime("%Y-%m-%d"),
        "device": rt.device.name.strip(), "platform": rt.device.platform.name.strip(),
        "driver": rt.device.driver_version, "profile": rt.profile.family,
        "ceilings": ceilings, "python": platform.python_version(),
        "clpatch": clpatch.__version__, "results": rows_out,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
