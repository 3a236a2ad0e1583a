"""Fixtures of the clpatch.dask tests."""

from __future__ import annotations

import pytest

from clpatch.core.devices import list_devices


def spec_of(runtime) -> str:
    for entry in list_devices():
        if entry.device == runtime.device:
            return entry.index
    raise AssertionError("the test runtime's device is not listed")


@pytest.fixture
def on_device(runtime, monkeypatch):
    """Pieces run on the test's device: CLPATCH_DEVICE, and fresh per-process lanes (forgotten
    again after the test)."""
    from clpatch.dask import worker as dask_worker
    monkeypatch.setenv("CLPATCH_DEVICE", spec_of(runtime))
    dask_worker.use_runtime(None)
    yield runtime
    dask_worker.use_runtime(None)
