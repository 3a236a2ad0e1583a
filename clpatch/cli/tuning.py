"""The tuning commands: `clpatch explain` (which kernel configuration runs, and why),
`clpatch autotune` (time them and keep the fastest) and `clpatch bench` (kernel and wall
times).
Options, the tuning file and the device are checked before any work (refused: exit 2); a
timing run failing is exit 1 (see `common`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..core.registry import operations, variant_names
from ..core.runtime import Runtime
from ..match.matcher import searches
from ..match.window.config import config_to_json
from ..tune.autotune import (
    FULL_GRID,
    QUICK_REQUESTS,
    autotune,
    default_jobs,
    grid_requests,
    summary_table,
)
from ..tune.bench import DEFAULT_FRAMES, METHODS, format_table, parse_size, run_bench
from ..tune.explain import explain as explain_choice
from ..tune.explain import takes_search
from ..tune.knn_tune import tune_knn
from .common import (
    ARGUMENT_ERRORS,
    UsageError,
    add_device_option,
    open_runtime,
    positive_int,
    usage_checks,
)
from .outputs import check_report, write_report


def _csv_ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _size(text: str) -> tuple[int, int]:
    """argparse type of --size: 'ROWSxCOLS', at least 16x16 (`parse_size`)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def results_json(results: list, jobs: int) -> str:
    """The `--json` file: every request's rule and tuned choices with every timing, and the
    request's wall time (with the part spent building programs)."""
    return json.dumps([{
        "request": vars(r.request), "rule": config_to_json(r.rule), "rule_ms": r.rule_time_ms,
        "tuned": config_to_json(r.chosen), "tuned_ms": r.time_ms, "speedup": r.speedup,
        "timings": [[config_to_json(c), ms] for c, ms in r.timings],
        "rejected": [[config_to_json(c), why] for c, why in r.rejected],
        "seconds": round(r.seconds, 2), "build_seconds": round(r.build_seconds, 2),
        "jobs": jobs,
    } for r in results], indent=1)


def cmd_explain(args: argparse.Namespace) -> int:
    if args.search != "window" and not takes_search(args.operation):
        users = [name for name in operations() if takes_search(name)]
        raise UsageError(f"--search {args.search} does not apply to {args.operation} (only "
                         f"to {', '.join(users)})")
    runtime = open_runtime(args.device)
    if args.tuning:
        with usage_checks():
            runtime.use_tuning(args.tuning)
    with usage_checks(ARGUMENT_ERRORS):  # explaining is checking: its refusals are usage
        text = explain_choice(args.operation, patch_size=args.patch_size, step=args.step,
                              k=args.k, window=args.window, channels=args.channels,
                              metric=args.metric, video=args.video, variant=args.variant,
                              preset=args.preset, pca_dims=args.pca_dims,
                              candidates=args.candidates, leaf_size=args.leaf_size,
                              search=args.search, runtime=runtime)
    print(text)
    return 0


def cmd_autotune(args: argparse.Namespace) -> int:
    check_report(args.json)
    runtime = open_runtime(args.device, profiling=True)
    with usage_checks():
        cache = runtime.use_tuning(args.output) if args.output else runtime.tuning
    if args.knn:
        return _autotune_knn(args, runtime, cache)
    if args.quick and not any((args.patch_sizes, args.steps, args.ns, args.windows, args.channels)):
        requests = list(QUICK_REQUESTS)
    else:
        requests = grid_requests(args.patch_sizes or FULL_GRID["patch_size"],
                                 args.steps or FULL_GRID["step"], args.ns or FULL_GRID["n"],
                                 args.windows or FULL_GRID["window"],
                                 args.channels or FULL_GRID["channels"])
    size = args.size
    jobs = args.jobs if args.jobs is not None else default_jobs()
    print(f"tuning {len(requests)} request(s) on {runtime.device.name.strip()}"
          + (" (quick)" if args.quick else "")
          + (f", building {jobs} programs at a time" if jobs > 1 else ""), file=sys.stderr)
    done: list = []

    def save(result) -> None:  # after every request, so an interrupted run keeps its work
        done.append(result)
        cache.save()
        if args.json:
            write_report(args.json, results_json(done, jobs))

    results = autotune(runtime, requests, quick=args.quick, size=size, repeats=args.repeats,
                       cache=cache, verbose=args.verbose, on_result=save, jobs=jobs)
    print(summary_table(results))
    print(f"\ntuning cache written to {cache.path}")
    return 0


def _autotune_knn(args: argparse.Namespace, runtime: Runtime, cache: Any) -> int:
    """`clpatch autotune --knn`: the exhaustive kNN's engines and tiles, per request."""
    if args.quick:
        requests = [("l2", p, c, 1) for p in (args.patch_sizes or [8])
                    for c in (args.channels or [1])]
    else:
        requests = [(m, p, c, 1) for m in ("l2", "l1")
                    for p in (args.patch_sizes or [5, 7, 8, 11]) for c in (args.channels or [1, 3])]
    cpu = runtime.profile.family == "cpu"
    size = args.size or ((64, 64) if cpu else (256, 256))
    print(f"tuning {len(requests)} kNN request(s) on {runtime.device.name.strip()} with "
          f"{size[0]}x{size[1]} self-searches", file=sys.stderr)
    report = (lambda line: print(line, file=sys.stderr)) if args.verbose else None
    summaries = tune_knn(runtime, requests, size=size, repeats=args.repeats or 3,
                         quick=args.quick, progress=report)
    cache.save()
    for item in summaries:
        metric, p, c, _ = item["request"]
        print(f"knn {metric} p{p} c{c}: {item['config']['method']} {item['time_ms']:.3f} ms "
              f"(rule: {item['rule_config']['method']} {item['rule_time_ms']:.3f} ms)")
    if args.json:
        write_report(args.json, json.dumps(summaries, indent=1))
    print(f"\ntuning cache written to {cache.path}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    methods = list(METHODS) if args.method == "all" else [args.method]
    if args.frames is not None and "vbm3d" not in methods:
        raise UsageError(f"--frames applies to vbm3d only (--method vbm3d or all), not to "
                         f"--method {args.method}")
    check_report(args.json)
    runtime = open_runtime(args.device, profiling=True)
    sizes = args.size or [(512, 512)]
    frames = args.frames if args.frames is not None else DEFAULT_FRAMES
    rows = run_bench(runtime, methods, sizes, repeats=args.repeats, frames=frames)
    print(f"device: {runtime.device.name.strip()} ({runtime.device.platform.name.strip()})")
    print(format_table(rows))
    if args.json:
        write_report(args.json, json.dumps({"device": runtime.device.name.strip(),
                                            "results": rows}, indent=1))
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add `explain`, `autotune` and `bench` to the command line's sub-commands."""
    explain = commands.add_parser(
        "explain", help="say which kernel configuration a call would run, and why",
        description="Which configuration runs for these parameters on the device, and whether "
                    "it was forced, tuned (clpatch autotune) or chosen by rule (Davy-Ehret 4.5).")
    explain.add_argument("operation", choices=operations(),
                         help="what to explain: a search engine (search, knn, nnf) or a "
                              "filter (nlmeans, bm3d, vbm3d)")
    explain.add_argument("--patch-size", "-p", type=int, default=None,
                         help="default 8")
    explain.add_argument("--step", "-s", type=int, default=None,
                         help="default 4 (bm3d: the preset's)")
    explain.add_argument("-k", "--k", "-n", "--n", type=int, default=None, dest="k",
                         help="matches per reference: default 16 (bm3d: the preset's); -n is "
                              "its former name")
    explain.add_argument("--window", "-w", type=int, default=None,
                         help="default 21 (bm3d: the preset's; vbm3d: its window in the "
                              "reference's frame, 7)")
    explain.add_argument("--preset", choices=("fast", "reference"), default="fast",
                         help="bm3d only: the parameter set (default fast)")
    explain.add_argument("--channels", "-c", type=int, default=1,
                         help="channels of the input (default 1; 3 for colour)")
    explain.add_argument("--pca-dims", type=int, default=None,
                         help="nnf only: dimensions of the reduced space (default 10)")
    explain.add_argument("--candidates", type=int, default=None,
                         help="nnf only: neighbours kept per patch before re-ranking (default 8)")
    explain.add_argument("--leaf-size", type=int, default=None,
                         help="nnf only: points per leaf of the k-d tree (default 32, or the "
                              "smallest power of two >= --candidates)")
    explain.add_argument("--metric", choices=("l2", "l1", "chamfer", "chamfer_sym"),
                         default="l2", help="patch distance (default l2; chamfer and "
                                            "chamfer_sym: knn only, on label images)")
    explain.add_argument("--video", action="store_true", help="a video search (temporal window)")
    explain.add_argument("--search", choices=searches(), default="window",
                         help="nlmeans and bm3d: the search engine (default window, the exact "
                              "windowed search; ann: the clustering ANN, to which --window and "
                              "--variant do not apply)")
    explain.add_argument("--variant", choices=variant_names(), default=None,
                         help="force a variant (then the answer is 'forced'); vbm3d's are "
                              "naive, window and patch")
    explain.add_argument("--tuning", metavar="FILE", help="read this tuning file instead of "
                         "$CLPATCH_TUNING or the user cache")
    add_device_option(explain)
    explain.set_defaults(func=cmd_explain)

    tune = commands.add_parser(
        "autotune", help="time the kernel configurations on this device and keep the fastest",
        description="Time every applicable search configuration for a grid of common requests "
                    "(checked against the naive search first) and write the device's tuning "
                    "cache. --quick tunes one request: search_patches' and nlmeans' defaults.")
    tune.add_argument("--quick", action="store_true",
                      help="one request, the defaults of search_patches and nlmeans (patch 8, "
                           "step 4, k 16, window 21, one channel), first stage only")
    tune.add_argument("--output", "-o", metavar="FILE",
                      help="tuning file to write (default: $CLPATCH_TUNING or the user cache)")
    tune.add_argument("--size", metavar="ROWSxCOLS", type=_size, help="test image size (default: 2048x2048 "
                      "on GPUs, 512x512 on CPUs, 256x256 with --quick on CPUs)")
    tune.add_argument("--repeats", type=int, default=None, help="timed runs per configuration")
    tune.add_argument("--patch-sizes", type=_csv_ints, help="e.g. 4,5,7,8,16")
    tune.add_argument("--steps", type=_csv_ints, help="e.g. 1,2,3,4,5,6")
    tune.add_argument("--ns", type=_csv_ints, help="e.g. 8,16,32")
    tune.add_argument("--windows", type=_csv_ints, help="e.g. 21,39")
    tune.add_argument("--channels", type=_csv_ints, help="e.g. 1,3")
    tune.add_argument("--knn", action="store_true",
                      help="tune the exhaustive kNN's engines and tiles instead of the search "
                           "(l2 and l1, patch sizes 5, 7, 8, 11 and 1 and 3 channels unless "
                           "--patch-sizes/--channels say otherwise; --quick: l2, patch 8, the "
                           "rule's configuration against one of each other engine)")
    tune.add_argument("--json", metavar="FILE", help="also write every timing to this JSON file")
    tune.add_argument("--jobs", "-j", type=positive_int, default=None, metavar="N",
                      help="programs built at once (in worker processes), before any of a "
                           "stage's configurations is timed (default: the number of CPUs, at "
                           "most 8; 1 builds each just before timing it)")
    add_device_option(tune)
    tune.set_defaults(func=cmd_autotune)

    bench = commands.add_parser(
        "bench", help="median kernel and wall times per method and stage on this device",
        description="Kernel times (OpenCL profiling events, median after warm-up) of each "
                    "method's default configuration, split by stage, and the median wall "
                    "clock of a synchronised call, on noisy photographic images (sigma 20) "
                    "kept on the device. search, nlmeans: patch 8, step 4, k 16, window 21; "
                    "bm3d: the fast preset; vbm3d: its defaults on a video of --frames "
                    "frames panning 1 row and 2 columns a frame (times per video); knn: "
                    "exhaustive self-search, patch 8, step 4, k 16, l2 (its time grows with "
                    "the square of the pixel count); nnf: its defaults, from an image to the "
                    "same scene moved by 5 rows and 11 columns.")
    bench.add_argument("--method", choices=(*METHODS, "all"), default="all",
                       help=f"what to time: {', '.join(METHODS)} or all (default all)")
    bench.add_argument("--size", action="append", metavar="ROWSxCOLS", type=_size,
                       help="image (vbm3d: frame) size, repeatable (default 512x512)")
    bench.add_argument("--frames", type=positive_int, default=None, metavar="N",
                       help=f"vbm3d only: frames of the video (default {DEFAULT_FRAMES})")
    bench.add_argument("--repeats", type=positive_int, default=15,
                       help="timed runs after the warm-up; the median is reported (default 15)")
    bench.add_argument("--json", metavar="FILE", help="write the results to this JSON file")
    add_device_option(bench)
    bench.set_defaults(func=cmd_bench)
