"""Noise level estimation: `estimate_sigma`, the standard deviation of additive white
Gaussian noise in an image, in the image's units (the `sigma` the denoisers take).

Method, per channel: weak-texture patch selection (Liu, Tanaka & Okutomi 2013, "Single-image
noise level estimation for blind denoising"), iterated with the eigenvalue criterion of Chen,
Zhu & Heng (ICCV 2015, "An efficient statistical method for image noise level estimation")
on the selected patches. Exactly:

1. Patches: every P x P patch (P = `PATCH` = 9) at step 1, as vectors v of its P² pixels in
   row-major order minus their mean (the patch's DC removed).
2. Texture strength t of a patch: the sum of its squared horizontal and vertical pixel
   differences (P (P - 1) of each). For pure noise of deviation sigma, t / sigma² is
   approximately (tr / r) chi²_r with r = P² - 1 and tr = 4 P (P - 1) (Liu et al.'s gamma
   law of tr(G^T G)), so t < tau0 sigma², tau0 = (tr / r) chi²_r^-1(`CONFIDENCE` = 0.99) (the
   Wilson-Hilferty quantile), holds for 99 % of pure-noise patches.
3. Level of a set of patches: the covariance of their vectors v (divided by the count),
   restricted to the P² - 1 dimensions orthogonal to the constant vector (v has no DC), and
   its eigenvalues l1 <= ... <= lr. Chen et al.'s criterion: sigma² is the mean tau of the m
   smallest eigenvalues for the largest m where as many of those m lie above tau as below.
   The signal occupies a few large eigenvalues; the noise-only ones cluster around sigma²,
   roughly symmetrically, so their mean and median agree.
4. Iteration: sigma²_0 is the level of all patches; then pass k selects the patches with
   t < max(tau0 sigma²_(k-1), t_min) and sigma²_k is their level. It stops when sigma²_k
   differs from sigma²_(k-1) by at most `RTOL` (0.1 %): sigma²_k; when a selection repeats
   an earlier one, of pass i (thresholds only grow or shrink the selection, so an equal
   count is the same set, and the passes cycle): the mean of sigma²_i ... sigma²_(k-1); else
   after `MAX_ITERATIONS` passes: the last level. t_min is the upper edge of the histogram
   bin (8 bins per octave) at which the patches of smaller texture strength reach
   `MIN_PATCHES_PER_DIMENSION` · P² = 324: a selection never holds fewer patches.
5. The estimate is sqrt(sigma²).

Why this method: the wavelet median absolute deviation (Donoho; scikit-image's
`estimate_sigma`) counts every fine detail as noise: +144 % on grass at sigma = 5, 11 of the
40 benchmark cases beyond 10 %. The eigenvalue criterion on all patches alone (Chen et al.)
still takes texture for noise at low sigma (+46 % on astronaut, +156 % on grass at sigma = 5
in our trials), and Liu et al.'s smallest eigenvalue of the weak-texture patches is biased
low (-10 % to -30 % at sigma = 5 on coins, text and grass: the smallest sample eigenvalue
underestimates). Selecting the weak-texture patches and then applying Chen et al.'s
criterion to them is within 8.3 % of the true sigma in all 40 cases of
benchmarks/results/quality_sigma.md (the shared images, sigma = 5, 10, 20, 40), and within
8.5 % over 5 noise seeds.

On the device (cl_src/denoise/noise_level.cl.mako): the input's conversion, the texture
strength of every patch and its histogram, and for each pass the count, sums and sums of
products of the selected patches' vectors (the work grows with the number of patches). On
the host, in float64: the 81 x 81 covariance, its eigenvalues and the criterion, and the
next threshold (`clpatch.denoise.noise_stats`). Values are scaled by a power of two
(exactly) so that the largest |value| is near 1, so any range of values is estimated alike.
An image too large for the device's memory is processed in bands of patch rows (each band
holds its patches' pixel rows): the histogram and the statistics are sums over patches, so
the bands' add up to the whole image's (the statistics in float64 on the host, so the
estimate equals one band's to float rounding); every pass then converts each band again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from ..core.buffers import halve_until_fits, memory_limits
from ..core.kernels import kernel, max_group_size
from ..core.plans import Plan
from ..core.runtime import Runtime, resolve_runtime
from ..core.upload import check_peak
from ..core.validate import check_bool
from ..core.volumes import FLT_MAX, Volume, as_array, as_volume, channels_last
from .noise_stats import (
    BINS,
    CONFIDENCE,
    MAX_ITERATIONS,
    MIN_PATCHES_PER_DIMENSION,
    PATCH,
    RTOL,
    dc_free_basis,
    min_patches,
    settled,
    threshold_factor,
    unpack,
    variance,
)

__all__ = ["BINS", "CONFIDENCE", "MAX_ITERATIONS", "MIN_PATCHES_PER_DIMENSION", "PATCH", "RTOL",
           "NoiseLevelPlan", "combined_sigma", "estimate_sigma", "min_patches", "settled", "threshold_factor"]

#: Plans kept per runtime.
PLANS_KEPT = 4
# Work-group sizes: texture kernel (and its patch rows per work-item), scatter kernel (the
# largest tried; halved while the built kernel refuses it), reduction kernel.
TEXTURE_GROUP, TEXTURE_ROWS = 64, 8
SCATTER_GROUP, MIN_SCATTER_GROUP = 256, 16
# Tiles of TILE x TILE patch positions; CHUNK selected patches staged in local memory at a time.
TILE, CHUNK = 16, 32
REDUCE_GROUP = 64
# Scatter work-groups per channel: at most this many, and 4 per compute unit.
MAX_GROUPS, GROUPS_PER_UNIT = 1024, 4


@dataclass(frozen=True)
class _Band:
    """Patch rows [y0, y0 + ph) and the image rows they cover, [y0, y0 + rows)."""

    y0: int
    ph: int
    rows: int
    groups: int     # scatter work-groups per channel


class NoiseLevelPlan(Plan):
    """The compiled estimator for one image shape: `run(volume)` returns the per-channel
    sigma; `statistics(volume, thresholds)` one pass's statistics (for checks). Images too
    large for the device (or for `tile_bytes`, which tests use to force it) are processed
    in bands of patch rows (module doc). `last_events` holds the (stage, event) pairs of
    the last call. A `clpatch.core.plans.Plan` for its pool, uploader and events; it has
    no `enqueue`: the estimate iterates on the host (`clpatch.estimate_sigma`)."""

    method = "estimate_sigma"

    def __init__(self, runtime: Runtime, rows: int, cols: int, channels: int, *,
                 patch: int = PATCH, tile_bytes: int | None = None) -> None:
        super().__init__(runtime)
        self.rows, self.cols, self.channels, self.patch = rows, cols, channels, patch
        self.ph, self.pw = rows - patch + 1, cols - patch + 1
        d = patch * patch
        self.blocks = -(-(d + 1) // 4)      # the kernel's 4 x 4 blocks of the statistics
        self.entries = 16 * self.blocks * (self.blocks + 1) // 2
        # The partial statistics take at most a quarter of the memory a band may use.
        _, total = memory_limits(runtime, tile_bytes)
        self.max_groups = max(1, min(MAX_GROUPS,
                                     GROUPS_PER_UNIT * int(runtime.profile.compute_units),
                                     total // (16 * channels * self.entries)))
        self.bands = self._plan_bands(tile_bytes)
        self._build()
        self._zeros = np.zeros(channels * BINS, np.uint32)
        self._thr = np.zeros(channels, np.float32)
        self._basis = dc_free_basis(d)

    def _band(self, y0: int, ph: int) -> _Band:
        tiles = -(-ph // TILE) * -(-self.pw // TILE)
        return _Band(y0, ph, ph + self.patch - 1, max(1, min(tiles, self.max_groups)))

    def _plan_bands(self, tile_bytes: int | None) -> list[_Band]:
        largest, total = memory_limits(self.runtime, tile_bytes)
        c = self.channels

        def fits(_: int, ph: int) -> bool:
            band = self._band(0, ph)
            pixels = c * band.rows * self.cols
            sizes = (4 * pixels, 8 * pixels, 4 * c * ph * self.pw,    # planar, staging, texture
                     4 * c * self.max_groups * self.entries,           # partial statistics
                     8 * c * BINS + 4 * c * self.entries)              # histograms, statistics
            return max(sizes) <= largest and sum(sizes) <= total

        _, per = halve_until_fits(
            fits, 1, self.ph,
            f"not even one row of {self.patch}x{self.patch} patches of a {self.cols}-pixel "
            f"wide image with {c} channel(s) fits the device's memory ({largest} bytes per "
            "buffer); estimate sigma on a narrower part of it")
        return [self._band(y0, min(self.ph, y0 + per) - y0) for y0 in range(0, self.ph, per)]

    def _build(self) -> None:
        group = min(SCATTER_GROUP, 1 << (int(self.runtime.profile.max_work_group_size)
                                         .bit_length() - 1))
        while True:
            program = self.runtime.programs.get(
                "denoise/noise_level.cl.mako", patch=self.patch, texture_group=TEXTURE_GROUP,
                texture_rows=TEXTURE_ROWS, scatter_group=group, tile=TILE, chunk=CHUNK,
                reduce_group=REDUCE_GROUP, bins=BINS)
            scatter = kernel(program, "nl_scatter")
            if group <= max_group_size(scatter, self.runtime.device) or group <= MIN_SCATTER_GROUP:
                break
            group //= 2
        self.scatter_group = group
        self._scatter = scatter
        self._texture = kernel(program, "nl_texture")
        self._reduce = kernel(program, "nl_reduce")

    def _buffer(self, name: str, nbytes: int) -> Any:
        return self.pool.get(name, nbytes)

    # ---- passes ----------------------------------------------------------------------------

    def _planar(self) -> Any:
        rows = max(band.rows for band in self.bands)
        return self._buffer("planar", 4 * self.channels * rows * self.cols)

    def _texture_buffer(self) -> Any:
        ph = max(band.ph for band in self.bands)
        return self._buffer("texture", 4 * self.channels * ph * self.pw)

    def _load(self, volume: Volume, band: _Band, after: Any = None) -> Any:
        """Convert the band's image rows into the planar buffer (after event `after`, the
        last reader of the previous band); returns the conversion's event."""
        converted = self.uploader.convert(volume, 0, 1, band.y0, band.y0 + band.rows,
                                          self._planar(),
                                          wait_for=None if after is None else [after])
        self.last_events += converted
        return converted[-1][1]

    def _texture_of(self, band: _Band, scale: float, hist: Any, wait_for: list[Any]) -> Any:
        """Enqueue the texture strengths of the band's patches (added to `hist`)."""
        rows = -(-band.ph // TEXTURE_ROWS)
        done = self._texture(
            self.runtime.queue, (-(-self.pw // TEXTURE_GROUP) * TEXTURE_GROUP, rows,
                                 self.channels), (TEXTURE_GROUP, 1, 1),
            self._planar(), np.int32(band.rows), np.int32(self.cols), np.int32(band.ph),
            np.int32(self.pw), np.float32(scale), self._texture_buffer(), hist,
            wait_for=wait_for)
        self.last_events.append(("texture", done))
        return done

    def _cleared(self, name: str) -> tuple[Any, Any]:
        hist = self._buffer(name, 4 * self.channels * BINS)
        cleared = cl.enqueue_copy(self.runtime.queue, hist, self._zeros, is_blocking=False)
        self.last_events.append(("clear", cleared))
        return hist, cleared

    def _prepare(self, volume: Volume) -> tuple[float, np.ndarray]:
        """Convert the image and compute every patch's texture strength; returns the scale
        applied to the values and the histogram (channels, BINS). One band's conversion and
        texture stay on the device for the first pass; with several bands the image is
        converted once for its peak and once more for the histogram."""
        self.last_events = []
        self.uploader.begin()
        converted: list[Any] = []
        for band in self.bands:     # one band: kept for the first pass; else only the peak
            converted.append(self._load(volume, band, converted[-1] if converted else None))
        peak = self.uploader.peak(converted[-1:])
        check_peak(peak, FLT_MAX)
        # Scaled values are below 1 (at least 1/2 at the peak): no sum overflows, and tiny
        # values keep their precision.
        scale = 1.0 if peak == 0.0 else 2.0 ** min(126, max(-126, -math.frexp(peak)[1]))
        hist, cleared = self._cleared("hist")
        if len(self.bands) == 1:
            done = self._texture_of(self.bands[0], scale, hist, [converted[0], cleared])
        else:
            done = cleared
            for band in self.bands:
                done = self._texture_of(band, scale, hist, [self._load(volume, band, done),
                                                            cleared])
        counts = np.empty((self.channels, BINS), np.uint32)
        cl.enqueue_copy(self.runtime.queue, counts, hist, wait_for=[done])
        return scale, counts

    def _pass(self, volume: Volume, thresholds: np.ndarray, scale: float) -> np.ndarray:
        """Statistics (channels, entries) in the scaled units of the patches whose scaled
        texture strength is below `thresholds` (float32 per channel), summed over the bands
        (in float64)."""
        rt, c, e = self.runtime, self.channels, self.entries
        queue, i32, g = rt.queue, np.int32, self.scatter_group
        events = self.last_events
        self._thr[:] = thresholds
        thr = self._buffer("thr", 4 * c)
        written = cl.enqueue_copy(queue, thr, self._thr, is_blocking=False)
        events.append(("thresholds", written))
        partial = self._buffer("partial", 4 * c * self.max_groups * e)
        stats = self._buffer("stats", 4 * c * e)
        total = np.zeros((c, e))
        host = np.empty((c, e), np.float32)
        waits = [written] + [ev for stage, ev in events if stage == "texture"][-1:]
        if len(self.bands) > 1:     # the previous pass's statistics were read already
            scratch, cleared = self._cleared("hist_scratch")
        scattered = None
        for band in self.bands:
            if len(self.bands) > 1:     # convert the band again, its texture beside it
                loaded = self._load(volume, band, scattered)
                waits = [written, self._texture_of(band, scale, scratch, [loaded, cleared])]
            scattered = self._scatter(
                queue, (g * band.groups, 1, c), (g, 1, 1), self._planar(), i32(band.rows),
                i32(self.cols), i32(band.ph), i32(self.pw), np.float32(scale),
                self._texture_buffer(), thr, i32(band.groups), partial, wait_for=waits)
            reduced = self._reduce(queue, (-(-e // REDUCE_GROUP) * REDUCE_GROUP, c),
                                   (REDUCE_GROUP, 1), partial, i32(band.groups), stats,
                                   wait_for=[scattered])
            events += [("scatter", scattered), ("reduce", reduced)]
            cl.enqueue_copy(queue, host, stats, wait_for=[reduced])
            total += host
        return total

    # ---- public ------------------------------------------------------------------------------

    def statistics(self, volume: Volume, thresholds: Any) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """One pass: per channel, (count, sum of v, sum of v v^T) over the patches whose
        texture strength is below thresholds[c] (image units; module doc, steps 1-3)."""
        scale, _ = self._prepare(volume)
        limits = np.asarray(thresholds, np.float64) * scale * scale
        limits = np.where(np.isfinite(limits), limits, FLT_MAX).astype(np.float32)
        stats = self._pass(volume, limits, scale)
        return [unpack(row, self.patch, self.blocks, scale) for row in stats]

    def run(self, volume: Volume) -> np.ndarray:
        """sigma per channel, float64 (channels,), in the image's units."""
        scale, counts = self._prepare(volume)
        need = min_patches(self.patch)
        # The upper edge of the first bin where the cumulative count reaches `need`.
        first = np.argmax(np.cumsum(counts, axis=1, dtype=np.int64) >= need, axis=1)
        floor = ((first + 1) << 20).astype(np.uint32).view(np.float32)
        tau0 = threshold_factor(self.patch)
        thresholds = np.full(self.channels, FLT_MAX, np.float32)
        history: list[tuple[list[float], list[int]]] = [([], []) for _ in range(self.channels)]
        levels = np.zeros(self.channels)
        for _ in range(MAX_ITERATIONS + 1):
            stats = self._pass(volume, thresholds, scale)
            for ch in range(self.channels):
                if thresholds[ch] < 0:      # settled earlier: nothing is selected any more
                    continue
                count, level = variance(stats[ch], self.patch, self.blocks, self._basis)
                levels[ch] = level
                final = settled(*history[ch], count, level)
                if final is not None:
                    levels[ch] = final
                    thresholds[ch] = -1.0
                else:
                    thresholds[ch] = np.float32(max(tau0 * level, float(floor[ch])))
            if np.all(thresholds < 0):
                break
        return np.sqrt(levels) / scale


def _check_size(rows: int, cols: int, shape: tuple[int, ...]) -> None:
    p, need = PATCH, min_patches()
    side = p - 1 + math.isqrt(need - 1) + 1
    if rows < p or cols < p or (rows - p + 1) * (cols - p + 1) < need:
        raise ValueError(f"image is too small to estimate noise: it needs at least {need} "
                         f"patches of {p}x{p}, (H - {p - 1}) * (W - {p - 1}) >= {need} (e.g. "
                         f"{side}x{side} pixels), got shape {shape}")


def estimate_sigma(image: Any, channel_axis: int | None = None,
                   runtime: Runtime | None = None, *,
                   average_sigmas: bool = False) -> float | np.ndarray:
    """Standard deviation of additive white Gaussian noise in `image`, in its units.

    image: (H, W) grayscale or (H, W, C), any real dtype, NumPy or pyopencl array (device
        arrays stay on the device); at least 324 patches of 9 x 9, e.g. 26 x 26 pixels.
    channel_axis: where the channels are (like scikit-image and `clpatch.nlmeans`); None
        means last for 3-D input.
    average_sigmas: for an image with channels, return one float, the root mean square of
        the channels' sigmas: the one noise level the colour filters take (their opponent
        transform is orthonormal, so it keeps the mean noise variance); for equal channels it
        is their sigma. (scikit-image's argument of that name takes the plain mean.)
    Returns a float for a 2-D image (or with average_sigmas), else a float64 NumPy array of
    one sigma per channel. The method is the module's doc; the denoisers never call it
    (their `sigma` is required): `bm3d(image, estimate_sigma(image, average_sigmas=True))`.
    """
    average_sigmas = check_bool("average_sigmas", average_sigmas)
    image, _ = channels_last(image, channel_axis, False)
    image = as_array(image)
    if len(image.shape) not in (2, 3):
        raise ValueError(f"image must be (H, W) grayscale or (H, W, C) with channels, got "
                         f"shape {tuple(image.shape)}")
    volume = as_volume(image, video=False)
    _check_size(volume.rows, volume.cols, tuple(image.shape))
    rt = resolve_runtime(runtime, image)
    key = ("noise_level", volume.rows, volume.cols, volume.channels)
    with rt.plan_cache().using(key, lambda: NoiseLevelPlan(
            rt, volume.rows, volume.cols, volume.channels), PLANS_KEPT) as plan:
        sigma = plan.run(volume)
    if len(image.shape) == 2:
        return float(sigma[0])
    if average_sigmas:
        return combined_sigma(sigma)
    return sigma


def combined_sigma(sigmas: Any) -> float:
    """The one noise level of channels whose noise levels are `sigmas`: their root mean
    square (the colour filters' opponent transform is orthonormal: it keeps the mean noise
    variance)."""
    values = np.asarray(sigmas, dtype=np.float64)
    return float(np.sqrt(np.mean(values * values)))
