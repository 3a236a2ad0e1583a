"""Argument checks shared by every public entry: each raises TypeError for the wrong kind of
value and ValueError for a value out of range, naming the argument and what it accepts.

NumPy scalars and 0-d arrays count as numbers (users pass `np.float32(20)` or `arr.std()`);
booleans never do.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np


def _scalar(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    """`value` as an int in [lo, hi]."""
    value = _scalar(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return int(value)


def check_float(name: str, value: Any, *, positive: bool = True) -> float:
    """`value` as a finite float, > 0 (positive) or >= 0."""
    value = _scalar(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, "
                         f"got {value}")
    return value


def check_choice(name: str, value: Any, choices: Sequence[str], *,
                 allow_none: bool = False) -> Any:
    """`value` if it is one of `choices` (or None when allowed)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or value not in choices:
        extra = " or None" if allow_none else ""
        raise ValueError(f"{name} must be one of {tuple(choices)}{extra}, got {value!r}")
    return value


def k_or_n(k: Any, n: Any, default: Any, where: str) -> Any:
    """The number of matches of a call that takes `k`, where the deprecated `n` (its name
    before 0.x) is still accepted with a DeprecationWarning; TypeError when both are given
    (`k` other than its `default`)."""
    if n is None:
        return k
    warnings.warn(f"{where}: n= is deprecated, pass k= (the number of matches)",
                  DeprecationWarning, stacklevel=3)
    if k is not default and k != default:
        raise TypeError(f"{where}: pass k (or the deprecated n), not both")
    return n


def with_k(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters that name the number of matches `n` (the parameter checks' and the
    oracles' name) with it as `k`, the public functions' name."""
    return {("k" if name == "n" else name): value for name, value in params.items()}


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def stage_pair(name: str, value: Any) -> tuple[Any, Any]:
    """A per-stage parameter: a scalar for both stages or a (stage 1, stage 2) pair."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{name} must be a scalar or a (stage 1, stage 2) pair, got {value!r}")
        return tuple(value)  # type: ignore[return-value]
    return (value, value)
