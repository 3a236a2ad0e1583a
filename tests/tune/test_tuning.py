"""The scheduler's precedence (forced > tuned > rule), the tuning cache, the autotuner,
`explain`, and the `explain | autotune | bench` commands."""

import json
import logging

import numpy as np
import pytest

import clpatch
from clpatch.cli import main as cli
from clpatch.core.tuning import TuningCache, source_hash
from clpatch.match.window.config import SearchConfig, SearchRequest, request_key
from clpatch.match.window.plan import SearchPlan
from clpatch.tune.autotune import Autotuner, autotune, summary_table
from clpatch.tune.explain import explain
from tests.helpers import check_search, random_image

REQUEST = SearchRequest(8, 4, 16, 21)
SIZE = (64, 64)


@pytest.fixture(scope="module")
def tuned(runtime, tmp_path_factory):
    """A quick tuning run of the default request on the test device, saved to a file."""
    path = tmp_path_factory.mktemp("tuning") / "tuning.json"
    rt = clpatch.Runtime(runtime.device, profiling=True)
    cache = rt.use_tuning(path)
    (result,) = autotune(rt, [REQUEST], quick=True, size=SIZE, repeats=1)
    cache.save()
    return path, result


def test_quick_tuning_writes_a_cache_that_the_next_search_uses(runtime, tuned):
    path, result = tuned
    data = json.loads(path.read_text())
    assert data["device"] == runtime.device.name.strip()
    assert data["source_hash"] == source_hash()
    entry = data["entries"][request_key("search", REQUEST)]
    assert entry["time_ms"] == pytest.approx(result.time_ms)
    assert entry["time_ms"] <= entry["rule_time_ms"]          # the rule's choice was timed too
    assert len(result.timings) >= 6                           # variants x tables of stage 1

    rt = clpatch.Runtime(runtime.device)
    rt.use_tuning(path)
    image = random_image((40, 44), seed=3)
    searched = clpatch.search_patches(image, runtime=rt)
    assert searched.config.source == "tuned"
    assert {k: getattr(searched.config, k) for k in entry["config"]} == entry["config"]
    check_search(searched, image, patch_size=8, step=4, window=21, k=16)
    text = str(explain("search", runtime=rt))
    assert "tuned" in text and "rule:" in text and result.chosen.describe() in text


def test_forced_variant_wins_over_tuning(runtime, tuned):
    rt = clpatch.Runtime(runtime.device)
    rt.use_tuning(tuned[0])
    result = clpatch.search_patches(random_image((40, 44), seed=4), variant="naive", runtime=rt)
    assert result.config.source == "forced" and result.config.variant == "naive"
    text = str(explain("search", variant="naive", runtime=rt))
    assert "forced" in text


def test_untuned_request_uses_the_rules(runtime, tmp_path):
    rt = clpatch.Runtime(runtime.device)
    rt.use_tuning(tmp_path / "missing.json")
    result = clpatch.search_patches(random_image((40, 44), seed=5), 5, 1, 9, 8, runtime=rt)
    assert result.config.source == "rule" and result.config.variant == "convolution"
    text = str(explain("search", patch_size=5, step=1, k=8, window=9, runtime=rt))
    assert "rule" in text and "not tuned" in text


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"entries": 3}'])
def test_corrupt_cache_is_ignored_with_a_warning(runtime, tmp_path, caplog, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    rt = clpatch.Runtime(runtime.device)
    with caplog.at_level(logging.WARNING, logger="clpatch"):
        cache = rt.use_tuning(path)
    assert cache.entries == {} and "ignored" in cache.problem
    assert any("ignored" in r.getMessage() for r in caplog.records)
    result = clpatch.search_patches(random_image((40, 44), seed=6), runtime=rt)
    assert result.config.source == "rule"
    assert "ignored" in str(explain("search", runtime=rt))


@pytest.mark.parametrize("field,value", [("source_hash", "0123456789abcdef"),
                                         ("driver", "0.0-other"), ("device", "another GPU"),
                                         ("format", 0)])
def test_stale_cache_is_ignored_with_a_warning(runtime, tuned, tmp_path, caplog, field, value):
    data = json.loads(tuned[0].read_text())
    data[field] = value
    path = tmp_path / "stale.json"
    path.write_text(json.dumps(data))
    rt = clpatch.Runtime(runtime.device)
    with caplog.at_level(logging.WARNING, logger="clpatch"):
        cache = rt.use_tuning(path)
    assert cache.entries == {} and field in cache.problem
    assert clpatch.search_patches(random_image((40, 44), seed=7), runtime=rt).config.source == "rule"


def test_a_damaged_entry_is_dropped_alone(runtime, tuned, tmp_path):
    data = json.loads(tuned[0].read_text())
    data["entries"]["search:p5:s1:n8:w9:c1:l2:image"] = {"config": {"variant": "bogus"}}
    path = tmp_path / "partly.json"
    path.write_text(json.dumps(data))
    cache = TuningCache(runtime.device, path)
    assert list(cache.entries) == [request_key("search", REQUEST)]


def test_configurations_that_fail_or_disagree_are_rejected_never_chosen(runtime, monkeypatch):
    rt = clpatch.Runtime(runtime.device, profiling=True)
    tuner = Autotuner(rt, size=SIZE, quick=True, repeats=1, warmup=0)
    original_stage1 = tuner._stage1
    # A configuration the scheduler refuses (square needs a batch multiple of 4) ...
    monkeypatch.setattr(tuner, "_stage1", lambda r: [SearchConfig("square", batch=6)]
                        + original_stage1(r))
    # ... and one whose results are wrong: the column search reports shifted distances.
    original_run = SearchPlan.run

    def wrong_column(self, image):
        result = original_run(self, image)
        if self.config.variant == "column":
            result.distances += 1.0
        return result

    monkeypatch.setattr(SearchPlan, "run", wrong_column)
    result = tuner.tune(REQUEST)
    reasons = {c.variant: why for c, why in result.rejected}
    assert "batch" in reasons["square"] and "disagrees" in reasons["column"]
    assert result.chosen.variant != "column"
    assert all(c.variant != "column" for c, _ in result.timings)
    table = summary_table([result])
    assert "| 8, 4, 16, 21, 1 |" in table


def test_explain_shows_rejections(runtime, tmp_path):
    path = tmp_path / "t.json"
    cache = TuningCache(runtime.device, path)
    cache.record(request_key("search", REQUEST), {
        "config": {"variant": "naive", "table": "ordered", "group": 32, "rows": 0, "tile": 0,
                   "batch": 0},
        "time_ms": 1.0, "rule_time_ms": 2.0, "rule_config": {}, "size": [64, 64],
        "date": "2026-11-22",
        "rejected": [{"config": {"variant": "column", "table": "ordered", "group": 64, "rows": 4,
                                 "tile": 0, "batch": 8}, "reason": "disagrees with the naive search"}]})
    cache.save()
    rt = clpatch.Runtime(runtime.device)
    rt.use_tuning(path)
    text = str(explain("search", runtime=rt))
    assert "rejected: column" in text and "disagrees" in text and "2.00x" in text
    result = clpatch.search_patches(random_image((40, 44), seed=8), runtime=rt)
    assert (result.config.source, result.config.variant, result.config.group) == ("tuned", "naive", 32)


def test_explain_rejects_unknown_operations():
    with pytest.raises(ValueError, match="operation"):
        explain("bm4d")


def test_cli_autotune_explain_bench(runtime, tmp_path, capsys):
    path = tmp_path / "cli.json"
    spec = runtime.device.name.strip()
    assert cli.main(["autotune", "--quick", "--device", spec, "--output", str(path),
                     "--size", "64x64", "--repeats", "1", "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "speed-up" in out and str(path) in out
    assert json.loads((tmp_path / "t.json").read_text())[0]["request"]["patch_size"] == 8
    assert cli.main(["explain", "search", "--device", spec, "--tuning", str(path)]) == 0
    assert "tuned" in capsys.readouterr().out
    assert cli.main(["explain", "search", "-p", "5", "-s", "1", "--device", spec,
                     "--tuning", str(path)]) == 0
    assert "rule" in capsys.readouterr().out
    assert cli.main(["bench", "--method", "search", "--size", "48x40", "--repeats", "2",
                     "--device", spec, "--json", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "search" in out and "48x40" in out
    rows = json.loads((tmp_path / "b.json").read_text())["results"]
    assert rows[0]["total_ms"] > 0 and "search" in rows[0]["stages_ms"]
    assert cli.main(["bench", "--method", "bm3d", "--size", "48x40", "--repeats", "2",
                     "--device", spec]) == 0
    out = capsys.readouterr().out
    assert "bm3d" in out and "filter1" in out and "search2" in out
    assert cli.main(["explain", "bm3d", "--preset", "reference", "--device", spec]) == 0
    out = capsys.readouterr().out
    assert "step 3, k 16, window 39" in out and "stage 2 filter" in out and "aggregation" in out
    assert cli.main(["bench", "--size", "10x10", "--device", spec]) == 2


def test_tuned_and_rule_results_agree(runtime, tuned):
    image = random_image((40, 44), seed=9)
    rt = clpatch.Runtime(runtime.device)
    rt.use_tuning(tuned[0])
    a = clpatch.search_patches(image, runtime=rt)
    b = clpatch.search_patches(image, runtime=runtime)
    np.testing.assert_allclose(a.distances, b.distances, rtol=3e-5, atol=1e-2)


def test_source_hash_covers_every_template_the_search_uses():
    import re

    from clpatch.core.resources import cl_src_dir
    from clpatch.match.window.config import TUNED_TEMPLATES

    root = cl_src_dir()
    for name in TUNED_TEMPLATES:
        text = (root / name).read_text()
        for included in re.findall(r'<%namespace[^>]*file="([^"]+)"', text):
            included = included.lstrip("/")       # namespaces name files from cl_src/
            assert included in TUNED_TEMPLATES, f"{name} uses {included}, which the hash misses"
    # Changing another kernel family (NL-means) must not make search tunings stale.
    assert "denoise/nlmeans.cl.mako" not in TUNED_TEMPLATES


def test_parallel_builds_time_the_same_configurations(runtime, tmp_path):
    """`--jobs 2` builds each stage's programs ahead, two at a time (in two processes); the
    same configurations are timed (stage 1 of --quick is fixed; times are not compared)."""
    spec = runtime.device.name.strip()
    timed = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}.json"
        assert cli.main(["autotune", "--quick", "--device", spec, "--size", "64x64",
                         "--repeats", "1", "--jobs", str(jobs), "--output",
                         str(tmp_path / f"tuning{jobs}.json"), "--json", str(out)]) == 0
        (row,) = json.loads(out.read_text())
        assert row["jobs"] == jobs and row["seconds"] >= row["build_seconds"] >= 0
        configs = [json.dumps(c, sort_keys=True) for c, _ in row["timings"]]
        assert len(configs) == len(set(configs)) >= 6
        assert all(ms > 0 for _, ms in row["timings"])
        assert json.dumps(row["tuned"], sort_keys=True) in configs
        assert row["tuned_ms"] == min(ms for _, ms in row["timings"])
        timed[jobs] = (set(configs), row["rejected"])
    assert timed[1] == timed[2]


@pytest.mark.parametrize("builds", ["threads", "processes"])
def test_a_failed_prebuild_is_rejected_with_its_reason_and_not_rebuilt(runtime, monkeypatch,
                                                                       builds):
    import threading

    from clpatch.core.errors import KernelBuildError
    from clpatch.tune.prebuild import MEMORY_PER_BUILD_PROCESS

    builders = []
    original = SearchPlan._kernel_for

    def failing(self, config):
        if config.variant == "column":
            builders.append(threading.current_thread().name)
            raise KernelBuildError("building search.cl.mako for this device failed\nbuild log: ...")
        return original(self, config)

    monkeypatch.setattr(SearchPlan, "_kernel_for", failing)
    rt = clpatch.Runtime(runtime.device, profiling=True)
    if builds == "processes" and rt.profile.global_mem_size < 2 * MEMORY_PER_BUILD_PROCESS:
        pytest.skip("too little device memory for two build processes")
    with Autotuner(rt, size=SIZE, quick=True, repeats=1, warmup=0, jobs=2,
                   builds=builds) as tuner:
        assert tuner._builder.how == builds
        result = tuner.tune(REQUEST)
    reasons = [why for c, why in result.rejected if c.variant == "column"]
    assert reasons == ["cannot run: building search.cl.mako for this device failed"] * 2
    assert all(c.variant != "column" for c, _ in result.timings) and len(result.timings) >= 4
    # Each failing configuration was built once, ahead, in a build thread; never again
    # (the build processes do not see the monkeypatch: their builds succeed, and the tuning
    # process's plan construction after them fails).
    assert len(builders) == 2 and all(name.startswith("clpatch-build") for name in builders)


def test_jobs_must_be_positive(runtime, capsys):
    rt = clpatch.Runtime(runtime.device, profiling=True)
    with pytest.raises(ValueError, match="jobs"):
        Autotuner(rt, jobs=0)
    assert cli.main(["autotune", "--jobs", "0"]) != 0
    assert "--jobs" in capsys.readouterr().err


def test_program_cache_builds_a_program_once_when_threads_ask_together(runtime):
    """The program cache lets threads build different programs at once (autotune --jobs)
    and builds a program that several threads ask for only once."""
    import threading
    import time

    cache = clpatch.Runtime(runtime.device).programs
    tag = time.time_ns()
    sources = [f"__kernel void k(__global float *x) {{ x[0] = {i}.0f; }} // {tag} {i}\n"
               for i in range(3)]
    got: list = []

    def ask(source: str) -> None:
        got.append((source, cache.build(source)))

    threads = [threading.Thread(target=ask, args=(s,)) for s in sources * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 9 and cache.builds <= 3
    for source in sources:
        assert len({id(p) for s, p in got if s == source}) == 1
