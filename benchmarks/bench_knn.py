"""Exhaustive kNN: clpatch.knn / knn_vectors against torch.cdist + torch.topk, same data.

    python benchmarks/bench_knn.py [--device SPEC] [--json FILE] [--markdown FILE]
                                   [--repeats 5] [--quick] [--no-peers] [--skip CASE ...]

Cases (the issue's):
- table4: Tang's Table 4 case, a 256x256 RGB photo crop against itself, 11x11 patches,
  k = 12, step 1 (60 516 x 60 516 pairs), with each engine ("offsets", "gemm", "direct";
  --skip takes an engine's name too);
- ksweep: the table4 case with k = 1, 16, 128, 256 (offsets engine), with each top-k
  variant of --topk ("rule": as the rule picks; "heap", "group", "warp": forced for every
  k) and each --split-entries (the plan's cap on splits: max(MIN_SPLITS, SPLIT_ENTRIES // k)), each run's
  matches checked equal to the first's;
- vectors: knn_vectors, 100 000 x 100 000 random vectors of 128 floats, k = 16;
- large: 1024x1024 RGB against 1024x1024 RGB (the stereo pair), 7x7, k = 16 (ours only);
- chamfer: 256x256 grayscale photo quantised to 16 labels, 5x5, k = 10.

clpatch: the input is uploaded once as a device array (uint8 RGB for the photo cases,
float32 for vectors); wall clock = `time.perf_counter` around the call with the queue
finished (median of --repeats after one warm-up); kernel time = the sum of the call's
profiling events (convert, clear, search, finish) on a profiling runtime, median.
torch: the same uint8 data as float32 CUDA tensors, patches by `unfold`, `torch.cdist`
(float32, TF32 off, `compute_mode="use_mm_for_euclid_dist"`) + `torch.topk(largest=False)`
in query batches sized to 4 GiB of distances; wall clock with `torch.cuda.synchronize()`,
median; torch's matrix product alone is timed on the same shapes for the FLOP/s figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl.array as cla
from bench_overhead import wall_ms
from PIL import Image

import clpatch
from clpatch.match.knn import plan as knn_plan
from clpatch.match.knn import search as knn_module
from clpatch.match.knn.config import TOPK_GROUP, TOPK_HEAP, TOPK_NAMES, TOPK_WARP
from clpatch.tune.timing import event_ms

IMAGES = Path(__file__).resolve().parents[1] / "tests" / "data"


def photo(name: str, size: int, grey: bool = False) -> np.ndarray:
    img = Image.open(IMAGES / f"{name}.png").convert("L" if grey else "RGB")
    w, h = img.size
    side = min(w, h)
    img = img.crop(((w - side) // 2, (h - side) // 2, (w + side) // 2, (h + side) // 2))
    return np.asarray(img.resize((size, size), Image.BICUBIC))


TOPK_FORCED = {"heap": TOPK_HEAP, "group": TOPK_GROUP, "warp": TOPK_WARP}


@contextlib.contextmanager
def forced_topk(name: str) -> Any:
    """clpatch.knn with the offsets engine's top-k variant `name` forced for every k
    ("rule": unchanged)."""
    rule = knn_module.choose_knn
    if name != "rule":
        def choose(*args: Any, **kw: Any) -> Any:
            config = rule(*args, **kw)
            if config.method != "offsets":
                return config
            return replace(config, topk=TOPK_FORCED[name], topk_k=1)
        knn_module.choose_knn = choose
    try:
        yield
    finally:
        knn_module.choose_knn = rule


def median_wall(call: Callable[[], Any], finish: Callable[[], None], repeats: int) -> float:
    """Median wall clock of `repeats` calls after one warm-up (bench_overhead's clock)."""
    return wall_ms(call, finish, repeats, warmup=0)


def ours(rt: Any, prof: Any, query: np.ndarray, reference: np.ndarray | None,
         repeats: int, **kw: Any) -> dict[str, Any]:
    q = cla.to_device(rt.queue, query)
    r = None if reference is None else cla.to_device(rt.queue, reference)
    wall = median_wall(lambda: clpatch.knn(q, r, runtime=rt, **kw), rt.queue.finish, repeats)
    qp = cla.to_device(prof.queue, query)
    rp = None if reference is None else cla.to_device(prof.queue, reference)
    kernels = []
    for _ in range(max(1, min(repeats, 3))):
        clpatch.knn(qp, rp, runtime=prof, **kw)
        prof.queue.finish()
        plan = next(reversed(prof.plan_cache().values()))
        kernels.append(sum(event_ms(e) for _, e in plan.last_events))
    top = getattr(plan, "topk", TOPK_HEAP)
    return {"wall_ms": wall, "kernel_ms": statistics.median(kernels),
            "method": plan.config.method, "topk": TOPK_NAMES.get(top, str(top)),
            "splits": plan.splits}


def torch_pair(query: np.ndarray, reference: np.ndarray | None, p: int, k: int,
               repeats: int) -> dict[str, Any]:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    def patches(img: np.ndarray) -> Any:
        t = torch.from_numpy(np.ascontiguousarray(img)).cuda().float()
        t = t.permute(2, 0, 1)[None] if t.ndim == 3 else t[None, None]
        return torch.nn.functional.unfold(t, p)[0].T.contiguous()   # (positions, p*p*C)

    qm = patches(query)
    rm = qm if reference is None else patches(reference)
    return torch_vectors(qm, rm, k, repeats)


def torch_vectors(qm: Any, rm: Any, k: int, repeats: int) -> dict[str, Any]:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    batch = max(1, (1 << 30) // rm.shape[0])

    def run() -> Any:
        out = []
        for a in range(0, qm.shape[0], batch):
            d = torch.cdist(qm[a:a + batch], rm, compute_mode="use_mm_for_euclid_dist")
            out.append(torch.topk(d, k, dim=1, largest=False))
        return out

    wall = median_wall(run, torch.cuda.synchronize, repeats)
    gemm = median_wall(lambda: [qm[a:a + batch] @ rm.T for a in range(0, qm.shape[0], batch)],
                       torch.cuda.synchronize, repeats)
    flop = 2.0 * qm.shape[0] * rm.shape[0] * qm.shape[1]
    return {"wall_ms": wall, "gemm_ms": gemm, "gemm_tflops": flop / gemm * 1e-9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--skip", nargs="*", default=[])
    ap.add_argument("--topk", nargs="*", default=["rule"], choices=("rule", *TOPK_FORCED),
                    help="ksweep: the top-k variants timed (see the cases above)")
    ap.add_argument("--split-entries", nargs="*", type=int, default=[],
                    help="ksweep: values of knn_plan.SPLIT_ENTRIES timed (splits <= max(3, it // k))")
    args = ap.parse_args()
    rt = clpatch.Runtime(args.device)
    prof = clpatch.Runtime(args.device, profiling=True)
    size = 64 if args.quick else 256
    results: dict[str, Any] = {"device": rt.device.name, "driver": rt.device.driver_version,
                               "host": platform.node(), "cases": []}
    rows = results["cases"]

    def record(case: str, engine: str, numbers: dict[str, Any], **params: Any) -> None:
        rows.append({"case": case, "engine": engine, **params, **numbers})
        print(json.dumps(rows[-1]), flush=True)

    rgb = photo("astronaut", size)
    if "table4" not in args.skip:
        for method in ("offsets", "gemm", "direct"):
            if method in args.skip:
                continue
            record("table4", f"clpatch {method}", ours(rt, prof, rgb, None, args.repeats,
                   patch_size=11, k=12, method=method), size=size, p=11, k=12)
        if not args.no_peers:
            record("table4", "torch cdist+topk", torch_pair(rgb, None, 11, 12, args.repeats),
                   size=size, p=11, k=12)
    if "ksweep" not in args.skip:
        default_entries = knn_plan.SPLIT_ENTRIES
        for k in (1, 16, 128, 256):
            first = None
            for entries in args.split_entries or [default_entries]:
                knn_plan.SPLIT_ENTRIES = entries       # (fresh runtimes: fresh plans)
                srt, sprof = ((rt, prof) if entries == default_entries else
                              (clpatch.Runtime(args.device),
                               clpatch.Runtime(args.device, profiling=True)))
                for name in args.topk:
                    with forced_topk(name):
                        numbers = ours(srt, sprof, rgb, None, args.repeats, patch_size=11,
                                       k=k)
                        found = clpatch.knn(rgb, None, runtime=srt, patch_size=11, k=k)
                    if first is None:
                        first = found
                    numbers["same_matches"] = bool(
                        np.array_equal(found.positions, first.positions)
                        and np.array_equal(found.distances, first.distances))
                    record("ksweep", f"clpatch offsets, top-k {name}", numbers, size=size,
                           p=11, k=k, split_entries=entries)
            knn_plan.SPLIT_ENTRIES = default_entries
    if "vectors" not in args.skip:
        n = 2000 if args.quick else 100_000
        rng = np.random.default_rng(0)
        qv = rng.standard_normal((n, 128)).astype(np.float32)
        rv = rng.standard_normal((n, 128)).astype(np.float32)
        qd, rd = cla.to_device(rt.queue, qv), cla.to_device(rt.queue, rv)
        wall = median_wall(lambda: clpatch.knn_vectors(qd, rd, 16, runtime=rt),
                           rt.queue.finish, max(1, args.repeats // 2))
        plan = next(p for p in reversed(rt.plan_cache().values()) if hasattr(p, "config"))
        record("vectors", f"clpatch {plan.config.method}", {"wall_ms": wall}, n=n, d=128, k=16)
        if not args.no_peers:
            import torch
            record("vectors", "torch cdist+topk",
                   torch_vectors(torch.from_numpy(qv).cuda(), torch.from_numpy(rv).cuda(), 16,
                                 max(1, args.repeats // 2)), n=n, d=128, k=16)
    if "large" not in args.skip:
        side = 128 if args.quick else 1024
        left = photo("motorcycle_left", side)
        right = photo("motorcycle_right", side)
        record("large", "clpatch offsets", ours(rt, prof, left, right, 1, patch_size=7, k=16),
               size=side, p=7, k=16)
    if "chamfer" not in args.skip:
        labels = (photo("camera", size, grey=True) // 16).astype(np.uint8)
        record("chamfer", "clpatch direct", ours(rt, prof, labels, None, 1, patch_size=5,
               k=10, metric="chamfer"), size=size, p=5, k=10)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.markdown:
        lines = [f"# kNN on {results['device']} (driver {results['driver']})", "",
                 "| case | engine | parameters | wall ms | kernel ms | notes |",
                 "|---|---|---|---|---|---|"]
        for r in rows:
            params = ", ".join(f"{k}={r[k]}" for k in ("size", "n", "d", "p", "k",
                                                        "split_entries") if k in r)
            note = (f"GEMM alone {r['gemm_ms']:.1f} ms, {r['gemm_tflops']:.1f} TFLOP/s"
                    if "gemm_ms" in r else "")
            if r["case"] == "ksweep":
                note = (f"top-k: {r['topk']}, {r['splits']} split(s), matches "
                        f"{'equal' if r['same_matches'] else 'DIFFER'}")
            kern = f"{r['kernel_ms']:.2f}" if "kernel_ms" in r else ""
            lines.append(f"| {r['case']} | {r['engine']} | {params} | {r['wall_ms']:.2f} | "
                         f"{kern} | {note} |")
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
