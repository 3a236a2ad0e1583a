"""Threaded host copies and reductions (`clpatch.core.hostwork`) give exactly what one
NumPy call gives, however the array is cut."""

from __future__ import annotations

import numpy as np
import pytest

from clpatch.core import hostwork


@pytest.fixture(params=[1, 3, 8])
def threads(request, monkeypatch):
    """Every array split (1 KiB and up) over 1, 3 or 8 slabs."""
    monkeypatch.setattr(hostwork, "THREADS", request.param)
    monkeypatch.setattr(hostwork, "SPLIT_BYTES", 1 << 10)
    return request.param


@pytest.mark.parametrize("shape", [(3,), (5000,), (2, 7000), (7, 300), (1, 2, 900), (300, 5, 3)])
def test_slabs_cover_every_element_once(threads, shape):
    count = np.zeros(shape, np.int32)
    parts = hostwork.slabs(shape, 4 * int(np.prod(shape)))
    assert 1 <= len(parts) <= threads
    for s in parts:
        count[s] += 1
    assert (count == 1).all()


def test_small_arrays_are_one_slab(monkeypatch):
    monkeypatch.setattr(hostwork, "THREADS", 8)
    assert hostwork.slabs((100, 100), hostwork.SPLIT_BYTES - 1) == [()]
    assert len(hostwork.slabs((100, 100), hostwork.SPLIT_BYTES)) == 8


@pytest.mark.parametrize("shape", [(3,), (5000,), (2, 7000), (7, 300), (3, 40, 50, 3)])
@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (np.uint8, np.float32),
                                    (np.float64, np.float32), (np.int16, np.int64)])
def test_copy_is_numpys(threads, shape, dtypes):
    source = (np.random.default_rng(len(shape)).random(shape) * 200).astype(dtypes[0])
    big = np.full(tuple(n + 2 for n in shape), -1, dtypes[1])
    inner = tuple(slice(1, n + 1) for n in shape)
    hostwork.copy(big[inner], source)              # a strided destination
    want = np.full_like(big, -1)
    want[inner] = source
    np.testing.assert_array_equal(big, want)
    # A strided source too.
    out = np.empty(source[..., ::2].shape, dtypes[1])
    hostwork.copy(out, source[..., ::2])
    np.testing.assert_array_equal(out, source[..., ::2].astype(dtypes[1]))


def test_copy_checks_shapes():
    with pytest.raises(ValueError, match="destination shape"):
        hostwork.copy(np.empty((3, 4)), np.empty((4, 3)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8, np.int32])
def test_extrema_are_numpys(threads, dtype):
    a = (np.random.default_rng(5).standard_normal((97, 211)) * 50).astype(dtype)
    top, bottom = hostwork.extrema(a)
    assert top == a.max() and bottom == a.min()
    assert np.asarray(top).dtype == dtype
    b = a[::3, 1::2]                                # strided
    assert hostwork.extrema(b) == (b.max(), b.min())


def test_extrema_see_nan_in_any_slab(threads):
    a = np.random.default_rng(2).random((64, 64)).astype(np.float32)
    a[63, 1] = np.nan                               # in the last slab
    top, bottom = hostwork.extrema(a)
    assert np.isnan(top) and np.isnan(bottom)


def test_extrema_of_empty_array():
    with pytest.raises(ValueError, match="empty"):
        hostwork.extrema(np.empty((0, 5)))
