"""`clpatch selftest`: every kernel family against its NumPy oracle on the test devices; a
result made wrong on purpose (the device call, or the oracle) is reported as a difference with
exit status 1; a family whose process dies (a real SIGSEGV, see tests/crashhook) is a CRASH
naming the implementation while the others still run; bad options exit with 2 and one clear
error. Families run in a child process; the tests that patch this process's modules run them
here (--in-process, isolate=False).

The first run on a device compiles every family's programs (66 programs: about 5 minutes on
a 2-core CPU through PoCL); later runs find them in the program cache (about 5 s)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import clpatch
from clpatch.core.childproc import implementation
from clpatch.core.kernels import BuildEvent
from clpatch.core.profiles import NEIGHBOUR_TABLES
from clpatch.denoise.nlm_aggregation import AGGREGATIONS
from clpatch.denoise.vbm3d_params import VIDEO_SEARCHES
from clpatch.match.knn.config import KNN_METHODS
from clpatch.match.window.config import SEARCH_VARIANTS
from clpatch.selftest import (
    FAMILIES,
    STATUSES,
    denoise_families,
    family_names,
    oracle,
    oracle_dir,
    run_selftest,
    search_families,
)
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.crashhook import arm


# 208 s on PoCL from a cold cache; CI runs `clpatch selftest` on Intel's runtime (part 2 of
# scripts/run-tests.sh) and every family's kernels against their oracles on PoCL.
@pytest.mark.slow
def test_every_family_passes(capsys, runtime):
    code, out, err = run(capsys, "selftest", "--json", "--device", spec_of(runtime))
    assert code == 0, out + err
    report = json.loads(out)
    assert report["passed"] is True
    assert [f["name"] for f in report["families"]] == family_names()
    failed = {f["name"]: f["details"] for f in report["families"] if f["status"] not in ("pass", "skip")}
    assert not failed, failed
    skipped = {f["name"] for f in report["families"] if f["status"] == "skip"}
    assert skipped <= {"nlmeans/fixed", "bm3d/gray/fixed"}, skipped
    assert report["device"]["name"] == runtime.device.name.strip()
    assert {"clpatch", "python", "numpy", "pyopencl"} <= set(report["environment"])


def test_one_line_per_family_and_a_summary(capsys, runtime):
    code, out, err = run(capsys, "selftest", "-d", spec_of(runtime), "--family", "knn",
                         "-f", "nnf", "-f", "vbm3d/search/naive")
    assert code == 0, out + err
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"clpatch {clpatch.__version__} self-test")
    assert lines[1].startswith("device: ") and runtime.device.name.strip() in lines[1]
    assert lines[2].startswith("(families build the OpenCL programs not yet in the program cache")
    names = ["knn/offsets", "knn/gemm", "knn/direct", "knn/chamfer", "nnf", "vbm3d/search/naive"]
    assert [line.split()[0] for line in lines[3:-1]] == names
    assert all(line.split()[1] == "pass" for line in lines[3:-1]), out
    assert lines[-1].startswith("6 families: 6 passed, 0 failed, 0 errors, 0 skipped in ")
    assert lines[-1].endswith("all passed")


def test_a_wrong_device_result_is_a_difference(capsys, runtime, monkeypatch):
    real = search_families.search_patches

    def shifted(*args, **kwargs):          # three distances 25 too large, one off by 1e-4
        result = real(*args, **kwargs)
        distances = np.array(result.distances)
        distances.reshape(-1)[[3, 10, 50]] += 25.0
        distances.reshape(-1)[60] += 1e-4
        return dataclasses.replace(result, distances=distances)

    monkeypatch.setattr(search_families, "search_patches", shifted)
    code, out, err = run(capsys, "selftest", "-d", spec_of(runtime), "-f", "search/square/ordered",
                         "-f", "nnf", "--in-process")
    assert code == 1, out + err
    lines = out.splitlines()
    (line,) = [line for line in lines if line.startswith("search/square/ordered ")]
    assert line.split()[1] == "FAIL"
    assert "image, l2: 3 of 448 match distances differ from the oracle (max |delta| 25;" in line
    assert any(line.split()[:2] == ["nnf", "pass"] for line in lines), out
    assert lines[-1].startswith("2 families: 1 passed, 1 failed") and "DIFFERENCES FOUND" in lines[-1]


def test_a_wrong_oracle_is_a_difference(capsys, runtime, monkeypatch):
    knn_oracle = oracle("knn")
    real = knn_oracle.knn_brute

    def moved(*args, **kwargs):            # the rank-2 match of query (0, 1) moved to (0, 0)
        positions, distances = real(*args, **kwargs)
        positions = positions.copy()
        positions[0, 1, 2] = (0, 0)
        return positions, distances

    monkeypatch.setattr(knn_oracle, "knn_brute", moved)
    code, out, err = run(capsys, "selftest", "--json", "-d", spec_of(runtime), "-f", "knn/direct",
                         "--in-process")
    assert code == 1, out + err
    report = json.loads(out)
    assert report["passed"] is False
    (family,) = report["families"]
    assert family["name"] == "knn/direct" and family["status"] == "fail"
    assert len(family["details"]) == 2                       # both of its cases
    assert family["details"][0].startswith("self, l1: 1 of ")
    assert "matches differ from the oracle (max |delta distance| 0;" in family["details"][0]
    assert "first at (0, 1) rank 2:" in family["details"][0]


def test_a_family_that_raises_is_an_error(capsys, runtime, monkeypatch):
    def broken(*args, **kwargs):
        raise clpatch.KernelBuildError("build failed (planted)")

    monkeypatch.setattr(denoise_families, "bm3d", broken)
    code, out, err = run(capsys, "selftest", "-d", spec_of(runtime), "-f", "bm3d/colour",
                         "--in-process")
    assert code == 1, out + err
    (line,) = [line for line in out.splitlines() if line.startswith("bm3d/colour ")]
    assert line.split()[1] == "ERROR" and "KernelBuildError: build failed (planted)" in line


def test_a_family_that_kills_its_process_is_a_crash(capsys, runtime, request):
    """The GEMM kNN's kernel kills its process at launch (as Intel's ANN query kernel did):
    its line says CRASH with the signal and the implementation, the next families run in a
    new child process, and the exit status is 1."""
    arm(request, CLPATCH_TEST_CRASH_KERNEL="knn_gemm")
    code, out, err = run(capsys, "selftest", "-d", spec_of(runtime), "-f", "knn")
    assert code == 1, out + err
    lines = out.strip().splitlines()
    found = {line.split()[0]: line for line in lines[3:-1]}
    assert list(found) == ["knn/offsets", "knn/gemm", "knn/direct", "knn/chamfer"]
    assert found["knn/gemm"].split()[1] == "CRASH"
    assert found["knn/gemm"].endswith(f"the process running it died (SIGSEGV) on "
                                      f"{implementation(runtime.device)}")
    assert all(found[name].split()[1] == "pass"
               for name in ("knn/offsets", "knn/direct", "knn/chamfer")), out
    assert lines[-1].startswith("4 families: 3 passed, 0 failed, 0 errors, 1 crashed, "
                                "0 skipped in ") and "DIFFERENCES FOUND" in lines[-1]

    code, out, err = run(capsys, "selftest", "--json", "-d", spec_of(runtime), "-f", "knn/gemm",
                         "-f", "nnf")
    assert code == 1, out + err
    report = json.loads(out)
    assert report["passed"] is False and report["isolated"] is True
    assert [(f["name"], f["status"]) for f in report["families"]] == [("knn/gemm", "crash"),
                                                                      ("nnf", "pass")]
    assert report["families"][0]["details"] == [
        f"the process running it died (SIGSEGV) on {implementation(runtime.device)}"]


def test_run_selftest_isolates_by_default(runtime, request):
    arm(request, CLPATCH_TEST_CRASH_KERNEL="knn_offsets")
    results = run_selftest(runtime, ["knn/direct", "knn/offsets", "nnf"])
    assert [(r.name, r.status, r.ok) for r in results] == [
        ("knn/offsets", "crash", False), ("knn/direct", "pass", True), ("nnf", "pass", True)]
    assert "crash" in STATUSES and results[0].as_dict()["status"] == "crash"


def test_several_children_report_in_the_families_order(runtime, request):
    """With jobs > 1 the families run in several children at once: the results (and each
    on_result call) still come in the families' order, a crash stays its own family's, and
    they equal those of one child."""
    arm(request, CLPATCH_TEST_CRASH_KERNEL="knn_offsets")
    names = ["knn/offsets", "knn/direct", "knn/chamfer", "nnf", "vbm3d/search/patch"]
    assert [n for n in family_names() if n in names] == names      # (the families' order)
    seen: list[str] = []
    results = run_selftest(runtime, names[::-1], on_result=lambda r: seen.append(r.name), jobs=3)
    assert [(r.name, r.status) for r in results] == [
        ("knn/offsets", "crash"), ("knn/direct", "pass"), ("knn/chamfer", "pass"),
        ("nnf", "pass"), ("vbm3d/search/patch", "pass")]
    assert seen == names
    one = run_selftest(runtime, names, jobs=1)
    assert [(r.name, r.status, r.details) for r in one] == [
        (r.name, r.status, r.details) for r in results]


@pytest.mark.parametrize("jobs", [0, -1, 2.5, "2"])
def test_jobs_must_be_a_positive_int(runtime, jobs):
    with pytest.raises((ValueError, TypeError), match="jobs"):
        run_selftest(runtime, ["nnf"], jobs=jobs)


def test_jobs_option_is_checked(capsys):
    code, out, err = run(capsys, "selftest", "-j", "0")
    assert code == 2 and "--jobs" in err and "positive integer" in err


def test_the_child_uses_this_process_program_cache_and_hooks(runtime, tmp_path, monkeypatch):
    """The child builds into the program cache this process names (CLPATCH_CACHE_DIR), and
    its build events reach this runtime's hook; a second run loads everything."""
    monkeypatch.setenv("CLPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CLPATCH_NO_DISK_CACHE", raising=False)
    events: list[BuildEvent] = []
    rt = clpatch.Runtime(runtime.device, build_progress=events.append)
    (first,) = run_selftest(rt, ["knn/direct"])
    assert first.status == "pass" and first.builds >= 1
    assert [e.phase for e in events] == ["start", "done"] * first.builds
    assert len(list((tmp_path / "programs").glob("*.bin"))) == first.builds
    (second,) = run_selftest(rt, ["knn/direct"])
    assert second.status == "pass" and second.builds == 0


def test_unsupported_aggregations_are_skipped(runtime):
    """Also with the families in a child process: it gets the runtime's profile overrides."""
    no_int64 = clpatch.Runtime(runtime.device, profile_overrides={"int64_atomics": False})
    results = run_selftest(no_int64, ["nlmeans/fixed", "bm3d/gray/fixed", "nlmeans/cas"])
    assert [(r.name, r.status) for r in results] == [
        ("nlmeans/fixed", "skip"), ("nlmeans/cas", "pass"), ("bm3d/gray/fixed", "skip")]
    assert "64-bit integer atomics" in results[0].details[0] and results[0].ok


def test_a_bad_device_is_a_clear_error(capsys):
    code, out, err = run(capsys, "selftest", "--device", "no-such-device-xyz")
    assert code == 2 and not out
    first = err.splitlines()[0]
    assert first.startswith("clpatch: error: cannot open --device 'no-such-device-xyz': device "
                            "'no-such-device-xyz' matches no device"), err
    assert "Traceback" not in err
    code, out, err = run(capsys, "selftest", "--device", "  ")
    assert code == 2 and not out
    assert_one_error_line(err, "--device", "blank")


def test_an_unknown_family_is_a_clear_error(capsys):
    code, out, err = run(capsys, "selftest", "--family", "search/diagonal")
    assert code == 2 and not out
    assert_one_error_line(err, "'search/diagonal' matches no self-test family",
                          "search/naive/ordered")


def test_list_needs_no_device(capsys, monkeypatch):
    monkeypatch.setenv("CLPATCH_DEVICE", "no-such-device-xyz")
    code, out, err = run(capsys, "selftest", "--list")
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()] == family_names()
    assert len(FAMILIES) == len(set(family_names()))


def test_families_cover_every_variant_and_table():
    names = set(family_names())
    assert {f"search/{v}/{t}" for v in SEARCH_VARIANTS for t in NEIGHBOUR_TABLES} <= names
    assert {f"knn/{m}" for m in KNN_METHODS} <= names
    assert {f"nlmeans/{a}" for a in AGGREGATIONS} <= names
    assert {f"vbm3d/search/{v}" for v in VIDEO_SEARCHES} <= names
    assert {"ann", "nnf", "bm3d/colour", "vbm3d/gray", "vbm3d/colour"} <= names


@pytest.mark.parametrize("name", ["search", "bm3d", "vbm3d"])
def test_oracles_are_the_test_suites_own(name):
    """In a checkout the oracles are tests/reference's files, under the package name the wheel
    gives them (their relative imports then resolve inside it)."""
    module = oracle(name)
    assert module.__name__ == f"clpatch.oracles.{name}"
    assert oracle_dir().name in ("reference", "oracles")
    assert module.__file__ is not None and (oracle_dir() / f"{name}.py").samefile(module.__file__)
