"""The user guide's pictures, computed when the site is built: one before/after picture per
method, on small crops of the project's test images (tests/data), on the default OpenCL
device (PoCL on a CPU is enough: every figure is a few seconds there once the kernels are
built). They are written into the build tree, never committed; the captions carry the numbers
measured on them (PSNR, matching distances).

    python docs/_ext/figures.py OUTDIR [NAME ...]     # all figures (or those named) into OUTDIR

`clpatch_docs.py` calls `make(name, outdir)` from the page's `clpatch-figure` directive.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

import clpatch
from clpatch.io.noise import synthetic_burst

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "tests" / "data"
SIGMA = 20.0
SIZE = 128     # the side of every crop, in pixels
ZOOM = 2       # how much each panel is enlarged (nearest neighbour)


def _gallery():
    """examples/gallery.py, whose drawing helpers (labels, PSNR, palette PNGs) these share."""
    spec = importlib.util.spec_from_file_location("clpatch_gallery", REPO / "examples" / "gallery.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


G = _gallery()


def crop(name: str, top: int, left: int, size: int = SIZE) -> np.ndarray:
    return G.load(IMAGES, name)[top:top + size, left:left + size]


def noisy_version(clean: np.ndarray, seed: int = 0) -> np.ndarray:
    return clean + np.random.default_rng(seed).normal(0, SIGMA, clean.shape).astype(np.float32)


def panels(cells: list[tuple[str, Image.Image]], path: Path, title: str, zoom: int = ZOOM) -> Path:
    """A row of labelled pictures, each enlarged `zoom` times, under a title line."""
    cells = [(label, im.resize((im.width * zoom, im.height * zoom), Image.Resampling.NEAREST))
             for label, im in cells]
    gap, label_h = G.GAP, G.LABEL_H
    width = sum(im.width + gap for _, im in cells) + gap
    height = max(im.height for _, im in cells) + 3 * label_h + gap
    canvas = Image.new("RGB", (width, height), G.BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    draw.text((gap, 2), title, fill=G.INK, font=G.FONT)
    x = gap
    for label, im in cells:
        canvas.paste(im, (x, 2 * label_h))
        draw.text((x, 2 * label_h + im.height + 1), label, fill=G.INK, font=G.FONT)
        x += im.width + gap
    return G.save_small(canvas, path)


def labelled(clean: np.ndarray, images: list[tuple[str, np.ndarray]]) -> list[tuple[str, Image.Image]]:
    """(label with the PSNR against `clean`, picture) for each image."""
    return [(f"{label} {G.psnr(clean, im):.2f} dB", G.to_pil(im)) for label, im in images]


def before_after(name: str, clean: np.ndarray, noisy: np.ndarray,
                 results: list[tuple[str, np.ndarray]], path: Path,
                 zoom: int = ZOOM) -> tuple[Path, str]:
    cells = [("clean", G.to_pil(clean))] + labelled(clean, [("noisy", noisy), *results])
    title = f"{name}, sigma {SIGMA:g}, PSNR against the clean crop"
    caption = "; ".join(label for label, _ in cells[1:])
    return panels(cells, path, title, zoom), caption


def face() -> np.ndarray:
    """The face and the camera of camera.png: 128x128, float32 0-255."""
    return crop("camera", 90, 170)


# The search figures and the burst run on 64x64 images, the size of the image the snippets
# of these pages run on in tests/test_docs_examples.py: the ANN's kernels depend on the size
# of its last tiles, and `make test` (before `make docs` in CI) has then built them; a cold
# build of the ANN's kernels takes minutes on a CPU.
SMALL = 64


def scene() -> np.ndarray:
    """The whole of camera.png reduced 8 times: 64x64, float32 0-255."""
    return G.load(IMAGES, "camera").reshape(SMALL, 8, SMALL, 8).mean(axis=(1, 3))


#: The reference patch the search figures show, (y, x): on the tripod's leg.
REFERENCE = (44, 36)


def grid_index(m, position: tuple[int, int]) -> tuple[int, int]:
    """The grid cell of the reference patch at `position`."""
    return (int(np.flatnonzero(np.asarray(m.grid_y) == position[0])[0]),
            int(np.flatnonzero(np.asarray(m.grid_x) == position[1])[0]))


def nlmeans(path: Path) -> tuple[Path, str]:
    clean = face()
    noisy = noisy_version(clean)
    return before_after("camera.png, 128x128 crop", clean, noisy, [
        ("nlmeans", clpatch.nlmeans(noisy, SIGMA)),
        ("nlmeans p5 s1", clpatch.nlmeans(noisy, SIGMA, patch_size=5, step=1))], path)


def bm3d(path: Path) -> tuple[Path, str]:
    clean = face()
    noisy = noisy_version(clean)
    return before_after("camera.png, 128x128 crop", clean, noisy, [
        ("bm3d fast", clpatch.bm3d(noisy, SIGMA)),
        ("bm3d reference", clpatch.bm3d(noisy, SIGMA, preset="reference"))], path)


def cbm3d(path: Path) -> tuple[Path, str]:
    clean = crop("astronaut", 20, 70)
    noisy = noisy_version(clean)
    return before_after("astronaut.png 128x128 RGB", clean, noisy, [
        ("nlmeans", clpatch.nlmeans(noisy, SIGMA)), ("CBM3D", clpatch.bm3d(noisy, SIGMA))], path)


def moving_video(frames: int = 8, size: int = 96) -> np.ndarray:
    """A crop of coins.png moving (1, 2) pixels a frame: (frames, size, size)."""
    image = G.load(IMAGES, "coins")
    return np.stack([image[40 + t:40 + t + size, 60 + 2 * t:60 + 2 * t + size] for t in range(frames)])


def vbm3d(path: Path) -> tuple[Path, str]:
    video = moving_video()
    noisy = noisy_version(video, 1)
    t = len(video) // 2
    out = clpatch.vbm3d(noisy, SIGMA)
    return before_after(f"coins.png moving, frame {t} of {len(video)}", video[t], noisy[t], [
        ("bm3d (frame alone)", clpatch.bm3d(noisy[t], SIGMA)), ("vbm3d", out[t])], path)


def burst(path: Path) -> tuple[Path, str]:
    clean = face().reshape(SMALL, 2, SMALL, 2).mean(axis=(1, 3))
    frames, _ = synthetic_burst(clean, 8, SIGMA, seed=0)
    return before_after("camera.png reduced to 64x64, 8-frame shaken burst, frame 0", clean,
                        frames[0], [("bm3d (frame 0 alone)", clpatch.bm3d(frames[0], SIGMA)),
                                    ("burst_denoise", clpatch.burst_denoise(frames, SIGMA))],
                        path, zoom=2 * ZOOM)


def _boxes(image: np.ndarray, ref: tuple[int, int], found: np.ndarray, p: int,
           zoom: int = 2 * ZOOM) -> Image.Image:
    """The image enlarged `zoom` times, the reference patch in red, its matches in green."""
    im = G.to_pil(image)
    im = im.resize((im.width * zoom, im.height * zoom), Image.Resampling.NEAREST)
    draw = ImageDraw.Draw(im)

    def box(y: int, x: int, **style) -> None:
        draw.rectangle([x * zoom, y * zoom, (x + p) * zoom - 1, (y + p) * zoom - 1], **style)

    for y, x in found[1:]:
        box(int(y), int(x), outline=(0, 200, 0))
    box(*ref, outline=(255, 0, 0), width=2)
    return im


def _stack(image: np.ndarray, found: np.ndarray, p: int, columns: int = 4) -> Image.Image:
    """The reference patch and its matches side by side, in the order found."""
    rows = -(-len(found) // columns)
    sheet = np.full((rows * (p + 1) + 1, columns * (p + 1) + 1), 255, np.float32)
    for i, (y, x) in enumerate(found):
        r, c = divmod(i, columns)
        sheet[1 + r * (p + 1):1 + r * (p + 1) + p, 1 + c * (p + 1):1 + c * (p + 1) + p] = \
            image[y:y + p, x:x + p]
    return G.to_pil(sheet).resize((sheet.shape[1] * 6, sheet.shape[0] * 6), Image.Resampling.NEAREST)


def matches_picture(label: str, image: np.ndarray, m, p: int, path: Path,
                    note: str) -> tuple[Path, str]:
    ref_index = grid_index(m, REFERENCE)
    positions = np.asarray(m.positions)[ref_index]
    distances = np.asarray(m.distances)[ref_index]
    ref = (int(np.asarray(m.grid_y)[ref_index[0]]), int(np.asarray(m.grid_x)[ref_index[1]]))
    k = len(positions)
    cells = [(f"reference (red), {k - 1} matches (green)", _boxes(image, ref, positions, p)),
             (f"the {k}, nearest first", _stack(image, positions, p))]
    title = f"{label}, camera.png reduced to 64x64, patch {p}, {note}"
    out = panels(cells, path, title, zoom=1)
    rms = np.sqrt(distances / p ** 2)
    return out, (f"{k} matches of the patch at (y, x) = {ref}: RMS difference per pixel "
                 f"{rms[1]:.1f} (nearest other) to {rms[-1]:.1f} (k-th), 0-255 scale")


def search(path: Path) -> tuple[Path, str]:
    image = scene()
    m = clpatch.search_patches(image, patch_size=8, step=4, window=21, k=16)
    return matches_picture("search_patches", image, m, 8, path, "window 21, k 16")


def knn(path: Path) -> tuple[Path, str]:
    image = scene()
    # Step 1, the default: the test suite builds the same kernels (a cold build of another
    # engine costs minutes on a CPU).
    m = clpatch.knn(image, patch_size=8, k=16)
    return matches_picture("knn", image, m, 8, path, "the whole image, k 16")


def ann(path: Path) -> tuple[Path, str]:
    image = scene()
    m = clpatch.ann_search(image, patch_size=8, k=16)
    return matches_picture("ann_search", image, m, 8, path, "tiles of 15, k 16")


def nnf(path: Path) -> tuple[Path, str]:
    a, b = G.load(IMAGES, "motorcycle_left"), G.load(IMAGES, "motorcycle_right")
    m = clpatch.nnf(a, b, patch_size=8, seed=0)
    rebuilt = clpatch.reconstruct(m, b)
    channels = a.shape[2] if a.ndim == 3 else 1
    rms = float(np.sqrt(np.asarray(m.distances)[..., 0].mean() / (64 * channels)))
    cells = [("a (left view)", G.to_pil(a)), ("b (right view)", G.to_pil(b)),
             (f"a rebuilt from b {G.psnr(a, rebuilt):.2f} dB", G.to_pil(rebuilt))]
    return (panels(cells, path, "nnf(a, b, patch_size=8): the 256x192 motorcycle stereo pair", zoom=1),
            f"a rebuilt from b's matched patches: PSNR {G.psnr(a, rebuilt):.2f} dB; first matches' "
            f"RMS difference {rms:.1f} per pixel (0-255 scale)")


#: name -> function(path) -> (path, caption)
FIGURES: dict[str, Callable[[Path], tuple[Path, str]]] = {
    "nlmeans": nlmeans, "bm3d": bm3d, "cbm3d": cbm3d, "vbm3d": vbm3d, "burst": burst,
    "search": search, "knn": knn, "ann": ann, "nnf": nnf,
}


def make(name: str, outdir: Path) -> tuple[Path, str]:
    """Draw figure `name` into outdir/NAME.png; returns (path, caption)."""
    outdir.mkdir(parents=True, exist_ok=True)
    return FIGURES[name](outdir / f"{name}.png")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    outdir, names = Path(argv[0]), argv[1:] or list(FIGURES)
    for name in names:
        start = time.perf_counter()
        path, caption = make(name, outdir)
        print(f"{path} ({time.perf_counter() - start:.1f} s): {caption}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
