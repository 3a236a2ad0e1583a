"""The command line's "building kernels" line (`clpatch.cli.progress.BuildProgress`): drawn on
a terminal once builds last `delay` seconds, redrawn while they run, ended when they pause;
silent when nothing is built or stderr is no terminal; one line per program with --verbose."""

from __future__ import annotations

import io
import sys
import time

from clpatch.cli import main as cli
from clpatch.cli import tuning as tuning_cli
from clpatch.cli import warmup as warmup_cli
from clpatch.cli.progress import BuildProgress, EndsBuildLine, Progress
from clpatch.core.kernels import BuildEvent, default_build_progress

DEVICE = "Some GPU"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def event(phase: str, builds: int = 0, seconds: float = 0.0, stored: bool = True,
          template: str = "denoise/nlmeans.cl.mako") -> BuildEvent:
    return BuildEvent(phase, template, DEVICE, builds, seconds, stored)


def wait_for(condition, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_a_long_build_draws_one_line_ended_when_builds_pause(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    stream = Terminal()
    display = BuildProgress(stream, delay=0.05, interval=0.02)
    display(event("start"))
    wait_for(lambda: "building kernels" in stream.getvalue())   # drawn during the build
    text = stream.getvalue()
    assert text.startswith("\r") and "\n" not in text
    assert (f"building kernels: 0 built 00:00 (first run on {DEVICE}, cached afterwards): "
            "denoise/nlmeans") in text
    display(event("done", 1, 0.3))
    display(event("start", 1, template="match/search.cl.mako"))
    display(event("done", 2, 0.2, template="match/search.cl.mako"))
    wait_for(lambda: stream.getvalue().endswith("\n"))          # ended once builds pause
    last = stream.getvalue().rstrip("\n").split("\r")[-1].rstrip()
    assert last == f"building kernels: 2 built 00:00 (first run on {DEVICE}, cached afterwards)"
    assert stream.getvalue().count("\n") == 1
    display.close()
    assert stream.getvalue().count("\n") == 1                   # close adds nothing more
    assert display.built == 2 and abs(display.seconds - 0.5) < 1e-9


def test_short_builds_and_cached_runs_print_nothing():
    stream = Terminal()
    with BuildProgress(stream, delay=60.0, interval=0.01) as display:
        display(event("start"))
        display(event("done", 1, 0.01))
    assert stream.getvalue() == ""
    with BuildProgress(stream, delay=0.0):
        pass
    assert stream.getvalue() == ""


def test_no_terminal_prints_nothing_unless_verbose():
    quiet = io.StringIO()
    with BuildProgress(quiet, delay=0.0, interval=0.01) as display:
        display(event("start"))
        time.sleep(0.05)
        display(event("done", 1, 2.5))
    assert quiet.getvalue() == ""

    verbose = io.StringIO()
    with BuildProgress(verbose, verbose=True, delay=0.0) as display:
        display(event("start"))
        display(event("done", 1, 2.5))
        display(event("start", 1, stored=False, template="lib/convert.cl.mako"))
        display(event("failed", 1, 0.1, stored=False, template="lib/convert.cl.mako"))
        display(event("start", 1, stored=False, template="lib/convert.cl.mako"))
        display(event("done", 2, 0.5, stored=False, template="lib/convert.cl.mako"))
    assert verbose.getvalue().splitlines() == [
        f"clpatch: built denoise/nlmeans for {DEVICE} in 2.50 s",
        f"clpatch: built lib/convert for {DEVICE} in 0.50 s (disk cache off)"]


def test_the_label_and_a_disabled_cache_show_in_the_line(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    stream = Terminal()
    display = BuildProgress(stream, delay=0.0, interval=10.0, label="[2/5] bm3d fast")
    display(event("start", stored=False))
    assert stream.getvalue().split("\r")[-1].rstrip() == (
        "[2/5] bm3d fast: building kernels: 0 built 00:00 (disk cache off): denoise/nlmeans")
    display.close()
    assert stream.getvalue().endswith("\n")
    stream = Terminal()
    display = BuildProgress(stream, delay=0.0, interval=10.0)
    display(event("start", stored=False, template="lib/convert.cl.mako"))
    display.close()
    assert stream.getvalue().split("\r")[-1].rstrip() == (
        f"building kernels: 0 built 00:00 (on {DEVICE}; disk cache off: built again next "
        "run): lib/convert")


def test_the_line_fits_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    stream = Terminal()
    display = BuildProgress(stream, delay=0.0, interval=10.0)
    display(event("start"))
    display.close()
    assert all(len(line) <= 39 for line in stream.getvalue().replace("\r", "\n").splitlines())


def test_a_progress_bar_ends_an_open_build_line_first(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    stream = Terminal()
    display = BuildProgress(stream, delay=0.0, interval=10.0)
    display(event("start"))
    bar = Progress(3, "frames", stream, enabled=True)
    bar.update(1)
    text = stream.getvalue()
    assert text.index("building kernels") < text.index("\n") < text.index("frames [")
    bar.close()
    display.close()           # its line was ended: nothing is drawn over the bar
    assert stream.getvalue().count("building kernels") == text.count("building kernels")


def test_output_through_the_wrapper_ends_an_open_build_line_first(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    stream = Terminal()
    out = EndsBuildLine(stream)
    display = BuildProgress(stream, delay=0.0, interval=10.0)
    out.write("before\n")
    display(event("start"))
    print("result: 42", file=out)
    text = stream.getvalue()
    assert text.startswith("before\n\rbuilding kernels: 0 built")
    assert text.endswith("denoise/nlmeans\nresult: 42\n")
    assert out.isatty() and out.wrapped is stream
    display.close()
    assert stream.getvalue() == text                    # the line was ended already


def test_the_command_line_draws_the_line_on_a_terminal_and_ends_it_before_output(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out, err = Terminal(), Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)

    def fake(args):
        hook = default_build_progress()
        hook(event("start"))
        hook(event("done", 1, 2.0))                 # past the 1 s delay: the next one shows
        hook(event("start", 1, template="match/search.cl.mako"))
        hook(event("done", 2, 0.5, template="match/search.cl.mako"))
        print("result: 42")
        return 0

    monkeypatch.setattr(warmup_cli, "cmd_warmup", fake)
    assert cli.main(["warmup"]) == 0
    assert sys.stdout is out and sys.stderr is err and default_build_progress() is None
    assert out.getvalue() == "result: 42\n"
    lines = err.getvalue().split("\n")
    assert lines[0].split("\r")[-1].rstrip() == (
        f"building kernels: 2 built 00:02 (first run on {DEVICE}, cached afterwards)")
    assert lines[1:] == [""]


def test_autotune_keeps_its_own_progress_line(monkeypatch):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    seen = []
    monkeypatch.setattr(tuning_cli, "cmd_autotune",
                        lambda args: seen.append(default_build_progress().enabled) or 0)
    assert cli.main(["autotune"]) == 0 and seen == [False] and err.getvalue() == ""


def test_a_display_made_on_a_wrapped_stream_writes_to_the_stream_itself(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    stream = Terminal()
    display = BuildProgress(EndsBuildLine(EndsBuildLine(stream)), delay=0.0, interval=10.0)
    assert display.stream is stream and display.enabled
    display(event("start"))
    display(event("done", 1, 0.2))
    display.close()
    assert stream.getvalue().count("\n") == 1 and "1 built" in stream.getvalue()


def test_restart_counts_a_new_step_from_zero(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    stream = Terminal()
    display = BuildProgress(stream, delay=0.0, interval=10.0, label="[1/2] a")
    display(event("start"))
    display(event("done", 1, 3.0))
    display.restart("[2/2] b")
    assert stream.getvalue().endswith("[1/2] a: building kernels: 1 built 00:03\n")
    display(event("start", 1))
    display.close()
    assert stream.getvalue().split("\n")[-2].split("\r")[-1].startswith(
        "[2/2] b: building kernels: 0 built 00:00: denoise/nlmeans")
