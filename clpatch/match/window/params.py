"""The windowed search's parameters: their ranges and their one check.

`search_patches`, the filters built on the search and `clpatch explain` all check through
`check_search_request` (ranges) and `check_fits` (the image can hold the patch and the n
candidates), so a parameter is checked once per call, the same way everywhere.
"""

from __future__ import annotations

from typing import Any

from ...core.validate import check_bool, check_choice, check_int
from ..matches import min_candidates
from .config import SearchRequest

METRICS = ("l2", "l1")
MAX_PATCH = 32
MAX_N = 32
MAX_STEP = 64
MAX_WINDOW = 127        # offsets are packed in 8 bits each
MAX_TEMPORAL_WINDOW = 63
MAX_CHANNELS = 64


def check_search_request(*, patch_size: Any, step: Any, n: Any, window: Any, channels: Any = 1,
                         metric: Any = "l2", video: Any = False,
                         max_step: int | None = MAX_STEP) -> SearchRequest:
    """The checked request (ValueError/TypeError naming the argument otherwise);
    max_step None: step at most patch_size."""
    p = check_int("patch_size", patch_size, 1, MAX_PATCH)
    s = check_int("step", step, 1, p if max_step is None else max_step)
    w = check_int("window", window, 1, MAX_WINDOW)
    k = check_int("k", n, 1, MAX_N)
    c = check_int("channels", channels, 1, MAX_CHANNELS)
    if isinstance(metric, str):
        metric = metric.lower()
    metric = check_choice("metric", metric, METRICS)
    return SearchRequest(p, s, k, w, c, metric, check_bool("video", video))


def check_fits(request: SearchRequest, frames: int, rows: int, cols: int,
               temporal_window: int) -> int:
    """Check that `rows` x `cols` holds a patch; return the candidates of the most
    constrained reference (n must not exceed it for the search)."""
    p = request.patch_size
    if p > rows or p > cols:
        raise ValueError(f"patch_size {p} is larger than the image ({rows}x{cols})")
    return min_candidates(rows, cols, frames, p, request.window, temporal_window)
