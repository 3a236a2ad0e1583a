"""Where the reference preset and the `bm3d` PyPI package (Tampere) differ: the NumPy BM3D
oracle (tests/reference/bm3d.py) on the plain reference grid and on the package's staggered
grid, against the package itself.

    python benchmarks/bm3d_package_gap.py [--images DIR] [--only NAME ...] [--json FILE]
                                           [--markdown FILE] [--package-shrinkage]

The package (4.0.x) shifts consecutive rows of reference patches by 0, 1 and 2 columns
("pre-optimised block shifts" in its bm4d backend) and, for white noise, thresholds at
λ = 3.0 and shrinks with μ² = 0.4. The oracle is run with the reference preset (λ 2.7,
μ² 1) on the plain grid and on the staggered one (shifts (0, 2, 1)); `--package-shrinkage`
adds the staggered grid with λ 3.0 and μ² 0.4. Same noise as benchmarks/quality_bm3d.py
(σ 20, numpy.random.default_rng(0) per image, grayscale). Slow: about a minute per image
and configuration on one CPU core.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from quality_bm3d import DEFAULT_IMAGES, load, psnr  # noqa: E402

from tests.reference.bm3d import bm3d_reference  # noqa: E402

SIGMA, SEED = 20.0, 0
STAGGER = (0, 2, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, default=None)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--package-shrinkage", action="store_true")
    args = parser.parse_args()
    folder = args.images or next(p for p in DEFAULT_IMAGES if p.is_dir())
    try:
        import bm3d as tampere
    except ImportError:
        sys.exit("the bm3d package is needed: pip install bm3d")

    configs = {"plain": dict(shifts=(0,)), "staggered": dict(shifts=STAGGER)}
    if args.package_shrinkage:
        configs["staggered, λ 3.0, μ² 0.4"] = dict(shifts=STAGGER, lambda_3d=3.0, mu2=0.4)
    rows = []
    for path in sorted(folder.glob("*.png")):
        if args.only and path.stem not in args.only and path.name not in args.only:
            continue
        clean, _ = load(path)
        noisy = clean + np.random.default_rng(SEED).normal(0.0, SIGMA, clean.shape)
        row = {"image": path.name, "bm3d": psnr(tampere.bm3d(noisy, sigma_psd=SIGMA), clean)}
        for label, kw in configs.items():
            start = time.perf_counter()
            row[label] = psnr(bm3d_reference(noisy.astype(np.float32), SIGMA, "reference", **kw),
                              clean)
            print(f"{path.name}: {label} {row[label]:.3f} dB (package {row['bm3d']:.3f}, "
                  f"{time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
        rows.append(row)

    labels = list(configs)
    lines = ["| image | bm3d (Tampere) | " + " | ".join(f"oracle {c} | diff" for c in labels) + " |",
             "|---|---|" + "---|---|" * len(labels)]
    for row in rows:
        cells = " | ".join(f"{row[c]:.2f} | {row[c] - row['bm3d']:+.3f}" for c in labels)
        lines.append(f"| {row['image']} | {row['bm3d']:.2f} | {cells} |")
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        args.markdown.write_text(
            "# Reference preset vs the bm3d package: the staggered grid\n\n"
            f"σ = {SIGMA:g}, seed {SEED}, grayscale, PSNR of outputs clipped to 0–255; the NumPy "
            "oracle with the reference preset (λ 2.7, μ² 1 unless stated) on the plain grid and "
            f"on the staggered grid (row shifts {STAGGER}).\n\n" + table + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
