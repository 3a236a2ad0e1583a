"""The fuzz tests' one rule, and the invariants of results."""

from __future__ import annotations

import faulthandler
import inspect
import re
import signal
import sys
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyopencl.array as cla
from hypothesis import event

from clpatch import DeviceResourceError
from clpatch.match.matches import grid_positions

#: Seconds one call may take (cold program builds on PoCL take up to ~30 s each).
CALL_LIMIT = 240


class Hang(Exception):
    """A call ran past CALL_LIMIT."""


@contextmanager
def time_limit(seconds: int):
    """Raise Hang in the main thread after `seconds` (and dump every thread's stack a
    minute later if even that does not get through, e.g. a blocked driver call)."""
    def expired(signum: int, frame: Any) -> None:
        raise Hang(f"call ran past {seconds} s")

    if sys.platform == "win32":
        yield
        return
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    faulthandler.dump_traceback_later(seconds + 60, exit=False)
    try:
        yield
    finally:
        signal.alarm(0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)


def call(fn: Callable[..., Any], *args: Any, extra_names: Iterable[str] = (),
         documented: tuple[type[BaseException], ...] = (),
         **kwargs: Any) -> tuple[Any, BaseException | None]:
    """(result, None), or (None, error) for a ValueError/TypeError naming one of `fn`'s
    arguments (or `extra_names`), a DeviceResourceError or one of the function's
    `documented` errors. Anything else propagates, and an error naming no argument fails
    the test."""
    names = [*inspect.signature(fn).parameters, *extra_names]
    try:
        with time_limit(CALL_LIMIT):
            return fn(*args, **kwargs), None
    except (DeviceResourceError, *documented) as error:
        event(f"{fn.__name__}: {type(error).__name__}")
        return None, error
    except (ValueError, TypeError) as error:
        message = str(error)
        named = [n for n in names if re.search(rf"(?<![A-Za-z_]){re.escape(n)}(?![A-Za-z_])",
                                               message)]
        assert named, (f"{fn.__name__} raised {type(error).__name__} naming none of its "
                       f"arguments {names}: {message}")
        event(f"{fn.__name__}: {type(error).__name__} naming {named[0]}")
        return None, error


def host(array: Any) -> np.ndarray:
    return array.get() if isinstance(array, cla.Array) else np.asarray(array)


def check_image(out: Any, shape: tuple[int, ...], on_device: bool) -> None:
    """A filter's output: float32, the input's shape, finite, the input's kind of array."""
    assert isinstance(out, cla.Array) == on_device, f"output kind {type(out)}"
    assert tuple(out.shape) == tuple(shape), f"output shape {out.shape} != input {shape}"
    assert np.dtype(out.dtype) == np.float32, f"output dtype {out.dtype}"
    values = host(out)
    assert np.isfinite(values).all(), "output holds NaN or inf"


def check_matches(found: Any, *, frames: int | None, rows: int, cols: int, patch: int, k: int,
                  step: int | None, on_device: bool, candidate_rows: int | None = None,
                  candidate_cols: int | None = None) -> None:
    """A Matches: positions int32 inside the candidate image, distances float32, finite,
    >= 0 and ascending, k per reference, the grid `step` gives (None: not checked)."""
    rows_c = rows if candidate_rows is None else candidate_rows
    cols_c = cols if candidate_cols is None else candidate_cols
    assert isinstance(found.positions, cla.Array) == on_device
    assert isinstance(found.distances, cla.Array) == on_device
    positions, distances = host(found.positions), host(found.distances)
    dim = 2 if frames is None else 3
    assert positions.dtype == np.int32 and distances.dtype == np.float32
    assert positions.shape[-1] == dim, f"positions shape {positions.shape}"
    assert distances.shape == positions.shape[:-1]
    assert distances.shape[-1] == k, f"{distances.shape[-1]} candidates, asked {k}"
    if step is not None:
        gy, gx = grid_positions(rows, patch, step), grid_positions(cols, patch, step)
        expect = (len(gy), len(gx)) if frames is None else (frames, len(gy), len(gx))
        assert distances.shape[:-1] == expect, f"grid {distances.shape[:-1]} != {expect}"
        assert np.array_equal(np.asarray(found.grid_y), gy)
    assert np.isfinite(distances).all(), "distances hold NaN or inf"
    assert (distances >= 0).all(), "negative distances"
    assert (np.diff(distances, axis=-1) >= 0).all(), "distances not ascending"
    ys, xs = positions[..., -2], positions[..., -1]
    assert ys.min(initial=0) >= 0 and ys.max(initial=0) <= rows_c - patch, "row outside"
    assert xs.min(initial=0) >= 0 and xs.max(initial=0) <= cols_c - patch, "column outside"
    if frames is not None:
        ts = positions[..., 0]
        assert ts.min(initial=0) >= 0 and ts.max(initial=0) < frames, "frame outside"
