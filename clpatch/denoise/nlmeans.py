"""Improved patchwise NL-means (Davy–Ehret §2.1, §4.3): `nlmeans`, `nlmeans_video`, `NLMeansPlan`.

For every reference patch on the grid of `step` (the search's grid, borders included):

1. the `n` nearest patches in the search window (`clpatch.search`, exact);
2. weights ``w = exp(-max(d / (p² · Cs) − 2σ², 0) / h²)`` (eq. 4), ``d`` the sum of squared
   differences over the patch and its ``Cs`` searched channels — ``d / (p² · Cs)`` is the mean
   squared difference per pixel, so ``h`` and ``σ`` are in image units (default ``h = σ``);
3. flat-patch trick (eq. 5), per channel: when the variance of all pixels of the n patches is
   below ``flat_beta · σ²``, the estimate is their mean; otherwise the weighted average of the
   n patches, normalised by the sum of the weights;
4. the whole estimated patch is aggregated with bilinear weights ``bw(i) · bw(j)``,
   ``bw(i) = (2 · min(i, p − 1 − i) + 1) / p``, and every pixel is divided by its total weight.
   Every reference is aggregated once with the same weights, so a pixel's total weight is
   known in advance and separable (rows × columns); no weight buffer is accumulated.

Colour ``(H, W, 3)`` is filtered in an orthonormal opponent colour space (noise keeps its σ in
every channel); the search uses the luminance (default) or all three channels, and all
channels share the weights. Other channel counts (2, 4…8) are filtered as they are, searched
on all channels.

Aggregation (accumulation of overlapping estimates):

- ``"buffers"``: no atomics (§4.3.5); references are split into ``K × K`` classes,
  ``K = ceil(p / step)``, whose patches never overlap, each class in its own buffer. Needs
  ``step ≥ p / 2`` (K ≤ 2; the paper's p = 8, step = 4). Deterministic.
- ``"fixed"``: 64-bit integer atomics on fixed-point values: bit-for-bit deterministic.
  Needs ``cl_khr_int64_base_atomics``.
- ``"cas"``: float atomics emulated with compare-and-swap (Algorithm 5): any device; the last
  bits depend on the order of additions.

Default: ``"buffers"`` where it applies, else ``"fixed"`` where the device has 64-bit atomics,
else ``"cas"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..core.buffers import BufferPool, halve_until_fits, memory_limits
from ..core.kernels import max_group_size
from ..core.runtime import Runtime, resolve_runtime
from ..core.upload import check_peak
from ..core.validate import check_choice, check_float, check_int
from ..core.volumes import Volume, as_volume, channels_last, check_planned, magnitude_limit
from ..match.matches import usable_n
from ..match.window import SearchPlan
from ..match.window_config import SearchConfig, SearchRequest, choose_search
from ..match.window_params import MAX_PATCH, MAX_TEMPORAL_WINDOW, check_fits, check_search_request
from .nlm_aggregation import AGGREGATIONS, bilinear_weights, buffer_classes, choose_aggregation, coverage

__all__ = ["AGGREGATIONS", "NLMeansPlan", "bilinear_weights", "choose_aggregation", "coverage",
           "nlmeans", "nlmeans_video"]

AVERAGINGS = ("columns", "naive")
SEARCH_CHANNELS = ("luminance", "all")
MAX_CHANNELS = 8
# Work-items per work-group of the columns averaging kernel (p per patch).
COLUMNS_GROUP = 64
# Reference frames per tile of a video: device memory is bounded by this, not by T.
VIDEO_FRAMES_PER_TILE = 8
#: NL-means plans kept per runtime (least recently used dropped first).
PLANS_KEPT = 8


@dataclass(frozen=True)
class _Tile:
    """Reference frames [r0, r1) and output rows [a, b), with the search chunk they need."""

    r0: int
    r1: int
    a: int
    b: int
    chunk: Any


class NLMeansPlan:
    """A compiled NL-means for one input shape and parameter set, reusable across calls.

    `run(image, sigma, h=None, flat_beta=1.05)` denoises one image or video of the planned
    shape. Inputs larger than the device's memory are processed in overlapping tiles: a
    tile of output rows searches and averages every reference patch that touches them, so
    each output pixel gathers exactly the contributions of an untiled run, in the same
    order. Videos are processed a few reference frames at a time (a stream), so device
    memory does not grow with the number of frames. `last_events` holds the (stage,
    event) pairs of the last run: convert, transform, search, clear, average, finalize.
    """

    def __init__(self, runtime: Runtime, frames: int, rows: int, cols: int, channels: int, *,
                 patch_size: int = 8, step: int = 4, window: int = 21, n: int = 16,
                 temporal_window: int = 0, video: bool = False,
                 search_channels: str = "luminance", aggregation: str | None = None,
                 averaging: str | None = None, variant: str | SearchConfig | None = None,
                 device_output: bool = False, tile_bytes: int | None = None) -> None:
        if search_channels not in SEARCH_CHANNELS:
            raise ValueError(f"search_channels must be one of {SEARCH_CHANNELS}, got {search_channels!r}")
        if averaging is not None and averaging not in AVERAGINGS:
            raise ValueError(f"averaging must be one of {AVERAGINGS} or None, got {averaging!r}")
        if not 1 <= channels <= MAX_CHANNELS:
            raise ValueError(f"NL-means filters 1 to {MAX_CHANNELS} channels, got {channels}")
        if step > patch_size:
            raise ValueError(f"step must be at most patch_size (pixels between patches would "
                             f"get no estimate), got step={step}, patch_size={patch_size}")
        self.runtime = runtime
        self.frames, self.rows, self.cols, self.channels = frames, rows, cols, channels
        self.video = video
        self.device_output = device_output
        self.colour = channels == 3
        self.luma = self.colour and search_channels == "luminance"
        search_c = 1 if self.luma else channels
        self.patch_size, self.step, self.temporal_window = patch_size, step, temporal_window
        request = SearchRequest(patch_size, step, n, window, search_c, "l2", video)
        config = choose_search(request, runtime.profile, variant, runtime.tuning)
        self.search = SearchPlan(runtime, frames, rows, cols, search_c, request, config,
                                 temporal_window=temporal_window, video=video)
        self.n = n
        self.aggregation, self.aggregation_reason = choose_aggregation(
            patch_size, step, runtime.profile, aggregation)
        self.classes = buffer_classes(patch_size, step) if self.aggregation == "buffers" else 1
        self.averaging = averaging or "columns"
        self.grid_y, self.grid_x = self.search.grid_y, self.search.grid_x
        self.lattice_rows, self.lattice_cols = self.search.lattice_rows, self.search.lattice_cols
        self._build()
        cover_y = coverage(rows, patch_size, self.grid_y).astype(np.float32)
        cover_x = coverage(cols, patch_size, self.grid_x).astype(np.float32)
        ctx = runtime.context
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        self._cover_y = cl.Buffer(ctx, flags, hostbuf=cover_y)
        self._cover_x = cl.Buffer(ctx, flags, hostbuf=cover_x)
        self._xs = cl.Buffer(ctx, flags, hostbuf=self.grid_x.astype(np.int32))
        self._pool = BufferPool(runtime.context)
        self._ys: dict[tuple[int, int], Any] = {}
        self.tiles = self._plan_tiles(tile_bytes)
        self.last_events: list[tuple[str, Any]] = []

    # ---- kernels -------------------------------------------------------------------------

    @property
    def config(self) -> SearchConfig:
        """The search configuration in use."""
        return self.search.config

    def _build(self) -> None:
        p = self.patch_size
        device = self.runtime.device
        slots = max(1, COLUMNS_GROUP // p)
        while True:
            params = dict(patch=p, n=self.n, channels=self.channels, video=self.video,
                          averaging=self.averaging, aggregation=self.aggregation,
                          classes=self.classes, slots=slots if self.averaging == "columns" else 1,
                          colour=self.colour, luma=self.luma)
            program = self.runtime.programs.get("denoise/nlmeans.cl.mako", **params)
            average = cl.Kernel(program, "nlm_average")
            allowed = max_group_size(average, device)
            if self.averaging == "naive" or p * slots <= allowed:
                break
            if slots == 1:  # not even one patch per group: one work-item per patch
                self.averaging = "naive"
            slots = max(1, slots // 2)
        self.slots = slots if self.averaging == "columns" else 1
        self._average = average
        self._naive_group = max(1, min(self.runtime.profile.naive_group_size, allowed))
        self._finalize = cl.Kernel(program, "nlm_finalize")
        self._clear = cl.Kernel(program, "nlm_clear")
        self._opponent = cl.Kernel(program, "nlm_to_opponent") if self.colour else None

    # ---- memory plan -----------------------------------------------------------------------

    def _tile_for(self, r0: int, r1: int, a: int, b: int) -> _Tile:
        p = self.patch_size
        g0 = int(np.searchsorted(self.grid_y + p, a, side="right"))
        g1 = int(np.searchsorted(self.grid_y, b, side="left"))
        return _Tile(r0, r1, a, b, self.search.chunk(r0, r1, g0, g1))

    def _tile_bytes(self, tile: _Tile) -> tuple[int, int]:
        """(largest buffer, all buffers) in bytes of one tile."""
        c = tile.chunk
        nf, hb, w, ch = c.f_hi - c.f_lo, c.y_hi - c.y_lo, self.cols, self.channels
        nr = tile.r1 - tile.r0
        refs = nr * (c.g1 - c.g0) * len(self.grid_x)
        acc_item = {"buffers": 4 * self.classes ** 2, "fixed": 8, "cas": 4}[self.aggregation]
        sizes = [nf * ch * hb * w * 4,                       # planar band
                 nf * ch * hb * w * 8,                       # host staging (up to 8-byte items)
                 nf * hb * w * 4 if self.luma else 0,        # luminance band
                 refs * self.n * 4 * (self.search.dim + 1),  # positions and distances
                 nr * ch * hb * w * acc_item,                # accumulators
                 0 if self.device_output else nr * (tile.b - tile.a) * w * ch * 4]
        return max(sizes), sum(sizes)

    def _plan_tiles(self, tile_bytes: int | None) -> list[_Tile]:
        largest, total = memory_limits(self.runtime, tile_bytes)
        frames_per_tile = self.frames
        if self.video:
            frames_per_tile = min(self.frames, max(VIDEO_FRAMES_PER_TILE, 2 * self.temporal_window + 1))
        rows_per_tile = self.rows

        def tiles(fc: int, rc: int) -> list[_Tile]:
            return [self._tile_for(r0, min(self.frames, r0 + fc), a, min(self.rows, a + rc))
                    for r0 in range(0, self.frames, fc) for a in range(0, self.rows, rc)]

        def fits(fc: int, rc: int) -> bool:
            return all(big <= largest and whole <= total
                       for big, whole in map(self._tile_bytes, tiles(fc, rc)))

        return tiles(*halve_until_fits(
            fits, frames_per_tile, rows_per_tile,
            f"one image row of this input does not fit the device's memory "
            f"({largest} bytes per buffer); reduce the image width, window or n"))

    def _buffer(self, name: str, nbytes: int) -> Any:
        return self._pool.get(name, nbytes)

    # ---- running ---------------------------------------------------------------------------

    def _fixed_scale(self, peak: float) -> float:
        """Fixed-point scale: a power of two keeping every pixel's sum within int64, given
        the input's peak |value|."""
        peak *= math.sqrt(3.0) if self.colour else 1.0
        k = buffer_classes(self.patch_size, self.step) + 1
        bound = max(peak * k * k, 1e-30)
        return float(2.0 ** min(40, math.floor(math.log2(2.0 ** 62 / bound))))

    def _check_peak(self, peak: float) -> None:
        check_peak(peak, magnitude_limit(self.patch_size, self.channels))
        limit = magnitude_limit(self.patch_size, self.channels) / math.sqrt(3.0)
        if self.colour and peak > limit:
            raise ValueError(f"colour image values must satisfy |x| <= {limit:.3g}")

    def run(self, image: Any, sigma: float, *, h: float | None = None,
            flat_beta: float = 1.05) -> Any:
        """Denoise `image` (the planned shape): float32, same shape, NumPy or device array
        like the input."""
        sigma = check_float("sigma", sigma)
        h = sigma if h is None else check_float("h", h)
        flat_beta = check_float("flat_beta", flat_beta)
        volume = as_volume(image, video=self.video)
        check_planned(volume, (self.frames, self.rows, self.cols, self.channels),
                      self.device_output, self.runtime.context)
        # Values are checked by the conversion kernel. The fixed-point scale and the colour
        # bound need the peak |value| before averaging: then a single tile's upload is kept,
        # and a tiled input is converted tile by tile once up front to measure it.
        uploader = self.search.uploader
        uploader.begin()
        events: list[tuple[str, Any]] = []
        first = None
        peak_first = self.colour or self.aggregation == "fixed"
        scale = 1.0
        if peak_first:
            if len(self.tiles) == 1:
                first = self.search.upload(volume, self.tiles[0].chunk)
            else:
                for tile in self.tiles:
                    self.search.upload(volume, tile.chunk, "peak")
            peak = uploader.peak()
            self._check_peak(peak)
            if self.aggregation == "fixed":
                scale = self._fixed_scale(peak)
        queue = self.runtime.queue
        scalars = (np.float32(2.0 * sigma * sigma), np.float32(1.0 / (h * h)),
                   np.float32(flat_beta * sigma * sigma),
                   np.float32(1.0 / (self.patch_size ** 2 * self.search.channels)),
                   np.float32(scale))
        shape = tuple(image.shape)
        if self.device_output:
            output = cla.empty(queue, shape, np.float32)
        else:
            output = np.empty(shape, np.float32)
        for i, tile in enumerate(self.tiles):
            self._run_tile(volume, tile, scalars, output, events, first if i == 0 else None)
        self.last_events = events
        if not peak_first:
            self._check_peak(uploader.peak())
        return output

    def _run_tile(self, volume: Volume, tile: _Tile, scalars: tuple, output: Any,
                  events: list[tuple[str, Any]], uploaded: tuple[Any, list] | None) -> None:
        queue = self.runtime.queue
        i32 = np.int32
        chunk = tile.chunk
        nf, hb, w, ch = chunk.f_hi - chunk.f_lo, chunk.y_hi - chunk.y_lo, self.cols, self.channels
        nr = tile.r1 - tile.r0
        gy, gx, n, dim = chunk.g1 - chunk.g0, len(self.grid_x), self.n, self.search.dim

        search = self.search
        planar, uploads = uploaded if uploaded is not None else search.upload(volume, chunk)
        events.extend(uploads)
        searched = planar
        if self.colour:
            lum = self._buffer("lum", nf * hb * w * 4) if self.luma else planar
            events.append(("transform", self._opponent(
                queue, (w, hb, nf), None, planar, i32(nf), i32(hb), i32(w), lum)))
            searched = lum if self.luma else planar

        pos = self._buffer("pos", nr * gy * gx * n * dim * 4)
        dist = self._buffer("dist", nr * gy * gx * n * 4)
        events.extend(("search", e) for e in search.enqueue(searched, chunk, pos, dist,
                                                             out_rows=gy))

        plane = nr * ch * hb * w
        item = 8 if self.aggregation == "fixed" else 4
        acc = self._buffer("acc", plane * self.classes ** 2 * item)
        count = plane * self.classes ** 2
        events.append(("clear", self._clear(queue, (count,), None, acc,
                                            i32(count))))
        ys = self._ys.get((chunk.g0, chunk.g1))
        if ys is None:
            ys = self._ys[(chunk.g0, chunk.g1)] = cl.Buffer(
                self.runtime.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                hostbuf=self.grid_y[chunk.g0:chunk.g1].astype(np.int32))

        head = (planar, i32(nf), i32(hb), i32(w), i32(chunk.f_lo), i32(chunk.y_lo), pos, dist,
                i32(gy), i32(gx), ys, self._xs)
        ref_fb = tile.r0 - chunk.f_lo
        tail = (i32(nr), i32(ref_fb), i32(chunk.g0))

        def average(i0: int, si: int, na: int, j0: int, sj: int, nb: int, cls: int) -> None:
            if na <= 0 or nb <= 0:
                return
            if self.averaging == "columns":
                r = self.slots
                global_size = (self.patch_size, -(-nb // r) * r, na * nr)
                local_size = (self.patch_size, r, 1)
            else:
                g = self._naive_group
                global_size = (-(-nb // g) * g, na, nr)
                local_size = (g, 1, 1)
            events.append(("average", self._average(
                queue, global_size, local_size, *head, i32(i0), i32(si), i32(na), i32(j0),
                i32(sj), i32(nb), *tail, i32(cls), acc, i32(plane), *scalars)))

        if self.aggregation != "buffers":
            average(0, 1, gy, 0, 1, gx, 0)
        else:
            self._average_classes(average, chunk.g0, chunk.g1)

        if self.device_output:
            out, out_rows, out_y0, out_f0 = output.data, self.rows, tile.a, tile.r0
        else:
            out = self._buffer("out", nr * (tile.b - tile.a) * w * ch * 4)
            out_rows, out_y0, out_f0 = tile.b - tile.a, 0, 0
        rows = tile.b - tile.a
        scale = float(scalars[-1])
        events.append(("finalize", self._finalize(
            queue, (w, rows, nr), None, acc, i32(plane), i32(hb), i32(w), i32(chunk.y_lo),
            i32(tile.a - chunk.y_lo), i32(rows), i32(nr), self._cover_y, self._cover_x,
            np.float32(1.0 / scale), out, i32(out_rows), i32(out_y0), i32(out_f0))))
        if not self.device_output:
            staged = np.empty((nr, rows, w, ch), np.float32)
            cl.enqueue_copy(queue, staged, out)
            view = output if self.video else output[None]
            view[tile.r0:tile.r1, tile.a:tile.b] = staged.reshape(view[tile.r0:tile.r1, tile.a:tile.b].shape)

    def _average_classes(self, average: Any, g0: int, g1: int) -> None:
        """The atomic-free launches: lattice references by class into K × K buffers, then the
        references off the lattice (last row / column) in launches of non-overlapping
        patches, added to buffer 0 after the lattice (launches of a queue run in order)."""
        k = self.classes
        lat_hi = min(g1, self.lattice_rows)
        lat_rows = max(0, lat_hi - g0)
        lat_cols = self.lattice_cols
        gx = len(self.grid_x)
        average(0, 1, lat_rows, 0, 1, lat_cols, -1)
        if lat_cols < gx:  # last grid column, off the lattice: rows of one class at a time
            for c in range(k):
                first = (-(g0 - c)) % k  # first tile row whose grid row ≡ c (mod k)
                average(first, k, -(-(lat_rows - first) // k), lat_cols, 1, 1, 0)
        if g1 > self.lattice_rows:  # last grid row, off the lattice
            row = self.lattice_rows - g0
            for c in range(k):
                average(row, 1, 1, c, k, -(-(lat_cols - c) // k), 0)
            if lat_cols < gx:
                average(row, 1, 1, lat_cols, 1, 1, 0)


# ---- public functions -----------------------------------------------------------------------

def _denoise(image: Any, sigma: float, *, video: bool, patch_size: int, step: int, window: int,
             n: int, temporal_window: int, h: float | None, flat_beta: float,
             aggregation: str | None, channel_axis: int | None, search_channels: str,
             variant: str | SearchConfig | None, averaging: str | None,
             runtime: Runtime | None) -> Any:
    check_float("sigma", sigma)
    if h is not None:
        check_float("h", h)
    check_float("flat_beta", flat_beta)
    check_choice("search_channels", search_channels, SEARCH_CHANNELS)
    check_choice("averaging", averaging, AVERAGINGS, allow_none=True)
    image, restore = channels_last(image, channel_axis, video)
    volume = as_volume(image, video=video)
    p = check_int("patch_size", patch_size, 1, MAX_PATCH)
    request = check_search_request(patch_size=p, step=step, n=n, window=window,
                                   channels=volume.channels, video=video, max_step=p)
    tw = check_int("temporal_window", temporal_window, 0, MAX_TEMPORAL_WINDOW)
    available = check_fits(request, volume.frames, volume.rows, volume.cols, tw)
    k = usable_n(request.n, available)
    rt = resolve_runtime(runtime, image)
    key = ("nlmeans", volume.frames, volume.rows, volume.cols, volume.channels, video,
           volume.on_device, p, request.step, request.window, k, tw, aggregation,
           search_channels, variant, averaging)
    plan = rt.plan_cache().plan(key, lambda: NLMeansPlan(
        rt, volume.frames, volume.rows, volume.cols, volume.channels, patch_size=p,
        step=request.step, window=request.window, n=k, temporal_window=tw, video=video,
        search_channels=search_channels, aggregation=aggregation, averaging=averaging,
        variant=variant, device_output=volume.on_device), PLANS_KEPT)
    return restore(plan.run(image, sigma, h=h, flat_beta=flat_beta))


def nlmeans(image: Any, sigma: float, *, patch_size: int = 8, step: int = 4, window: int = 21,
            n: int = 16, h: float | None = None, flat_beta: float = 1.05,
            aggregation: str | None = None, channel_axis: int | None = None,
            search_channels: str = "luminance", variant: str | SearchConfig | None = None,
            averaging: str | None = None, runtime: Runtime | None = None) -> Any:
    """Denoise an image with the improved patchwise NL-means (Davy–Ehret Algorithm 1).

    image: (H, W) grayscale or (H, W, C) with C ≤ 8 channels (C = 3 is colour: filtered in an
           opponent colour space), any real dtype, NumPy or pyopencl array.
    sigma: standard deviation of the noise, in the image's units (20 for a 0–255 image).
    patch_size, step: patch side p and reference grid step (1 ≤ step ≤ p).
    window, n: search window side and number of nearest patches averaged (n is capped at
           the candidates a corner reference has, for tiny images).
    h: weight bandwidth in image units (default sigma); flat_beta: β of the flat-patch test.
    aggregation: None (device's best), "buffers", "fixed" or "cas" (see the module doc).
    channel_axis: where the channels are (like scikit-image); None means last for 3-D input.
    search_channels: "luminance" (colour only: search on the opponent luminance) or "all".
    variant: the search variant (None: scheduler), averaging: "columns" (default) or "naive".
    Returns float32 of the input's shape, NumPy for NumPy input, device array for device input.
    """
    return _denoise(image, sigma, video=False, patch_size=patch_size, step=step, window=window,
                    n=n, temporal_window=0, h=h, flat_beta=flat_beta, aggregation=aggregation,
                    channel_axis=channel_axis, search_channels=search_channels, variant=variant,
                    averaging=averaging, runtime=runtime)


def nlmeans_video(frames: Any, sigma: float, *, temporal_window: int = 4, patch_size: int = 16,
                  step: int = 8, window: int = 21, n: int = 16, h: float | None = None,
                  flat_beta: float = 1.05, aggregation: str | None = None,
                  channel_axis: int | None = None, search_channels: str = "luminance",
                  variant: str | SearchConfig | None = None, averaging: str | None = None,
                  runtime: Runtime | None = None) -> Any:
    """Video NL-means: the search spans frames t − temporal_window … t + temporal_window
    (the paper's video NL-means, Table 11: 4 past and 4 future frames, 16 × 16 patches).

    frames: (T, H, W) or (T, H, W, C). Frames are processed a few at a time, so device
    memory does not grow with T. Other arguments as in `nlmeans`.
    """
    return _denoise(frames, sigma, video=True, patch_size=patch_size, step=step, window=window,
                    n=n, temporal_window=temporal_window, h=h, flat_beta=flat_beta,
                    aggregation=aggregation, channel_axis=channel_axis,
                    search_channels=search_channels, variant=variant, averaging=averaging,
                    runtime=runtime)
