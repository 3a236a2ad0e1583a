"""`Runtime` construction (by spec, on an existing queue, with a profile, with profiling),
the default runtime, and the device arrays a runtime makes. Device discovery and selection
are tested in test_devices.py."""

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core import runtime as rt_module
from clpatch.core.buffers import BufferPool
from clpatch.core.devices import list_devices
from tests.helpers import random_image


def entry_of(device):
    (entry,) = [e for e in list_devices() if e.device == device]
    return entry


# ---- Runtime ---------------------------------------------------------------------------------

def test_runtime_on_an_existing_queue(runtime):
    queue = cl.CommandQueue(runtime.context, runtime.device)
    rt = clpatch.Runtime(queue=queue)
    assert rt.queue is queue and rt.context == runtime.context and rt.device == runtime.device
    assert rt.profile == runtime.profile and not rt.profiling
    image = random_image((37, 53), seed=51)
    result = clpatch.search_patches(image, runtime=rt)
    expected = clpatch.search_patches(image, runtime=runtime)
    np.testing.assert_array_equal(result.positions, expected.positions)
    np.testing.assert_array_equal(result.distances, expected.distances)
    assert "Runtime(" in repr(rt) and rt.profile.family in repr(rt)


def test_runtime_for_queue_is_reused(runtime):
    queue = cl.CommandQueue(runtime.context, runtime.device)
    first = clpatch.Runtime.for_queue(queue)
    assert first.queue is queue and clpatch.Runtime.for_queue(queue) is first


def test_runtime_with_device_and_queue(runtime):
    with pytest.raises(ValueError, match="either device or queue"):
        clpatch.Runtime(runtime.device, queue=runtime.queue)


def test_runtime_with_a_bad_queue(runtime):
    with pytest.raises(TypeError, match="queue must be a pyopencl.CommandQueue"):
        clpatch.Runtime(queue=runtime.context)


def test_runtime_refuses_an_out_of_order_queue(runtime):
    props = cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
    if not runtime.device.queue_properties & props:
        pytest.skip("the device has no out-of-order queues")
    queue = cl.CommandQueue(runtime.context, runtime.device, properties=props)
    with pytest.raises(ValueError, match="in-order"):
        clpatch.Runtime(queue=queue)


def test_runtime_with_a_bad_profile(runtime):
    with pytest.raises(ValueError,
                       match=r"profile must be one of \('nvidia', 'amd', 'intel', 'cpu', 'generic'\)"):
        clpatch.Runtime(runtime.device, profile="bogus")


def test_runtime_with_profiling(runtime):
    rt = clpatch.Runtime(runtime.device, profiling=True)
    assert rt.profiling
    assert rt.queue.properties & cl.command_queue_properties.PROFILING_ENABLE
    clpatch.search_patches(random_image((37, 53), seed=52), runtime=rt)
    (plan,) = rt.plan_cache().values()
    for _, event in plan.last_events:
        assert event.profile.end >= event.profile.start > 0


def test_runtime_by_spec(runtime):
    rt = clpatch.Runtime(entry_of(runtime.device).index)
    assert rt.device == runtime.device and rt.context != runtime.context
    assert rt.plan_cache() == {} and rt.programs.builds == 0      # building one compiles nothing


def test_default_runtime_is_shared(monkeypatch):
    monkeypatch.setattr(rt_module, "_default_runtime", None)
    monkeypatch.delenv("CLPATCH_DEVICE", raising=False)
    first = clpatch.default_runtime()
    assert clpatch.default_runtime() is first
    assert not first.is_simulator


def test_search_without_a_runtime_uses_the_default(monkeypatch):
    monkeypatch.setattr(rt_module, "_default_runtime", None)
    image = random_image((37, 53), seed=53)
    result = clpatch.search_patches(image)
    assert rt_module._default_runtime is not None
    assert result.config.variant == "square"
    assert isinstance(result.positions, np.ndarray)


@pytest.mark.parametrize("shape,dtype", [((3, 5), np.float32), ((2, 3, 4, 2), np.int32),
                                         ((7,), np.uint8), ((0, 4), np.float32), ((), np.float32)])
def test_empty_arrays_behave_like_pyopencl_empty(runtime, shape, dtype):
    got = runtime.empty(shape, dtype)
    want = cla.empty(runtime.queue, shape, dtype)
    assert (got.shape, got.dtype, got.strides, got.size, got.nbytes) == (
        want.shape, want.dtype, want.strides, want.size, want.nbytes)
    if got.size:
        values = np.arange(got.size).reshape(shape).astype(dtype)
        got.set(values)
        np.testing.assert_array_equal(got.get(), values)
        np.testing.assert_array_equal((got + got).get(), values + values)


def test_buffer_pool_reuses_and_counts(runtime):
    pool = BufferPool(runtime.context)
    first = pool.get("x", 100)
    assert pool.get("x", 64) is first                       # big enough: reused
    assert pool.get("x", 200) is not first                  # too small: replaced
    pool.get("y", 8)
    assert pool.held_bytes() == 200 + 8
