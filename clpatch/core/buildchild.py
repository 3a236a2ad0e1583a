"""Compile OpenCL programs in a child process (`clpatch.core.childproc`), so that a compiler
that crashes ends the child instead of the caller: `ProgramCache` sends every program it
does not find in the on-disk cache here first, loads the binary the child hands back, and
turns a child's death into a `CompilerCrashError` naming the signal.

Parent side: `build_in_child(device, source, options)` returns a `ChildBuild`, the program's
binary or why no child could help (then the caller compiles in its own process); it raises
`ChildDied` when the child died compiling and `CompileRefused` (with the build log) when the
compiler refused the source. Child side: `main()` (`python -m clpatch.core.buildchild`,
messages on stdin and stdout as `childproc` says).

Why children are kept: starting one (Python, pyopencl and the few clpatch modules it needs,
a context) takes 0.3-0.4 s on a 2-core CPU (PoCL and Intel's runtime, measured), as long as
many compiles there (0.05-1 s), so a child stays open for IDLE_SECONDS after each build, one
per device and per build running at the same time: a run of cold builds pays the start once,
then 0.00-0.03 s per program (the binary's trip and its load here). A warm cache starts none.
While the child compiles, this process only waits on a pipe: its other Python threads run
(compiling here, PoCL holds the GIL for half to two thirds of a compile).

`CLPATCH_BUILD_IN_CHILD=0` turns this off (`enabled()`): programs are compiled in the
calling process, as before.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import pyopencl as cl

from .childproc import Child, child_streams, device_key, find_device, receive, send
from .errors import KernelBuildError

log = logging.getLogger("clpatch")

#: The environment variable that turns build children off ("0").
ENV = "CLPATCH_BUILD_IN_CHILD"
#: How long an idle child is kept for the next build (seconds).
IDLE_SECONDS = 10.0
MODULE = "clpatch.core.buildchild"


def enabled() -> bool:
    """Whether programs are compiled in a child (`CLPATCH_BUILD_IN_CHILD` is not "0")."""
    return os.environ.get(ENV, "").strip() != "0"


@dataclass(frozen=True)
class ChildBuild:
    """What a build child gave: the program's `binary`, or (None) why no child could
    compile it (`unusable`)."""

    binary: bytes | None = None
    unusable: str = ""


class ChildDied(Exception):
    """The build child died while compiling; the message says how ('SIGSEGV')."""


class CompileRefused(Exception):
    """The compiler refused the source (in the build child); the message is its build log."""


class CompilerCrashError(KernelBuildError):
    """The OpenCL compiler crashed: it killed the build child compiling the program (by a
    signal, or an exit); the message names the implementation, the signal, the template with
    its parameters and where the source was saved."""


class _Idle:
    """The idle children of each device, each closed after IDLE_SECONDS without a build (one
    timer thread at a time looks after them all)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.children: dict[str, list[tuple[float, Child]]] = {}
        self.timer: threading.Timer | None = None
        self.started = 0            # children started by this process (tests count them)

    def take(self, key: str) -> Child | None:
        with self.lock:
            waiting = self.children.get(key, [])
            while waiting:
                _, child = waiting.pop()
                if child.alive:
                    return child
        return None

    def give_back(self, key: str, child: Child) -> None:
        with self.lock:
            self.children.setdefault(key, []).append((time.monotonic(), child))
            if self.timer is None:
                self._schedule(IDLE_SECONDS)

    def _schedule(self, seconds: float) -> None:
        self.timer = threading.Timer(seconds, self.reap)
        self.timer.daemon = True
        self.timer.start()

    def reap(self, everything: bool = False) -> None:
        """Close the children idle for IDLE_SECONDS (`everything`: all idle children)."""
        now, done = time.monotonic(), []
        with self.lock:
            if not everything:
                self.timer = None
            for waiting in self.children.values():
                done += [c for since, c in waiting if everything or now - since >= IDLE_SECONDS]
                waiting[:] = [(s, c) for s, c in waiting
                              if not (everything or now - s >= IDLE_SECONDS)]
            left = [since for waiting in self.children.values() for since, _ in waiting]
            if left and self.timer is None:
                self._schedule(min(left) + IDLE_SECONDS - now + 0.01)
        for child in done:
            child.close()

    def forget(self) -> None:
        """In a forked process: the children are the parent's, not ours."""
        self.children, self.timer, self.lock = {}, None, threading.Lock()


_idle = _Idle()
atexit.register(_idle.reap, True)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_idle.forget)


def children_started() -> int:
    """How many build children this process has started (for tests and measurements)."""
    return _idle.started


def close_idle() -> None:
    """Close the idle build children now (they would close after IDLE_SECONDS)."""
    _idle.reap(everything=True)


def _start(key: dict[str, Any]) -> tuple[Child | None, str]:
    try:
        child = Child(MODULE, bare=True)
    except OSError as exc:
        return None, f"no build child could be started ({exc})"
    with _idle.lock:
        _idle.started += 1
    reply = child.ask({"device": key})
    if reply is None:
        return None, f"its build child ended before it was ready ({child.death()})"
    if not reply[0].get("ok"):
        child.close()
        return None, f"its build child could not open the device ({reply[0].get('why')})"
    return child, ""


def build_in_child(device: Any, source: str, options: tuple[str, ...]) -> ChildBuild:
    """Compile `source` with `options` for `device` in a build child (see the module doc)."""
    key = device_key(device)
    if key is None:
        return ChildBuild(unusable="the device is not among the platforms' devices")
    name = repr(sorted(key.items()))
    child = _idle.take(name)
    if child is None:
        child, why = _start(key)
        if child is None:
            return ChildBuild(unusable=why)
    reply = child.ask({"source": source, "options": list(options)})
    if reply is None:
        raise ChildDied(child.death())
    header, payload = reply
    if header.get("status") in ("built", "failed"):
        _idle.give_back(name, child)
        if header["status"] == "failed":
            raise CompileRefused(str(header.get("log")))
        return ChildBuild(binary=payload)
    child.close()
    return ChildBuild(unusable=f"its build child failed: {header.get('why')}")


#: How a build child can die without its compiler faulting: signals sent to it (a timer's,
#: a terminal's, job control's), which a crash of the compiler does not raise.
SENT_FROM_OUTSIDE = frozenset({"SIGALRM", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2",
                               "SIGPIPE", "SIGVTALRM", "SIGPROF"})


def build_in_children(device: Any, source: str, options: tuple[str, ...],
                      template: str) -> ChildBuild:
    """`build_in_child`, tried once more in a new child when the first dies: a compiler that
    crashes on this source crashes again (`ChildDied` then propagates), a child ended from
    outside builds the second time. When the second child too is ended by a signal no
    compiler raises by faulting (SENT_FROM_OUTSIDE: seen twice in a row with SIGALRM under
    load in the test suite, from a sender not found), the build is left to this process
    (`unusable` says why)."""
    try:
        return build_in_child(device, source, options)
    except ChildDied as death:
        log.warning("clpatch: the build child of %s died (%s); compiling it once more in a "
                    "new child", template, death)
    try:
        return build_in_child(device, source, options)
    except ChildDied as again:
        if str(again) not in SENT_FROM_OUTSIDE:
            raise
        return ChildBuild(unusable=f"its build children were ended by {again} twice")


def _compile(context: Any, device: Any, source: str, options: list[str]) -> bytes:
    """The binary of `source` built for `device`, its kernels created once (a driver that
    fails there fails in this child too)."""
    program = cl.Program(context, source).build(options, devices=[device], cache_dir=False)
    binary = bytes(program.get_info(cl.program_info.BINARIES)[0])
    for name in program.get_info(cl.program_info.KERNEL_NAMES).split(";"):
        if name:
            cl.Kernel(program, name)
    return binary


def main() -> None:
    """The child: open the device the first message names, then compile each source sent,
    replying with the binary ("built"), the build log ("failed") or what went wrong
    ("error"), until the end of the input."""
    inp, out = child_streams()
    try:
        hello = receive(inp)
        device = None if hello is None else find_device(hello[0].get("device", {}))
        if device is None:
            send(out, {"ok": False, "why": "no such device here"})
            return
        context = cl.Context([device])
        send(out, {"ok": True})
        while (message := receive(inp)) is not None:
            request = message[0]
            try:
                binary = _compile(context, device, request["source"], request["options"])
            except cl.Error as exc:
                send(out, {"status": "failed", "log": str(exc)})
            except Exception as exc:  # reported: the parent compiles in its own process
                send(out, {"status": "error", "why": f"{type(exc).__name__}: {exc}"})
            else:
                send(out, {"status": "built"}, binary)
    except (KeyboardInterrupt, BrokenPipeError):
        pass


if __name__ == "__main__":
    main()
