"""The matcher protocol: the filters run on any registered engine through chunk/upload/
enqueue only, and refuse names no engine has."""

from __future__ import annotations

import numpy as np
import pytest

import clpatch
from clpatch.core.registry import unregister_matcher
from clpatch.match import matcher
from clpatch.match.window.plan import SearchPlan
from tests.helpers import random_image


class CountingEngine:
    """A stand-in engine: the windowed search behind the protocol, counting its launches."""

    enqueued = 0

    def __init__(self, *args, **kwargs) -> None:
        self.inner = SearchPlan(*args, **kwargs)
        for name in ("grid_y", "grid_x", "dim", "reach", "config", "uploader", "stagger",
                     "ref_x"):
            setattr(self, name, getattr(self.inner, name))

    def chunk(self, *args):
        return self.inner.chunk(*args)

    def upload(self, *args, **kwargs):
        return self.inner.upload(*args, **kwargs)

    def enqueue_chunk(self, *args, **kwargs):
        CountingEngine.enqueued += 1
        return self.inner.enqueue_chunk(*args, **kwargs)

    def check_limit(self):
        return self.inner.check_limit()


@pytest.fixture
def counting():
    matcher.register_engine("counting", CountingEngine, "test stand-in")
    CountingEngine.enqueued = 0
    yield CountingEngine
    unregister_matcher("counting")


def test_filters_run_on_a_registered_engine(runtime, counting):
    image = random_image((41, 37), seed=5)
    for fn in (clpatch.nlmeans, clpatch.bm3d):
        expected = fn(image, 20.0, runtime=runtime)
        before = counting.enqueued
        got = fn(image, 20.0, search="counting", runtime=runtime)
        assert counting.enqueued > before
        np.testing.assert_array_equal(got, expected)
    assert "counting" in matcher.searches()


@pytest.mark.parametrize("fn", [clpatch.nlmeans, clpatch.bm3d, clpatch.nlmeans_video])
def test_unknown_engines_are_refused(runtime, fn):
    shape = (3, 20, 20) if fn is clpatch.nlmeans_video else (20, 20)
    with pytest.raises(ValueError, match=r"search must be one of \('window', 'ann'"):
        fn(random_image(shape), 20.0, search="kdtree", runtime=runtime)
