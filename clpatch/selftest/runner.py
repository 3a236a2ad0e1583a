"""Run the self-test's families on one device and collect one result per family.

Families run in a child process by default (`clpatch.core.taskchild`): one child runs them
one after the other on a copy of the runtime, so that a family whose driver kills its
process (the compiler or a kernel dying by SIGSEGV, an abort) becomes a "crash" result
naming the signal and the OpenCL implementation, and the next family runs in a new child.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.runtime import Runtime, resolve_runtime
from ..core.taskchild import ChildUnavailable, TaskChild, TaskCrash
from . import denoise_families, engine_families, search_families
from .compare import Family, Unsupported

log = logging.getLogger("clpatch")

#: Every family, in the order they run (and are printed).
FAMILIES: tuple[Family, ...] = (search_families.FAMILIES + engine_families.FAMILIES
                                + denoise_families.FAMILIES)

STATUSES = ("pass", "fail", "error", "crash", "skip")

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


def run_selftest(runtime: Runtime | None = None, families: Sequence[str] | None = None,
                 on_result: Callable[[FamilyResult], None] | None = None, *,
                 isolate: bool = True) -> list[FamilyResult]:
    """Run the families named by `families` (default: all) on `runtime` (default: the default
    device) against the NumPy oracles; `on_result` is called after each family.

    isolate: run the families in a child process on the same device, with the runtime's
        profile, memory limit and tuning file and the same program cache (see the module
        doc): a family that kills its process is a "crash" result and the others still run.
        False: in this process (a crash ends it; debuggers and monkeypatches see the calls).
        Where no child can start, the families run in this process, with a logged warning.
    """
    rt = resolve_runtime(runtime)
    chosen = select_families(families)
    results = []
    with TaskChild(rt, WORKER) as child:
        for family in chosen:
            result = None
            if isolate:
                try:
                    result = _in_child(child, family)
                except ChildUnavailable as why:
                    log.warning("clpatch: the self-test runs in this process (a crash ends "
                                "it): %s", why)
                    isolate = False
            if result is None:
                result = run_family(family, rt)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results
