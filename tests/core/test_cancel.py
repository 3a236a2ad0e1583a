"""Work in flight (`clpatch.core.inflight`): the bound on unfinished launches, `Runtime.cancel()`
from another thread, Ctrl-C (SIGINT) during a long call, and the progress hook.

The interruption tests need a call that runs for seconds: NL-means with 5 × 5 patches at step 1
on a 256² image does on a CPU (PoCL). On a device that finishes it in under a second they are
skipped (nothing long enough to interrupt)."""

import signal
import threading
import time

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core.inflight import Progress, default_limit, flight_of
from clpatch.core.kernels import kernel
from clpatch.denoise import nlmeans_plan
from clpatch.denoise.nlmeans_plan import NLMeansPlan
from tests.helpers import random_image

LONG = dict(patch_size=5, step=1)
LONG_SIDE = 256
#: A call this long (seconds, uninterrupted) is long enough to interrupt in its middle.
LONG_ENOUGH = 1.0
#: How late a cancel or a signal may be seen (seconds; the waits poll every 10 ms at most).
LATENCY = 0.5

_SOURCE = "__kernel void add_one(__global float *x) { x[get_global_id(0)] += 1.0f; }"


@pytest.fixture
def clean(runtime):
    """The test's runtime with its bound, hook and cancel request restored afterwards."""
    limit = runtime.max_in_flight
    yield runtime
    runtime.progress = None
    runtime.clear_cancel()
    runtime.max_in_flight = limit


@pytest.fixture(scope="module")
def long_case(runtime):
    """(image, its uninterrupted result, seconds it took) of the long call."""
    image = random_image((LONG_SIDE, LONG_SIDE), seed=181)
    clpatch.nlmeans(image[:64, :64], 20, runtime=runtime, **LONG)     # builds the programs
    start = time.perf_counter()
    expected = clpatch.nlmeans(image, 20, runtime=runtime, **LONG)
    took = time.perf_counter() - start
    if took < LONG_ENOUGH:
        pytest.skip(f"the long call takes {took:.2f} s on this device: nothing to interrupt")
    return image, expected, took


def _add_one(runtime):
    return kernel(runtime.programs.build(_SOURCE), "add_one")


# ---- the bound -------------------------------------------------------------------------------

def test_launches_in_flight_stay_within_the_bound(clean):
    rt = clean
    rt.max_in_flight = 3
    add = _add_one(rt)
    data = np.zeros(4096, np.float32)
    buf = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=data)
    flight = flight_of(rt.queue)
    seen = []
    for _ in range(40):
        add(rt.queue, data.shape, None, buf)
        seen.append(flight.in_flight())
    cl.enqueue_copy(rt.queue, data, buf)
    assert max(seen) <= 3 and np.all(data == 40)


def test_max_in_flight_and_progress_are_checked(runtime):
    with pytest.raises(ValueError, match="max_in_flight"):
        clpatch.Runtime(queue=runtime.queue, max_in_flight=0)
    with pytest.raises(TypeError, match="progress"):
        clpatch.Runtime(queue=runtime.queue, progress=3)
    with pytest.raises(ValueError, match="max_in_flight"):
        runtime.max_in_flight = -1
    assert runtime.max_in_flight == default_limit(runtime.device)


# ---- progress --------------------------------------------------------------------------------

def test_progress_counts_grow_and_end_with_nothing_in_flight(clean):
    rt = clean
    image = random_image((48, 40), seed=182)
    expected = clpatch.nlmeans(image, 20, runtime=rt)
    seen: list[Progress] = []
    rt.progress = seen.append
    result = clpatch.nlmeans(image, 20, runtime=rt)
    np.testing.assert_array_equal(result, expected)
    counts = [p.launches for p in seen]
    assert counts and counts == sorted(set(counts)) and counts[0] >= 1
    assert seen[-1].in_flight == 0
    assert seen[-1].stage == "nlm_finalize"       # the last launch of the call
    rt.progress = seen.append          # setting the hook restarts the count
    clpatch.nlmeans(image, 20, runtime=rt)
    assert seen[len(counts)].launches <= counts[-1]
    rt.progress = None
    total = len(seen)
    clpatch.nlmeans(image, 20, runtime=rt)
    assert len(seen) == total


def test_no_hook_no_bookkeeping_on_the_launch_path(clean, monkeypatch):
    rt = clean
    rt.max_in_flight = 64
    add = _add_one(rt)
    buf = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, 4 * 256)
    flight = flight_of(rt.queue)
    cl.enqueue_copy(rt.queue, buf, np.zeros(256, np.float32))
    rt.queue.finish()
    calls = []
    monkeypatch.setattr(flight, "_prune", lambda *a: calls.append(a))
    monkeypatch.setattr(flight, "_events", type(flight._events)())
    for _ in range(10):
        add(rt.queue, (256,), None, buf)
    assert calls == [] and flight.in_flight() == 10
    rt.queue.finish()


# ---- cancel ----------------------------------------------------------------------------------

def test_cancel_from_another_thread_at_a_launch_boundary(clean):
    """Deterministic: the hook (in the calling thread) waits until another thread has
    called cancel(); with one launch in flight it runs at the second launch's boundary, so
    the call has launches left and must raise there."""
    rt = clean
    image = random_image((40, 48), seed=183)
    expected = clpatch.nlmeans(image, 20, runtime=rt)
    rt.max_in_flight = 1
    sent = threading.Event()

    def hook(progress):
        if not sent.is_set():
            threading.Thread(target=lambda: (rt.cancel(), sent.set())).start()
            assert sent.wait(10)

    rt.progress = hook
    with pytest.raises(clpatch.Cancelled):
        clpatch.nlmeans(image, 20, runtime=rt)
    assert not rt.cancel_requested
    rt.progress = None
    np.testing.assert_array_equal(clpatch.nlmeans(image, 20, runtime=rt), expected)


def test_cancel_requested_before_a_call_stops_it_unless_withdrawn(clean):
    rt = clean
    image = random_image((32, 32), seed=184)
    expected = clpatch.nlmeans(image, 20, runtime=rt)
    rt.cancel()
    with pytest.raises(clpatch.Cancelled):
        clpatch.nlmeans(image, 20, runtime=rt)
    rt.cancel()
    assert rt.cancel_requested
    rt.clear_cancel()
    np.testing.assert_array_equal(clpatch.nlmeans(image, 20, runtime=rt), expected)
    assert issubclass(clpatch.Cancelled, clpatch.ClpatchError)


@pytest.mark.parametrize("in_flight", [1, None], ids=["one-in-flight", "default"])
def test_cancel_during_a_long_call_is_quick_and_the_next_call_is_exact(clean, long_case,
                                                                      in_flight):
    rt = clean
    image, expected, took = long_case
    if in_flight is not None:
        rt.max_in_flight = in_flight
    delay = min(0.2, took / 5)
    timer = threading.Timer(delay, rt.cancel)
    start = time.perf_counter()
    timer.start()
    with pytest.raises(clpatch.Cancelled):
        clpatch.nlmeans(image, 20, runtime=rt, **LONG)
    stopped = time.perf_counter() - start
    timer.join()
    assert stopped < delay + LATENCY < took, (stopped, took)
    np.testing.assert_array_equal(clpatch.nlmeans(image, 20, runtime=rt, **LONG), expected)


@pytest.fixture(params=["polling", "blocking"])
def wait_mode(clean, request):
    """The runtime's waits as on a CPU device (polling) and as on a GPU (blocking in the
    driver, one launch at a time), whatever the test device is."""
    flight = flight_of(clean.queue)
    before = flight.blocking
    flight.blocking = request.param == "blocking"
    yield clean
    flight.blocking = before


def test_cancel_during_a_pipelined_call_leaves_the_slots_consistent(wait_mode, monkeypatch):
    """Bands with pinned transfers (forced on a small image; the deterministic "buffers"
    aggregation, since "fixed" needs the peak first and is not pipelined), cancelled from
    another thread once half of the call's launches are done (one launch in flight: the
    hook sees each launch finish at the next one's boundary): the next run of the same plan
    gives the uninterrupted result, with either kind of wait."""
    rt = wait_mode
    rt.max_in_flight = 1
    monkeypatch.setattr(nlmeans_plan, "PIPELINE_BYTES", 1)
    plan = NLMeansPlan(rt, 1, 96, 80, 1, aggregation="buffers", patch_size=4, step=2)
    assert plan.pipelined and len(plan.tiles) > 1
    image = random_image((96, 80), seed=185)
    seen: list[Progress] = []
    rt.progress = seen.append
    expected = plan.run(image, 20)
    half = seen[-1].launches // 2
    assert half >= len(plan.tiles)
    sent = threading.Event()

    def hook(progress):
        if progress.launches >= half and not sent.is_set():
            threading.Thread(target=lambda: (rt.cancel(), sent.set())).start()
            assert sent.wait(10)

    rt.progress = hook
    with pytest.raises(clpatch.Cancelled):
        plan.run(image, 20)
    rt.progress = None
    np.testing.assert_array_equal(plan.run(image, 20), expected)


# ---- Ctrl-C ----------------------------------------------------------------------------------

def test_sigint_during_a_long_call_raises_keyboard_interrupt_quickly(clean, long_case):
    rt = clean
    image, expected, took = long_case
    armed = threading.Event()

    def on_sigint(signum, frame):       # the default handler, only while the call runs
        if armed.is_set():
            raise KeyboardInterrupt

    delay = min(0.2, took / 5)
    previous = signal.signal(signal.SIGINT, on_sigint)
    timer = threading.Timer(delay, signal.raise_signal, (signal.SIGINT,))
    try:
        armed.set()
        start = time.perf_counter()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            clpatch.nlmeans(image, 20, runtime=rt, **LONG)
        stopped = time.perf_counter() - start
    finally:
        armed.clear()
        timer.join()
        signal.signal(signal.SIGINT, previous)
    assert stopped < delay + LATENCY < took, (stopped, took)
    np.testing.assert_array_equal(clpatch.nlmeans(image, 20, runtime=rt, **LONG), expected)


def test_blocking_waits_settle_launch_by_launch_with_progress(wait_mode):
    """A read after several launches waits for all of them (the result is complete), and the
    progress hook has seen every launch finish, in either kind of wait."""
    rt = wait_mode
    rt.max_in_flight = 64
    add_one = _add_one(rt)
    data = cla.zeros(rt.queue, 1024, np.float32)
    seen: list[Progress] = []
    rt.progress = seen.append
    for _ in range(12):
        add_one(rt.queue, (1024,), None, data.data)
    flight_of(rt.queue).settle()
    assert seen and seen[-1].in_flight == 0 and seen[-1].launches >= 12
    np.testing.assert_array_equal(data.get(), np.full(1024, 12, np.float32))
