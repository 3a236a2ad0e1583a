"""The clustering ANN's work-group size by image size: the evidence for `ann_layout`'s rule.

    python benchmarks/bench_ann_groups.py [--device SPEC] [--groups 128 192]
        [--sizes 502 512 ...] [--repeats 21] [--json FILE]

For each square size (a crop of a mosaic of the shared photographs with σ = 20 noise,
rescaled sizes beyond it), every 8x8 patch (step 1), k 16, tile 15: the kernel time of the
clustering and of the query (profiling events, median of the repeats after a warm-up) at
each clustering work-group size of --groups (warp ballots where the profile has them,
the engine's query work-group), and the image's tiles: how many, and the patches of its
largest tile against an inner tile's (the last tile of each axis absorbs the remainder).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import pyopencl.array as cla
from bench_ann import phases

import clpatch
from clpatch.match.ann.layout import QUERY_GROUP
from clpatch.match.ann.params import AnnConfig, check_ann_request, tile_edges
from clpatch.match.ann.plan import AnnPlan
from clpatch.tune.timing import photo_mosaic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device")
    ap.add_argument("--groups", type=int, nargs="*", default=[128, 192])
    ap.add_argument("--sizes", type=int, nargs="*",
                    default=[352, 502, 512, 600, 768, 1000, 1024, 1280])
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--json")
    args = ap.parse_args()
    prof = clpatch.Runtime(args.device, profiling=True)
    ballot = prof.profile.subgroup_ops == "ptx"
    rows = []
    for size in args.sizes:
        img = photo_mosaic(size, size, sigma=20.0, seed=3)
        d = cla.to_device(prof.queue, img)
        req = check_ann_request(patch_size=8, step=1, k=16, tile=15, neighbour_clusters=0,
                                channels=1, rows=size, cols=size)
        sides = np.diff(tile_edges(size - 7, 15))       # the same runs on both axes
        row = {"size": size, "tiles": len(sides) ** 2, "largest_patches": int(sides.max()) ** 2,
               "inner_patches": int(sides[0]) ** 2, "ms": {}}
        for group in args.groups:
            config = AnnConfig(group, ballot and group % 32 == 0, 15, 0, query_group=QUERY_GROUP)
            plan = AnnPlan(prof, 1, size, size, 1, req, config, device_output=True)
            plan.run(d)
            prof.queue.finish()
            split = []
            for _ in range(args.repeats):
                plan.run(d)
                prof.queue.finish()
                split.append(phases(plan))
            cluster = statistics.median(s["cluster"] for s in split)
            query = statistics.median(s["query"] for s in split)
            row["ms"][str(group)] = {"cluster": cluster, "query": query,
                                     "total": statistics.median(s["cluster"] + s["query"]
                                                                for s in split)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": prof.device.name, "rows": rows},
                                              indent=1) + "\n")


if __name__ == "__main__":
    main()
