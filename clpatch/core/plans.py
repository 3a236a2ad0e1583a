"""Plans: the base every method's plan derives from, and the cache that keeps them.

A plan holds what one method needs for one input shape and parameter set: compiled
kernels, device buffers (its `pool`), the checking conversion of inputs (its `uploader`),
the events of its last run. Its public contract (`clpatch.make_plan` returns one):

    result, event = plan.enqueue(*device_inputs, out=None, wait_for=None)
    result = plan(*inputs, out=None)       # synchronous: NumPy in -> NumPy out
    plan.check()                           # wait for the value checks of earlier enqueues

`enqueue` takes `pyopencl.array.Array` inputs on the plan's context, of the planned shape
and dtype (any strides or offset: the conversion reads them on the device), enqueues the
whole run behind `wait_for` and returns at once: the result (device arrays) and one event
that completes with it. It never waits for the device. The checks that need the data (NaN
or infinite values, magnitudes that would overflow float32 distances) run on the device
and are read back without waiting (`DeviceChecks`): a failed check raises its ValueError,
naming the input, at the plan's next call that finds the read finished (`enqueue` looks
without waiting) or at `check()` / a synchronous call, which wait for it.

`PlanCache` keeps plans per runtime between the one-shot functions' calls, each run by one
thread at a time (`PlanCache.using`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .buffers import BufferPool
from .inflight import flight_of, settle
from .upload import Uploader, check_peak
from .volumes import as_array


class PlanCache(OrderedDict):
    """An ordered mapping key -> plan, most recently used last (read it like a dict).

    Keys are tuples whose first item names the engine ("search", "nlmeans", ...); each
    engine says how many of its plans to keep (plans hold device memory, so the bound is
    per engine). A plan whose construction fails is not kept. A key that cannot be hashed
    (an argument of the wrong kind) is not looked up: the plan is made directly, so its
    constructor's checks raise the error that names the argument."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.RLock()
        self._users: dict[Hashable, threading.RLock] = {}    # a lock per key (`using`)

    def plan(self, key: tuple[Hashable, ...], make: Callable[[], Any], keep: int) -> Any:
        """The plan under `key`, made with `make()` when missing, marked most recently used;
        then at most `keep` plans of the same engine (`key[0]`) stay. The caller shares it
        with every other thread that asks for `key`: a call that runs it uses `using`."""
        try:
            hash(key)
        except TypeError:
            return make()
        with self.lock:
            plan = self.pop(key, None)
            if plan is None:
                plan = make()
            self[key] = plan
            same = [k for k in self if isinstance(k, tuple) and k and k[0] == key[0]]
            for old in same[:-keep]:
                del self[old]
                self._users.pop(old, None)
            return plan

    def clear(self) -> None:
        with self.lock:
            super().clear()
            self._users.clear()

    @contextlib.contextmanager
    def using(self, key: tuple[Hashable, ...], make: Callable[[], Any],
              keep: int) -> Iterator[Any]:
        """`plan(key, make, keep)`, this thread's alone for the `with` block: another thread
        asking for `key` waits until the block ends. A plan's buffers, its kernels'
        arguments, its checks and the matches a filter is given are its state between the
        steps of a call, so two calls through one plan at once mix their commands (wrong
        results, errors about values the input does not hold, and on CPU devices freed host
        memory written: `benchmarks/soak.py` found each). Calls of other plans still run
        side by side. A plan evicted while in use stays its user's; the next call makes a
        new one."""
        try:
            hash(key)
        except TypeError:
            yield make()
            return
        while True:
            with self.lock:
                user = self._users.setdefault(key, threading.RLock())
            user.acquire()
            with self.lock:     # (the key evicted while this thread waited: a new lock)
                if self._users.get(key) is user:
                    try:
                        plan = self.plan(key, make, keep)
                    except BaseException:
                        user.release()
                        raise
                    break
            user.release()
        try:
            yield plan
        finally:
            user.release()


class DeviceChecks:
    """The value checks of enqueued runs, each a 4-byte read of a run's check word into
    host memory that nobody waits for: `poll` judges the reads already done, `wait` all."""

    def __init__(self) -> None:
        self._pending: deque[tuple[Any, np.ndarray, Callable[[float], Any]]] = deque()

    def add(self, read: Any, host: np.ndarray, judge: Callable[[float], Any]) -> None:
        """A run's check: `read` (an event) fills `host` with the largest |value| of an
        input (float bits in a uint32; NaN or inf when it held any), which `judge` takes
        and raises ValueError for."""
        self._pending.append((read, host, judge))

    def __len__(self) -> int:
        return len(self._pending)

    def poll(self) -> None:
        """Judge the oldest checks whose reads have finished, without waiting (ValueError
        for the first that failed; it is dropped, the others stay)."""
        done = cl.command_execution_status.COMPLETE
        while self._pending and self._pending[0][0].command_execution_status == done:
            read, host, judge = self._pending.popleft()
            judge(float(host.view(np.float32)[0]))

    def wait(self, queue: Any) -> None:
        """Wait for every pending check (interruptibly: `clpatch.core.inflight.settle` on
        `queue` first) and judge them in order (ValueError for the first that failed; all
        are dropped)."""
        if not self._pending:
            return
        settle(queue)
        pending, self._pending = list(self._pending), deque()
        failed: ValueError | None = None
        for read, host, judge in pending:
            read.wait()
            try:
                judge(float(host.view(np.float32)[0]))
            except ValueError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed


def check_wait_for(wait_for: Any) -> list[Any] | None:
    """`wait_for` as a list of `pyopencl.Event` (None stays None); TypeError otherwise."""
    if wait_for is None:
        return None
    if isinstance(wait_for, cl.Event):
        raise TypeError("wait_for must be a list of pyopencl Events, not one Event")
    try:
        events = list(wait_for)
    except TypeError:
        raise TypeError(f"wait_for must be a list of pyopencl Events or None, got "
                        f"{type(wait_for).__name__}") from None
    for event in events:
        if not isinstance(event, cl.Event):
            raise TypeError(f"wait_for must hold pyopencl Events, got {type(event).__name__}")
    return events


def check_out(out: Any, shape: tuple[int, ...], dtype: Any, context: Any,
              name: str = "out") -> Any:
    """`out` if it is a C-contiguous device array of `shape` and `dtype` at offset 0 on
    `context`; TypeError/ValueError naming `name` otherwise."""
    if not isinstance(out, cla.Array):
        raise TypeError(f"{name} must be a pyopencl.array.Array, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(out.shape)}")
    if np.dtype(out.dtype) != np.dtype(dtype):
        raise ValueError(f"{name} must have dtype {np.dtype(dtype)}, got {out.dtype}")
    if out.context != context:
        raise ValueError(f"{name} lives in another OpenCL context than the plan's")
    if not out.flags.c_contiguous or out.offset != 0:
        raise ValueError(f"{name} must be C-contiguous at offset 0 (a whole array, not a view)")
    return out


class Plan:
    """Base of every method's plan (see the module doc for the contract).

    A subclass sets `method` (its name in `clpatch.make_plan`), `input_names` (the names of
    `enqueue`'s inputs, for errors), `input_shapes` and `input_dtype` (what it was planned
    for), and implements `enqueue_arrays(*arrays, out, wait_for)` -> (result, events): the
    run enqueued behind `wait_for` with no host wait, its data checks handed to
    `defer_check` (a plan that must wait says so in its doc and a `waits_for_…` flag)."""

    method = "plan"
    input_names: tuple[str, ...] = ("image",)
    #: A filter's strength (sigma and what goes with it), fixed by `clpatch.make_plan` for
    #: `enqueue`; None for a plan made otherwise (and for the matchers, which have none).
    strength: Any = None
    #: Whether runs return device arrays (a plan of `clpatch.make_plan` does).
    device_output = True

    def __init__(self, runtime: Any) -> None:
        """A filter whose values are checked by its matcher's conversion sets `uploader` to
        the matcher's (no other is made)."""
        self.runtime = runtime
        self.pool = BufferPool(runtime.context)
        self._uploader: Uploader | None = None
        self.last_events: list[tuple[str, Any]] = []
        self.checks = DeviceChecks()
        self.input_shapes: tuple[tuple[int, ...], ...] = ()
        self.input_dtype: np.dtype | None = None

    # ---- the public contract ---------------------------------------------------------------

    def enqueue(self, *inputs: Any, out: Any = None,
                wait_for: Sequence[Any] | None = None) -> tuple[Any, Any]:
        """Enqueue a run on device arrays; returns (result, event) at once (module doc)."""
        self.checks.poll()
        arrays = self.device_inputs(inputs)
        wait = check_wait_for(wait_for)
        queue = self.runtime.queue
        if wait:
            # The queue is in order: every command of the run comes after this barrier.
            cl.enqueue_barrier(queue, wait_for=wait)
        flight = flight_of(queue)
        with flight.unbounded() if flight is not None else contextlib.nullcontext():
            result, events = self.enqueue_arrays(*arrays, out=out, wait_for=wait)
        return result, self.joined(events)

    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        """The synchronous call: device arrays in -> device result (in `out` when given);
        NumPy arrays (or array-likes) in -> NumPy result. Waits for the run and raises what
        its checks (and earlier enqueues' pending ones) found."""
        arrays = [a if isinstance(a, cla.Array) else as_array(a, name=n)
                  for a, n in zip(inputs, self.input_names, strict=False)]
        on_device = {isinstance(a, cla.Array) for a in arrays}
        if len(on_device) > 1:
            raise TypeError(f"{', '.join(self.input_names)} must all be NumPy arrays or all "
                            "device arrays")
        if on_device == {True}:
            result, _ = self.enqueue(*arrays, out=out)
            self.check()
            return result
        if out is not None:
            raise TypeError("out= takes device arrays; a call on NumPy arrays returns NumPy")
        self.check_inputs(arrays)
        return self.call_host(arrays)

    def call_host(self, arrays: list[np.ndarray]) -> Any:
        """The synchronous call on checked NumPy `arrays`: each copied whole to the device,
        the run enqueued, its checks waited for, the result read back. A plan whose inputs
        may exceed the device (the banded kNN) converts them block by block instead."""
        queue, uploaded = self.runtime.queue, []
        for i, array in enumerate(arrays):
            # Each input's copy goes through a buffer of the plan, reused from call to call.
            host = np.ascontiguousarray(array)
            buf = self.pool.get(f"call_input{i}", host.nbytes)
            settle(queue)
            cl.enqueue_copy(queue, buf, host)
            uploaded.append(cla.Array(queue, host.shape, host.dtype, data=buf))
        result, _ = self.enqueue(*uploaded)
        self.check()
        return to_host(result)

    @property
    def uploader(self) -> Uploader:
        """The checking conversion of the plan's inputs (`clpatch.core.upload.Uploader`):
        made on first use, unless the plan set its matcher's."""
        if self._uploader is None:
            self._uploader = Uploader(self.runtime, self.pool)
        return self._uploader

    @uploader.setter
    def uploader(self, uploader: Uploader) -> None:
        self._uploader = uploader

    def planned_strength(self) -> Any:
        """A filter's `strength` for `enqueue`; TypeError when the plan was not made by
        `clpatch.make_plan` (no strength fixed, or made for NumPy results)."""
        if self.strength is None or not self.device_output:
            raise TypeError(f"enqueue needs a plan from clpatch.make_plan({self.method!r}, ...)")
        return self.strength

    def check(self) -> None:
        """Wait for the value checks of every earlier `enqueue` and raise the first failure
        (ValueError naming the input)."""
        self.checks.wait(self.runtime.queue)

    def stream(self, frames: Iterable[Any]) -> Iterator[Any]:
        """Run the plan on each input of `frames` (any iterable of arrays of the planned
        shape and dtype, NumPy or device), pipelined: input k + 1 is copied and enqueued
        before the result of input k is read back. Yields the results in order, NumPy for
        NumPy inputs (device results for device inputs); raises the checks' errors at the
        latest after the last."""
        if len(self.input_shapes) != 1:
            raise TypeError(f"stream takes plans of one input; this {self.method} plan "
                            f"takes {len(self.input_shapes)}")
        queue, pending = self.runtime.queue, None
        for i, frame in enumerate(frames):
            if isinstance(frame, cla.Array):
                source, copied = frame, None
            else:
                host = np.ascontiguousarray(as_array(frame, name=self.input_names[0]))
                self.check_inputs([host])
                # Two slots: input k + 2 is copied once result k has been read back.
                buf = self.pool.get(f"stream_input{i % 2}", host.nbytes)
                copied = (cl.enqueue_copy(queue, buf, host, is_blocking=False), host)
                source = cla.Array(queue, host.shape, host.dtype, data=buf)
            result, _ = self.enqueue(source)
            if pending is not None:
                yield self._fetch(*pending)
            pending = (result, copied is None)
        if pending is not None:
            yield self._fetch(*pending)
        self.check()

    def _fetch(self, result: Any, on_device: bool) -> Any:
        """A streamed result, read back for a host input (waits for it)."""
        if on_device:
            return result
        settle(self.runtime.queue)
        return to_host(result)

    # ---- for the subclasses -----------------------------------------------------------------

    def enqueue_arrays(self, *arrays: Any, out: Any,
                       wait_for: list[Any] | None) -> tuple[Any, list[Any]]:
        raise NotImplementedError(f"{type(self).__name__} has no enqueue")

    def device_inputs(self, inputs: Sequence[Any]) -> list[Any]:
        """`inputs` checked against the plan (`check_inputs`), each a device array on the
        plan's context."""
        self.check_inputs(inputs)
        for array, name in zip(inputs, self.input_names, strict=False):
            if not isinstance(array, cla.Array):
                raise TypeError(f"{name} must be a pyopencl.array.Array (enqueue takes device "
                                f"arrays; call the plan for NumPy), got {type(array).__name__}")
            if array.context != self.runtime.context:
                raise ValueError(f"{name} lives in another OpenCL context than the plan's")
        return list(inputs)

    def check_inputs(self, inputs: Sequence[Any]) -> None:
        """The number of `inputs`, and each one's shape and dtype, are the planned ones
        (TypeError/ValueError naming the input otherwise)."""
        names = self.input_names
        if len(inputs) != len(self.input_shapes):
            raise TypeError(f"the {self.method} plan takes {len(self.input_shapes)} input(s) "
                            f"({', '.join(names[:len(self.input_shapes)])}), got {len(inputs)}")
        for array, name, shape in zip(inputs, names, self.input_shapes, strict=False):
            if tuple(array.shape) != tuple(shape):
                raise ValueError(f"{name} has shape {tuple(array.shape)}; the plan was made "
                                 f"for {tuple(shape)}")
            if self.input_dtype is not None and np.dtype(array.dtype) != self.input_dtype:
                raise ValueError(f"{name} has dtype {array.dtype}; the plan was made for "
                                 f"{self.input_dtype}")

    def defer_check(self, last: list[Any] | None, judge: float | Callable[[float], Any],
                    name: str = "image", *, uploader: Any = None) -> None:
        """Queue the read of this run's check word of `uploader` (default the plan's),
        after `last`, without waiting for it; `poll`/`check` judge it later (see
        `DeviceChecks`). `judge`: the largest |value| allowed (the input is `name`), or a
        callable taking the peak and raising ValueError."""
        if not callable(judge):
            limit = float(judge)

            def judge(peak: float) -> None:
                check_peak(peak, limit, name)

        host = np.zeros(1, np.uint32)
        uploader = uploader or self.uploader
        self.checks.add(uploader.read_peak(host, wait_for=last), host, judge)

    def joined(self, events: Sequence[Any]) -> Any:
        """One event completing with all of `events` (a marker when there are several)."""
        events = list(events)
        if len(events) == 1:
            return events[0]
        return cl.enqueue_marker(self.runtime.queue, wait_for=events or None)


def to_host(result: Any) -> Any:
    """A plan's result with its device arrays copied to NumPy: a device array, or a
    dataclass (Matches) whose array fields are device arrays."""
    if isinstance(result, cla.Array):
        return result.get()
    if dataclasses.is_dataclass(result):
        changes = {f.name: getattr(result, f.name).get() for f in dataclasses.fields(result)
                   if isinstance(getattr(result, f.name), cla.Array)}
        return dataclasses.replace(result, **changes)
    return result
