"""Every public function takes array-likes where NumPy users expect them: nested lists as
images, 0-d arrays and NumPy scalars as scalar parameters (integers only where an integer
is needed), and gives what it gives for the NumPy array. Tiny 12×12 images keep it fast."""

import numpy as np
import pytest

import clpatch
from tests.helpers import random_image

A = np.array          # a 0-d array of a scalar
SHAPE = (12, 12)


def image_and_list(seed):
    image = np.round(random_image(SHAPE, seed=seed)).astype(np.float64)
    return image, image.tolist()


def assert_same_result(from_list, from_array):
    if isinstance(from_array, clpatch.Matches):
        np.testing.assert_array_equal(from_list.positions, from_array.positions)
        np.testing.assert_array_equal(from_list.distances, from_array.distances)
        return
    if isinstance(from_array, tuple):       # knn_vectors
        for got, want in zip(from_list, from_array, strict=True):
            np.testing.assert_array_equal(got, want)
        return
    assert isinstance(from_list, np.ndarray) and from_list.shape == from_array.shape
    np.testing.assert_allclose(from_list, from_array, rtol=1e-5, atol=1e-3)


# function name -> call(image_or_list, runtime, scalar): `scalar` wraps every scalar argument
CALLS = {
    "search_patches": lambda im, rt, s: clpatch.search_patches(
        im, patch_size=s(4), step=s(2), window=s(5), k=s(3), runtime=rt),
    "nlmeans": lambda im, rt, s: clpatch.nlmeans(
        im, s(20.0), h=s(18.0), flat_beta=s(1.0), patch_size=s(4), step=s(2), window=s(5),
        k=s(4), runtime=rt),
    "bm3d": lambda im, rt, s: clpatch.bm3d(
        im, s(20.0), data_range=s(255.0), patch_size=s(4), step=s(2), window=s(7), k=s(8),
        runtime=rt),
    "vbm3d": lambda im, rt, s: clpatch.vbm3d(
        [im, im, im], s(20.0), data_range=s(255.0), patch_size=s(4), step=s(2), k=s(4),
        temporal_radius=s(1), runtime=rt),
    "nlmeans_video": lambda im, rt, s: clpatch.nlmeans_video(
        [im, im, im], s(20.0), patch_size=s(4), step=s(2), window=s(5), k=s(4),
        temporal_window=s(1), runtime=rt),
    "knn": lambda im, rt, s: clpatch.knn(im, im, k=s(2), patch_size=s(3), step=s(2), runtime=rt),
    "knn_vectors": lambda im, rt, s: clpatch.knn_vectors(im, im, s(2), runtime=rt),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_list_image_and_0d_scalars(runtime, name):
    image, as_list = image_and_list(seed=list(CALLS).index(name))
    call = CALLS[name]
    expected = call(image, runtime, lambda v: v)
    assert_same_result(call(as_list, runtime, A), expected)            # 0-d arrays
    assert_same_result(call(as_list, runtime, lambda v: np.float32(v) if isinstance(v, float)
                            else np.int32(v)), expected)                 # NumPy scalars


@pytest.mark.parametrize("name", list(CALLS))
def test_integer_parameters_must_be_integral(runtime, name):
    _, as_list = image_and_list(seed=30)
    # Floats pass as they are; every integer parameter gets a float 0-d array.
    with pytest.raises(TypeError, match="must be an integer, got float"):
        CALLS[name](as_list, runtime, lambda v: v if isinstance(v, float) else A(float(v)))


@pytest.mark.parametrize("sigma,error,message", [
    (A([20.0]), TypeError, "sigma must be a number, got ndarray"),
    (A([[20.0]]), TypeError, "sigma must be a number, got ndarray"),
    (A(True), TypeError, "sigma must be a number, got bool"),
    (A("20"), TypeError, "sigma must be a number, got str"),
    (A(-1.0), ValueError, "sigma must be a finite number > 0, got -1.0"),
    (A(np.nan), ValueError, "sigma must be a finite number > 0, got nan"),
])
def test_bad_sigma_arrays(runtime, sigma, error, message):
    image, _ = image_and_list(seed=31)
    for function in (clpatch.nlmeans, clpatch.bm3d):
        with pytest.raises(error, match=message):
            function(image, sigma, runtime=runtime)


@pytest.mark.parametrize("name", ["nlmeans", "bm3d", "search_patches", "knn"])
def test_ragged_list_image_raises_type_error(runtime, name):
    ragged = [[1.0] * 12] * 11 + [[1.0] * 11]
    with pytest.raises(TypeError, match=r"(image|query) must be a NumPy array, a "
                                        r"pyopencl.array.Array or an array-like"):
        CALLS[name](ragged, runtime, lambda v: v)


def test_channel_axis_as_0d_array(runtime):
    colour = np.round(random_image((3, *SHAPE), seed=32))          # channels first
    expected = clpatch.nlmeans(colour, 20.0, channel_axis=0, runtime=runtime)
    got = clpatch.nlmeans(colour.tolist(), A(20.0), channel_axis=A(0), runtime=runtime)
    assert got.shape == colour.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("limit", [np.int64(1 << 24), A(1 << 24), np.uint32(1 << 24)])
def test_memory_limit_takes_numpy_integers(runtime, limit):
    rt = clpatch.Runtime(runtime.device, memory_limit=limit)
    assert rt.memory_limit == 1 << 24 and type(rt.memory_limit) is int


@pytest.mark.parametrize("limit,error,message", [
    (1.5e6, TypeError, "memory_limit must be an integer, got float"),
    ("1G", TypeError, "memory_limit must be an integer, got str"),
    (True, TypeError, "memory_limit must be an integer, got bool"),
    (0, ValueError, r"memory_limit must be in \[1, "),
    (A(-5), ValueError, r"memory_limit must be in \[1, .*got -5"),
])
def test_bad_memory_limit(runtime, limit, error, message):
    with pytest.raises(error, match=message):
        clpatch.Runtime(runtime.device, memory_limit=limit)
