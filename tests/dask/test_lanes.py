"""clpatch.dask.worker's lanes: several calls at once on one device per process, each on a
runtime of its own sharing one context, and results the same as one call at a time."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import clpatch

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
cdask = pytest.importorskip("clpatch.dask")
from clpatch.dask import worker as dask_worker  # noqa: E402

from .test_dask import NLM, SIGMA, chunked, noisy  # noqa: E402


class ThreadsWorker:
    def __init__(self, nthreads):
        self.state = type("State", (), {"nthreads": nthreads})()


@pytest.fixture
def fresh_lanes():
    """No lanes and no runtime given by `use_runtime` (an earlier test's, e.g. the command
    line's --device, would make this process's only lane), before and after."""
    dask_worker.use_runtime(None)
    yield
    dask_worker.use_runtime(None)


def test_lanes_from_env_and_worker_threads(fresh_lanes, monkeypatch):
    monkeypatch.delenv(dask_worker.LANES_ENV, raising=False)
    assert dask_worker.lanes() == 1                            # not a worker
    assert dask_worker.lanes(ThreadsWorker(2)) == 2
    assert dask_worker.lanes(ThreadsWorker(64)) == dask_worker.MAX_LANES
    monkeypatch.setenv(dask_worker.LANES_ENV, "3")
    assert dask_worker.lanes(ThreadsWorker(1)) == 3
    for bad in ("two", "0"):
        monkeypatch.setenv(dask_worker.LANES_ENV, bad)
        with pytest.raises(ValueError, match=dask_worker.LANES_ENV):
            dask_worker.lanes()


def test_calls_overlap_on_lanes_of_one_context(on_device, monkeypatch):
    monkeypatch.setenv(dask_worker.LANES_ENV, "2")
    both = threading.Barrier(2, timeout=20)
    seen, order = [], []

    def call(runtime):
        seen.append(runtime)
        both.wait()                 # two calls at once: each must hold a lane of its own
        return runtime

    threads = [threading.Thread(target=dask_worker.run_on_device, args=(call,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(seen) == 2 and seen[0] is not seen[1]
    assert seen[0].context == seen[1].context and seen[0].queue != seen[1].queue
    assert dask_worker.worker_runtime() in seen

    # A third call waits while both lanes are held, then gets one of them.
    held = threading.Barrier(3, timeout=20)       # both holders hold a lane, and this thread
    go = threading.Event()

    def hold(runtime):
        held.wait()
        go.wait(20)
        order.append("held")

    def third(runtime):
        order.append("third")
        return runtime

    holders = [threading.Thread(target=dask_worker.run_on_device, args=(hold,)) for _ in range(2)]
    for t in holders:
        t.start()
    held.wait()
    got = []
    waiter = threading.Thread(target=lambda: got.append(dask_worker.run_on_device(third)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and order == []        # no free lane, none opened beyond 2
    go.set()
    for t in (*holders, waiter):
        t.join(30)
    assert order.count("held") == 2 and order.index("third") > order.index("held")
    assert got[0] in seen and dask_worker.open_lanes() == 2


def test_use_runtime_is_the_only_lane(on_device, monkeypatch):
    monkeypatch.setenv(dask_worker.LANES_ENV, "4")
    dask_worker.use_runtime(on_device)
    assert dask_worker.lanes() == 1
    assert dask_worker.run_on_device(lambda rt: rt) is on_device
    dask_worker.use_runtime(None)
    assert dask_worker.lanes() == 4


@pytest.mark.parametrize("method", ["nlmeans", "bm3d"])
def test_lanes_give_the_same_result(on_device, monkeypatch, method):
    if not on_device.profile.int64_atomics:
        pytest.skip("no 64-bit atomics")
    monkeypatch.setenv(dask_worker.LANES_ENV, "3")
    image = noisy((61, 58), seed=12)
    x = chunked(image, (20, 19))
    if method == "nlmeans":
        want = clpatch.nlmeans(image, SIGMA, runtime=on_device, aggregation="fixed", **NLM)
        lazy = cdask.nlmeans(x, SIGMA, aggregation="fixed", **NLM)
    else:
        kw = dict(window=(9, 7), k=(8, 4))
        want = clpatch.bm3d(image, SIGMA, runtime=on_device, **kw)
        lazy = cdask.bm3d(x, SIGMA, **kw)
    with dask.config.set(scheduler="threads", num_workers=3):
        got = lazy.compute()
    np.testing.assert_array_equal(got, want)
    assert dask_worker.open_lanes() >= 2            # the pieces did run side by side
