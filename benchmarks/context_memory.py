"""Device memory left behind by runtimes: for each kind of call, six fresh runtimes each make
one call and are dropped; nvidia-smi's memory.used after a garbage collection, and how many
of their contexts Python still holds (H100 results: benchmarks/results/h100_session6.md).

    python benchmarks/context_memory.py [--device 0:0]     # needs nvidia-smi
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl.array as cla

import clpatch


def used_mib() -> int:
    """nvidia-smi's memory.used of the first GPU, after a garbage collection."""
    gc.collect()
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True)
    return int(out.stdout.split()[0])


def trial(spec: str, name: str, call: Callable[[clpatch.Runtime], Any], count: int = 6) -> None:
    """`count` fresh runtimes making `call` once each, then dropped."""
    refs = []
    for _ in range(count):
        rt = clpatch.Runtime(spec)
        call(rt)
        rt.queue.finish()
        refs.append(weakref.ref(rt.context))
        del rt
    alive = sum(ref() is not None for ref in refs)
    print(f"{name:24s} memory used {used_mib():6d} MiB, contexts alive {alive}/{count}",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="0:0")
    spec = ap.parse_args().device
    img = np.random.default_rng(0).random((64, 64)).astype(np.float32)
    print("start", used_mib(), "MiB", flush=True)
    trial(spec, "runtime only", lambda rt: None)
    trial(spec, "search", lambda rt: clpatch.search_patches(img, 4, 2, 7, 4, runtime=rt))
    trial(spec, "nlmeans", lambda rt: clpatch.nlmeans(img, 10, runtime=rt))
    trial(spec, "device nlmeans",
          lambda rt: clpatch.nlmeans(cla.to_device(rt.queue, img), 10, runtime=rt).get())
    trial(spec, "bm3d", lambda rt: clpatch.bm3d(img, 10, runtime=rt))
    trial(spec, "estimate_sigma", lambda rt: clpatch.estimate_sigma(img, runtime=rt))
    trial(spec, "knn", lambda rt: clpatch.knn(img, patch_size=4, k=2, runtime=rt))
    rt = clpatch.Runtime(spec)
    for side in range(40, 200, 8):
        shaped = np.random.default_rng(side).random((side, side + 3)).astype(np.float32)
        clpatch.nlmeans(shaped, 10, runtime=rt)
        clpatch.bm3d(shaped, 10, runtime=rt)
    print("one runtime, 20 shapes", used_mib(), "MiB", flush=True)
    del rt
    print("after dropping it", used_mib(), "MiB", flush=True)


if __name__ == "__main__":
    main()
