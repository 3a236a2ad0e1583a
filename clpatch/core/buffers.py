"""Device memory planning shared by the engines: named buffers that grow on demand and
are reused between runs of a plan, and splitting work into pieces that fit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl

from .errors import DeviceResourceError


class BufferPool:
    """`get(name, nbytes)` returns the buffer called `name`, reallocated only when it is
    smaller than `nbytes`, so repeated runs of a plan allocate nothing."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self._buffers: dict[str, Any] = {}

    def get(self, name: str, nbytes: int) -> Any:
        buf = self._buffers.get(name)
        if buf is None or buf.size < nbytes:
            buf = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 4))
            self._buffers[name] = buf
        return buf

    def held_bytes(self) -> int:
        """Bytes of device memory the pool's buffers hold."""
        return sum(int(buf.size) for buf in self._buffers.values())


def halve_until_fits(fits: Callable[[int, int], bool], frames: int, rows: int,
                     error: str) -> tuple[int, int]:
    """The largest (frames, rows) per piece, halving frames first and then rows, for which
    `fits(frames, rows)` holds; DeviceResourceError(error) when not even (1, 1) fits."""
    while not fits(frames, rows):
        if frames > 1:
            frames = (frames + 1) // 2
        elif rows > 1:
            rows = (rows + 1) // 2
        else:
            raise DeviceResourceError(error)
    return frames, rows


# One buffer never exceeds this (the kernels index elements with int32).
MAX_BUFFER_BYTES = (1 << 31) - 1


def memory_limits(runtime: Any, tile_bytes: int | None = None) -> tuple[int, int]:
    """(largest buffer, all buffers) in bytes that one tile of an engine may use: the
    device's allocation limit (at most MAX_BUFFER_BYTES) and half its memory; `tile_bytes`
    (a plan's own limit, tests force tiling with it) or else the runtime's `memory_limit`
    replaces both when set."""
    limit = tile_bytes if tile_bytes is not None else runtime.memory_limit
    if limit is not None:
        return int(limit), int(limit)
    profile = runtime.profile
    return (int(min(profile.max_mem_alloc_size, MAX_BUFFER_BYTES)),
            int(profile.global_mem_size // 2))


def int_buffer(context: Any, values: Any) -> Any:
    """A read-only device buffer holding `values` as int32 (grid coordinates, shifts)."""
    return cl.Buffer(context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                     hostbuf=np.ascontiguousarray(values, dtype=np.int32))
