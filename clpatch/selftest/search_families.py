"""Self-test families of the windowed patch search: every kernel variant with every neighbour
table, forced through `SearchConfig`, against the NumPy brute force (`oracles/search.py`).

Each family runs two tiny cases: an image with the L2 distance, and a two-channel video with
the L1 distance and a temporal window (the grid's last row and column off the step lattice in
both). As in the tests, distances must match the brute force to float32 tolerance (ties may
resolve to either position), every position must be a valid candidate of its reference's
window, none twice, and each reported distance must be the true distance of its position.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ..core.profiles import NEIGHBOUR_TABLES
from ..core.runtime import Runtime
from ..core.validate import with_k
from ..match.window.config import SEARCH_VARIANTS, SearchConfig
from ..match.window.search import search_patches
from .compare import Family, ascending, close, distinct, equal, host, shape
from .inputs import random_image
from .oracles import oracle

#: The tests' tolerance: float32 sums of up to p²·C terms against the float64 brute force.
RTOL = 3e-5
ATOL_SCALE = 1e-6

#: (label, input, search parameters, video): 8×8 patches on a step-4 grid, so that every
#: variant applies (the square search needs them).
CASES: tuple[tuple[str, Any, dict[str, Any], bool], ...] = (
    ("image, l2", partial(random_image, (29, 35), 1),
     dict(patch_size=8, step=4, window=15, n=8, metric="l2", temporal_window=0), False),
    ("2-channel video, l1", partial(random_image, (3, 20, 23, 2), 2),
     dict(patch_size=8, step=4, window=9, n=8, metric="l1", temporal_window=1), True),
)


def _references(gy: np.ndarray, gx: np.ndarray, frames: int, video: bool,
                shape_: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, y, x) of the reference of every match, broadcast to the distances' shape."""
    if video:
        t, y, x = (np.arange(frames)[:, None, None, None], gy[None, :, None, None],
                   gx[None, None, :, None])
    else:
        t, y, x = np.zeros(1, np.int64)[:, None, None], gy[:, None, None], gx[None, :, None]
    return tuple(np.broadcast_to(a, shape_) for a in (t, y, x))   # type: ignore[return-value]


def check_search(result: Any, image: np.ndarray, *, patch_size: int, step: int, window: int,
                 n: int, metric: str, temporal_window: int, video: bool) -> list[str]:
    """Everything DESIGN.md fixes about a search result, against the brute force."""
    search = oracle("search")
    gy, gx, want, _ = search.brute_force_search(image, patch_size, step, window, n, metric,
                                                temporal_window, video)
    found = (equal(result.grid_y, gy, what="reference rows")
             + equal(result.grid_x, gx, what="reference columns"))
    if found:
        return found
    positions, distances = host(result.positions), host(result.distances)
    found = (shape(positions, want.shape + (3 if video else 2,), "positions", np.int32)
             + shape(distances, want.shape, "distances", np.float32))
    if found:
        return found
    tol = dict(rtol=RTOL, atol=ATOL_SCALE * (float(np.max(want)) + 1.0))
    found += close(distances, want, what="match distances", **tol)
    found += ascending(distances)

    vol = search.as_video(image, video)
    frames, rows, cols, _ = vol.shape
    pos3 = positions if video else np.concatenate(
        [np.zeros(positions.shape[:-1] + (1,), np.int32), positions], -1)
    t, y, x = pos3[..., 0], pos3[..., 1], pos3[..., 2]
    ref_t, ref_y, ref_x = _references(gy, gx, frames, video, distances.shape)
    half = window // 2
    valid = ((y >= 0) & (y <= rows - patch_size) & (x >= 0) & (x <= cols - patch_size)
             & (t >= 0) & (t < frames) & (np.abs(y - ref_y) <= half) & (np.abs(x - ref_x) <= half)
             & (np.abs(t - ref_t) <= temporal_window))
    if not valid.all():
        first = tuple(int(i) for i in np.argwhere(~valid)[0])
        found.append(f"{int((~valid).sum())} of {valid.size} matches are not candidates of their "
                     f"reference's window (first at {first}: {tuple(int(v) for v in pos3[first])})")
    found += distinct((t.astype(np.int64) * rows + y) * cols + x)
    true = distances.astype(np.float64)          # invalid positions: reported above
    for index in np.argwhere(valid):
        i = tuple(index)
        true[i] = search.patch_distance(vol, (int(ref_t[i]), int(ref_y[i]), int(ref_x[i])),
                                        tuple(int(v) for v in pos3[i]), patch_size, metric)
    found += close(distances, true, what="reported distances",
                   versus="the true distances of their positions", **tol)
    return found


def run_search(variant: str, table: str, runtime: Runtime) -> list[str]:
    """One variant and neighbour table on every case."""
    found = []
    for label, make, params, video in CASES:
        image = make()
        result = search_patches(image, variant=SearchConfig(variant, table=table),
                                runtime=runtime, video=video, **with_k(params))
        if (result.config.variant, result.config.table) != (variant, table):
            found.append(f"{label}: ran {result.config.describe()}, not the {variant} search "
                         f"with the {table} table")
        found += [f"{label}: {line}" for line in check_search(result, image, video=video,
                                                              **params)]
    return found


FAMILIES = tuple(
    Family(f"search/{variant}/{table}", partial(run_search, variant, table),
           f"windowed search, {variant} variant, {table} neighbour table")
    for variant in SEARCH_VARIANTS for table in NEIGHBOUR_TABLES)
