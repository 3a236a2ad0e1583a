"""Plans that used to wait inside `enqueue` (issue 39): the kNN (its value check was read
back before the search) and the NNF (its PCA model fitted on the host), now waiting for
nothing (the kNN always; the NNF given `model=`), and the banded kNN merged on the device.

    python benchmarks/bench_plan_waits.py [--device SPEC] [--frames 10] [--json FILE]

Cases (device arrays in and out):
- knn: make_plan("knn") self-search on a 512x512 uint8 photo mosaic (patch 8, step 4,
  k 16); nnf: make_plan("nnf") on an 800x1920 RGB pair (patch 8, PCA 10, k 1), without
  and with `model=nnf_model(a, b)`. For each: the host time `enqueue` takes to return
  (median), the wall clock per frame of `--frames` enqueues issued back to back and one
  finish (median of 3 such runs), and the sum of one run's kernel events (profiling
  runtime, median of 3); the results compared with the one-shot function's.
- knn bands: knn_vectors on 60000 x 60000 vectors of 32 dimensions (k 16) in one pass
  and with the runtime's `memory_limit` set so that the queries are cut into windows and
  the references into bands (merged on the device): wall clock and identity.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl.array as cla
from bench_overhead import event_ms, rgb_mosaic, same_matches, wall_ms

import clpatch
from clpatch.tune.timing import photo_mosaic


def _pipeline(rt: clpatch.Runtime, prof: clpatch.Runtime, method: str, shape: Any,
              inputs: list[np.ndarray], params: dict, frames: int) -> dict[str, Any]:
    """enqueue's return time, back-to-back wall per frame, kernel sum, for one plan."""
    extra = {"reference_shape": inputs[1].shape} if len(inputs) == 2 else {}
    dtype = inputs[0].dtype
    plan = clpatch.make_plan(method, shape, dtype=dtype, runtime=rt, **extra, **params)
    device = [cla.to_device(rt.queue, x) for x in inputs]
    first, _ = plan.enqueue(*device)
    rt.queue.finish()
    plan.check()
    returns, per_frame = [], []
    for _ in range(3):
        rt.queue.finish()
        start = time.perf_counter()
        for _ in range(frames):
            t0 = time.perf_counter()
            plan.enqueue(*device)
            returns.append(time.perf_counter() - t0)
        rt.queue.finish()
        per_frame.append((time.perf_counter() - start) / frames)
    plan.check()
    pplan = clpatch.make_plan(method, shape, dtype=dtype, runtime=prof, **extra, **params)
    pdevice = [cla.to_device(prof.queue, x) for x in inputs]
    kernels = []
    for _ in range(4):
        pplan.enqueue(*pdevice)
        prof.queue.finish()
        kernels.append(sum(event_ms(e) for k, e in pplan.last_events if k != "upload"))
    return {"enqueue_return_ms": 1e3 * statistics.median(returns),
            "wall_per_frame_ms": 1e3 * statistics.median(per_frame),
            "kernel_ms": statistics.median(kernels[1:]),
            "waits": bool(getattr(plan, "waits_for_peak", False)
                          or getattr(plan, "waits_for_sample", False)),
            "result": first}


def knn_case(rt: clpatch.Runtime, prof: clpatch.Runtime, frames: int) -> dict[str, Any]:
    image = np.clip(photo_mosaic(512, 512, sigma=5.0, seed=3), 0, 255).astype(np.uint8)
    params = dict(patch_size=8, step=4, k=16)
    row = _pipeline(rt, prof, "knn", image.shape, [image], params, frames)
    row["identical"] = same_matches(row.pop("result"), clpatch.knn(image, runtime=rt, **params))
    return {"case": "knn 512x512 u8, p 8, step 4, k 16", **row}


def nnf_cases(rt: clpatch.Runtime, prof: clpatch.Runtime, frames: int) -> list[dict]:
    shape = (800, 1920, 3)
    a, b = (rgb_mosaic(*shape[:2], seed=s) for s in (2, 5))
    params = dict(patch_size=8, k=1, pca_dims=10)
    expected = clpatch.nnf(a, b, runtime=rt, **params)
    rows = []
    for label, extra in (("fitted per run", {}),
                         ("model given", {"model": clpatch.nnf_model(a, b, patch_size=8,
                                                                     pca_dims=10)})):
        row = _pipeline(rt, prof, "nnf", a.shape, [a, b], {**params, **extra}, frames)
        row["identical"] = same_matches(row.pop("result"), expected)
        rows.append({"case": f"nnf 800x1920 RGB, p 8, PCA 10, k 1, {label}", **row})
    return rows


def banded_case(rt: clpatch.Runtime) -> dict[str, Any]:
    rng = np.random.default_rng(4)
    queries = rng.integers(0, 16, (60000, 32)).astype(np.float32)
    references = rng.integers(0, 16, (60000, 32)).astype(np.float32)
    limit = 24 << 20
    small = clpatch.Runtime(rt.device, memory_limit=limit)
    q, r = cla.to_device(rt.queue, queries), cla.to_device(rt.queue, references)
    qs, rs = cla.to_device(small.queue, queries), cla.to_device(small.queue, references)
    one = clpatch.knn_vectors(q, r, 16, runtime=rt)
    cut = clpatch.knn_vectors(qs, rs, 16, runtime=small)
    # (the runtime's last plan is knn_vectors' column kernel: find the kNN plan itself)
    layout = next((getattr(p, "layout", None) for p in reversed(small.plan_cache().values())
                   if getattr(p, "method", None) == "knn"), None)
    return {"case": "knn_vectors 60000 x 60000 x 32, k 16", "memory_limit": limit,
            "pairs": None if layout is None else layout.pairs,
            "one_pass_wall_ms": wall_ms(lambda: clpatch.knn_vectors(q, r, 16, runtime=rt),
                                        rt.queue.finish, 3),
            "banded_wall_ms": wall_ms(lambda: clpatch.knn_vectors(qs, rs, 16, runtime=small),
                                      small.queue.finish, 3),
            "identical": bool(np.array_equal(one.indices.get(), cut.indices.get())
                              and np.array_equal(one.distances.get(), cut.distances.get()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rt = clpatch.Runtime(args.device)
    prof = clpatch.Runtime(args.device, profiling=True)
    rows = [knn_case(rt, prof, args.frames), *nnf_cases(rt, prof, args.frames),
            banded_case(rt)]
    for row in rows:
        print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps({"device": rt.device.name.strip(),
                                         "host": platform.node(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
