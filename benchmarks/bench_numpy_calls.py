"""Wall clock of one NumPy-in, NumPy-out call (what a script calling clpatch feels).

    python benchmarks/bench_numpy_calls.py [--sizes 2048 4096x3456 8192] [--repeats 11]

NL-means ("fixed" aggregation, and the device's default) and BM3D (fast) on a noisy photo
mosaic of each size (sigma 20, float32), on the default device: median of `repeats` calls
after two warm-up calls, each from a NumPy array to the NumPy result.
"""

from __future__ import annotations

import argparse
import json

from bench_dask import timed

import clpatch
from clpatch.tune.timing import photo_mosaic

SIGMA = 20.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="*", default=["2048", "4608x3456", "8192"])
    ap.add_argument("--repeats", type=int, default=11)
    args = ap.parse_args()
    rt = clpatch.Runtime()
    calls = {
        "nlmeans fixed": lambda a: clpatch.nlmeans(a, SIGMA, aggregation="fixed", runtime=rt),
        "nlmeans default": lambda a: clpatch.nlmeans(a, SIGMA, runtime=rt),
        "bm3d fast": lambda a: clpatch.bm3d(a, SIGMA, runtime=rt),
    }
    print("device:", rt.device.name.strip())
    for size in args.sizes:
        cols, rows = (int(v) for v in size.split("x")) if "x" in size else (int(size),) * 2
        image = photo_mosaic(rows, cols, seed=1)
        for name, call in calls.items():
            call(image)                 # the first of two warm-up calls (timed makes the other)
            seconds, _ = timed(lambda call=call, image=image: call(image), args.repeats)
            print(json.dumps(dict(call=name, rows=rows, cols=cols,
                                  wall_ms=round(seconds * 1e3, 3))), flush=True)


if __name__ == "__main__":
    main()
