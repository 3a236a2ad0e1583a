"""`clpatch bench` for NL-means, and the NL-means quality script of `benchmarks/`."""

import importlib.util
import json
from pathlib import Path

import numpy as np

import clpatch
from clpatch.cli import main as cli
from clpatch.tune.bench import run_bench

ROOT = Path(__file__).resolve().parents[2]  # tests/tune/ -> the repository root


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_bench_nlmeans(runtime):
    rt = clpatch.Runtime(runtime.device, profiling=True)
    (row,) = run_bench(rt, ["nlmeans"], [(64, 80)], repeats=2)
    assert row["method"] == "nlmeans" and row["size"] == [64, 80] and row["repeats"] == 2
    assert row["total_ms"] > 0
    # (a float32 grey device image is searched as it is: no "convert" stage, nor a "clear"
    # after the first run; see NLMeansPlan.apply)
    assert {"search", "average", "finalize"} <= set(row["stages_ms"])
    assert "aggregation" in row["config"] and "p8 s4" in row["config"]


def test_cli_bench_all_includes_every_method(runtime, tmp_path, capsys):
    path = tmp_path / "b.json"
    assert cli.main(["bench", "--size", "48x40", "--repeats", "1", "--device",
                     runtime.device.name.strip(), "--json", str(path)]) == 0
    assert "nlmeans" in capsys.readouterr().out
    rows = json.loads(path.read_text())["results"]
    assert [r["method"] for r in rows] == ["search", "nlmeans", "bm3d", "vbm3d", "knn", "nnf"]


def test_quality_psnr():
    quality = load_script("quality_nlmeans")
    clean = np.full((4, 4), 100.0)
    assert quality.psnr(clean, clean) == float("inf")
    assert np.isclose(quality.psnr(clean + 10, clean), 10 * np.log10(255 ** 2 / 100))
    # outputs are clipped to 0..255 before comparing
    assert np.isclose(quality.psnr(np.full((2, 2), 300.0), np.full((2, 2), 250.0)),
                      10 * np.log10(255 ** 2 / 25))
    rgb = np.zeros((1, 3, 3))
    rgb[0, 0], rgb[0, 1], rgb[0, 2] = (255, 0, 0), (0, 255, 0), (0, 0, 255)
    assert quality.to_gray(rgb).tolist() == [[76, 150, 29]]


def test_quality_script_runs(runtime, tmp_path, capsys):
    quality = load_script("quality_nlmeans")
    path = tmp_path / "q.json"
    assert quality.main(["--images", str(ROOT / "tests" / "data"), "--only", "text", "--device",
                         runtime.device.name.strip(), "--json", str(path)]) == 0
    assert "| text |" in capsys.readouterr().out
    result = json.loads(path.read_text())
    (row,) = result["gray"]["results"]
    assert row["psnr"]["clpatch"] > row["psnr"]["noisy"] + 5
    assert row["psnr"]["clpatch_p5s1"] > row["psnr"]["noisy"] + 5
    assert result["colour"]["results"] == []
