"""Where a clpatch.dask piece's time goes, in one process on one device.

    python benchmarks/profile_dask_piece.py [--size 6144] [--chunks 2048] [--top 30]

For BM3D (fast) and NL-means ("fixed") on a size x size noisy mosaic in chunks x chunks
chunks: the whole Dask graph run by the synchronous scheduler (median of 3 after a
warm-up, and its time per piece), one in-memory call on a piece's sub-window (wall clock
from NumPy in to NumPy out, median of 5; and its kernels' time from OpenCL profiling
events), and a cProfile of one graph run, the functions with the most time of their own
first.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import re
import statistics
import time

import dask
import dask.array as da
import numpy as np
from bench_dask import SIGMA, mosaic, timed
from dask.callbacks import Callback

import clpatch
import clpatch.dask as cdask
import clpatch.dask.graph as dask_graph
from clpatch.core import hostwork
from clpatch.dask.pieces import bm3d_halo, nlmeans_halo, pieces
from clpatch.denoise.bm3d_params import stage_params, stagger_shifts
from clpatch.tune.timing import event_ms


def median_s(fn, repeats: int) -> float:
    """Median seconds of `repeats` calls of `fn` after one warm-up (bench_dask's `timed`)."""
    return timed(fn, repeats)[0]


class TaskTimes(Callback):
    """Seconds per task kind (the key's name up to its token) of a synchronous run."""

    def __init__(self) -> None:
        super().__init__()
        self.start: dict = {}
        self.seconds: dict[str, list[float]] = {}

    def _pretask(self, key, dsk, state):
        self.start[key] = time.perf_counter()

    def _posttask(self, key, result, dsk, state, worker_id):
        name = re.sub(r"-[0-9a-f]{32}$", "", str(key[0] if isinstance(key, tuple) else key))
        self.seconds.setdefault(name, []).append(time.perf_counter() - self.start.pop(key))


def timed_calls(module, names: list[str], seconds: dict[str, list[float]]) -> dict:
    """Wrap module.<name> for each of names so that each call's seconds are recorded;
    returns the originals (to put back)."""
    originals = {n: getattr(module, n) for n in names}
    for n, fn in originals.items():
        def wrapper(*a, fn=fn, n=n, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                seconds.setdefault(n, []).append(time.perf_counter() - t)
        setattr(module, n, wrapper)
    return originals


def host_variants(window: np.ndarray, block: np.ndarray, copies: int = 48) -> dict[str, float]:
    """ms of a piece's host steps done in one thread and split over threads
    (`clpatch.core.hostwork`): a chunk's peak as np.max and np.min, the join as a copy into
    a new array; each on the next of `copies` copies of its input, so that none is in the
    host's caches (a 16384² image is 1 GB; the H200 host's L3 holds 300 MB)."""
    blocks = [block.copy() for _ in range(copies)]
    windows = [window.copy() for _ in range(copies)]
    turn = [0]

    def next_of(arrays):
        turn[0] += 1
        return arrays[turn[0] % len(arrays)]

    def one_thread_peak():
        b = next_of(blocks)
        return b.max(), b.min()

    def threaded_join():
        w = next_of(windows)
        hostwork.copy(np.empty_like(w), w)
    return {"peak, one thread": median_s(one_thread_peak, 21) * 1e3,
            f"peak, {hostwork.THREADS} threads": median_s(
                lambda: hostwork.extrema(next_of(blocks)), 21) * 1e3,
            "join, one thread": median_s(lambda: next_of(windows).copy(), 21) * 1e3,
            f"join, {hostwork.THREADS} threads": median_s(threaded_join, 21) * 1e3}


def in_cluster(x: da.Array, lazy) -> dict[str, list[float]]:
    """Seconds of the piece tasks, their joins and device calls, on one worker of an
    in-process LocalCluster holding the input (persisted: contiguous chunks, as a worker
    process gets them); the second of two runs."""
    import distributed
    seconds: dict[str, list[float]] = {}
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None, silence_logs=50) as cluster, \
            distributed.Client(cluster) as client:
        held = client.persist(x)
        distributed.wait(held)
        distributed.wait(client.persist(lazy(held)))
        originals = timed_calls(dask_graph, ["join_window", "run_on_device"], seconds)
        try:
            with distributed.get_task_stream(client) as stream:
                distributed.wait(client.persist(lazy(held)))
        finally:
            for n, fn in originals.items():
                setattr(dask_graph, n, fn)
    for task in stream.data:
        name = re.sub(r"-[0-9a-f]{32}$", "", str(task["key"][0] if isinstance(task["key"], tuple)
                                                 else task["key"]))
        for s in task["startstops"]:
            if s["action"] == "compute":
                seconds.setdefault(name, []).append(s["stop"] - s["start"])
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=6144)
    ap.add_argument("--chunks", type=int, default=2048)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    image = mosaic(args.size)
    peak = float(np.abs(image).max())
    rt = cdask.worker_runtime()
    prof = clpatch.Runtime(rt.device, profiling=True)
    print("device:", rt.device.name, flush=True)
    chunks = (args.chunks,) * (args.size // args.chunks)
    cases = {
        "bm3d": (lambda x: cdask.bm3d(x, SIGMA),
                 lambda a, r: clpatch.bm3d(a, SIGMA, peak=peak, runtime=r),
                 bm3d_halo([(sp.patch_size, sp.step, sp.window,
                             len(stagger_shifts(sp.step)) if sp.stagger else 1)
                            for sp in stage_params("fast", SIGMA)[:2]])),
        "nlmeans": (lambda x: cdask.nlmeans(x, SIGMA, aggregation="fixed"),
                    lambda a, r: clpatch.nlmeans(a, SIGMA, aggregation="fixed", peak=peak,
                                                 runtime=r),
                    nlmeans_halo(8, 4, 21)),
    }
    x = da.from_array(image, chunks=args.chunks)
    for name, (lazy, call, halo) in cases.items():
        cut = pieces(args.size, args.size, chunks, chunks, halo)
        inner = max(cut, key=lambda p: (p.yb - p.ya) * (p.xb - p.xa))
        window = np.ascontiguousarray(image[inner.ya:inner.yb, inner.xa:inner.xb])
        with dask.config.set(scheduler="sync"):
            graph_s = median_s(lambda lazy=lazy: lazy(x).compute(), 3)
            parts: dict[str, list[float]] = {}
            originals = timed_calls(dask_graph, ["join_window", "run_on_device"], parts)
            with TaskTimes() as tasks:
                lazy(x).persist()
            for n, fn in originals.items():
                setattr(dask_graph, n, fn)
            profile = cProfile.Profile()
            profile.enable()
            lazy(x).compute()
            profile.disable()
        one_s = median_s(lambda call=call, window=window: call(window, rt), 5)
        windows = [np.ascontiguousarray(image[p.ya:p.yb, p.xa:p.xb]) for p in cut]
        each = []
        for w in windows * 2:
            t = time.perf_counter()
            call(w, rt)
            each.append(time.perf_counter() - t)
        kernels = []
        for _ in range(6):
            call(window, prof)
            prof.queue.finish()
            cache = prof.plan_cache()
            plan = cache[next(reversed(cache))]
            kernels.append(sum(event_ms(e) for k, e in plan.last_events if k != "upload"))
        print(f"\n## {name}: {len(cut)} pieces, largest sub-window {window.shape}")
        print(f"graph, sync scheduler: {graph_s:.3f} s = {graph_s / len(cut) * 1e3:.1f} ms per piece")
        print(f"one call on the sub-window: wall {one_s * 1e3:.1f} ms, kernels "
              f"{statistics.median(kernels[1:]):.1f} ms (last plan's events); on every "
              f"piece's window in turn: median {statistics.median(each[len(cut):]) * 1e3:.1f} ms")
        for n, v in {**tasks.seconds, **parts}.items():
            print(f"  {n}: {len(v)} calls, median {statistics.median(v) * 1e3:.2f} ms, "
                  f"total {sum(v) * 1e3:.1f} ms")
        for n, v in in_cluster(x, lazy).items():
            print(f"  in a LocalCluster worker (threads, input persisted), {n}: {len(v)} calls, "
                  f"median {statistics.median(v) * 1e3:.2f} ms, total {sum(v) * 1e3:.1f} ms")
        for n, ms in host_variants(window, image[:args.chunks, :args.chunks].copy()).items():
            print(f"  {n}: {ms:.2f} ms")
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.top)
        print(text.getvalue())


if __name__ == "__main__":
    main()
