"""`clpatch denoise IN OUT --chunks N [--scheduler ADDRESS]`: images too large for memory.

IN (TIFF, BigTIFF included, or Zarr) is read lazily in N × N chunks, denoised with
`clpatch.dask` (NL-means or BM3D, bit-identical to one in-memory call on the same device)
and OUT (Zarr or TIFF) is written one band of chunk rows at a time, so memory holds a few
bands, never the image. Without --scheduler the chunks run in this process's threads on its
device; with it, on the workers of that Dask scheduler (each on its own device, see
`clpatch.dask.worker`), which must be able to read IN at the same path.

The options, IN, OUT and the parameters (checked as the chunks' graph is made) are refused
before any work (UsageError, exit 2); a chunk failing (NaN values found in it, the device)
or a band failing to write is a failure (exit 1), Ctrl-C exit 130.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..io.chunked import CHUNKED_SUFFIXES, open_chunked, tiff_tile, write_chunked
from ..io.errors import ImageFileError
from .common import ARGUMENT_ERRORS, CommandError, UsageError, open_runtime, usage_checks
from .outputs import INTERRUPTED_CODE
from .progress import Progress

__all__ = ["denoise_chunked"]

#: Options of `denoise` passed on to the method when given: (argparse dest, keyword).
_OPTIONS = (("preset", "preset"), ("patch_size", "patch_size"), ("step", "step"),
            ("window", "window"), ("k", "k"), ("h", "h"), ("aggregation", "aggregation"))


def _check(args: argparse.Namespace) -> None:
    if args.method not in ("nlmeans", "bm3d"):
        raise UsageError(f"--chunks denoises images with --method nlmeans or bm3d, not "
                         f"{args.method}")
    for path, what in ((args.input, "IN"), (args.output, "OUT")):
        if Path(path).suffix.lower() not in CHUNKED_SUFFIXES:
            raise UsageError(f"--chunks reads and writes TIFF (.tif, .tiff) or Zarr (.zarr) "
                             f"files; {what} is {path}")
    for flag, value in (("--add-noise", args.add_noise), ("--clean", args.clean),
                        ("--search", None if args.search in (None, "window") else args.search)):
        if value is not None:
            raise UsageError(f"{flag} does not go with --chunks")
    if args.chunks < 16:
        raise UsageError(f"--chunks must be at least 16 pixels, got {args.chunks}")
    if Path(args.output).suffix.lower() in (".tif", ".tiff"):
        try:
            tiff_tile(args.chunks)          # before any work
        except ImageFileError as error:
            raise UsageError(str(error)) from None
    if Path(args.output).resolve() == Path(args.input).resolve():
        raise UsageError(f"OUT must not be IN ({args.input}): IN is read while OUT is written")
    if Path(args.output).exists() and not args.overwrite:
        raise UsageError(f"{args.output} exists; pass --overwrite to replace it")
    if args.scheduler and args.device:
        raise UsageError("--device does not go with --scheduler: each worker uses its own "
                         "device (CLPATCH_DEVICE, its clpatch-device resource, or its GPUs "
                         "in turn)")


def _bands(out: Any, chunks: int, progress: Progress) -> Iterator[np.ndarray]:
    """The result's bands of chunk rows, each computed when asked for."""
    per_band = len(out.chunks[1])
    done = 0
    for a in range(0, out.shape[0], chunks):
        band = np.asarray(out[a:a + chunks].compute(), dtype=np.float32)
        done += per_band
        progress.update(done)
        yield band


def denoise_chunked(args: argparse.Namespace) -> int:
    """Denoise IN by chunks into OUT (see the module doc)."""
    _check(args)
    try:
        import clpatch.dask as cdask
    except ImportError as error:       # --chunks needs the dask extra
        raise UsageError(str(error)) from None
    with usage_checks():
        x = open_chunked(args.input, args.chunks)
    kwargs = {key: getattr(args, dest) for dest, key in _OPTIONS
              if getattr(args, dest, None) is not None}
    with usage_checks(ARGUMENT_ERRORS):  # the graph is made, its parameters checked: no work
        if args.method == "nlmeans":
            kwargs.pop("preset", None)
            out = cdask.nlmeans(x, args.sigma, **kwargs)
        else:
            kwargs.pop("h", None)
            if np.issubdtype(x.dtype, np.integer) and x.dtype.itemsize <= 2:
                kwargs["data_range"] = float(np.iinfo(x.dtype).max)
            out = cdask.bm3d(x, args.sigma, **kwargs)
    client = None
    if not args.scheduler:
        cdask.use_runtime(open_runtime(args.device))
    if args.scheduler:
        try:
            from distributed import Client
        except ImportError:
            raise UsageError('--scheduler needs dask.distributed: pip install "clpatch[dask]"') from None
        client = Client(args.scheduler)
    count = len(out.chunks[0]) * len(out.chunks[1])
    start = time.perf_counter()
    try:
        with Progress(count, "chunks", unit="chunks") as progress:
            write_chunked(args.output, x.shape, x.dtype, args.chunks,
                          _bands(out, args.chunks, progress))
    except KeyboardInterrupt:
        # OUT is written in place, band by band: say so rather than promise it untouched.
        raise CommandError(f"interrupted: {args.output} is incomplete (it is written band by "
                           "band); delete it, or run again with --overwrite",
                           code=INTERRUPTED_CODE) from None
    finally:
        if client is not None:
            client.close()
    seconds = time.perf_counter() - start
    where = f"scheduler {args.scheduler}" if args.scheduler else "this process"
    print("\n".join([
        f"image:      {Path(args.input).name}: {'x'.join(map(str, x.shape[:2]))}, {x.dtype}, "
        f"{count} chunks of {args.chunks}x{args.chunks}",
        f"method:     {args.method}, sigma {args.sigma:g} (clpatch.dask, on {where})",
        f"time:       {seconds:.3f} s",
        f"output:     {args.output} ({x.dtype})"]))
    return 0
