"""The one registry of engines: what each tells the layers above it about itself, without
being imported by them.

Two kinds of entries, registered in one table (`clpatch.engines.register_all`, which
`import clpatch` calls):

- an `Operation`: its name (as `clpatch explain` and the tuning file spell it), the
  function that explains which configuration a call would run, and the kernel templates
  whose timings a tuning file records. The scheduler, autotune, `explain` and the command
  line look operations up here by name, so they import no engine.
- a `MatcherEngine`: a search engine the filters take as `search=` (its factory, a
  description, the fewest candidates it offers a reference), looked up by
  `clpatch.match.matcher`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Operation:
    """One registered operation.

    name:      "search", "nlmeans", "bm3d", ... (the first argument of `clpatch.explain`).
    explain:   `explain(runtime, **params)` -> an object whose `str()` is the explanation;
               params are those of `clpatch.explain` (patch_size, step, n, window, channels,
               metric, video, variant, preset), None where the caller set nothing.
    tuned_templates: templates (paths under cl_src/) whose kernels `clpatch autotune` times
               for this operation; a tuning file is trusted only for the source it timed.
    variants:  the names `variant=` accepts for this operation (for the command line).
    check_tuned: `check_tuned(config)` raises ValueError/TypeError for a tuning-file entry's
               configuration this operation cannot use (the entry is then ignored).
    """

    name: str
    explain: Callable[..., Any]
    tuned_templates: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    check_tuned: Callable[[dict], Any] | None = None


_lock = threading.Lock()
_operations: dict[str, Operation] = {}


def register(operation: Operation) -> Operation:
    """Add (or replace, on a module reload) the operation of that name."""
    with _lock:
        _operations[operation.name] = operation
    return operation


def operation(name: str) -> Operation:
    """The registered operation `name`; ValueError naming the registered ones otherwise."""
    with _lock:
        found = _operations.get(name)
        names = tuple(_operations)
    if found is None:
        raise ValueError(f"operation must be one of {names}, got {name!r}")
    return found


def tuned_check(name: str) -> Callable[[dict], Any] | None:
    """The entry check of operation `name`, None when it has none or is not registered."""
    with _lock:
        found = _operations.get(name)
    return found.check_tuned if found is not None else None


def operations() -> tuple[str, ...]:
    """Names of the registered operations, in registration order."""
    with _lock:
        return tuple(_operations)


def tuned_templates() -> tuple[str, ...]:
    """Every template any registered operation's tuning depends on (sorted, no repeats)."""
    with _lock:
        return tuple(sorted({t for op in _operations.values() for t in op.tuned_templates}))


@dataclass(frozen=True)
class MatcherEngine:
    """A search engine the filters accept as `search=name`.

    factory:     called like `SearchPlan(runtime, frames, rows, cols, channels, request,
                 config, **options)`, returns a matcher (`clpatch.match.matcher.Matcher`).
    description: one line for `explain`.
    capacity:    `capacity(rows, cols, frames, patch_size, window, temporal_window)`, the
                 fewest candidates a reference of this engine has (the filters lower k to
                 it on tiny images).
    """

    name: str
    factory: Callable[..., Any]
    description: str
    capacity: Callable[..., int]


_matchers: dict[str, MatcherEngine] = {}


def register_matcher(engine: MatcherEngine) -> MatcherEngine:
    """Add (or replace) the search engine of that name."""
    with _lock:
        _matchers[engine.name] = engine
    return engine


def unregister_matcher(name: str) -> None:
    """Remove the search engine `name` (nothing when there is none)."""
    with _lock:
        _matchers.pop(name, None)


def matcher_engine(name: str) -> MatcherEngine | None:
    """The search engine registered as `name`, or None."""
    with _lock:
        return _matchers.get(name)


def matcher_names() -> tuple[str, ...]:
    """Names of the registered search engines, in registration order."""
    with _lock:
        return tuple(_matchers)


def variant_names() -> tuple[str, ...]:
    """Every variant name any registered operation accepts (registration order)."""
    with _lock:
        seen: dict[str, None] = {}
        for op in _operations.values():
            seen.update(dict.fromkeys(op.variants))
        return tuple(seen)
