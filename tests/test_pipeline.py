"""`clpatch.make_plan`: every method's plan gives the one-shot function's results bit for
bit (through `enqueue` on device arrays and through the synchronous call on NumPy arrays),
`enqueue` waits for nothing (held behind an unfinished user event, it still returns), data
checks are deferred and raised by `check()`, and wrong inputs, outputs and parameters get
errors naming them."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core.plans import Plan
from tests.helpers import enqueue_behind_gate, random_image


def _u8(shape, seed=0):
    return random_image(shape, seed).round().clip(0, 255).astype(np.uint8)


def _f32(shape, seed=0):
    return random_image(shape, seed).round().astype(np.float32)


# (id, method, inputs, make_plan parameters, the one-shot call, waits by design)
CASES = [
    ("search", "search", lambda: [_f32((37, 45))],
     dict(patch_size=6, step=3, window=11, k=8),
     lambda x, rt: clpatch.search_patches(x, 6, 3, 11, 8, runtime=rt), False),
    ("search-video-u8", "search", lambda: [_u8((4, 21, 23, 2))],
     dict(patch_size=4, step=2, window=7, k=6, temporal_window=1, metric="l1"),
     lambda x, rt: clpatch.search_patches(x, 4, 2, 7, 6, "l1", temporal_window=1,
                                          runtime=rt), False),
    ("ann", "ann", lambda: [_f32((40, 36))], dict(patch_size=5, k=8, tile=10),
     lambda x, rt: clpatch.ann_search(x, patch_size=5, k=8, tile=10, runtime=rt), False),
    ("knn-self", "knn", lambda: [_f32((26, 29))], dict(patch_size=5, k=6, step=2),
     lambda x, rt: clpatch.knn(x, patch_size=5, k=6, step=2, runtime=rt), False),
    ("knn-pair", "knn", lambda: [_u8((20, 25, 3)), _u8((23, 19, 3), 1)],
     dict(patch_size=4, k=5, method="direct", metric="l1"),
     lambda q, r, rt: clpatch.knn(q, r, patch_size=4, k=5, method="direct", metric="l1",
                                  runtime=rt), False),
    ("nnf", "nnf", lambda: [_f32((30, 34)), _f32((28, 31), 1)], dict(patch_size=5, k=2),
     lambda a, b, rt: clpatch.nnf(a, b, patch_size=5, k=2, runtime=rt), True),
    ("nlmeans-u8", "nlmeans", lambda: [_u8((37, 45))], dict(sigma=20),
     lambda x, rt: clpatch.nlmeans(x, 20, runtime=rt), False),
    ("nlmeans-colour-fixed", "nlmeans", lambda: [_f32((29, 31, 3))],
     dict(sigma=20, aggregation="fixed", patch_size=5, step=2),
     lambda x, rt: clpatch.nlmeans(x, 20, aggregation="fixed", patch_size=5, step=2,
                                   runtime=rt), False),
    ("nlmeans-guide", "nlmeans", lambda: [_f32((30, 33)), _f32((30, 33), 1)],
     dict(sigma=20, guide=True),
     lambda x, g, rt: clpatch.nlmeans(x, 20, guide=g, runtime=rt), False),
    ("nlmeans-video", "nlmeans_video", lambda: [_f32((4, 24, 26))],
     dict(sigma=20, temporal_window=1, patch_size=8, step=4),
     lambda x, rt: clpatch.nlmeans_video(x, 20, temporal_window=1, patch_size=8, step=4,
                                         runtime=rt), False),
    ("bm3d-peak", "bm3d", lambda: [_f32((37, 45))], dict(sigma=20, peak=255.0),
     lambda x, rt: clpatch.bm3d(x, 20, peak=255.0, runtime=rt), False),
    ("bm3d-colour-u8", "bm3d", lambda: [_u8((29, 31, 3))], dict(sigma=20),
     lambda x, rt: clpatch.bm3d(x, 20, runtime=rt), True),
    ("bm3d-reference", "bm3d", lambda: [_f32((33, 35))],
     dict(sigma=20, preset="reference", peak=255.0),
     lambda x, rt: clpatch.bm3d(x, 20, preset="reference", peak=255.0, runtime=rt), False),
    ("vbm3d-peak", "vbm3d", lambda: [_u8((5, 24, 26))], dict(sigma=20, peak=255.0),
     lambda x, rt: clpatch.vbm3d(x, 20, peak=255.0, runtime=rt), False),
    ("burst-bm3d", "burst", lambda: [_u8((4, 30, 33))],
     dict(sigma=20, method="bm3d", k=8, reference=1),
     lambda x, rt: clpatch.burst_denoise(x, 20, method="bm3d", k=8, reference=1,
                                         runtime=rt), True),
    ("burst-bm3d-peak", "burst", lambda: [_u8((4, 30, 33))],
     dict(sigma=20, method="bm3d", k=8, reference=1, peak=255.0),
     lambda x, rt: clpatch.burst_denoise(x, 20, method="bm3d", k=8, reference=1, peak=255.0,
                                         runtime=rt), False),
]
IDS = [c[0] for c in CASES]


def _plan(runtime, method, inputs, params):
    shape, dtype = inputs[0].shape, inputs[0].dtype
    if method in ("knn", "nnf") and len(inputs) == 2:
        params = dict(params, reference_shape=inputs[1].shape)
    return clpatch.make_plan(method, shape, dtype=dtype, runtime=runtime, **params)


def _host(result):
    if isinstance(result, clpatch.Matches):
        return [np.asarray(a.get() if isinstance(a, cla.Array) else a)
                for a in (result.positions, result.distances)]
    return [result.get() if isinstance(result, cla.Array) else np.asarray(result)]


def _same(actual, expected):
    for a, e in zip(_host(actual), _host(expected), strict=True):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_enqueue_and_call_give_the_one_shot_results(runtime, case):
    _, method, make, params, one_shot, _ = case
    inputs = make()
    expected = one_shot(*inputs, runtime)
    plan = _plan(runtime, method, inputs, params)
    assert isinstance(plan, Plan)
    device = [cla.to_device(runtime.queue, x) for x in inputs]
    result, event = plan.enqueue(*device)
    assert isinstance(event, cl.Event)
    event.wait()
    plan.check()
    _same(result, expected)
    _same(plan(*inputs), expected)                  # NumPy in, NumPy out
    again, _ = plan.enqueue(*device)                # a second run on the same plan
    plan.check()
    _same(again, expected)


@pytest.mark.parametrize("case", [c for c in CASES if not c[5]], ids=[c[0] for c in CASES
                                                                      if not c[5]])
def test_enqueue_waits_for_nothing(runtime, case):
    """Behind an unfinished user event nothing of the run can finish, so any wait for the
    device inside `enqueue` would hang: it must return anyway (a thread and a timeout)."""
    _, method, make, params, one_shot, _ = case
    inputs = make()
    plan = _plan(runtime, method, inputs, params)
    device = [cla.to_device(runtime.queue, x) for x in inputs]
    plan.enqueue(*device)[1].wait()             # built and sized: the first call
    runtime.queue.finish()
    returned, result, event = enqueue_behind_gate(plan, runtime.context, *device)
    assert returned, f"make_plan({method!r}).enqueue waited for the device"
    event.wait()
    plan.check()
    _same(result, one_shot(*inputs, runtime))


def test_plans_that_wait_say_so(runtime):
    image = _u8((24, 24))
    assert not clpatch.make_plan("bm3d", image.shape, dtype=np.uint8, runtime=runtime,
                                 sigma=20, peak=255.0).waits_for_peak
    assert clpatch.make_plan("bm3d", image.shape, dtype=np.uint8, runtime=runtime,
                             sigma=20).waits_for_peak
    assert clpatch.make_plan("vbm3d", (3, 24, 24), runtime=runtime, sigma=20).waits_for_peak
    assert clpatch.make_plan("nnf", (20, 20), reference_shape=(20, 20), runtime=runtime,
                             patch_size=5).waits_for_sample
    knn = clpatch.make_plan("knn", (20, 20), runtime=runtime, patch_size=5)
    assert not getattr(knn, "waits_for_peak", False)
    burst = dict(sigma=20, method="bm3d", k=4)
    assert clpatch.make_plan("burst", (3, 24, 24), runtime=runtime, **burst).waits_for_peak
    assert not clpatch.make_plan("burst", (3, 24, 24), runtime=runtime, peak=255.0,
                                 **burst).waits_for_peak
    with pytest.raises(ValueError, match="peak applies to method='bm3d' only"):
        clpatch.burst_denoise(np.zeros((3, 24, 24), np.float32), 20, peak=255.0,
                              runtime=runtime)


@pytest.mark.parametrize("method,params,name", [
    ("search", dict(patch_size=5, step=2, window=9, k=4), "image"),
    ("nlmeans", dict(sigma=20), "image"),
    ("bm3d", dict(sigma=20, peak=255.0), "image"),
    ("knn", dict(patch_size=5, k=4), "query"),
    ("burst", dict(sigma=20, method="bm3d", k=4, peak=255.0), "frames"),
])
def test_data_checks_are_deferred(runtime, method, params, name):
    image = _f32((3, 30, 32) if method == "burst" else (30, 32))
    bad = image.copy()
    bad[..., 5, 7] = np.nan
    plan = clpatch.make_plan(method, image.shape, runtime=runtime, **params)
    good, nan = (cla.to_device(runtime.queue, x) for x in (image, bad))
    plan.enqueue(nan)                       # returns: the check is read later
    with pytest.raises(ValueError, match=f"{name} contains NaN"):
        plan.check()
    plan.check()                            # reported once
    plan.enqueue(nan)
    runtime.queue.finish()                  # the check's read is done: the next call sees it
    with pytest.raises(ValueError, match="NaN"):
        plan.enqueue(good)
    plan(image)                             # and the plan works on
    if method in ("bm3d", "burst"):
        above = image * 2.0                 # values above the given peak
        plan.enqueue(cla.to_device(runtime.queue, above))
        with pytest.raises(ValueError, match="above the peak 255 passed"):
            plan.check()


def test_out_is_filled_and_checked(runtime):
    image = _f32((30, 32))
    plan = clpatch.make_plan("nlmeans", image.shape, runtime=runtime, sigma=20)
    d = cla.to_device(runtime.queue, image)
    out = cla.empty(runtime.queue, image.shape, np.float32)
    result, _ = plan.enqueue(d, out=out)
    held = plan.pool.held_bytes()
    result, _ = plan.enqueue(d, out=out)
    assert result is out and plan.pool.held_bytes() == held
    plan.check()
    np.testing.assert_array_equal(out.get(), clpatch.nlmeans(image, 20, runtime=runtime))
    for bad, what in [(cla.empty(runtime.queue, (30, 31), np.float32), "shape"),
                      (cla.empty(runtime.queue, image.shape, np.float64), "dtype"),
                      (np.empty(image.shape, np.float32), "pyopencl.array.Array"),
                      (cla.empty(runtime.queue, (30, 64), np.float32)[:, ::2],
                       "C-contiguous")]:
        with pytest.raises((TypeError, ValueError), match=what):
            plan.enqueue(d, out=bad)
    matcher = clpatch.make_plan("search", image.shape, runtime=runtime, patch_size=5, step=2,
                                window=9, k=4)
    expected = clpatch.search_patches(image, 5, 2, 9, 4, runtime=runtime)
    pair = (cla.empty(runtime.queue, expected.positions.shape, np.int32),
            cla.empty(runtime.queue, expected.distances.shape, np.float32))
    found, _ = matcher.enqueue(d, out=pair)
    matcher.check()
    assert found.positions is pair[0]
    _same(found, expected)
    with pytest.raises(ValueError, match="out distances must have shape"):
        matcher.enqueue(d, out=(pair[0], pair[0]))
    with pytest.raises(TypeError, match="out must be a Matches"):
        matcher.enqueue(d, out=pair[0])


def test_views_and_the_callers_queue(runtime):
    """A strided, offset view is read on the device as it is; a plan on the caller's own
    queue (`Runtime(queue=...)`) runs there."""
    base = _u8((40, 90))
    queue = cl.CommandQueue(runtime.context, runtime.device)
    mine = clpatch.Runtime(queue=queue)
    view = cla.to_device(queue, base)[3:, 1::2]
    plan = clpatch.make_plan("search", view.shape, dtype=np.uint8, runtime=mine,
                             patch_size=5, step=3, window=9, k=6)
    found, event = plan.enqueue(view)
    plan.check()
    assert found.positions.queue is queue
    _same(found, clpatch.search_patches(np.ascontiguousarray(base[3:, 1::2]), 5, 3, 9, 6,
                                        runtime=runtime))


def test_wrong_inputs_name_themselves(runtime):
    image = _f32((30, 32))
    plan = clpatch.make_plan("search", image.shape, runtime=runtime, patch_size=5, step=2,
                             window=9, k=4)
    d = cla.to_device(runtime.queue, image)
    other = clpatch.Runtime(runtime.device)
    for args, kwargs, error, what in [
            ((image,), {}, TypeError, "image must be a pyopencl.array.Array"),
            ((d, d), {}, TypeError, "takes 1 input"),
            ((cla.to_device(runtime.queue, image[:, :31].copy()),), {}, ValueError,
             r"image has shape \(30, 31\); the plan was made for \(30, 32\)"),
            ((cla.to_device(runtime.queue, image.astype(np.uint16)),), {}, ValueError,
             "image has dtype uint16"),
            ((cla.to_device(other.queue, image),), {}, ValueError, "another OpenCL context"),
            ((d,), {"wait_for": cl.UserEvent(runtime.context)}, TypeError, "list of pyopencl"),
            ((d,), {"wait_for": [3]}, TypeError, "wait_for must hold pyopencl Events")]:
        with pytest.raises(error, match=what):
            plan.enqueue(*args, **kwargs)
    with pytest.raises(ValueError, match="image has dtype uint8"):
        plan(image.astype(np.uint8))
    with pytest.raises(TypeError, match="all be NumPy arrays or all device arrays"):
        clpatch.make_plan("knn", (20, 20), reference_shape=(20, 20), runtime=runtime,
                          patch_size=4)(image[:20, :20], d)


def test_make_plan_refuses_bad_requests(runtime):
    for args, kwargs, error, what in [
            (("blur", (10, 10)), {}, ValueError, "method must be one of"),
            (("search", (10, 10)), {"foo": 1}, TypeError, "unknown parameter"),
            (("nlmeans", (10, 10)), {}, TypeError, "needs sigma"),
            (("search", 10), {}, TypeError, "shape must be a tuple"),
            (("search", (10, 0)), {}, ValueError, "positive sizes"),
            (("search", (10, 10)), {"dtype": "complex64"}, TypeError, "real numeric dtype"),
            (("nlmeans", (10, 10, 3)), {"sigma": 20, "channel_axis": 0}, ValueError,
             "channels come last"),
            (("nlmeans", (10, 10)), {"sigma": 20, "guide": np.zeros((10, 10))}, TypeError,
             "guide=True"),
            (("search", (10, 10)), {"runtime": "gpu"}, TypeError, "runtime must be"),
            (("search", (10, 10)), {"k": 99}, ValueError, "k must be"),
            (("nnf", (10, 10)), {}, TypeError, "reference_shape"),
            (("bm3d", (20, 20)), {"sigma": 0.2}, ValueError, "data_range= or peak=")]:
        kwargs = {"runtime": runtime, **kwargs}
        with pytest.raises(error, match=what):
            clpatch.make_plan(*args, **kwargs)


def test_streams_give_the_one_shot_results(runtime):
    frames = [_f32((30, 33), seed) for seed in range(3)]
    nlm = clpatch.make_plan("nlmeans", (30, 33), runtime=runtime, sigma=20)
    out = list(nlm.stream(iter(frames)))
    assert len(out) == 3 and all(isinstance(o, np.ndarray) for o in out)
    for o, f in zip(out, frames, strict=True):
        np.testing.assert_array_equal(o, clpatch.nlmeans(f, 20, runtime=runtime))
    device = [cla.to_device(runtime.queue, f) for f in frames]
    found = clpatch.make_plan("search", (30, 33), runtime=runtime, patch_size=5, step=2,
                              window=9, k=4).stream(device)
    for m, f in zip(found, frames, strict=True):
        _same(m, clpatch.search_patches(f, 5, 2, 9, 4, runtime=runtime))
    bm3d = clpatch.make_plan("bm3d", (30, 33), runtime=runtime, sigma=20, peak=255.0)
    for o, f in zip(bm3d.stream(frames), frames, strict=True):
        np.testing.assert_array_equal(o, clpatch.bm3d(f, 20, peak=255.0, runtime=runtime))
    video = _u8((5, 24, 26))
    vb = clpatch.make_plan("vbm3d", video.shape, dtype=np.uint8, runtime=runtime, sigma=20,
                           peak=255.0)
    np.testing.assert_array_equal(np.stack(list(vb.stream(iter(video)))),
                                  clpatch.vbm3d(video, 20, peak=255.0, runtime=runtime))
    with pytest.raises(TypeError, match="stream takes plans of one input"):
        next(clpatch.make_plan("knn", (20, 20), reference_shape=(20, 20), runtime=runtime,
                               patch_size=4).stream([frames[0]]))


def test_n_is_the_deprecated_name_of_k(runtime):
    image = _f32((30, 33))
    expected = clpatch.search_patches(image, 5, 2, 9, k=4, runtime=runtime)
    assert expected.k == 4
    with pytest.warns(DeprecationWarning, match="n= is deprecated"):
        old = clpatch.search_patches(image, 5, 2, 9, n=4, runtime=runtime)
    _same(old, expected)
    with pytest.warns(DeprecationWarning, match="Matches.n is deprecated"):
        assert old.n == 4
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="not both"):
        clpatch.nlmeans(image, 20, k=8, n=4, runtime=runtime)
    with pytest.warns(DeprecationWarning, match="make_plan"):
        plan = clpatch.make_plan("bm3d", image.shape, runtime=runtime, sigma=20, peak=255.0,
                                 n=8)
    np.testing.assert_array_equal(plan(image), clpatch.bm3d(image, 20, peak=255.0, k=8,
                                                            runtime=runtime))
