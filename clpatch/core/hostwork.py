"""Large host copies and reductions split over a few threads.

NumPy releases the GIL in copies and reductions, and one thread reaches only part of a
host's memory bandwidth: a copy into new memory is bound by page faults, which threads take
in parallel (64 MB: 17.1 ms with one thread, 3.2 ms with 8 on the H100's host). Here an
array is cut along one of its two leading axes into up to `THREADS` slabs, each copied or
reduced by a thread of one shared pool; below `SPLIT_BYTES` the calling thread does it
alone. The results are those of the one-thread operation, exactly (a copy moves the same
elements; the largest and smallest values of slabs are those of the whole).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

__all__ = ["SPLIT_BYTES", "THREADS", "copy", "extrema", "slabs"]

#: Threads of the shared pool (at most 8, as many as the pinned copies had on their own).
THREADS = max(1, min(8, os.cpu_count() or 1))
#: Arrays smaller than this are copied or reduced by the calling thread alone.
SPLIT_BYTES = 1 << 20

T = TypeVar("T")

_pool: list[ThreadPoolExecutor] = []
_pool_lock = threading.Lock()


def _map(fn: Callable[[Any], T], items: list[Any]) -> list[T]:
    """[fn(i) for i in items], in the shared pool's threads when there are several."""
    if len(items) < 2:
        return [fn(i) for i in items]
    with _pool_lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(THREADS, thread_name_prefix="clpatch-host"))
    return list(_pool[0].map(fn, items))


def slabs(shape: tuple[int, ...], nbytes: int) -> list[tuple[slice, ...]]:
    """Index tuples cutting an array of `shape` (`nbytes` in all) into slabs along the first
    of its two leading axes that has at least THREADS elements (else the longer of them):
    one slab for small arrays, at most THREADS otherwise."""
    if not shape or nbytes < SPLIT_BYTES or THREADS == 1:
        return [()]
    leading = list(shape[:2])
    axis = next((a for a, n in enumerate(leading) if n >= THREADS),
                int(np.argmax(leading)))
    size = shape[axis]
    count = min(THREADS, size)
    if count < 2:
        return [()]
    step = -(-size // count)
    head = (slice(None),) * axis
    return [(*head, slice(a, min(size, a + step))) for a in range(0, size, step)]


def copy(destination: np.ndarray, source: np.ndarray) -> None:
    """destination[...] = source (same shape; any strides, any dtypes NumPy casts
    between), in slabs over the pool's threads when large."""
    if destination.shape != source.shape:
        raise ValueError(f"copy: destination shape {destination.shape} != source shape "
                         f"{source.shape}")
    parts = slabs(destination.shape, max(destination.nbytes, source.nbytes))
    _map(lambda s: np.copyto(destination[s], source[s], casting="unsafe"), parts)


def extrema(array: np.ndarray) -> tuple[Any, Any]:
    """(largest, smallest) element of a non-empty `array`, as np.max and np.min give them
    (NaN if it holds any), its slabs reduced over the pool's threads when large."""
    if array.size == 0:
        raise ValueError("extrema of an empty array")
    found = _map(lambda s: (np.max(array[s]), np.min(array[s])),
                 slabs(array.shape, array.nbytes))
    tops = np.array([t for t, _ in found])
    bottoms = np.array([b for _, b in found])
    return np.max(tops), np.min(bottoms)
