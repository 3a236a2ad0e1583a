"""Speed of the kernels the vendor-portability changes touched, for a before/after pair.

    python benchmarks/bench_vendor_fixes.py [--device SPEC] [--json FILE] [--repeats 9]
                                            [--label NAME] [--quick] [--only CALL ...]
                                            [--table ordered|unordered]

Issue 38 changed five kernels so that Intel's OpenCL compiler builds and runs them right:
the NL-means columns averaging (no exp() value kept in registers across its barrier), the
BM3D collaborative filter (the reference's place among the matches found with min()), the
ANN query (the local id shifted as an int), the windowed search (each squared difference
added by an explicit fma()) and the unordered neighbour table (sorted at its end by a merge
sort network; `--table unordered` makes a device whose profile orders it use it). This
script times the calls that run them, with their default parameters, on device arrays: the
clustering ANN, the windowed search (default, and step 1), BM3D (fast and reference
presets) and NL-means, on a 512x512 and a 4608x3456 photo mosaic
(sigma 20, 0-255 units). It uses only
the public API, so the same script runs on an older checkout (PYTHONPATH pointing at it):
run it on both trees in one session on the same GPU, alternating, to compare.

Per case: the kernel time (the sum of the OpenCL profiling events of the call's plan,
median of the repeats after a warm-up) and the wall clock of a synchronised call on a device
array (median of the repeats after a warm-up), and a checksum of the output (the two trees
must give the same bits).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl.array as cla

import clpatch
from clpatch.tune.timing import photo_mosaic

SIGMA = 20.0


def _plan_stage_ms(runtime: Any) -> dict[str, float]:
    """Kernel milliseconds of the last run of the plan the runtime used last, per stage."""
    plan = next(reversed(runtime.plan_cache().values()))
    stages: dict[str, float] = {}
    for stage, event in plan.last_events:
        stages[stage] = stages.get(stage, 0.0) + (event.profile.end - event.profile.start) * 1e-6
    return stages


def _host(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a.get() if isinstance(a, cla.Array) else a)


def _checksum(out: Any) -> str:
    parts = [out.positions, out.distances] if hasattr(out, "positions") else [out]
    digest = hashlib.sha256()
    for part in parts:
        digest.update(_host(part).tobytes())
    return digest.hexdigest()[:16]


def case(name: str, call: Any, rt: Any, prof: Any, image: np.ndarray,
         repeats: int) -> dict[str, Any]:
    d, dp = cla.to_device(rt.queue, image), cla.to_device(prof.queue, image)
    out = call(d, rt)
    rt.queue.finish()
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = call(d, rt)
        rt.queue.finish()
        walls.append((time.perf_counter() - start) * 1e3)
    call(dp, prof)
    prof.queue.finish()
    samples = []
    for _ in range(repeats):
        call(dp, prof)
        prof.queue.finish()
        samples.append(_plan_stage_ms(prof))
    stages = {s: statistics.median(x.get(s, 0.0) for x in samples) for s in samples[0]}
    result = dict(case=name, shape=list(image.shape), wall_ms=statistics.median(walls),
                  kernel_ms=statistics.median(sum(x.values()) for x in samples),
                  stages_ms=stages, checksum=_checksum(out))
    split = ", ".join(f"{s} {ms:.3f}" for s, ms in stages.items())
    print(f"{name:<28} {result['kernel_ms']:9.3f} ms kernels {result['wall_ms']:9.3f} ms wall"
          f"  {result['checksum']}  ({split})", flush=True)
    return result


def _revision(checkout: Path) -> str:
    """The git revision of the checkout clpatch was imported from ("?" when it is not the
    top of a git work tree: a copy of an older tree, an installed wheel)."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, cwd=checkout).stdout.strip()
        if not top or Path(top).resolve() != checkout:
            return "?"
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=checkout).stdout.strip()
    except OSError:
        return "?"


def calls(peak: float) -> dict[str, Any]:
    """The timed calls; `peak` (the image's largest |value|) is given, so no call waits for
    the host to read it."""
    return {
        "ann": lambda x, rt: clpatch.ann_search(x, runtime=rt),
        "search": lambda x, rt: clpatch.search_patches(x, runtime=rt),
        "search step 1": lambda x, rt: clpatch.search_patches(x, 8, 1, 21, 16, runtime=rt),
        "bm3d fast": lambda x, rt: clpatch.bm3d(x, SIGMA, runtime=rt, peak=peak),
        "bm3d reference": lambda x, rt: clpatch.bm3d(x, SIGMA, preset="reference", runtime=rt,
                                                     peak=peak),
        "nlmeans": lambda x, rt: clpatch.nlmeans(x, SIGMA, runtime=rt, peak=peak),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--label", default="")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="small sizes only (a smoke test)")
    ap.add_argument("--only", nargs="*", default=None,
                    help="the calls to time (default: all): ann, 'bm3d fast', ...")
    ap.add_argument("--table", choices=("ordered", "unordered"),
                    help="force the neighbour table kind (default: the device profile's)")
    args = ap.parse_args()
    overrides = {"neighbour_table": args.table} if args.table else None
    rt = clpatch.Runtime(args.device, profile_overrides=overrides)
    prof = clpatch.Runtime(rt.device, profiling=True, profile_overrides=overrides)
    sizes = [(96, 112)] if args.quick else [(512, 512), (3456, 4608)]
    revision = _revision(Path(clpatch.__file__).resolve().parent.parent)
    print(f"clpatch {clpatch.__file__} ({revision}) on {rt.device.name.strip()}, "
          f"neighbour table {rt.profile.neighbour_table}", flush=True)
    results = []
    for rows, cols in sizes:
        image = photo_mosaic(rows, cols, sigma=SIGMA)
        for name, call in calls(float(np.abs(image).max())).items():
            if args.only is not None and name not in args.only:
                continue
            results.append(case(f"{name} {rows}x{cols}", call, rt, prof, image, args.repeats))
    if args.json:
        args.json.write_text(json.dumps(dict(label=args.label, revision=revision,
                                             table=rt.profile.neighbour_table,
                                             device=rt.device.name.strip(),
                                             driver=rt.device.driver_version.strip(),
                                             results=results), indent=1))


if __name__ == "__main__":
    main()
