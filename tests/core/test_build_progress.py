"""The build-progress hook: a runtime reports each program it compiles from source ("start",
then "done" or "failed"), nothing for programs found in memory or in the on-disk cache; the
process-wide hook serves runtimes without their own."""

from __future__ import annotations

import tempfile

import pytest

import clpatch
from clpatch.core.kernels import (
    BuildEvent,
    default_build_progress,
    set_default_build_progress,
)

CONVERT = dict(src_type="short", group=4)
BAD_SOURCE = "__kernel void broken(__global float *x) { x[0] = not_declared_anywhere; }\n"


@pytest.fixture
def cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CLPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CLPATCH_NO_DISK_CACHE", raising=False)
    return tmp_path / "programs"


@pytest.fixture
def no_default_hook():
    previous = set_default_build_progress(None)
    yield
    set_default_build_progress(previous)


def test_a_fresh_cache_reports_each_build_and_a_warm_one_nothing(runtime, cache_folder,
                                                                 no_default_hook):
    events: list[BuildEvent] = []
    cold = clpatch.Runtime(runtime.device, build_progress=events.append)
    cold.programs.get("lib/convert.cl.mako", **CONVERT)
    assert [e.phase for e in events] == ["start", "done"]
    start, done = events
    assert start.template == done.template == "lib/convert.cl.mako"
    assert start.device == done.device == runtime.device.name.strip()
    assert (start.builds, done.builds) == (0, 1) and cold.programs.builds == 1
    assert start.seconds == 0.0 and done.seconds > 0.0
    assert cold.programs.build_seconds == pytest.approx(done.seconds)
    assert done.stored is True and len(list(cache_folder.glob("*.bin"))) == 1

    cold.programs.get("lib/convert.cl.mako", **CONVERT)       # from memory: nothing
    assert len(events) == 2
    warm_events: list[BuildEvent] = []
    warm = clpatch.Runtime(runtime.device, build_progress=warm_events.append)
    warm.programs.get("lib/convert.cl.mako", **CONVERT)       # from disk: nothing
    assert warm_events == []
    assert (warm.programs.builds, warm.programs.loads) == (0, 1)


def test_without_a_disk_cache_events_say_the_binary_is_not_stored(runtime, cache_folder,
                                                                   monkeypatch, no_default_hook):
    monkeypatch.setenv("CLPATCH_NO_DISK_CACHE", "1")
    events: list[BuildEvent] = []
    clpatch.Runtime(runtime.device, build_progress=events.append).programs.get(
        "lib/convert.cl.mako", **CONVERT)
    assert [(e.phase, e.stored) for e in events] == [("start", False), ("done", False)]


def test_a_failed_build_is_reported_then_raised(runtime, tmp_path, monkeypatch, no_default_hook):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    events: list[BuildEvent] = []
    rt = clpatch.Runtime(runtime.device, build_progress=events.append)
    with pytest.raises(clpatch.KernelBuildError):
        rt.programs.build(BAD_SOURCE, template="broken.cl.mako")
    assert [(e.phase, e.template) for e in events] == [("start", "broken.cl.mako"),
                                                       ("failed", "broken.cl.mako")]
    assert events[1].builds == 0 and events[1].seconds > 0.0


def test_the_process_wide_hook_serves_runtimes_without_their_own(runtime, cache_folder,
                                                                 no_default_hook):
    shared: list[BuildEvent] = []
    own: list[BuildEvent] = []
    assert set_default_build_progress(shared.append) is None
    assert default_build_progress() == shared.append
    clpatch.Runtime(runtime.device).programs.get("lib/convert.cl.mako", src_type="uchar",
                                                 group=4)
    assert [e.phase for e in shared] == ["start", "done"]
    clpatch.Runtime(runtime.device, build_progress=own.append).programs.get(
        "lib/convert.cl.mako", src_type="ushort", group=4)
    assert [e.phase for e in own] == ["start", "done"] and len(shared) == 2
    assert set_default_build_progress(None) == shared.append
    assert default_build_progress() is None


def test_a_hook_that_raises_stops_the_call(runtime, cache_folder, no_default_hook):
    def refuse(event: BuildEvent) -> None:
        raise RuntimeError(f"no building {event.template}")

    rt = clpatch.Runtime(runtime.device, build_progress=refuse)
    with pytest.raises(RuntimeError, match="no building lib/convert.cl.mako"):
        rt.programs.get("lib/convert.cl.mako", **CONVERT)
    rt.build_progress = None
    rt.programs.get("lib/convert.cl.mako", **CONVERT)          # the cache is still usable
    assert rt.programs.builds == 1


def test_hooks_must_be_callable(runtime, no_default_hook):
    with pytest.raises(TypeError, match="build_progress must be a callable"):
        clpatch.Runtime(runtime.device, build_progress=42)
    rt = clpatch.Runtime(runtime.device)
    assert rt.build_progress is None
    with pytest.raises(TypeError, match="build_progress must be a callable"):
        rt.build_progress = "print"
    with pytest.raises(TypeError, match="hook must be a callable"):
        set_default_build_progress(3)
    assert default_build_progress() is None
