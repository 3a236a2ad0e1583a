"""One runtime, several threads, the same shapes: every call equals its single-threaded
result (issue 43's soak, `benchmarks/soak.py`, found calls that shared a cached plan mixing
their commands: wrong images, ValueErrors about NaN the input did not hold, and heap
corruption on PoCL). `PlanCache.using` gives a cached plan to one call at a time."""

from __future__ import annotations

import threading

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core.plans import PlanCache

THREADS = 4


def _images(count: int, shape: tuple[int, ...]) -> list[np.ndarray]:
    return [np.random.default_rng(seed).integers(0, 256, shape).astype(np.float32)
            for seed in range(count)]


def _in_threads(calls, rounds: int) -> list[tuple[int, object]]:
    """Run calls[t] `rounds` times in thread t, all threads at once; (t, result) pairs, or
    (t, the exception)."""
    out: list[tuple[int, object]] = []
    start = threading.Barrier(len(calls))

    def work(t: int) -> None:
        start.wait()
        for _ in range(rounds):
            try:
                out.append((t, calls[t]()))
            except Exception as exc:    # a failure is a finding: kept, compared below
                out.append((t, exc))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


CALLS = {
    "nlmeans": lambda x, rt: clpatch.nlmeans(x, 20.0, runtime=rt),
    "bm3d": lambda x, rt: clpatch.bm3d(x, 20.0, runtime=rt),
    "search": lambda x, rt: clpatch.search_patches(x, patch_size=5, k=4, window=7,
                                                   runtime=rt).distances,
    "nnf": lambda x, rt: clpatch.nnf(x, x[::-1].copy(), patch_size=6, k=2, pca_dims=8,
                                     runtime=rt).positions,
    "knn_vectors": lambda x, rt: clpatch.knn_vectors(x[:, :8], x[:20, 8:16], k=3,
                                                     metric="cosine", runtime=rt).indices,
}


@pytest.mark.parametrize("name", list(CALLS))
def test_threads_sharing_plans_give_the_single_threaded_results(runtime, name):
    call = CALLS[name]
    images = _images(THREADS, (40, 44))
    want = [call(x, runtime) for x in images]
    found = _in_threads([lambda t=t: call(images[t], runtime) for t in range(THREADS)], 6)
    assert len(found) == 6 * THREADS
    for t, got in found:
        assert not isinstance(got, Exception), f"thread {t}: {got!r}"
        np.testing.assert_array_equal(got, want[t], err_msg=f"{name}, thread {t}")


def test_device_arrays_in_threads(runtime):
    images = _images(THREADS, (40, 44))
    device = [cla.to_device(runtime.queue, x) for x in images]
    want = [clpatch.nlmeans(x, 20.0, runtime=runtime) for x in images]
    found = _in_threads([lambda t=t: clpatch.nlmeans(device[t], 20.0, runtime=runtime).get()
                         for t in range(THREADS)], 5)
    for t, got in found:
        assert not isinstance(got, Exception), f"thread {t}: {got!r}"
        np.testing.assert_array_equal(got, want[t])


def test_using_gives_a_plan_to_one_thread_at_a_time():
    cache = PlanCache()
    made, inside, most = [], [0], [0]
    lock = threading.Lock()

    def call() -> None:
        with cache.using(("x", 1), lambda: made.append(1) or object(), 2):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            threading.Event().wait(0.002)
            with lock:
                inside[0] -= 1

    _in_threads([lambda: call()] * 6, 20)
    assert most[0] == 1 and len(made) == 1
    # another key runs beside it; an evicted key's next user gets a new plan
    with cache.using(("x", 1), object, 1) as first, cache.using(("x", 2), object, 1) as second:
        assert first is not second and ("x", 1) not in cache
    with cache.using(("x", 1), object, 1) as again:
        assert again is not first
    cache.clear()
    assert not cache
