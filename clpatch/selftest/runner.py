"""Run the self-test's families on one device and collect one result per family.

Families run in child processes by default (`clpatch.core.taskchild`), `jobs` of them at
once: each child runs the families it takes one after the other on a copy of the runtime,
so that a family whose driver kills its process (the compiler or a kernel dying by SIGSEGV,
an abort) becomes a "crash" result naming the signal and the OpenCL implementation, and
that child's next family runs in a new child. Results are reported in the families' order.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.runtime import Runtime, resolve_runtime
from ..core.taskchild import ChildUnavailable, TaskChild, TaskCrash
from ..core.validate import check_int
from . import denoise_families, engine_families, search_families
from .compare import Family, Unsupported

log = logging.getLogger("clpatch")

#: Every family, in the order they run (and are printed).
FAMILIES: tuple[Family, ...] = (search_families.FAMILIES + engine_families.FAMILIES
                                + denoise_families.FAMILIES)

STATUSES = ("pass", "fail", "error", "crash", "skip")

#: Children running families at once, at most, by default (see `default_jobs`).
MAX_JOBS = 4

#: What the self-test's child process runs (see `family_task`).
WORKER = "clpatch.selftest.runner:family_task"


@dataclass(frozen=True)
class FamilyResult:
    """What one family gave: "pass", "fail" (differences from the oracle, in `details`),
    "error" (it raised: the exception in `details`), "crash" (the process running it died:
    how, and on which OpenCL implementation, in `details`) or "skip" (the device cannot run
    it: why)."""

    name: str
    status: str
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0
    builds: int = 0          # OpenCL programs compiled during it (not found in the cache)

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "skip")

    def as_dict(self) -> dict:
        return dict(name=self.name, status=self.status, details=list(self.details),
                    seconds=round(self.seconds, 3), builds=self.builds)


def family_names() -> list[str]:
    return [family.name for family in FAMILIES]


def select_families(patterns: Sequence[str] | None = None) -> list[Family]:
    """The families named by `patterns` (None or empty: all). A pattern is a family's name or
    the start of names up to a "/": "search" selects every search/... family,
    "search/square" both of its tables."""
    if not patterns:
        return list(FAMILIES)
    chosen = []
    for pattern in patterns:
        key = pattern.strip().strip("/")
        matched = [f for f in FAMILIES if f.name == key or f.name.startswith(key + "/")]
        if not key or not matched:
            raise ValueError(f"family {pattern!r} matches no self-test family; the families are: "
                             + ", ".join(family_names()))
        chosen += [f for f in matched if f not in chosen]
    return [f for f in FAMILIES if f in chosen]


def run_family(family: Family, runtime: Runtime) -> FamilyResult:
    """Run one family; an exception is the family's result ("error"), never lost."""
    start, builds = time.perf_counter(), runtime.programs.builds

    def result(status: str, details: list[str]) -> FamilyResult:
        return FamilyResult(family.name, status, details, time.perf_counter() - start,
                            runtime.programs.builds - builds)

    try:
        found = family.run(runtime)
    except Unsupported as why:
        return result("skip", [str(why)])
    except Exception as exc:  # a driver or build failure is a finding of the self-test
        return result("error", [f"{type(exc).__name__}: {str(exc).strip() or '(no message)'}"])
    return result("fail" if found else "pass", list(found))


def family_task(runtime: Runtime, task: dict[str, Any]) -> dict[str, Any]:
    """In the self-test's child process: run the family `task["family"]` names."""
    (family,) = [f for f in FAMILIES if f.name == task["family"]]
    return run_family(family, runtime).as_dict()


def _in_child(child: TaskChild, family: Family) -> FamilyResult:
    start = time.perf_counter()
    outcome = child.run({"family": family.name})
    if isinstance(outcome, TaskCrash):
        return FamilyResult(family.name, "crash", [outcome.sentence],
                            time.perf_counter() - start, outcome.builds)
    return FamilyResult(**outcome)


def default_jobs() -> int:
    """Children running families at once by default: one per CPU, at most MAX_JOBS (a cold
    cache's families are compile-bound, and a driver's compiler uses one thread)."""
    return max(1, min(os.cpu_count() or 1, MAX_JOBS))


def run_selftest(runtime: Runtime | None = None, families: Sequence[str] | None = None,
                 on_result: Callable[[FamilyResult], None] | None = None, *,
                 isolate: bool = True, jobs: int | None = None) -> list[FamilyResult]:
    """Run the families named by `families` (default: all) on `runtime` (default: the default
    device) against the NumPy oracles; `on_result` is called after each family, in the
    families' order.

    isolate: run the families in child processes on the same device, with the runtime's
        profile, memory limit and tuning file and the same program cache (see the module
        doc): a family that kills its process is a "crash" result and the others still run.
        False: in this process, one after the other (a crash ends it; debuggers and
        monkeypatches see the calls). Families no child can run (none can start) run in
        this process after the others, with a logged warning.
    jobs: children running families at once (default `default_jobs()`); each takes the next
        family not yet taken, so a cold cache's builds overlap (on a 2-core CPU the cold
        self-test took about half as long with 2).
    """
    rt = resolve_runtime(runtime)
    chosen = select_families(families)
    jobs = default_jobs() if jobs is None else check_int("jobs", jobs, 1, 64)
    results: list[FamilyResult | None] = [None] * len(chosen)
    shown = [0]                 # results handed to on_result so far (in order)
    lock = threading.Lock()
    taken = iter(range(len(chosen)))
    stranded: list[int] = []    # families no child could run

    def record(i: int, result: FamilyResult) -> None:
        with lock:
            results[i] = result
            while shown[0] < len(chosen) and results[shown[0]] is not None:
                if on_result is not None:
                    on_result(results[shown[0]])
                shown[0] += 1

    def worker() -> None:
        with TaskChild(rt, WORKER) as child:
            while True:
                with lock:
                    i = next(taken, None)
                if i is None:
                    return
                try:
                    record(i, _in_child(child, chosen[i]))
                except RuntimeError as exc:     # the child's worker failed: never lose a family
                    record(i, FamilyResult(chosen[i].name, "error", [str(exc)]))
                except ChildUnavailable as why:
                    with lock:
                        if not stranded:            # (said once, whichever worker finds it)
                            log.warning("clpatch: the self-test runs in this process (a crash "
                                        "ends it): %s", why)
                        stranded.append(i)
                        stranded.extend(taken)      # this worker's and the rest, in order

    if isolate:
        threads = [threading.Thread(target=worker, name=f"clpatch-selftest-{j}", daemon=True)
                   for j in range(min(jobs, len(chosen)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        stranded = list(range(len(chosen)))
    for i in sorted(stranded):
        record(i, run_family(chosen[i], rt))
    return [r for r in results if r is not None]
