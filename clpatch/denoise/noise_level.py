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
next threshold. Values are scaled by a power of two (exactly) so that the largest |value|
is near 1, so any range of values is estimated alike.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np
import pyopencl as cl

from ..core.buffers import BufferPool, memory_limits
from ..core.errors import DeviceResourceError
from ..core.kernels import kernel, max_group_size
from ..core.runtime import Runtime, resolve_runtime
from ..core.upload import Uploader, check_peak
from ..core.volumes import FLT_MAX, Volume, as_array, as_volume, channels_last

__all__ = ["CONFIDENCE", "MAX_ITERATIONS", "MIN_PATCHES_PER_DIMENSION", "PATCH", "RTOL",
           "NoiseLevelPlan", "estimate_sigma", "min_patches", "settled", "threshold_factor"]

#: Patch side.
PATCH = 9
#: Share of pure-noise patches the texture threshold keeps.
CONFIDENCE = 0.99
#: A selection holds at least this many patches per dimension of a patch vector.
MIN_PATCHES_PER_DIMENSION = 4
#: Passes after the first (all patches), at most.
MAX_ITERATIONS = 12
#: The iteration stops when sigma² changes by at most this fraction.
RTOL = 1e-3
#: Histogram bins per channel: a float's bits >> 20, 8 bins per octave.
BINS = 2048
#: Plans kept per runtime.
PLANS_KEPT = 4
# Work-group sizes: texture kernel (and its patch rows per work-item), scatter kernel (the
# largest tried; halved while the built kernel refuses it), reduction kernel.
TEXTURE_GROUP, TEXTURE_ROWS = 64, 8
SCATTER_GROUP, MIN_SCATTER_GROUP = 256, 16
# Tiles of TILE x TILE patch positions; CHUNK selected patches staged in local memory at a time.
TILE, CHUNK = 16, 32
REDUCE_GROUP = 64


def min_patches(patch: int = PATCH) -> int:
    """The fewest patch positions an image must have."""
    return MIN_PATCHES_PER_DIMENSION * patch * patch


def threshold_factor(patch: int = PATCH, confidence: float = CONFIDENCE) -> float:
    """tau0 (see the module doc): (tr / r) times the Wilson-Hilferty chi²_r quantile."""
    r = patch * patch - 1
    z = NormalDist().inv_cdf(confidence)
    a = 2.0 / (9.0 * r)
    chi2 = r * (1.0 - a + z * math.sqrt(a)) ** 3
    return 4.0 * patch * (patch - 1) / r * chi2


def chen_variance(values: np.ndarray) -> float:
    """Chen et al.'s criterion (module doc, step 3) on eigenvalues."""
    values = np.sort(np.asarray(values, np.float64))
    for m in range(len(values), 0, -1):
        head = values[:m]
        tau = float(head.mean())
        if np.count_nonzero(head > tau) == np.count_nonzero(head < tau):
            return tau
    return float(values[0])


def settled(levels: list[float], counts: list[int], count: int, level: float) -> float | None:
    """Record a pass (its selection's size and level) in `levels` and `counts`; return the
    estimate once the iteration has settled (module doc, step 4), else None."""
    if count in counts:         # the same selection again: a cycle from its first pass
        return float(np.mean(levels[counts.index(count):]))
    if levels and abs(level - levels[-1]) <= RTOL * levels[-1]:
        return level
    levels.append(level)
    counts.append(count)
    return None


def _dc_free_basis(d: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.column_stack([np.ones(d), np.eye(d)[:, :d - 1]]))
    return q[:, 1:]


class NoiseLevelPlan:
    """The compiled estimator for one image shape: `run(volume)` returns the per-channel
    sigma; `statistics(volume, thresholds)` one pass's statistics (for checks).
    `last_events` holds the (stage, event) pairs of the last call."""

    def __init__(self, runtime: Runtime, rows: int, cols: int, channels: int, *,
                 patch: int = PATCH) -> None:
        self.runtime = runtime
        self.rows, self.cols, self.channels, self.patch = rows, cols, channels, patch
        self.ph, self.pw = rows - patch + 1, cols - patch + 1
        d = patch * patch
        self.blocks = -(-(d + 1) // 4)      # the kernel's 4 x 4 blocks of the statistics
        self.entries = 16 * self.blocks * (self.blocks + 1) // 2
        self.tiles = -(-self.ph // TILE) * -(-self.pw // TILE)
        self.groups = max(1, min(self.tiles, 4 * int(runtime.profile.compute_units), 1024))
        largest, total = memory_limits(runtime)
        pixels = channels * rows * cols
        sizes = (4 * pixels, 8 * pixels, 4 * channels * self.ph * self.pw,
                 4 * channels * self.groups * self.entries)   # planar, staging, texture, partial
        if max(sizes) > largest or sum(sizes) > total:
            raise DeviceResourceError(
                f"a {rows}x{cols} image with {channels} channel(s) needs {sum(sizes)} bytes of "
                f"device memory (at most {largest} per buffer, {total} in all here); estimate "
                "sigma on a part of it")
        self._build()
        self._pool = BufferPool(runtime.context)
        self.uploader = Uploader(runtime, self._pool)
        self._zeros = np.zeros(channels * BINS, np.uint32)
        self._thr = np.zeros(channels, np.float32)
        self._basis = _dc_free_basis(d)
        self.last_events: list[tuple[str, Any]] = []

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
        return self._pool.get(name, nbytes)

    # ---- passes ----------------------------------------------------------------------------

    def _prepare(self, volume: Volume) -> tuple[float, np.ndarray]:
        """Convert the image and compute every patch's texture strength; returns the scale
        applied to the values and the histogram (channels, BINS)."""
        rt, c = self.runtime, self.channels
        queue, i32 = rt.queue, np.int32
        events = self.last_events = []
        self.uploader.begin()
        planar = self._buffer("planar", 4 * c * self.rows * self.cols)
        events += self.uploader.convert(volume, 0, 1, 0, self.rows, planar)
        converted = events[-1][1]
        peak = self.uploader.peak([converted])
        check_peak(peak, FLT_MAX)
        # Scaled values are below 1 (at least 1/2 at the peak): no sum overflows, and tiny
        # values keep their precision.
        scale = 1.0 if peak == 0.0 else 2.0 ** min(126, max(-126, -math.frexp(peak)[1]))
        hist = self._buffer("hist", 4 * c * BINS)
        cleared = cl.enqueue_copy(queue, hist, self._zeros, is_blocking=False)
        events.append(("clear", cleared))
        texture = self._buffer("texture", 4 * c * self.ph * self.pw)
        rows = -(-self.ph // TEXTURE_ROWS)
        done = self._texture(
            queue, (-(-self.pw // TEXTURE_GROUP) * TEXTURE_GROUP, rows, c), (TEXTURE_GROUP, 1, 1),
            planar, i32(self.rows), i32(self.cols), i32(self.ph), i32(self.pw),
            np.float32(scale), texture, hist, wait_for=[converted, cleared])
        events.append(("texture", done))
        counts = np.empty((c, BINS), np.uint32)
        cl.enqueue_copy(queue, counts, hist, wait_for=[done])
        return scale, counts

    def _pass(self, thresholds: np.ndarray, scale: float) -> np.ndarray:
        """Statistics (channels, entries) in the scaled units of the patches whose scaled
        texture strength is below `thresholds` (float32 per channel)."""
        rt, c, e = self.runtime, self.channels, self.entries
        queue, i32, g = rt.queue, np.int32, self.scatter_group
        events = self.last_events
        self._thr[:] = thresholds
        thr = self._buffer("thr", 4 * c)
        written = cl.enqueue_copy(queue, thr, self._thr, is_blocking=False)
        partial = self._buffer("partial", 4 * c * self.groups * e)
        texture = self._buffer("texture", 4 * c * self.ph * self.pw)
        planar = self._buffer("planar", 4 * c * self.rows * self.cols)
        waits = [written] + [ev for stage, ev in events if stage == "texture"]
        scattered = self._scatter(
            queue, (g * self.groups, 1, c), (g, 1, 1), planar, i32(self.rows), i32(self.cols),
            i32(self.ph), i32(self.pw), np.float32(scale), texture, thr, i32(self.groups),
            partial, wait_for=waits)
        stats = self._buffer("stats", 4 * c * e)
        reduced = self._reduce(queue, (-(-e // REDUCE_GROUP) * REDUCE_GROUP, c),
                               (REDUCE_GROUP, 1), partial, i32(self.groups), stats,
                               wait_for=[scattered])
        events += [("thresholds", written), ("scatter", scattered), ("reduce", reduced)]
        host = np.empty((c, e), np.float32)
        cl.enqueue_copy(queue, host, stats, wait_for=[reduced])
        return host.astype(np.float64)

    def _unpack(self, row: np.ndarray, scale: float) -> tuple[int, np.ndarray, np.ndarray]:
        """(count, sums, products) from the kernel's blocks of the sums of a a^T, a = (v, 1)."""
        d, nb = self.patch * self.patch, self.blocks
        full = np.zeros((4 * nb, 4 * nb))
        blocks = iter(row.reshape(-1, 4, 4))
        for bi in range(nb):
            for bj in range(bi, nb):
                full[4 * bi:4 * bi + 4, 4 * bj:4 * bj + 4] = next(blocks)
        full = np.triu(full) + np.triu(full, 1).T
        return (int(round(full[d, d])), full[:d, d] / scale,
                full[:d, :d] / (scale * scale))

    def _variance(self, row: np.ndarray) -> tuple[int, float]:
        """(patches, Chen et al.'s level) of one channel's statistics (scaled units)."""
        count, sums, products = self._unpack(row, 1.0)
        if count == 0:
            return 0, 0.0
        mu = sums / count
        cov = products / count - np.outer(mu, mu)
        basis = self._basis
        return count, max(chen_variance(np.linalg.eigvalsh(basis.T @ cov @ basis)), 0.0)

    # ---- public ------------------------------------------------------------------------------

    def statistics(self, volume: Volume, thresholds: Any) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """One pass: per channel, (count, sum of v, sum of v v^T) over the patches whose
        texture strength is below thresholds[c] (image units; module doc, steps 1-3)."""
        scale, _ = self._prepare(volume)
        limits = np.asarray(thresholds, np.float64) * scale * scale
        limits = np.where(np.isfinite(limits), limits, FLT_MAX).astype(np.float32)
        stats = self._pass(limits, scale)
        return [self._unpack(row, scale) for row in stats]

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
        variance = np.zeros(self.channels)
        for _ in range(MAX_ITERATIONS + 1):
            stats = self._pass(thresholds, scale)
            for ch in range(self.channels):
                if thresholds[ch] < 0:      # settled earlier: nothing is selected any more
                    continue
                count, level = self._variance(stats[ch])
                variance[ch] = level
                final = settled(*history[ch], count, level)
                if final is not None:
                    variance[ch] = final
                    thresholds[ch] = -1.0
                else:
                    thresholds[ch] = np.float32(max(tau0 * level, float(floor[ch])))
            if np.all(thresholds < 0):
                break
        return np.sqrt(variance) / scale


def _check_size(rows: int, cols: int, shape: tuple[int, ...]) -> None:
    p, need = PATCH, min_patches()
    side = p - 1 + math.isqrt(need - 1) + 1
    if rows < p or cols < p or (rows - p + 1) * (cols - p + 1) < need:
        raise ValueError(f"image is too small to estimate noise: it needs at least {need} "
                         f"patches of {p}x{p}, (H - {p - 1}) * (W - {p - 1}) >= {need} (e.g. "
                         f"{side}x{side} pixels), got shape {shape}")


def estimate_sigma(image: Any, channel_axis: int | None = None,
                   runtime: Runtime | None = None) -> float | np.ndarray:
    """Standard deviation of additive white Gaussian noise in `image`, in its units.

    image: (H, W) grayscale or (H, W, C), any real dtype, NumPy or pyopencl array (device
        arrays stay on the device); at least 324 patches of 9 x 9, e.g. 26 x 26 pixels.
    channel_axis: where the channels are (like scikit-image and `clpatch.nlmeans`); None
        means last for 3-D input.
    Returns a float for a 2-D image, else a float64 NumPy array of one sigma per channel.
    The method is the module's doc; the denoisers never call it (their `sigma` is required).
    """
    image, _ = channels_last(image, channel_axis, False)
    image = as_array(image)
    if len(image.shape) not in (2, 3):
        raise ValueError(f"image must be (H, W) grayscale or (H, W, C) with channels, got "
                         f"shape {tuple(image.shape)}")
    volume = as_volume(image, video=False)
    _check_size(volume.rows, volume.cols, tuple(image.shape))
    rt = resolve_runtime(runtime, image)
    key = ("noise_level", volume.rows, volume.cols, volume.channels)
    plan = rt.plan_cache().plan(key, lambda: NoiseLevelPlan(
        rt, volume.rows, volume.cols, volume.channels), PLANS_KEPT)
    sigma = plan.run(volume)
    if len(image.shape) == 2:
        return float(sigma[0])
    return sigma
