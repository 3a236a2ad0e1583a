"""Judging a run's measured peak |value| (the checking conversion's, `clpatch.core.upload`)
against the float32 limits and against the peak the caller gave (pieces of one larger input
pass the whole input's, `clpatch.dask` does): one rule for every filter, whether the run
waits for the measure (`run`) or defers it (`enqueue`, `clpatch.core.plans.DeviceChecks`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def peak_judge(check: Callable[[float], Any], given: float | None,
               name: str = "image") -> Callable[[float], None]:
    """A judge of the measured peak of input `name`: `check(measured)` (ValueError beyond
    the float32 limits), then ValueError when it exceeds the peak `given` (None: none)."""
    def judge(measured: float) -> None:
        check(measured)
        if given is not None and measured > given:
            raise ValueError(f"{name} values reach |x| = {measured:.6g}, above the peak "
                             f"{given:.6g} passed")
    return judge
