"""clpatch.dask.placement: on a distributed cluster holding the input, each piece runs on a
worker holding its own chunk (when Dask keeps the annotations), and the result is the same
with or without them."""

from __future__ import annotations

import numpy as np
import pytest

import clpatch

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
cdask = pytest.importorskip("clpatch.dask")
from clpatch.dask import placement  # noqa: E402

from .test_dask import NLM, SIGMA, noisy  # noqa: E402


def test_pin_pieces_annotates_only_pieces_with_holders():
    layer = {("piece", 0): 1, ("piece", 1): 2, ("cut", 0): 3}
    own = {("piece", 0): ("x", 0), ("piece", 1): ("x", 1)}
    pinned = placement.pin_pieces(layer, own, {("x", 0): ["tcp://a:1"]})
    workers = pinned.annotations["workers"]
    loose = pinned.annotations["allow_other_workers"]
    assert workers(("piece", 0)) == ["tcp://a:1"] and loose(("piece", 0)) is True
    assert workers(("piece", 1)) is None and loose(("piece", 1)) is None
    assert workers(("cut", 0)) is None
    assert dict(pinned) == layer
    # Nothing known, or the caller's own workers: the layer as it was.
    assert placement.pin_pieces(layer, own, {}) is layer
    with dask.annotate(workers=["tcp://b:2"]):
        assert placement.pin_pieces(layer, own, {("x", 0): ["tcp://a:1"]}) is layer


def test_no_holders_without_a_persisted_input():
    assert placement.chunk_holders(da.zeros((8, 8), chunks=4)) == {}


@pytest.fixture
def threads_cluster(on_device):
    """Two workers in this process, work stealing off (so a piece stays where it was sent)."""
    with dask.config.set({"distributed.scheduler.work-stealing": False}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                     dashboard_address=None, silence_logs=50) as cluster, \
            distributed.Client(cluster) as client:
        yield client


def test_pieces_run_where_their_chunk_is(threads_cluster, on_device):
    client = threads_cluster
    image = noisy((96, 80), seed=4)
    x = client.persist(da.from_array(image, chunks=(24, 20)))
    distributed.wait(x)
    holders = placement.chunk_holders(x)
    assert len(holders) == 16 and len({w for v in holders.values() for w in v}) == 2
    want = clpatch.nlmeans(image, SIGMA, runtime=on_device, **NLM)
    with dask.config.set({"optimization.fuse.active": False}):     # annotations kept
        out = client.persist(cdask.nlmeans(x, SIGMA, **NLM))
        distributed.wait(out)
    ran = client.who_has(distributed.futures_of(out))
    for key, workers in ran.items():
        assert workers == holders[(x.name, *key[1:])], key
    np.testing.assert_array_equal(out.compute(), want)
    # With Dask's fusion on, the annotations are dropped: the same result, placed by Dask.
    np.testing.assert_array_equal(cdask.nlmeans(x, SIGMA, **NLM).compute(), want)
