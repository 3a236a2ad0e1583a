"""Denoising quality (PSNR) of clpatch NL-means against OpenCV and scikit-image.

    python benchmarks/quality_nlmeans.py [--images DIR] [--sigma 20] [--seed 0] [--device SPEC]
                                         [--json FILE] [--markdown FILE] [--only NAME ...]

Every image of the folder (default `../shared/data/images`, else `tests/data`) gets σ = 20
Gaussian noise from `numpy.random.default_rng(seed)`, a fresh generator per image so each
image's noise does not depend on which other images run. Two tables:

- grayscale: every image; colour ones are first reduced to 8-bit luminance,
  round(0.299 R + 0.587 G + 0.114 B);
- colour: the RGB images, through each library's colour path.

Methods (all σ-aware, σ in 0–255 units):

- noisy: the noisy image itself;
- clpatch: `clpatch.nlmeans(noisy, σ)` with its defaults (patch 8, step 4, window 21, n 16);
- clpatch p5 s1: the same with patch_size=5, step=1 (every pixel a reference patch);
- OpenCV: `cv2.fastNlMeansDenoising(h=σ, templateWindowSize=7, searchWindowSize=21)` on the
  noisy image rounded and clipped to uint8 (OpenCV takes 8-bit input only); colour:
  `cv2.fastNlMeansDenoisingColored(h=σ, hColor=σ)` on the BGR image;
- scikit-image: `denoise_nl_means(fast_mode=True, h=0.8σ, patch_size=5, patch_distance=6,
  sigma=σ)` on the float noisy image (scaled to 0–1 and back; `channel_axis=-1` for colour).

PSNR uses peak 255 against the clean image, on outputs clipped to 0–255 (the noisy row
too). Wall times are recorded in the JSON for information only; they are not benchmarks
(see `bench_nlmeans.py`). OpenCV and scikit-image are optional: missing ones are skipped
with a note.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import clpatch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_images import DEFAULT_FOLDERS, ROOT, load_images  # noqa: E402

LUMA = np.array([0.299, 0.587, 0.114])

try:
    import cv2
except ImportError:  # pragma: no cover - depends on the environment
    cv2 = None
try:
    from skimage.restoration import denoise_nl_means
except ImportError:  # pragma: no cover - depends on the environment
    denoise_nl_means = None


def psnr(output: np.ndarray, clean: np.ndarray) -> float:
    """PSNR in dB, peak 255, of `output` clipped to 0..255 against `clean`."""
    diff = np.clip(np.asarray(output, np.float64), 0.0, 255.0) - np.asarray(clean, np.float64)
    mse = float(np.mean(diff * diff))
    return float("inf") if mse == 0 else 10.0 * np.log10(255.0 ** 2 / mse)


def to_gray(rgb: np.ndarray) -> np.ndarray:
    """8-bit luminance (ITU-R BT.601 weights), as float32."""
    return np.clip(np.rint(rgb[..., :3].astype(np.float64) @ LUMA), 0, 255).astype(np.float32)


def add_noise(clean: np.ndarray, sigma: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (clean + rng.normal(0.0, sigma, clean.shape)).astype(np.float32)


def to_uint8(image: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


# ---- methods: f(noisy float32 image, sigma, colour) -> denoised image ----------------------

def method_table(runtime: clpatch.Runtime) -> tuple[list[tuple[str, str, Callable[..., Any]]], list[str]]:
    """[(key, column label, function)] of the methods available, and notes on missing ones."""
    notes = []

    def clpatch_default(noisy, sigma, colour):
        kwargs = {"channel_axis": -1} if colour else {}
        return clpatch.nlmeans(noisy, sigma, runtime=runtime, **kwargs)

    def clpatch_p5s1(noisy, sigma, colour):
        kwargs = {"channel_axis": -1} if colour else {}
        return clpatch.nlmeans(noisy, sigma, patch_size=5, step=1, runtime=runtime, **kwargs)

    methods: list[tuple[str, str, Callable[..., Any]]] = [
        ("noisy", "noisy", lambda noisy, sigma, colour: noisy),
        ("clpatch", "clpatch (p8 s4)", clpatch_default),
        ("clpatch_p5s1", "clpatch p5 s1", clpatch_p5s1),
    ]
    if cv2 is not None:
        def opencv(noisy, sigma, colour):
            if colour:
                bgr = cv2.cvtColor(to_uint8(noisy), cv2.COLOR_RGB2BGR)
                out = cv2.fastNlMeansDenoisingColored(bgr, None, h=float(sigma), hColor=float(sigma),
                                                      templateWindowSize=7, searchWindowSize=21)
                return cv2.cvtColor(out, cv2.COLOR_BGR2RGB).astype(np.float32)
            out = cv2.fastNlMeansDenoising(to_uint8(noisy), None, h=float(sigma),
                                           templateWindowSize=7, searchWindowSize=21)
            return out.astype(np.float32)

        methods.append(("opencv", "OpenCV", opencv))
    else:
        notes.append("OpenCV (cv2) is not installed: its column is skipped "
                     "(pip install opencv-python-headless)")
    if denoise_nl_means is not None:
        def skimage_nlm(noisy, sigma, colour):
            out = denoise_nl_means(noisy.astype(np.float64) / 255.0, patch_size=5, patch_distance=6,
                                   h=0.8 * sigma / 255.0, fast_mode=True, sigma=sigma / 255.0,
                                   channel_axis=-1 if colour else None)
            return (out * 255.0).astype(np.float32)

        methods.append(("skimage", "scikit-image", skimage_nlm))
    else:
        notes.append("scikit-image is not installed: its column is skipped (pip install scikit-image)")
    return methods, notes


def run_table(images: list[tuple[str, np.ndarray]], methods, sigma: float, seed: int,
              colour: bool) -> list[dict[str, Any]]:
    rows = []
    for name, clean in images:
        noisy = add_noise(clean, sigma, seed)
        row: dict[str, Any] = {"image": name, "shape": list(clean.shape), "psnr": {}, "wall_s": {}}
        for key, _, fn in methods:
            start = time.perf_counter()
            out = np.asarray(fn(noisy, sigma, colour))
            row["wall_s"][key] = time.perf_counter() - start
            if out.shape != clean.shape:
                raise RuntimeError(f"{key} returned shape {out.shape} for {name} {clean.shape}")
            row["psnr"][key] = psnr(out, clean)
        rows.append(row)
        print(f"  {name:18s} " + "  ".join(f"{k} {v:6.2f}" for k, v in row["psnr"].items())
              + f"   ({sum(row['wall_s'].values()):.1f} s)", file=sys.stderr, flush=True)
    return rows


def summarise(rows: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {"average_psnr": {k: float(np.mean([r["psnr"][k] for r in rows]))
                                                for k in keys}}
    if "opencv" in keys:
        gains = {r["image"]: r["psnr"]["clpatch"] - r["psnr"]["opencv"] for r in rows}
        summary["clpatch_gain_over_opencv"] = {
            "average_db": float(np.mean(list(gains.values()))),
            "min_db": float(min(gains.values())),
            "never_loses": bool(min(gains.values()) >= 0.0),
            "losses": sorted(name for name, g in gains.items() if g < 0.0),
            "per_image_db": gains,
        }
    return summary


def markdown(title: str, rows: list[dict[str, Any]], methods, summary: dict[str, Any]) -> str:
    keys = [k for k, _, _ in methods]
    labels = [label for _, label, _ in methods]
    lines = [f"### {title}", "", "| image | size | " + " | ".join(labels) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in labels) + " |"]
    for row in rows:
        shape = row["shape"]
        size = f"{shape[1]}×{shape[0]}" + (f"×{shape[2]}" if len(shape) == 3 else "")
        best = max(row["psnr"][k] for k in keys if k != "noisy")
        cells = []
        for k in keys:
            text = f"{row['psnr'][k]:.2f}"
            cells.append(f"**{text}**" if k != "noisy" and row["psnr"][k] == best else text)
        lines.append(f"| {row['image']} | {size} | " + " | ".join(cells) + " |")
    lines.append("| **average** | | " + " | ".join(f"{summary['average_psnr'][k]:.2f}" for k in keys)
                 + " |")
    gain = summary.get("clpatch_gain_over_opencv")
    if gain is not None:
        verdict = ("never loses" if gain["never_loses"]
                   else "loses on " + ", ".join(gain["losses"]))
        lines += ["", f"clpatch (defaults) vs OpenCV: average gain {gain['average_db']:+.2f} dB, "
                  f"smallest {gain['min_db']:+.2f} dB; {verdict}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, default=None, help="folder of PNG images")
    parser.add_argument("--sigma", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="OpenCL device: 'P:D' or a name substring")
    parser.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    parser.add_argument("--markdown", type=Path, default=None, help="write the tables to this file")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME", help="image names (stems)")
    parser.add_argument("--no-colour", action="store_true", help="skip the colour table")
    args = parser.parse_args(argv)

    folder = args.images or next((d for d in DEFAULT_FOLDERS if d.is_dir()), None)
    if folder is None or not folder.is_dir():
        parser.error(f"no image folder: {args.images or DEFAULT_FOLDERS}")
    images = load_images(folder, args.only)
    if not images:
        parser.error(f"no PNG images in {folder}" + (f" named {args.only}" if args.only else ""))

    rt = clpatch.Runtime(args.device)
    methods, notes = method_table(rt)
    keys = [k for k, _, _ in methods]
    device = f"{rt.device.name.strip()} ({rt.device.platform.name.strip()})"
    try:
        shown = folder.resolve().relative_to(ROOT.parent)
    except ValueError:
        shown = folder
    header = (f"σ = {args.sigma:g} Gaussian noise, seed {args.seed}; PSNR (dB, peak 255, outputs "
              f"clipped to 0–255); images from {shown}/; clpatch on {device}")
    print(header, file=sys.stderr)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)

    gray = [(name, to_gray(im) if im.ndim == 3 else im) for name, im in images]
    colour = [(name, im) for name, im in images if im.ndim == 3]
    print("grayscale:", file=sys.stderr)
    gray_rows = run_table(gray, methods, args.sigma, args.seed, colour=False)
    gray_summary = summarise(gray_rows, keys)
    tables = [markdown(f"Grayscale, σ = {args.sigma:g}", gray_rows, methods, gray_summary)]
    colour_rows: list[dict[str, Any]] = []
    colour_summary: dict[str, Any] = {}
    if colour and not args.no_colour:
        print("colour:", file=sys.stderr)
        colour_rows = run_table(colour, methods, args.sigma, args.seed, colour=True)
        colour_summary = summarise(colour_rows, keys)
        tables.append(markdown(f"Colour (RGB), σ = {args.sigma:g}", colour_rows, methods, colour_summary))

    text = "\n\n".join([header + ".", *(f"Note: {n}." for n in notes), *tables]) + "\n"
    print(text)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    if args.json:
        result = {
            "benchmark": "quality_nlmeans", "date": time.strftime("%Y-%m-%d"),
            "sigma": args.sigma, "seed": args.seed, "images": str(shown),
            "device": rt.device.name.strip(), "platform": rt.device.platform.name.strip(),
            "python": platform.python_version(), "clpatch": clpatch.__version__,
            "numpy": np.__version__,
            "opencv": getattr(cv2, "__version__", None),
            "skimage": __import__("skimage").__version__ if denoise_nl_means is not None else None,
            "methods": {k: label for k, label, _ in methods}, "notes": notes,
            "gray": {"results": gray_rows, "summary": gray_summary},
            "colour": {"results": colour_rows, "summary": colour_summary},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
