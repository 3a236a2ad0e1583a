"""Grow a texture larger than its sample with exhaustive k-nearest-patch search (clpatch.knn).

The application that Tang, Xiao and Fan use to show their GPU similar-patch search ("GPU-based
fast search of similar patches in images", in Chinese; shared/papers/) is texture synthesis:
finding, for regions of the image being made, the most similar regions of the sample. This
script does it in two stages, both driven by `clpatch.knn`:

1. k-coherence synthesis in scan order (the candidate sets of Tong et al., 2002).
   `clpatch.knn(sample)` -- the sample against itself, every pixel's patch a query -- gives
   each sample position its k most similar positions. Every output pixel remembers the
   sample position it was copied from. For the next pixel in scan order, each already
   synthesised neighbour at offset d proposes the sample position that would continue it
   (its own source minus d), together with that position's k similar ones, plus one random
   position; the candidate whose causal (L-shaped) neighbourhood in the sample is closest in
   L2 to the output's already synthesised neighbourhood wins, and its pixel is copied.
2. A few passes of patch-based optimisation: `clpatch.knn(output, sample)` finds, exactly,
   the nearest sample patch of every output patch on a grid of step patch // 2, and the
   output becomes the average of those sample patches where they overlap.

Run it with the project's Python (the default sample is a 64x64 crop of tests/data/brick.png
reduced to a quarter of its size, or of shared/data/images/brick.png when that
exists):

    python examples/texture_synthesis.py                       # -> texture.png, 128x128
    python examples/texture_synthesis.py my_sample.png --out big.png --size 200 300 -k 8
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

import clpatch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SAMPLES = (REPO.parent / "shared" / "data" / "images" / "brick.png",
                   REPO / "tests" / "data" / "brick.png")


def default_sample(size: int = 64) -> np.ndarray:
    """A `size` x `size` crop of brick.png reduced to a quarter of its size (about eight
    bricks wide, two high: a 7x7 patch then sees the mortar's structure)."""
    path = next(p for p in DEFAULT_SAMPLES if p.is_file())
    image = Image.open(path).convert("L")
    image = image.resize((image.width // 4, image.height // 4), Image.Resampling.BOX)
    top, left = (image.height - size) // 2, (image.width - size) // 2
    return np.asarray(image.crop((left, top, left + size, top + size)), dtype=np.float32)


def load_sample(path: str | Path) -> np.ndarray:
    """An image file as float32 (H, W) grayscale or (H, W, 3) RGB, values 0-255."""
    image = Image.open(path)
    image = image.convert("L" if image.mode in ("1", "L", "LA", "I", "I;16", "F") else "RGB")
    return np.asarray(image, dtype=np.float32)


def _plain(image: np.ndarray) -> np.ndarray:
    """(H, W, 1) as (H, W): what knn is given for grayscale."""
    return image[..., 0] if image.shape[-1] == 1 else image


def _causal_offsets(radius: int) -> np.ndarray:
    """(dy, dx) of the L-shaped neighbourhood: the rows above and the pixels to the left."""
    return np.array([(dy, dx) for dy in range(-radius, 1) for dx in range(-radius, radius + 1)
                     if dy < 0 or dx < 0], dtype=np.int64)


def k_coherence(sample: np.ndarray, shape: tuple[int, int], patch: int, k: int,
                rng: np.random.Generator, runtime: clpatch.Runtime | None) -> np.ndarray:
    """Scan-order k-coherence synthesis of an output of `shape` from `sample` (h, w, C)."""
    h, w, channels = sample.shape
    r = patch // 2
    gh, gw = h - patch + 1, w - patch + 1  # valid patch positions = valid source centres - r
    # The k-coherence candidate sets: the k nearest sample positions of every sample position.
    matches = clpatch.knn(_plain(sample), patch_size=patch, k=k, step=1, runtime=runtime)
    nearest = np.asarray(matches.positions, dtype=np.int64)
    similar = (nearest[..., 0] * gw + nearest[..., 1]).reshape(gh * gw, k)
    offsets = _causal_offsets(r)
    # Every source's causal neighbourhood in the sample: (gh * gw, len(offsets), C).
    cy, cx = np.divmod(np.arange(gh * gw), gw)
    neighbourhoods = sample[cy[:, None] + r + offsets[:, 0], cx[:, None] + r + offsets[:, 1]]

    height, width = shape
    out = np.zeros((height + 2 * r, width + 2 * r, channels), np.float32)  # margin r all round
    source = np.full((height + 2 * r, width + 2 * r), -1, np.int64)  # -1: not synthesised yet
    for y in range(r, height + r):
        rows = y + offsets[:, 0]
        for x in range(r, width + r):
            cols = x + offsets[:, 1]
            around = source[rows, cols]
            done = around >= 0
            sy, sx = np.divmod(around[done], gw)
            sy, sx = sy - offsets[done, 0], sx - offsets[done, 1]  # continue each neighbour
            fits = (sy >= 0) & (sy < gh) & (sx >= 0) & (sx < gw)
            continued = sy[fits] * gw + sx[fits]
            candidates = np.unique(np.concatenate(
                (continued, similar[continued].ravel(), rng.integers(0, gh * gw, 1))))
            if done.any():
                diff = neighbourhoods[candidates][:, done] - out[rows[done], cols[done]]
                best = candidates[np.argmin(np.einsum("mnc,mnc->m", diff, diff))]
            else:
                best = candidates[-1]
            source[y, x] = best
            out[y, x] = sample[best // gw + r, best % gw + r]
    return out[r:height + r, r:width + r]


def optimise(texture: np.ndarray, sample: np.ndarray, patch: int, passes: int,
             runtime: clpatch.Runtime | None) -> np.ndarray:
    """Replace `texture` `passes` times by the overlap-average of the exact nearest sample
    patches of its patches (grid step patch // 2)."""
    step = max(patch // 2, 1)
    offs = np.arange(patch)
    for _ in range(passes):
        matches = clpatch.knn(_plain(texture), _plain(sample), patch_size=patch, k=1, step=step,
                              runtime=runtime)
        best = np.asarray(matches.positions)[:, :, 0]  # (gy, gx, 2) top-left corners
        total = np.zeros_like(texture)
        count = np.zeros(texture.shape[:2] + (1,), np.float32)
        for i, qy in enumerate(matches.grid_y):
            for j, qx in enumerate(matches.grid_x):
                sy, sx = best[i, j]
                total[qy:qy + patch, qx:qx + patch] += sample[sy + offs[:, None], sx + offs]
                count[qy:qy + patch, qx:qx + patch] += 1
        texture = total / count
    return texture


def synthesise(sample: np.ndarray, shape: tuple[int, int], patch: int = 7, k: int = 8,
               passes: int = 2, seed: int = 0,
               runtime: clpatch.Runtime | None = None) -> np.ndarray:
    """A texture of `shape` (rows, cols) grown from `sample` ((h, w) or (h, w, C)), float32."""
    gray = sample.ndim == 2
    sample = np.asarray(sample, np.float32).reshape(sample.shape[:2] + (-1,))
    if patch < 3 or patch % 2 == 0:
        raise ValueError(f"patch must be odd and >= 3, got {patch}")
    if min(sample.shape[:2]) < patch or min(shape) < patch:
        raise ValueError(f"sample {sample.shape[:2]} and size {shape} must both be at least "
                         f"patch={patch} in each axis")
    rng = np.random.default_rng(seed)
    texture = k_coherence(sample, shape, patch, k, rng, runtime)
    texture = optimise(texture, sample, patch, passes, runtime)
    return texture[..., 0] if gray else texture


def main(argv: Sequence[str] | None = None) -> Path:
    """Command line: synthesise and write the PNG; returns its path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sample", nargs="?", default=None,
                        help="sample texture image (default: a 64x64 crop of brick.png)")
    parser.add_argument("--out", default="texture.png", help="output PNG (default texture.png)")
    parser.add_argument("--size", type=int, nargs=2, metavar=("H", "W"), default=None,
                        help="output rows and columns (default: twice the sample's)")
    parser.add_argument("--patch", type=int, default=7, help="patch side, odd (default 7)")
    parser.add_argument("-k", type=int, default=8, help="k-coherence candidates (default 8)")
    parser.add_argument("--passes", type=int, default=2,
                        help="patch-optimisation passes after the scan (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--device", default=None, help="OpenCL device, as clpatch.Runtime "
                        "takes it (default: clpatch's choice)")
    args = parser.parse_args(argv)

    sample = default_sample() if args.sample is None else load_sample(args.sample)
    shape = tuple(args.size) if args.size else (2 * sample.shape[0], 2 * sample.shape[1])
    runtime = clpatch.Runtime(args.device) if args.device else None
    start = time.perf_counter()
    try:
        texture = synthesise(sample, shape, args.patch, args.k, args.passes, args.seed,
                             runtime)
    except ValueError as exc:
        parser.error(str(exc))
    seconds = time.perf_counter() - start
    out = Path(args.out)
    Image.fromarray(np.clip(np.rint(texture), 0, 255).astype(np.uint8)).save(out)
    print(f"{sample.shape[0]}x{sample.shape[1]} sample -> {out} ({shape[0]}x{shape[1]}, H x W), "
          f"patch {args.patch}, k {args.k}, {args.passes} passes: {seconds:.1f} s")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
