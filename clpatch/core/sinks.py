"""Where a matcher's run writes its Matches: device arrays (the caller's `out=` or new ones)
or NumPy arrays filled chunk by chunk through the plan's device buffers.

Every engine writes the layout of `clpatch.match.matches` (positions int32
[frame][grid row][grid column][k][dim], distances float32 [frame][grid row][grid column][k]);
a chunk of frames [f0, f1) and grid rows [g0, g1) either lands in place in the whole
device arrays or in a chunk-sized buffer that `store` copies into the host arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .plans import check_out
from .staging import download


class MatchesSink:
    """The output arrays of one run of a matcher.

    lead: the frame axes of the result ((T,) for video, () for an image); gy, gx, k, dim:
    grid rows and columns, matches per reference, position coordinates. `device`: device
    arrays (`out`: a (positions, distances) pair of the caller's, checked) or NumPy."""

    def __init__(self, plan: Any, lead: tuple[int, ...], gy: int, gx: int, k: int, dim: int, *,
                 device: bool, out: Any = None) -> None:
        self.plan, self.device = plan, device
        self.gx, self.k, self.dim = gx, k, dim
        self.gy = gy
        shapes = ((*lead, gy, gx, k, dim), (*lead, gy, gx, k))
        runtime = plan.runtime
        if out is not None:
            if not device:
                raise TypeError("out= takes device arrays; a run on NumPy arrays returns NumPy")
            pair = _pair(out)
            self.positions = check_out(pair[0], shapes[0], np.int32, runtime.context,
                                       "out positions")
            self.distances = check_out(pair[1], shapes[1], np.float32, runtime.context,
                                       "out distances")
        elif device:
            self.positions = runtime.empty(shapes[0], np.int32)
            self.distances = runtime.empty(shapes[1], np.float32)
        else:
            # The host arrays always have a frame axis; `arrays()` drops it for an image.
            whole = (max(1, int(np.prod(lead))),)
            self.positions = np.empty((*whole, gy, gx, k, dim), np.int32)
            self.distances = np.empty((*whole, gy, gx, k), np.float32)
        self.lead = lead

    def target(self, f0: int, f1: int, g0: int, g1: int) -> tuple[Any, Any, int, int, int]:
        """(positions buffer, distances buffer, out_rows, out_row0, out_f0) for the chunk
        of frames [f0, f1) and grid rows [g0, g1): the whole device arrays with the chunk's
        place in them, or chunk-sized buffers of the plan's pool (filled from row 0)."""
        if self.device:
            return self.positions.data, self.distances.data, self.gy, g0, f0
        count = (f1 - f0) * (g1 - g0) * self.gx * self.k
        pool = self.plan.pool
        return (pool.get("out_pos", count * self.dim * 4), pool.get("out_dist", count * 4),
                g1 - g0, 0, 0)

    def store(self, f0: int, f1: int, g0: int, g1: int, buffers: tuple[Any, Any],
              wait_for: list[Any] | None) -> None:
        """Copy a chunk written by `target`'s buffers into the host arrays (returns when it
        is there); nothing for device arrays, which the chunk wrote in place."""
        if self.device:
            return
        shape = (f1 - f0, g1 - g0, self.gx, self.k)
        queue = self.plan.runtime.queue
        download(queue, self.positions[f0:f1, g0:g1], buffers[0], shape=(*shape, self.dim),
                 wait_for=wait_for)
        download(queue, self.distances[f0:f1, g0:g1], buffers[1], shape=shape,
                 wait_for=wait_for)

    def arrays(self) -> tuple[Any, Any]:
        """(positions, distances) as the run returns them: host arrays of an image without
        their frame axis."""
        if not self.device and not self.lead:
            return self.positions[0], self.distances[0]
        return self.positions, self.distances


def _pair(out: Any) -> tuple[Any, Any]:
    """(positions, distances) of `out`: a Matches (anything with those two attributes) or
    a pair of arrays."""
    if hasattr(out, "positions") and hasattr(out, "distances"):
        return out.positions, out.distances
    if isinstance(out, (tuple, list)) and len(out) == 2:
        return out[0], out[1]
    raise TypeError("out must be a Matches or a (positions, distances) pair of device arrays, "
                    f"got {type(out).__name__}")
