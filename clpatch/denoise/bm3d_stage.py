"""BM3D's stages and bands: the search and kernels of one stage (`Stage`), and the bands of
output rows a plan's runs go through (`plan_tiles`), each holding what its rows need of
every stage's references, as many rows as the device's memory (or a budget) allows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.buffers import halve_until_fits, memory_limits
from ..match.matcher import GIVEN, make_matcher
from ..match.window.config import SearchRequest, choose_search
from .bm3d_params import StageParams, stagger_shifts
from .collaborative import FilterKernels


@dataclass(frozen=True)
class Tile:
    """Output rows [a, b) and, per stage, the search chunk of the references they need."""

    a: int
    b: int
    chunks: tuple[Any, ...]


class Stage:
    """The search plan and kernels of one stage."""

    def __init__(self, plan: Any, params: StageParams, variant: Any, given: bool = False) -> None:
        """`given`: the groups come from the caller's matches (`GivenMatcher`)."""
        rt = plan.runtime
        self.params = params
        self.given = given
        request = SearchRequest(params.patch_size, params.step, params.n, params.window, 1, "l2",
                                False)
        # (size: the rules fit the square search's tile to a small image, to fill the device)
        config = choose_search(request, rt.profile, variant, rt.tuning,
                               size=(plan.rows, plan.cols))
        shifts = stagger_shifts(params.step) if params.stagger else ()
        self.search = make_matcher(GIVEN if given else plan.search_engine, rt, 1, plan.rows,
                                   plan.cols, 1, request, config, stagger=shifts)
        self.staggered = bool(self.search.stagger)
        kernels = FilterKernels(rt, params, channels=plan.channels,
                                aggregation=plan.aggregation, colour=plan.colour,
                                stagger=self.staggered, exact_variance=params.exact_variance)
        self.filter, self.group = kernels.filter, kernels.group
        self.finalize, self.finalize_planar = kernels.finalize, kernels.finalize_planar
        self.clear, self.opponent = kernels.clear, kernels.opponent

    def rows_for(self, a: int, b: int) -> tuple[int, int]:
        """Grid rows [g0, g1) whose groups can reach output rows [a, b)."""
        p, h = self.params.patch_size, self.search.reach
        gy = self.search.grid_y
        g0 = int(np.searchsorted(gy, a - h - p + 1, side="left"))
        g1 = int(np.searchsorted(gy, b - 1 + h, side="right"))
        return g0, max(g1, g0 + 1)


def band(plan: Any, a: int, b: int) -> Tile:
    """Output rows [a, b) with each stage's search chunk of the references they need."""
    return Tile(a, b, tuple(s.search.chunk(0, 1, *s.rows_for(a, b)) for s in plan.stages))


def band_bytes(plan: Any, tile: Tile, guided: bool = False) -> tuple[int, int]:
    """(largest buffer, all buffers) of a tile, in bytes (`guided`: with a guide's band
    and its host staging)."""
    w, ch = plan.cols, plan.channels
    item = 8 if plan.aggregation == "fixed" else 4
    largest = whole = 0
    for stage, chunk in zip(plan.stages, tile.chunks, strict=True):
        hb = chunk.y_hi - chunk.y_lo
        refs = (chunk.g1 - chunk.g0) * len(stage.search.grid_x)
        sizes = [ch * hb * w * 4,                       # planar band
                 ch * hb * w * 8,                       # host staging
                 ch * hb * w * 4,                       # basic estimate band
                 refs * stage.params.n * 12,            # positions and distances
                 ch * hb * w * 2 * item,                # numerator and denominator
                 (tile.b - tile.a) * w * ch * 4]        # output rows
        if guided:
            sizes += [ch * hb * w * 4, ch * hb * w * 8]  # guide band and its staging
        largest = max(largest, *sizes)
        whole = max(whole, sum(sizes))
    return largest, whole


def plan_tiles(plan: Any, tile_bytes: int | None, guided: bool = False) -> list[Tile]:
    """The bands of output rows of `plan`'s runs, as many rows each as fit `tile_bytes`
    (None: the device's memory; `guided`: with a guide's band)."""
    largest, total = memory_limits(plan.runtime, tile_bytes)

    def tiles(rc: int) -> list[Tile]:
        return [band(plan, a, min(plan.rows, a + rc)) for a in range(0, plan.rows, rc)]

    def fits(_: int, rc: int) -> bool:
        return all(big <= largest and whole <= total
                   for big, whole in (band_bytes(plan, t, guided) for t in tiles(rc)))

    _, rows = halve_until_fits(
        fits, 1, plan.rows,
        f"one image row of this input does not fit the device's memory ({largest} bytes per "
        "buffer); reduce the image width, window or n")
    return tiles(rows)
