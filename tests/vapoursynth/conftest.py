"""Fixtures of the VapourSynth tests."""

from __future__ import annotations

import pytest

from tests.vapoursynth.common import vs


@pytest.fixture
def threads():
    """core.num_threads = 4 for the test (VapourSynth's frame-level parallelism), restored
    after."""
    core = vs.core
    before = core.num_threads
    core.num_threads = 4
    yield core
    core.num_threads = before
