"""What the filters share for `matches=` (matches a caller gives instead of a search; the
matcher is `clpatch.match.given.GivenMatcher`): which engine a call runs on, and BM3D's
per-stage matches."""

from __future__ import annotations

from typing import Any

from ..match.matcher import GIVEN, check_search
from ..match.matches import Matches


def matches_search(search: Any, matches: Any, **replaced: Any) -> str:
    """The engine of a filter call: `search` (checked), or the given matches' (`GIVEN`).
    TypeError when `matches` comes with another search or with one of `replaced` (the
    arguments of the search it replaces, e.g. guide=, variant=) not None."""
    if matches is None:
        return check_search(search)
    if search != "window":
        raise TypeError(f"give search= or matches=, not both (got search={search!r})")
    given = sorted(name for name, value in replaced.items() if value is not None)
    if given:
        raise TypeError(f"matches= replaces the search: it takes no {'= or '.join(given)}=")
    return GIVEN


def stage_matches(matches: Any, search: Any, **replaced: Any) -> tuple[Any, Any]:
    """BM3D's `matches=` as a (stage 1, stage 2) pair: one Matches serves both stages; a
    pair may hold None for a stage that searches as usual. TypeError otherwise, or when
    some are given with another search or one of `replaced` (`matches_search`)."""
    if matches is None or isinstance(matches, Matches):
        pair = matches, matches
    elif isinstance(matches, (tuple, list)) and len(matches) == 2:
        pair = matches[0], matches[1]
    else:
        raise TypeError("matches must be a clpatch.Matches, or a (stage 1, stage 2) pair of "
                        f"Matches or None, got {type(matches).__name__}")
    for stage, m in enumerate(pair):
        if m is not None and not isinstance(m, Matches):
            raise TypeError(f"matches[{stage}] must be a clpatch.Matches or None, got "
                            f"{type(m).__name__}")
    if any(m is not None for m in pair):
        matches_search(search, pair, **replaced)
    return pair


def stage_label(pair: tuple[Any, Any], stage: int) -> str:
    """How errors name the matches of `stage` (0 or 1) of a `stage_matches` pair."""
    return "matches" if pair[0] is pair[1] else f"matches[{stage}]"
