"""Crash hooks for the crash-containment tests, loaded only by the child processes of those
tests (they put this folder first on PYTHONPATH, so Python imports this file at start-up).
Nothing in clpatch knows about it: the child really dies by a signal, as it would when a
driver crashes, and clpatch's own code sees only that.

CLPATCH_TEST_CRASH_BUILD=<text>: building a program whose source holds <text> kills the
    process with SIGSEGV (a compiler crash).
CLPATCH_TEST_CRASH_KERNEL=<name>: launching the kernel <name> kills the process with SIGSEGV
    (a kernel crashing at run time).
CLPATCH_TEST_ABORT_BUILD=<text>: as CLPATCH_TEST_CRASH_BUILD, by os.abort() (SIGABRT).
CLPATCH_TEST_ALARM_BUILD=<text>: as CLPATCH_TEST_CRASH_BUILD, by SIGALRM (a signal sent from
    outside, which no compiler raises by faulting).
"""

import os
import signal

_BUILD = os.environ.get("CLPATCH_TEST_CRASH_BUILD")
_ABORT = os.environ.get("CLPATCH_TEST_ABORT_BUILD")
_ALARM = os.environ.get("CLPATCH_TEST_ALARM_BUILD")
_KERNEL = os.environ.get("CLPATCH_TEST_CRASH_KERNEL")


def _segfault() -> None:
    # PoCL installs a SIGSEGV handler of its own that survives a signal sent by kill():
    # put the default action back first, as a real fault would meet it.
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGSEGV)


if _BUILD or _ABORT or _ALARM or _KERNEL:
    import pyopencl as cl

    _build = cl.Program.build
    _enqueue = cl.enqueue_nd_range_kernel

    def build(self, *args, **kwargs):
        source = getattr(self, "_source", None) or ""
        if _BUILD and _BUILD in source:
            _segfault()
        if _ABORT and _ABORT in source:
            os.abort()
        if _ALARM and _ALARM in source:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGALRM)
        return _build(self, *args, **kwargs)

    def enqueue_nd_range_kernel(queue, kernel, *args, **kwargs):
        if kernel.function_name == _KERNEL:
            _segfault()
        return _enqueue(queue, kernel, *args, **kwargs)

    cl.Program.build = build
    cl.enqueue_nd_range_kernel = enqueue_nd_range_kernel
