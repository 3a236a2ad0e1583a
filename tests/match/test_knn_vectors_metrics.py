"""`knn_vectors` with the cosine and inner-product metrics (clpatch/match/knn/vectors.py)
against the NumPy oracle (tests/reference/knn.py): on vectors in general position (no
near ties) the indices are the oracle's and the values within float32 rounding (not in
one dimension, where every cosine is ±1 and the order of the ties follows the device's
rounding of x / sqrt(x²)); NumPy and
device inputs give the same result; zero rows and views are refused naming the input."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from tests.reference.knn import knn_vectors_brute, vector_distances


def _data(n, m, d, seed, offset=0.0):
    rng = np.random.default_rng(seed)
    return ((offset + rng.standard_normal((n, d))).astype(np.float32),
            (offset + rng.standard_normal((m, d))).astype(np.float32))


def _check(got, queries, references, k, metric):
    distances, indices = (np.asarray(a.get() if isinstance(a, cla.Array) else a) for a in got)
    exp_i, exp_d = knn_vectors_brute(queries, references, k, metric)
    assert indices.dtype == np.int32 and distances.dtype == np.float32
    assert indices.shape == exp_i.shape == distances.shape
    # No near ties in these data: the order is the oracle's.
    np.testing.assert_array_equal(indices, exp_i)
    scale = 1.0 if metric == "cosine" else float(
        np.max(np.sum(queries.astype(np.float64) ** 2, 1))
        + np.max(np.sum(references.astype(np.float64) ** 2, 1)))
    np.testing.assert_allclose(distances, exp_d, rtol=0, atol=2e-6 * scale)
    order = np.diff(distances, axis=-1)
    assert np.all(order >= 0) if metric == "cosine" else np.all(order <= 0)


@pytest.mark.parametrize("metric", ["cosine", "ip"])
@pytest.mark.parametrize("n,m,d,k,offset", [(40, 60, 8, 5, 0.0), (25, 90, 33, 12, 0.0),
                                            (30, 50, 3, 50, 2.0), (17, 20, 2, 4, 0.5)])
def test_metrics_equal_the_oracle(runtime, metric, n, m, d, k, offset):
    queries, references = _data(n, m, d, n + m + d, offset)
    got = clpatch.knn_vectors(queries, references, k, metric, runtime=runtime)
    assert isinstance(got.distances, np.ndarray)
    _check(got, queries, references, k, metric)


@pytest.mark.parametrize("metric", ["cosine", "ip"])
def test_device_inputs_give_the_numpy_result(runtime, metric):
    queries, references = _data(33, 47, 6, 9)
    host = clpatch.knn_vectors(queries, references.astype(np.float64), 7, metric,
                               runtime=runtime)
    device = clpatch.knn_vectors(cla.to_device(runtime.queue, queries),
                                 cla.to_device(runtime.queue, references), 7, metric,
                                 runtime=runtime)
    assert isinstance(device.distances, cla.Array) and isinstance(device.indices, cla.Array)
    np.testing.assert_array_equal(device.indices.get(), host.indices)
    np.testing.assert_array_equal(device.distances.get(), host.distances)


def test_cosine_ignores_the_norm_and_ip_does_not(runtime):
    """Scaling a reference row changes nothing for cosine and its rank for ip."""
    queries, references = _data(10, 30, 5, 3)
    scaled = references.copy()
    scaled[7] *= 50.0
    base = clpatch.knn_vectors(queries, references, 3, "cosine", runtime=runtime)
    again = clpatch.knn_vectors(queries, scaled, 3, "cosine", runtime=runtime)
    np.testing.assert_array_equal(base.indices, again.indices)
    ip = clpatch.knn_vectors(queries, scaled, 3, "ip", runtime=runtime)
    true = -vector_distances(queries, scaled, "ip")
    np.testing.assert_array_equal(ip.indices[:, 0], np.argmax(true, axis=1))


def test_bad_inputs_are_refused(runtime):
    queries, references = _data(6, 9, 4, 1)
    zero = references.copy()
    zero[5] = 0.0
    with pytest.raises(ValueError, match="references row 5 is zero"):
        clpatch.knn_vectors(queries, zero, 2, "cosine", runtime=runtime)
    clpatch.knn_vectors(queries, zero, 2, "ip", runtime=runtime)      # ip takes zero rows
    view = cla.to_device(runtime.queue, np.ascontiguousarray(
        np.repeat(queries, 2, axis=1)))[:, ::2]
    with pytest.raises(ValueError, match="queries must be C-contiguous"):
        clpatch.knn_vectors(view, cla.to_device(runtime.queue, references), 2, "ip",
                            runtime=runtime)
    with pytest.raises(ValueError, match="metric"):
        clpatch.knn_vectors(queries, references, 2, "dot", runtime=runtime)
    bad = queries.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="queries contains NaN"):
        clpatch.knn_vectors(bad, references, 2, "cosine", runtime=runtime)
    with pytest.raises(ValueError, match="queries or references contains NaN"):
        clpatch.knn_vectors(bad, references, 2, "ip", runtime=runtime)
