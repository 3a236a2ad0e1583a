"""`clpatch selftest [--device SPEC] [--family NAME] [--json] [--list] [--in-process]`: run
every kernel family on tiny inputs on one device against the NumPy oracles and print one line
per family. The families run in a child process (`clpatch.selftest.run_selftest`), so one
whose driver kills its process is a CRASH line naming the signal and the OpenCL
implementation, and the others still run.

Exit status (that of every command, see `common`): 0 when every family passes (or is skipped
because the device cannot run it), 1 when one differs from its oracle, fails to run or crashes
(or no OpenCL driver is found), 2 when the command line is refused (a bad option, an unknown
family or device)."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from importlib import metadata
from typing import Any

from ..core.runtime import Runtime
from ..selftest import (
    FAMILIES,
    MAX_JOBS,
    STATUSES,
    FamilyResult,
    run_selftest,
    select_families,
)
from ..version import __version__
from .common import (
    EXIT_FAILURE,
    UsageError,
    add_device_option,
    device_line,
    open_runtime,
    positive_int,
)

#: Width of the family-name column.
NAME_WIDTH = max(len(f.name) for f in FAMILIES) + 2
#: Difference lines printed per failing family (--json has them all).
SHOWN_DETAILS = 4


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def environment() -> dict[str, str]:
    return dict(clpatch=__version__, python=platform.python_version(), numpy=_version("numpy"),
                pyopencl=_version("pyopencl"), system=platform.platform())


def device_info(runtime: Runtime) -> dict[str, str]:
    device = runtime.device
    return dict(platform=device.platform.name.strip(), name=device.name.strip(),
                version=device.version.strip(), driver=device.driver_version.strip(),
                profile=runtime.profile.family)


def result_lines(result: FamilyResult) -> list[str]:
    """The line of one family (and, for a failure, its first differences below it)."""
    status = {"pass": "pass", "fail": "FAIL", "error": "ERROR", "crash": "CRASH",
              "skip": "skip"}[result.status]
    built = f", built {result.builds} program(s)" if result.builds else ""
    head = f"{result.name:<{NAME_WIDTH}}{status:<6}"
    if result.status == "pass":
        return [f"{head}{result.seconds:.2f} s{built}"]
    details = [d.strip().splitlines()[0] if d.strip() else "?" for d in result.details] or ["?"]
    lines = [f"{head}{details[0]}"]
    lines += [" " * (NAME_WIDTH + 6) + d for d in details[1:SHOWN_DETAILS]]
    if len(details) > SHOWN_DETAILS:
        lines.append(" " * (NAME_WIDTH + 6) + f"... and {len(details) - SHOWN_DETAILS} more")
    return lines


def summary_line(results: list[FamilyResult], seconds: float) -> str:
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    builds = sum(r.builds for r in results)
    built = f", including building {builds} OpenCL program(s)" if builds else ""
    crashed = f"{counts['crash']} crashed, " if counts["crash"] else ""
    verdict = "all passed" if all(r.ok for r in results) else "DIFFERENCES FOUND"
    return (f"{len(results)} families: {counts['pass']} passed, {counts['fail']} failed, "
            f"{counts['error']} errors, {crashed}{counts['skip']} skipped in {seconds:.1f} s"
            f"{built}: {verdict}")


def cmd_selftest(args: argparse.Namespace) -> int:
    try:
        families = select_families(args.family)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.list:
        for family in families:
            print(f"{family.name:<{NAME_WIDTH}}{family.what}")
        return 0
    runtime = open_runtime(args.device)
    names = [f.name for f in families]
    if not args.json:
        env = environment()
        print(f"clpatch {env['clpatch']} self-test (Python {env['python']}, NumPy {env['numpy']}, "
              f"PyOpenCL {env['pyopencl']}, {env['system']})")
        info = device_info(runtime)
        print(f"device: {device_line(runtime)}; {info['version']}, driver {info['driver']}")
        print("(families build the OpenCL programs not yet in the program cache: the first "
              "run can take minutes on a CPU)", flush=True)
    start = time.perf_counter()

    def show(result: FamilyResult) -> None:
        if not args.json:
            print("\n".join(result_lines(result)), flush=True)

    results = run_selftest(runtime, names, on_result=show, isolate=not args.in_process,
                           jobs=args.jobs)
    seconds = time.perf_counter() - start
    passed = all(r.ok for r in results)
    if args.json:
        report: dict[str, Any] = dict(passed=passed, seconds=round(seconds, 3),
                                      environment=environment(), device=device_info(runtime),
                                      isolated=not args.in_process,
                                      families=[r.as_dict() for r in results])
        json.dump(report, sys.stdout, indent=1)
        print()
    else:
        print(summary_line(results, seconds))
    return 0 if passed else EXIT_FAILURE


def add_command(commands: argparse._SubParsersAction) -> None:
    """Add `selftest` to the command line's sub-commands."""
    parser = commands.add_parser(
        "selftest", help="check every kernel family on this device against NumPy",
        description="Run every kernel family (each search variant and neighbour table, kNN, "
        "ANN, NNF, NL-means aggregations, BM3D, CBM3D, VBM3D) on tiny inputs on one device and "
        "compare each with its NumPy oracle; one line per family. The families run in a child "
        "process: one that kills it (a driver crash) is reported as CRASH and the others still "
        "run. Exit status 0: all passed; 1: a family differs, failed or crashed (or no OpenCL "
        "driver); 2: the command line was refused.")
    add_device_option(parser)
    parser.add_argument("--family", "-f", action="append", metavar="NAME",
                        help="run only this family, or every family under a prefix such as "
                             "'search' or 'bm3d' (repeatable; see --list)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON report (environment, device, every family's "
                             "status, differences, time) instead of the lines")
    parser.add_argument("--list", action="store_true",
                        help="list the families (and what each checks) without running them")
    parser.add_argument("--in-process", action="store_true",
                        help="run the families in this process instead of a child process "
                             "(for a debugger; a driver crash then ends the self-test)")
    parser.add_argument("--jobs", "-j", type=positive_int, default=None, metavar="N",
                        help="child processes running families at once (default: the number "
                             f"of CPUs, at most {MAX_JOBS}); results print in the families' "
                             "order. A cold program cache makes the families compile-bound, "
                             "so more jobs finish sooner; 1 runs them one after the other")
    parser.set_defaults(func=cmd_selftest)
