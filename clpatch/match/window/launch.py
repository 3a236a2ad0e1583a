"""The windowed search's launches for one chunk, computed once and fired on each run.

`LaunchTemplate` holds every launch of a chunk and output placement (kernel, sizes and
arguments) with the run's buffers left open: the planar image, the output positions and
distances. `fire` fills them in and enqueues, so a repeated run computes nothing (on a fast
host, computing the launches takes tens of microseconds, filling three slots a few).

A plan whose kernels fold the input check (`SearchPlan.fused`, lib/peak_check.mako) passes
every launch the check arguments (check buffer, word, count); a run whose input needed no
conversion has its first launch check the whole planar block (count = its elements) into
the run's check word. That launch then runs on the kernel object of that word (one per
word, plus one for launches that check nothing), so that from run to run its arguments
stay the same and none is set again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .layout import Chunk, launch_pieces

#: Argument positions of the run's buffers in every search launch (see `cl_src/match/
#: search.cl.mako`'s common arguments): the planar image, out_pos, out_dist.
PLANAR_ARG, POS_ARG, DIST_ARG = 0, 9, 10
_OPEN = None      # a run's buffer, filled in by `fire`


class LaunchTemplate:
    """The launches of one chunk: the structured variant over the lattice part of its rows
    (a row-band variant also over the grid column and row off the lattice), the naive
    kernel over the square variant's grid rows and columns off the lattice, in order. `plan` is the
    `SearchPlan`; the chunk's first grid row goes to output row `out_row0` of outputs of
    `out_rows` rows, its first frame to output frame `out_f0`."""

    def __init__(self, plan: Any, chunk: Chunk, out_rows: int, out_row0: int,
                 out_f0: int) -> None:
        self.plan, self.chunk = plan, chunk
        self.out_row0, self.out_f0 = out_row0, out_f0
        i32 = np.int32
        rows = chunk.y_hi - chunk.y_lo
        nf = chunk.f_hi - chunk.f_lo
        self.common = (_OPEN, i32(nf), i32(rows), i32(plan.cols), i32(plan.half),
                       i32(plan.temporal_window))
        self.tail = (i32(chunk.f_lo), i32(chunk.y_lo), _OPEN, _OPEN, i32(out_rows),
                     i32(len(plan.grid_x)))
        self.ref_frames = chunk.r1 - chunk.r0
        self.candidates = ((2 * plan.half + 1) ** 2) * (2 * plan.temporal_window + 1)
        # Elements of the chunk's planar block: what a checking first launch reads.
        self.count = i32(nf * plan.channels * rows * plan.cols)
        # (kernel, global size, local size, arguments) of each launch, in order.
        self.launches: list[tuple[Any, tuple[int, ...], tuple[int, ...], list[Any]]] = []
        self._plan_launches()
        # The second, third... launch of one kernel (the naive kernel's border row and
        # column) each get a kernel object of their own: their arguments differ, and each
        # object keeps what was set on it from run to run.
        uses: dict[int, int] = {}
        for i, (run, global_size, local_size, args) in enumerate(self.launches):
            uses[id(run)] = uses.get(id(run), -1) + 1
            if uses[id(run)]:
                self.launches[i] = (plan.kernel_object(run, uses[id(run)]), global_size,
                                    local_size, args)
        self.first_kernels: tuple[Any, Any] | None = None
        if plan.fused:
            check, _ = plan.uploader.check_words()
            for launch in self.launches:
                launch[3].extend((check, i32(0), i32(0)))
            first = self.launches[0][0]
            self.first_kernels = (plan.kernel_object(first, "word 0"),
                                  plan.kernel_object(first, "word 1"))
        self._words = (i32(0), i32(1))

    def fire(self, planar: Any, out_pos: Any, out_dist: Any, wait_for: list[Any] | None,
             word: int | None = None) -> list[Any]:
        """Enqueue the launches on `planar` into `out_pos`/`out_dist`, each after
        `wait_for`; with `word` (a fused plan, an input that needed no conversion), the
        first launch checks the planar block into check word `word`. Their events."""
        queue = self.plan.runtime.queue
        events = []
        for i, (run, global_size, local_size, args) in enumerate(self.launches):
            args = args.copy()
            args[PLANAR_ARG], args[POS_ARG], args[DIST_ARG] = planar, out_pos, out_dist
            if word is not None and i == 0:
                run = self.first_kernels[word]
                args[-2], args[-1] = self._words[word], self.count
            events.append(run(queue, global_size, local_size, *args, wait_for=wait_for))
        return events

    def _plan_launches(self) -> None:
        plan, chunk = self.plan, self.chunk
        gx = len(plan.grid_x)
        lattice_hi = min(chunk.g1, plan.lattice_rows)
        if plan.config.variant == "naive":
            self.naive(chunk.g0, chunk.g1, 0, gx)
            return
        if plan.config.variant != "square":
            # The row-band kernels search the border column and row themselves.
            self.structured(lattice_hi, border_row=chunk.g1 > plan.lattice_rows)
            return
        if chunk.g0 < lattice_hi:
            self.structured(lattice_hi)
        # Grid column off the lattice (x = W - p), for the lattice rows.
        if plan.lattice_cols < gx:
            self.naive(chunk.g0, lattice_hi, plan.lattice_cols, gx)
        # Grid row off the lattice (y = H - p), all columns.
        if chunk.g1 > plan.lattice_rows:
            self.naive(max(chunk.g0, plan.lattice_rows), chunk.g1, 0, gx)

    def naive(self, g_lo: int, g_hi: int, col_lo: int, col_hi: int) -> None:
        plan, chunk, i32 = self.plan, self.chunk, np.int32
        if g_lo >= g_hi or col_lo >= col_hi:
            return
        lw = plan.naive_group
        for f0, f1, r0, r1 in launch_pieces(self.ref_frames, g_hi - g_lo, col_hi - col_lo,
                                            self.candidates, plan.max_pairs):
            a, b = g_lo + r0, g_lo + r1
            ys = plan.ints(("ys", a, b, chunk.y_lo), plan.grid_y[a:b] - chunk.y_lo)
            if plan.stagger:   # every reference's column, rows a..b of the piece
                xs = plan.ints(("xs", a, b, col_lo, col_hi), plan.ref_x[a:b, col_lo:col_hi].ravel())
            else:
                xs = plan.ints(("x", col_lo, col_hi), plan.grid_x[col_lo:col_hi])
            global_size = (-(-(col_hi - col_lo) // lw) * lw, r1 - r0, f1 - f0)
            self.launches.append((plan.naive_kernel, global_size, (lw, 1, 1), [
                *self.common, i32(chunk.r0 - chunk.f_lo + f0), *self.tail,
                i32(self.out_row0 + g_lo - chunk.g0 + r0), i32(col_lo), i32(self.out_f0 + f0),
                ys, xs, i32(r1 - r0), i32(col_hi - col_lo)]))

    def structured(self, lattice_hi: int, border_row: bool = False) -> None:
        """The structured variant over the lattice rows of the chunk: the square kernel over
        the lattice columns, a row-band kernel over every grid column (the last one, at
        x = W - p, is its border column) and, with `border_row`, the grid's last row (off
        the lattice, in the chunk) as well, with the last launch of each frame range."""
        plan, chunk, i32 = self.plan, self.chunk, np.int32
        config, p = plan.config, plan.request.patch_size
        square = config.variant == "square"
        nx = plan.lattice_cols if square else len(plan.grid_x)
        lattice = max(0, lattice_hi - chunk.g0)
        pieces = (launch_pieces(self.ref_frames, lattice, nx, self.candidates, plan.max_pairs)
                  if lattice else [(0, self.ref_frames, 0, 0)])
        for f0, f1, r0, r1 in pieces:
            g = chunk.g0 + r0
            ny = r1 - r0
            border_y = -1
            if border_row and r1 == lattice:
                border_y = int(plan.grid_y[plan.lattice_rows]) - chunk.y_lo
            oy = int(plan.grid_y[g]) - chunk.y_lo if ny else border_y
            if square:
                t = config.tile
                global_size = (-(-nx // (t - 1)) * t, -(-ny // (t - 1)) * t, f1 - f0)
                local_size = (t, t, 1)
                extra: tuple[Any, ...] = ()
            else:
                shift_max = max(plan.stagger, default=0)
                per_row = (config.group - p - shift_max) // plan.request.step + 1
                global_size = (-(-nx // per_row) * config.group,
                               -(-ny // config.rows) + (border_y >= 0), f1 - f0)
                local_size = (config.group, 1, 1)
                extra = (i32(border_y),)
                if plan.stagger:   # the shifts of rows g .. g + ny - 1 and the border row's
                    rows_ = ny + (border_y >= 0)
                    extra += (plan.ints(("shifts", g, g + rows_), plan.row_shifts[g:g + rows_]),)
            self.launches.append((plan.main_kernel, global_size, local_size, [
                *self.common, i32(chunk.r0 - chunk.f_lo + f0), *self.tail,
                i32(self.out_row0 + r0), i32(0), i32(self.out_f0 + f0), i32(oy), i32(ny),
                i32(nx), *extra]))
