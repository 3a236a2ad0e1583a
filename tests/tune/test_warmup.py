"""`clpatch.warmup`: the steps it enumerates, the errors that name the argument, and on a device
(one small method): a first run builds and stores programs, a second finds them cached, and
a real call of another size then builds nothing."""

from __future__ import annotations

import numpy as np
import pytest

import clpatch
from clpatch.core.childproc import implementation
from clpatch.tune import warmup as warmup_module
from clpatch.tune.warmup import (
    DEFAULT_METHODS,
    HIGH_SIGMA,
    METHODS,
    SIGMA,
    SIZED,
    StepResult,
    WarmupStep,
    check_size,
    check_sizes,
    run_step,
    warmup_steps,
)
from tests.crashhook import arm


@pytest.fixture
def cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CLPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CLPATCH_NO_DISK_CACHE", raising=False)
    return tmp_path / "programs"


def test_default_steps_cover_every_size_independent_method_in_grey_and_colour():
    steps = warmup_steps()
    assert set(DEFAULT_METHODS) == set(METHODS) - set(SIZED) and SIZED == ("ann", "burst")
    assert list(dict.fromkeys(s.method for s in steps)) == list(DEFAULT_METHODS)
    assert {(s.method, s.channels) for s in steps} == {(m, c) for m in DEFAULT_METHODS
                                                       for c in (1, 3)}
    bm3d = [(s.channels, s.preset) for s in steps if s.method == "bm3d"]
    assert bm3d == [(1, "fast"), (1, "reference"), (3, "fast"), (3, "reference")]
    assert all(s.sigma == SIGMA for s in steps)
    assert len(steps) == 2 * len(DEFAULT_METHODS) + 2


def test_steps_follow_the_arguments():
    steps = warmup_steps(["bm3d", "knn", "bm3d"], channels=4 - 3, presets="reference",
                         high_noise=True)
    assert steps == [WarmupStep("bm3d", 1, "reference", SIGMA),
                     WarmupStep("bm3d", 1, "reference", HIGH_SIGMA), WarmupStep("knn", 1)]
    assert steps[1].label == f"bm3d reference, 1 channel, sigma {HIGH_SIGMA:g}"
    assert WarmupStep("nlmeans", 3).label == "nlmeans, 3 channels"
    # A method takes the channel counts it supports among those given.
    assert [(s.method, s.channels) for s in warmup_steps(["nlmeans", "vbm3d"], (2, 3))] == [
        ("nlmeans", 2), ("nlmeans", 3), ("vbm3d", 3)]


@pytest.mark.parametrize("kwargs, error, fragments", [
    (dict(methods="bm4d"), ValueError, ["methods", "'bm4d'", ", ".join(METHODS)]),
    (dict(methods=[]), ValueError, ["methods is empty"]),
    (dict(methods=3), TypeError, ["methods must be"]),
    (dict(channels=0), ValueError, ["channels must be from 1 to 4, got 0"]),
    (dict(channels=(1, 5)), ValueError, ["channels must be from 1 to 4, got 5"]),
    (dict(channels="3"), TypeError, ["channels must hold ints"]),
    (dict(channels=1.0), TypeError, ["channels must be an int"]),
    (dict(methods="bm3d", channels=2), ValueError, ["channels 2", "bm3d", "1 or 3"]),
    (dict(presets="slow"), ValueError, ["presets", "'slow'", "fast, reference"]),
])
def test_bad_steps_name_the_argument(kwargs, error, fragments):
    with pytest.raises(error) as info:
        warmup_steps(**kwargs)
    for fragment in fragments:
        assert fragment in str(info.value)


@pytest.mark.parametrize("kwargs, error, fragments", [
    (dict(dtypes="float64"), ValueError, ["dtypes", "'float64'", "float32, uint8, uint16"]),
    (dict(high_noise="yes"), TypeError, ["high_noise must be a bool"]),
    (dict(on_step=5), TypeError, ["on_step must be a callable"]),
    (dict(runtime="cpu"), TypeError, ["runtime must be a clpatch.Runtime"]),
    (dict(sizes=8), ValueError, ["size: sides must be from 16 to 8192, got 8"]),
    (dict(sizes=[(64, 64, 3)]), TypeError, ["size must be an int or a (rows, cols) pair"]),
    (dict(sizes=[(64.0, 64)]), TypeError, ["size must hold ints"]),
    (dict(sizes="64x64"), TypeError, ["sizes must be an int, a (rows, cols) pair or a seq"]),
    (dict(sizes=[]), ValueError, ["sizes is empty"]),
])
def test_bad_warmup_arguments_name_the_argument(kwargs, error, fragments):
    with pytest.raises(error) as info:
        clpatch.warmup(methods="search", **kwargs)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_sizes():
    assert check_size(100) == (100, 100) and check_size((20, np.int64(300))) == (20, 300)
    assert check_sizes(None) == [(67, 67)] and check_sizes(40) == [(40, 40)]
    assert check_sizes((40, 50)) == [(40, 50)]                 # a pair is one size
    assert check_sizes([40, (40, 40), (50, 60)]) == [(40, 40), (50, 60)]


def test_a_failing_step_is_reported_not_raised(runtime):
    result = run_step(WarmupStep("bm3d", 1, "no-such-preset"), runtime)
    assert result.status == "error" and result.built == 0
    assert result.error.startswith("ValueError: ") and "no-such-preset" in result.error


def test_a_step_result_comes_back_from_a_child_unchanged():
    for result in (StepResult(WarmupStep("bm3d", 3, "fast", HIGH_SIGMA), 4, 1, 2.5, None, (40, 50)),
                   StepResult(WarmupStep("knn", 1), 0, 2, 0.25, "KernelBuildError: x", crash=True),
                   StepResult(WarmupStep("nnf", 2), 0, 0, 0.125, "ValueError: y")):
        assert StepResult.from_dict(result.as_dict()) == result
    assert [StepResult(WarmupStep("knn", 1), 0, 0, 0.0, *rest).status
            for rest in ((None,), ("e",), ("e", (67, 67), True))] == ["cached", "error", "crash"]


def test_isolated_steps_fill_the_disk_cache_and_report_a_crash(runtime, cache_folder, request):
    """With isolate=True the steps run in a child process: a kernel killing it is a "crash"
    of its step, the next step runs in a new child, and what they built is in the disk cache
    this process names."""
    arm(request, CLPATCH_TEST_CRASH_KERNEL="search_naive")
    report = clpatch.warmup(runtime, methods=["search", "knn"], channels=1, dtypes="float32",
                            sizes=67, isolate=True)
    search, knn = report.steps
    assert (search.status, search.crash) == ("crash", True) and not report.ok
    assert search.error == (f"the process running it died (SIGSEGV) on "
                            f"{implementation(runtime.device)}")
    assert knn.status == "built" and knn.built >= 2
    assert len(list(cache_folder.glob("*.bin"))) == report.built


def test_warmup_builds_once_and_then_finds_everything_cached(runtime, cache_folder):
    seen = []
    sizes = [67, (50, 41)]
    first = clpatch.warmup(clpatch.Runtime(runtime.device), methods="search", channels=1,
                           dtypes="float32", sizes=sizes, on_step=seen.append)
    assert first.ok and seen == first.steps
    step, other = first.steps
    assert step.step == other.step == WarmupStep("search", 1)
    assert (step.size, other.size) == ((67, 67), (50, 41))
    assert step.status == "built" and other.status in ("built", "cached")
    assert step.built >= 2 and step.loaded == 0 and step.seconds > 0     # search, convert
    assert first.built == step.built + other.built and first.cache == cache_folder
    assert len(list(cache_folder.glob("*.bin"))) == first.built
    assert first.device == runtime.device.name.strip()
    assert first.as_dict()["steps"][1]["size"] == [50, 41]

    second = clpatch.warmup(clpatch.Runtime(runtime.device), methods=["search"], channels=[1],
                            dtypes=["float32"], sizes=sizes)
    assert [r.status for r in second.steps] == ["cached", "cached"] and second.built == 0
    assert sum(r.loaded for r in second.steps) == first.built

    # A real call at a warmed size builds nothing.
    later = clpatch.Runtime(runtime.device)
    image = np.random.default_rng(1).random((50, 41)).astype(np.float32)
    clpatch.search_patches(image, runtime=later)
    assert later.programs.builds == 0 and later.programs.loads >= 2


def test_without_a_disk_cache_the_report_says_so(runtime, monkeypatch):
    monkeypatch.setenv("CLPATCH_NO_DISK_CACHE", "1")
    report = clpatch.warmup(runtime, methods="search", channels=1, dtypes="float32")
    assert report.cache is None and report.ok


def test_search_also_runs_on_larger_images_until_a_run_is_slow(runtime, monkeypatch):
    shapes = []
    real = warmup_module.search_patches

    def recording(image, **kwargs):
        shapes.append((image.shape, image.dtype.name))
        return real(image, **kwargs)

    monkeypatch.setattr(warmup_module, "search_patches", recording)
    monkeypatch.setattr(warmup_module, "LADDER", (70, 75))
    monkeypatch.setattr(warmup_module, "LADDER_SECONDS", 100.0)
    clpatch.warmup(runtime, methods="search", channels=1)
    assert shapes == [((67, 67), "float32"), ((67, 67), "uint8"), ((70, 70), "float32"),
                      ((75, 75), "float32")]
    shapes.clear()
    monkeypatch.setattr(warmup_module, "LADDER_SECONDS", 0.0)       # every run is "slow"
    clpatch.warmup(runtime, methods="search", channels=1, dtypes="float32")
    assert shapes == [((67, 67), "float32"), ((70, 70), "float32")]
    shapes.clear()
    clpatch.warmup(runtime, methods="search", channels=1, dtypes="float32", sizes=67)
    assert shapes == [((67, 67), "float32")]                        # given sizes: no ladder
