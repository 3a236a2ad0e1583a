"""Host <-> device copies that overlap the kernels: a second command queue for transfers
and page-locked (pinned) staging slots on the host.

The compute queue runs kernels in order; an upload queue moves tile i + 1's input and a
download queue tile i − 1's result while tile i's kernels run (events order the queues). Copies
between pinned memory and the device are asynchronous DMA; a pageable NumPy array would
make every copy synchronous for the host. Each slot is a `CL_MEM_ALLOC_HOST_PTR` buffer
mapped once (how NVIDIA, AMD and Intel drivers hand out pinned memory through OpenCL).
The host copies between the caller's array and the slot in several threads
(`clpatch.core.hostwork`), piece by piece, piece k's DMA running while piece k + 1 is
copied. The waits go piece by piece (`clpatch.core.inflight.wait_event`), so Ctrl-C and
`Runtime.cancel()` interrupt them between pieces; an interrupted wait keeps the copies it
did not see finish pending on their slot, so the slot's next use waits for them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl

from . import hostwork
from .inflight import flight_of, wait_event

#: Bytes per piece of a copy (one DMA each). On the H100 a pinned DMA moves 53 GB/s, so
#: overlapping it with the host copy gains little; pieces of a few MB cost more in dispatch
#: than they save (64 MB up: 3.8 ms in 16 MB pieces, 9.2 ms in 4 MB pieces).
PIECE_BYTES = 32 << 20


def _bytes_of(array: np.ndarray) -> np.ndarray:
    return array.reshape(-1).view(np.uint8)


class Transfers:
    """Pinned staging slots (by name, grown on demand) and the queue that moves them."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        props = runtime.queue.properties & cl.command_queue_properties.PROFILING_ENABLE
        # Uploads and downloads on queues of their own: an upload never waits in line
        # behind a download that waits for kernels.
        self.queue = cl.CommandQueue(runtime.context, runtime.device, properties=props)
        self.down_queue = cl.CommandQueue(runtime.context, runtime.device, properties=props)
        self._slots: dict[str, tuple[Any, np.ndarray]] = {}
        self._pending: dict[str, list[tuple[int, int, Any]]] = {}   # slot -> (start, end, event)

    def _slot(self, name: str, nbytes: int) -> np.ndarray:
        found = self._slots.get(name)
        if found is None or found[1].nbytes < nbytes:
            self.wait(name)
            size = max(nbytes, 4)
            buf = cl.Buffer(self.runtime.context,
                            cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, size)
            view, _ = cl.enqueue_map_buffer(self.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE,
                                            0, (size,), np.uint8, is_blocking=True)
            found = self._slots[name] = (buf, view)
        return found[1]

    def wait(self, name: str) -> None:
        """Wait until every copy through slot `name` is done."""
        pending = self._pending.get(name)
        flight = flight_of(self.runtime.queue)
        while pending:
            wait_event(pending[0][2], flight)
            pending.pop(0)
        self._pending.pop(name, None)

    def upload(self, destination: Any, host: np.ndarray, slot: str, *,
               wait_for: list[Any] | None = None) -> Any:
        """Copy array `host` into device buffer `destination` through pinned slot `slot`;
        returns the event of the last piece (the transfer queue is in order)."""
        data = _bytes_of(np.ascontiguousarray(host))
        self.wait(slot)                                    # the slot's last DMA has left it
        view = self._slot(slot, data.nbytes)
        pieces = []
        for start in range(0, data.nbytes, PIECE_BYTES):
            end = min(data.nbytes, start + PIECE_BYTES)
            hostwork.copy(view[start:end], data[start:end])
            pieces.append((start, end, cl.enqueue_copy(
                self.queue, destination, view[start:end], dst_offset=start, is_blocking=False,
                wait_for=wait_for if start == 0 else None)))
        self._pending[slot] = pieces
        return pieces[-1][2]

    def start_download(self, source: Any, nbytes: int, slot: str, *,
                       wait_for: list[Any] | None = None) -> Any:
        """Begin copying `nbytes` of device buffer `source` into pinned slot `slot`, piece
        by piece; returns the last piece's event."""
        self.wait(slot)
        view = self._slot(slot, nbytes)
        pieces = [(start, min(nbytes, start + PIECE_BYTES), None)
                  for start in range(0, nbytes, PIECE_BYTES)]
        self._pending[slot] = [
            (a, b, cl.enqueue_copy(self.down_queue, view[a:b], source, src_offset=a,
                                   is_blocking=False, wait_for=wait_for if a == 0 else None))
            for a, b, _ in pieces]
        return self._pending[slot][-1][2]

    def finish_download(self, slot: str, destination: np.ndarray) -> None:
        """Copy slot `slot`'s download into `destination` (C-contiguous, or any layout
        whose C-order elements are the downloaded ones) as its pieces arrive."""
        view = self._slots[slot][1]
        if not destination.flags.c_contiguous:
            staged = np.empty(destination.shape, destination.dtype)
            self.finish_download(slot, staged)
            destination[...] = staged
            return
        target = _bytes_of(destination)
        pending = self._pending.get(slot, [])
        flight = flight_of(self.runtime.queue)
        while pending:
            a, b, event = pending[0]
            wait_event(event, flight)
            pending.pop(0)
            if a < target.size:
                hostwork.copy(target[a:min(b, target.size)], view[a:min(b, target.size)])
        self._pending.pop(slot, None)
