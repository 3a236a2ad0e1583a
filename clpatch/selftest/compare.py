"""How the self-test says that a result differs from its oracle: a family (a name and a
function that runs it), and comparisons that return the differences as short sentences.

A family's function takes the runtime and returns the list of differences it found (empty:
pass); it raises :class:`Unsupported` when the device cannot run it (e.g. no 64-bit atomics).
The criteria are the test suite's: to a tolerance where the tests compare to a tolerance
(float32 kernels against float64 oracles), bit for bit where the tests are bit-exact
(integer-valued inputs, where every float32 sum is exact).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.runtime import Runtime


class Unsupported(Exception):
    """The device cannot run this family (the message says why); not a failure."""


@dataclass(frozen=True)
class Family:
    """One kernel family of the self-test: `run(runtime)` returns its differences."""

    name: str
    run: Callable[[Runtime], list[str]]
    what: str = ""


def host(array: Any) -> np.ndarray:
    """A NumPy copy of a NumPy or pyopencl array."""
    return array.get() if hasattr(array, "get") and not isinstance(array, np.ndarray) else \
        np.asarray(array)


def _at(index: Any) -> str:
    return "(" + ", ".join(str(int(i)) for i in index) + ")"


def shape(actual: Any, expected: tuple[int, ...], what: str, dtype: Any = None) -> list[str]:
    """A difference when `actual` has another shape (or dtype) than expected."""
    a = np.asarray(actual)
    if a.shape != tuple(expected):
        return [f"{what} have shape {a.shape}, the oracle's {tuple(expected)}"]
    if dtype is not None and a.dtype != np.dtype(dtype):
        return [f"{what} are {a.dtype}, expected {np.dtype(dtype)}"]
    return []


def close(actual: Any, expected: Any, *, rtol: float, atol: float, what: str,
          versus: str = "the oracle") -> list[str]:
    """|actual − expected| <= atol + rtol·|expected| everywhere, else one sentence saying how
    many values differ (from `versus`) and by how much at most."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    found = shape(a, e.shape, what)
    if found:
        return found
    err = np.abs(a - e)
    bad = ~(err <= atol + rtol * np.abs(e))          # NaN counts as a difference
    if not bad.any():
        return []
    first = np.argwhere(bad)[0]
    worst = float(np.nanmax(np.where(bad, err, 0.0))) if np.isfinite(err[bad]).any() else np.inf
    return [f"{int(bad.sum())} of {bad.size} {what} differ from {versus} (max |delta| "
            f"{worst:.2g}; tolerance {atol:.2g} + {rtol:.2g}*|expected|; first at {_at(first)}: "
            f"{a[tuple(first)]:.6g} vs {e[tuple(first)]:.6g})"]


def equal(actual: Any, expected: Any, *, what: str) -> list[str]:
    """Bit-for-bit equality, else one sentence saying how many values differ."""
    a, e = np.asarray(actual), np.asarray(expected)
    found = shape(a, e.shape, what)
    if found:
        return found
    bad = a != e
    if not bad.any():
        return []
    first = np.argwhere(bad)[0]
    return [f"{int(bad.sum())} of {bad.size} {what} differ from the oracle (first at "
            f"{_at(first)}: {a[tuple(first)]!r} vs {e[tuple(first)]!r})"]


def matches_equal(positions: Any, distances: Any, want_positions: Any, want_distances: Any,
                  *, what: str = "matches") -> list[str]:
    """Matches (positions (..., n, D), distances (..., n)) equal to the oracle's bit for bit:
    a match differs when its position or its float32 distance does."""
    pos, dist = np.asarray(positions), np.asarray(distances)
    want_pos = np.asarray(want_positions)
    want_dist = np.asarray(want_distances).astype(np.float32)
    found = shape(pos, want_pos.shape, f"{what}' positions", np.int32)
    found += shape(dist, want_dist.shape, f"{what}' distances", np.float32)
    if found:
        return found
    bad = np.any(pos != want_pos, axis=-1) | (dist != want_dist)
    if not bad.any():
        return []
    first = tuple(np.argwhere(bad)[0])
    delta = np.abs(dist.astype(np.float64) - want_dist)[bad]
    worst = float(np.nanmax(delta)) if np.isfinite(delta).any() else np.inf
    return [f"{int(bad.sum())} of {bad.size} {what} differ from the oracle (max |delta distance| "
            f"{worst:.2g}; first at {_at(first[:-1])} rank {int(first[-1])}: "
            f"{tuple(int(v) for v in pos[first])} at {float(dist[first]):.6g}, oracle "
            f"{tuple(int(v) for v in want_pos[first])} at {float(want_dist[first]):.6g})"]


def ascending(distances: Any, what: str = "distances") -> list[str]:
    """Each row of distances ascending along the last axis."""
    d = np.asarray(distances)
    bad = np.any(np.diff(d, axis=-1) < 0, axis=-1)
    if not bad.any():
        return []
    return [f"{what} of {int(bad.sum())} of {bad.size} references are not ascending "
            f"(first at {_at(np.argwhere(bad)[0])})"]


def distinct(codes: Any, what: str = "matches") -> list[str]:
    """No candidate twice among a reference's n (codes: (..., n) integers, one per candidate)."""
    c = np.sort(np.asarray(codes), axis=-1)
    bad = np.any(np.diff(c, axis=-1) == 0, axis=-1)
    if not bad.any():
        return []
    return [f"{int(bad.sum())} of {bad.size} references get a candidate twice among their {what} "
            f"(first at {_at(np.argwhere(bad)[0])})"]
