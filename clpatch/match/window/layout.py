"""How the windowed search cuts its work: chunks of frames and bands of grid rows that fit
the device's memory, and launches of bounded size.

Every chunk uploads exactly the rows and frames its windows can reach, so a chunked search
gives the same result as one pass; every launch evaluates at most `max_pairs_per_launch(family)`
reference × candidate distances (plus, for the row-band kernels' last launch of a chunk,
the grid's border row, which they search with it), so no launch runs long enough for a
display watchdog to kill it (nor keeps Ctrl-C waiting long) and indices stay far from
int32 limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.buffers import halve_until_fits
from ...core.errors import DeviceResourceError

# Distance evaluations (reference × candidate) per launch: on a GPU, about 0.1 s of work
# at the H100's rate; on a CPU device, which evaluates about 2e7 a second (PoCL on 2 cores,
# 5 × 5 patches), about 1 s, so that Ctrl-C or Runtime.cancel() leaves little queued work.
MAX_PAIRS_PER_LAUNCH = 1 << 31
MAX_PAIRS_PER_LAUNCH_CPU = 1 << 24


def max_pairs_per_launch(family: str) -> int:
    """The bound on a launch's distance evaluations for a device profile family."""
    if family == "cpu":
        return min(MAX_PAIRS_PER_LAUNCH_CPU, MAX_PAIRS_PER_LAUNCH)
    return MAX_PAIRS_PER_LAUNCH


@dataclass(frozen=True)
class Chunk:
    """Reference frames [r0, r1) and grid rows [g0, g1), with the image block they need:
    frames [f_lo, f_hi) and rows [y_lo, y_hi)."""

    r0: int
    r1: int
    f_lo: int
    f_hi: int
    g0: int
    g1: int
    y_lo: int
    y_hi: int


@dataclass(frozen=True)
class WindowGeometry:
    """What chunking depends on: the input's size and the search's reach."""

    frames: int
    rows: int
    cols: int
    channels: int
    patch_size: int
    step: int
    half: int               # window // 2
    temporal_window: int
    grid_y: np.ndarray

    def chunk(self, r0: int, r1: int, g0: int, g1: int) -> Chunk:
        """The chunk of reference frames [r0, r1) and grid rows [g0, g1)."""
        tw, half, p = self.temporal_window, self.half, self.patch_size
        return Chunk(r0, r1, max(0, r0 - tw), min(self.frames, r1 + tw), g0, g1,
                     max(0, int(self.grid_y[g0]) - half),
                     min(self.rows, int(self.grid_y[g1 - 1]) + half + p))


def plan_chunks(geometry: WindowGeometry, grid_cols: int, n: int, dim: int, budget: int,
                device_output: bool) -> list[Chunk]:
    """The chunks of a search whose buffers (the planar block and, for host output, the
    chunk's matches) each fit `budget` bytes; the fewest halvings of frames, then rows."""
    g = geometry
    gy = len(g.grid_y)
    per_ref_out = n * 4 * dim
    if device_output and g.frames * gy * grid_cols * per_ref_out > budget:
        raise DeviceResourceError(
            f"the search result ({g.frames * gy * grid_cols * per_ref_out} bytes of positions) "
            f"does not fit one device buffer ({budget} bytes); pass a NumPy array to have the "
            "search processed in chunks")

    def fits(fc: int, rb: int) -> bool:
        # Size the largest chunk, an interior one: its windows reach tw frames and
        # window // 2 rows beyond it on both sides (grid rows are at most `step` apart).
        frames = min(g.frames, fc + 2 * g.temporal_window)
        rows = min(g.rows, (rb - 1) * g.step + 2 * g.half + g.patch_size)
        image_bytes = frames * g.channels * rows * g.cols * 4
        return image_bytes <= budget and fc * rb * grid_cols * per_ref_out <= budget

    frames_per_chunk, rows_per_band = halve_until_fits(
        fits, g.frames, gy,
        f"one row of references of this input does not fit the device's buffers "
        f"({budget} bytes); reduce the image width or the window")
    return [g.chunk(r0, min(g.frames, r0 + frames_per_chunk), g0, min(gy, g0 + rows_per_band))
            for r0 in range(0, g.frames, frames_per_chunk)
            for g0 in range(0, gy, rows_per_band)]


def launch_pieces(frames: int, grid_rows: int, grid_cols: int, candidates: int,
                  max_pairs: int | None = None) -> list[tuple[int, int, int, int]]:
    """(frame range, row range) pieces of a launch, each under `max_pairs` distance
    evaluations (None: MAX_PAIRS_PER_LAUNCH; one grid row at least)."""
    if max_pairs is None:
        max_pairs = MAX_PAIRS_PER_LAUNCH
    per_row = max(1, grid_cols * candidates)
    rows_per_launch = max(1, max_pairs // per_row)
    if frames * grid_rows <= rows_per_launch:
        return [(0, frames, 0, grid_rows)]
    frames_per_launch = max(1, rows_per_launch // grid_rows)
    if frames_per_launch > 1:
        return [(f, min(frames, f + frames_per_launch), 0, grid_rows)
                for f in range(0, frames, frames_per_launch)]
    return [(f, f + 1, r, min(grid_rows, r + rows_per_launch))
            for f in range(frames) for r in range(0, grid_rows, rows_per_launch)]


def upload_chunk(pool: Any, uploader: Any, volume: Any, chunk: Chunk, name: str, *,
                 staging: str, transfers: Any, wait_for: list[Any] | None
                 ) -> tuple[Any, list[tuple[str, Any]]]:
    """A chunk's frames and rows of all of `volume`'s channels as planar float32 in buffer
    `name` of `pool`, through `uploader` (`clpatch.core.upload.Uploader.convert`), with the
    (stage, event) pairs of the upload: what every matcher's `upload` does."""
    frames, rows = chunk.f_hi - chunk.f_lo, chunk.y_hi - chunk.y_lo
    planar = pool.get(name, frames * volume.channels * rows * volume.cols * 4)
    events = uploader.convert(volume, chunk.f_lo, chunk.f_hi, chunk.y_lo, chunk.y_hi, planar,
                              staging=staging, transfers=transfers, wait_for=wait_for)
    return planar, events
