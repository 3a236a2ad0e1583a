"""Draw the README's pictures: denoising crops with their PSNR, a colour-coded nearest-neighbour
field, and the autotune speed-up per request.

Writes three PNGs into --out (default docs/gallery):

- denoise.png: rows camera (grayscale), astronaut (colour) and a synthetic grayscale video (a
  crop of coins.png shifted by a few pixels per frame); columns clean / noisy (sigma 20, seeded;
  the methods get the unclipped noisy image, only the picture is clipped) / clpatch.nlmeans /
  clpatch.bm3d (CBM3D for colour) / clpatch.vbm3d (video row). Each crop is labelled with the PSNR
  of the whole image (the whole middle frame for the video) against the clean one.
- nnf.png: clpatch.nnf from motorcycle_left.png to motorcycle_right.png, the offset of every
  first match drawn as a colour (direction as hue, length as saturation; wheel in the corner),
  between the left image and clpatch.reconstruct's rebuilding of it from the right one.
- autotune.png: one bar per search request of the committed autotune results
  (benchmarks/results/tuning_*.json): the rule's kernel time over the tuned one.

Pillow only (no plotting library). Images come from --images: shared/data/images when it
exists, else tests/data; --quick takes tests/data and smaller crops (under a minute on a
2-core CPU through PoCL):

    python examples/gallery.py                 # -> docs/gallery/{denoise,nnf,autotune}.png
    python examples/gallery.py --quick --out /tmp/gallery
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

import clpatch

REPO = Path(__file__).resolve().parents[1]
SHARED_IMAGES = REPO.parent / "shared" / "data" / "images"
TEST_IMAGES = REPO / "tests" / "data"
RESULTS = REPO / "benchmarks" / "results"
SIGMA = 20.0
GAP = 4
LABEL_H = 14
BACKGROUND = (255, 255, 255)
INK = (0, 0, 0)
FONT = ImageFont.load_default()


def load(folder: Path, name: str) -> np.ndarray:
    """An image as float32, (H, W) grayscale or (H, W, 3) RGB, values 0-255."""
    image = Image.open(folder / f"{name}.png")
    image = image.convert("RGB" if image.mode in ("RGB", "RGBA", "P") else "L")
    return np.asarray(image, dtype=np.float32)


def psnr(clean: np.ndarray, estimate: np.ndarray) -> float:
    mse = float(np.mean((np.asarray(estimate, np.float64) - clean) ** 2))
    return 10 * np.log10(255.0 ** 2 / mse)


def to_pil(image: np.ndarray) -> Image.Image:
    """Clipped to 0-255 for display only."""
    return Image.fromarray(np.clip(np.rint(image), 0, 255).astype(np.uint8)).convert("RGB")


def crop(image: np.ndarray, centre: tuple[float, float], size: int) -> np.ndarray:
    """A size x size crop around `centre` (fractions of height and width), inside the image."""
    h, w = image.shape[:2]
    size = min(size, h, w)
    top = int(np.clip(round(centre[0] * h - size / 2), 0, h - size))
    left = int(np.clip(round(centre[1] * w - size / 2), 0, w - size))
    return image[top:top + size, left:left + size]


def save_small(canvas: Image.Image, path: Path) -> Path:
    """An 8-bit palette PNG (the pictures stay well under 300 KB)."""
    canvas.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        path, optimize=True)
    return path


def noisy_version(clean: np.ndarray, seed: int) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(0.0, SIGMA, clean.shape).astype(np.float32)
    return clean + noise


def synthetic_video(image: np.ndarray, size: int, frames: int) -> np.ndarray:
    """(frames, size, size): a crop of `image` moving by (1, 2) pixels a frame."""
    return np.stack([image[t:t + size, 2 * t:2 * t + size] for t in range(frames)])


def denoise_rows(folder: Path, size: int, quick: bool) -> list[tuple[str, list]]:
    """[(row title, [(label, crop or None), ...])] for the denoising picture."""
    rows = []
    for seed, (name, centre) in enumerate((("camera", (0.3, 0.5)), ("astronaut", (0.3, 0.45)))):
        clean = load(folder, name)
        noisy = noisy_version(clean, seed)
        results = [("clean", clean), (f"noisy {psnr(clean, noisy):.2f} dB", noisy)]
        for method, label in ((clpatch.nlmeans, "NL-means"),
                              (clpatch.bm3d, "CBM3D" if clean.ndim == 3 else "BM3D")):
            out = method(noisy, SIGMA)
            results.append((f"{label} {psnr(clean, out):.2f} dB", out))
        cells = [(label, crop(image, centre, size)) for label, image in results]
        rows.append((f"{name} ({'colour' if clean.ndim == 3 else 'grayscale'})", cells + [None]))

    frames = 5 if quick else 9
    video = synthetic_video(load(folder, "coins"), size + 16, frames)
    noisy = noisy_version(video, 7)
    t = frames // 2
    cells = [("clean", video[t]), (f"noisy {psnr(video[t], noisy[t]):.2f} dB", noisy[t])]
    for method, label in ((clpatch.nlmeans, "NL-means"), (clpatch.bm3d, "BM3D")):
        out = method(noisy[t], SIGMA)
        cells.append((f"{label} {psnr(video[t], out):.2f} dB", out))
    out = clpatch.vbm3d(noisy, SIGMA)[t]
    cells.append((f"VBM3D {psnr(video[t], out):.2f} dB", out))
    rows.append((f"video, frame {t} of {frames}", [(label, crop(image, (0.5, 0.5), size))
                                                   for label, image in cells]))
    return rows


def draw_denoise(rows: list[tuple[str, list]], size: int, path: Path) -> Path:
    columns = max(len(cells) for _, cells in rows)
    row_h = LABEL_H + size + LABEL_H + GAP
    canvas = Image.new("RGB", (columns * (size + GAP) + GAP, len(rows) * row_h + 2 * LABEL_H),
                       BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    draw.text((GAP, 2), f"Gaussian noise sigma {SIGMA:g}; PSNR over the whole image", fill=INK,
              font=FONT)
    for r, (title, cells) in enumerate(rows):
        y = 2 * LABEL_H + r * row_h
        draw.text((GAP, y), title, fill=INK, font=FONT)
        for c, cell in enumerate(cells):
            if cell is None:
                continue
            label, image = cell
            x = GAP + c * (size + GAP)
            canvas.paste(to_pil(image), (x, y + LABEL_H))
            draw.text((x, y + LABEL_H + size + 1), label, fill=INK, font=FONT)
    return save_small(canvas, path)


def offset_colours(dy: np.ndarray, dx: np.ndarray, scale: float) -> np.ndarray:
    """uint8 RGB: direction as hue, length / scale as saturation (white: no offset)."""
    hue = (np.arctan2(dy, dx) / (2 * np.pi)) % 1.0
    sat = np.clip(np.hypot(dy, dx) / scale, 0.0, 1.0)
    hsv = np.stack([hue * 255, sat * 255, np.full_like(hue, 255)], axis=-1)
    return np.array(Image.fromarray(np.rint(hsv).astype(np.uint8), "HSV").convert("RGB"))


def colour_wheel(radius: int, scale: float) -> Image.Image:
    yy, xx = np.mgrid[-radius:radius + 1, -radius:radius + 1].astype(np.float32)
    wheel = offset_colours(yy * scale / radius, xx * scale / radius, scale)
    wheel[np.hypot(yy, xx) > radius] = BACKGROUND
    return Image.fromarray(wheel)


def draw_nnf(folder: Path, max_width: int, path: Path, patch_size: int = 8) -> tuple[Path, str]:
    a, b = load(folder, "motorcycle_left"), load(folder, "motorcycle_right")
    factor = max(1, -(-a.shape[1] // max_width))
    if factor > 1:  # compute the field at display size
        a, b = (np.asarray(Image.fromarray(x.astype(np.uint8)).reduce(factor), np.float32)
                for x in (a, b))
    m = clpatch.nnf(a, b, patch_size=patch_size, seed=0)
    rebuilt = clpatch.reconstruct(m, b)
    channels = a.shape[2] if a.ndim == 3 else 1
    rms = float(np.sqrt(m.distances[..., 0].mean() / (patch_size ** 2 * channels)))
    first = m.positions[:, :, 0, :].astype(np.float32)
    gy, gx = np.mgrid[:first.shape[0], :first.shape[1]]
    dy, dx = first[..., 0] - gy, first[..., 1] - gx
    scale = max(2 * float(np.median(np.hypot(dy, dx))), 1.0)  # the typical offset: half-saturated
    field = np.full(a.shape[:2] + (3,), 255, np.uint8)  # each colour at its patch's centre
    c = patch_size // 2
    field[c:c + first.shape[0], c:c + first.shape[1]] = offset_colours(dy, dx, scale)

    h, w = a.shape[:2]
    radius = max(16, min(h, w) // 8)
    canvas = Image.new("RGB", (3 * (w + GAP) + 2 * radius + 4 * GAP, h + 3 * LABEL_H + GAP),
                       BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    draw.text((GAP, 2), f"clpatch.nnf(left, right, patch_size={patch_size}), {w}x{h} RGB"
              + (f" (reduced {factor}x)" if factor > 1 else "") + "; "
              + f"first matches' RMS difference {rms:.1f} (0-255 scale)", fill=INK,
              font=FONT)
    labels = ("left image", f"offset to each patch's match (rim {scale:.0f} px)",
              f"left rebuilt from right, PSNR {psnr(a, rebuilt):.2f} dB")
    for i, (label, image) in enumerate(zip(labels, (to_pil(a), Image.fromarray(field),
                                                   to_pil(rebuilt)), strict=True)):
        x = GAP + i * (w + GAP)
        canvas.paste(image, (x, 2 * LABEL_H))
        draw.text((x, 2 * LABEL_H + h + 1), label, fill=INK, font=FONT)
    wheel_xy = (3 * (w + GAP) + 2 * GAP, 2 * LABEL_H + LABEL_H)
    canvas.paste(colour_wheel(radius, scale), wheel_xy)
    draw.text((wheel_xy[0], wheel_xy[1] - LABEL_H), "offset", fill=INK, font=FONT)
    draw.text((wheel_xy[0] + 2 * radius - 10, wheel_xy[1] + radius - 6), "+x", fill=INK, font=FONT)
    draw.text((wheel_xy[0] + radius - 5, wheel_xy[1] + 2 * radius + 1), "+y", fill=INK, font=FONT)
    return save_small(canvas, path), f"{w}x{h}"


VARIANT_COLOURS = {"naive": (214, 39, 40), "convolution": (31, 119, 180),
                   "square": (44, 160, 44), "column": (255, 127, 14), "same": (150, 150, 150)}


def autotune_rows(path: Path) -> tuple[str, list[tuple[tuple, float, str]]]:
    """(device, [((p, step, n, window, channels), rule ms / tuned ms, tuned variant)]) for every
    search request of a tuning file written by `clpatch autotune`."""
    data = json.loads(path.read_text())
    rows = []
    for key, entry in data["entries"].items():
        parts = key.split(":")
        if parts[0] != "search":
            continue
        request = tuple(int(part[1:]) for part in parts[1:6])  # p16:s1:n16:w21:c1
        variant = ("same" if entry["config"] == entry["rule_config"]
                   else entry["config"]["variant"])
        rows.append((request, entry["rule_time_ms"] / entry["time_ms"], variant))
    return data["device"], sorted(rows)


def draw_autotune(path: Path, results: Path) -> tuple[Path, int]:
    source = sorted(results.glob("tuning_*.json"))[0]
    device, rows = autotune_rows(source)
    bar, top = 3, max(2.0, max(s for _, s, _ in rows))
    plot_h, left, plot_top = 240, 44, 3 * LABEL_H
    width = left + len(rows) * bar + 2 * GAP
    canvas = Image.new("RGB", (width, plot_top + plot_h + 5 * LABEL_H), BACKGROUND)
    draw = ImageDraw.Draw(canvas)

    def y_of(speedup: float) -> int:
        return plot_top + plot_h - round((speedup - 1.0) / (top - 1.0) * plot_h)

    draw.text((GAP, 2), f"Autotune on {device}: rule's kernel time / tuned kernel time, "
              f"one bar per search request", fill=INK, font=FONT)
    draw.text((GAP, 2 + LABEL_H), "(requests sorted by patch size, step, n, window, channels; "
              "colour: the tuned variant; no bar: the rule's choice kept)", fill=INK, font=FONT)
    for tick in np.arange(1.0, top + 1e-9, 0.25):
        y = y_of(tick)
        draw.line((left - 3, y, width - GAP, y), fill=(225, 225, 225) if tick > 1 else INK)
        draw.text((GAP, y - 6), f"{tick:.2f}x", fill=INK, font=FONT)
    previous_p = None
    for i, (request, speedup, variant) in enumerate(rows):
        x = left + i * bar
        if request[0] != previous_p:
            previous_p = request[0]
            draw.line((x, plot_top, x, plot_top + plot_h + 3), fill=(120, 120, 120))
            draw.text((x + 2, plot_top + plot_h + 3), f"p {request[0]}", fill=INK, font=FONT)
        draw.rectangle((x, y_of(speedup), x + bar - 2, y_of(1.0)), fill=VARIANT_COLOURS[variant])
    x = left
    legend_y = plot_top + plot_h + 2 * LABEL_H
    for variant, colour in VARIANT_COLOURS.items():
        if variant == "same":
            continue
        draw.rectangle((x, legend_y + 2, x + 9, legend_y + 11), fill=colour)
        label = variant
        draw.text((x + 13, legend_y), label, fill=INK, font=FONT)
        x += 13 + round(draw.textlength(label, font=FONT)) + 16
    speedups = [s for _, s, _ in rows]
    draw.text((GAP, legend_y + 1.5 * LABEL_H), f"Data: {source.relative_to(REPO)} "
              f"({len(rows)} requests, median {np.median(speedups):.2f}x, largest "
              f"{max(speedups):.2f}x; table in benchmarks/results/autotune_*.md)", fill=INK, font=FONT)
    return save_small(canvas, path), len(rows)


def main(argv: Sequence[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, default=None,
                        help="folder of the PNGs (default: shared/data/images, else tests/data)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "gallery")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="folder holding the autotune results (tuning_*.json)")
    parser.add_argument("--quick", action="store_true",
                        help="tests/data images and smaller crops (under a minute on a small CPU)")
    args = parser.parse_args(argv)
    folder = args.images or (SHARED_IMAGES if SHARED_IMAGES.is_dir() and not args.quick
                             else TEST_IMAGES)
    size, nnf_width = (96, 256) if args.quick else (160, 384)
    args.out.mkdir(parents=True, exist_ok=True)

    written = []
    start = time.perf_counter()
    path = draw_denoise(denoise_rows(folder, size, args.quick), size, args.out / "denoise.png")
    written.append(path)
    print(f"{path} ({path.stat().st_size / 1024:.0f} KB, {size}x{size} crops from {folder}, "
          f"{time.perf_counter() - start:.1f} s)")
    start = time.perf_counter()
    path, shape = draw_nnf(folder, nnf_width, args.out / "nnf.png")
    written.append(path)
    print(f"{path} ({path.stat().st_size / 1024:.0f} KB, motorcycle pair at {shape}, "
          f"{time.perf_counter() - start:.1f} s)")
    start = time.perf_counter()
    path, count = draw_autotune(args.out / "autotune.png", args.results)
    written.append(path)
    print(f"{path} ({path.stat().st_size / 1024:.0f} KB, {count} requests, "
          f"{time.perf_counter() - start:.1f} s)")
    return written


if __name__ == "__main__":
    main(sys.argv[1:])
