"""`clpatch.core.volumes` on the host: which image arguments become arrays (`as_array`,
`channels_last`), what `as_volume` refuses, and the nominal-range rule
(`default_data_range`). The public functions on array-likes: test_array_likes.py."""

import numpy as np
import pytest

from clpatch.core.volumes import as_array, as_volume, channels_last, default_data_range


class HasArray:
    """An object NumPy converts through `__array__` (like a PIL image or a CPU tensor)."""

    def __init__(self, values):
        self.values = np.asarray(values)

    def __array__(self, dtype=None, copy=None):
        return self.values if dtype is None else self.values.astype(dtype)


@pytest.mark.parametrize("make,dtype", [
    (lambda a: a.tolist(), np.float64),
    (lambda a: tuple(map(tuple, a.tolist())), np.float64),
    (lambda a: np.rint(a).astype(int).tolist(), np.int64),
    (lambda a: HasArray(a.astype(np.float32)), np.float32),
    (lambda a: [list(row) for row in a.astype(np.uint8)], np.uint8),   # NumPy scalars inside
], ids=["list", "tuple", "int-list", "__array__", "uint8-scalars"])
def test_array_likes_become_numpy_arrays(make, dtype):
    base = np.arange(12.0 * 5).reshape(12, 5)
    array = as_array(make(base))
    assert isinstance(array, np.ndarray) and array.dtype == dtype and array.shape == (12, 5)
    np.testing.assert_array_equal(array, base.astype(dtype))
    volume = as_volume(make(base))
    assert isinstance(volume.array, np.ndarray)
    assert (volume.frames, volume.rows, volume.cols, volume.channels) == (1, 12, 5, 1)


def test_arrays_pass_through_unchanged():
    image = np.zeros((4, 5), np.float32)
    assert as_array(image) is image


@pytest.mark.parametrize("value", ["a string", 3.0, None, {"a": 1}, b"bytes", 7])
def test_non_array_likes_raise_type_error(value):
    with pytest.raises(TypeError, match="^image must be a NumPy array, a pyopencl.array.Array "
                                        "or an array-like of real numbers"):
        as_array(value)
    with pytest.raises(TypeError, match="^frames must be a NumPy array"):
        as_volume(value, name="frames", video=True)


def test_ragged_lists_raise_type_error_naming_the_argument():
    with pytest.raises(TypeError, match=r"^query must be .*NumPy cannot convert this list"):
        as_volume([[1.0, 2.0], [3.0]], name="query")


@pytest.mark.parametrize("value,kind", [([[True, False], [False, True]], "bool"),
                                        ([["a", "b"], ["c", "d"]], "<U1"),
                                        ([[1, None], [2, 3]], "object"),
                                        ([[1j, 2], [3, 4]], "complex128")])
def test_lists_of_non_real_values_raise_type_error(value, kind):
    with pytest.raises(TypeError, match=f"image must have a real numeric dtype.*got {kind}"):
        as_volume(value)


def test_channels_last_converts_array_likes():
    base = np.arange(2 * 4 * 5, dtype=np.float32).reshape(2, 4, 5)     # channels first
    image, restore = channels_last(base.tolist(), 0, video=False)
    assert isinstance(image, np.ndarray) and image.shape == (4, 5, 2)
    np.testing.assert_array_equal(restore(image), base)
    image, restore = channels_last(base.tolist(), None, video=False)
    assert isinstance(image, np.ndarray) and image.shape == (2, 4, 5)
    image, _ = channels_last(base.tolist(), np.array(0), video=False)   # a 0-d axis
    assert image.shape == (4, 5, 2)


@pytest.mark.parametrize("value", ["video.npy", None, [[1.0], [2.0, 3.0]]])
def test_channels_last_leaves_the_refusal_to_as_volume(value):
    """What cannot become an array comes back unchanged, so that `as_volume` refuses it
    under the caller's argument name."""
    image, _ = channels_last(value, 0, video=True)
    assert image is value
    with pytest.raises(TypeError, match="^frames must be"):
        as_volume(image, name="frames", video=True)


@pytest.mark.parametrize("axis", [1.0, "0", True, np.bool_(True), np.array(0.0)])
def test_channel_axis_must_be_an_integer(axis):
    with pytest.raises(TypeError, match="channel_axis must be an integer or None"):
        channels_last(np.zeros((3, 4, 5)), axis, video=False)


@pytest.mark.parametrize("dtype,peak,expected", [
    (np.uint8, None, 255.0), (np.uint8, 3.0, 255.0), (np.int8, None, 255.0),
    (np.uint16, None, 65535.0), (np.int16, 5.0, 32767.0), (np.uint32, None, 4294967295.0),
    (np.float32, 1.0, 1.0), (np.float32, 0.5, 1.0), (np.float64, 0.0, 1.0),
    (np.float32, 1.5, 255.0), (np.float32, 255.0, 255.0), (np.float32, None, 255.0),
    (np.float16, 0.9, 1.0),
])
def test_default_data_range(dtype, peak, expected):
    assert default_data_range(dtype, peak) == expected
