"""The matcher protocol: what the filters need of a search engine, and the engines by name.

A matcher is planned once for an input shape and a request (`make_matcher`), then driven
chunk by chunk: `upload` converts a chunk of the input to planar float32 on the device
(checking its values), `enqueue_chunk` writes the chunk's Matches into device buffers in the
layout of `clpatch.match.matches` (`cl_src/lib/matches.mako`); both take `wait_for` events
and return events. The filters (`clpatch.denoise`) use nothing else, so a new engine (the
exhaustive kNN, the clustering ANN, the k-d-tree NNF) plugs in by implementing this and
registering a factory (`register_engine`, into `clpatch.core.registry`; the project's
engines are registered in one table, `clpatch.engines`); `clpatch.nlmeans(...,
search=NAME)` and `clpatch.bm3d(..., search=NAME)` then run on it without new filter code.

Reference patches of every engine sit on the project's one grid (`grid_positions`): the
lattice 0, step, 2·step, … plus the last valid position of each axis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ..core.registry import MatcherEngine, matcher_engine, matcher_names, register_matcher
from ..core.validate import check_choice
from .given import GivenMatcher
from .matches import min_candidates
from .window.layout import Chunk


class Matcher(Protocol):
    """A search engine planned for one input shape (see the module doc)."""

    grid_y: np.ndarray          # top-left rows of the reference patches
    grid_x: np.ndarray          # their columns (BM3D's staggered grid: engines that take
                                # stagger= also expose `stagger` and `ref_x`, one row of
                                # columns per grid row)
    dim: int                    # 2: positions (y, x); 3: (t, y, x)
    reach: int                  # rows between a reference and its farthest candidate, at
                                # most (a filter tiling its output needs it)
    config: Any                 # the engine's configuration (for explain and benchmarks)
    uploader: Any               # the checking conversion (`clpatch.core.upload.Uploader`)

    def chunk(self, r0: int, r1: int, g0: int, g1: int) -> Chunk: ...

    def upload(self, volume: Any, chunk: Chunk, name: str = "planar", *,
               staging: str = "staging", transfers: Any = None,
               wait_for: list[Any] | None = None) -> tuple[Any, list[tuple[str, Any]]]: ...

    def enqueue_chunk(self, planar: Any, chunk: Chunk, out_pos: Any, out_dist: Any, *,
                      out_rows: int, out_row0: int = 0, out_f0: int = 0,
                      wait_for: list[Any] | None = None) -> list[Any]: ...

    def check_limit(self) -> float: ...


#: The engine name of a filter run on given matches (`matches=`, `clpatch.match.given`):
#: `make_matcher` plans a `GivenMatcher` for it; not a `search=` choice.
GIVEN = "given"


def register_engine(name: str, factory: Callable[..., Matcher], description: str,
                    capacity: Callable[..., int] = min_candidates) -> None:
    """Make `factory` available to the filters as `search=name` (`clpatch.core.registry`);
    `capacity` gives the fewest candidates a reference has (as `min_candidates`)."""
    register_matcher(MatcherEngine(name, factory, description, capacity))


def description(search: str) -> str:
    """The one-line description of engine `search` (ValueError for an unknown name)."""
    return _engine(search).description


def available_candidates(search: str, rows: int, cols: int, frames: int, patch_size: int,
                         window: int, temporal_window: int) -> int:
    """The fewest candidates a reference of engine `search` has on this input."""
    return _engine(search).capacity(rows, cols, frames, patch_size, window, temporal_window)


def searches() -> tuple[str, ...]:
    """The names `search=` accepts."""
    return matcher_names()


def check_search(search: Any) -> str:
    """`search` if it names a registered engine (ValueError otherwise)."""
    return check_choice("search", search, searches())


def _engine(search: Any) -> MatcherEngine:
    found = matcher_engine(search) if isinstance(search, str) else None
    if found is None:
        check_search(search)
        raise ValueError(f"search {search!r} is not registered")    # (a race: removed)
    return found


def make_matcher(search: str, runtime: Any, frames: int, rows: int, cols: int, channels: int,
                 request: Any, config: Any, **options: Any) -> Matcher:
    """Plan engine `search` for inputs of (frames, rows, cols, channels). Public entries
    check `search` once (`check_search`); here an unknown name raises the same error.
    `search=GIVEN` plans a `GivenMatcher` (its matches set by its `use`)."""
    if search == GIVEN:
        return GivenMatcher(runtime, frames, rows, cols, channels, request, config, **options)
    return _engine(search).factory(runtime, frames, rows, cols, channels, request, config,
                                   **options)
