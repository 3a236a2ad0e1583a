"""VBM3D's predictive video search (Davy–Ehret §4.2; Dabov et al. 2007): `VideoSearch`.

For a reference patch in frame t: every position within window_ref // 2 of it in frame t;
in every other frame f (outward from t up to the temporal bounds) the union of the windows
of half-width window_pred // 2 around the q best positions kept in the frame next to f.
Each frame keeps its q best; the result is the n best of all kept, ordered by (distance,
t, y, x) so every variant and the NumPy oracle make the same choices. Results are Matches
(positions as (t, y, x), `cl_src/lib/matches.mako`), missing entries (-1, -1, -1) and +inf.

Variants: "naive" (one work-item per reference, §4.2.2), "window" (the search windows'
columns spread over work-items, §4.2.3), "patch" (the patch's columns spread over
work-items, partial distances summed with warp shuffles where the profile has them, else
through local memory, §4.2.4). `choose_video_search` picks one per device (§4.5).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.buffers import int_buffer
from ...core.kernels import kernel
from ...core.validate import check_choice
from ..matches import grid_positions

VIDEO_SEARCHES = ("naive", "window", "patch")


def choose_video_search(profile: Any, variant: str | None = None) -> tuple[str, str]:
    """(search variant, reason) of the video search on a device."""
    if variant is not None:
        return check_choice("variant", variant, VIDEO_SEARCHES), "forced"
    if profile.subgroup_ops == "intel":
        return "patch", ("rule: patch subdivision (4.2.4) where Intel sub-groups exist, "
                         "Davy-Ehret's choice for Intel GPUs (4.5)")
    return "window", ("rule: window subdivision (4.2.3), Davy-Ehret's choice except on Intel "
                      "GPUs (4.5); the fastest of the three on the H100 "
                      "(benchmarks/results/vbm3d_h100.md)")


def video_layout(variant: str, patch_size: int, window_ref: int,
                 window_pred: int) -> tuple[int, int]:
    """(work-items per reference, references per work-group) of a search variant."""
    if variant == "naive":
        return 1, 64
    if variant == "window":
        widest = 2 * (max(window_ref, window_pred) // 2) + 1
        lanes = 1 << (widest - 1).bit_length()
        return lanes, max(1, 64 // lanes)
    return patch_size, max(1, 64 // patch_size)


class VideoSearch:
    """The video search of one frame shape and parameter set on a runtime: its reference
    grid, its built kernel, and `enqueue` for one reference frame of a ring of frames."""

    def __init__(self, runtime: Any, rows: int, cols: int, channels: int, *, patch_size: int,
                 step: int, window_ref: int, window_pred: int, q: int, n: int,
                 variant: str) -> None:
        self.runtime = runtime
        self.rows, self.cols, self.n = rows, cols, n
        self.variant = check_choice("variant", variant, VIDEO_SEARCHES)
        self.grid_y = grid_positions(rows, patch_size, step)
        self.grid_x = grid_positions(cols, patch_size, step)
        self.dim = 3
        self.lanes, self.group = video_layout(variant, patch_size, window_ref, window_pred)
        if variant == "naive":
            self.group = max(1, min(int(runtime.profile.naive_group_size), 256))
        program = runtime.programs.get(
            "match/video_search.cl.mako", variant=variant, patch=patch_size, n=n, q=q,
            window_ref=window_ref, window_pred=window_pred, channels=channels,
            lanes=self.lanes, group=self.group)
        self.kernel = kernel(program, "vbm3d_search")
        self.ys = int_buffer(runtime.context, self.grid_y)
        self.xs = int_buffer(runtime.context, self.grid_x)

    def sizes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(global, local) sizes: naive (columns, rows); the others (lanes, columns, rows),
        each work-group `group` references of `lanes` work-items."""
        gy, gx = len(self.grid_y), len(self.grid_x)
        if self.variant == "naive":
            local = self.group
            return (-(-gx // local) * local, gy), (local, 1)
        return ((self.lanes, -(-gx // self.group) * self.group, gy), (self.lanes, self.group, 1))

    def enqueue(self, frames: Any, slots: int, t: int, t_lo: int, t_hi: int, out_pos: Any,
                out_dist: Any, *, wait_for: list[Any] | None = None) -> Any:
        """Search the references of frame t among frames [t_lo, t_hi] of `frames`, a ring
        of `slots` planar frames (frame f in slot f mod slots, the search reads plane 0 of
        each), into the Matches buffers `out_pos`/`out_dist`; returns the event."""
        i32 = np.int32
        global_size, local_size = self.sizes()
        return self.kernel(self.runtime.queue, global_size, local_size, frames, i32(slots),
                           i32(self.rows), i32(self.cols), i32(0), i32(t), i32(t_lo), i32(t_hi),
                           self.ys, self.xs, i32(len(self.grid_y)), i32(len(self.grid_x)),
                           out_pos, out_dist, wait_for=wait_for)
