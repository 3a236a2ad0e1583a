"""BM3D quality against bm3d-triton: clpatch's presets and bm3d-triton on the same noisy images.

    python benchmarks/quality_triton.py [--images DIR] [--sigmas 5 10 20 40 60 100] [--seed 0]
                                        [--device SPEC] [--json FILE] [--markdown FILE]
                                        [--only NAME ...] [--triton-json FILE]

Every image of the folder (default `../shared/data/images`, else `tests/data`) is reduced to
8-bit luminance as in quality_bm3d.py (round(0.299 R + 0.587 G + 0.114 B) for colour files)
and gets Gaussian noise of each σ from `numpy.random.default_rng(seed)` (a fresh generator
per image and σ, as quality_bm3d.py and quality_bm3d_high.py do), unclipped. Methods, all on
that same float array:

- clpatch fast and clpatch reference: `clpatch.bm3d(noisy, σ, preset=...)`;
- bm3d-triton (needs torch with CUDA): `bm3d_triton.denoise(x, σ / 255)` on the noisy
  array / 255 as a (1, 1, H, W) float32 CUDA tensor, times 255.

PSNR uses peak 255 on outputs clipped to 0–255 (every method alike). bm3d-triton runs only
where CUDA is; `--triton-json FILE` takes its PSNRs from an earlier run's JSON instead (the
noisy inputs are the same, so clpatch's presets can be measured on any OpenCL device against
the GPU's bm3d-triton figures). The issue's target: the fast preset at most 0.3 dB below
bm3d-triton on every image.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from quality_bm3d import DEFAULT_IMAGES, LUMA, psnr

import clpatch


def luminance(path: Path) -> np.ndarray:
    image = Image.open(path)
    if image.mode in ("RGB", "RGBA"):
        return np.rint(np.asarray(image.convert("RGB"), np.float64) @ LUMA)
    return np.asarray(image.convert("L"), np.float64)


def triton_denoiser() -> Any:
    """bm3d-triton as noisy (0–255 float64) -> output (0–255), or None where unavailable."""
    try:
        import bm3d_triton
        import torch
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return None
    if not torch.cuda.is_available():
        return None

    def run(noisy: np.ndarray, sigma: float) -> np.ndarray:
        x = torch.from_numpy((noisy / 255.0).astype(np.float32)).cuda()[None, None]
        return bm3d_triton.denoise(x, sigma / 255.0)[0, 0].double().cpu().numpy() * 255.0

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=Path, default=None)
    ap.add_argument("--sigmas", type=float, nargs="*", default=[5.0, 10.0, 20.0, 40.0, 60.0, 100.0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--triton-json", type=Path, default=None,
                    help="bm3d-triton PSNRs from an earlier run of this script")
    ap.add_argument("--no-reference", action="store_true", help="skip the reference preset")
    args = ap.parse_args(argv)
    folder = args.images or next(d for d in DEFAULT_IMAGES if d.is_dir())
    known: dict[tuple[str, float], float] = {}
    if args.triton_json:
        for row in json.loads(args.triton_json.read_text())["rows"]:
            if row.get("bm3d-triton") is not None:
                known[row["image"], row["sigma"]] = row["bm3d-triton"]
    triton = triton_denoiser()
    rt = clpatch.Runtime(args.device)
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.png")):
        if args.only and path.stem not in args.only and path.name not in args.only:
            continue
        clean = luminance(path)
        for sigma in args.sigmas:
            noisy = clean + np.random.default_rng(args.seed).normal(0.0, sigma, clean.shape)
            row: dict[str, Any] = {"image": path.name, "sigma": sigma,
                                   "shape": list(clean.shape), "noisy": psnr(noisy, clean)}
            presets = ["fast"] if args.no_reference else ["fast", "reference"]
            for preset in presets:
                start = time.perf_counter()
                out = clpatch.bm3d(noisy.astype(np.float32), sigma, preset=preset,
                                   data_range=255.0, runtime=rt)
                row[f"clpatch {preset}"] = psnr(out, clean)
                row[f"clpatch {preset} s"] = time.perf_counter() - start
            if triton is not None:
                row["bm3d-triton"] = psnr(triton(noisy, sigma), clean)
            else:
                row["bm3d-triton"] = known.get((path.name, sigma))
            if row["bm3d-triton"] is not None:
                row["fast - triton"] = row["clpatch fast"] - row["bm3d-triton"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    report = {"device": rt.device.name.strip(), "host": platform.node(), "seed": args.seed,
              "triton": "run here" if triton is not None else
              (str(args.triton_json) if args.triton_json else "unavailable"), "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.markdown:
        args.markdown.write_text(markdown(report))
    return 0


def markdown(report: dict[str, Any]) -> str:
    rows = report["rows"]
    lines = [f"# BM3D quality against bm3d-triton (seed {report['seed']})", "",
             f"clpatch on {report['device']}; bm3d-triton: {report['triton']}. PSNR in dB, "
             "outputs clipped to 0–255, every method on the same unclipped noisy array.", "",
             "| image | σ | noisy | clpatch fast | clpatch reference | bm3d-triton | fast − triton |",
             "|---|---|---|---|---|---|---|"]

    def cell(value: Any, fmt: str = ".2f") -> str:
        return "–" if value is None else format(value, fmt)

    for r in rows:
        lines.append(f"| {r['image']} | {r['sigma']:g} | {r['noisy']:.2f} | "
                     f"{cell(r.get('clpatch fast'))} | {cell(r.get('clpatch reference'))} | "
                     f"{cell(r.get('bm3d-triton'))} | {cell(r.get('fast - triton'), '+.2f')} |")
    gaps = [r["fast - triton"] for r in rows if r.get("fast - triton") is not None]
    if gaps:
        lines += ["", f"Worst fast − triton: {min(gaps):+.2f} dB; mean {np.mean(gaps):+.2f} dB "
                  f"over {len(gaps)} image × σ cases (target: every case ≥ −0.30 dB)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
