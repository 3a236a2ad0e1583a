"""Inputs onto the device: any real dtype, any strides, NumPy or device arrays, converted to
planar float32 blocks by one kernel that also checks their values.

The conversion kernel (`cl_src/lib/convert.cl.mako`) folds the largest |value| of every
block it converts into one device word; `peak()` reads that word back (4 bytes, the only
host transfer the check costs) and `check_peak` turns it into the errors users see. Device
arrays are never copied to the host; host arrays are uploaded in their own dtype (an 8-bit
image moves a quarter of the bytes of its float32 copy) and converted on the device.

An input that already has the planar float32 layout (`needs_conversion` is False) can skip
the conversion: an engine whose kernel folds the same check (`cl_src/lib/peak_check.mako`)
reads the device array's own buffer, or a plain copy of the host array (`copy_planar`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyopencl as cl

from .buffers import BufferPool
from .inflight import flight_of, settle
from .kernels import kernel
from .volumes import CL_TYPES, Volume

#: Work-items per work-group of the conversion kernel (a power of two).
CONVERT_GROUP = 64


def check_peak(peak: float, limit: float, name: str = "image") -> None:
    """ValueError when `peak` (the largest |value| of an input, NaN/inf when it held any)
    is not finite or above `limit` (the largest magnitude float32 distances can take)."""
    if not math.isfinite(peak):
        raise ValueError(f"{name} contains NaN or infinite values")
    if peak > limit:
        raise ValueError(f"{name} values must satisfy |x| <= {limit:.3g} so that float32 "
                         f"patch distances cannot overflow (largest |x| is {peak:.3g})")


def needs_conversion(volume: Volume) -> bool:
    """Whether `volume` must go through the conversion kernel to become planar float32:
    False for one float32 channel in C order (at offset 0 for a device array; a host array
    may have any strides, it is copied contiguous), whose elements already are the planar
    block of the whole input."""
    if volume.channels != 1 or volume.array.dtype != np.float32:
        return True
    if not volume.on_device:
        return False
    array = volume.array
    return not (array.flags.c_contiguous and array.offset == 0)


class Uploader:
    """Converts blocks of frames and rows of an input to planar float32 on one runtime's
    device, keeping the running maximum |value| of everything converted since `begin()`."""

    def __init__(self, runtime: Any, pool: BufferPool) -> None:
        self.runtime = runtime
        self.pool = pool
        self.group = min(CONVERT_GROUP, 1 << (int(runtime.profile.max_work_group_size).bit_length() - 1))
        self._kernels: dict[tuple[str, int], Any] = {}
        # Two check words: a run folds its values into one while its conversions clear the
        # other, the next run's (see lib/convert.cl.mako), so no run launches a clear.
        self._check = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                                hostbuf=np.zeros(2, np.uint32))
        self._word = 0
        self._peak_host = np.zeros(1, np.uint32)
        self._readers: dict[str, Any] = {}   # staging buffer -> the conversion reading it

    def kernel(self, dtype: Any, word: int = 0) -> Any:
        """The conversion kernel from `dtype`: one kernel object per check word, so that a
        run's arguments repeat the previous run's on the same word and none is set again
        (NVIDIA's OpenCL takes about 10 µs to set a by-value argument)."""
        name = CL_TYPES[np.dtype(dtype)]
        found = self._kernels.get((name, word))
        if found is None:
            program = self.runtime.programs.get("lib/convert.cl.mako", src_type=name,
                                                group=self.group)
            found = self._kernels[name, word] = kernel(program, "to_planar")
        return found

    def check_words(self) -> tuple[Any, int]:
        """(the device buffer of check words, the index of this run's word): a kernel that
        needs a run's peak on the device reads the float bits of that word (uint32), once
        the run's conversions are done (queue it after them)."""
        return self._check, self._word

    def begin(self) -> None:
        """Start a run's running maximum (before its first block): switch to the check word
        the previous run's conversions cleared. Enqueues nothing; call it only after the
        previous run's `peak`/`read_peak`, so that the new run's first conversion (which
        clears the old word) is queued after that read."""
        self._word ^= 1

    def convert(self, volume: Volume, f_lo: int, f_hi: int, y_lo: int, y_hi: int, dst: Any,
                dst_base: int = 0, *, staging: str = "staging", transfers: Any = None,
                wait_for: list[Any] | None = None,
                limit: float = math.inf) -> list[tuple[str, Any]]:
        """Frames [f_lo, f_hi) and rows [y_lo, y_hi) of `volume`, all columns and channels,
        into dst[dst_base + ((f · C + c) · rows + y) · W + x]; returns (stage, event) pairs
        ("upload" for a host block's copy, "convert"). A host block goes through device
        buffer `staging`; with `transfers` (a `clpatch.core.transfer.Transfers`) its copy
        runs on the transfer queue through a pinned slot of the same name, after the last
        conversion that read that buffer. Values of magnitude above `limit` (NaN always) are
        stored as 0, after the check has seen them (lib/convert.cl.mako): a plan whose
        kernels must not see them passes its limit and defers the check (no wait)."""
        queue = self.runtime.queue
        frames, rows, cols = f_hi - f_lo, y_hi - y_lo, volume.cols
        events: list[tuple[str, Any]] = []
        if volume.on_device:
            dtype = volume.dtype
            sf, sy, sx, sc = volume.element_strides()
            base = volume.element_offset() + f_lo * sf + y_lo * sy
            source = volume.array.base_data
        else:
            block = volume.array if volume.video else volume.array[None]
            block = block[f_lo:f_hi, y_lo:y_hi]
            if block.dtype == np.float64 and not self.runtime.profile.fp64:
                block = block.astype(np.float32)
            block = np.ascontiguousarray(block)
            dtype = block.dtype
            sf, sy, sx = (s // dtype.itemsize for s in block.strides[:3])
            sc = 1 if block.ndim == 4 else 0
            base = 0
            source = self.pool.get(staging, block.nbytes)
            if transfers is not None:
                last = self._readers.get(staging)
                copied = transfers.upload(source, block, staging,
                                          wait_for=[last] if last is not None else None)
                wait_for = [*(wait_for or ()), copied]
            else:
                copied = cl.enqueue_copy(queue, source, block, wait_for=wait_for)
                wait_for = [copied]
            events.append(("upload", copied))
        if dtype == np.float64 and not self.runtime.profile.fp64:
            raise TypeError("float64 device arrays need a device with fp64 support")
        i32, i64, g = np.int32, np.int64, self.group
        event = self.kernel(dtype, self._word)(
            queue, (-(-cols // g) * g, rows, frames), (g, 1, 1), source, i64(base), i64(sf),
            i64(sy), i64(sx), i64(sc), i32(frames), i32(rows), i32(cols), i32(volume.channels),
            dst, i64(dst_base), self._check, i32(self._word), np.float32(limit),
            wait_for=wait_for)
        events.append(("convert", event))
        if not volume.on_device:
            self._readers[staging] = event
        return events

    def copy_planar(self, volume: Volume, dst: Any, *,
                    wait_for: list[Any] | None = None) -> list[tuple[str, Any]]:
        """Copy all of host `volume` (one that needs no conversion, see `needs_conversion`)
        as it is into device buffer `dst`; returns [("upload", event)]. Its values are not
        checked here: the kernel reading `dst` must fold the check into this run's word
        (`check_words`, lib/peak_check.mako)."""
        block = np.ascontiguousarray(volume.array)
        return [("upload", cl.enqueue_copy(self.runtime.queue, dst, block, wait_for=wait_for))]

    def read_peak(self, host: np.ndarray, wait_for: list[Any] | None = None) -> Any:
        """Start copying the check word (see `peak`) into the uint32 array `host`, after
        `wait_for`, without waiting; returns the copy's event."""
        return cl.enqueue_copy(self.runtime.queue, host, self._check, src_offset=4 * self._word,
                               wait_for=wait_for, is_blocking=False)

    def peak(self, wait_for: list[Any] | None = None) -> float:
        """The largest |value| converted since `begin()` (waits for it): NaN or inf when any
        value was not finite. The wait for the kernels before it can be interrupted
        (`clpatch.core.inflight.settle`)."""
        queue = self.runtime.queue
        flight = flight_of(queue)
        if flight is not None and flight.blocking:
            # On a GPU the read is queued at once, behind the kernels, and waited for after
            # them: the device starts it as the last kernel ends, with no round trip to the
            # host in between (about 10 µs of a small call on the H100). If the wait for the
            # kernels is interrupted, dropping the read's event waits for the (bounded) work
            # in flight.
            read = cl.enqueue_copy(queue, self._peak_host, self._check,
                                   src_offset=4 * self._word, wait_for=wait_for,
                                   is_blocking=False)
            flight.settle()
            read.wait()
        else:
            settle(queue)
            cl.enqueue_copy(queue, self._peak_host, self._check, src_offset=4 * self._word,
                            wait_for=wait_for)
        return float(self._peak_host.view(np.float32)[0])
