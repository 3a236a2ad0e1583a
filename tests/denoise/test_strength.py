"""The filter-strength arguments are checked once per call: at the public function's entry
(before any plan is made) or in a plan's run, never both."""

from __future__ import annotations

import numpy as np
import pytest

import clpatch
from clpatch.core import validate
from clpatch.denoise.strength import Strength


def test_check_accepts_numpy_scalars_and_fills_defaults():
    s = Strength.check(np.float32(20), h=np.array(10.0), data_range=np.uint8(255))
    assert (s.sigma, s.h, s.flat_beta, s.data_range) == (20.0, 10.0, 1.05, 255.0)
    assert s.nlm_h == 10.0
    assert Strength.check(5).nlm_h == 5.0


@pytest.mark.parametrize("kw, name", [({"sigma": 0}, "sigma"), ({"sigma": np.nan}, "sigma"),
                                      ({"sigma": 1, "h": -1}, "h"),
                                      ({"sigma": 1, "flat_beta": np.inf}, "flat_beta"),
                                      ({"sigma": 1, "data_range": 0}, "data_range")])
def test_check_names_the_argument(kw, name):
    sigma = kw.pop("sigma")
    with pytest.raises(ValueError, match=name):
        Strength.check(sigma, **kw)


def test_check_refuses_non_numbers():
    with pytest.raises(TypeError, match="sigma"):
        Strength.check("20")
    with pytest.raises(TypeError, match="h"):
        Strength.check(20, h=True)


def _count_checks(monkeypatch):
    seen: list[str] = []
    original = validate.check_float

    def counting(name, value, **kw):
        seen.append(name)
        return original(name, value, **kw)

    import clpatch.denoise.strength as strength_module
    monkeypatch.setattr(strength_module, "check_float", counting)
    return seen


@pytest.mark.parametrize("call", [
    lambda img, rt: clpatch.nlmeans(img, 20.0, h=15.0, runtime=rt),
    lambda img, rt: clpatch.bm3d(img, 20.0, data_range=255.0, runtime=rt),
    lambda img, rt: clpatch.vbm3d(np.stack([img] * 3), 20.0, data_range=255.0, runtime=rt),
], ids=["nlmeans", "bm3d", "vbm3d"])
def test_each_argument_checked_once_per_call(call, runtime, monkeypatch):
    img = np.random.default_rng(0).uniform(0, 255, (24, 26)).astype(np.float32)
    call(img, runtime)                   # plans made and cached
    seen = _count_checks(monkeypatch)
    call(img, runtime)
    assert sorted(seen) == sorted(set(seen)) and "sigma" in seen


def test_bad_sigma_refused_before_a_plan_is_made(runtime):
    img = np.zeros((20, 20), np.float32)
    kept = len(runtime.plan_cache())
    with pytest.raises(ValueError, match="sigma"):
        clpatch.nlmeans(img, -1.0, patch_size=5, step=2, window=9, k=4, runtime=runtime)
    assert len(runtime.plan_cache()) == kept


def test_unhashable_option_gets_the_named_error(runtime):
    img = np.zeros((20, 20), np.float32)
    with pytest.raises(ValueError, match="averaging"):
        clpatch.nlmeans(img, 10.0, averaging=["columns"], runtime=runtime)
