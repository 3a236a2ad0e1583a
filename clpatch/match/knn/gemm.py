"""The kNN's GEMM engine (Tang et al. sec. 4): patches (or vectors) as matrix rows, then
||r||² − 2 q·r by a register-tiled product with the top-k fused into it
(`cl_src/match/knn_gemm.cl.mako`). Driven by `KnnPlan` for one block of query grid rows
at a time; the heaps it fills are merged, re-scored and sorted by the plan's finishing
kernel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...core.buffers import BufferPool
from ...core.kernels import kernel
from .config import KnnConfig

__all__ = ["GemmSearch"]


class GemmSearch:
    """The GEMM engine's kernels and matrices for one plan's shapes.

    channels, patch: of the images; candidates, cand_cols: the reference's patch positions;
    work_per_launch: the plan's bound on one launch's multiply-adds."""

    def __init__(self, runtime: Any, pool: BufferPool, config: KnnConfig, *, channels: int,
                 patch: int, k: int, candidates: int, cand_cols: int,
                 work_per_launch: int, matrix_bytes: int) -> None:
        self.runtime, self.pool, self.config = runtime, pool, config
        self.channels, self.patch, self.k = channels, patch, k
        self.candidates, self.cand_cols = candidates, cand_cols
        self.dims = channels * patch * patch
        self.ld = -(-self.dims // config.depth) * config.depth
        program = runtime.programs.get(
            "match/knn_gemm.cl.mako", tile_m=config.tile_m, tile_n=config.tile_n,
            group_x=config.tile_x, group_y=config.tile_y, depth=config.depth)
        self._gemm = kernel(program, "knn_gemm")
        self._extract_grid = kernel(program, "knn_extract_grid")
        self._extract_candidates = kernel(program, "knn_extract_candidates")
        self._norms = kernel(program, "knn_norms")
        self._means = kernel(program, "knn_means")
        self._centre = pool.get("gemm_centre", 4 * channels)
        self.block_m = config.tile_y * config.tile_m          # query rows per work-group
        self.block_n = config.tile_x * config.tile_n          # reference rows per step
        # Reference rows per chunk: the whole reference when its matrix fits.
        rows = max(self.block_n, matrix_bytes // (4 * self.ld))
        self.chunk_rows = min(candidates, rows - rows % self.block_n or self.block_n)
        self.chunk_stride = self.stride(self.chunk_rows, self.block_n)
        self.resident = self.chunk_rows >= candidates
        self._resident_ready = False
        self.work_per_launch = work_per_launch

    @staticmethod
    def stride(rows: int, block: int) -> int:
        """Rows a matrix stores for `rows` rows: a multiple of `block` and of 64."""
        unit = block * 64 // math.gcd(block, 64)
        return -(-rows // unit) * unit

    def heap_sets(self, splits: int) -> int:
        """Heap sets per query: one per work-item column and split."""
        return splits * self.config.tile_x

    def begin(self, rimage: tuple, wait: list[Any]) -> Any:
        """Start a run: the reference's channel means (the centre both matrices are
        extracted around) are measured, and its matrix must be extracted again."""
        self._resident_ready = False
        img, h, w = rimage
        return self._means(self.runtime.queue, (256, self.channels), (256, 1), img,
                           np.int32(int(h) * int(w)), self._centre, wait_for=wait)

    def _rows(self, image: tuple, out: Any, rows: int, stride: int, *, grid: tuple | None,
              c_lo: int, wait: list[Any]) -> Any:
        img, h, w = image
        g_y, g_x, g0, gx = grid if grid is not None else (None, None, 0, 0)
        i32 = np.int32
        extract = self._extract_grid if grid is not None else self._extract_candidates
        return extract(
            self.runtime.queue, (stride, -(-self.ld // 4) * 4), (64, 4), img,
            i32(self.channels), h, w, i32(self.patch), self._centre,
            g_y if g_y is not None else img,
            g_x if g_x is not None else img, i32(g0), i32(gx), i32(self.cand_cols), i32(c_lo),
            i32(rows), i32(self.ld), i32(stride), out, wait_for=wait)

    def _reference_chunk(self, rimage: tuple, c_lo: int, rows: int,
                         events: list[tuple[str, Any]], wait: list[Any]) -> tuple[Any, Any, list]:
        stride = self.chunk_stride
        rm = self.pool.get("gemm_r", 4 * stride * self.ld)
        norms = self.pool.get("gemm_rnorm", 4 * stride)
        if self.resident and self._resident_ready:
            return rm, norms, wait
        extracted = self._rows(rimage, rm, rows, stride, grid=None, c_lo=c_lo, wait=wait)
        normed = self._norms(self.runtime.queue, (stride,), (64,), rm, np.int32(self.ld),
                             np.int32(stride), norms, wait_for=[extracted])
        events += [("extract", extracted), ("norms", normed)]
        self._resident_ready = self.resident
        return rm, norms, [normed]

    def enqueue(self, qimage: tuple, rimage: tuple, grid: tuple, rows: int, heaps: Any,
                slots: int, splits: int, events: list[tuple[str, Any]],
                wait: list[Any]) -> list[Any]:
        """Offer every candidate to the heaps (`slots` slots each, lib/topk.mako) of `rows`
        query rows (the grid points of `grid` = (grid_y buffer, grid_x buffer, first grid
        row, grid columns))."""
        cfg, i32 = self.config, np.int32
        q_stride = self.stride(rows, self.block_m)
        qm = self.pool.get("gemm_q", 4 * q_stride * self.ld)
        extracted = self._rows(qimage, qm, rows, q_stride, grid=grid, c_lo=0, wait=wait)
        events.append(("extract", extracted))
        last = [extracted]
        groups_y = -(-rows // self.block_m)
        per_row = max(1, rows * self.ld)
        step = max(self.block_n, self.work_per_launch // per_row)
        step -= step % self.block_n
        for c_lo in range(0, self.candidates, self.chunk_rows):
            count = min(self.chunk_rows, self.candidates - c_lo)
            rm, norms, ready = self._reference_chunk(rimage, c_lo, count, events, last)
            for a in range(0, count, step):
                event = self._gemm(
                    self.runtime.queue, (cfg.tile_x, groups_y * cfg.tile_y, splits),
                    (cfg.tile_x, cfg.tile_y, 1), qm, i32(rows), i32(q_stride), rm, i32(a),
                    i32(min(count, a + step)), i32(self.chunk_stride), norms, i32(self.ld),
                    i32(c_lo), i32(self.k), i32(slots), heaps, wait_for=ready)
                events.append(("search", event))
                last = ready = [event]
        return last
