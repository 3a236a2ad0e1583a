"""`clpatch nnf A B`: the approximate nearest-neighbour field of every patch of image A among
the patches of image B (propagation-assisted k-d trees, `clpatch.nnf`); prints a summary,
saves the field as `.npz` and, with --reconstruct, writes A rebuilt from B's patches
(`clpatch.reconstruct`). Every output is written whole or not at all, never over an input
nor, unless --overwrite, over an existing file (see `outputs`).

Exit codes (those of every command, see `common`): 2 when refused before any work: argparse's
own checks, an output refused, A or B missing or unreadable, and the ValueError or TypeError
with which `clpatch.nnf` refuses its parameters or images (it checks everything before any
work, naming the argument); 1 when the work fails (OpenCL errors, a write failing, ...).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

import numpy as np

from ..core.runtime import Runtime
from ..io.images import MODES, ImageInfo, output_format, quantize, read_array, write_image
from ..io.outputs import TemporaryOutput
from ..match.nnf.search import nnf, reconstruct
from .common import (
    ARGUMENT_ERRORS,
    UsageError,
    add_device_option,
    builds_note,
    device_line,
    open_runtime,
    seed_number,
    usage_checks,
)
from .outputs import Writing, check_npz, check_outputs

#: What the .npz holds besides the field (the parameters it was computed with).
SAVED_PARAMETERS = ("patch_size", "k", "pca_dims", "candidates", "leaf_size", "seed")


def _read(path: str, what: str) -> np.ndarray:
    with usage_checks():
        image, video = read_array(path)
    if video:
        raise UsageError(f"{what} {path}: a multi-frame file; nnf takes one image "
                           "((H, W) or (H, W, C))")
    return image


def _shape(image: np.ndarray, p: int) -> str:
    """'HxW[xC] dtype (rows x cols = N patches)' of an image for patch size p."""
    rows, cols = max(image.shape[0] - p + 1, 0), max(image.shape[1] - p + 1, 0)
    return (f"{'x'.join(str(s) for s in image.shape)} {image.dtype} ({rows} x {cols} = "
            f"{rows * cols} patches)")


def reconstruction_info(b: np.ndarray, a_shape: tuple[int, ...]) -> ImageInfo:
    """How --reconstruct writes an image of B's values at A's size: B's bit depth (8 for
    uint8 data, 16 for other integer data, float32 .npy or 8-bit images for float data) and
    B's channels as mode (L, LA, RGB, RGBA; the alpha channel is reconstructed like the
    others). The alpha here is a placeholder of the right size, for `output_format`."""
    channels = 1 if b.ndim == 2 else b.shape[2]
    if channels not in MODES:
        raise UsageError(f"--reconstruct: B has {channels} channels; an image file holds 1 "
                         "to 4")
    depth = 8 if b.dtype == np.uint8 else 16 if b.dtype.kind in "ui" else None
    mode = MODES[channels]
    alpha = np.zeros(a_shape[:2], np.float32) if mode in ("LA", "RGBA") else None
    return ImageInfo(depth, mode, alpha, "NPY" if depth is None else "PNG")


def write_reconstruction(path: str, image: np.ndarray, info: ImageInfo) -> None:
    """Write the float32 reconstruction (H, W[, C]) as `info` (from `reconstruction_info`)
    says: colour and alpha apart, rounded and clipped to the bit depth."""
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[..., 0]
    alpha = None
    if info.alpha is not None:
        alpha = image[..., -1]
        image = image[..., 0] if info.mode == "LA" else image[..., :3]
        if info.bit_depth is not None:
            alpha = quantize(alpha, info.bit_depth)
    write_image(path, image, dataclasses.replace(info, alpha=alpha))


def save(path: str, result: Any, args: argparse.Namespace, runtime: Runtime) -> None:
    """Write the field and its parameters to the .npz file `path` through a temporary file in
    the same folder, so that `path` is either left as it was or holds the whole result."""
    fields = dict(positions=np.asarray(result.positions), distances=np.asarray(result.distances),
                  grid_y=np.asarray(result.grid_y), grid_x=np.asarray(result.grid_x),
                  device=runtime.device.name.strip())
    for name in SAVED_PARAMETERS:
        value = getattr(args, name)
        fields[name] = np.int64(0 if value is None else value)   # leaf_size 0: the default
    with TemporaryOutput(path) as output, open(output.temporary, "wb") as fh:
        np.savez(fh, **fields)


def summary(args: argparse.Namespace, a: np.ndarray, b: np.ndarray, result: Any,
            runtime: Runtime, seconds: float, builds: int) -> list[str]:
    """The lines `clpatch nnf` prints: shapes, parameters, device, time, distances."""
    p = args.patch_size
    distances = np.asarray(result.distances)
    leaf = "default" if args.leaf_size is None else str(args.leaf_size)
    lines = [
        f"a:          {args.a}: {_shape(a, p)}",
        f"b:          {args.b}: {_shape(b, p)}",
        f"nnf:        patch {p}, k {args.k}, pca_dims {args.pca_dims}, candidates "
        f"{args.candidates}, leaf size {leaf}, seed {args.seed}",
        f"device:     {device_line(runtime)}",
        f"wall time:  {seconds:.3f} s" + builds_note(builds),
        f"distance:   first neighbour mean {float(distances[..., 0].mean()):.6g}, median "
        f"{float(np.median(distances[..., 0])):.6g}",
        f"saved:      {args.output} (positions, distances, grid_y, grid_x, "
        f"{', '.join(SAVED_PARAMETERS)})",
    ]
    if args.reconstruct:
        lines.append(f"rebuilt:    {args.reconstruct} (a from b's patches)")
    return lines


def cmd_nnf(args: argparse.Namespace) -> int:
    check_outputs([args.output, args.reconstruct], inputs=[args.a, args.b],
                  overwrite=args.overwrite)
    check_npz(args.output)
    a = _read(args.a, "A")
    b = _read(args.b, "B")
    info = None
    if args.reconstruct:
        info = reconstruction_info(b, a.shape)
        with usage_checks():
            output_format(args.reconstruct, info)      # an unwritable format fails now
    runtime = open_runtime(args.device)
    builds = runtime.programs.builds
    with Writing(args.output, args.reconstruct) as writing:
        start = time.perf_counter()
        with usage_checks(ARGUMENT_ERRORS):            # refused before any work
            result = nnf(a, b, patch_size=args.patch_size, k=args.k, pca_dims=args.pca_dims,
                         candidates=args.candidates, leaf_size=args.leaf_size, seed=args.seed,
                         runtime=runtime)
        seconds = time.perf_counter() - start
        builds = runtime.programs.builds - builds
        save(args.output, result, args, runtime)
        writing.written(args.output)
        if args.reconstruct:
            write_reconstruction(args.reconstruct, reconstruct(result, b, runtime=runtime),
                                 info)
    print("\n".join(summary(args, a, b, result, runtime, seconds, builds)))
    return 0


def add_command(commands: argparse._SubParsersAction) -> None:
    """Add `nnf` to the command line's sub-commands."""
    parser = commands.add_parser(
        "nnf", help="approximate nearest-neighbour field of every patch of one image among "
        "the patches of another (propagation-assisted k-d trees)",
        description="Approximate nearest-neighbour field: for every patch of A (every "
        "top-left corner), the k closest patches of B found through a k-d tree over the "
        "patches' principal components, refined by propagation from the row above and "
        "re-ranked on the full patches. Images: PNG, TIFF, JPEG, ... via Pillow, or .npy "
        "arrays ((H, W) or (H, W, C)); A and B must have the same channels.")
    parser.add_argument("a", metavar="A", help="image file or .npy array whose patches are "
                        "matched")
    parser.add_argument("b", metavar="B", help="image file or .npy array searched")
    parser.add_argument("--patch-size", "-p", type=int, default=8, help="patch side (default 8)")
    parser.add_argument("-k", "--k", type=int, default=1, help="neighbours per patch of A (default 1)")
    parser.add_argument("--pca-dims", type=int, default=10,
                        help="dimensions of the reduced space the tree is built in (default 10)")
    parser.add_argument("--candidates", type=int, default=8,
                        help="neighbours kept per patch during the search, re-ranked on the "
                        "full patches (default 8)")
    parser.add_argument("--leaf-size", type=int, default=None,
                        help="points per leaf of the k-d tree, a power of two >= --candidates "
                        "(default 32, or the smallest power of two >= --candidates; saved as "
                        "0)")
    parser.add_argument("--seed", type=seed_number, default=0,
                        help="seed of the PCA model's random sample (default 0)")
    add_device_option(parser)
    parser.add_argument("--output", "-o", metavar="FILE.npz", required=True,
                        help="save positions, distances, grid_y, grid_x and the parameters to "
                        "this .npz file")
    parser.add_argument("--reconstruct", metavar="OUT", default=None,
                        help="also write A rebuilt from B's patches at the first neighbours "
                        "(.png, .tif, .jpg, .webp, .bmp or .npy; B's bit depth and channels)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --output (and --reconstruct) when they already exist")
    parser.set_defaults(func=cmd_nnf)
