"""clpatch.dask throughput: threads of one process, and 1 and 2 worker processes on one host.

    python benchmarks/bench_dask.py [--size 4096] [--chunks 1024] [--repeats 3]
                                    [--json FILE] [--markdown FILE]

A size x size mosaic of the test photographs (tests/data) with σ = 20 Gaussian noise (not
clipped), float32, as a Dask array chunked chunks x chunks and persisted where it runs (in
this process for Dask's threads, on the workers for a cluster), as data loaded with Dask
would be. For NL-means (defaults, "fixed" aggregation) and BM3D (fast preset): one in-memory
call on this process's default device (NumPy in and out); `clpatch.dask` with Dask's
threads in this process; then on a `distributed.LocalCluster` of 1 and of 2 worker processes
(one thread each; each opens its own runtime, on the host's GPUs in turn: on a one-GPU host
both share it). A Dask run is timed from building the lazy result to its chunks persisted
where they were computed (`persist` and `wait`; nothing comes back to this process). Times
are wall clock, median of the repeats after one warm-up that builds the programs and plans
on every worker; the Dask results are gathered after the timing and checked bit for bit
against the in-memory one. Throughput = megapixels per second. Reading and writing files
(Zarr, TIFF) is not included.
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


def mosaic(size: int, seed: int = 0, noisy: bool = True) -> np.ndarray:
    """size x size float32 mosaic of the test photographs, with sigma SIGMA Gaussian noise
    from `seed` unless `noisy` is False."""
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
    if not noisy:
        return out
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
    runtime = clpatch.Runtime()
    methods = {
        "nlmeans": (lambda: clpatch.nlmeans(image, SIGMA, aggregation="fixed", runtime=runtime),
                    lambda x: cdask.nlmeans(x, SIGMA, aggregation="fixed")),
        "bm3d": (lambda: clpatch.bm3d(image, SIGMA, runtime=runtime),
                 lambda x: cdask.bm3d(x, SIGMA)),
    }

    def persisted(chunked, x, client=None):
        """Median seconds from the lazy result to its chunks persisted, and the result. On a
        cluster each run's result is released (and the release waited for) before the next:
        the same keys would otherwise be found in memory and not computed again."""
        times, out = [], None
        for k in range(args.repeats + 1):
            if out is not None and client is not None:
                client.cancel(out)
                del out
                while len(client.who_has()) > len(x.dask):
                    time.sleep(0.01)
            start = time.perf_counter()
            out = chunked(x)
            out = client.persist(out) if client is not None else out.persist(scheduler="threads")
            if client is not None:
                distributed.wait(out)
            if k:
                times.append(time.perf_counter() - start)
        return statistics.median(times), np.asarray(out.compute())

    mp = args.size * args.size / 1e6
    rows = []
    for name, (whole, chunked) in methods.items():
        seconds, expected = timed(whole, args.repeats)
        rows.append(dict(method=name, how="in memory, one call", seconds=seconds,
                         mp_per_s=mp / seconds, identical=True))
        local = da.from_array(image, chunks=args.chunks).persist(scheduler="threads")
        seconds, got = persisted(chunked, local)
        rows.append(dict(method=name, how="clpatch.dask, threads of this process",
                         seconds=seconds, mp_per_s=mp / seconds,
                         identical=bool(np.array_equal(got, expected))))
        for workers in (1, 2):
            with distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                          processes=True, dashboard_address=None,
                                          silence_logs=50) as cluster, \
                    distributed.Client(cluster) as client:
                x = client.persist(da.from_array(image, chunks=args.chunks))
                distributed.wait(x)
                seconds, got = persisted(chunked, x, client)
            rows.append(dict(method=name, how=f"clpatch.dask, {workers} worker(s)",
                             seconds=seconds, mp_per_s=mp / seconds,
                             identical=bool(np.array_equal(got, expected))))
            print(rows[-1], flush=True)
    info = dict(device=runtime.device.name.strip(), host=platform.node(), size=args.size,
                chunks=args.chunks, repeats=args.repeats, rows=rows)
    if args.json:
        args.json.write_text(json.dumps(info, indent=2))
    lines = [f"# clpatch.dask throughput, {args.size}x{args.size}, chunks {args.chunks}",
             "", f"Device: {info['device']}. Wall clock, median of {args.repeats} after a warm-up: "
             "one call with NumPy in and out; Dask from the lazy result to its chunks persisted "
             "(input already persisted).", "",
             "| method | how | s | MP/s | bit-identical |", "|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['how']} | {r['seconds']:.3f} | {r['mp_per_s']:.1f} | "
              f"{'yes' if r['identical'] else 'NO'} |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
