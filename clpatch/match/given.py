"""Matches a caller gives a filter (`matches=`): `GivenMatcher`, a matcher whose search is a
copy of them, and `check_given`, what "step-compatible" means.

A filter that takes `matches=` (`nlmeans`, `nlmeans_video`, `bm3d`) runs on any `Matches`
whose grid is the filter's: the same patch size, and reference rows and columns
`grid_positions(size, patch_size, step)` of the filter's step (the windowed search's, the
ANN's, the kNN's and the NNF's grids are all of this kind; a staggered grid is not). Their
positions are read as top-left corners of patches of the filtered input (frames too, for
video), their distances as the filter's own search would give them (sums of squared
differences over the patch and the searched channels: metric "l2"), and each reference
keeps its first k. Wherever the candidates lie, the filter reads them: every chunk of the
filter uploads whole frames, so a filter on given matches does not cut a large image
into bands that save memory. BM3D's fixed-point scales follow how far the matches lie from
their references (their spread, or the window they were searched in when wider): on the
windowed search's own matches they are that search's, and so is the result, bit for bit.

Values are checked when the matcher takes the matches (`use`): positions within the input,
distances finite, non-negative and ascending; NumPy matches on the host, device matches
by a kernel whose flag is read at once (the synchronous part of planning). The copy into
the filter's buffers clamps positions to the input, so that whatever a device buffer holds
by the time a run reads it, no kernel reads outside the image. (Device matches changed
after a call or plan took them are not checked again: BM3D's fixed-point scales follow the
spread measured when they were taken, and a plan of `clpatch.make_plan` keeps the matches
it was made with.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..core.buffers import BufferPool, int_buffer
from ..core.inflight import settle
from ..core.kernels import kernel
from ..core.upload import Uploader
from ..core.volumes import Volume, magnitude_limit
from .matches import Matches, grid_positions
from .window.layout import Chunk, WindowGeometry, upload_chunk

#: Positions index the device buffers with int: a buffer of Matches holds fewer entries.
MAX_ENTRIES = (2**31 - 1) // 3


@dataclass(frozen=True)
class GivenConfig:
    """What `explain` and the plans report as the configuration of given matches."""

    k: int
    source: str = "given"
    reason: str = "matches= given by the caller: no search"
    variant: str = "given"


def check_given(matches: Any, *, rows: int, cols: int, frames: int, patch_size: int,
                step: int, video: bool, name: str = "matches") -> Matches:
    """`matches` if it is a `Matches` a filter of this grid can use (see the module doc);
    TypeError/ValueError naming `name` and what differs otherwise. Values are not looked
    at here (`GivenMatcher.use`)."""
    if not isinstance(matches, Matches):
        raise TypeError(f"{name} must be a clpatch.Matches (from search_patches, ann_search, "
                        f"knn, nnf or a plan), got {type(matches).__name__}")
    if matches.metric != "l2":
        raise ValueError(f"{name} must hold l2 distances (sums of squared differences), "
                         f"got metric {matches.metric!r}")
    if matches.patch_size != patch_size or not _same_grid(matches, rows, cols, patch_size, step):
        raise ValueError(
            f"{name} must sit on the filter's grid: patch_size={patch_size}, step={step} on "
            f"{rows}x{cols}; got patch_size={matches.patch_size}, step={matches.step} (pass "
            f"the matches' patch_size and step to the filter, or search with the filter's)")
    dim = 3 if video else 2
    gy, gx = len(matches.grid_y), len(np.asarray(matches.grid_x))
    lead = (frames,) if video else ()
    pos_shape = (*lead, gy, gx, matches.k, dim)
    for what, array, shape, dtype in (("positions", matches.positions, pos_shape, np.int32),
                                      ("distances", matches.distances, pos_shape[:-1],
                                       np.float32)):
        if tuple(array.shape) != shape:
            raise ValueError(f"{name}.{what} must have shape {shape} for "
                             f"{'a video' if video else 'an image'} of {frames if video else 1} "
                             f"frame(s), got {tuple(array.shape)}")
        if np.dtype(array.dtype) != np.dtype(dtype):
            raise ValueError(f"{name}.{what} must be {np.dtype(dtype)}, got {array.dtype}")
    if isinstance(matches.positions, cla.Array) != isinstance(matches.distances, cla.Array):
        raise TypeError(f"{name}.positions and {name}.distances must both be NumPy or both "
                        "device arrays")
    if int(np.prod(pos_shape)) > MAX_ENTRIES:
        raise ValueError(f"{name} holds more entries than a device buffer of int32 positions "
                         f"is indexed for ({MAX_ENTRIES})")
    return matches


def _same_grid(matches: Matches, rows: int, cols: int, patch_size: int, step: int) -> bool:
    gx = np.asarray(matches.grid_x)
    if gx.ndim != 1:        # a staggered grid (a row of columns per grid row)
        return False
    return (np.array_equal(np.asarray(matches.grid_y), grid_positions(rows, patch_size, step))
            and np.array_equal(gx, grid_positions(cols, patch_size, step)))


class GivenMatcher:
    """A matcher (`clpatch.match.matcher.Matcher`) whose "search" copies given matches: the
    first `request.n` of each reference's. `use(matches)` sets (and checks) the matches the
    next runs copy; the plan that made it keeps them until the next `use`."""

    def __init__(self, runtime: Any, frames: int, rows: int, cols: int, channels: int,
                 request: Any, config: Any = None, *, video: bool = False,
                 **_search_options: Any) -> None:
        """Planned like any matcher (`make_matcher`); the windowed search's options
        (temporal_window, fused_check, ...) do not apply and are ignored."""
        self.runtime = runtime
        self.frames, self.rows, self.cols, self.channels = frames, rows, cols, channels
        self.request, self.video = request, video
        p, s = request.patch_size, request.step
        self.grid_y = grid_positions(rows, p, s)
        self.grid_x = grid_positions(cols, p, s)
        self.dim = 3 if video else 2
        # Until matches are given, candidates may lie anywhere: the reach bounds both axes
        # (BM3D's fixed-point scales count the references that can reach a pixel from it,
        # in rows and columns alike). `use` sets it from the matches (`spread`).
        self.reach = max(rows, cols) - p
        self._grid = (int_buffer(runtime.context, self.grid_y),
                      int_buffer(runtime.context, self.grid_x))
        self.stagger: tuple[int, ...] = ()
        self.ref_x = None
        self.config = GivenConfig(request.n)
        self.pool = BufferPool(runtime.context)
        self.uploader = Uploader(runtime, self.pool)
        self.geometry = WindowGeometry(frames, rows, cols, channels, p, s, rows,
                                       frames - 1, self.grid_y)
        program = runtime.programs.get("match/given.cl.mako", dim=self.dim)
        self._check, self._copy = kernel(program, "check_matches"), kernel(program,
                                                                           "copy_matches")
        self.matches: Matches | None = None
        self._src: tuple[Any, Any] | None = None

    # ---- the matches ---------------------------------------------------------------------

    def use(self, matches: Any, name: str = "matches") -> None:
        """Take `matches` (checked: `check_given`, then their values) for the next runs."""
        r = self.request
        m = check_given(matches, rows=self.rows, cols=self.cols, frames=self.frames,
                        patch_size=r.patch_size, step=r.step, video=self.video, name=name)
        if m.k < r.n:
            raise ValueError(f"{name} hold {m.k} match(es) per reference, fewer than the "
                             f"filter's k={r.n}")
        limits = (self.frames - 1, self.rows - r.patch_size, self.cols - r.patch_size)
        if isinstance(m.positions, cla.Array):
            for what, array in (("positions", m.positions), ("distances", m.distances)):
                if array.context != self.runtime.context:
                    raise ValueError(f"{name}.{what} live in another OpenCL context than the "
                                     "filter's runtime")
                if not array.flags.c_contiguous or array.offset != 0:
                    raise ValueError(f"{name}.{what} must be C-contiguous at offset 0 (a "
                                     "whole array, not a view)")
            spread = self._check_device(m, limits, name)
            src = (m.positions.base_data, m.distances.base_data)
        else:
            spread = _check_host(m, limits, self.grid_y, self.grid_x, name)
            queue = self.runtime.queue
            pos = self.pool.get("given_pos", m.positions.nbytes)
            dist = self.pool.get("given_dist", m.distances.nbytes)
            settle(queue)
            cl.enqueue_copy(queue, pos, np.ascontiguousarray(m.positions))
            cl.enqueue_copy(queue, dist, np.ascontiguousarray(m.distances))
            src = (pos, dist)
        self.matches, self._src = m, src
        # As far as a run's groups may reach: the matches' spread, or the window they claim
        # when wider (so that the windowed search's own matches give BM3D the fixed-point
        # scales of that search, and the same result).
        self.reach = max(spread, m.window // 2)

    def _check_device(self, m: Matches, limits: tuple[int, int, int], name: str) -> int:
        """Check device matches (ValueError naming `name`); returns their spread."""
        queue = self.runtime.queue
        entries = int(m.distances.size)
        flag = self.pool.get("given_flag", 8)
        host = np.zeros(2, np.uint32)
        settle(queue)
        cl.enqueue_copy(queue, flag, host)
        i32 = np.int32
        self._check(queue, (entries,), None, m.positions.base_data, m.distances.base_data,
                    i32(entries), i32(m.k), *self._grid, i32(len(self.grid_y)),
                    i32(len(self.grid_x)), *(i32(v) for v in limits), flag)
        settle(queue)
        cl.enqueue_copy(queue, host, flag)
        _raise_flags(int(host[0]), limits, name)
        return int(host[1])

    # ---- the matcher's face ----------------------------------------------------------------

    def chunk(self, r0: int, r1: int, g0: int, g1: int) -> Chunk:
        """The chunk of reference frames [r0, r1) and grid rows [g0, g1): whole frames, all
        of them (the given candidates may lie anywhere)."""
        return self.geometry.chunk(r0, r1, g0, g1)

    def upload(self, volume: Volume, chunk: Chunk, name: str = "planar", *,
               staging: str = "staging", transfers: Any = None,
               wait_for: list[Any] | None = None) -> tuple[Any, list[tuple[str, Any]]]:
        """As the windowed search's `upload` (`SearchPlan.upload`)."""
        return upload_chunk(self.pool, self.uploader, volume, chunk, name, staging=staging,
                            transfers=transfers, wait_for=wait_for)

    def enqueue_chunk(self, planar: Any, chunk: Chunk, out_pos: Any, out_dist: Any, *,
                      out_rows: int, out_row0: int = 0, out_f0: int = 0,
                      wait_for: list[Any] | None = None) -> list[Any]:
        """Copy the chunk's references' first n matches into `out_pos`/`out_dist` (laid
        out as `SearchPlan.enqueue_chunk` writes them); `planar` is not read."""
        if self._src is None or self.matches is None:
            raise RuntimeError("GivenMatcher.use(matches) must come before a run")
        m, n = self.matches, self.request.n
        nr, gy, gx = chunk.r1 - chunk.r0, chunk.g1 - chunk.g0, len(self.grid_x)
        count = nr * gy * gx * n
        i32 = np.int32
        p = self.request.patch_size
        event = self._copy(self.runtime.queue, (count,), None, *self._src, i32(m.k),
                           i32(len(self.grid_y)), i32(gx), i32(chunk.r0), i32(chunk.g0),
                           i32(nr), i32(gy), i32(n), out_pos, out_dist, i32(out_rows),
                           i32(out_row0), i32(out_f0), i32(self.frames - 1),
                           i32(self.rows - p), i32(self.cols - p), i32(count),
                           wait_for=wait_for)
        return [event]

    def check_limit(self) -> float:
        """The largest |value| the filter's float32 arithmetic on patches takes."""
        return magnitude_limit(self.request.patch_size, self.channels)


def _check_host(m: Matches, limits: tuple[int, int, int], grid_y: np.ndarray,
                grid_x: np.ndarray, name: str) -> int:
    """Check host matches (ValueError naming `name`); returns their spread: the largest
    |row| or |column| offset of a position from its reference."""
    pos = np.asarray(m.positions)
    dist = np.asarray(m.distances)
    flags = 0
    hi = np.array(limits[3 - pos.shape[-1]:])
    if pos.size and (np.any(pos < 0) or np.any(pos > hi)):
        flags |= 1
    finite = np.isfinite(dist) & (dist >= 0)
    if not np.all(finite):
        flags |= 2
    elif dist.shape[-1] > 1 and np.any(np.diff(dist, axis=-1) < 0):
        flags |= 4
    _raise_flags(flags, limits, name)
    if not pos.size:
        return 0
    dy = np.abs(pos[..., -2].astype(np.int64) - grid_y[:, None, None])
    dx = np.abs(pos[..., -1].astype(np.int64) - grid_x[None, :, None])
    return int(max(dy.max(), dx.max()))


def _raise_flags(flags: int, limits: tuple[int, int, int], name: str) -> None:
    if flags & 1:
        t, y, x = limits
        raise ValueError(f"{name}.positions must be top-left corners of patches of the input "
                         f"(rows 0..{y}, columns 0..{x}, frames 0..{t}); some lie outside")
    if flags & 2:
        raise ValueError(f"{name}.distances must be finite and non-negative")
    if flags & 4:
        raise ValueError(f"{name}.distances must be ascending along k (the Matches contract)")
