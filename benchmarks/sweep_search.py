"""Time many search configurations on one request (kernel time, profiling events).

    python benchmarks/sweep_search.py --size 3456x4608 --request 8,4,16,21 \
        --configs 'square:batch=1,4,8;table=ordered,unordered' 'column:group=64,128' [--json FILE]

Each --configs item is `variant:knob=v1,v2;knob=...`; the cartesian product of the knob
values is timed (knobs: table, group, rows, tile, batch). The image is the photo mosaic
of clpatch._bench with σ = 20 noise; timing as in bench_search.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pyopencl.array as cla
from PIL import Image

import clpatch
from clpatch.match.window.config import SearchRequest, choose_search
from clpatch.match.window.plan import SearchPlan
from clpatch.tune.timing import photo_mosaic, time_events

IMAGES = Path(__file__).resolve().parent.parent / "tests" / "data"


def parse_configs(items: list[str]) -> list[clpatch.SearchConfig]:
    out = []
    for item in items:
        variant, _, knobs = item.partition(":")
        axes = []
        for part in filter(None, knobs.split(";")):
            name, _, values = part.partition("=")
            axes.append([(name, v if name == "table" else int(v)) for v in values.split(",")])
        for combo in itertools.product(*axes) if axes else [()]:
            out.append(clpatch.SearchConfig(variant, **dict(combo)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--size", default="3456x4608", help="ROWSxCOLS")
    parser.add_argument("--request", action="append", required=True, help="p,step,n,window")
    parser.add_argument("--configs", nargs="+", required=True)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)

    rt = clpatch.Runtime(args.device, profiling=True)
    rows, cols = (int(v) for v in args.size.lower().split("x"))
    photos = [np.asarray(Image.open(IMAGES / f"{n}.png").convert("L"), np.float32)
              for n in ("camera", "brick", "moon", "coins", "text")]
    images = [cla.to_device(rt.queue, photo_mosaic(rows, cols, seed=k, images=photos))
              for k in range(2)]
    results = []
    for text in args.request:
        p, s, n, w = (int(v) for v in text.split(","))
        request = SearchRequest(p, s, n, w)
        for config in parse_configs(args.configs):
            try:
                full = choose_search(request, rt.profile, config)
                plan = SearchPlan(rt, 1, rows, cols, 1, request, full, device_output=True)
            except (ValueError, clpatch.ClpatchError) as exc:
                print(f"p{p} s{s} n{n} w{w} {config}: skipped ({exc})", flush=True)
                continue

            def run(i, plan=plan):
                plan.run(images[i % len(images)])
                return plan.last_events

            timing = time_events(run, repeats=args.repeats)
            ms = timing.median("search")
            q1, q3 = timing.spread("search")
            results.append({"label": args.label, "size": [rows, cols], "request": [p, s, n, w],
                            "config": plan.config.describe(), "search_ms_median": ms,
                            "search_ms_q1": q1, "search_ms_q3": q3})
            print(f"{args.label} p{p} s{s} n{n} w{w}  {plan.config.describe():58s} {ms:9.3f} ms "
                  f"(q1 {q1:.3f}, q3 {q3:.3f})", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": rt.device.name.strip(), "results": results},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
