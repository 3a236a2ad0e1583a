"""Denoising quality (PSNR) of clpatch BM3D/CBM3D against the reference `bm3d` package (Tampere).

    python benchmarks/quality_bm3d.py [--images DIR] [--sigma 20] [--seed 0] [--device SPEC]
                                      [--json FILE] [--markdown FILE] [--only NAME ...]

Every image of the folder (default `../shared/data/images`, else `tests/data`) gets σ = 20
Gaussian noise from `numpy.random.default_rng(seed)` (a fresh generator per image). Grayscale
table: every image, colour ones reduced to 8-bit luminance round(0.299 R + 0.587 G + 0.114 B);
colour table: the RGB images.

Methods (σ in 0–255 units, the noisy image in 0–255 floats):

- clpatch reference: `clpatch.bm3d(noisy, σ, preset="reference")` (CBM3D for colour), and
  the same with `stagger=False` (the plain grid of the original BM3D);
- clpatch fast: `clpatch.bm3d(noisy, σ)` (Davy–Ehret's defaults);
- bm3d: the `bm3d` PyPI package, `bm3d.bm3d(noisy, sigma_psd=σ)` and
  `bm3d.bm3d_rgb(noisy, sigma_psd=σ)`, its default profile.

PSNR uses peak 255 on outputs clipped to 0–255. The issue's target: the reference preset
within 0.10 dB of the package on every grayscale image. Results do not depend on the
OpenCL device beyond float rounding, so this runs anywhere (PoCL included).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

import clpatch

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_IMAGES = [ROOT.parent / "shared" / "data" / "images", ROOT / "tests" / "data"]
LUMA = np.array([0.299, 0.587, 0.114])


def psnr(out: np.ndarray, clean: np.ndarray) -> float:
    err = np.clip(np.asarray(out, np.float64), 0, 255) - clean
    return float(10 * math.log10(255.0 ** 2 / np.mean(err * err)))


def load(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """(grayscale, RGB or None) as float64 0–255."""
    image = Image.open(path)
    rgb = None
    if image.mode in ("RGB", "RGBA"):
        rgb = np.asarray(image.convert("RGB"), np.float64)
        gray = np.rint(rgb @ LUMA)
    else:
        gray = np.asarray(image.convert("L"), np.float64)
    return gray, rgb


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=Path, default=None)
    ap.add_argument("--sigma", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args(argv)
    folder = args.images or next(d for d in DEFAULT_IMAGES if d.is_dir())
    try:
        import bm3d as tampere
    except ImportError:
        tampere = None
    rt = clpatch.Runtime(args.device)
    sigma = args.sigma
    gray_rows: list[dict[str, Any]] = []
    colour_rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.png")):
        if args.only and path.stem not in args.only and path.name not in args.only:
            continue
        gray, rgb = load(path)
        for clean, rows in ((gray, gray_rows), (rgb, colour_rows)):
            if clean is None:
                continue
            noisy = clean + np.random.default_rng(args.seed).normal(0.0, sigma, clean.shape)
            row: dict[str, Any] = {"image": path.name, "noisy": psnr(noisy, clean)}
            for label, preset, extra in (("clpatch reference", "reference", {}),
                                         ("plain grid", "reference", {"stagger": False}),
                                         ("clpatch fast", "fast", {})):
                start = time.perf_counter()
                out = clpatch.bm3d(noisy.astype(np.float32), sigma, preset=preset, runtime=rt,
                                   **extra)
                row[label] = psnr(out, clean)
                row[label + " s"] = time.perf_counter() - start
            if tampere is not None:
                start = time.perf_counter()
                if clean.ndim == 3:
                    out = tampere.bm3d_rgb(noisy, sigma_psd=sigma)
                else:
                    out = tampere.bm3d(noisy, sigma_psd=sigma)
                row["bm3d"] = psnr(out, clean)
                row["bm3d s"] = time.perf_counter() - start
                row["reference - bm3d"] = row["clpatch reference"] - row["bm3d"]
            rows.append(row)
            print(json.dumps(row), flush=True)

    def table(rows: list[dict[str, Any]], title: str) -> list[str]:
        if not rows:
            return []
        out = [f"## {title}", "",
               "| image | noisy | clpatch reference | bm3d (Tampere) | difference "
               "| reference on the plain grid | clpatch fast |",
               "|---|---|---|---|---|---|---|"]
        for r in rows:
            ref = f"{r['bm3d']:.2f}" if "bm3d" in r else "–"
            diff = f"{r['reference - bm3d']:+.3f}" if "bm3d" in r else "–"
            out.append(f"| {r['image']} | {r['noisy']:.2f} | {r['clpatch reference']:.2f} | {ref} "
                       f"| {diff} | {r['plain grid']:.2f} | {r['clpatch fast']:.2f} |")
        avg = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if not k.endswith(" s")
               and k != "image" and all(k in r for r in rows)}
        ref = f"{avg['bm3d']:.2f}" if "bm3d" in avg else "–"
        diff = f"{avg['reference - bm3d']:+.3f}" if "reference - bm3d" in avg else "–"
        out.append(f"| average | {avg['noisy']:.2f} | {avg['clpatch reference']:.2f} | {ref} | "
                   f"{diff} | {avg['plain grid']:.2f} | {avg['clpatch fast']:.2f} |")
        return out + [""]

    lines = [f"# BM3D quality, σ = {sigma:g}, seed {args.seed}", "",
             f"Device: {rt.device.name.strip()}; bm3d package: "
             f"{getattr(tampere, '__version__', 'installed') if tampere else 'not installed'}.",
             "PSNR in dB, outputs clipped to 0–255.", ""]
    lines += table(gray_rows, "Grayscale (BM3D)") + table(colour_rows, "Colour (CBM3D)")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({
            "sigma": sigma, "seed": args.seed, "device": rt.device.name.strip(),
            "platform": platform.platform(), "python": sys.version.split()[0],
            "date": time.strftime("%Y-%m-%d"), "grayscale": gray_rows, "colour": colour_rows},
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
