"""Quality of the clustering ANN (clpatch.ann_search) on the shared grayscale images at σ = 20:
its matches against the exact in-tile kNN, and the filters on its matches against the
filters on the exact windowed search.

    python benchmarks/quality_ann.py [--images DIR] [--sigma 20] [--seed 0] [--device SPEC]
                                     [--json FILE] [--markdown FILE] [--only NAME ...]
                                     [--filters-only] [--matches-json FILE]

Every image of the folder (default `../shared/data/images`, else `tests/data`; colour ones
reduced to 8-bit luminance round(0.299 R + 0.587 G + 0.114 B)) gets σ = 20 Gaussian noise
from `numpy.random.default_rng(seed)` (a fresh generator per image), not clipped.

Matches (Tsai's Table 5 measures): every 8x8 patch (step 1), k 16, tile 15, against the
exact k nearest patches of the same tile (the NumPy brute force of tests/reference/ann.py):
recall = the share of the exact neighbours the ANN returns; ratio = D_ann / D_knn, the sum
of the ANN's distances over the sum of the exact ones; for 0, 1 and 2 neighbour clusters.

Filters (Tsai's Table 6): PSNR (peak 255, outputs clipped to 0-255) of `clpatch.bm3d`
(fast preset) and `clpatch.nlmeans` (defaults) with search="window" and search="ann" (whose
matcher takes tiles of FILTER_TILE and searches FILTER_NEIGHBOUR_CLUSTERS sibling clusters
besides a patch's own, in FILTER_TILINGS tilings; see clpatch/match/ann/search.py).
`--filters-only` skips the matches' measures (the exact in-tile brute force is slow on a
CPU); `--matches-json FILE` takes them from an earlier run's JSON instead (they depend on
neither the device nor the filters).

The ANN's matches are the same on every OpenCL device (its arithmetic is fixed: see
clpatch/match/ann/params.py), so this runs anywhere (PoCL included).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

import clpatch
from clpatch.match.ann.search import FILTER_NEIGHBOUR_CLUSTERS, FILTER_TILE, FILTER_TILINGS

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.reference import ann as oracle  # noqa: E402  (the brute force, no clpatch inside)


def images(folder: Path, only: list[str]) -> list[tuple[str, np.ndarray]]:
    out = []
    for path in sorted(folder.glob("*.png")):
        if only and path.stem not in only:
            continue
        rgb = np.asarray(Image.open(path).convert("RGB"), np.float64)
        gray = np.round(rgb @ np.array([0.299, 0.587, 0.114]))
        out.append((path.stem, gray.astype(np.float32)))
    return out


def psnr(a: Any, clean: np.ndarray) -> float:
    a = np.clip(np.asarray(a, np.float64), 0, 255)
    return float(10 * np.log10(255.0 ** 2 / np.mean((a - clean) ** 2)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ROOT.parent / "shared" / "data" / "images"
    ap.add_argument("--images", type=Path, default=default if default.is_dir()
                    else ROOT / "tests" / "data")
    ap.add_argument("--sigma", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--filters-only", action="store_true")
    ap.add_argument("--matches-json", type=Path, default=None,
                    help="the matches' measures from an earlier run of this script")
    args = ap.parse_args()
    earlier: dict[str, dict[str, Any]] = {}
    if args.matches_json:
        args.filters_only = True
        for r in json.loads(args.matches_json.read_text())["images"]:
            earlier[r["image"]] = {k: v for k, v in r.items()
                                   if k.startswith(("recall_nc", "ratio_nc"))}
    rt = clpatch.Runtime(args.device)
    rows = []
    for name, clean in images(args.images, args.only):
        rng = np.random.default_rng(args.seed)
        noisy = (clean + rng.normal(0, args.sigma, clean.shape)).astype(np.float32)
        row: dict[str, Any] = {"image": name, "size": list(clean.shape),
                               **earlier.get(name, {})}
        exact_pos, exact_dist = (None, None) if args.filters_only else \
            oracle.exact_in_tile_image(noisy, patch_size=8, k=16, tile=15)
        for nc in () if args.filters_only else (0, 1, 2):
            found = clpatch.ann_search(noisy, patch_size=8, k=16, tile=15,
                                       neighbour_clusters=nc, runtime=rt)
            recall, ratio = oracle.quality(found.distances, exact_dist, found.positions,
                                           exact_pos)
            row[f"recall_nc{nc}"], row[f"ratio_nc{nc}"] = recall, ratio
        for search in ("window", "ann"):
            row[f"bm3d_{search}"] = psnr(clpatch.bm3d(noisy, args.sigma, search=search,
                                                      runtime=rt), clean)
            row[f"nlmeans_{search}"] = psnr(clpatch.nlmeans(noisy, args.sigma, search=search,
                                                            runtime=rt), clean)
        rows.append(row)
        print(json.dumps(row), flush=True)
    keys = [k for k in rows[0] if k not in ("image", "size")]
    mean = {k: float(np.mean([r[k] for r in rows])) for k in keys}
    result = {"device": rt.device.name, "host": platform.node(), "sigma": args.sigma,
              "seed": args.seed, "filter_tile": FILTER_TILE,
              "filter_neighbour_clusters": FILTER_NEIGHBOUR_CLUSTERS,
              "filter_tilings": FILTER_TILINGS, "images": rows, "mean": mean}
    print(json.dumps({"mean": mean}), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.markdown:
        lines = [f"# Clustering ANN quality, σ = {args.sigma:g} (device: {rt.device.name})", "",
                 "Matches: every 8x8 patch, k 16, tile 15, against the exact in-tile kNN "
                 "(recall / D_ann/D_knn) with 0, 1, 2 neighbour clusters. Filters: PSNR (dB) "
                 "with the exact windowed search and with the ANN (the filters' ANN: tiles of "
                 f"{FILTER_TILE}, {FILTER_NEIGHBOUR_CLUSTERS} neighbour clusters, "
                 f"{FILTER_TILINGS} tilings).", "",
                 "| image | nc 0 | nc 1 | nc 2 | BM3D window | BM3D ann | Δ | NL-means window "
                 "| NL-means ann | Δ |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in [*rows, {"image": "mean", **mean}]:
            lines.append(
                f"| {r['image']} | "
                + " | ".join(f"{100 * r[f'recall_nc{n}']:.1f} % / {r[f'ratio_nc{n}']:.3f}"
                             if f"recall_nc{n}" in r else "–" for n in (0, 1, 2))
                + f" | {r['bm3d_window']:.2f} | {r['bm3d_ann']:.2f} | "
                f"{r['bm3d_ann'] - r['bm3d_window']:+.2f} | {r['nlmeans_window']:.2f} | "
                f"{r['nlmeans_ann']:.2f} | {r['nlmeans_ann'] - r['nlmeans_window']:+.2f} |")
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
