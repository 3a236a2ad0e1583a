"""The exhaustive kNN on inputs larger than the device (clpatch/match/knn/bands.py): a small
`Runtime(memory_limit=...)` makes the query windows and reference bands tiny, and the
result must be the unbanded one and the oracle's, ties included (integer-valued data)."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core.volumes import as_volume
from clpatch.match.knn.bands import band_layout
from clpatch.match.knn.config import choose_knn
from clpatch.match.knn.plan import query_bytes
from tests.helpers import enqueue_behind_gate
from tests.match.test_knn import check_knn, host, labels


def layout_of(runtime, query, reference, *, patch, k, step, metric="l2"):
    q = as_volume(query)
    r = q if reference is None else as_volume(reference)
    config = choose_knn(runtime.profile, metric=metric, patch=patch, channels=q.channels,
                        step=step)
    return band_layout(runtime, q, r, patch=patch, step=step,
                       heap_bytes=query_bytes(config, k, 10_000))


def test_fitting_request_is_not_banded(runtime):
    image = labels((40, 40), 4, seed=1)
    assert layout_of(runtime, image, None, patch=8, k=16, step=1) is None


@pytest.mark.parametrize("shape,ref_shape,patch,k,metric,step,limit", [
    ((40, 40), None, 8, 16, "l2", 1, 16_000),             # windows of columns, two bands
    ((40, 37, 3), (33, 41, 3), 5, 7, "l1", 3, 30_000),     # windows of rows, three bands
    ((31, 29), (30, 30), 4, 100, "l2", 2, 9_000),          # k above a band's candidates
    ((20, 20), None, 4, 10, "chamfer", 1, 3_000),
    ((18, 21), (12, 13), 3, 110, "l2", 1, 2_000),          # k = every candidate
])
def test_banded_equals_unbanded_and_oracle(runtime, shape, ref_shape, patch, k, metric, step,
                                           limit):
    query = labels(shape, 4, seed=2)
    reference = None if ref_shape is None else labels(ref_shape, 4, seed=3)
    small = clpatch.Runtime(runtime.device, memory_limit=limit)
    layout = layout_of(small, query, reference, patch=patch, k=k, step=step, metric=metric)
    assert layout is not None and layout.pairs > 1
    expected = clpatch.knn(query, reference, patch_size=patch, k=k, metric=metric, step=step,
                           runtime=runtime)
    got = clpatch.knn(query, reference, patch_size=patch, k=k, metric=metric, step=step,
                      runtime=small)
    np.testing.assert_array_equal(got.positions, expected.positions)
    np.testing.assert_array_equal(got.distances, expected.distances)
    np.testing.assert_array_equal(got.grid_y, expected.grid_y)
    np.testing.assert_array_equal(got.grid_x, expected.grid_x)
    check_knn(got, query, reference, patch_size=patch, k=k, metric=metric, step=step,
              exact=True)


def test_banded_device_arrays(runtime):
    query = labels((33, 35, 3), 3, seed=4)
    reference = labels((29, 40, 3), 3, seed=5)
    small = clpatch.Runtime(runtime.device, memory_limit=12_000)
    assert layout_of(small, query, reference, patch=4, k=9, step=2) is not None
    got = clpatch.knn(cla.to_device(small.queue, query), cla.to_device(small.queue, reference),
                      patch_size=4, k=9, step=2, runtime=small)
    assert isinstance(got.positions, cla.Array) and isinstance(got.distances, cla.Array)
    check_knn(got, query, reference, patch_size=4, k=9, step=2, exact=True)


def test_banded_float_photo_reports_true_distances(runtime):
    rng = np.random.default_rng(6)
    query = rng.random((30, 26), np.float32) * 255
    small = clpatch.Runtime(runtime.device, memory_limit=6_000)
    got = clpatch.knn(query, patch_size=5, k=12, runtime=small)
    check_knn(got, query, None, patch_size=5, k=12, exact=False)


def test_banded_vectors(runtime):
    """knn_vectors' images are one row: the query cut into windows of columns (one grid
    row's heaps do not fit), the reference into bands of columns."""
    rng = np.random.default_rng(7)
    queries = rng.integers(0, 5, (300, 16)).astype(np.float32)
    references = rng.integers(0, 5, (500, 16)).astype(np.float32)
    small = clpatch.Runtime(runtime.device, memory_limit=60_000)
    layout = layout_of(small, queries.reshape(1, 300, 16), references.reshape(1, 500, 16),
                       patch=1, k=9, step=1)
    assert layout is not None and layout.band_axis == 1
    assert len(layout.col_blocks) > 1 and len(layout.bands) > 1
    expected = clpatch.knn_vectors(queries, references, 9, runtime=runtime)
    got = clpatch.knn_vectors(queries, references, 9, runtime=small)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_array_equal(got.distances, expected.distances)
    on_device = clpatch.knn_vectors(cla.to_device(small.queue, queries),
                                    cla.to_device(small.queue, references), 9, runtime=small)
    np.testing.assert_array_equal(host(on_device.indices), expected.indices)
    np.testing.assert_array_equal(host(on_device.distances), expected.distances)


def test_banded_plan_enqueue_waits_for_nothing(runtime):
    """make_plan("knn") on a request beyond the device: the pairs' matches are merged on
    the device, `enqueue` returns behind an unfinished event, `out=` is filled, and a
    second run allocates nothing (every pair shares the plan's pool)."""
    query = labels((33, 35, 3), 3, seed=8)
    reference = labels((29, 40, 3), 3, seed=9)
    small = clpatch.Runtime(runtime.device, memory_limit=12_000)
    layout = layout_of(small, query, reference, patch=4, k=9, step=2)
    assert layout is not None and len(layout.bands) > 1
    plan = clpatch.make_plan("knn", query.shape, dtype=np.uint8, runtime=small,
                             reference_shape=reference.shape, patch_size=4, k=9, step=2)
    q, r = (cla.to_device(small.queue, x) for x in (query, reference))
    first, event = plan.enqueue(q, r)
    event.wait()
    plan.check()
    check_knn(first, query, reference, patch_size=4, k=9, step=2, exact=True)
    held = plan.pool.held_bytes()
    out = (cla.empty(small.queue, first.positions.shape, np.int32),
           cla.empty(small.queue, first.distances.shape, np.float32))
    returned, found, event = enqueue_behind_gate(plan, small.context, q, r, out=out)
    assert returned, "the banded plan's enqueue waited for the device"
    event.wait()
    plan.check()
    assert found.positions is out[0] and plan.pool.held_bytes() == held
    np.testing.assert_array_equal(out[0].get(), first.positions.get())
    np.testing.assert_array_equal(out[1].get(), first.distances.get())
    # The synchronous call on NumPy arrays: the same matches, NumPy.
    again = plan(query, reference)
    np.testing.assert_array_equal(again.positions, first.positions.get())


def test_banded_plan_defers_the_value_check(runtime):
    """A NaN in a band reaches no kernel (the conversion stores it as 0): the run
    completes, and the check names the inputs at the next synchronous point."""
    query = labels((30, 30), 4, seed=10).astype(np.float32)
    reference = labels((28, 33), 4, seed=11).astype(np.float32)
    bad = reference.copy()
    bad[20, 5] = np.nan
    small = clpatch.Runtime(runtime.device, memory_limit=8_000)
    assert layout_of(small, query, reference, patch=4, k=5, step=3) is not None
    plan = clpatch.make_plan("knn", query.shape, runtime=small,
                             reference_shape=reference.shape, patch_size=4, k=5, step=3)
    q, r, nan = (cla.to_device(small.queue, x) for x in (query, reference, bad))
    plan.enqueue(q, nan)
    with pytest.raises(ValueError, match="query or reference contains NaN"):
        plan.check()
    found, _ = plan.enqueue(q, r)
    plan.check()
    check_knn(found, query, reference, patch_size=4, k=5, step=3, exact=True)
    with pytest.raises(ValueError, match="reference contains NaN"):
        clpatch.knn(query, bad, patch_size=4, k=5, step=3, runtime=small)
