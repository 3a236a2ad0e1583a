"""`clpatch knn QUERY [REFERENCE]`: the exhaustive k-nearest-patch search of every query patch
among all patches of a reference image (the query itself when none is given); prints a
one-line summary and saves the result as `.npz` (written whole or not at all, never over an
input nor, unless --overwrite, over an existing file: see `outputs`). The output, the images
and the parameters (`knn` checks them before any work) are usage errors when refused (exit
2)."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from ..core.runtime import Runtime
from ..io.images import read_array
from ..io.outputs import TemporaryOutput
from ..match.knn.search import knn
from .common import (
    ARGUMENT_ERRORS,
    UsageError,
    add_device_option,
    builds_note,
    open_runtime,
    usage_checks,
)
from .outputs import Writing, check_npz, check_outputs

KNN_METRICS = ("l2", "l1", "chamfer", "chamfer_sym")


def _read(path: str, what: str) -> np.ndarray:
    with usage_checks():
        image, video = read_array(path)
    if video:
        raise UsageError(f"{what} {path}: a multi-frame file; knn takes one image "
                           "((H, W) or (H, W, C))")
    return image


def candidates(reference: np.ndarray, patch_size: int) -> int:
    """How many patches of `reference` every query patch is compared with."""
    return max(reference.shape[0] - patch_size + 1, 0) * max(reference.shape[1] - patch_size
                                                             + 1, 0)


def save(path: str, result: Any, runtime: Runtime) -> None:
    """Write `result` to the .npz file `path` through a temporary file in the same folder,
    so that `path` is either left as it was or holds the whole result."""
    config = result.config
    fields = dict(positions=np.asarray(result.positions), distances=np.asarray(result.distances),
                  grid_y=np.asarray(result.grid_y), grid_x=np.asarray(result.grid_x),
                  patch_size=result.patch_size, step=result.step, k=result.k,
                  metric=result.metric,
                  config=config.describe() if hasattr(config, "describe") else str(config),
                  device=runtime.device.name.strip())
    with TemporaryOutput(path) as output, open(output.temporary, "wb") as fh:
        np.savez(fh, **fields)


def summary(result: Any, reference: np.ndarray, seconds: float, builds: int) -> str:
    """The line `clpatch knn` prints: queries, candidates, k, metric and time."""
    queries = len(result.grid_y) * len(result.grid_x)
    return (f"knn: {queries} queries x {candidates(reference, result.patch_size)} candidates, "
            f"k {result.k}, {result.metric}, patch {result.patch_size}, step {result.step}: "
            f"{seconds:.3f} s" + builds_note(builds))


def cmd_knn(args: argparse.Namespace) -> int:
    check_outputs([args.output], inputs=[args.query, args.reference], overwrite=args.overwrite)
    check_npz(args.output)
    query = _read(args.query, "QUERY")
    reference = _read(args.reference, "REFERENCE") if args.reference else None
    runtime = open_runtime(args.device)
    builds = runtime.programs.builds
    with Writing(args.output):
        start = time.perf_counter()
        with usage_checks(ARGUMENT_ERRORS):  # its parameters, checked before any work
            result = knn(query, reference, patch_size=args.patch_size, k=args.k,
                         metric=args.metric, step=args.step, runtime=runtime)
        seconds = time.perf_counter() - start
        save(args.output, result, runtime)
    print(summary(result, query if reference is None else reference, seconds,
                  runtime.programs.builds - builds) + f" -> {args.output}")
    return 0


def add_command(commands: argparse._SubParsersAction) -> None:
    """Add `knn` to the command line's sub-commands."""
    parser = commands.add_parser(
        "knn", help="find the k nearest patches of every query patch among all patches of a "
        "reference image (exhaustive)",
        description="Exhaustive k-nearest-patch search: every query patch (top-left corners "
        "0, step, ..., plus the last) against every patch of REFERENCE (default: QUERY "
        "itself). Images: PNG, TIFF, JPEG, ... via Pillow, or .npy arrays ((H, W) or "
        "(H, W, C)).")
    parser.add_argument("query", metavar="QUERY", help="image file or .npy array of the "
                        "query patches")
    parser.add_argument("reference", metavar="REFERENCE", nargs="?", default=None,
                        help="image file or .npy array searched (default: QUERY)")
    parser.add_argument("--patch-size", "-p", type=int, default=8, help="patch side (default 8)")
    parser.add_argument("-k", "--k", type=int, default=16, help="neighbours per query patch "
                        "(default 16)")
    parser.add_argument("--metric", choices=KNN_METRICS, default="l2",
                        help="sum of squared (l2) or absolute (l1) differences, or the Chamfer "
                        "distance between label patches, one-way or symmetric (default l2)")
    parser.add_argument("--step", "-s", type=int, default=1,
                        help="grid step of the query patches (default 1)")
    add_device_option(parser)
    parser.add_argument("--output", "-o", metavar="FILE.npz", required=True,
                        help="save positions, distances, grid_y, grid_x and the parameters to "
                        "this .npz file")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --output when it already exists")
    parser.set_defaults(func=cmd_knn)
