"""BM3D quality at high noise and the mean level, against the reference `bm3d` package.

    python benchmarks/quality_bm3d_high.py [--images DIR] [--sigmas 40 60 100] [--crop 256]
                                           [--seed 0] [--device SPEC] [--only NAME ...]
                                           [--json FILE] [--markdown FILE]

Every grayscale image of the folder (colour ones reduced to 8-bit luminance, as in
`quality_bm3d.py`), cut to its central crop×crop square, gets Gaussian noise of each σ from
`numpy.random.default_rng(seed)` (a fresh generator per image and σ); the same noisy floats
(0–255 units, not clipped) go to every method:

- reference: `clpatch.bm3d(noisy, σ, preset="reference")` (the bm3d package's default
  profile: the same settings at every σ, stage-1 tau_match 3000 + 2σ², exact variances);
- reference, 'vn' profile: the same with BM3D.m's high-noise settings forced (patches
  8/11, step 4/6, n 32/32, tau_match 25000/3500, lambda 2.8, mu2 1, σ² for every
  coefficient): what the preset took above σ = 40 before it followed the package;
- fast: `preset="fast"` (above σ = 40 its high-noise settings, see
  `clpatch.denoise.bm3d_params.HIGH_NOISE`); fast, normal profile: with its σ <= 40
  settings forced (tau_match 2500/400, lambda 3.0);
- bm3d: the `bm3d` PyPI package (Tampere), `bm3d.bm3d(noisy, sigma_psd=σ)`, default profile.

PSNR (peak 255) on outputs clipped to 0–255. A second table gives the mean level: the
output's mean minus the clean image's, unclipped, on the camera crop at σ = 100, 1000 and
10⁶ (both presets and the package).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from quality_bm3d import DEFAULT_IMAGES, load, psnr

import clpatch

#: The forced settings of the second column of each preset.
FORCED = {"reference": (", 'vn' profile", dict(patch_size=(8, 11), step=(4, 6), n=(32, 32),
                                               tau_match=(25000.0, 3500.0), lambda_3d=2.8,
                                               mu2=1.0, exact_variance=False)),
          "fast": (", normal profile", dict(tau_match=(2500.0, 400.0), lambda_3d=3.0))}


def crop(image: np.ndarray, size: int) -> np.ndarray:
    """The central size×size square (the whole image where it is smaller)."""
    h, w = image.shape[:2]
    y, x = max(0, (h - size) // 2), max(0, (w - size) // 2)
    return image[y:y + size, x:x + size]


def methods(tampere: Any, rt: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for preset in ("reference", "fast"):
        out[preset] = (lambda x, s, p=preset: clpatch.bm3d(x.astype(np.float32), s, preset=p,
                                                          runtime=rt))
        suffix, forced = FORCED[preset]
        out[preset + suffix] = (
            lambda x, s, p=preset, f=forced: clpatch.bm3d(x.astype(np.float32), s, preset=p,
                                                          runtime=rt, **f))
    if tampere is not None:
        out["bm3d"] = lambda x, s: tampere.bm3d(x, sigma_psd=s)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=Path, default=None)
    ap.add_argument("--sigmas", type=float, nargs="*", default=[40.0, 60.0, 100.0])
    ap.add_argument("--crop", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args(argv)
    folder = args.images or next(d for d in DEFAULT_IMAGES if d.is_dir())
    try:
        import bm3d as tampere
    except ImportError:
        tampere = None
    rt = clpatch.Runtime(args.device)
    run = methods(tampere, rt)
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.png")):
        if args.only and path.stem not in args.only and path.name not in args.only:
            continue
        clean = crop(load(path)[0], args.crop)
        for sigma in args.sigmas:
            noisy = clean + np.random.default_rng(args.seed).normal(0.0, sigma, clean.shape)
            row: dict[str, Any] = {"image": path.name, "sigma": sigma}
            for label, f in run.items():
                start = time.perf_counter()
                row[label] = psnr(f(noisy, sigma), clean)
                row[label + " s"] = time.perf_counter() - start
            rows.append(row)
            print(json.dumps(row), flush=True)
    means = []
    camera = crop(load(folder / "camera.png")[0], args.crop) if (folder / "camera.png").exists() \
        else None
    for sigma in ([100.0, 1000.0, 1e6] if camera is not None else []):
        noisy = camera + np.random.default_rng(args.seed).normal(0.0, sigma, camera.shape)
        row = {"sigma": sigma, "clean mean": float(camera.mean()),
               "noisy - clean": float(noisy.mean() - camera.mean())}
        for label in ("reference", "fast", "bm3d"):
            if label in run:
                row[label + " - clean"] = float(np.mean(run[label](noisy, sigma)) - camera.mean())
        means.append(row)
        print(json.dumps(row), flush=True)

    labels = [k for k in run]
    lines = [f"# BM3D at high noise, {args.crop}² central crops, seed {args.seed}", "",
             f"Device: {rt.device.name.strip()}; bm3d package: "
             f"{getattr(tampere, '__version__', 'installed') if tampere else 'not installed'}.",
             "PSNR in dB on outputs clipped to 0–255; the same unclipped noisy floats for all.",
             "", "| image | σ | " + " | ".join(labels) + " | reference − bm3d |",
             "|---|---|" + "---|" * (len(labels) + 1)]
    for r in rows:
        diff = f"{r['reference'] - r['bm3d']:+.2f}" if "bm3d" in r else "–"
        lines.append(f"| {r['image']} | {r['sigma']:g} | "
                     + " | ".join(f"{r[k]:.2f}" for k in labels) + f" | {diff} |")
    for sigma in args.sigmas:
        sel = [r for r in rows if r["sigma"] == sigma]
        if sel:
            avg = {k: float(np.mean([r[k] for r in sel])) for k in labels}
            diff = f"{avg['reference'] - avg['bm3d']:+.2f}" if "bm3d" in avg else "–"
            lines.append(f"| average | {sigma:g} | "
                         + " | ".join(f"{avg[k]:.2f}" for k in labels) + f" | {diff} |")
    if means:
        keys = [k for k in means[0] if k != "sigma"]
        lines += ["", "## Mean level (camera crop): output mean − clean mean, unclipped", "",
                  "| σ | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
        lines += [f"| {m['sigma']:g} | " + " | ".join(f"{m[k]:.2f}" for k in keys) + " |"
                  for m in means]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({
            "crop": args.crop, "seed": args.seed, "sigmas": args.sigmas,
            "device": rt.device.name.strip(), "platform": platform.platform(),
            "python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d"),
            "psnr": rows, "mean_level": means}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
