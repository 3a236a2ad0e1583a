"""Moving results between the device and NumPy arrays.

`download` copies a device buffer straight into the caller's array when the destination is
one contiguous block (no staging copy on the host: on a 4608×3456 float32 result that copy
alone took 18 ms on the H100's host), through a temporary array otherwise; with `transfers`
(a `clpatch.core.transfer.Transfers`) it goes through a pinned slot instead. The kernels the
copy waits for are waited for first, launch by launch or by polling
(`clpatch.core.inflight.settle`): Ctrl-C and `Runtime.cancel()` interrupt that wait even
when they run long.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl

from .inflight import settle


def download(queue: Any, destination: np.ndarray, source: Any, *, shape: tuple[int, ...],
             wait_for: list[Any] | None = None, transfers: Any = None,
             slot: str = "out") -> None:
    """Copy the float32/int32 block `source` (laid out as `shape`, C order) into
    `destination` (a view with the same number of elements); returns when it is there.
    With `transfers`, through its pinned slot `slot` on its download queue."""
    if transfers is not None:
        transfers.start_download(source, int(np.prod(shape)) * destination.itemsize, slot,
                                 wait_for=wait_for)
        transfers.finish_download(slot, destination)
        return
    if destination.flags.c_contiguous and destination.size == int(np.prod(shape)):
        settle(queue)
        cl.enqueue_copy(queue, destination, source, wait_for=wait_for)
        return
    staged = np.empty(shape, destination.dtype)
    settle(queue)
    cl.enqueue_copy(queue, staged, source, wait_for=wait_for)
    destination[...] = staged.reshape(destination.shape)
