"""Nearest-neighbour fields: clpatch.nnf on the issue's pairs, its stages, its accuracy
against the exact field (clpatch.knn, k = 1) and its speed against that exhaustive search.

    python benchmarks/bench_nnf.py [--device SPEC] [--json FILE] [--markdown FILE]
                                   [--repeats 5] [--quick] [--skip CASE ...]

Cases:
- stereo: motorcycle_left/right resized to 800x1920 (H x W), RGB, p 8, candidates 8,
  PCA 10 and 20; the exact field (clpatch.knn, offsets engine, k = 1) on the same pair
  gives the accuracy ratio (mean first-neighbour distance / exact) and the speed-up;
- pan: two frames of a horizontal pan over a mosaic of the shared photographs (800x1920,
  RGB, the second frame 37 pixels further right and 5 lower), same parameters and checks;
- large: the stereo pair at 1600x3840, PCA 10 (time only: the exact field would take
  minutes);
- 4k: a 2160x3840 pair (the stereo pair resized), PCA 10: time and the device memory the
  run's buffers and its result arrays take (device_bytes; the inputs, 2 x 25 MB of uint8,
  not counted).

Timing: the inputs are uploaded once as device arrays (uint8 RGB); wall clock =
`time.perf_counter` around the call with the queue finished, median of --repeats after a
warm-up; stage times = the run's profiling events summed per stage (convert, sample,
project, tree, contain, exact, propagate, refine, rerank, expand, polish) on a profiling
runtime, median. The PCA fit runs on the host between the upload and the projection (from
the sampled patches, gathered on the device for device inputs): it is in the wall time,
not in the kernels.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl.array as cla
from bench_overhead import wall_ms
from PIL import Image

import clpatch
from clpatch.tune.timing import event_ms

IMAGES = Path(__file__).resolve().parents[1] / "tests" / "data"


def resized(name: str, rows: int, cols: int) -> np.ndarray:
    img = Image.open(IMAGES / f"{name}.png").convert("RGB")
    return np.asarray(img.resize((cols, rows), Image.BICUBIC))


def pan_pair(rows: int, cols: int, dy: int = 5, dx: int = 37) -> tuple[np.ndarray, np.ndarray]:
    """Two frames of a pan over a mosaic of the shared photographs."""
    names = ["astronaut", "brick", "camera", "coins", "moon", "text", "motorcycle_left"]
    tile = rows // 2 + 8
    across = -(-(cols + dx) // tile) + 1
    mosaic = np.zeros((2 * tile, across * tile, 3), np.uint8)
    for i in range(2):
        for j in range(across):
            name = names[(i * across + j) % len(names)]
            mosaic[i * tile:(i + 1) * tile, j * tile:(j + 1) * tile] = resized(name, tile, tile)
    return (np.ascontiguousarray(mosaic[:rows, :cols]),
            np.ascontiguousarray(mosaic[dy:dy + rows, dx:dx + cols]))


def stages(plan: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for stage, event in plan.last_events:
        out[stage] = out.get(stage, 0.0) + event_ms(event)
    return out


def ours(rt: Any, prof: Any, a: np.ndarray, b: np.ndarray, repeats: int,
         **kw: Any) -> tuple[dict[str, Any], Any]:
    da, db = cla.to_device(rt.queue, a), cla.to_device(rt.queue, b)
    wall = wall_ms(lambda: clpatch.nnf(da, db, runtime=rt, **kw), rt.queue.finish, repeats,
                   warmup=1)
    pa, pb = cla.to_device(prof.queue, a), cla.to_device(prof.queue, b)
    samples = []
    for _ in range(max(1, min(repeats, 3))):
        found = clpatch.nnf(pa, pb, runtime=prof, **kw)
        prof.queue.finish()
        plan = next(reversed(prof.plan_cache().values()))
        samples.append(stages(plan))
    split = {s: statistics.median(x[s] for x in samples) for s in samples[0]}
    out = found.positions.nbytes + found.distances.nbytes
    return ({"wall_ms": wall, "kernel_ms": sum(split.values()), "stages_ms": split,
             "device_bytes": plan.pool.held_bytes() + out}, found)


def exact(rt: Any, a: np.ndarray, b: np.ndarray, p: int) -> tuple[dict[str, Any], Any]:
    da, db = cla.to_device(rt.queue, a), cla.to_device(rt.queue, b)
    wall = wall_ms(lambda: clpatch.knn(da, db, patch_size=p, k=1, method="offsets",
                                       runtime=rt), rt.queue.finish, 1, warmup=0)
    found = clpatch.knn(da, db, patch_size=p, k=1, method="offsets", runtime=rt)
    return {"wall_ms": wall}, found


def mean_first(found: Any) -> float:
    d = found.distances.get() if isinstance(found.distances, cla.Array) else found.distances
    return float(np.mean(d[..., 0], dtype=np.float64))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    ap.add_argument("--skip", nargs="*", default=[])
    args = ap.parse_args()
    rt = clpatch.Runtime(args.device)
    prof = clpatch.Runtime(args.device, profiling=True)
    scale = 8 if args.quick else 1
    rows, cols = 800 // scale, 1920 // scale
    results: dict[str, Any] = {"device": rt.device.name, "driver": rt.device.driver_version,
                               "host": platform.node(), "cases": []}

    def record(case: str, numbers: dict[str, Any], **params: Any) -> None:
        results["cases"].append({"case": case, **params, **numbers})
        print(json.dumps(results["cases"][-1]), flush=True)

    pairs = {}
    if "stereo" not in args.skip:
        pairs["stereo"] = (resized("motorcycle_left", rows, cols),
                           resized("motorcycle_right", rows, cols))
    if "pan" not in args.skip:
        pairs["pan"] = pan_pair(rows, cols)
    for case, (a, b) in pairs.items():
        base, exact_field = exact(rt, a, b, 8)
        for dims in (10, 20):
            numbers, found = ours(rt, prof, a, b, args.repeats, patch_size=8, pca_dims=dims,
                                  candidates=8)
            numbers["accuracy"] = mean_first(found) / mean_first(exact_field)
            numbers["exact_wall_ms"] = base["wall_ms"]
            numbers["speedup_vs_exact"] = base["wall_ms"] / numbers["wall_ms"]
            record(case, numbers, size=list(a.shape), p=8, pca_dims=dims, candidates=8)
    if "large" not in args.skip:
        a, b = (resized("motorcycle_left", 2 * rows, 2 * cols),
                resized("motorcycle_right", 2 * rows, 2 * cols))
        numbers, _ = ours(rt, prof, a, b, args.repeats, patch_size=8, pca_dims=10,
                          candidates=8)
        record("large", numbers, size=list(a.shape), p=8, pca_dims=10, candidates=8)
    if "4k" not in args.skip:
        a, b = (resized("motorcycle_left", 2160 // scale, 3840 // scale),
                resized("motorcycle_right", 2160 // scale, 3840 // scale))
        numbers, _ = ours(rt, prof, a, b, max(1, args.repeats // 2), patch_size=8,
                          pca_dims=10, candidates=8)
        record("4k", numbers, size=list(a.shape), p=8, pca_dims=10, candidates=8)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if args.markdown:
        lines = [f"# clpatch.nnf on {results['device']} (driver {results['driver']})", "",
                 "| case | size | PCA | wall | kernels | stages (ms) | device memory | accuracy | "
                 "exact kNN | speed-up |", "|---|---|---|---|---|---|---|---|---|---|"]
        for row in results["cases"]:
            split = ", ".join(f"{k} {v:.2f}" for k, v in row["stages_ms"].items())
            lines.append(
                f"| {row['case']} | {row['size'][0]}x{row['size'][1]} | {row['pca_dims']} | "
                f"{row['wall_ms']:.1f} ms | {row['kernel_ms']:.1f} ms | {split} | "
                f"{row['device_bytes'] / 1e9:.2f} GB | "
                + (f"{row['accuracy']:.3f} | {row['exact_wall_ms'] / 1e3:.1f} s | "
                   f"{row['speedup_vs_exact']:.0f}x |" if "accuracy" in row else "– | – | – |"))
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
