"""`clpatch search IMAGE`: the exact windowed patch search on an image, a video array or a
`.npy` file; prints a summary and optionally saves the result as `.npz`. The output, IMAGE
and the parameters (`search_patches` checks them before any work) are usage errors when
refused (exit 2)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..core.runtime import Runtime
from ..io.images import read_array
from ..io.outputs import TemporaryOutput
from ..match.window.config import SEARCH_VARIANTS
from ..match.window.search import search_patches
from .common import (
    ARGUMENT_ERRORS,
    add_device_option,
    builds_note,
    device_line,
    open_runtime,
    usage_checks,
)
from .outputs import Writing, check_npz, check_outputs


def _stats(values: np.ndarray) -> str:
    return f"mean {float(np.mean(values)):.6g}, median {float(np.median(values)):.6g}"


def summary(name: str, image: np.ndarray, video: bool, result: Any, runtime: Runtime,
            seconds: float, builds: int) -> list[str]:
    """The lines `clpatch search` prints about one search."""
    shape = "x".join(str(s) for s in image.shape)
    layout = ("video (T, H, W" + (", C)" if image.ndim == 4 else ")")) if video else \
        ("(H, W, C)" if image.ndim == 3 else "(H, W)")
    frames = image.shape[0] if video else 1
    gy, gx = len(result.grid_y), len(result.grid_x)
    refs = frames * gy * gx
    config = result.config
    lines = [
        f"image:      {name}: {shape} {image.dtype} {layout}",
        f"search:     patch {result.patch_size}, step {result.step}, window {result.window}, "
        f"k {result.k}, {result.metric}"
        + (f", temporal window {result.temporal_window}" if video else ""),
        f"grid:       {gy} x {gx} references" + (f" x {frames} frames" if video else "")
        + f" = {refs}",
        f"config:     {config.describe()}",
        f"chosen by:  {config.source}: {config.reason}",
        f"device:     {device_line(runtime)}",
        f"wall time:  {seconds:.3f} s" + builds_note(builds),
    ]
    distances = np.asarray(result.distances)
    shown = [1, 2, result.k] if result.k > 2 else list(range(1, result.k + 1))
    for k in shown:
        lines.append(f"{f'neighbour {k}:':<11} distance {_stats(distances[..., k - 1])}")
    return lines


def _run_search(image: np.ndarray, video: bool, args: argparse.Namespace) -> tuple[Any, Runtime,
                                                                                   float, int]:
    runtime = open_runtime(args.device)
    builds = runtime.programs.builds
    start = time.perf_counter()
    with usage_checks(ARGUMENT_ERRORS):  # its parameters, checked before any work
        result = search_patches(image, args.patch_size, args.step, args.window, args.k,
                                metric=args.metric, variant=args.variant,
                                temporal_window=args.temporal_window, runtime=runtime,
                                video=True if video else None)
    return result, runtime, time.perf_counter() - start, runtime.programs.builds - builds


def _save(path: str, result: Any, runtime: Runtime) -> None:
    """Write `result` to the .npz file `path`, whole or not at all (through a temporary)."""
    with TemporaryOutput(path) as output, open(output.temporary, "wb") as fh:
        np.savez(fh, positions=np.asarray(result.positions), distances=np.asarray(result.distances),
                 grid_y=result.grid_y, grid_x=result.grid_x, patch_size=result.patch_size,
                 step=result.step, window=result.window, k=result.k, metric=result.metric,
                 temporal_window=result.temporal_window, config=result.config.describe(),
                 device=runtime.device.name.strip())


def cmd_search(args: argparse.Namespace) -> int:
    check_outputs([args.output], inputs=[args.image], overwrite=args.overwrite)
    check_npz(args.output)
    with usage_checks():
        image, video = read_array(args.image)
    with Writing(args.output):
        result, runtime, seconds, builds = _run_search(image, video, args)
        if args.output:
            _save(args.output, result, runtime)
    print("\n".join(summary(Path(args.image).name, image, video or result.positions.shape[-1] == 3,
                            result, runtime, seconds, builds)))
    if args.output:
        print(f"saved:      {args.output} (positions, distances, grid_y, grid_x)")
    return 0


def add_command(commands: argparse._SubParsersAction) -> None:
    """Add `search` to the command line's sub-commands."""
    search = commands.add_parser("search", help="find the n most similar patches of every "
                                 "reference patch of an image",
                                 description="Exact windowed patch search on an image file "
                                 "(PNG, TIFF, JPEG, ... via Pillow) or a .npy array.")
    search.add_argument("image", metavar="IMAGE", help="image file, or .npy array "
                        "((H, W), (H, W, C); (T, H, W) with --temporal-window > 0; (T, H, W, C))")
    search.add_argument("--patch-size", "-p", type=int, default=8, help="patch side (default 8)")
    search.add_argument("--step", "-s", type=int, default=4,
                        help="grid step of the reference patches (default 4)")
    search.add_argument("--window", "-w", type=int, default=21,
                        help="search window side, half-width window//2 (default 21)")
    search.add_argument("-k", "--k", "-n", "--n", type=int, default=16, dest="k",
                        help="neighbours per reference (default 16; -n is its former name)")
    search.add_argument("--metric", choices=("l2", "l1"), default="l2",
                        help="sum of squared (l2) or absolute (l1) differences (default l2)")
    search.add_argument("--variant", choices=SEARCH_VARIANTS, default=None,
                        help="force a kernel variant (default: the scheduler's choice)")
    search.add_argument("--temporal-window", "--temporal-radius", "-t", type=int, default=0,
                        dest="temporal_window",
                        help="video: search frames t-tw ... t+tw (default 0); the API's "
                             "temporal_window")
    add_device_option(search)
    search.add_argument("--output", "-o", metavar="FILE.npz",
                        help="save positions, distances, grid_y and grid_x to this .npz file")
    search.add_argument("--overwrite", action="store_true",
                        help="replace --output when it already exists")
    search.set_defaults(func=cmd_search)
