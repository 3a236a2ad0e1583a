"""`clpatch warmup [--device SPEC] [--methods LIST] [--channels LIST] [--presets LIST]
[--high-noise] [--dtypes LIST] [--size HxW ...] [--list] [--json] [--in-process]`: build
the OpenCL programs the common calls need on one device and store them in the on-disk
program cache, so that later runs start without compiling (`clpatch.tune.warmup`). One line
per step: what it built and how long it took, or that everything was already cached, or
its error, or its crash (a compiler or kernel killing its process: the steps run in a child
process); on a terminal, a "building kernels" line on stderr while a step compiles. Safe to
run again (then quick).

Exit status (that of every command, see `common`): 0 when every step ran, 1 when one failed
or crashed (its error is printed) or no OpenCL driver is found, 2 when the command line is
refused (a bad option, an unknown device)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ..tune.warmup import (
    DEFAULT_METHODS,
    DTYPES,
    MAX_CHANNELS,
    MAX_SIDE,
    METHODS,
    MIN_SIDE,
    PRESETS,
    SIDE,
    SIZED,
    StepResult,
    StepRunner,
    WarmupReport,
    WarmupStep,
    check_size,
    stored_in,
    warmup_steps,
)
from .common import EXIT_FAILURE, UsageError, add_device_option, device_line, open_runtime
from .progress import BuildProgress, end_build_line, format_duration

#: Width of the step column.
STEP_WIDTH = 34


def _name_list(valid: Sequence[str], what: str) -> Callable[[str], tuple[str, ...]]:
    """argparse type: comma-separated names among `valid`."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
        if not names:
            raise argparse.ArgumentTypeError(f"is empty; choose from {', '.join(valid)}")
        for name in names:
            if name not in valid:
                raise argparse.ArgumentTypeError(f"unknown {what} {name!r}; choose from "
                                                 f"{', '.join(valid)}")
        return names

    return parse


def channel_list(text: str) -> tuple[int, ...]:
    """argparse type of --channels: comma-separated counts from 1 to MAX_CHANNELS."""
    counts = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            count = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected channel counts like '1,3', got "
                                             f"{text!r}") from None
        if not 1 <= count <= MAX_CHANNELS:
            raise argparse.ArgumentTypeError(f"channel counts are 1 to {MAX_CHANNELS}, "
                                             f"got {count}")
        counts.append(count)
    if not counts:
        raise argparse.ArgumentTypeError("is empty; give channel counts like '1,3'")
    return tuple(dict.fromkeys(counts))


def image_size(text: str) -> tuple[int, int]:
    """argparse type of --size: 'HxW' (or one number for a square)."""
    parts = text.lower().replace("×", "x").split("x")
    try:
        sides = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HxW such as 1080x1920, got {text!r}") from None
    if len(sides) not in (1, 2):
        raise argparse.ArgumentTypeError(f"expected HxW such as 1080x1920, got {text!r}")
    try:
        return check_size(sides[0] if len(sides) == 1 else tuple(sides))
    except ValueError:
        raise argparse.ArgumentTypeError(f"sides must be from {MIN_SIDE} to {MAX_SIDE}, "
                                         f"got {text}") from None


def step_label(step: WarmupStep, size: tuple[int, int]) -> str:
    """The step's label, with the image size when it is not the default one."""
    return step.label + (f", {size[0]}x{size[1]}" if size != (SIDE, SIDE) else "")


def result_line(result: StepResult, index: int, total: int) -> str:
    """'[2/6] bm3d fast, 1 channel    built 4 programs in 12.31 s' (or cached, or the error)."""
    head = f"[{index}/{total}] ".rjust(len(f"[{total}/{total}] ")) + \
        f"{step_label(result.step, result.size):<{STEP_WIDTH}}"
    if result.error is not None:
        return f"{head}{'CRASH' if result.crash else 'FAILED'}: {result.error}"
    if result.built:
        plural = "s" if result.built > 1 else ""
        return f"{head}built {result.built} program{plural} in {result.seconds:.2f} s"
    loaded = f"{result.loaded} loaded from disk, " if result.loaded else ""
    return f"{head}cached ({loaded}{result.seconds:.2f} s)"


def cache_line(folder: Path | None) -> str:
    """Where the programs are kept, or that they are not."""
    if folder is None:
        return ("program cache: off (CLPATCH_NO_DISK_CACHE is set, or a simulator): the "
                "programs built now are not kept for later runs")
    return f"program cache: {folder}"


def summary_line(report: WarmupReport) -> str:
    cached = sum(r.status == "cached" for r in report.steps)
    failed = sum(r.status == "error" for r in report.steps)
    crashed = sum(r.status == "crash" for r in report.steps)
    parts = [f"built {report.built} program(s)", f"{cached} step(s) already cached"]
    if failed:
        parts.append(f"{failed} FAILED")
    if crashed:
        parts.append(f"{crashed} CRASHED")
    return (f"{len(report.steps)} step(s) in {format_duration(report.seconds)} "
            f"({report.seconds:.1f} s): " + ", ".join(parts))


def cmd_warmup(args: argparse.Namespace) -> int:
    try:
        steps = warmup_steps(args.methods, args.channels, args.presets, args.high_noise)
    except ValueError as exc:
        raise UsageError(f"--{exc}") from None
    sizes = list(dict.fromkeys(args.size or [(SIDE, SIDE)]))
    todo = [(size, step) for size in sizes for step in steps]
    if args.list:
        for size, step in todo:
            print(step_label(step, size))
        return 0
    runtime = open_runtime(args.device)
    folder = stored_in(runtime)
    if not args.json:
        print(f"warmup on {device_line(runtime)}")
        print(cache_line(folder), flush=True)
    results: list[StepResult] = []
    display = BuildProgress(verbose=args.verbose, delay=0.5)
    runtime.build_progress = display
    runner = StepRunner(runtime, isolate=not args.in_process)
    try:
        for index, (size, step) in enumerate(todo, 1):
            display.restart(f"[{index}/{len(todo)}] {step_label(step, size)}")
            results.append(runner.run(step, args.dtypes, size, ladder=not args.size))
            end_build_line()
            if not args.json:
                print(result_line(results[-1], index, len(todo)), flush=True)
    finally:
        runner.close()
        display.close()
    report = WarmupReport(runtime.device.name.strip(), folder, results,
                          sum(r.seconds for r in results))
    if args.json:
        json.dump(dict(report.as_dict(), device_line=device_line(runtime)), sys.stdout,
                  indent=1)
        print()
    else:
        print(summary_line(report))
    return 0 if report.ok else EXIT_FAILURE


def add_command(commands: argparse._SubParsersAction) -> None:
    """Add `warmup` to the command line's sub-commands."""
    parser = commands.add_parser(
        "warmup", help="build the OpenCL programs of the common calls ahead of time",
        description="Build the OpenCL programs the common calls need on one device (each "
        "method once, with its default parameters, on a tiny synthetic input, per channel "
        "count, preset and input dtype) and keep them in the on-disk program cache "
        "($CLPATCH_CACHE_DIR, else the user cache folder), so that later runs start without "
        "compiling. Run it once after installing, or when building a container image. "
        "Programs already cached are only loaded: a second run is quick. Calls with other "
        "parameters (patch size, window, n) still build theirs on first use. The steps run "
        "in a child process: one whose compiler or kernel crashes is reported as CRASH and "
        "the others still run. Exit status 0: every step ran; 1: a step failed or crashed (or "
        "no OpenCL driver); 2: the command line was refused.")
    add_device_option(parser)
    parser.add_argument("--methods", "-m", type=_name_list(tuple(METHODS), "method"),
                        default=None, metavar="LIST",
                        help=f"comma-separated methods to warm, among {', '.join(METHODS)} "
                             f"(default: {','.join(DEFAULT_METHODS)}; the programs of "
                             f"{' and '.join(SIZED)} depend on the image size: see --size)")
    parser.add_argument("--channels", "-c", type=channel_list, default=(1, 3), metavar="LIST",
                        help=f"comma-separated channel counts, 1 to {MAX_CHANNELS} (default: "
                             "1,3: grayscale and colour); each method warms those it takes")
    parser.add_argument("--presets", type=_name_list(PRESETS, "preset"), default=PRESETS,
                        metavar="LIST", help="BM3D presets to warm (default: fast,reference)")
    parser.add_argument("--high-noise", action="store_true",
                        help="also warm BM3D's high-noise settings (sigma above 40 on 0-255)")
    parser.add_argument("--dtypes", type=_name_list(DTYPES, "dtype"),
                        default=("float32", "uint8"), metavar="LIST",
                        help="input dtypes of Python calls to warm (default: float32,uint8; "
                             "the command line reads images as float32)")
    parser.add_argument("--size", type=image_size, action="append", metavar="HxW",
                        help=f"size of the synthetic images, repeatable: every step runs at "
                             f"each (default: {SIDE}x{SIDE}, search also on larger images, "
                             "which builds what images of any size need, except for "
                             f"{' and '.join(SIZED)}: give your images' sizes to warm those)")
    parser.add_argument("--list", action="store_true",
                        help="print the steps without running them")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON report (device, cache folder, every step's "
                             "status, programs built and loaded, time) instead of the lines")
    parser.add_argument("--in-process", action="store_true",
                        help="run the steps in this process instead of a child process (a "
                             "kernel crashing at run time then ends the warmup)")
    parser.set_defaults(func=cmd_warmup)
