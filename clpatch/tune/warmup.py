"""Build ahead of time the OpenCL programs that the common calls need (`warmup`).

The first call of a kind on a device compiles its programs (seconds each on some drivers;
minutes for a colour BM3D on PoCL with its caches cold); the binaries go to the on-disk
program cache (`clpatch.core.kernels.cache_dir`), so later processes load them instead.
`warmup` makes those first calls itself, on a tiny synthetic input: each method runs once
per channel count, preset and input dtype with its default parameters. That builds
exactly what a real call with those settings builds (the programs depend on the
parameters, the channels and the dtype, and but for the exceptions below not on the image
size), and runs each kernel once, so drivers that finish compiling at the first launch
(PoCL) fill their own caches too. A second warmup finds everything cached and is quick.

Calls with other parameters (another patch size, window or `n`, a forced variant) build
their own programs on first use. Some configurations do depend on the image size: the
clustering ANN (`ann`, and `burst`, which runs it) specialises its programs on the tile
geometry, so it is warmed only when asked for, and the windowed search's rules fit its
square tile to the image (halved on images that would give a device's compute units too
few work-groups), so `search` is also run on larger images (`LADDER`); `sizes` warms the
steps at the sizes of the user's images.

A compiler crash kills the build child compiling (`clpatch.core.buildchild`), not the
warmup: its step is a "crash" naming the implementation and the signal, and the others run.
With `isolate` (`clpatch warmup`'s default) the steps run in a child process
(`clpatch.core.taskchild`), so a kernel crashing at its first launch is a "crash" of its step
too; the programs then reach the on-disk cache but not the given runtime's memory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl

from ..core.errors import ClpatchError
from ..core.kernels import CompilerCrashError, cache_dir
from ..core.runtime import Runtime, resolve_runtime
from ..core.taskchild import ChildUnavailable, TaskChild, TaskCrash
from ..denoise.bm3d import bm3d
from ..denoise.bm3d_params import HIGH_NOISE_SIGMA
from ..denoise.burst import burst_denoise
from ..denoise.nlmeans import nlmeans, nlmeans_video
from ..denoise.vbm3d import vbm3d
from ..match.ann.search import ann_search
from ..match.knn.search import knn
from ..match.nnf.search import nnf
from ..match.window.search import search_patches

log = logging.getLogger("clpatch")

#: Side of the synthetic images: larger than every default window (so no parameter is
#: capped), and 67 - 8 is prime, so the reference grid of every step has rows and columns
#: off its lattice, as most real images have (they are searched by a kernel of their own).
SIDE = 67
#: Frames of the synthetic videos and bursts.
FRAMES = 5
#: Smallest and largest image side a warmup takes (`sizes`).
MIN_SIDE, MAX_SIDE = 16, 8192
#: The noise level the denoisers are warmed at (0-255 units), and the high-noise one (above
#: BM3D's switch to its high-noise settings).
SIGMA = 20.0
HIGH_SIGMA = 1.5 * HIGH_NOISE_SIGMA
#: Channel counts a warmup accepts (each method warms those it takes).
MAX_CHANNELS = 4
DTYPES = ("float32", "uint8", "uint16")
PRESETS = ("fast", "reference")

#: Each method: the channel counts it takes, and what it runs on ("image", "video", "pair").
METHODS: dict[str, tuple[tuple[int, ...], str]] = {
    "nlmeans": ((1, 2, 3, 4), "image"),
    "bm3d": ((1, 3), "image"),
    "nlmeans_video": ((1, 2, 3, 4), "video"),
    "vbm3d": ((1, 3), "video"),
    "burst": ((1, 2, 3, 4), "video"),
    "search": ((1, 2, 3, 4), "image"),
    "knn": ((1, 2, 3, 4), "image"),
    "ann": ((1, 2, 3, 4), "image"),
    "nnf": ((1, 2, 3, 4), "pair"),
}
#: Larger square images `search` also runs on at the default size (float32 only), until
#: a run takes LADDER_SECONDS: its rules fit the square search's tile to the image so that
#: a device's compute units get enough work-groups (on a GPU with 132 units the tile
#: changes at about 450 and 1000 pixels a side); a slow device (a CPU) has few compute
#: units, so its tile stops changing before its runs get long (131 pixels on 2 cores).
LADDER = (131, 263, 521, 1031, 2053)
LADDER_SECONDS = 2.0
LADDER_METHODS = ("search",)
#: Methods whose programs depend on the image size (the ANN's tile geometry).
SIZED = ("ann", "burst")
#: What a warmup warms when no methods are named: every method but the SIZED ones.
DEFAULT_METHODS = tuple(m for m in METHODS if m not in SIZED)
#: What a warmup's child process runs (see `step_task`).
WORKER = "clpatch.tune.warmup:step_task"


@dataclass(frozen=True)
class WarmupStep:
    """One call a warmup makes: `method` on `channels` channels, BM3D's `preset`, at noise
    level `sigma` (0-255 units; denoisers only)."""

    method: str
    channels: int
    preset: str = ""
    sigma: float = SIGMA

    @property
    def label(self) -> str:
        """'bm3d reference, 3 channels, sigma 60'."""
        name = f"{self.method} {self.preset}" if self.preset else self.method
        text = f"{name}, {self.channels} channel{'s' if self.channels > 1 else ''}"
        return text + (f", sigma {self.sigma:g}" if self.sigma != SIGMA else "")


@dataclass(frozen=True)
class StepResult:
    """What one step did on images of `size` (rows, cols): programs compiled from source
    (`built`), loaded from the on-disk cache (`loaded`), its time, and the error that
    stopped it (None when it ran); `crash`: that error is a crash (of the compiler, or of
    the step's process)."""

    step: WarmupStep
    built: int
    loaded: int
    seconds: float
    error: str | None = None
    size: tuple[int, int] = (SIDE, SIDE)
    crash: bool = False

    @property
    def status(self) -> str:
        """"built" (programs were compiled), "cached" (none needed compiling), "error" or
        "crash"."""
        if self.error is not None:
            return "crash" if self.crash else "error"
        return "built" if self.built else "cached"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepResult:
        """The result `as_dict` gave."""
        step = WarmupStep(data["method"], data["channels"], data["preset"] or "", data["sigma"])
        return cls(step, data["built"], data["loaded"], data["seconds"], data["error"],
                   tuple(data["size"]), data["status"] == "crash")

    def as_dict(self) -> dict[str, Any]:
        return dict(method=self.step.method, channels=self.step.channels,
                    preset=self.step.preset or None, sigma=self.step.sigma,
                    size=list(self.size), status=self.status,
                    built=self.built, loaded=self.loaded, seconds=round(self.seconds, 3),
                    error=self.error)


@dataclass(frozen=True)
class WarmupReport:
    """A warmup's results. `cache` is the folder the binaries were stored in, None when
    they were not (`CLPATCH_NO_DISK_CACHE=1`, a simulator): then the warmup only helped
    the runtime it ran on."""

    device: str
    cache: Path | None
    steps: list[StepResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def built(self) -> int:
        return sum(r.built for r in self.steps)

    @property
    def ok(self) -> bool:
        return all(r.error is None for r in self.steps)

    def as_dict(self) -> dict[str, Any]:
        return dict(device=self.device, cache=None if self.cache is None else str(self.cache),
                    seconds=round(self.seconds, 3), built=self.built, ok=self.ok,
                    steps=[r.as_dict() for r in self.steps])


def _names(argument: str, values: Any, valid: Sequence[str]) -> tuple[str, ...]:
    """`values` (a name, or names) checked against `valid`; duplicates dropped."""
    if isinstance(values, str):
        values = (values,)
    try:
        names = tuple(dict.fromkeys(values))
    except TypeError:
        raise TypeError(f"{argument} must be a name or a sequence of names, got "
                        f"{type(values).__name__}") from None
    if not names:
        raise ValueError(f"{argument} is empty; choose from {', '.join(valid)}")
    for name in names:
        if name not in valid:
            raise ValueError(f"{argument}: unknown {name!r}; choose from {', '.join(valid)}")
    return names


def _channel_counts(channels: Any) -> tuple[int, ...]:
    values = (channels,) if isinstance(channels, (int, np.integer)) else channels
    try:
        counts = tuple(dict.fromkeys(values))
    except TypeError:
        raise TypeError(f"channels must be an int or a sequence of ints, got "
                        f"{type(channels).__name__}") from None
    if not counts:
        raise ValueError(f"channels is empty; give counts from 1 to {MAX_CHANNELS}")
    for count in counts:
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)):
            raise TypeError(f"channels must hold ints, got {count!r}")
        if not 1 <= count <= MAX_CHANNELS:
            raise ValueError(f"channels must be from 1 to {MAX_CHANNELS}, got {count}")
    return tuple(int(c) for c in counts)


def warmup_steps(methods: Any = None, channels: Any = (1, 3), presets: Any = PRESETS,
                 high_noise: bool = False) -> list[WarmupStep]:
    """The calls `warmup` makes for these arguments (see `warmup`), in order. A method
    gets the channel counts it takes among `channels`; a ValueError names a method that
    gets none."""
    chosen = _names("methods", DEFAULT_METHODS if methods is None else methods, tuple(METHODS))
    counts = _channel_counts(channels)
    kinds = _names("presets", presets, PRESETS)
    sigmas = (SIGMA, HIGH_SIGMA) if high_noise else (SIGMA,)
    steps = []
    for method in chosen:
        usable = [c for c in counts if c in METHODS[method][0]]
        if not usable:
            raise ValueError(f"channels {','.join(map(str, counts))} leave {method} nothing "
                             f"to warm: it takes {' or '.join(map(str, METHODS[method][0]))} "
                             "channels")
        for count in usable:
            if method == "bm3d":
                steps += [WarmupStep(method, count, preset, sigma)
                          for preset in kinds for sigma in sigmas]
            else:
                steps.append(WarmupStep(method, count))
    return steps


def check_size(size: Any) -> tuple[int, int]:
    """`size` as (rows, cols): one int (a square) or two, each MIN_SIDE to MAX_SIDE."""
    sides = (size, size) if isinstance(size, (int, np.integer)) else size
    try:
        rows, cols = sides
    except (TypeError, ValueError):
        raise TypeError(f"size must be an int or a (rows, cols) pair, got {size!r}") from None
    for side in (rows, cols):
        if isinstance(side, bool) or not isinstance(side, (int, np.integer)):
            raise TypeError(f"size must hold ints, got {side!r}")
        if not MIN_SIDE <= side <= MAX_SIDE:
            raise ValueError(f"size: sides must be from {MIN_SIDE} to {MAX_SIDE}, got {side}")
    return int(rows), int(cols)


def check_sizes(sizes: Any) -> list[tuple[int, int]]:
    """`sizes` as a list of (rows, cols): None (SIDE x SIDE), an int (a square), a
    (rows, cols) pair of ints, or a sequence of ints and pairs; duplicates dropped."""
    if sizes is None:
        return [(SIDE, SIDE)]
    if isinstance(sizes, (int, np.integer)) or (
            isinstance(sizes, tuple) and len(sizes) == 2
            and all(isinstance(v, (int, np.integer)) for v in sizes)):
        return [check_size(sizes)]
    if not isinstance(sizes, Iterable) or isinstance(sizes, (str, bytes)):
        raise TypeError(f"sizes must be an int, a (rows, cols) pair or a sequence of those, "
                        f"got {type(sizes).__name__}")
    found = [check_size(size) for size in sizes]
    if not found:
        raise ValueError("sizes is empty; give image sizes such as [67, (1080, 1920)]")
    return list(dict.fromkeys(found))


def _pattern(frames: int, channels: int, rows: int, cols: int) -> np.ndarray:
    """A smooth pattern plus seeded noise in [0, 255], (frames, rows, cols, channels)."""
    y, x = np.mgrid[:rows, :cols].astype(np.float32)
    clean = np.stack([np.stack([128 + 60 * np.sin((y + t) / 5 + c) * np.cos((x - t) / 7 - c)
                                for c in range(channels)], -1) for t in range(frames)])
    noisy = clean + np.random.default_rng(0).normal(0, SIGMA, clean.shape)
    return np.clip(noisy, 0, 255)


def _call(step: WarmupStep, dtype: np.dtype, runtime: Runtime, size: tuple[int, int]) -> None:
    kind = METHODS[step.method][1]
    data = _pattern(FRAMES if kind == "video" else 1, step.channels, *size).astype(dtype)
    if step.channels == 1:
        data = data[..., 0]
    if kind != "video":
        data = data[0]
    sigma = step.sigma * (257.0 if dtype == np.uint16 else 1.0)
    method = step.method
    if method == "bm3d":
        bm3d(data, sigma, preset=step.preset, runtime=runtime)
    elif method in ("nlmeans", "nlmeans_video", "vbm3d", "burst"):
        function = {"nlmeans": nlmeans, "nlmeans_video": nlmeans_video, "vbm3d": vbm3d,
                     "burst": burst_denoise}[method]
        function(data, sigma, runtime=runtime)
    elif method == "search":
        search_patches(data, runtime=runtime)
    elif method == "knn":
        knn(data, runtime=runtime)
    elif method == "ann":
        ann_search(data, runtime=runtime)
    else:
        nnf(data, np.ascontiguousarray(data[::-1, ::-1]), runtime=runtime)


def run_step(step: WarmupStep, runtime: Runtime, dtypes: Sequence[str] = ("float32",),
             size: tuple[int, int] = (SIDE, SIDE), ladder: bool = False) -> StepResult:
    """Make one step's call once per input dtype on an image of `size`, and with `ladder`
    (for LADDER_METHODS) on the LADDER's larger images; a failure is the step's result."""
    programs = runtime.programs
    built, loaded, start = programs.builds, programs.loads, time.perf_counter()

    def result(error: str | None = None, crash: bool = False) -> StepResult:
        return StepResult(step, programs.builds - built, programs.loads - loaded,
                          time.perf_counter() - start, error, size, crash)

    try:
        for dtype in dtypes:
            _call(step, np.dtype(dtype), runtime, size)
        if ladder and step.method in LADDER_METHODS:
            for side in LADDER:
                begun = time.perf_counter()
                _call(step, np.dtype(np.float32), runtime, (side, side))
                if time.perf_counter() - begun > LADDER_SECONDS:
                    break
    except (ValueError, TypeError, ClpatchError, cl.Error) as exc:
        text = str(exc).strip()
        return result(f"{type(exc).__name__}: {text.splitlines()[0] if text else '(no message)'}",
                      isinstance(exc, CompilerCrashError))
    return result()


def step_task(runtime: Runtime, task: dict[str, Any]) -> dict[str, Any]:
    """In a warmup's child process: `run_step` for the step `task` describes."""
    step = WarmupStep(task["method"], task["channels"], task["preset"], task["sigma"])
    return run_step(step, runtime, task["dtypes"], tuple(task["size"]), task["ladder"]).as_dict()


class StepRunner:
    """Runs warmup steps (`run_step`) on `runtime`: with `isolate`, in a child process (one
    for all the steps, started again after a crash), else (or where no child can start: with
    a logged warning) in this process. Close it after use."""

    def __init__(self, runtime: Runtime, isolate: bool = True) -> None:
        self.runtime = runtime
        self.child = TaskChild(runtime, WORKER) if isolate else None

    def run(self, step: WarmupStep, dtypes: Sequence[str] = ("float32",),
            size: tuple[int, int] = (SIDE, SIDE), ladder: bool = False) -> StepResult:
        if self.child is not None:
            start = time.perf_counter()
            task = dict(method=step.method, channels=step.channels, preset=step.preset,
                        sigma=step.sigma, dtypes=list(dtypes), size=list(size), ladder=ladder)
            try:
                outcome = self.child.run(task)
            except ChildUnavailable as why:
                log.warning("clpatch: the warmup runs in this process (a crash ends it): %s", why)
                self.child = None
            else:
                if isinstance(outcome, TaskCrash):
                    return StepResult(step, outcome.builds, 0, time.perf_counter() - start,
                                      outcome.sentence, size, crash=True)
                return StepResult.from_dict(outcome)
        return run_step(step, self.runtime, dtypes, size, ladder)

    def close(self) -> None:
        if self.child is not None:
            self.child.close()


def warmup(runtime: Runtime | None = None, *, methods: Any = None, channels: Any = (1, 3),
           presets: Any = PRESETS, high_noise: bool = False,
           dtypes: Any = ("float32", "uint8"), sizes: Any = None,
           on_step: Callable[[StepResult], Any] | None = None,
           isolate: bool = False) -> WarmupReport:
    """Build (and store in the on-disk program cache) the OpenCL programs the common calls
    need on `runtime`'s device, so that later calls and processes start without compiling.

    runtime: the device to warm (None: the default runtime).
    methods: names among `METHODS` ("nlmeans", "bm3d", "nlmeans_video", "vbm3d", "burst",
        "search", "knn", "ann", "nnf"), one name or a sequence; None: all but "ann" and
        "burst" (whose programs depend on the image size, see `sizes`).
    channels: channel counts (1 to 4) to warm, an int or a sequence; each method takes
        those it supports (bm3d and vbm3d: 1 and 3).
    presets: BM3D's presets to warm ("fast", "reference"), a name or a sequence.
    high_noise: also warm BM3D's high-noise settings (sigma above 40 in 0-255 units).
    dtypes: input dtypes to warm ("float32", "uint8", "uint16"): each takes its own
        conversion program; the command line reads images as float32.
    sizes: the synthetic images' sizes: an int (a square), a (rows, cols) pair, or a list
        of those, sides MIN_SIDE to MAX_SIDE; every step runs at each. None: SIDE x SIDE,
        with `search` also on larger images (`LADDER`), which builds what images of any size
        need except for the ANN's programs (`ann`, `burst`), specialised on the image
        size: give your images' sizes to warm those for them.
    on_step: called with each `StepResult` as soon as its step is done.
    isolate: run the steps in a child process, so that a kernel crashing at run time is a
        "crash" of its step (`clpatch warmup` does); the programs then go to the on-disk
        cache only, not to `runtime`'s memory. A compiler crash is a "crash" of its step
        either way.

    Each step calls the method once per dtype with its default parameters on a tiny
    synthetic input (see the module doc); a step that fails or crashes is reported with its
    error and the others still run. Returns a `WarmupReport`; running it again reports
    every step "cached".
    """
    if not isinstance(high_noise, (bool, np.bool_)):
        raise TypeError(f"high_noise must be a bool, got {type(high_noise).__name__}")
    steps = warmup_steps(methods, channels, presets, high_noise)
    kinds = _names("dtypes", dtypes, DTYPES)
    shapes = check_sizes(sizes)
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be a callable or None, got {type(on_step).__name__}")
    rt = resolve_runtime(runtime)
    start = time.perf_counter()
    results = []
    runner = StepRunner(rt, isolate)
    try:
        for shape in shapes:
            for step in steps:
                results.append(runner.run(step, kinds, shape, ladder=sizes is None))
                if on_step is not None:
                    on_step(results[-1])
    finally:
        runner.close()
    return WarmupReport(rt.device.name.strip(), stored_in(rt), results,
                        time.perf_counter() - start)


def stored_in(runtime: Runtime) -> Path | None:
    """The folder `runtime`'s programs are stored in, None when none is (see WarmupReport)."""
    return None if runtime.is_simulator else cache_dir()
