"""Fuzzing the small public functions (explain, select_device, family_profile) and the
optional clpatch.dask entry points (see this package's docstring for the rule)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clpatch

from .harness import call, check_image
from .strategies import HOSTILE, HOSTILE_FLOAT, LONG, SIGMAS, ints, start

OPERATIONS = ["search", "nlmeans", "bm3d", "vbm3d", "nnf", "knn", "bogus", "", None, 3]


@given(data=st.data())
def test_explain(runtime, data):
    pick = start(data)
    operation = pick(st.sampled_from(OPERATIONS[:6]), ["bogus", "", None, 3])
    kwargs = {name: pick(ints([4, 8], 1, 32), default=True)
              for name in ("patch_size", "step", "k", "window")}
    kwargs["channels"] = pick(ints([1, 3], 1, 64))
    kwargs["metric"] = pick(st.sampled_from(["l2", "l1"]), ["l3", None])
    kwargs["video"] = pick(st.booleans(), ["yes", None])
    kwargs["preset"] = pick(st.sampled_from(["fast", "reference"]), ["bogus", None])
    kwargs["search"] = pick(st.sampled_from(["window", "ann"]), ["bogus", None])
    out, error = call(clpatch.explain, operation, runtime=runtime, **kwargs)
    if error is None:
        assert str(out)


@given(spec=st.one_of(st.sampled_from(["", "  ", "cpu", "gpu", "accelerator", "0:0", "9:9",
                                       "-1:0", "0:", ":", "pocl", "no-such-device", "\x00"]),
                      st.sampled_from(HOSTILE)))
def test_select_device(spec):
    # Its errors name the argument as "device", the name Runtime takes it under.
    call(clpatch.select_device, spec, extra_names=("device",),
         documented=(clpatch.DeviceNotFoundError,))


@given(family=st.one_of(st.sampled_from(["cpu", "nvidia", "amd", "intel", "generic", "",
                                         "../cpu", "bogus"]),
                        st.sampled_from([h for h in HOSTILE if getattr(h, "__hash__", None)])),
       name=st.sampled_from([None, "x", ""]))
def test_family_profile(family, name):
    out, error = call(clpatch.family_profile, family, name)
    if error is None:
        assert out.family == family


def test_family_profile_unhashable():
    """Found by the long profile: an unhashable family reached the functools.cache of
    _family_file (TypeError 'unhashable type: list', naming no argument)."""
    with pytest.raises(TypeError, match="family must be a string"):
        clpatch.family_profile([8])


@settings(max_examples=40 if LONG else 4)
@given(data=st.data())
def test_dask_filters(runtime, data):
    da = pytest.importorskip("dask.array")
    cdask = pytest.importorskip("clpatch.dask")
    import dask
    cdask.use_runtime(runtime)
    pick = start(data)
    img = pick.array(channels=(None, 3), layouts=["c", "strided"],
                     sides=st.one_of(st.integers(0, 3), st.integers(8, 40)))
    value = img.value
    chunks = data.draw(st.sampled_from([8, 16, 70]))
    if isinstance(value, np.ndarray) and value.dtype != object and len(img.shape) in (2, 3):
        value = da.from_array(value, chunks=(chunks, chunks) + value.shape[2:])
    which = data.draw(st.sampled_from(["nlmeans", "bm3d"]))
    fn = getattr(cdask, which)
    kwargs = {"patch_size": pick(st.just(8))} if which == "nlmeans" else {}

    def computed(image, sigma, **kw):
        return np.asarray(fn(image, sigma, **kw).compute())

    with dask.config.set(scheduler="synchronous"):
        out, error = call(computed, value, pick(SIGMAS, HOSTILE_FLOAT),
                          extra_names=("image", "sigma", "patch_size"), **kwargs)
    if error is None:
        check_image(out, img.shape, False)
        assert img.valid and math.isfinite(float(out.sum()))
