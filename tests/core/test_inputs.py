"""What `search_patches` accepts and rejects: every real dtype, device arrays (strided,
interleaved, on their own queue), value checks (NaN/inf, overflow), argument validation
and plan reuse.

Most tests use 8×8 patches, step 4, window 21, k 16 on 37×53 images (the rule picks the
square search): the kernels of that configuration are built once per device for the suite.
"""

import dataclasses

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core.volumes import magnitude_limit
from tests.helpers import check_search, random_image

SHAPE = (37, 53)          # last grid row and column off the step-4 lattice
ARGS = dict(patch_size=8, step=4, window=21, k=16)


def search(image, runtime, **kwargs):
    return clpatch.search_patches(image, runtime=runtime, **{**ARGS, **kwargs})


def on_host(result):
    """The result with device arrays copied to the host (for the oracle check)."""
    if not isinstance(result.positions, cla.Array):
        return result
    return dataclasses.replace(result, positions=result.positions.get(),
                               distances=result.distances.get())


def assert_same(result, expected):
    """Bit-identical positions and distances (NumPy or device arrays)."""
    def get(array):
        return array.get() if isinstance(array, cla.Array) else np.asarray(array)

    np.testing.assert_array_equal(get(result.positions), get(expected.positions))
    np.testing.assert_array_equal(get(result.distances), get(expected.distances))
    np.testing.assert_array_equal(result.grid_y, expected.grid_y)
    np.testing.assert_array_equal(result.grid_x, expected.grid_x)


# ---- dtypes ----------------------------------------------------------------------------------

INT_DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.int64, np.uint64]
FLOAT_DTYPES = [np.float16, np.float64]


def typed_values(dtype, shape, seed):
    """Random values spanning much of `dtype`'s range, every one exactly representable both
    in `dtype` and in float32 (so the float32 cast is the same image)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind in "ui":
        info = np.iinfo(dtype)
        if dtype.itemsize <= 2:
            lo, hi = int(info.min), int(info.max)
        elif dtype.itemsize == 4:                     # float32 rounding must stay in range
            lo, hi = int(info.min) // 2, int(info.max) // 2
        else:                                          # and below the overflow limit
            lo, hi = (0 if dtype.kind == "u" else -(2 ** 40)), 2 ** 40
        values = rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64)
        values = values.astype(np.float32).astype(np.float64)   # float32-representable
        out = values.astype(dtype)
    elif dtype == np.float16:
        out = (rng.standard_normal(shape) * 3000).astype(np.float16)
    else:
        out = (rng.standard_normal(shape) * 1e6).astype(np.float32).astype(dtype)
    assert np.array_equal(out.astype(np.float32).astype(np.float64), out.astype(np.float64))
    return out


@pytest.mark.parametrize("dtype", INT_DTYPES + FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_dtype_gives_the_float32_result(runtime, dtype):
    image = typed_values(dtype, SHAPE, seed=np.dtype(dtype).num)
    assert image.dtype == dtype
    result = search(image, runtime)
    expected = search(image.astype(np.float32), runtime)
    assert isinstance(result.positions, np.ndarray) and isinstance(result.distances, np.ndarray)
    assert result.positions.dtype == np.int32 and result.distances.dtype == np.float32
    assert_same(result, expected)
    check_search(result, image, **ARGS)


def test_signed_values_are_not_read_as_unsigned(runtime):
    """int8 -1 differs from 255: a kernel reading int8 as uchar would find the same distances
    for both images."""
    rng = np.random.default_rng(3)
    image = rng.integers(-128, 128, size=SHAPE).astype(np.int8)
    wrapped = image.view(np.uint8)
    a, b = search(image, runtime), search(wrapped, runtime)
    assert not np.array_equal(a.distances, b.distances)
    check_search(a, image, **ARGS)
    check_search(b, wrapped, **ARGS)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16], ids=lambda d: np.dtype(d).name)
def test_integer_colour_and_video(runtime, dtype):
    colour = typed_values(dtype, (*SHAPE, 3), seed=11)
    result = search(colour, runtime)
    assert_same(result, search(colour.astype(np.float32), runtime))
    check_search(result, colour, **ARGS)

    video = typed_values(dtype, (5, 25, 31), seed=12)
    args = dict(patch_size=8, step=4, window=9, k=8, temporal_window=1)
    result = clpatch.search_patches(video, runtime=runtime, **args)
    expected = clpatch.search_patches(video.astype(np.float32), runtime=runtime, **args)
    assert_same(result, expected)
    check_search(result, video, video=True, **args)


def test_python_list_is_accepted(runtime):
    image = np.round(random_image(SHAPE, seed=4))
    result = search(image.tolist(), runtime)
    assert isinstance(result.positions, np.ndarray)
    assert_same(result, search(image, runtime))


@pytest.mark.parametrize("view", ["transposed", "reversed", "strided", "fortran"])
def test_non_contiguous_numpy_input(runtime, view):
    base = random_image((53, 75), seed=5)
    image = {"transposed": base.T[:53, :37].T,           # (37, 53) of a transposed array
             "reversed": base[::-1, ::-1][:37, :53],
             "strided": base[3:40, 5:58],
             "fortran": np.asfortranarray(base[:37, :53])}[view]
    assert image.shape == SHAPE
    result = search(image, runtime)
    assert_same(result, search(np.ascontiguousarray(image), runtime))
    check_search(result, image, **ARGS)


@pytest.mark.parametrize("dtype", [bool, np.complex64, np.complex128, object],
                         ids=["bool", "complex64", "complex128", "object"])
def test_non_real_dtypes_raise_type_error(runtime, dtype):
    image = np.ones(SHAPE, dtype=dtype)
    with pytest.raises(TypeError, match="image"):
        search(image, runtime)


@pytest.mark.parametrize("value", ["a string", 3.0, None, {"a": 1}])
def test_non_array_input_raises_type_error(runtime, value):
    with pytest.raises(TypeError, match="image must be a NumPy array"):
        search(value, runtime)


# ---- device arrays ---------------------------------------------------------------------------

def test_device_array_in_device_array_out(runtime):
    image = random_image(SHAPE, seed=6)
    device = cla.to_device(runtime.queue, image)
    result = search(device, runtime)
    assert isinstance(result.positions, cla.Array) and isinstance(result.distances, cla.Array)
    assert result.positions.dtype == np.int32 and result.distances.dtype == np.float32
    assert result.positions.shape == (len(result.grid_y), len(result.grid_x), 16, 2)
    assert result.distances.shape == (len(result.grid_y), len(result.grid_x), 16)
    assert result.positions.queue is runtime.queue
    assert_same(result, search(image, runtime))
    check_search(on_host(result), image, **ARGS)
    # The input is left as it was.
    np.testing.assert_array_equal(device.get(), image)


def test_integer_device_array(runtime):
    image = typed_values(np.uint16, SHAPE, seed=7)
    result = search(cla.to_device(runtime.queue, image), runtime)
    assert isinstance(result.positions, cla.Array)
    assert_same(result, search(image.astype(np.float32), runtime))


def test_interleaved_colour_device_array(runtime):
    image = random_image((*SHAPE, 3), seed=8)
    result = search(cla.to_device(runtime.queue, image), runtime)
    assert isinstance(result.positions, cla.Array)
    assert_same(result, search(image, runtime))
    check_search(on_host(result), image, **ARGS)


def _device_views(runtime):
    """(name, device view, the same view on the host) of a 45×60 image."""
    host = random_image((45, 60), seed=9)
    dev = cla.to_device(runtime.queue, host)
    return [
        ("offset-slice", dev[4:41, 5:58], host[4:41, 5:58]),
        ("transposed", dev.T, host.T),
        ("strided", dev[::2, ::3], host[::2, ::3]),
        ("reversed-rows", dev[::-1], host[::-1]),
    ]


@pytest.mark.parametrize("which", range(4), ids=["offset-slice", "transposed", "strided", "reversed-rows"])
def test_non_contiguous_device_array(runtime, which):
    name, view, host = _device_views(runtime)[which]
    assert not view.flags.c_contiguous, name
    result = search(view, runtime)
    assert isinstance(result.positions, cla.Array)
    host = np.ascontiguousarray(host)
    assert_same(result, search(host, runtime))
    check_search(on_host(result), host, **ARGS)


def test_device_video_slice_with_frame_offset(runtime):
    video = random_image((7, 25, 31), seed=10)
    dev = cla.to_device(runtime.queue, video)
    args = dict(patch_size=8, step=4, window=9, k=8, temporal_window=1)
    result = clpatch.search_patches(dev[2:6], runtime=runtime, **args)
    assert isinstance(result.positions, cla.Array) and result.positions.shape[-1] == 3
    check_search(on_host(result), video[2:6], video=True, **args)


def test_device_array_without_runtime_uses_its_queue(runtime):
    image = random_image(SHAPE, seed=13)
    queue = cl.CommandQueue(runtime.context, runtime.device)
    device = cla.to_device(queue, image)
    result = clpatch.search_patches(device, **ARGS)    # runtime=None
    assert result.positions.queue is queue and result.distances.queue is queue
    assert result.positions.context == runtime.context
    assert_same(result, search(image, runtime))


def test_device_array_from_another_context_is_rejected(runtime):
    other = cl.CommandQueue(cl.Context([runtime.device]))
    device = cla.to_device(other, random_image(SHAPE, seed=14))
    with pytest.raises(ValueError, match="another OpenCL context"):
        search(device, runtime)


@pytest.mark.parametrize("dtype", [np.complex64], ids=["complex64"])
def test_non_real_device_array_raises_type_error(runtime, dtype):
    device = cla.to_device(runtime.queue, np.ones(SHAPE, dtype=dtype))
    with pytest.raises(TypeError, match="image"):
        search(device, runtime)


# ---- values ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_non_finite_numpy_values(runtime, dtype, bad):
    image = random_image(SHAPE, seed=15).astype(dtype)
    image[20, 31] = bad
    with pytest.raises(ValueError, match="NaN or infinite"):
        search(image, runtime)


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_non_finite_device_values(runtime, bad):
    image = random_image(SHAPE, seed=16)
    image[36, 52] = bad                                      # last pixel: an off-lattice reference
    with pytest.raises(ValueError, match="NaN or infinite"):
        search(cla.to_device(runtime.queue, image), runtime)


@pytest.mark.parametrize("image", [
    np.full(SHAPE, 1e30, np.float32),
    np.full(SHAPE, -1e30, np.float64),
    np.full(SHAPE, 2 ** 62, np.int64),
    np.full(SHAPE, 2 ** 63, np.uint64),
], ids=["float32", "float64-negative", "int64", "uint64"])
def test_huge_values_raise_overflow(runtime, image):
    image = image.copy()
    image[:10] = 0
    with pytest.raises(ValueError, match="overflow"):
        search(image, runtime)
    with pytest.raises(ValueError, match="overflow"):
        search(cla.to_device(runtime.queue, image), runtime)


def test_values_just_under_the_limit_never_overflow(runtime):
    """The magnitude limit is tight enough that the largest allowed values still give finite,
    correct distances in the worst case: columns of alternating sign, so that the patch one
    column over differs from the reference at every pixel by twice the largest value."""
    limit = magnitude_limit(8, 1)
    value = np.float32(0.99 * limit)
    image = np.where(np.arange(9) % 2 == 0, value, -value) * np.ones((8, 1), np.float32)
    worst = 64 * (2.0 * float(value)) ** 2
    # The limit keeps a factor 2 of margin below FLT_MAX for rounding, no more.
    assert 2 * worst < float(np.finfo(np.float32).max) < 4 * worst
    for data in (image, cla.to_device(runtime.queue, image)):
        result = on_host(search(data, runtime, k=2))      # 8x9: each reference has 2 candidates
        assert np.isfinite(result.distances).all()
        np.testing.assert_allclose(result.distances[..., 1], worst, rtol=1e-5)
        check_search(result, image, **{**ARGS, "k": 2})
    with pytest.raises(ValueError, match="overflow"):
        search(image * np.float32(1.02), runtime, k=2)


# ---- argument validation ---------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(50,), (2, 3, 20, 20, 1), ()], ids=["1-D", "5-D", "0-D"])
def test_wrong_number_of_dimensions(runtime, shape):
    with pytest.raises(ValueError, match=r"image must be \(H, W\)"):
        search(np.zeros(shape, np.float32), runtime)


def test_video_flag_needs_three_or_four_dimensions(runtime):
    with pytest.raises(ValueError, match="image as video"):
        search(np.zeros(SHAPE, np.float32), runtime, video=True)
    with pytest.raises(ValueError, match=r"image must be \(H, W\)"):
        search(np.zeros((3, *SHAPE, 1), np.float32), runtime, video=False)


@pytest.mark.parametrize("shape,video", [((0, 40), None), ((40, 0), None), ((20, 20, 0), None),
                                         ((0, 20, 20), True)])
def test_empty_arrays(runtime, shape, video):
    with pytest.raises(ValueError, match="image is empty"):
        search(np.zeros(shape, np.float32), runtime, video=video)


@pytest.mark.parametrize("shape", [(7, 40), (40, 7), (3, 7, 40)])
def test_patch_larger_than_the_image(runtime, shape):
    with pytest.raises(ValueError, match=r"patch_size 8 is larger than the image \((7x40|40x7)\)"):
        search(np.zeros(shape, np.float32), runtime, video=len(shape) == 3)


def test_n_up_to_the_number_of_candidates(runtime):
    # An 8×9 image has two 8×8 patches: every reference has exactly two candidates.
    image = random_image((8, 9), seed=18)
    result = search(image, runtime, k=2)
    check_search(result, image, **{**ARGS, "k": 2})
    with pytest.raises(ValueError, match=r"k=3 is larger than the number of candidates .*\(2 "):
        search(image, runtime, k=3)
    # A window of 1 leaves one candidate (the reference itself).
    with pytest.raises(ValueError, match=r"k=2 is larger .*\(1 with window=1"):
        search(random_image(SHAPE, seed=18), runtime, window=1, k=2)
    # For video the temporal window adds candidates: 2 frames x 2 positions.
    video = random_image((3, 8, 9), seed=18)
    with pytest.raises(ValueError, match=r"k=5 .*\(4 with .*temporal_window=1"):
        search(video, runtime, k=5, temporal_window=1)


BAD_ARGUMENTS = [
    (dict(patch_size=0), ValueError, r"patch_size must be in \[1, 32\], got 0"),
    (dict(patch_size=33), ValueError, r"patch_size must be in \[1, 32\], got 33"),
    (dict(patch_size=8.0), TypeError, "patch_size must be an integer"),
    (dict(patch_size="8"), TypeError, "patch_size must be an integer"),
    (dict(patch_size=True), TypeError, "patch_size must be an integer"),
    (dict(patch_size=None), TypeError, "patch_size must be an integer"),
    (dict(step=0), ValueError, r"step must be in \[1, 64\], got 0"),
    (dict(step=65), ValueError, r"step must be in \[1, 64\]"),
    (dict(step=4.5), TypeError, "step must be an integer"),
    (dict(window=0), ValueError, r"window must be in \[1, 127\], got 0"),
    (dict(window=128), ValueError, r"window must be in \[1, 127\]"),
    (dict(window=129), ValueError, r"window must be in \[1, 127\], got 129"),
    (dict(window=-21), ValueError, r"window must be in \[1, 127\]"),
    (dict(k=0), ValueError, r"k must be in \[1, 32\], got 0"),
    (dict(k=33), ValueError, r"k must be in \[1, 32\], got 33"),
    (dict(k=np.float32(4)), TypeError, "k must be an integer"),
    (dict(metric="l3"), ValueError, "metric must be one of"),
    (dict(metric=None), ValueError, "metric must be one of"),
    (dict(variant="fancy"), ValueError, "variant must be one of"),
    (dict(variant=3), TypeError, "variant must be a string, a SearchConfig or None"),
    (dict(variant="square", patch_size=7), ValueError, r"variant 'square' needs patch_size=8 and step=4"),
    (dict(variant="square", step=2), ValueError, r"variant 'square' needs patch_size=8 and step=4"),
    (dict(temporal_window=1), ValueError, "temporal_window > 0 needs a video input"),
    (dict(temporal_window=-1), ValueError, r"temporal_window must be in \[0, 63\], got -1"),
    (dict(temporal_window=64), ValueError, r"temporal_window must be in \[0, 63\]"),
    (dict(temporal_window=0.0), TypeError, "temporal_window must be an integer"),
    (dict(runtime="cpu"), TypeError, "runtime must be a clpatch.Runtime"),
    (dict(variant=clpatch.SearchConfig("square", batch=6)), ValueError, "batch 1 or a multiple of 4"),
    (dict(variant=clpatch.SearchConfig("column", group=16, rows=8)), ValueError, "rows=8"),
]


@pytest.mark.parametrize("kwargs,error,message", BAD_ARGUMENTS,
                         ids=[repr(k)[:60] for k, _, _ in BAD_ARGUMENTS])
def test_bad_arguments(runtime, kwargs, error, message):
    image = random_image(SHAPE, seed=19)
    kwargs = {"runtime": runtime, **kwargs}
    with pytest.raises(error, match=message):
        clpatch.search_patches(image, **{**ARGS, **kwargs})


def test_numpy_integers_are_accepted(runtime):
    image = random_image(SHAPE, seed=20)
    result = clpatch.search_patches(image, np.int64(8), np.int32(4), np.uint8(21), np.int16(16),
                                    runtime=runtime)
    assert (result.patch_size, result.step, result.window, result.k) == (8, 4, 21, 16)
    assert all(type(v) is int for v in (result.patch_size, result.step, result.window, result.k))
    assert_same(result, search(image, runtime))


def test_metric_is_case_insensitive(runtime):
    image = random_image(SHAPE, seed=21)
    result = search(image, runtime, metric="L2")
    assert result.metric == "l2"
    assert_same(result, search(image, runtime))


@pytest.mark.parametrize("kwargs,message", [
    (dict(variant="fancy"), r"variant must be one of \('naive', 'convolution', 'square', 'column'\)"),
    (dict(table="fancy"), r"table must be one of \('ordered', 'unordered'\) or None"),
    (dict(group=-1), "group must be a non-negative integer"),
    (dict(rows=1.5), "rows must be a non-negative integer"),
    (dict(tile=True), "tile must be a non-negative integer"),
    (dict(batch=33), "batch must be at most 32"),
])
def test_search_config_validation(kwargs, message):
    kwargs = {"variant": "square", **kwargs}
    with pytest.raises(ValueError, match=message):
        clpatch.SearchConfig(**kwargs)


# ---- plan reuse ------------------------------------------------------------------------------

def _last_plan(runtime):
    cache = runtime.plan_cache()
    key = next(reversed(cache))          # the plan used last is moved to the end
    return key, cache[key]


def test_plan_is_reused_for_the_same_shape(runtime):
    image = random_image(SHAPE, seed=22)
    first = search(image, runtime)
    key, plan = _last_plan(runtime)
    assert isinstance(plan, clpatch.SearchPlan) and key[0] == "search"
    builds = runtime.programs.builds
    second = search(image, runtime)
    assert _last_plan(runtime) == (key, plan) and runtime.plan_cache()[key] is plan
    assert runtime.programs.builds == builds
    assert_same(second, first)
    # Another shape gets another plan; the first one is still kept and reused.
    search(random_image((38, 53), seed=22), runtime)
    other_key, other_plan = _last_plan(runtime)
    assert other_key != key and other_plan is not plan
    third = search(image, runtime)
    assert _last_plan(runtime) == (key, plan)
    assert_same(third, first)
    # Device input has a plan of its own (device output).
    search(cla.to_device(runtime.queue, image), runtime)
    assert _last_plan(runtime)[1] is not plan


def test_plan_cache_is_bounded(runtime, monkeypatch):
    runtime.plan_cache().clear()
    for width in range(30, 50):
        search(random_image((20, width), seed=width), runtime)
    plans = [k for k in runtime.plan_cache() if k[0] == "search"]
    assert len(plans) == 16
    assert {k[3] for k in plans} == set(range(34, 50))     # the 16 most recent widths


def test_plan_rejects_other_shapes_and_kinds(runtime):
    image = random_image(SHAPE, seed=23)
    search(image, runtime)
    _, plan = _last_plan(runtime)
    with pytest.raises(ValueError, match="differs from the planned shape"):
        plan.run(random_image((38, 53), seed=23))
    with pytest.raises(TypeError, match="made for NumPy arrays"):
        plan.run(cla.to_device(runtime.queue, image))
    assert_same(plan.run(image), search(image, runtime))
