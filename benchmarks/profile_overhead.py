"""Where a call's host time goes: cProfile of repeated clpatch calls (the cases of
bench_overhead.py), the functions with the most time of their own first.

    python benchmarks/profile_overhead.py [--device SPEC] [--calls 200] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats

import pyopencl.array as cla

import clpatch
from clpatch.tune.timing import photo_mosaic

CASES = {
    "search 512x512 device": ("search", (512, 512), True),
    "bm3d 256x256 device": ("bm3d", (256, 256), True),
    "nlmeans 256x256 device": ("nlmeans", (256, 256), True),
    "bm3d 3456x4608 numpy": ("bm3d", (3456, 4608), False),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    rt = clpatch.Runtime(args.device)
    for name, (method, shape, device) in CASES.items():
        image = photo_mosaic(*shape, seed=1)
        x = cla.to_device(rt.queue, image) if device else image
        if method == "search":
            def call(x=x):
                return clpatch.search_patches(x, 8, 4, 21, 16, runtime=rt)
        elif method == "bm3d":
            def call(x=x):
                return clpatch.bm3d(x, 20.0, data_range=255.0, runtime=rt)
        else:
            def call(x=x):
                return clpatch.nlmeans(x, 20.0, runtime=rt)
        for _ in range(3):
            call()
        rt.queue.finish()
        calls = args.calls if shape[0] < 1000 else max(5, args.calls // 40)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(calls):
            call()
        rt.queue.finish()
        profile.disable()
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text)
        stats.sort_stats("tottime").print_stats(args.top)
        print(f"==== {name}: {calls} calls, {stats.total_tt / calls * 1e3:.3f} ms per call")
        print("\n".join(text.getvalue().splitlines()[6:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
