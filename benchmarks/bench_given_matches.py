"""Issue 39's additions on the GPU: filters on given matches (`matches=`) against their own
search, and the NNF on an `a` cut into bands against one pass.

    python benchmarks/bench_given_matches.py [--device SPEC] [--repeats 7] [--json FILE]

Cases (device arrays in and out, σ 20, a photo mosaic of the shared images):
- nlmeans / bm3d (fast) at 1920x1080: the one-shot call searching, and the same call on
  the matches of that search given as `matches=` (device Matches, made once): wall clock
  per call (synchronised, median) and the sum of the plan's kernel events (profiling
  runtime, median); the outputs compared bit for bit (NL-means; BM3D's stage 1 only, as
  stage 2 searches the basic estimate) so the figures are of the same work.
- nnf at 2160x3840 RGB (PCA 10, k 1): one pass against the runtime's `memory_limit` set
  so that a is searched in bands (reported: bands, wall clock, the field's identity).
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl.array as cla
from bench_overhead import kernel_ms, rgb_mosaic, same_matches, wall_ms

import clpatch
from clpatch.match.nnf.plan import NnfPlan
from clpatch.tune.timing import photo_mosaic

SIGMA = 20.0


def filter_case(name: str, rt: clpatch.Runtime, prof: clpatch.Runtime, repeats: int
                ) -> dict[str, Any]:
    noisy = photo_mosaic(1080, 1920, sigma=SIGMA, seed=1)
    row: dict[str, Any] = {"method": name, "shape": [1080, 1920]}
    if name == "nlmeans":
        search = dict(patch_size=8, step=4, window=21, k=16)

        def own(x, r):
            return clpatch.nlmeans(x, SIGMA, runtime=r)

        def given(x, m, r):
            return clpatch.nlmeans(x, SIGMA, matches=m, runtime=r)
    else:
        search = dict(patch_size=8, step=6, window=35, k=16)      # the fast preset's stage 1

        def own(x, r):
            return clpatch.bm3d(x, SIGMA, data_range=255.0, runtime=r)

        def given(x, m, r):
            return clpatch.bm3d(x, SIGMA, data_range=255.0, matches=(m, None), runtime=r)
    x = cla.to_device(rt.queue, noisy)
    m = clpatch.search_patches(x, runtime=rt, **search)
    row["own_wall_ms"] = wall_ms(lambda: own(x, rt), rt.queue.finish, repeats)
    row["given_wall_ms"] = wall_ms(lambda: given(x, m, rt), rt.queue.finish, repeats)
    row["identical"] = bool(np.array_equal(own(x, rt).get(), given(x, m, rt).get()))
    xp = cla.to_device(prof.queue, noisy)
    mp = clpatch.search_patches(xp, runtime=prof, **search)
    row["own_kernel_ms"] = kernel_ms(prof, lambda: own(xp, prof), repeats)[0]
    row["given_kernel_ms"] = kernel_ms(prof, lambda: given(xp, mp, prof), repeats)[0]
    return row


def nnf_case(rt: clpatch.Runtime, repeats: int) -> dict[str, Any]:
    shape = (2160, 3840, 3)
    a, b = (rgb_mosaic(*shape[:2], seed=s) for s in (2, 5))
    kw = dict(patch_size=8, k=1, pca_dims=10)
    whole = NnfPlan(rt, shape[0], shape[1], shape[0], shape[1], 3, patch_size=8, k=1,
                    pca_dims=10, candidates=8, leaf_size=32, seed=0, device_output=True)
    limit = 1 << 30
    banded = NnfPlan(rt, shape[0], shape[1], shape[0], shape[1], 3, patch_size=8, k=1,
                     pca_dims=10, candidates=8, leaf_size=32, seed=0, device_output=True,
                     tile_bytes=limit)
    limited = clpatch.Runtime(rt.device, memory_limit=limit)
    xa, xb = cla.to_device(rt.queue, a), cla.to_device(rt.queue, b)
    ya, yb = cla.to_device(limited.queue, a), cla.to_device(limited.queue, b)
    one = clpatch.nnf(xa, xb, runtime=rt, **kw)
    cut = clpatch.nnf(ya, yb, runtime=limited, **kw)
    return {"method": "nnf", "shape": list(shape), "memory_limit": limit,
            "bands": len(banded.bands), "one_pass_bands": len(whole.bands),
            "one_pass_wall_ms": wall_ms(lambda: clpatch.nnf(xa, xb, runtime=rt, **kw),
                                        rt.queue.finish, repeats),
            "banded_wall_ms": wall_ms(lambda: clpatch.nnf(ya, yb, runtime=limited, **kw),
                                      limited.queue.finish, repeats),
            "identical": same_matches(one, cut)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rt = clpatch.Runtime(args.device)
    prof = clpatch.Runtime(args.device, profiling=True)
    rows = [filter_case("nlmeans", rt, prof, args.repeats),
            filter_case("bm3d", rt, prof, args.repeats), nnf_case(rt, 3)]
    for row in rows:
        print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps({"device": rt.device.name.strip(),
                                         "host": platform.node(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
