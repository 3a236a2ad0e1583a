"""clpatch.dask throughput with 1 and 2 worker processes on one host.

    python benchmarks/bench_dask.py [--size 4096] [--chunks 1024] [--repeats 3]
                                    [--json FILE] [--markdown FILE]

A size x size mosaic of the test photographs (tests/data) with σ = 20 Gaussian noise (not
clipped), float32, as a NumPy-backed Dask array chunked chunks x chunks. For NL-means
(defaults, "fixed" aggregation) and BM3D (fast preset): one in-memory call on this process's
default device, then `clpatch.dask` on a `distributed.LocalCluster` of 1 and of 2 worker
processes (one thread each; each opens its own runtime, on the host's GPUs in turn — on a
one-GPU host both share it). Times are wall clock around `.compute()` (median of the repeats
after one warm-up that builds the programs and plans on every worker); the Dask results are
checked bit for bit against the in-memory one. Throughput = megapixels per second.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import dask.array as da
import distributed
import numpy as np
from PIL import Image

import clpatch
import clpatch.dask as cdask

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
SIGMA = 20.0


def mosaic(size: int, seed: int = 0) -> np.ndarray:
    tiles = [np.asarray(Image.open(p).convert("L"), np.float32) for p in sorted(DATA.glob("*.png"))]
    out = np.zeros((size, size), np.float32)
    y = 0
    i = 0
    while y < size:
        row = tiles[i % len(tiles)]
        x = 0
        h = row.shape[0]
        while x < size:
            t = tiles[i % len(tiles)]
            i += 1
            h = min(h, t.shape[0])
            part = t[:min(h, size - y), :min(t.shape[1], size - x)]
            out[y:y + part.shape[0], x:x + part.shape[1]] = part
            x += part.shape[1]
        y += h
    rng = np.random.default_rng(seed)
    return out + rng.normal(0, SIGMA, out.shape).astype(np.float32)


def timed(fn, repeats: int) -> tuple[float, object]:
    result = fn()                                   # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--chunks", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    image = mosaic(args.size)
    x = da.from_array(image, chunks=args.chunks)
    runtime = clpatch.Runtime()
    methods = {
        "nlmeans": (lambda: clpatch.nlmeans(image, SIGMA, aggregation="fixed", runtime=runtime),
                    lambda: cdask.nlmeans(x, SIGMA, aggregation="fixed")),
        "bm3d": (lambda: clpatch.bm3d(image, SIGMA, runtime=runtime),
                 lambda: cdask.bm3d(x, SIGMA)),
    }
    mp = args.size * args.size / 1e6
    rows = []
    for name, (whole, chunked) in methods.items():
        seconds, expected = timed(whole, args.repeats)
        rows.append(dict(method=name, how="in memory, one call", seconds=seconds,
                         mp_per_s=mp / seconds, identical=True))
        for workers in (1, 2):
            with distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                          processes=True, dashboard_address=None,
                                          silence_logs=50) as cluster, \
                    distributed.Client(cluster):
                seconds, got = timed(lambda f=chunked: f().compute(), args.repeats)
            rows.append(dict(method=name, how=f"clpatch.dask, {workers} worker(s)",
                             seconds=seconds, mp_per_s=mp / seconds,
                             identical=bool(np.array_equal(got, expected))))
            print(rows[-1], flush=True)
    info = dict(device=runtime.device.name.strip(), host=platform.node(), size=args.size,
                chunks=args.chunks, repeats=args.repeats, rows=rows)
    if args.json:
        args.json.write_text(json.dumps(info, indent=2))
    lines = [f"# clpatch.dask throughput, {args.size}x{args.size}, chunks {args.chunks}",
             "", f"Device: {info['device']}. Wall clock around compute(), median of "
             f"{args.repeats} after a warm-up.", "",
             "| method | how | s | MP/s | bit-identical |", "|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['how']} | {r['seconds']:.3f} | {r['mp_per_s']:.1f} | "
              f"{'yes' if r['identical'] else 'NO'} |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
