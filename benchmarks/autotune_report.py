"""Merge `clpatch autotune --json` files into one markdown table of rule vs tuned choices.

    python benchmarks/autotune_report.py benchmarks/results/raw/autotune_h100_*.json \
        --title "..." > benchmarks/results/autotune_h100.md

A request tuned in several files keeps its last result (files are read in the order given).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def describe(config: dict | None) -> str:
    if not config:
        return "(rule)"
    knobs = ", ".join(f"{k} {v}" for k, v in config.items()
                      if k not in ("variant", "table") and v)
    return f"{config['variant']} ({config.get('table')}" + (f", {knobs})" if knobs else ")")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--title", default="Autotuning results")
    parser.add_argument("--note", default="")
    args = parser.parse_args()

    merged: dict[tuple, dict] = {}
    for path in args.files:
        for result in json.loads(path.read_text()):
            r = result["request"]
            key = (r["patch_size"], r["step"], r["n"], r["window"], r["channels"])
            merged[key] = result
    rows = [merged[key] for key in sorted(merged)]
    speedups = [row["speedup"] for row in rows]
    same = sum(1 for row in rows if row["tuned"] is None or row["tuned"] == row["rule"]
               or row["speedup"] <= 1.0)
    naive = [row for row in rows if row["tuned"] and row["tuned"]["variant"] == "naive"]
    naive_wide = sum(1 for row in naive if row["request"]["step"] >= row["request"]["patch_size"])

    print(f"# {args.title}\n")
    if args.note:
        print(args.note + "\n")
    print(f"{len(rows)} requests. Speed-up of the tuned choice over the rule's: median "
          f"{statistics.median(speedups):.2f}x, largest {max(speedups):.2f}x; "
          f"{sum(s >= 1.05 for s in speedups)} requests gain 5 % or more, {same} keep the rule's "
          f"choice (or gain nothing). The naive search wins {len(naive)} requests, {naive_wide} of "
          "them with step >= patch size (no overlap between neighbouring references for the "
          "structured variants to share).\n")
    print("| p | step | n | window | channels | rule choice | rule ms | tuned choice | tuned ms "
          "| speed-up | rejected |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        r = row["request"]
        tuned = "same" if row["tuned"] == row["rule"] else describe(row["tuned"])
        print(f"| {r['patch_size']} | {r['step']} | {r['n']} | {r['window']} | {r['channels']} "
              f"| {describe(row['rule'])} | {row['rule_ms']:.3f} | {tuned} | {row['tuned_ms']:.3f} "
              f"| {row['speedup']:.2f}x | {len(row['rejected'])} |")


if __name__ == "__main__":
    main()
