"""`clpatch bench` for vbm3d, knn and nnf (and what every method's row holds): each runs on a
tiny size and reports numbers of the right shape. Timings are measured in benchmarks, never
checked here."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import clpatch
from clpatch.cli import common as cli_common
from clpatch.cli import main as cli
from clpatch.tune.bench import DEFAULT_FRAMES, METHODS, format_table, run_bench
from clpatch.tune.timing import pan_video

NEW = ("vbm3d", "knn", "nnf")
#: Stages each new method's row must name (others may come too).
STAGES = {"vbm3d": {"search1", "filter1", "search2", "filter2"},
          "knn": {"convert", "search", "finish"},
          "nnf": {"project", "tree", "rerank"}}


def positive(value: float) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def check_row(row: dict, method: str, size: list[int], repeats: int) -> None:
    assert row["method"] == method and row["size"] == size and row["repeats"] == repeats
    assert positive(row["total_ms"]) and positive(row["wall_ms"]) and positive(row["wall_s"])
    stages = row["stages_ms"]
    assert STAGES[method] <= set(stages)
    assert all(math.isfinite(v) and v >= 0 for v in stages.values())
    assert isinstance(row["config"], str) and row["config"]


def test_run_bench_times_vbm3d_knn_and_nnf(runtime):
    rt = clpatch.Runtime(runtime.device, profiling=True)
    rows = run_bench(rt, NEW, [(24, 32), (16, 16)], repeats=2, frames=3)
    assert [(r["method"], r["size"]) for r in rows] == [
        (m, s) for s in ([24, 32], [16, 16]) for m in NEW]
    for row in rows:
        check_row(row, row["method"], row["size"], 2)
    vbm3d, knn, nnf = rows[:3]
    assert vbm3d["frames"] == 3 and "3 frames" in vbm3d["config"]
    assert "frames" not in knn and "frames" not in nnf
    assert "p8 s4 k16 l2" in knn["config"] and "engine" in knn["config"]
    assert "PCA 10" in nnf["config"] and "p8 k1" in nnf["config"]
    table = format_table(rows).splitlines()
    assert "kernel ms" in table[0] and "wall ms" in table[0] and len(table) == 7
    assert table[1].split()[:2] == ["vbm3d", "24x32"]


def test_run_bench_refuses_bad_counts(runtime):
    rt = clpatch.Runtime(runtime.device, profiling=True)
    with pytest.raises(ValueError, match="frames"):
        run_bench(rt, ["vbm3d"], [(16, 16)], frames=0)
    with pytest.raises(ValueError, match="repeats"):
        run_bench(rt, ["knn"], [(16, 16)], repeats=0)
    with pytest.raises(ValueError, match="method"):
        run_bench(rt, ["bm4d"], [(16, 16)])


@pytest.mark.parametrize("method", NEW)
def test_cli_bench_new_method_writes_its_row(runtime, tmp_path, capsys, method):
    path = tmp_path / "b.json"
    frames = ["--frames", "2"] if method == "vbm3d" else []
    assert cli.main(["bench", "--method", method, "--size", "20x24", "--repeats", "1",
                     *frames, "--device", runtime.device.name.strip(),
                     "--json", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("device: ") and "kernel ms" in lines[1]
    assert lines[2].split()[:2] == [method, "20x24"]
    (row,) = json.loads(path.read_text())["results"]
    check_row(row, method, [20, 24], 1)
    if method == "vbm3d":
        assert row["frames"] == 2


@pytest.fixture
def no_device(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a device was opened before the command line was checked")

    monkeypatch.setattr(cli_common, "Runtime", refuse)


@pytest.mark.parametrize(("argv", "option"), [
    (["--method", "knn", "--frames", "3"], "--frames"),
    (["--method", "search", "--frames", "3"], "--frames"),
    (["--frames", "0"], "--frames"),
    (["--repeats", "0"], "--repeats"),
    (["--method", "bm4d"], "--method"),
])
def test_cli_bench_refuses_options_before_any_work(capsys, no_device, argv, option):
    assert cli.main(["bench", *argv]) == cli_common.EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and option in err and "Traceback" not in err


def test_help_and_defaults():
    parser = cli.build_parser()
    (bench,) = [a.choices["bench"] for a in parser._actions if hasattr(a, "choices")
                and isinstance(a.choices, dict) and "bench" in a.choices]
    text = bench.format_help()
    for method in METHODS:
        assert method in text
    assert "--frames" in text and f"default {DEFAULT_FRAMES}" in text
    assert set(METHODS) >= set(NEW)


def test_pan_video_moves_the_scene_and_draws_new_noise():
    clean = pan_video(3, 20, 24, sigma=0.0, shift=(1, 2))
    assert clean.shape == (3, 20, 24) and clean.dtype == np.float32
    np.testing.assert_array_equal(clean[1, :-1, :-2], clean[0, 1:, 2:])
    np.testing.assert_array_equal(clean[2, :-1, :-2], clean[1, 1:, 2:])
    a, b = pan_video(2, 20, 24, seed=4, shift=(5, 11))
    assert not np.array_equal(a, b)
    noise = pan_video(3, 20, 24, seed=4) - clean
    assert not np.allclose(noise[0], noise[1]) and 10 < noise.std() < 30
    np.testing.assert_array_equal(pan_video(3, 20, 24, seed=4), pan_video(3, 20, 24, seed=4))
