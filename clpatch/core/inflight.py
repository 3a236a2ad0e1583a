"""Work in flight on a runtime's queue: a bound on the launches queued and not finished,
waits that Ctrl-C and `Runtime.cancel()` can interrupt, and the progress hook.

A plan enqueues its launches asynchronously and then blocks in a host read. While the host
sits in a driver call, Python cannot raise `KeyboardInterrupt`, and a queue holding a whole
call's work would make that read (and the display watchdog's view of the device) as long as
the call. So every launch made through `clpatch.core.kernels.CachedKernel` on a runtime's
queue is recorded here (its event), and before a launch is enqueued while `limit` launches
are in flight, the oldest is waited for. A queue with fewer than `limit` launches in flight
takes the fast path: no status query, no wait, a length check and an append per launch.

How a wait is made depends on the device. On a GPU, where the engines bound each launch's
work to milliseconds, a wait blocks in the driver on one launch (or one copy piece) at a
time, oldest first, and checks for signals, cancellation and progress between them: the
driver's wait releases Python's lock (the host threads copying pieces of a NumPy image keep
running, where a status-polling loop would hold the lock for up to the interpreter's switch
interval and starve them), and a signal is seen as soon as the launch being waited for
ends. On a CPU device, whose launches may take seconds, a wait polls the event's status
with short sleeps instead, so a signal or a cancellation is seen within `MAX_SLEEP` seconds.

Cancellation is checked after each launch is enqueued and in every wait; it raises
`Cancelled` in the thread running the call and clears the request. The launches already
enqueued are abandoned, not waited for: the queue is in order, so the next call's launches
and reads (which reuse the plans' buffers) run after them. They stay recorded here, so the
next call's launches wait for them through the bound like any others.

The progress hook is called in the thread running the call (at launch boundaries and while
waiting), never from an OpenCL callback thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyopencl as cl

from .errors import Cancelled

#: Launches a queue may hold unfinished before a new launch waits for the oldest, on a GPU
#: (or any device but a CPU): enough to hide the launch latency (the host enqueues while
#: the device runs the others; on the H100, BM3D on a 128² image measured about 0.2 ms a
#: call slower with 8, within noise with 16), few enough that the work left behind by Ctrl-C or a cancel
#: is short, as long as each launch is: bounding a launch's work is the engine's part (e.g.
#: `GROUPS_PER_LAUNCH` of BM3D).
MAX_IN_FLIGHT = 16
#: The same on a CPU device (PoCL): its launches are long and its host enqueues in no time,
#: so a few suffice, and fewer are left to run after a cancel.
MAX_IN_FLIGHT_CPU = 4
#: A polling wait (CPU devices) first queries the event's status this many times without
#: sleeping, so that a short wait costs no more than the driver's blocking wait; fewer
#: than a GPU would need, since the host thread takes its core from the kernels.
SPIN_QUERIES_CPU = 200
#: Then it sleeps SLEEP_FRACTION of the time waited since (so it adds at most about that part
#: of the wait), between MIN_SLEEP and MAX_SLEEP seconds: the longest sleep is how late a
#: signal or a cancel may be seen.
SLEEP_FRACTION = 0.05
MIN_SLEEP = 5e-5
MAX_SLEEP = 0.01


@dataclass(frozen=True)
class Progress:
    """What the progress hook receives.

    launches: launches finished since the hook was set (`Runtime.progress = hook`), counted
        as they are seen finished; it only grows. The number a call makes is not known in
        advance: this is a sign of life for a progress display, not a fraction.
    in_flight: launches enqueued and not yet seen finished.
    stage: the kernel name of the launch seen finished last (e.g. "nlm_average").
    """

    launches: int
    in_flight: int
    stage: str


class InFlight:
    """The launches of one queue not yet seen finished, its cancel request and its progress
    hook. Thread-safe: launches may come from several threads, `cancel()` from any."""

    def __init__(self, queue: Any, limit: int, blocking: bool = False) -> None:
        self.queue = queue
        self.limit = limit
        self.blocking = blocking    # waits block in the driver, launch by launch (GPUs)
        self.cancel_requested = False
        self._events: deque[tuple[int, Any, str]] = deque()   # (sequence, event, kernel)
        self._lock = threading.Lock()
        self._enqueued = 0          # launches recorded since the queue was registered
        self._hook: Callable[[Progress], Any] | None = None
        self._finished = 0          # launches seen finished since the hook was set
        self._reported = 0
        self._stage = ""
        self._unbounded = 0         # `unbounded()` blocks entered and not left

    @contextlib.contextmanager
    def unbounded(self) -> Iterator[None]:
        """Launches made inside do not wait for room (a plan's `enqueue`, which must return
        without waiting for the device: its caller waits, with events); they are still
        recorded, so the next bounded launch or `settle` waits for them."""
        with self._lock:
            self._unbounded += 1
        try:
            yield
        finally:
            with self._lock:
                self._unbounded -= 1

    # ---- the launch path (`clpatch.core.kernels.CachedKernel`) -----------------------------

    def before_launch(self) -> None:
        """Make room for one launch: wait (interruptibly) while `limit` are unfinished
        (inside `unbounded()`, only forget the finished ones)."""
        if len(self._events) >= self.limit:
            if self._unbounded:
                self._prune()
            else:
                self._make_room()

    def launched(self, event: Any, name: str) -> None:
        """Record a launch just enqueued; report progress; raise `Cancelled` if asked."""
        with self._lock:
            self._enqueued += 1
            self._events.append((self._enqueued, event, name))
        self.poll()

    def _make_room(self) -> None:
        self._prune()
        while len(self._events) >= self.limit:
            try:
                _, event, _ = self._events[0]
            except IndexError:      # another thread emptied it
                break
            wait_event(event, self, self.queue)
            self._prune()

    # ---- bookkeeping -------------------------------------------------------------------------

    def _prune(self, through: int = 0) -> None:
        """Forget the launches seen finished: the oldest ones whose status is complete, and
        every launch with a sequence number up to `through` (known done: a later launch on
        the same in-order queue has finished)."""
        with self._lock:
            events = self._events
            while events:
                seq, event, name = events[0]
                if seq > through and event.command_execution_status > 0:
                    break
                events.popleft()
                self._finished += 1
                self._stage = name

    def _report(self) -> None:
        hook = self._hook
        if hook is not None and self._finished > self._reported:
            self._reported = self._finished
            hook(Progress(self._finished, len(self._events), self._stage))

    def settle(self) -> None:
        """Wait for the newest launch recorded (the queue is in order: for all of them); on
        a blocking queue, one launch at a time, oldest first."""
        try:
            seq, event, _ = self._events[-1]
        except IndexError:
            return
        if self.blocking:
            while True:
                try:
                    first, oldest, _ = self._events[0]
                except IndexError:
                    break
                wait_event(oldest, self, self.queue)
                self._prune(first)
                if first >= seq:
                    break
        else:
            wait_event(event, self, self.queue)
            self._prune(seq)
        self._report()

    @property
    def hook(self) -> Callable[[Progress], Any] | None:
        return self._hook

    @hook.setter
    def hook(self, hook: Callable[[Progress], Any] | None) -> None:
        if hook is not None and not callable(hook):
            raise TypeError(f"progress must be a callable or None, got {type(hook).__name__}")
        with self._lock:
            self._hook = hook
            self._finished = self._reported = 0
            self._stage = ""

    def in_flight(self) -> int:
        """Launches enqueued and not yet seen finished (none are queried)."""
        return len(self._events)

    def poll(self) -> None:
        """After a launch and while waiting: report progress and raise `Cancelled` if asked."""
        if self._hook is not None:
            self._prune()
            self._report()
        if self.cancel_requested:
            self._raise_cancelled()

    def _raise_cancelled(self) -> None:
        self.cancel_requested = False
        raise Cancelled("the call was cancelled (Runtime.cancel()); the runtime can be "
                        "used again")


def wait_event(event: Any, flight: InFlight | None = None, queue: Any = None) -> None:
    """Wait until `event` is complete: with a blocking `flight` (a GPU's) in the driver, then
    the flight's cancel request and progress are checked; otherwise polling its status, so
    that `KeyboardInterrupt` (main thread) and, with `flight`, a cancel request (`Cancelled`)
    are seen within `MAX_SLEEP` seconds.
    `queue` (the event's queue; default: asked of the event) is flushed first so that the
    command is sure to start. A failed command raises the driver's error, as `event.wait()`."""
    status = event.command_execution_status
    if status > 0:
        (queue if queue is not None else event.command_queue).flush()
        if flight is not None and flight.blocking:
            event.wait()
            flight.poll()
            return
        for _ in range(SPIN_QUERIES_CPU):
            status = event.command_execution_status
            if status <= 0:
                break
        else:
            start = time.monotonic()
            while status > 0:
                time.sleep(min(MAX_SLEEP,
                               max(MIN_SLEEP, SLEEP_FRACTION * (time.monotonic() - start))))
                if flight is not None:
                    flight.poll()
                status = event.command_execution_status
    if status < 0:
        event.wait()


def settle(queue: Any) -> None:
    """Wait, like `wait_event`, until every launch recorded for `queue` (a runtime's
    in-order queue) has finished; nothing when none is unfinished. Call it before a
    blocking read that waits for those launches: the read itself then only moves data.
    (Rather than a non-blocking read waited for by polling: pyopencl's event of a copy into
    host memory waits for the copy in the driver when it is dropped, as an interrupted wait
    would drop it, and such reads measured slower than blocking ones on the H100.)"""
    flight = flight_of(queue)
    if flight is not None:
        flight.settle()


_flights: weakref.WeakValueDictionary[int, InFlight] = weakref.WeakValueDictionary()
_flights_lock = threading.Lock()


def default_limit(device: Any) -> int:
    """The bound on launches in flight for `device`: MAX_IN_FLIGHT, MAX_IN_FLIGHT_CPU on a CPU."""
    return MAX_IN_FLIGHT_CPU if device.type & cl.device_type.CPU else MAX_IN_FLIGHT


def default_blocking(device: Any) -> bool:
    """Whether waits on `device`'s queues block in the driver (any device but a CPU)."""
    return not device.type & cl.device_type.CPU


def register(queue: Any, limit: int | None = None) -> InFlight:
    """The `InFlight` of `queue`, made on first use with `default_limit` (runtimes sharing a
    queue share it); `limit` replaces its bound when given. Kept while a runtime (or a
    kernel) holds it."""
    with _flights_lock:
        flight = _flights.get(queue.int_ptr)
        if flight is None:
            device = queue.device
            flight = _flights[queue.int_ptr] = InFlight(queue, default_limit(device),
                                                        default_blocking(device))
    if limit is not None:
        flight.limit = limit
    return flight


def flight_of(queue: Any) -> InFlight | None:
    """The `InFlight` registered for `queue` (a runtime's queue), or None."""
    return _flights.get(queue.int_ptr)
