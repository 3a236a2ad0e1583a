"""Named device buffers that grow on demand and are reused between runs of a plan."""

from __future__ import annotations

from typing import Any

import pyopencl as cl


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
