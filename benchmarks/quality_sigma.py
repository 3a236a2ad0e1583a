"""Accuracy of `clpatch.estimate_sigma` against the true sigma, and scikit-image's
`skimage.restoration.estimate_sigma` (wavelet MAD, Donoho) in the same run.

    python benchmarks/quality_sigma.py [--images DIR] [--sigmas 5 10 20 40] [--seed 0]
                                       [--seeds 5] [--device SPEC] [--json FILE]
                                       [--markdown FILE] [--only NAME ...]

Every PNG of the folder (default `../shared/data/images`, else `tests/data`), grayscale or
RGB in 0-255, gets Gaussian noise of each sigma, not clipped, from
`numpy.random.default_rng([seed, crc32(name), sigma])` (a fresh generator per image and
sigma), as float64. Both estimators see the same noisy array; colour images are estimated
per channel (scikit-image: `channel_axis=-1, average_sigmas=False`). The relative error is
estimate / sigma - 1; for colour images the table shows the channel farthest from sigma.

Besides the main table (seed `--seed`), the run repeats clpatch on `--seeds` seeds and
reports the largest |error| per image and sigma, and estimates both methods on the clean
images (what they take for noise in the image itself). Accuracy does not depend on the
device (float32 on any device, within 1e-4 of the float64 oracle). scikit-image is optional:
without it its columns are skipped with a note.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

import clpatch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_images import DEFAULT_FOLDERS, load_images  # noqa: E402

TARGET = 0.10

try:
    from skimage.restoration import estimate_sigma as skimage_estimate
except ImportError:  # pragma: no cover - depends on the environment
    skimage_estimate = None


def noisy(clean: np.ndarray, name: str, sigma: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(name.encode()), int(round(sigma * 1000))])
    return clean + rng.normal(0.0, sigma, clean.shape)


def ours(image: np.ndarray, runtime: clpatch.Runtime) -> list[float]:
    return np.atleast_1d(clpatch.estimate_sigma(image, runtime=runtime)).tolist()


def theirs(image: np.ndarray) -> list[float] | None:
    if skimage_estimate is None:
        return None
    colour = image.ndim == 3
    value = skimage_estimate(image, channel_axis=-1 if colour else None, average_sigmas=False)
    return np.atleast_1d(np.asarray(value, np.float64)).tolist()


def worst_error(values: list[float] | None, sigma: float) -> float | None:
    """The relative error of the channel farthest from sigma (signed)."""
    if values is None:
        return None
    errors = [v / sigma - 1.0 for v in values]
    return max(errors, key=abs)


def measure(images, sigmas, seed, seeds, runtime) -> dict[str, Any]:
    rows, spread, clean_rows = [], [], []
    for name, clean in images:
        start = time.perf_counter()
        clean_rows.append({"image": name, "ours": ours(clean, runtime), "skimage": theirs(clean)})
        for sigma in sigmas:
            image = noisy(clean, name, sigma, seed)
            mine, other = ours(image, runtime), theirs(image)
            rows.append({"image": name, "shape": list(clean.shape), "sigma": sigma,
                         "ours": mine, "ours_error": worst_error(mine, sigma),
                         "skimage": other, "skimage_error": worst_error(other, sigma)})
            errors = [worst_error(ours(noisy(clean, name, sigma, s), runtime), sigma)
                      for s in range(seed + 1, seed + seeds)]
            errors.append(rows[-1]["ours_error"])
            spread.append({"image": name, "sigma": sigma, "seeds": seeds,
                           "largest_abs_error": max(abs(e) for e in errors),
                           "errors": errors})
        print(f"  {name:18s} " + "  ".join(
            f"{r['sigma']:g}: {100 * r['ours_error']:+.1f}%" for r in rows if r["image"] == name)
            + f"   ({time.perf_counter() - start:.1f} s)", file=sys.stderr, flush=True)
    return {"rows": rows, "seeds": spread, "clean": clean_rows}


def summary(result: dict[str, Any], sigmas: list[float]) -> dict[str, Any]:
    rows = result["rows"]
    worst = max(rows, key=lambda r: abs(r["ours_error"]))
    out: dict[str, Any] = {
        "target": TARGET,
        "worst": {"image": worst["image"], "sigma": worst["sigma"],
                  "error": worst["ours_error"]},
        "within_target": sum(abs(r["ours_error"]) <= TARGET for r in rows),
        "cases": len(rows),
        "misses": [f"{r['image']} sigma {r['sigma']:g}" for r in rows
                   if abs(r["ours_error"]) > TARGET],
        "worst_per_sigma": {str(s): max(abs(r["ours_error"]) for r in rows if r["sigma"] == s)
                            for s in sigmas},
        "seeds_misses": [f"{r['image']} sigma {r['sigma']:g}" for r in result["seeds"]
                         if r["largest_abs_error"] > TARGET],
    }
    if rows[0]["skimage"] is not None:
        other = max(rows, key=lambda r: abs(r["skimage_error"]))
        out["skimage_worst"] = {"image": other["image"], "sigma": other["sigma"],
                                "error": other["skimage_error"]}
        out["skimage_within_target"] = sum(abs(r["skimage_error"]) <= TARGET for r in rows)
    return out


def _values(values: list[float] | None) -> str:
    if values is None:
        return "—"
    return " / ".join(f"{v:.2f}" for v in values)


def _percent(error: float | None) -> str:
    if error is None:
        return "—"
    text = f"{100 * error:+.1f} %"
    return f"**{text}**" if abs(error) > TARGET else text


def markdown(result: dict[str, Any], info: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [
        f"Gaussian noise of σ = {', '.join(f'{x:g}' for x in info['sigmas'])} (0–255 units, "
        f"not clipped), seed {info['seed']}; images from {info['images']}; clpatch on "
        f"{info['device']}; scikit-image {info['skimage_version'] or 'not installed'}.",
        "Colour images: one estimate per channel (R / G / B); the error is the channel "
        "farthest from σ. Errors beyond ±10 % in bold.", "",
        f"clpatch: worst error {100 * s['worst']['error']:+.1f} % ({s['worst']['image']}, "
        f"σ = {s['worst']['sigma']:g}); {s['within_target']} of {s['cases']} cases within "
        f"10 %" + (f" (misses: {', '.join(s['misses'])})" if s["misses"] else "") + ".",
    ]
    if "skimage_worst" in s:
        lines.append(f"scikit-image: worst error {100 * s['skimage_worst']['error']:+.1f} % "
                     f"({s['skimage_worst']['image']}, σ = {s['skimage_worst']['sigma']:g}); "
                     f"{s['skimage_within_target']} of {s['cases']} cases within 10 %.")
    lines += ["", "| image | size | σ | clpatch | error | scikit-image | error |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["rows"]:
        shape = r["shape"]
        size = f"{shape[1]}×{shape[0]}" + (f"×{shape[2]}" if len(shape) == 3 else "")
        lines.append(f"| {r['image']} | {size} | {r['sigma']:g} | {_values(r['ours'])} | "
                     f"{_percent(r['ours_error'])} | {_values(r['skimage'])} | "
                     f"{_percent(r['skimage_error'])} |")
    seeds = result["seeds"][0]["seeds"]
    lines += ["", f"### clpatch over {seeds} seeds: largest |error| per image and σ", "",
              "| image | " + " | ".join(f"σ = {x:g}" for x in info["sigmas"]) + " |",
              "| --- | " + " | ".join("---:" for _ in info["sigmas"]) + " |"]
    for name in dict.fromkeys(r["image"] for r in result["seeds"]):
        cells = [next(r for r in result["seeds"] if r["image"] == name and r["sigma"] == x)
                 for x in info["sigmas"]]
        lines.append(f"| {name} | " + " | ".join(
            _percent(c["largest_abs_error"]).replace("+", "") for c in cells) + " |")
    lines += ["", "### Estimates on the clean images (noise and fine texture the image "
              "already holds)", "", "| image | clpatch | scikit-image |", "| --- | ---: | ---: |"]
    for r in result["clean"]:
        lines.append(f"| {r['image']} | {_values(r['ours'])} | {_values(r['skimage'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=Path, default=None)
    parser.add_argument("--sigmas", type=float, nargs="+", default=[5.0, 10.0, 20.0, 40.0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=5,
                        help="seeds clpatch runs on for the spread table (including --seed)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args(argv)
    folder = args.images or next(p for p in DEFAULT_FOLDERS if p.is_dir())
    images = load_images(folder, args.only, np.float64)
    if not images:
        parser.error(f"no PNG images in {folder}")
    runtime = clpatch.Runtime(args.device)
    if skimage_estimate is None:
        print("scikit-image is not installed: its columns are skipped "
              "(pip install scikit-image PyWavelets)", file=sys.stderr)
    start = time.perf_counter()
    result = measure(images, args.sigmas, args.seed, max(1, args.seeds), runtime)
    result["summary"] = summary(result, args.sigmas)
    try:
        import skimage
        version = skimage.__version__
    except ImportError:
        version = None
    shown = folder.resolve()
    info = {
        "date": time.strftime("%Y-%m-%d"), "sigmas": args.sigmas, "seed": args.seed,
        "seeds": args.seeds,
        "images": ("shared/data/images/" if shown.name == "images" and shown.parent.name == "data"
                   else str(folder)),
        "device": f"{runtime.device.name.strip()} ({runtime.device.platform.name.strip()})",
        "skimage_version": version, "python": platform.python_version(),
        "clpatch": clpatch.__version__, "wall_s": time.perf_counter() - start,
    }
    result["info"] = info
    text = markdown(result, info)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
