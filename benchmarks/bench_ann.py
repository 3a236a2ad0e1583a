"""The clustering ANN (clpatch.ann_search) against clpatch's exact windowed search, and burst
denoising end to end.

    python benchmarks/bench_ann.py [--device SPEC] [--json FILE] [--markdown FILE]
                                   [--repeats 9] [--quick] [--groups 32 64 ...]
                                   [--query-groups 64 128 ...] [--skip CASE ...]

Cases:
- 512: camera.png (512x512, σ = 20 noise, no clipping), every 8x8 patch (step 1), k 16,
  tile 15; the exact windowed search on the same noisy array (step 1, n 16, window 15,
  the scheduler's variant); each work-group size of --groups is timed too, with each
  query work-group size of --query-groups (the same matches: the engine's results do not
  depend on them); the ANN's kernel time is also given split into clustering and query;
- 4608x3456: a mosaic of the shared photographs with σ = 20 noise, same parameters;
- burst: 16 frames of 1024x1368 (1.4 MP; a mosaic, shaken by up to 2 pixels and 1 degree,
  σ = 12, `clpatch.io.noise.synthetic_burst`): `clpatch.burst_denoise` (its defaults) end
  to end, and PSNR of its output, of the same method on the reference frame alone
  (`burst_denoise` of that one frame), of NL-means with the windowed search on that frame
  (the same patch, step and h; and with NL-means' own defaults) and of the noisy frame.

Timing: inputs are uploaded once as float32 device arrays; kernel time = the profiling
events of the call summed per stage (ANN: the one "ann" launch that clusters and queries;
the conversion of the input is listed apart), median of the repeats after a warm-up; wall
clock = `time.perf_counter` around the call with the queue finished, median after a warm-up.
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
from bench_nnf import stages
from bench_overhead import wall_ms
from PIL import Image

import clpatch
from clpatch.denoise.burst import burst_defaults
from clpatch.io.noise import psnr, synthetic_burst
from clpatch.match.ann.layout import QUERY_GROUP
from clpatch.match.ann.params import AnnConfig, check_ann_request
from clpatch.match.ann.plan import AnnPlan
from clpatch.tune.timing import photo_mosaic

IMAGES = Path(__file__).resolve().parents[1] / "tests" / "data"


def gray(name: str) -> np.ndarray:
    return np.asarray(Image.open(IMAGES / f"{name}.png").convert("L"), np.float32)


def latest_plan(runtime: Any, kind: type) -> Any:
    """A function giving the plan of type `kind` the runtime made last (looked up once,
    after the first call made it)."""
    found: list[Any] = []

    def plan() -> Any:
        if not found:
            found.append(next(p for p in reversed(runtime.plan_cache().values())
                              if isinstance(p, kind)))
        return found[0]
    return plan


def timed(call: Any, plan_of: Any, prof: Any, repeats: int) -> dict[str, float]:
    """Median per-stage kernel times of `call()` on the profiling runtime."""
    call()
    prof.queue.finish()
    samples = []
    for _ in range(repeats):
        call()
        prof.queue.finish()
        samples.append(stages(plan_of()))
    return {s: statistics.median(x.get(s, 0.0) for x in samples) for s in samples[0]}


def phases(plan: Any) -> dict[str, float]:
    """Kernel milliseconds of the last run of an `AnnPlan`, split into clustering and query
    (its "ann" events alternate: clustering, query, per launch)."""
    times = [(e.profile.end - e.profile.start) * 1e-6 for name, e in plan.last_events
             if name == "ann"]
    return {"cluster": sum(times[0::2]), "query": sum(times[1::2])}


def ann_case(rt: Any, prof: Any, img: np.ndarray, repeats: int, groups: list[int],
             query_groups: list[int] | None = None, **kw: Any) -> dict[str, Any]:
    d, dp = cla.to_device(rt.queue, img), cla.to_device(prof.queue, img)
    wall = wall_ms(lambda: clpatch.ann_search(d, runtime=rt, **kw), rt.queue.finish, repeats)
    plan = latest_plan(prof, AnnPlan)

    def call() -> None:
        clpatch.ann_search(dp, runtime=prof, **kw)

    stages = timed(call, plan, prof, repeats)
    split = []
    for _ in range(repeats):
        call()
        prof.queue.finish()
        split.append(phases(plan()))
    out: dict[str, Any] = {"wall_ms": wall, "stages_ms": stages, "ann_ms": stages["ann"],
                           "cluster_ms": statistics.median(x["cluster"] for x in split),
                           "query_ms": statistics.median(x["query"] for x in split),
                           "config": plan().config.describe()}
    req = check_ann_request(patch_size=kw["patch_size"], step=kw["step"], k=kw["k"],
                            tile=kw["tile"], neighbour_clusters=0, channels=1,
                            rows=img.shape[0], cols=img.shape[1])
    by_group = {}
    for g in groups:
        ballot = prof.profile.subgroup_ops == "ptx" and g % 32 == 0
        for use_ballot in sorted({ballot, False}):
            for qg in query_groups or [QUERY_GROUP]:
                config = AnnConfig(g, use_ballot, req.tile, 0, query_group=qg)
                p = AnnPlan(prof, 1, img.shape[0], img.shape[1], 1, req, config,
                            device_output=True)
                t = timed(lambda p=p: p.run(dp), lambda p=p: p, prof, repeats)
                name = f"{g}{' ballot' if use_ballot else ''}"
                if query_groups:
                    name += f" / query {qg}"
                by_group[name] = t["ann"]
    out["ann_ms_by_group"] = by_group
    return out


def search_case(rt: Any, prof: Any, img: np.ndarray, repeats: int) -> dict[str, Any]:
    kw = dict(patch_size=8, step=1, window=15, n=16)
    d, dp = cla.to_device(rt.queue, img), cla.to_device(prof.queue, img)
    wall = wall_ms(lambda: clpatch.search_patches(d, runtime=rt, **kw), rt.queue.finish,
                   repeats)
    plan = latest_plan(prof, clpatch.SearchPlan)
    stages = timed(lambda: clpatch.search_patches(dp, runtime=prof, **kw), plan, prof, repeats)
    return {"wall_ms": wall, "stages_ms": stages, "search_ms": stages["search"],
            "config": plan().config.describe()}


def burst_case(rt: Any, prof: Any, repeats: int, rows: int, cols: int,
               frames: int) -> dict[str, Any]:
    scene = photo_mosaic(rows, cols, sigma=0)
    noisy, _ = synthetic_burst(scene, frames, 12.0, seed=5)
    d = cla.to_device(rt.queue, noisy)
    kw: dict[str, Any] = {}
    wall = wall_ms(lambda: clpatch.burst_denoise(d, 12.0, runtime=rt, **kw), rt.queue.finish,
                   repeats)
    dp = cla.to_device(prof.queue, noisy)
    plan = latest_plan(prof, clpatch.NLMeansPlan)
    stages = timed(lambda: clpatch.burst_denoise(dp, 12.0, runtime=prof, **kw), plan, prof,
                   max(3, repeats // 3))
    out = clpatch.burst_denoise(noisy, 12.0, runtime=rt)
    alone = clpatch.burst_denoise(noisy[:1], 12.0, runtime=rt)
    defaults = burst_defaults("nlmeans")
    window = clpatch.nlmeans(noisy[0], 12.0, patch_size=defaults["patch_size"],
                             step=defaults["step"], h=defaults["h_factor"] * 12.0, runtime=rt)
    plain = clpatch.nlmeans(noisy[0], 12.0, runtime=rt)
    return {"wall_ms": wall, "stages_ms": stages, "kernel_ms": sum(stages.values()),
            "psnr_burst": psnr(out, scene, 255.0), "psnr_alone": psnr(alone, scene, 255.0),
            "psnr_alone_window": psnr(window, scene, 255.0),
            "psnr_alone_nlmeans": psnr(plain, scene, 255.0),
            "psnr_noisy": psnr(noisy[0], scene, 255.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    ap.add_argument("--groups", type=int, nargs="*", default=[32, 64, 128, 256])
    ap.add_argument("--query-groups", type=int, nargs="*", default=[],
                    help="query work-group sizes to time with each of --groups (default: "
                         "the engine's)")
    ap.add_argument("--skip", nargs="*", default=[], help="cases to skip: 512 large burst")
    args = ap.parse_args()
    rt = clpatch.Runtime(args.device)
    prof = clpatch.Runtime(args.device, profiling=True)
    scale = 8 if args.quick else 1
    results: dict[str, Any] = {"device": rt.device.name, "driver": rt.device.driver_version,
                               "host": platform.node(), "cases": []}

    def record(case: str, numbers: dict[str, Any], **params: Any) -> None:
        results["cases"].append({"case": case, **params, **numbers})
        print(json.dumps(results["cases"][-1]), flush=True)

    kw = dict(patch_size=8, k=16, tile=15, step=1)
    rng = np.random.default_rng(0)
    if "512" not in args.skip:
        img = gray("camera")[:512 // scale, :512 // scale]
        img = img + rng.normal(0, 20, img.shape).astype(np.float32)
        ann = ann_case(rt, prof, img, args.repeats, args.groups, args.query_groups, **kw)
        exact = search_case(rt, prof, img, args.repeats)
        ann["exact_search"] = exact
        ann["speedup_wall"] = exact["wall_ms"] / ann["wall_ms"]
        ann["speedup_kernel"] = exact["search_ms"] / ann["ann_ms"]
        record("512", ann, size=list(img.shape), **kw)
    if "large" not in args.skip:
        img = photo_mosaic(3456 // scale, 4608 // scale, sigma=20.0, seed=1)
        record("4608x3456", ann_case(rt, prof, img, max(3, args.repeats // 3), [], **kw),
               size=list(img.shape), **kw)
    if "burst" not in args.skip:
        rows, cols = 1024 // scale, 1368 // scale
        record("burst", burst_case(rt, prof, max(3, args.repeats // 3), rows, cols, 16),
               size=[16, rows, cols], sigma=12, patch_size=12, step=2, k=16, tile=15)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if args.markdown:
        lines = [f"# clpatch.ann_search on {results['device']} (driver {results['driver']})",
                 "", "| case | size | wall | kernels | notes |", "|---|---|---|---|---|"]
        for row in results["cases"]:
            split = ", ".join(f"{k} {v:.3f}" for k, v in row["stages_ms"].items())
            if "cluster_ms" in row:
                split += (f"; clustering {row['cluster_ms']:.3f}, query "
                          f"{row['query_ms']:.3f}")
            note = ""
            if "exact_search" in row:
                e = row["exact_search"]
                note = (f"exact windowed search (window 15): {e['wall_ms']:.3f} ms wall, "
                        f"{e['search_ms']:.3f} ms kernel ({e['config']}); ANN "
                        f"{row['speedup_wall']:.1f}x (wall), {row['speedup_kernel']:.1f}x "
                        f"(kernel); by work-group: " + ", ".join(
                            f"{g} {t:.3f} ms" for g, t in row["ann_ms_by_group"].items()))
            if "psnr_burst" in row:
                note = (f"PSNR burst {row['psnr_burst']:.2f} dB, the same method on the frame "
                        f"alone {row['psnr_alone']:.2f} dB, NL-means (windowed search, the "
                        f"burst's parameters) on the frame {row['psnr_alone_window']:.2f} dB, "
                        f"NL-means (its defaults) on the frame "
                        f"{row.get('psnr_alone_nlmeans', float('nan')):.2f} dB, noisy "
                        f"{row['psnr_noisy']:.2f} dB")
            kernels = row.get("ann_ms", row.get("kernel_ms", 0.0))
            lines.append(f"| {row['case']} | {'x'.join(map(str, row['size']))} | "
                         f"{row['wall_ms']:.3f} ms | {kernels:.3f} ms ({split}) | {note} |")
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
