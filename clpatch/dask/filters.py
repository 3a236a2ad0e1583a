"""NL-means, video NL-means and BM3D on Dask arrays chunked in space (and time).

Each function checks its arguments on the client (errors name the argument before any task
runs), then maps the in-memory function over pieces (`clpatch.dask.graph.map_pieces`) with
the halo `clpatch.dask.pieces` derives for it. The result equals one in-memory call with the
same arguments on the same device bit for bit, for any chunking, as long as the aggregation
is deterministic ("fixed", or NL-means' "buffers"; not "cas", whose last bits depend on the
order of additions).
"""

from __future__ import annotations

from typing import Any

import dask.array as da

from ..core.validate import check_int, k_or_n, with_k
from ..core.volumes import planned_volume
from ..denoise.bm3d import bm3d as bm3d_image
from ..denoise.bm3d import sized_stages
from ..denoise.bm3d_guide import check_guide_role as check_bm3d_role
from ..denoise.bm3d_params import stage_params, stagger_shifts, switch_noise
from ..denoise.nlmeans import nlmeans as nlmeans_image
from ..denoise.nlmeans import nlmeans_options
from ..denoise.nlmeans import nlmeans_video as nlmeans_frames
from ..denoise.nlmeans_guide import check_guide_sigma_use
from ..denoise.strength import Strength
from ..denoise.vbm3d import vbm3d as vbm3d_frames
from ..denoise.vbm3d import vbm3d_options
from ..denoise.vbm3d_params import check_guide_role
from ..denoise.vbm3d_tiles import halo_frames, reach
from .graph import check_dask_array, global_peak, map_pieces
from .pieces import Halo, bm3d_halo, nlmeans_halo

__all__ = ["bm3d", "nlmeans", "nlmeans_video", "vbm3d"]


def _channels_last(x: da.Array, channel_axis: int | None, colour_ndim: int) -> tuple[da.Array, Any]:
    """x with its channels last, and the function putting them back."""
    if channel_axis is None or x.ndim != colour_ndim:
        if channel_axis is not None:
            raise ValueError(f"channel_axis={channel_axis} needs a {colour_ndim}-D input, "
                             f"got shape {x.shape}")
        return x, lambda out: out
    axis = check_int("channel_axis", channel_axis, -x.ndim, x.ndim - 1) % x.ndim
    if axis == x.ndim - 1:
        return x, lambda out: out
    return da.moveaxis(x, axis, -1), lambda out: da.moveaxis(out, -1, axis)


def _guide(guide: Any, x: da.Array, channel_axis: int | None, colour_ndim: int) -> da.Array | None:
    """The guide as a Dask array with its channels last like x's (None stays None); a shape
    other than x's is a ValueError naming it."""
    if guide is None:
        return None
    g = check_dask_array(guide, "guide", (colour_ndim - 1, colour_ndim))
    g, _ = _channels_last(g, channel_axis, colour_ndim)
    if g.shape != x.shape:
        raise ValueError(f"guide must have the input's shape {x.shape} (channels last), "
                         f"got {g.shape}")
    return g


def _nlmeans(x: Any, sigma: float, *, video: bool, temporal_window: int, patch_size: int,
             step: int, window: int, n: int, h: float | None, flat_beta: float,
             aggregation: str | None, channel_axis: int | None, search_channels: str,
             peak: float | None, guide: Any, guide_sigma: float | None) -> da.Array:
    lead = 1 if video else 0
    name = "frames" if video else "image"
    x = check_dask_array(x, name, (lead + 2, lead + 3))
    x, restore = _channels_last(x, channel_axis, lead + 3)
    g = _guide(guide, x, channel_axis, lead + 3)
    check_guide_sigma_use(g, Strength.check(sigma, h=h, flat_beta=flat_beta, peak=peak,
                                            guide_sigma=guide_sigma))
    # The options one call on the whole input would take (k as it would cap it: every
    # piece offers at least that).
    options = nlmeans_options(planned_volume(x.shape, x.dtype, name=name, video=video),
                              video=video, patch_size=patch_size, step=step, window=window,
                              n=n, temporal_window=temporal_window, aggregation=aggregation,
                              search_channels=search_channels, variant=None, averaging=None,
                              search="window")
    p, tw = options["patch_size"], options["temporal_window"]
    halo = nlmeans_halo(p, options["step"], options["window"], tw)
    kwargs = dict(patch_size=p, step=options["step"], window=options["window"], k=options["n"],
                  h=h, flat_beta=flat_beta, aggregation=aggregation,
                  search_channels=search_channels)
    if video:
        kwargs["temporal_window"] = tw
    if g is not None:
        kwargs["guide_sigma"] = guide_sigma
    method = nlmeans_frames if video else nlmeans_image
    out = map_pieces(x, halo, method, (sigma,), kwargs, video=video, peak=global_peak(x, peak),
                     name="clpatch-nlmeans", guide=g)
    return restore(out)


def nlmeans(image: Any, sigma: float, *, patch_size: int = 8, step: int = 4, window: int = 21,
            k: int = 16, h: float | None = None, flat_beta: float = 1.05,
            aggregation: str | None = None, channel_axis: int | None = None,
            search_channels: str = "luminance", peak: float | None = None, guide: Any = None,
            guide_sigma: float | None = None, n: int | None = None) -> da.Array:
    """`clpatch.nlmeans` on a Dask array (H, W) or (H, W, C) chunked in space; a lazy float32
    Dask array with the input's chunks (channels in one chunk).

    Every output chunk is computed from its chunk widened by a halo of patch_size +
    window // 2 pixels (moved to the grid: see `clpatch.dask.pieces`), on the device of
    the worker running it. peak: the image's peak |value| if known (None: one extra pass of
    Dask computes it; every chunk needs the same one for the fixed-point aggregation).
    A guide (a Dask or NumPy array of the image's shape, any chunks) is cut into the same
    pieces. Other arguments as in `clpatch.nlmeans` (n: the deprecated name of k).
    """
    return _nlmeans(image, sigma, video=False, temporal_window=0, patch_size=patch_size,
                    step=step, window=window, n=k_or_n(k, n, 16, "clpatch.dask.nlmeans"), h=h,
                    flat_beta=flat_beta,
                    aggregation=aggregation, channel_axis=channel_axis,
                    search_channels=search_channels, peak=peak, guide=guide,
                    guide_sigma=guide_sigma)


def nlmeans_video(frames: Any, sigma: float, *, temporal_window: int = 4, patch_size: int = 16,
                  step: int = 8, window: int = 21, k: int = 16, h: float | None = None,
                  flat_beta: float = 1.05, aggregation: str | None = None,
                  channel_axis: int | None = None, search_channels: str = "luminance",
                  peak: float | None = None, guide: Any = None,
                  guide_sigma: float | None = None, n: int | None = None) -> da.Array:
    """`clpatch.nlmeans_video` on a Dask array (T, H, W) or (T, H, W, C) chunked in time and
    space: each chunk reads temporal_window frames before and after it (the frames its
    references search) and the spatial halo of `nlmeans`. Other arguments as in `nlmeans`.
    """
    return _nlmeans(frames, sigma, video=True, temporal_window=temporal_window,
                    patch_size=patch_size, step=step, window=window,
                    n=k_or_n(k, n, 16, "clpatch.dask.nlmeans_video"), h=h,
                    flat_beta=flat_beta, aggregation=aggregation, channel_axis=channel_axis,
                    search_channels=search_channels, peak=peak, guide=guide,
                    guide_sigma=guide_sigma)


def bm3d(image: Any, sigma: float, *, preset: str = "fast", patch_size: int | None = None,
         step: Any = None, window: Any = None, k: Any = None, transform_2d: Any = None,
         transform_1d: Any = None, stages: int | None = None, lambda_3d: float | None = None,
         mu2: float | None = None, tau_match: Any = None, stagger: bool | None = None,
         exact_variance: bool | None = None,
         aggregation: str | None = None, data_range: float | None = None,
         channel_axis: int | None = None, peak: float | None = None, guide: Any = None,
         guide_role: str = "match", n: Any = None) -> da.Array:
    """`clpatch.bm3d` (CBM3D for RGB) on a Dask array (H, W), (H, W, 1) or (H, W, 3) chunked in
    space; a lazy float32 Dask array with the input's chunks (channels in one chunk).

    Each chunk reads a halo of patch_size + 2 · (window // 2) pixels per stage (stage 2 reads
    the basic estimate, which stage 1 must get right over stage 2's halo): 70 pixels for the
    fast preset, 92 for the reference one. peak: as in `clpatch.dask.nlmeans` (it also
    decides the default data_range, as in one call on the whole image; when not given, it
    is reduced before the graph is built only where the data range changes the pieces'
    halo, else by the graph's own tasks). A guide (a Dask or
    NumPy array of the image's shape, any chunks) is cut into the same pieces. Other
    arguments as in `clpatch.bm3d` (n: the deprecated name of k).
    """
    n = k_or_n(k, n, None, "clpatch.dask.bm3d")
    x = check_dask_array(image, "image", (2, 3))
    x, restore = _channels_last(x, channel_axis, 3)
    g = _guide(guide, x, channel_axis, 3)
    if x.ndim == 3 and x.shape[-1] not in (1, 3):
        raise ValueError(f"image must be (H, W), (H, W, 1) or (H, W, 3), got shape {x.shape}")
    Strength.check(sigma, data_range=data_range, peak=peak)
    params = dict(patch_size=patch_size, step=step, window=window, n=n, transform_2d=transform_2d,
                  transform_1d=transform_1d, stages=stages, lambda_3d=lambda_3d, mu2=mu2,
                  tau_match=tau_match, stagger=stagger, exact_variance=exact_variance)
    # The preset's settings follow the whole image's noise level in 0-255 units, which may
    # need the whole image's peak (a float image's range: 1 or 255). Every piece gets that
    # peak; it is reduced now only where the two readings would cut other pieces (another
    # halo, or n).
    rows, cols = x.shape[:2]
    noise = switch_noise(sigma, data_range, x.dtype, peak, preset)
    readings = [noise] if noise is not None else [sigma, sigma * 255.0]
    layouts = {_bm3d_layout(preset, r, params, rows, cols) for r in readings}
    if len(layouts) > 1:
        peak = float(global_peak(x, None).compute())
        layouts = {_bm3d_layout(preset, switch_noise(sigma, data_range, x.dtype, peak, preset),
                                params, rows, cols)}
    ((count, halo, fixed),) = layouts
    check_bm3d_role(guide_role, g is not None, count)
    params.update(fixed)
    kwargs = dict(preset=preset, aggregation=aggregation, data_range=data_range,
                  **with_k(params))
    if g is not None:
        kwargs["guide_role"] = guide_role
    out = map_pieces(x, halo, bm3d_image, (sigma,), kwargs, video=False,
                     peak=global_peak(x, peak), name="clpatch-bm3d", guide=g)
    return restore(out)


def _bm3d_layout(preset: str, noise: float, params: dict[str, Any], rows: int,
                 cols: int) -> tuple[int, Halo, tuple[tuple[str, Any], ...]]:
    """What cutting an image into BM3D's pieces takes from the settings at `noise` (σ in
    0-255 units), as one call on the whole image sizes them (`sized_stages`): the number
    of stages, the halo, and the sizes it changes from the preset's that every piece must
    take alike, as (name, pair) items (k and the patch size on tiny images; none where it
    changes none). Hashable, so that two readings of the noise compare."""
    (p1, p2), count = sized_stages(rows, cols, preset=preset, noise=noise, search="window",
                                   **params)
    s1, s2, _ = stage_params(preset, noise, **params)
    used = (p1, p2)[:count]
    halo = bm3d_halo([(sp.patch_size, sp.step, sp.window,
                       len(stagger_shifts(sp.step)) if sp.stagger else 1) for sp in used])
    fixed = tuple((key, (getattr(p1, key), getattr(p2, key))) for key in ("n", "patch_size")
                  if (getattr(p1, key), getattr(p2, key)) != (getattr(s1, key), getattr(s2, key)))
    return count, halo, fixed


def vbm3d(frames: Any, sigma: float, *, patch_size: int | None = None,
          temporal_radius: int | None = None, step: Any = None, window_ref: Any = None,
          window_pred: Any = None, q: Any = None, k: Any = None, tau_match: Any = None,
          transform_2d: Any = None, transform_1d: Any = None, lambda_3d: float | None = None,
          stages: int | None = None, aggregation: str | None = None,
          data_range: float | None = None, channel_axis: int | None = None,
          peak: float | None = None, guide: Any = None, guide_role: str = "match",
          n: Any = None) -> da.Array:
    """`clpatch.vbm3d` on a Dask array (T, H, W) or (T, H, W, 3) chunked in time and space; a
    lazy float32 Dask array with the input's chunks (channels in one chunk).

    A group's patches lie within r = window_ref // 2 + temporal_radius · (window_pred // 2)
    pixels of its reference (the predictive search moves up to window_pred // 2 per frame) and
    within temporal_radius frames, so each stage reads patch_size + 2r pixels and
    2 · temporal_radius frames beyond what it must get right, as BM3D's stages do
    (`clpatch.dask.pieces`): for the defaults 2 · (8 + 2 · 11) = 60 pixels and 16 frames.
    Other arguments as in `clpatch.vbm3d` (and `peak` as in `clpatch.dask.bm3d`); a guide
    (a Dask or NumPy array of the frames' shape, any chunks) is cut into the same pieces.
    n is the deprecated name of k.
    """
    n = k_or_n(k, n, None, "clpatch.dask.vbm3d")
    x = check_dask_array(frames, "frames", (3, 4))
    x, restore = _channels_last(x, channel_axis, 4)
    g = _guide(guide, x, channel_axis, 4)
    if x.ndim == 4 and x.shape[-1] not in (1, 3):
        raise ValueError(f"frames must be (T, H, W), (T, H, W, 1) or (T, H, W, 3), got shape {x.shape}")
    Strength.check(sigma, data_range=data_range, peak=peak)
    params = dict(patch_size=patch_size, temporal_radius=temporal_radius, step=step,
                  window_ref=window_ref, window_pred=window_pred, q=q, n=n, tau_match=tau_match,
                  transform_2d=transform_2d, transform_1d=transform_1d, lambda_3d=lambda_3d,
                  stages=stages)
    options = vbm3d_options(planned_volume(x.shape, x.dtype, name="frames", video=True),
                            aggregation=aggregation, variant=None, **params)
    count, radius = options["stages"], options["temporal_radius"]
    check_guide_role(guide_role, g is not None, count)
    used = options["params"][:count]
    spatial = bm3d_halo([(sp.patch_size, sp.step, 2 * reach(sp, radius) + 1, 1) for sp in used])
    halo = Halo(spatial.pixels, spatial.align, halo_frames(radius, count))
    kwargs = dict(aggregation=aggregation, data_range=data_range, **with_k(params))
    if g is not None:
        kwargs["guide_role"] = guide_role
    out = map_pieces(x, halo, vbm3d_frames, (sigma,), kwargs, video=True,
                     peak=global_peak(x, peak), name="clpatch-vbm3d", guide=g)
    return restore(out)
