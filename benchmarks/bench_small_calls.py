"""Small calls on device arrays, many samples: median and 10th/90th percentiles of the wall
clock per call (synchronised), after a long warm-up, twice in a row.

    python benchmarks/bench_small_calls.py [--device SPEC] [--calls 300] [--warmup 50]

bench_overhead.py takes 7 samples after 2 warm-up calls, which leaves small calls (a few
hundred µs) at the mercy of the host's noise and the GPU's clock ramp; this script shows
their spread. Cases: search_patches 512×512 (p 8, step 4, n 16, window 21), NL-means and
BM3D fast on 256×256, and SearchPlan.run alone (no argument checks, no plan lookup).
"""

from __future__ import annotations

import argparse
import time

import pyopencl.array as cla

import clpatch
from clpatch.tune.timing import photo_mosaic


def spread(call, queue, calls: int, warmup: int) -> str:
    for _ in range(warmup):
        call()
    queue.finish()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        queue.finish()
        times.append((time.perf_counter() - start) * 1e6)
    times.sort()
    return (f"median {times[calls // 2]:.0f} µs, p10 {times[calls // 10]:.0f} µs, "
            f"p90 {times[9 * calls // 10]:.0f} µs")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    args = ap.parse_args(argv)
    rt = clpatch.Runtime(args.device)
    big = cla.to_device(rt.queue, photo_mosaic(512, 512, seed=1))
    small = cla.to_device(rt.queue, photo_mosaic(256, 256, seed=1))
    print(f"# small calls on {rt.device.name.strip()}, {args.calls} calls after {args.warmup}")
    for rep in range(2):
        cases = {
            "search_patches 512x512": lambda: clpatch.search_patches(big, 8, 4, 21, 16, runtime=rt),
            "nlmeans 256x256": lambda: clpatch.nlmeans(small, 20.0, runtime=rt),
            "bm3d fast 256x256": lambda: clpatch.bm3d(small, 20.0, data_range=255.0, runtime=rt),
        }
        for name, call in cases.items():
            print(f"pass {rep + 1}: {name:24s} {spread(call, rt.queue, args.calls, args.warmup)}")
        plan = next(p for k, p in rt.plan_cache().items() if k[0] == "search")
        print(f"pass {rep + 1}: {'SearchPlan.run 512x512':24s} "
              f"{spread(lambda plan=plan: plan.run(big), rt.queue, args.calls, args.warmup)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
