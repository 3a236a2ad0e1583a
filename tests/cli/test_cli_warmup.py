"""`clpatch warmup`: one small method on the test device builds and stores its programs, a
second run reports everything cached; --list, --json; a step whose compiler or kernel kills
its process (a real SIGSEGV, see tests/crashhook) is a CRASH line naming the implementation
while the other steps run; bad options are one clear error line that names the option and
lists the valid values (exit status 2)."""

from __future__ import annotations

import json

import pytest

from clpatch.cli import warmup as warmup_cli
from clpatch.core.childproc import implementation
from clpatch.core.kernels import default_build_progress
from clpatch.tune.warmup import DEFAULT_METHODS, METHODS
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.crashhook import arm

SMALL = ("--methods", "search", "--channels", "1", "--dtypes", "float32", "--size", "67")


@pytest.fixture
def cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CLPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CLPATCH_NO_DISK_CACHE", raising=False)
    return tmp_path / "programs"


def test_first_run_builds_and_second_run_finds_everything_cached(capsys, runtime,
                                                                  cache_folder):
    code, out, err = run(capsys, "warmup", "-d", spec_of(runtime), *SMALL)
    assert code == 0, out + err
    lines = out.strip().splitlines()
    assert lines[0].startswith("warmup on ") and runtime.device.name.strip() in lines[0]
    assert lines[1] == f"program cache: {cache_folder}"
    assert lines[2].startswith("[1/1] search, 1 channel ")
    built = int(lines[2].split("built ")[1].split()[0])
    assert built >= 2 and " in " in lines[2] and lines[2].endswith(" s")
    assert lines[3].startswith("1 step(s) in ")
    assert lines[3].endswith(f"built {built} program(s), 0 step(s) already cached")
    assert len(lines) == 4 and len(list(cache_folder.glob("*.bin"))) == built
    assert "Traceback" not in err

    code, out, err = run(capsys, "warmup", "-d", spec_of(runtime), *SMALL)
    assert code == 0, out + err
    lines = out.strip().splitlines()
    assert lines[2].startswith("[1/1] search, 1 channel ")
    assert f"cached ({built} loaded from disk, " in lines[2]
    assert lines[3].endswith("built 0 program(s), 1 step(s) already cached")
    assert err == ""          # nothing to build: no "building kernels" line

    code, out, err = run(capsys, "warmup", "-d", spec_of(runtime), "--json", *SMALL)
    assert code == 0, out + err
    report = json.loads(out)
    assert report["ok"] is True and report["built"] == 0
    assert report["cache"] == str(cache_folder)
    assert report["device"] == runtime.device.name.strip()
    (step,) = report["steps"]
    assert step["method"] == "search" and step["channels"] == 1 and step["size"] == [67, 67]
    assert step["status"] == "cached" and step["loaded"] == built and step["error"] is None


@pytest.mark.parametrize("where, in_process", [("compiler", False), ("compiler", True),
                                               ("kernel", False)],
                         ids=["compiler", "compiler-in-process", "kernel"])
def test_a_crashing_step_is_reported_and_the_others_run(capsys, runtime, cache_folder,
                                                        request, where, in_process):
    """The kNN step's compiler (a program of its own) or kernel (at its first launch) kills
    its process; the search step after it still runs. A compiler crash is contained in the
    build child, also with --in-process; a kernel crash needs the steps' child process (in
    this process it would end the test run)."""
    if where == "compiler":
        arm(request, CLPATCH_TEST_CRASH_BUILD="// clpatch: match/knn_finish.cl.mako")
    else:
        arm(request, CLPATCH_TEST_CRASH_KERNEL="knn_finish")
    argv = ["warmup", "-d", spec_of(runtime), "--methods", "knn,search", *SMALL[2:]]
    code, out, err = run(capsys, *argv, *(["--in-process"] if in_process else []))
    assert code == 1, out + err
    lines = out.strip().splitlines()
    assert lines[2].startswith("[1/2] knn, 1 channel ")
    if where == "compiler":
        assert ("CRASH: CompilerCrashError: the OpenCL compiler of "
                f"{implementation(runtime.device)} crashed (SIGSEGV) while building "
                "match/knn_finish.cl.mako for ") in lines[2]
    else:
        assert lines[2].endswith(f"CRASH: the process running it died (SIGSEGV) on "
                                 f"{implementation(runtime.device)}")
    assert lines[3].startswith("[2/2] search, 1 channel ") and " built " in lines[3]
    assert lines[4].endswith("0 step(s) already cached, 1 CRASHED")

    code, out, err = run(capsys, *argv, "--json")
    assert code == 1, out + err
    report = json.loads(out)
    assert report["ok"] is False
    assert [(s["method"], s["status"]) for s in report["steps"]] == [("knn", "crash"),
                                                                    ("search", "cached")]
    assert implementation(runtime.device) in report["steps"][0]["error"]


def test_list_prints_the_steps_without_running_them(capsys):
    code, out, err = run(capsys, "warmup", "--list", "--methods", "bm3d,nnf", "--channels",
                         "3", "--presets", "reference", "--high-noise")
    assert code == 0, err
    assert out.splitlines() == ["bm3d reference, 3 channels",
                                "bm3d reference, 3 channels, sigma 60", "nnf, 3 channels"]
    code, out, err = run(capsys, "warmup", "--list")
    assert code == 0 and len(out.splitlines()) == 2 * len(DEFAULT_METHODS) + 2
    code, out, err = run(capsys, "warmup", "--list", "-m", "ann", "-c", "1", "--size", "67",
                         "--size", "1080x1920", "--size", "67x67")
    assert code == 0 and out.splitlines() == ["ann, 1 channel", "ann, 1 channel, 1080x1920"]


@pytest.mark.parametrize("argv, fragments", [
    (("--methods", "bm4d"), ["--methods", "'bm4d'", ", ".join(METHODS)]),
    (("--methods", ","), ["--methods", "is empty"]),
    (("--channels", "0"), ["--channels", "1 to 4, got 0"]),
    (("--channels", "rgb"), ["--channels", "'rgb'"]),
    (("--presets", "slow"), ["--presets", "'slow'", "fast, reference"]),
    (("--dtypes", "float64"), ["--dtypes", "'float64'", "float32, uint8, uint16"]),
    (("--methods", "bm3d", "--channels", "2"), ["--channels 2", "bm3d", "1 or 3"]),
    (("--size", "8x64"), ["--size", "16 to 8192, got 8x64"]),
    (("--size", "big"), ["--size", "expected HxW", "'big'"]),
])
def test_bad_options_are_one_error_line(capsys, argv, fragments):
    code, out, err = run(capsys, "warmup", "--list", *argv)
    assert code == 2 and out == ""
    assert_one_error_line(err, *fragments)


def test_an_unknown_device_is_a_clear_error(capsys):
    code, out, err = run(capsys, "warmup", "--device", "no-such-device-anywhere", *SMALL)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("clpatch: error: cannot open --device 'no-such-device-anywhere'")


def test_every_command_runs_with_the_build_line_hook_and_leaves_none(capsys, monkeypatch):
    seen = []

    def fake(args):
        seen.append(default_build_progress())
        return 0

    monkeypatch.setattr(warmup_cli, "cmd_warmup", fake)
    code, _, _ = run(capsys, "warmup")
    assert code == 0 and type(seen[0]).__name__ == "BuildProgress"
    assert default_build_progress() is None
