"""Programs compiled in a build child (`clpatch.core.buildchild`): a compiler crash, provoked
for real (the child dies by a signal, see tests/crashhook), is a `KernelBuildError` naming
the signal, the implementation and the saved source, and this process goes on; the child's
binary gives the same bits as a build in this process; a warm cache starts no child; where
no child can help (opt-out, simulator, a binary that does not load back, a device the child
cannot find) the program is built in this process, with a log line."""

from __future__ import annotations

import logging
import tempfile
import threading
import time

import numpy as np
import pyopencl as cl
import pytest

import clpatch
from clpatch.core import buildchild, childproc, kernels
from clpatch.core.devices import list_devices
from clpatch.core.kernels import BuildEvent, CompilerCrashError, set_default_build_progress
from tests.crashhook import arm
from tests.helpers import random_image

CONVERT = dict(src_type="short", group=4)
MARK = "crash-me-in-the-build-child"
SOURCE = f"// {MARK}\n__kernel void fill(__global float *x) {{ x[get_global_id(0)] = 2.0f; }}\n"


@pytest.fixture
def cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CLPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CLPATCH_NO_DISK_CACHE", raising=False)
    monkeypatch.delenv(buildchild.ENV, raising=False)
    return tmp_path / "programs"


@pytest.fixture
def no_default_hook():
    previous = set_default_build_progress(None)
    yield
    set_default_build_progress(previous)


def started_by(action) -> int:
    """How many build children `action()` started."""
    before = buildchild.children_started()
    action()
    return buildchild.children_started() - before


@pytest.mark.parametrize("variable, signal", [("CLPATCH_TEST_CRASH_BUILD", "SIGSEGV"),
                                              ("CLPATCH_TEST_ABORT_BUILD", "SIGABRT")])
def test_a_compiler_crash_is_a_build_error_naming_the_signal(runtime, cache_folder, request,
                                                             tmp_path, monkeypatch,
                                                             no_default_hook, variable, signal):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    arm(request, **{variable: MARK})
    events: list[BuildEvent] = []
    rt = clpatch.Runtime(runtime.device, build_progress=events.append)
    with pytest.raises(CompilerCrashError) as info:
        rt.programs.build(SOURCE, template="fill.cl.mako", params={"side": 7})
    assert isinstance(info.value, clpatch.KernelBuildError)
    lines = str(info.value).splitlines()
    assert lines[0] == (f"the OpenCL compiler of {childproc.implementation(runtime.device)} "
                        f"crashed ({signal}) while building fill.cl.mako for "
                        f"{runtime.device.name.strip()}")
    assert "parameters: side=7" in lines and f"profile: {rt.profile.family}" in lines
    (saved,) = [line.split(": ", 1)[1] for line in lines if line.startswith("source saved as")]
    assert saved.startswith(str(tmp_path)) and open(saved).read() == SOURCE
    assert [(e.phase, e.template) for e in events] == [("start", "fill.cl.mako"),
                                                       ("failed", "fill.cl.mako")]
    assert rt.programs.builds == 0 and not cache_folder.exists()
    # This process and its runtime go on: the next program gets a new child.
    assert started_by(lambda: rt.programs.get("lib/convert.cl.mako", **CONVERT)) == 1
    assert rt.programs.builds == 1


def test_children_ended_from_outside_leave_the_build_to_this_process(runtime, cache_folder,
                                                                     request, caplog):
    """A child ended by a signal no compiler raises by faulting (SIGALRM), twice: the program
    is built here, with a log line, and works; a crash (SIGSEGV) stays an error (above)."""
    arm(request, CLPATCH_TEST_ALARM_BUILD=MARK)
    rt = clpatch.Runtime(runtime.device)
    with caplog.at_level(logging.INFO, logger="clpatch"):
        assert started_by(lambda: rt.programs.build(SOURCE, template="fill.cl.mako")) == 2
    assert rt.programs.builds == 1
    assert any("ended by SIGALRM twice" in r.getMessage() for r in caplog.records)
    out = np.zeros(4, np.float32)
    buffer = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                       hostbuf=out)
    rt.programs.build(SOURCE, template="fill.cl.mako").fill(rt.queue, (4,), None, buffer)
    cl.enqueue_copy(rt.queue, out, buffer)
    assert (out == 2.0).all()


def test_the_childs_binary_gives_the_same_bits_as_a_build_here(runtime, tmp_path, monkeypatch):
    image = random_image((41, 37), seed=3)
    found = {}
    for where in ("child", "here"):
        monkeypatch.setenv("CLPATCH_CACHE_DIR", str(tmp_path / where))
        monkeypatch.setenv(buildchild.ENV, "1" if where == "child" else "0")
        buildchild.close_idle()
        rt = clpatch.Runtime(runtime.device)
        started = buildchild.children_started()
        result = clpatch.search_patches(image, patch_size=5, window=9, k=6, variant="naive",
                                        runtime=rt)
        assert rt.programs.builds >= 1
        assert (buildchild.children_started() > started) == (where == "child")
        found[where] = (np.asarray(result.positions), np.asarray(result.distances))
    np.testing.assert_array_equal(found["child"][0], found["here"][0])
    assert found["child"][1].tobytes() == found["here"][1].tobytes()


def test_a_warm_cache_starts_no_child(runtime, cache_folder, monkeypatch):
    clpatch.Runtime(runtime.device).programs.get("lib/convert.cl.mako", **CONVERT)

    def refuse(*args, **kwargs):
        raise AssertionError("a build child was started for a program in the disk cache")

    monkeypatch.setattr(buildchild, "Child", refuse)
    warm = clpatch.Runtime(runtime.device)
    warm.programs.get("lib/convert.cl.mako", **CONVERT)
    assert (warm.programs.builds, warm.programs.loads) == (0, 1)


def test_the_opt_out_variable_builds_in_this_process(runtime, cache_folder, monkeypatch):
    monkeypatch.setenv(buildchild.ENV, "0")
    monkeypatch.setattr(buildchild, "Child", None)     # any use of a child would fail
    rt = clpatch.Runtime(runtime.device)
    rt.programs.get("lib/convert.cl.mako", **CONVERT)
    assert rt.programs.builds == 1 and len(list(cache_folder.glob("*.bin"))) == 1
    assert not buildchild.enabled()


def test_a_simulator_builds_in_this_process(runtime, cache_folder, monkeypatch):
    monkeypatch.setattr(type(runtime), "is_simulator", property(lambda self: True))
    monkeypatch.setattr(buildchild, "Child", None)
    rt = clpatch.Runtime(runtime.device)
    rt.programs.get("lib/convert.cl.mako", **CONVERT)
    assert rt.programs.builds == 1


@pytest.mark.parametrize("trouble", ["unloadable", "lost device"])
def test_where_the_child_cannot_help_this_process_builds_and_says_why(
        runtime, cache_folder, monkeypatch, caplog, trouble):
    if trouble == "unloadable":        # e.g. a PoCL binary without its bitcode
        monkeypatch.setattr(kernels, "_loadable", lambda binary, device: False)
        why = "the binary its build child made cannot be loaded back"
    else:                              # the child finds no such device
        key = dict(platform="no such platform", device="none", driver="0", ordinal=0)
        monkeypatch.setattr(buildchild, "device_key", lambda device: key)
        why = "its build child could not open the device (no such device here)"
    buildchild.close_idle()
    rt = clpatch.Runtime(runtime.device)
    with caplog.at_level(logging.INFO, logger="clpatch"):
        program = rt.programs.get("lib/convert.cl.mako", **CONVERT)
    assert program is not None and rt.programs.builds == 1
    assert f"clpatch: building lib/convert.cl.mako in this process: {why}" in caplog.messages


def test_the_child_finds_every_device_again():
    for entry in list_devices():
        key = childproc.device_key(entry.device)
        assert key is not None and childproc.find_device(key) == entry.device
        assert key["device"] == entry.device.name.strip()
        assert key["driver"] == entry.device.driver_version.strip()


def test_this_process_threads_run_while_the_child_compiles(runtime, cache_folder):
    """The compile runs in the child while this process only waits on a pipe (the GIL
    free): a thread ticking every 5 ms keeps ticking (in this process, PoCL holds the GIL
    for about two thirds of a compile, measured)."""
    ticks, done = [0], threading.Event()

    def tick() -> None:
        while not done.wait(0.005):
            ticks[0] += 1

    source = render_unique(runtime)
    rt = clpatch.Runtime(runtime.device)
    rt.programs.get("lib/convert.cl.mako", **CONVERT)        # the child started, warm
    thread = threading.Thread(target=tick)
    thread.start()
    start = time.perf_counter()
    rt.programs.build(source)
    seconds = time.perf_counter() - start
    done.set()
    thread.join()
    assert ticks[0] >= 0.7 * seconds / 0.005, (ticks[0], seconds)


def render_unique(runtime) -> str:
    """A source no cache has seen (PoCL's own cache included): a few kernels with a fresh
    constant, so that the compile takes a while."""
    stamp = time.time_ns()
    body = "\n".join(
        f"__kernel void k{i}(__global float *x) {{ float s = {stamp % 997}.0f;\n"
        f"  for (int j = 0; j < 64; ++j) s = s * 0.5f + x[(get_global_id(0) + j) % 64];\n"
        f"  x[get_global_id(0)] = s + {i}; }}" for i in range(8))
    return f"// {stamp}\n{body}\n"
