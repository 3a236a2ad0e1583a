"""Tasks in a child process (`clpatch.core.taskchild`): the child's runtime is a copy of this
one (device, profile overrides, memory limit, launches in flight, tuning file, environment);
a worker's exception comes back as an error and the child goes on; a task that kills its
process (os.abort, for real) is a `TaskCrash` and the next task gets a new child; where no
child can start, `ChildUnavailable`, and the self-test runs here with a warning."""

from __future__ import annotations

import logging
import os

import pytest

import clpatch
from clpatch.core import taskchild
from clpatch.core.childproc import implementation
from clpatch.core.taskchild import ChildUnavailable, TaskChild, TaskCrash
from clpatch.selftest import run_selftest

HERE = "tests.core.test_taskchild"


def describe(runtime: clpatch.Runtime, task: dict) -> dict:
    """A worker: what the child's runtime is."""
    device = runtime.device
    return dict(pid=os.getpid(), device=[device.platform.name, device.name,
                                         device.driver_version],
                profile=runtime.profile.template_values(), family=runtime.profile.family,
                memory_limit=runtime.memory_limit, max_in_flight=runtime.max_in_flight,
                tuning=str(runtime.tuning.path), env=os.environ.get(task["variable"]))


def fail_or_die(runtime: clpatch.Runtime, task: dict) -> dict:
    """A worker that raises, dies, or says which process it runs in."""
    if task["do"] == "raise":
        raise LookupError("no such thing (planted)")
    if task["do"] == "abort":
        os.abort()
    return dict(pid=os.getpid())


def test_the_child_runtime_is_a_copy_of_this_one(runtime, monkeypatch):
    monkeypatch.setenv("CLPATCH_TEST_MARK", "seen in the child")
    rt = clpatch.Runtime(runtime.device, profile_overrides={"bank_padding": 3},
                         memory_limit=12345678, max_in_flight=7)
    with TaskChild(rt, f"{HERE}:describe") as child:
        found = child.run({"variable": "CLPATCH_TEST_MARK"})
    device = rt.device
    assert found["pid"] != os.getpid()
    assert found["device"] == [device.platform.name, device.name, device.driver_version]
    assert found["profile"] == rt.profile.template_values() and found["profile"]["bank_padding"] == 3
    assert found["family"] == rt.profile.family
    assert (found["memory_limit"], found["max_in_flight"]) == (12345678, 7)
    assert found["tuning"] == str(rt.tuning.path) and found["env"] == "seen in the child"


def test_errors_come_back_and_crashes_start_a_new_child(runtime):
    with TaskChild(runtime, f"{HERE}:fail_or_die") as child:
        first = child.run({"do": "pid"})["pid"]
        with pytest.raises(RuntimeError, match="LookupError: no such thing \\(planted\\)"):
            child.run({"do": "raise"})
        assert child.run({"do": "pid"})["pid"] == first          # the same child goes on
        crash = child.run({"do": "abort"})
        assert crash == TaskCrash("SIGABRT", implementation(runtime.device), 0)
        assert crash.sentence == (f"the process running it died (SIGABRT) on "
                                  f"{implementation(runtime.device)}")
        assert child.run({"do": "pid"})["pid"] not in (first, os.getpid())


def test_without_a_child_the_selftest_runs_here_and_says_so(runtime, monkeypatch, caplog):
    key = dict(platform="no such platform", device="none", driver="0", ordinal=0)
    monkeypatch.setattr(taskchild, "device_key", lambda device: key)
    with TaskChild(runtime, f"{HERE}:describe") as child, \
            pytest.raises(ChildUnavailable, match="could not start: no such device here"):
        child.run({"variable": "HOME"})
    with caplog.at_level(logging.WARNING, logger="clpatch"):
        results = run_selftest(runtime, ["knn/direct", "nnf"])
    assert [(r.name, r.status) for r in results] == [("knn/direct", "pass"), ("nnf", "pass")]
    warnings = [m for m in caplog.messages if "runs in this process" in m]
    assert warnings == ["clpatch: the self-test runs in this process (a crash ends it): its "
                        "child process could not start: no such device here"]
