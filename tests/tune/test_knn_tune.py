"""`clpatch autotune --knn`: candidates are timed and checked against the rule's matches,
the fastest is recorded under the request's key, `clpatch.knn` and `explain` then use it,
and an entry the device cannot run is dropped in favour of the rule."""

from __future__ import annotations

import numpy as np
import pytest

import clpatch
from clpatch.cli.main import main
from clpatch.match.knn.config import (
    KnnConfig,
    choose_knn,
    config_from_json,
    config_to_json,
    knn_key,
)
from clpatch.tune.knn_tune import knn_candidates, tune_knn
from tests.cli.test_cli import spec_of


@pytest.fixture
def tuned_runtime(runtime, tmp_path):
    rt = clpatch.Runtime(runtime.device, profiling=True)
    rt.use_tuning(tmp_path / "tuning.json")
    return rt


def test_candidates_start_with_the_rule_and_all_fit(runtime):
    found = knn_candidates(runtime.profile, metric="l2", patch=5, channels=1, step=1)
    rule = choose_knn(runtime.profile, metric="l2", patch=5, channels=1, step=1)
    assert found[0] == rule and len(found) > 3
    assert {c.method for c in found} >= {"offsets", "gemm", "direct"}
    chamfer = knn_candidates(runtime.profile, metric="chamfer", patch=3, channels=1, step=1)
    assert {c.method for c in chamfer} == {"direct"}


def test_tuned_entry_is_recorded_and_used(tuned_runtime, tmp_path):
    summaries = tune_knn(tuned_runtime, [("l2", 4, 1, 1)], size=(20, 22), k=5, repeats=1,
                         include_direct=True, quick=True)
    assert len(summaries) == 1 and summaries[0]["time_ms"] > 0
    key = knn_key("l2", 4, 1, 1)
    entry = tuned_runtime.tuning.entry(key)
    assert entry is not None and entry["time_ms"] <= entry["rule_time_ms"]
    config = choose_knn(tuned_runtime.profile, metric="l2", patch=4, channels=1, step=1,
                        tuning=tuned_runtime.tuning)
    assert config.reason.startswith("tuned") and config_to_json(config) == entry["config"]
    assert "tuned" in str(clpatch.explain("knn", patch_size=4, runtime=tuned_runtime))
    image = np.random.default_rng(0).integers(0, 9, (18, 17)).astype(np.uint8)
    got = clpatch.knn(image, patch_size=4, k=5, runtime=tuned_runtime)
    want = clpatch.knn(image, patch_size=4, k=5, method="direct", runtime=tuned_runtime)
    np.testing.assert_array_equal(got.positions, want.positions)
    assert "tuned" in got.config.reason
    methods = {s["config"]["method"] for s in summaries} | {summaries[0]["rule_config"]["method"]}
    assert methods <= {"offsets", "gemm", "direct"}


def test_unusable_entries_are_dropped(tuned_runtime):
    key = knn_key("l1", 5, 1, 1)
    huge = KnnConfig("offsets", 4096, 4096, 1, 64, dys=1)
    tuned_runtime.tuning.record(key, {"config": config_to_json(huge), "time_ms": 1.0})
    config = choose_knn(tuned_runtime.profile, metric="l1", patch=5, channels=1, step=1,
                        tuning=tuned_runtime.tuning)
    assert not config.reason.startswith("tuned")
    assert tuned_runtime.tuning.entry(key) is None
    with pytest.raises(ValueError):
        config_from_json({"method": "bogus"})
    with pytest.raises(ValueError):
        config_from_json({"method": "gemm", "tile_x": -1})


def test_cli_autotune_knn_quick(runtime, tmp_path, capsys):
    out = tmp_path / "t.json"
    argv = ["autotune", "--knn", "--quick", "--patch-sizes", "3", "--size", "16x18",
            "--output", str(out), "--device", spec_of(runtime)]
    assert main(argv) == 0
    assert "knn l2 p3 c1" in capsys.readouterr().out and out.is_file()


@pytest.mark.parametrize("kw,name", [(dict(metric="chamfer", patch_size=20), "patch_size"),
                                     (dict(patch_size=65), "patch_size"),
                                     (dict(channels=5000), "channels"),
                                     (dict(metric="cosine"), "metric")])
def test_explain_checks_as_knn_does(runtime, kw, name):
    with pytest.raises(ValueError, match=name):
        clpatch.explain("knn", runtime=runtime, **kw)
    image = np.zeros((30, 30), np.float32)
    if "channels" not in kw:
        with pytest.raises(ValueError, match=name):
            clpatch.knn(image, runtime=runtime, **kw)
