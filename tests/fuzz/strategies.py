"""Hypothesis strategies of the fuzz tests: hostile arrays and parameter values."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl.array as cla
from hypothesis import strategies as st

#: The long profile widens the parameters that key program builds to their whole ranges.
LONG = os.environ.get("CLPATCH_FUZZ", "") == "long"

DTYPES = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16,
          np.float32, np.float64, np.complex64, object]
REAL = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16, np.float32,
        np.float64]
LAYOUTS = ["c", "f", "strided", "transposed", "reversed", "list", "device", "device_view"]

#: Sides: mostly small (cheap, and where the edge cases are), sometimes up to 70.
SIDES = st.one_of(st.integers(0, 3), st.integers(4, 24), st.integers(0, 70))
#: Sides of valid examples: mostly large enough for the patches.
SIDES_VALID = st.one_of(st.integers(0, 70), st.integers(6, 24), st.integers(6, 24))

#: Values no integer parameter accepts (wrong type, out of every range, non-finite).
HOSTILE = [-1, -(2**31), 2**31, 2**63, 10**30, 2.5, 8.0, math.nan, math.inf, -math.inf, "8",
           True, [8], np.float64(4.0), object()]
#: Values no float parameter accepts.
HOSTILE_FLOAT = [0.0, -1.0, -1e-30, math.nan, math.inf, -math.inf, "20", True, None, [20.0],
                 1j, object()]


def ints(ci: list[Any], lo: int, hi: int) -> st.SearchStrategy:
    """A valid integer: one of `ci` in the CI profile, anything in [lo, hi] in the long one
    (its bounds more often)."""
    if LONG:
        return st.one_of(st.sampled_from([lo, hi, *ci]), st.integers(lo, hi))
    return st.sampled_from(ci)


class Picker:
    """Draws an example's parameters. In a valid example every one is valid; in a hostile
    example each is hostile with probability 1/3 (so that one bad value at a time is
    common, and its error must name it)."""

    def __init__(self, data: Any, hostile: bool) -> None:
        self.data = data
        self.hostile = hostile

    def __call__(self, valid: st.SearchStrategy, hostile: list[Any] = HOSTILE, *,
                 default: bool = False) -> Any:
        """A value of `valid`, or one of `hostile`; `default`: None (the function's default)
        a third of the time."""
        draw = self.data.draw
        if default and draw(st.integers(0, 2)) == 0:
            return None
        if self.hostile and draw(st.integers(0, 2)) == 0:
            return draw(st.sampled_from(hostile))
        return draw(valid)

    def array(self, **kwargs: Any) -> Drawn:
        """An input array: of a real dtype, finite, 2-D/3-D (video: 3-D/4-D) in a valid
        example; anything in a hostile one."""
        if not self.hostile:
            kwargs.update(dtypes=REAL, poison=False, hostile_ndim=False)
            kwargs.setdefault("sides", SIDES_VALID)
        return self.data.draw(arrays(**kwargs))


def start(data: Any) -> Picker:
    """The Picker of one example, valid or hostile (even odds)."""
    hostile = data.draw(st.booleans(), label="hostile example")
    return Picker(data, hostile)


@dataclass
class Drawn:
    """An input array as passed, and what it holds (shape: the logical shape)."""

    value: Any
    shape: tuple[int, ...]
    dtype: Any
    layout: str
    poisoned: bool

    @property
    def valid(self) -> bool:
        """Whether every element is a finite real number in a numeric container."""
        return self.dtype in REAL and not self.poisoned

    @property
    def on_device(self) -> bool:
        return self.layout.startswith("device")


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    base = rng.random(shape) * 255.0
    if dtype is object:
        return base.astype(object)
    kind = np.dtype(dtype).kind
    if kind == "i":
        base -= 100.0
    if kind == "b":
        return base > 127
    return base.astype(dtype)


def _layout(array: np.ndarray, layout: str, spatial: tuple[int, int], queue: Any) -> Any:
    """`array` as a view of the given layout (same logical contents)."""
    ya, xa = spatial
    if layout == "f":
        return np.asfortranarray(array)
    if layout == "strided":
        big = np.zeros(tuple(2 * n + 1 for n in array.shape), dtype=array.dtype)
        view = big[tuple(slice(1, None, 2) for _ in array.shape)]
        view[...] = array
        return view
    if layout == "transposed":
        return np.ascontiguousarray(np.swapaxes(array, ya, xa)).swapaxes(ya, xa)
    if layout == "reversed":
        flipped = np.ascontiguousarray(np.flip(array, axis=(ya, xa)))
        return np.flip(flipped, axis=(ya, xa))
    if layout == "list":
        return array.tolist()
    if layout == "device":
        return cla.to_device(queue, np.ascontiguousarray(array))
    if layout == "device_view":   # a reversed view of a transposed device array
        axes = list(range(array.ndim))
        axes[ya], axes[xa] = axes[xa], axes[ya]
        swapped = cla.to_device(queue, np.ascontiguousarray(
            np.flip(array, axis=0).transpose(axes))).transpose(axes)
        return swapped[::-1]
    return np.ascontiguousarray(array)


@st.composite
def arrays(draw: Any, *, frames: bool = False, channels: tuple[Any, ...] = (None, 1, 3),
           sides: st.SearchStrategy = SIDES, dtypes: list[Any] | None = None,
           layouts: list[str] | None = None, queue: Any = None, min_frames: int = 0,
           max_frames: int = 5, hostile_ndim: bool = True, poison: bool = True) -> Drawn:
    """A 2-D/3-D image, or 3-D/4-D video with `frames`, of any dtype and layout; sometimes a
    single NaN/inf/huge value; sometimes the wrong number of dimensions."""
    shape = [draw(sides), draw(sides)]
    if frames:
        shape.insert(0, draw(st.integers(min_frames, max_frames)))
    c = draw(st.sampled_from(channels))
    if c is not None:
        shape.append(c)
    spatial = (1, 2) if frames else (0, 1)
    if hostile_ndim and draw(st.integers(0, 15)) == 0:   # a dimension too few or too many
        shape = shape[:1] if draw(st.booleans()) else [*shape, 2, 1]
        spatial = (0, 0)
    dtype = draw(st.sampled_from(dtypes or DTYPES))
    layout = draw(st.sampled_from(layouts or LAYOUTS))
    if layout.startswith("device") and (queue is None or dtype in (object, np.bool_)):
        layout = "c"
    if spatial == (0, 0) and layout in ("transposed", "reversed", "device_view"):
        layout = "c"   # (these views swap or flip the two spatial axes)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    array = _values(rng, tuple(shape), dtype)
    value = draw(st.sampled_from([None] * 6 + [math.nan, math.inf, -math.inf, 1e30])
                 if poison else st.none())
    poisoned = False
    if value is not None and array.size and np.dtype(array.dtype).kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):
            array.flat[draw(st.integers(0, array.size - 1))] = value
        poisoned = not np.isfinite(array).all()   # (1e30 is finite: huge, not invalid)
    value = _layout(array, layout, spatial, queue)
    return Drawn(value, tuple(shape), dtype, layout, poisoned)


#: A noise level (or any positive float parameter): valid values of every kind.
SIGMAS = st.one_of(st.sampled_from([20, 20.0, np.float32(5.0), np.array(12.5), 1e-3, 1e6]),
                   st.floats(0.01, 1000.0, allow_nan=False))
