"""`clpatch autotune`: time the search configurations of common requests on this device and
keep the fastest that gives correct results.

For each request, on a photographic test image of realistic size (rotating between two
noisy versions so caches do not flatter), every applicable variant × neighbour table is
timed with its profile knobs (stage 1); the two fastest variants then have their knobs
varied one at a time (stage 2, skipped by `quick`). Each configuration's distances are
first checked against the naive variant's; one that fails to build, cannot run, or
disagrees is recorded as rejected with the reason and never chosen. Timing is the median
of OpenCL profiling events after warm-up. Results go to the device's tuning cache.

Each configuration is a separately built program, and building dominates a request's time
on GPUs (on the H100, 26 of a 15 s colour request's seconds). With `jobs` > 1 the programs
of a stage's configurations are built concurrently before any of them is timed (stage 1,
then stage 2 once stage 1's winners are known), so builds never overlap timing and times
are the same as with one job. See `clpatch.tune.prebuild.Prebuilder` for how.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..core.errors import ClpatchError
from ..core.runtime import Runtime
from ..core.tuning import TuningCache
from ..match.matches import min_candidates
from ..match.window.config import (
    SEARCH_VARIANTS,
    SearchConfig,
    SearchRequest,
    choose_search,
    config_to_json,
    request_key,
    rule_config,
)
from ..match.window.plan import SearchPlan
from .prebuild import Prebuilder, new_plan
from .timing import photo_mosaic, time_events

log = logging.getLogger("clpatch")

# The request grid of a full tuning run (the "common requests").
FULL_GRID = {"patch_size": (4, 5, 7, 8, 16), "step": (1, 2, 3, 4, 5, 6), "n": (8, 16, 32),
             "window": (21, 39), "channels": (1, 3)}
# The defaults of each method (search and NL-means share theirs).
QUICK_REQUESTS = (SearchRequest(8, 4, 16, 21, 1),)

_STAGE2_BATCH = (1, 4, 8, 12, 16)
_STAGE2_GROUP = (32, 64, 128, 256)
_STAGE2_TILE = (8, 16)


def default_jobs() -> int:
    """Concurrent program builds of `clpatch autotune` by default."""
    return max(1, min(os.cpu_count() or 1, 8))


def grid_requests(patch_sizes: Iterable[int] = FULL_GRID["patch_size"],
                  steps: Iterable[int] = FULL_GRID["step"], ns: Iterable[int] = FULL_GRID["n"],
                  windows: Iterable[int] = FULL_GRID["window"],
                  channels: Iterable[int] = FULL_GRID["channels"]) -> list[SearchRequest]:
    return [SearchRequest(p, s, n, w, c) for p, s, n, w, c in
            itertools.product(patch_sizes, steps, ns, windows, channels)]


@dataclass
class TuneResult:
    """What tuning found for one request."""

    request: SearchRequest
    chosen: SearchConfig
    time_ms: float
    rule: SearchConfig
    rule_time_ms: float
    timings: list[tuple[SearchConfig, float]] = field(default_factory=list)
    rejected: list[tuple[SearchConfig, str]] = field(default_factory=list)
    seconds: float = 0.0        # wall time of the whole request
    build_seconds: float = 0.0  # of which spent building programs (with jobs > 1: the
    #                             concurrent builds' wall time and what was left)

    @property
    def speedup(self) -> float:
        return self.rule_time_ms / self.time_ms if self.time_ms else 0.0


def _same_knobs(a: SearchConfig, b: SearchConfig) -> bool:
    return config_to_json(a) == config_to_json(b)


class Autotuner:
    """Times configurations on one runtime (which needs `profiling=True`)."""

    def __init__(self, runtime: Runtime, *, size: tuple[int, int] | None = None,
                 repeats: int = 7, warmup: int = 2, quick: bool = False,
                 log: Callable[[str], None] | None = None, jobs: int = 1,
                 builds: str = "processes") -> None:
        if not runtime.profiling:
            raise ValueError("autotuning needs a Runtime(profiling=True)")
        self.runtime = runtime
        is_cpu = runtime.profile.family in ("cpu", "generic")
        self.size = size or ((256, 256) if quick and is_cpu else (512, 512) if is_cpu
                             else (2048, 2048))
        self.repeats, self.warmup, self.quick = repeats, warmup, quick
        self.log = log or (lambda text: None)
        self._images: dict[int, list[Any]] = {}
        if jobs < 1:
            raise ValueError(f"jobs must be at least 1, got {jobs}")
        self.jobs = jobs
        self._builder = Prebuilder(runtime, self.size, jobs, builds)
        self._plan_seconds = 0.0  # spent constructing plans (building, when not done ahead)

    def close(self) -> None:
        """Stop the build workers (jobs > 1)."""
        self._builder.close()

    def __enter__(self) -> Autotuner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _inputs(self, channels: int) -> list[Any]:
        if channels not in self._images:
            rows, cols = self.size
            planes = [np.stack([photo_mosaic(rows, cols, seed=10 * k + c) for c in range(channels)], -1)
                      if channels > 1 else photo_mosaic(rows, cols, seed=10 * k) for k in range(2)]
            self._images[channels] = [cla.to_device(self.runtime.queue, np.ascontiguousarray(p))
                                      for p in planes]
        return self._images[channels]

    def _plan(self, request: SearchRequest, config: SearchConfig) -> SearchPlan:
        failed = self._builder.failure(request, config)
        if failed is not None:  # the prebuild met this error; do not build again
            raise failed
        start = time.perf_counter()
        try:
            plan = new_plan(self.runtime, self.size, request, config)
        finally:
            self._plan_seconds += time.perf_counter() - start
        return plan

    def _stage1(self, request: SearchRequest) -> list[SearchConfig]:
        configs = []
        for variant in SEARCH_VARIANTS:
            if variant == "square" and (request.patch_size, request.step) != (8, 4):
                continue
            for table in ("ordered", "unordered"):
                configs.append(SearchConfig(variant, table=table))
        return configs

    def _stage2(self, request: SearchRequest, best: SearchConfig) -> list[SearchConfig]:
        """Vary one knob of a (completed) configuration at a time."""
        out = []
        if best.variant != "naive":
            batches = [b for b in _STAGE2_BATCH if best.variant != "square" or b == 1 or b % 4 == 0]
            out += [dataclasses.replace(best, batch=b) for b in batches if b != best.batch]
        if best.variant == "square":
            out += [dataclasses.replace(best, tile=t) for t in _STAGE2_TILE if t != best.tile]
        else:
            out += [dataclasses.replace(best, group=g, rows=0) for g in _STAGE2_GROUP
                    if g != best.group and g >= request.patch_size]
        if best.variant == "column":
            out += [dataclasses.replace(best, rows=r) for r in range(1, request.step + 1)
                    if r != best.rows]
        return out

    def _reference(self, request: SearchRequest, image: Any) -> np.ndarray:
        plan = self._plan(request, SearchConfig("naive", table="ordered"))
        return plan.run(image).distances.get()

    def _measure(self, request: SearchRequest, config: SearchConfig,
                 reference: np.ndarray) -> tuple[SearchConfig, float]:
        """(completed config, median ms); raises ClpatchError with the reason to reject."""
        images = self._inputs(request.channels)
        try:
            plan = self._plan(request, config)
            got = plan.run(images[0]).distances.get()
        except (ValueError, ClpatchError, cl.Error) as exc:
            raise ClpatchError(f"cannot run: {str(exc).splitlines()[0]}") from exc
        scale = float(np.max(reference)) + 1.0
        bad = np.abs(got - reference) > 1e-4 * np.abs(reference) + 1e-6 * scale
        if got.shape != reference.shape or bad.any():
            raise ClpatchError(f"disagrees with the naive search at {int(bad.sum())} of "
                               f"{bad.size} distances")

        def run(i: int, plan: SearchPlan = plan) -> list[tuple[str, Any]]:
            plan.run(images[i % len(images)])
            return plan.last_events

        timing = time_events(run, warmup=self.warmup, repeats=self.repeats)
        return plan.config, timing.median("search")

    def tune(self, request: SearchRequest) -> TuneResult:
        start = time.perf_counter()
        self._plan_seconds = 0.0
        rows, cols = self.size
        if request.n > min_candidates(rows, cols, 1, request.patch_size, request.window, 0):
            raise ValueError(f"request {request} has fewer candidates than n on {rows}x{cols}")
        rule = rule_config(request, self.runtime.profile)
        stage1 = [rule, *self._stage1(request)]
        build_seconds = 0.0

        def prebuild(configs: list[SearchConfig]) -> None:
            nonlocal build_seconds
            if self.jobs > 1:
                t0 = time.perf_counter()
                self._builder.prebuild(request, configs)
                build_seconds += time.perf_counter() - t0
                self.log(f"    built {len(configs)} configurations in "
                         f"{time.perf_counter() - t0:.2f} s ({self.jobs} {self._builder.how})")

        prebuild([SearchConfig("naive", table="ordered"), *stage1])
        reference = self._reference(request, self._inputs(request.channels)[0])
        timings: list[tuple[SearchConfig, float]] = []
        rejected: list[tuple[SearchConfig, str]] = []

        def attempt(configs: Iterable[SearchConfig]) -> None:
            for config in configs:
                full = config
                try:
                    full = choose_search(request, self.runtime.profile, config)
                    if any(_same_knobs(full, seen) for seen, _ in timings):
                        continue
                    full, ms = self._measure(request, config, reference)
                except (ValueError, ClpatchError) as exc:
                    rejected.append((full, str(exc)))
                    self.log(f"    rejected {full.describe()}: {exc}")
                    continue
                timings.append((full, ms))
                self.log(f"    {full.describe():58s} {ms:9.3f} ms")

        attempt(stage1)
        if not self.quick:
            by_variant: dict[str, tuple[SearchConfig, float]] = {}
            for config, ms in timings:
                if config.variant not in by_variant or ms < by_variant[config.variant][1]:
                    by_variant[config.variant] = (config, ms)
            stage2 = [self._stage2(request, best)
                      for best, _ in sorted(by_variant.values(), key=lambda item: item[1])[:2]]
            prebuild([c for configs in stage2 for c in configs])
            for configs in stage2:
                attempt(configs)
        self._builder.failures.clear()
        rule_ms = next((ms for c, ms in timings if _same_knobs(c, rule)), float("nan"))
        if not timings:
            raise ClpatchError(f"no configuration of {request} could run on this device")
        chosen, best_ms = min(timings, key=lambda item: item[1])
        return TuneResult(request, chosen, best_ms, rule, rule_ms, timings, rejected,
                          seconds=time.perf_counter() - start,
                          build_seconds=build_seconds + self._plan_seconds)


def entry_for(result: TuneResult, size: tuple[int, int]) -> dict[str, Any]:
    return {"config": config_to_json(result.chosen), "time_ms": result.time_ms,
            "rule_config": config_to_json(result.rule), "rule_time_ms": result.rule_time_ms,
            "rejected": [{"config": config_to_json(c), "reason": why} for c, why in result.rejected],
            "size": list(size), "date": time.strftime("%Y-%m-%d")}


def _progress(done: int, total: int, label: str, stream: Any) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    bar = "#" * filled + "." * (width - filled)
    end = "\r" if stream.isatty() and done < total else "\n"
    stream.write(f"[{bar}] {done}/{total} {label}".ljust(79) + end)
    stream.flush()


def autotune(runtime: Runtime, requests: Iterable[SearchRequest], *, quick: bool = False,
             size: tuple[int, int] | None = None, repeats: int | None = None,
             cache: TuningCache | None = None, verbose: bool = False,
             stream: Any = None,
             on_result: Callable[[TuneResult], None] | None = None, jobs: int = 1,
             builds: str = "processes") -> list[TuneResult]:
    """Tune `requests` on `runtime` (profiling enabled), record the winners in `cache`
    (default: the runtime's tuning cache) and return what was found. `on_result` is called
    after each request (the command line saves the cache there, so an interrupted run keeps
    what it measured). `jobs` > 1 builds each stage's programs concurrently before timing
    them (`builds`: "processes" or "threads", see `Prebuilder`); what is timed, and how,
    is the same as with one job."""
    stream = stream or sys.stderr
    requests = list(requests)
    cache = cache if cache is not None else runtime.tuning
    results = []
    with Autotuner(runtime, size=size, quick=quick,
                   repeats=repeats or (3 if quick else 7), warmup=1 if quick else 2,
                   log=(lambda text: stream.write(text + "\n")) if verbose else None,
                   jobs=jobs, builds=builds) as tuner:
        for i, request in enumerate(requests):
            label = (f"p{request.patch_size} s{request.step} k{request.n} w{request.window} "
                     f"c{request.channels}")
            _progress(i, len(requests), label, stream)
            result = tuner.tune(request)
            if verbose:
                stream.write(f"    {label}: {result.seconds:.1f} s, of which "
                             f"{result.build_seconds:.1f} s building\n")
            cache.record(request_key("search", request), entry_for(result, tuner.size))
            results.append(result)
            if on_result is not None:
                on_result(result)
    _progress(len(requests), len(requests), "done", stream)
    return results


def summary_table(results: list[TuneResult]) -> str:
    """Markdown table: request → rule choice and time, tuned choice and time, speed-up."""
    lines = ["| request (p, step, n, window, channels) | rule choice | rule ms | tuned choice | "
             "tuned ms | speed-up | rejected |", "|---|---|---|---|---|---|---|"]
    for r in results:
        q = r.request
        same = _same_knobs(r.chosen, r.rule)
        lines.append(f"| {q.patch_size}, {q.step}, {q.n}, {q.window}, {q.channels} | "
                     f"{r.rule.describe()} | {r.rule_time_ms:.3f} | "
                     f"{'(rule)' if same else r.chosen.describe()} | {r.time_ms:.3f} | "
                     f"{r.speedup:.2f}x | {len(r.rejected)} |")
    return "\n".join(lines)
