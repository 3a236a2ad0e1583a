"""The `clpatch` command line's entry point: the parser of every command, logging, and how
errors are reported.

Every command returns an exit code from `main(argv)`; errors are reported as one
`clpatch: error: ...` line on stderr (a multi-line explanation, such as how to install
an OpenCL driver, follows it), never as a traceback. The exit statuses are the same for every
command (`EXIT_STATUS_HELP`, the epilog of `clpatch --help`; see `common`): 2 when the command
line is refused before any work (argparse's errors included), 1 when the work fails, 130
after Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import pyopencl as cl

from ..core.errors import ClpatchError
from ..core.kernels import set_default_build_progress
from ..version import __version__
from . import demo, denoise, devices, knn, nnf, search, selftest, tuning, warmup
from .common import EXIT_FAILURE, EXIT_USAGE, CommandError, UsageError
from .outputs import INTERRUPTED_CODE
from .progress import BuildProgress, EndsBuildLine, is_terminal

__all__ = ["EXIT_STATUS_HELP", "PROG", "CommandError", "UsageError", "build_parser", "main"]

log = logging.getLogger("clpatch")

PROG = "clpatch"

#: The epilog of `clpatch --help`: the exit statuses of every command.
EXIT_STATUS_HELP = (
    f"Exit status, the same for every command: 0 done; {EXIT_USAGE} the command line was "
    "refused before any work started (a bad or conflicting option or value, an unknown "
    "method or device, a missing or unreadable input, an input format refused, an output "
    "refused: it exists without --overwrite, is an input, has the wrong extension or an "
    f"unwritable folder), as argparse's own errors; {EXIT_FAILURE} the work failed (no "
    "OpenCL driver, a device or OpenCL error, a build failure, invalid data found during "
    f"the run, a write failing); {INTERRUPTED_CODE} interrupted (Ctrl-C).")


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors become one `clpatch: error:` line instead of usage + exit
    (the same exit status, EXIT_USAGE)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    """The parser of `clpatch` and all its commands (each command's `func` runs it)."""
    parser = _Parser(prog=PROG, description="Portable OpenCL patch search and patch-based "
                     "denoising.", epilog=EXIT_STATUS_HELP)
    parser.add_argument("--version", action="version", version=f"clpatch {__version__}")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="show clpatch's log messages (kernel cache, driver registration)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    devices.add_command(commands)
    search.add_command(commands)
    knn.add_command(commands)
    nnf.add_command(commands)
    denoise.add_command(commands)
    demo.add_command(commands)
    tuning.add_commands(commands)
    selftest.add_command(commands)
    warmup.add_command(commands)
    return parser


def _report(message: str) -> None:
    lines = message.strip().splitlines() or ["unknown error"]
    print(f"{PROG}: error: {lines[0]}", file=sys.stderr)
    for line in lines[1:]:
        print(line, file=sys.stderr)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of the message (tests replace it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


_log_handler: logging.Handler | None = None


def _setup_logging(verbose: bool) -> None:
    global _log_handler
    if _log_handler is None:
        _log_handler = _StderrHandler()
        _log_handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(_log_handler)
    log.setLevel(logging.INFO if verbose else logging.WARNING)


def entry() -> None:
    """The `clpatch` command's entry point: `main()`'s exit code. After Ctrl-C the process
    exits at once (streams flushed) instead of letting the interpreter's shutdown wait for
    the device work still queued (up to a few launches, seconds each on a CPU device)."""
    code = main()
    if code == INTERRUPTED_CODE:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)


#: Commands that draw a progress line of their own on stderr (no "building kernels" line).
OWN_PROGRESS_LINE = frozenset({"autotune"})


def _run(args: argparse.Namespace) -> int:
    """Run the command, showing a "building kernels" line on stderr (a terminal; with
    --verbose one line per program anywhere) while OpenCL programs are compiled for it.
    While the line may be drawn, the command's own output to the terminal (stdout, stderr,
    log messages) ends it first."""
    streams = sys.stdout, sys.stderr
    own_line = args.command in OWN_PROGRESS_LINE
    with BuildProgress(enabled=False if own_line else None, verbose=args.verbose) as display:
        previous = set_default_build_progress(display)
        if display.enabled:
            sys.stderr = EndsBuildLine(streams[1])
            if is_terminal(streams[0]):
                sys.stdout = EndsBuildLine(streams[0])
        try:
            return int(args.func(args))
        finally:
            set_default_build_progress(previous)
            if display.enabled:
                sys.stdout, sys.stderr = streams


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default: sys.argv[1:]); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        _setup_logging(args.verbose)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        return _run(args)
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except CommandError as exc:
        _report(str(exc))
        return exc.code
    except BrokenPipeError:  # output piped into a command that stopped reading (| head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return INTERRUPTED_CODE
    except (ClpatchError, ValueError, TypeError, OSError, LookupError) as exc:
        # Raised outside `usage_checks`: while doing the work.
        _report(str(exc) or type(exc).__name__)
        return EXIT_FAILURE
    except cl.Error as exc:
        _report(f"OpenCL error: {exc}")
        return EXIT_FAILURE
