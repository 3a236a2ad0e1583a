"""How the host's CPUs share memory bandwidth between Dask worker processes.

    python benchmarks/probe_host.py [--mb 16] [--loops 60]

Prints the host's CPU topology (logical CPUs, NUMA nodes, each GPU's local CPUs from sysfs,
SMT siblings) and times, in 1, 2 and 4 processes at once, what a chunked BM3D task does on
the host per 2048² chunk: np.max and np.min over a 16 MB float32 array (the peak), and a
copy of it into a new array (joining a sub-window). Each process runs unpinned, then pinned
to its own CPU (CPUs spread over the list: 0, n/2, ... and 0, 1, ...). Median ms per loop.
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path

import numpy as np


def read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "?"


def topology() -> dict:
    gpus = {}
    for dev in sorted(glob.glob("/sys/bus/pci/devices/*")):
        if read(f"{dev}/class").startswith("0x0302") or read(f"{dev}/class").startswith("0x0300"):
            gpus[os.path.basename(dev)] = dict(vendor=read(f"{dev}/vendor"),
                                               numa=read(f"{dev}/numa_node"),
                                               cpus=read(f"{dev}/local_cpulist"))
    siblings = sorted({read(p) for p in glob.glob(
        "/sys/devices/system/cpu/cpu*/topology/thread_siblings_list")})
    nodes = {os.path.basename(n): read(f"{n}/cpulist")
             for n in sorted(glob.glob("/sys/devices/system/node/node*"))}
    return dict(cpus=os.cpu_count(), affinity=len(os.sched_getaffinity(0)), nodes=nodes,
                siblings=siblings[:8], sibling_sets=len(siblings), gpus=gpus,
                model=next((line.split(":", 1)[1].strip() for line in
                            read("/proc/cpuinfo").splitlines() if line.startswith("model name")), "?"))


def work(args: tuple[int | None, int, int, mp.Barrier]) -> dict:
    cpu, mb, loops, barrier = args
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    a = np.random.default_rng(cpu or 0).random(mb * 2**18, dtype=np.float32)
    out = np.empty_like(a)
    peak, copy = [], []
    barrier.wait()
    for _ in range(loops):
        t = time.perf_counter()
        float(max(abs(np.max(a)), abs(np.min(a))))
        peak.append(time.perf_counter() - t)
        t = time.perf_counter()
        np.copyto(out, a)
        copy.append(time.perf_counter() - t)
    return dict(peak_ms=statistics.median(peak) * 1e3, copy_ms=statistics.median(copy) * 1e3)


def trial(count: int, cpus: list[int | None], mb: int, loops: int) -> dict:
    with mp.Manager() as manager:
        barrier = manager.Barrier(count)
        with mp.Pool(count) as pool:
            got = pool.map(work, [(cpus[i], mb, loops, barrier) for i in range(count)])
    return dict(processes=count, cpus=cpus[:count],
                peak_ms=round(statistics.mean(g["peak_ms"] for g in got), 3),
                copy_ms=round(statistics.mean(g["copy_ms"] for g in got), 3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=16)
    ap.add_argument("--loops", type=int, default=60)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    topo = topology()
    print(json.dumps(topo, indent=1), flush=True)
    n = len(os.sched_getaffinity(0))
    allowed = sorted(os.sched_getaffinity(0))
    spread = [allowed[i * n // 4] for i in range(4)]
    adjacent = [allowed[i % n] for i in range(4)]
    rows = []
    for count in (1, 2, 4):
        for label, cpus in (("unpinned", [None] * 4), ("spread", spread), ("adjacent", adjacent)):
            row = dict(pinning=label, **trial(count, cpus, args.mb, args.loops))
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(dict(topology=topo, rows=rows), indent=1))


if __name__ == "__main__":
    main()
