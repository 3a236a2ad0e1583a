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

Guide image (``guide=``, KNLMeansCL's ``rclip``): steps 1 and 2 run on the guide instead
of the noisy image — the neighbours and their distances ``d`` are the guide's (converted
like the image: opponent colour space, luminance or all channels), and the weights take
``2 · guide_sigma²`` for ``2σ²`` (``guide_sigma``: the guide's noise level, default σ;
0 for a clean or pre-filtered guide). Steps 3 and 4 — the values averaged and the
flat-patch variance — stay the noisy image's. ``guide=image`` gives the unguided result
bit for bit. See `clpatch.denoise.nlmeans_guide`.
"""

from __future__ import annotations

from typing import Any

from ..core.runtime import Runtime, resolve_runtime
from ..core.validate import check_int, k_or_n
from ..core.volumes import Volume, as_volume, channels_last
from ..match.given import check_given
from ..match.matcher import available_candidates
from ..match.matches import usable_n
from ..match.window.config import SearchConfig
from ..match.window.params import MAX_TEMPORAL_WINDOW, check_fits, check_search_request
from .given import matches_search
from .guide import guide_like
from .nlm_aggregation import AGGREGATIONS
from .nlmeans_guide import check_guide_sigma_use
from .nlmeans_plan import NLMeansPlan
from .strength import Strength

__all__ = ["AGGREGATIONS", "NLMeansPlan", "nlmeans", "nlmeans_video"]

#: NL-means plans kept per runtime (least recently used dropped first).
PLANS_KEPT = 8


def _denoise(image: Any, sigma: float, *, video: bool, patch_size: int, step: int, window: int,
             n: int, temporal_window: int, h: float | None, flat_beta: float,
             aggregation: str | None, channel_axis: int | None, search_channels: str,
             variant: str | SearchConfig | None, averaging: str | None, search: str,
             peak: float | None, guide: Any, guide_sigma: float | None,
             matches: Any, runtime: Runtime | None) -> Any:
    strength = Strength.check(sigma, h=h, flat_beta=flat_beta, peak=peak,
                              guide_sigma=guide_sigma)
    check_guide_sigma_use(guide, strength)
    search = matches_search(search, matches, guide=guide, variant=variant)
    original = image
    image, restore = channels_last(image, channel_axis, video)
    volume = as_volume(image, name="frames" if video else "image", video=video)
    if guide is not None:       # checked against the caller's layout, then moved alike
        guide = guide_like(guide, original, channel_axis, video,
                           "frames" if video else "image")
    options = nlmeans_options(volume, video=video, patch_size=patch_size, step=step,
                              window=window, n=n, temporal_window=temporal_window,
                              aggregation=aggregation, search_channels=search_channels,
                              variant=variant, averaging=averaging, search=search,
                              matches=matches)
    rt = resolve_runtime(runtime, image, guide)
    key = ("nlmeans", volume.frames, volume.rows, volume.cols, volume.channels, video,
           volume.on_device, *options.values())
    with rt.plan_cache().using(key, lambda: NLMeansPlan(
            rt, volume.frames, volume.rows, volume.cols, volume.channels, video=video,
            device_output=volume.on_device, **options), PLANS_KEPT) as plan:
        if matches is not None:
            plan.search.use(matches)
        return restore(plan.apply(image, strength, guide=guide))


def nlmeans_options(volume: Volume, *, video: bool, patch_size: Any, step: Any, window: Any,
                    n: Any, temporal_window: Any, aggregation: Any, search_channels: Any,
                    variant: Any, averaging: Any, search: Any,
                    matches: Any = None) -> dict[str, Any]:
    """The checked `NLMeansPlan` options of an NL-means call on an input like `volume`
    (n capped at the candidates a corner reference has, or at the given `matches`' k);
    `search` checked already (`clpatch.denoise.given.matches_search`)."""
    request = check_search_request(patch_size=patch_size, step=step, n=n, window=window,
                                   channels=volume.channels, video=video, max_step=None)
    p = request.patch_size
    tw = check_int("temporal_window", temporal_window, 0, MAX_TEMPORAL_WINDOW)
    check_fits(request, volume.frames, volume.rows, volume.cols, tw)
    if matches is None:
        available = available_candidates(search, volume.rows, volume.cols, volume.frames, p,
                                         request.window, tw)
    else:
        available = check_given(matches, rows=volume.rows, cols=volume.cols,
                                frames=volume.frames, patch_size=p, step=request.step,
                                video=video).k
    k = usable_n(request.n, available)
    return dict(patch_size=p, step=request.step, window=request.window, n=k,
                temporal_window=tw, aggregation=aggregation, search_channels=search_channels,
                variant=variant, averaging=averaging, search=search)


def nlmeans(image: Any, sigma: float, *, patch_size: int = 8, step: int = 4, window: int = 21,
            k: int = 16, h: float | None = None, flat_beta: float = 1.05,
            aggregation: str | None = None, channel_axis: int | None = None,
            search_channels: str = "luminance", variant: str | SearchConfig | None = None,
            averaging: str | None = None, search: str = "window", peak: float | None = None,
            guide: Any = None, guide_sigma: float | None = None, matches: Any = None,
            runtime: Runtime | None = None, n: int | None = None) -> Any:
    """Denoise an image with the improved patchwise NL-means (Davy–Ehret Algorithm 1).

    image: (H, W) grayscale or (H, W, C) with C ≤ 8 channels (C = 3 is colour: filtered in an
           opponent colour space), any real dtype, NumPy or pyopencl array.
    sigma: standard deviation of the noise, in the image's units (20 for a 0–255 image).
    patch_size, step: patch side p and reference grid step (1 ≤ step ≤ p).
    window, k: search window side and number of nearest patches averaged (k is capped at
           the candidates a corner reference has, for tiny images); n: k's former name
           (deprecated).
    h: weight bandwidth in image units (default sigma); flat_beta: β of the flat-patch test.
    aggregation: None (device's best), "buffers", "fixed" or "cas" (see the module doc).
    channel_axis: where the channels are (like scikit-image); None means last for 3-D input.
    search_channels: "luminance" (colour only: search on the opponent luminance) or "all".
    variant: the search variant (None: scheduler), averaging: "columns" (default) or "naive".
    search: the search engine the neighbours come from: "window" (the exact windowed
           search) or "ann" (the tiled clustering ANN); see `clpatch.match.matcher`.
    peak: the largest |value| the "fixed" aggregation's fixed point is scaled for (None: the
           image's own). Pieces of one larger image pass the whole image's peak so that
           every piece rounds exactly as one call on the whole would (`clpatch.dask` does);
           a ValueError is raised when the image's values exceed it.
    guide: an image of the same shape (same channel_axis; any real dtype, NumPy, array-like
           or pyopencl array) on which the patches are searched and weighted instead of
           the noisy image (KNLMeansCL's rclip): e.g. a pre-filtered image, or another
           exposure. The values averaged remain the image's. None: the image itself.
    guide_sigma: the guide's noise level (≥ 0) in the weights, in place of sigma (None:
           sigma; 0 for a clean or pre-filtered guide). Only with a guide.
    matches: a `clpatch.Matches` to average instead of searching (not with search=): any
           engine's or a plan's, NumPy or device arrays, on this call's grid (the same
           patch_size, and step: pass the matches'), l2 distances as the search would
           give them (on the opponent luminance for colour with search_channels=
           "luminance"); each reference averages its first k (k is lowered to the
           matches' k). See `clpatch.match.given`.
    Returns float32 of the input's shape, NumPy for NumPy input, device array for device input.
    """
    return _denoise(image, sigma, video=False, patch_size=patch_size, step=step, window=window,
                    n=k_or_n(k, n, 16, "nlmeans"), temporal_window=0, h=h,
                    flat_beta=flat_beta, aggregation=aggregation,
                    channel_axis=channel_axis, search_channels=search_channels, variant=variant,
                    averaging=averaging, search=search, peak=peak, guide=guide,
                    guide_sigma=guide_sigma, matches=matches, runtime=runtime)


def nlmeans_video(frames: Any, sigma: float, *, temporal_window: int = 4, patch_size: int = 16,
                  step: int = 8, window: int = 21, k: int = 16, h: float | None = None,
                  flat_beta: float = 1.05, aggregation: str | None = None,
                  channel_axis: int | None = None, search_channels: str = "luminance",
                  variant: str | SearchConfig | None = None, averaging: str | None = None,
                  search: str = "window", peak: float | None = None, guide: Any = None,
                  guide_sigma: float | None = None, matches: Any = None,
                  runtime: Runtime | None = None, n: int | None = None) -> Any:
    """Video NL-means: the search spans frames t − temporal_window … t + temporal_window
    (the paper's video NL-means, Table 11: 4 past and 4 future frames, 16 × 16 patches).

    frames: (T, H, W) or (T, H, W, C). Frames are processed a few at a time, so device
    memory does not grow with T. guide: a video of the same shape, searched (in every
    frame of the temporal window) and weighted instead of `frames`. matches: a video's
    Matches (positions (T, gy, gx, k, 3) as (t, y, x)); with them every frame is held on
    the device at once. Other arguments as in `nlmeans`.
    """
    return _denoise(frames, sigma, video=True, patch_size=patch_size, step=step, window=window,
                    n=k_or_n(k, n, 16, "nlmeans_video"), temporal_window=temporal_window,
                    h=h, flat_beta=flat_beta,
                    aggregation=aggregation, channel_axis=channel_axis,
                    search_channels=search_channels, variant=variant, averaging=averaging,
                    search=search, peak=peak, guide=guide, guide_sigma=guide_sigma,
                    matches=matches, runtime=runtime)
