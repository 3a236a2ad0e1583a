"""Device memory planning shared by the engines: named buffers that grow on demand and
are reused between runs of a plan, and splitting work into pieces that fit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def tile_limits(profile: Any, tile_bytes: int | None, max_buffer: int) -> tuple[int, int]:
    """(largest buffer, all buffers) in bytes that one tile of an engine may use: the
    device's allocation limit (at most `max_buffer`) and half its memory, or `tile_bytes`
    for both when given (tests force tiling with it)."""
    if tile_bytes is not None:
        return int(tile_bytes), int(tile_bytes)
    return int(min(profile.max_mem_alloc_size, max_buffer)), int(profile.global_mem_size // 2)
