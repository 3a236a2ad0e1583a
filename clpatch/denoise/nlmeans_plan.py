"""`NLMeansPlan`: the compiled NL-means (search, averaging, aggregation) for one input shape
and parameter set; `clpatch.denoise.nlmeans` has the method's description and the public
functions, `clpatch.denoise.nlmeans_tiles` the memory plan, `clpatch.denoise.nlmeans_guide`
the guide image."""


from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl

from ..core.buffers import int_buffer
from ..core.kernels import kernel, max_group_size
from ..core.plans import Plan, check_out
from ..core.runtime import Runtime
from ..core.staging import download
from ..core.transfer import Transfers
from ..core.upload import needs_conversion
from ..core.validate import check_choice
from ..core.volumes import Volume, as_volume, check_planned
from ..match.matcher import make_matcher
from ..match.matches import lattice_count
from ..match.window.config import SearchConfig, SearchRequest, choose_search
from .nlm_aggregation import (
    average_classes,
    buffer_classes,
    check_nlm_peak,
    choose_aggregation,
    coverage,
    fixed_bound_factor,
)
from .nlmeans_guide import GuideUpload, check_guide_sigma_use
from .nlmeans_tiles import PIPELINE_BYTES, Tile, reference_frames, run_tiles
from .peaks import peak_judge
from .strength import Strength

__all__ = ["NLMeansPlan"]

AVERAGINGS = ("columns", "naive")
SEARCH_CHANNELS = ("luminance", "all")
MAX_CHANNELS = 8
# Work-items per work-group of the columns averaging kernel (p per patch).
COLUMNS_GROUP = 64


class NLMeansPlan(Plan):
    """A compiled NL-means for one input shape and parameter set, reusable across calls (a
    `clpatch.core.plans.Plan`: `clpatch.make_plan("nlmeans", ...)` makes one, its filter
    strength fixed in `strength`).

    `run(image, sigma, h=None, flat_beta=1.05, guide=None, guide_sigma=None)` denoises one
    image or video of the planned shape, searching on `guide` when given (see
    `clpatch.denoise.nlmeans_guide`; any plan takes a guide or none). Inputs larger than
    the device's memory are processed in overlapping tiles: a tile of output rows searches
    and averages every reference patch that touches them, so each output pixel gathers
    exactly the contributions of an untiled run, in the same order. Videos are processed a
    few reference frames at a time (a stream), so device memory does not grow with the
    number of frames. `last_events` holds the (stage, event) pairs of the last run:
    convert, scale, transform, search, clear, average, finalize ("guide upload", "guide convert"
    for a guide).
    """

    method = "nlmeans"
    input_names = ("image", "guide")

    def __init__(self, runtime: Runtime, frames: int, rows: int, cols: int, channels: int, *,
                 patch_size: int = 8, step: int = 4, window: int = 21, n: int = 16,
                 temporal_window: int = 0, video: bool = False,
                 search_channels: str = "luminance", aggregation: str | None = None,
                 averaging: str | None = None, variant: str | SearchConfig | None = None,
                 device_output: bool = False, tile_bytes: int | None = None,
                 search: str = "window", reference: int | None = None,
                 search_options: dict[str, Any] | None = None) -> None:
        """`reference` (video only): denoise that frame alone, searching every frame the
        matcher offers (a burst); the output is one frame. `search_options` go to the
        matcher's factory (`clpatch.match.matcher.make_matcher`)."""
        check_choice("search_channels", search_channels, SEARCH_CHANNELS)
        check_choice("averaging", averaging, AVERAGINGS, allow_none=True)
        if not 1 <= channels <= MAX_CHANNELS:
            raise ValueError(f"image must have 1 to {MAX_CHANNELS} channels for NL-means, "
                             f"got {channels}")
        if step > patch_size:
            raise ValueError(f"step must be at most patch_size (pixels between patches would "
                             f"get no estimate), got step={step}, patch_size={patch_size}")
        super().__init__(runtime)
        #: The filter strength of `enqueue` (`clpatch.make_plan` sets it).
        self.strength: Strength | None = None
        self.frames, self.rows, self.cols, self.channels = frames, rows, cols, channels
        self.video = video
        self.device_output = device_output
        self.colour = channels == 3
        self.luma = self.colour and search_channels == "luminance"
        search_c = 1 if self.luma else channels
        self.patch_size, self.step, self.temporal_window = patch_size, step, temporal_window
        request = SearchRequest(patch_size, step, n, window, search_c, "l2", video)
        # (size: the rules fit the square search's tile to a small image, to fill the device)
        config = choose_search(request, runtime.profile, variant, runtime.tuning,
                               size=None if video else (rows, cols))
        if reference is not None and not (video and 0 <= reference < frames):
            raise ValueError(f"reference must be a frame index in [0, {frames}) of a video, "
                             f"got {reference}")
        self.reference = reference
        options = dict(search_options or {})
        if search == "window" and search_c == 1 and not video:
            # A planar float32 device image is searched as it is, its check folded into
            # the search (`SearchPlan.fused`, see `apply`).
            options.setdefault("fused_check", True)
        self.search = make_matcher(search, runtime, frames, rows, cols, search_c, request,
                                   config, temporal_window=temporal_window, video=video,
                                   **options)
        self.uploader = self.search.uploader        # the run's check is the search's
        self.n = n
        self.aggregation, self.aggregation_reason = choose_aggregation(
            patch_size, step, runtime.profile, aggregation)
        self.classes = buffer_classes(patch_size, step) if self.aggregation == "buffers" else 1
        self.averaging = averaging or "columns"
        self.grid_y, self.grid_x = self.search.grid_y, self.search.grid_x
        # The lattice part of the grid (the last row / column may sit off it).
        self.lattice_rows = lattice_count(rows, patch_size, step)[0]
        self.lattice_cols = lattice_count(cols, patch_size, step)[0]
        self.searched_channels = search_c
        self._build()
        cover_y = coverage(rows, patch_size, self.grid_y).astype(np.float32)
        cover_x = coverage(cols, patch_size, self.grid_x).astype(np.float32)
        ctx = runtime.context
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        self._cover_y = cl.Buffer(ctx, flags, hostbuf=cover_y)
        self._cover_x = cl.Buffer(ctx, flags, hostbuf=cover_x)
        self._xs = cl.Buffer(ctx, flags, hostbuf=self.grid_x.astype(np.int32))
        # The fixed-point scale and its inverse, written by nlm_scale each run ("fixed").
        self._scales = self.pool.get("scales", 8)
        self._ys: dict[tuple[int, int], Any] = {}
        # Pipelined: a NumPy image large enough, gray, and not "fixed" (whose scale needs all
        # of a tiled image's values converted before the first tile is averaged).
        large = not device_output and rows * cols * channels * 4 >= PIPELINE_BYTES
        self.pipelined = large and not video and not self.colour and self.aggregation != "fixed"
        # Large NumPy images move through pinned memory on transfer queues, pipelined or not
        # (a pageable copy is synchronous for the host, and copies of several runtimes in one
        # process, clpatch.dask's lanes, waited for each other).
        self.transfers = Transfers(runtime) if large else None
        self._downloads: dict[int, Any] = {}
        #: (buffer, elements) that the last finalize left zeroed ("acc", see `_run_tile`).
        self._zeroed: tuple[Any, int] = (None, 0)
        self.tile_bytes = tile_bytes
        self.tiles = run_tiles(self, False)
        self._guided_tiles: list[Tile] | None = None
        self._guide = GuideUpload(runtime, self.pool)

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
            average = kernel(program, "nlm_average")
            allowed = max_group_size(average, device)
            if self.averaging == "naive" or p * slots <= allowed:
                break
            if slots == 1:  # not even one patch per group: one work-item per patch
                self.averaging = "naive"
            slots = max(1, slots // 2)
        self.slots = slots if self.averaging == "columns" else 1
        self._average = average
        self._naive_group = max(1, min(self.runtime.profile.naive_group_size, allowed))
        self._finalize = kernel(program, "nlm_finalize")
        self._clear = kernel(program, "nlm_clear")
        # One per check word of the uploader (its word alternates between runs), so that a
        # run's arguments repeat the previous use's and none is set again.
        self._scale = [kernel(program, "nlm_scale") for _ in range(2)]
        self._opponent = kernel(program, "nlm_to_opponent") if self.colour else None

    # ---- memory plan (`clpatch.denoise.nlmeans_tiles`) --------------------------------------

    def tiles_for(self, guided: bool) -> list[Tile]:
        """The tiles of a run without or with a guide (whose block takes memory too)."""
        if not guided:
            return self.tiles
        if self._guided_tiles is None:
            self._guided_tiles = run_tiles(self, True)
        return self._guided_tiles

    def _buffer(self, name: str, nbytes: int) -> Any:
        return self.pool.get(name, nbytes)

    # ---- running ---------------------------------------------------------------------------

    def _enqueue_scale(self, given: float | None) -> Any:
        """Queue nlm_scale: the fixed-point scale of this run into `_scales`, from
        the peak `given` or, when None, from the run's check word (after the conversions
        queued so far). Returns its event."""
        check, word = self.search.uploader.check_words()
        factor = fixed_bound_factor(self.patch_size, self.step, self.colour)
        return self._scale[word](
            self.runtime.queue, (1,), None, check, np.int32(word),
            np.float32(-1.0 if given is None else given), factor, self._scales)

    def _check_peak(self, peak: float, name: str = "image") -> None:
        check_nlm_peak(peak, self.patch_size, self.channels, self.colour, name)

    def run(self, image: Any, sigma: float, *, h: float | None = None,
            flat_beta: float = 1.05, guide: Any = None,
            guide_sigma: float | None = None) -> Any:
        """Denoise `image` (the planned shape): float32, same shape, NumPy or device array
        like the input. `guide` (the image's shape, channels last, NumPy or device array):
        search and weigh on it instead (`clpatch.denoise.nlmeans_guide`); `guide_sigma`:
        its noise level (None: sigma; only with a guide)."""
        return self.apply(image, Strength.check(sigma, h=h, flat_beta=flat_beta,
                                                guide_sigma=guide_sigma), guide=guide)

    def apply(self, image: Any, strength: Strength, *, guide: Any = None) -> Any:
        """`run` with the strength arguments checked already (`Strength.check`)."""
        check_guide_sigma_use(guide, strength)
        volume = as_volume(image, video=self.video)
        check_planned(volume, (self.frames, self.rows, self.cols, self.channels),
                      self.device_output, self.runtime.context)
        guided = None if guide is None else self._guide.check(guide, volume)
        output = self._launch(volume, strength, guided, None)
        measured = self.search.uploader.peak()
        self._judge(strength.peak)(measured)
        if guided is not None:
            self._check_peak(self._guide.peak(), "guide")
        return output

    def enqueue_arrays(self, image: Any, guide: Any = None, *, out: Any,
                       wait_for: list[Any] | None) -> tuple[Any, list[Any]]:
        """The plan's `enqueue` (`clpatch.core.plans.Plan`) with its `strength`: the
        denoised device image (in `out` when given), the value checks deferred."""
        strength = self.planned_strength()
        volume = as_volume(image, video=self.video)
        guided = None if guide is None else self._guide.check(guide, volume)
        output = self._launch(volume, strength, guided, out)
        last = [self.last_events[-1][1]]
        self.defer_check(last, self._judge(strength.peak))
        if guided is not None:
            self.defer_check(last, lambda peak: self._check_peak(peak, "guide"),
                             uploader=self._guide.uploader)
        return output, last

    def _judge(self, given: float | None) -> Any:
        """The check of a run's measured peak (`clpatch.denoise.peaks.peak_judge`)."""
        return peak_judge(self._check_peak, given)

    def _launch(self, volume: Volume, strength: Strength, guided: Volume | None,
                out: Any) -> Any:
        """Enqueue a run (and, for NumPy output, copy it back); returns the output. The
        caller reads or defers the value checks."""
        sigma, h, flat_beta = strength.sigma, strength.nlm_h, strength.flat_beta
        image = volume.array            # an array-like is an array from here on
        tiles = self.tiles_for(guided is not None)
        # Values are checked by the conversion kernel, after the run (the kernels stay in
        # bounds whatever the values). The fixed-point scale comes from the peak on the
        # device (nlm_scale), so nothing waits for the host before averaging: a single
        # tile's upload is queued first, a tiled input is converted tile by tile once up
        # front to fold all its values in, unless the caller gave the peak (checked against
        # the measured one after the run).
        uploader = self.search.uploader
        uploader.begin()
        events: list[tuple[str, Any]] = []
        first = None
        given = strength.peak
        if given is not None:
            self._check_peak(given)
        # A planar float32 device image in one tile is averaged and searched as it is, the
        # search's first launch checking it into this run's word (no conversion launch).
        word = None
        if (getattr(self.search, "fused", False) and guided is None and len(tiles) == 1
                and volume.on_device and not needs_conversion(volume)
                and tiles[0].chunk == self.search.chunk(0, self.frames, 0, len(self.grid_y))):
            word = uploader.check_words()[1]
            first = (volume.array.base_data, [])
        if self.aggregation == "fixed":
            if given is None and word is None:
                if len(tiles) == 1:
                    first = self.search.upload(volume, tiles[0].chunk, transfers=self.transfers)
                else:
                    for tile in tiles:
                        self.search.upload(volume, tile.chunk, "peak")
            if given is not None or word is None:   # (else after the search: `_run_tile`)
                events.append(("scale", self._enqueue_scale(given)))
        # The weights' noise level is the searched image's (the guide's when given).
        search_sigma = strength.nlm_guide_sigma if guided is not None else sigma
        scalars = (np.float32(2.0 * search_sigma * search_sigma), np.float32(1.0 / (h * h)),
                   np.float32(flat_beta * sigma * sigma),
                   np.float32(1.0 / (self.patch_size ** 2 * self.searched_channels)),
                   self._scales)
        shape = tuple(image.shape)
        if self.reference is not None:
            shape = shape[1:]
        if out is not None:
            output = check_out(out, shape, np.float32, self.runtime.context)
        elif self.device_output:
            output = self.runtime.empty(shape, np.float32)
        else:
            output = np.empty(shape, np.float32)
        pending = None      # (slot, rows of output) whose download is under way
        if guided is not None:
            self._guide.begin()
        for i, tile in enumerate(tiles):
            started = self._run_tile(volume, tile, scalars, output, events,
                                     first if i == 0 else None, i % 2, guided, word, given)
            if pending is not None:
                self.transfers.finish_download(f"out{pending[0]}", pending[1])
            pending = started
        if pending is not None:
            self.transfers.finish_download(f"out{pending[0]}", pending[1])
        self.last_events = events
        return output

    def _run_tile(self, volume: Volume, tile: Tile, scalars: tuple, output: Any,
                  events: list[tuple[str, Any]], uploaded: tuple[Any, list] | None,
                  slot: int, guide: Volume | None, word: int | None = None,
                  given: float | None = None) -> tuple[int, np.ndarray] | None:
        """Enqueue one tile; a pipelined plan alternates two slots of staging and output
        buffers and returns (slot, output rows) whose download it started. The search runs
        on `guide` when given, converted like the image; with `word` on the image as it is
        (`uploaded`), checking it (then "fixed"'s scale, from peak `given` or the check
        word, is queued after the search)."""
        queue = self.runtime.queue
        i32 = np.int32
        chunk = tile.chunk
        nf, hb, w, ch = chunk.f_hi - chunk.f_lo, chunk.y_hi - chunk.y_lo, self.cols, self.channels
        nr = tile.r1 - tile.r0
        gy, gx, n, dim = chunk.g1 - chunk.g0, len(self.grid_x), self.n, self.search.dim

        search = self.search
        if guide is not None:           # first: its check word is fresh (`GuideUpload.begin`)
            guided, guide_uploads = self._guide.upload(
                guide, chunk, slot=slot if self.pipelined else 0, transfers=self.transfers)
            events.extend(guide_uploads)
        if uploaded is not None:
            planar, uploads = uploaded
        elif self.pipelined:
            planar, uploads = search.upload(volume, chunk, staging=f"staging{slot}",
                                            transfers=self.transfers)
        else:
            planar, uploads = search.upload(volume, chunk, transfers=self.transfers)
        events.extend(uploads)
        # The averaged block, then the searched one when it is another (the guide's).
        blocks = [planar] if guide is None else [planar, guided]
        searched = blocks[-1]
        if self.colour:
            # In place into the opponent space; with `luma` the luminance plane goes to
            # "lum": the guide's transform, queued last, overwrites the image's there.
            lum = self._buffer("lum", nf * hb * w * 4) if self.luma else planar
            for block in blocks:
                events.append(("transform", self._opponent(
                    queue, (w, hb, nf), None, block, i32(nf), i32(hb), i32(w),
                    lum if self.luma else block)))
            searched = lum if self.luma else blocks[-1]

        pos = self._buffer("pos", nr * gy * gx * n * dim * 4)
        dist = self._buffer("dist", nr * gy * gx * n * 4)
        if word is None:
            events.extend(("search", e) for e in search.enqueue_chunk(searched, chunk, pos, dist,
                                                                 out_rows=gy))
        else:
            events.extend(("search", e) for e in search.template(chunk, gy).fire(
                searched, pos, dist, None, word))
            if self.aggregation == "fixed" and given is None:
                events.append(("scale", self._enqueue_scale(None)))

        plane = nr * ch * hb * w
        item = 8 if self.aggregation == "fixed" else 4
        acc = self._buffer("acc", plane * self.classes ** 2 * item)
        count = plane * self.classes ** 2
        # A previous run's finalize that read all of this buffer left it zeroed.
        if self._zeroed[0] is not acc or self._zeroed[1] < count:
            events.append(("clear", self._clear(queue, (count,), None, acc, i32(count))))
        self._zeroed = (None, 0)
        # This tile's finalize reads every element of acc when it covers the block.
        zero = (tile.a, tile.b) == (chunk.y_lo, chunk.y_hi)
        ys = self._ys.get((chunk.g0, chunk.g1))
        if ys is None:
            ys = self._ys[(chunk.g0, chunk.g1)] = int_buffer(self.runtime.context,
                                                             self.grid_y[chunk.g0:chunk.g1])

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
            average_classes(average, self.classes, chunk.g0, chunk.g1, self.lattice_rows,
                            self.lattice_cols, gx)

        first_frame = reference_frames(self)[0]
        if self.device_output:
            out, out_rows, out_y0, out_f0 = output.data, self.rows, tile.a, tile.r0 - first_frame
        else:
            out = self._buffer(f"out{slot}" if self.pipelined else "out",
                               nr * (tile.b - tile.a) * w * ch * 4)
            out_rows, out_y0, out_f0 = tile.b - tile.a, 0, 0
        rows = tile.b - tile.a
        # A pipelined slot's output buffer is written again once its last download is done.
        previous = self._downloads.pop(slot, None)
        finalized = self._finalize(
            queue, (w, rows, nr), None, acc, i32(plane), i32(hb), i32(w), i32(chunk.y_lo),
            i32(tile.a - chunk.y_lo), i32(rows), i32(nr), self._cover_y, self._cover_x,
            self._scales, out, i32(out_rows), i32(out_y0), i32(out_f0), i32(zero),
            wait_for=[previous] if previous is not None else None)
        events.append(("finalize", finalized))
        if zero:
            self._zeroed = (acc, count)
        if self.device_output:
            return None
        view = output if self.video and self.reference is None else output[None]
        destination = view[tile.r0 - first_frame:tile.r1 - first_frame, tile.a:tile.b]
        if not self.pipelined:
            download(queue, destination, out, shape=(nr, rows, w, ch), wait_for=[finalized],
                     transfers=self.transfers)
            return None
        self._downloads[slot] = self.transfers.start_download(
            out, nr * rows * w * ch * 4, f"out{slot}", wait_for=[finalized])
        return slot, destination
