"""Burst denoising (Tsai et al. §6): several noisy frames of one scene, taken in quick
succession with a shaking camera, denoised into one frame.

The clustering ANN (`clpatch.match.ann.params`) clusters the patches of every frame at a
tile location together, so each patch of the reference frame finds its k nearest patches
among all frames wherever the shake moved them (within the tile); the reference frame's
patches are then filtered with those candidates. No alignment step, and a moving object
only finds itself where it looks alike (no ghosting: a patch that changed is not similar).

method "nlmeans": the project's NL-means (`clpatch.denoise.nlmeans`, Davy–Ehret's
weights and aggregation) on the burst's candidates.
method "bm3d": BM3D's collaborative filter (hard thresholding, then Wiener with the basic
estimate as oracle) on 3-D groups of each reference patch and its candidates from every
frame; stage 2 reuses stage 1's groups (`clpatch.denoise.burst_bm3d` says why). Colour is
CBM3D's (opponent colours, groups matched on Y).
"""

from __future__ import annotations

from typing import Any

from ..core.runtime import Runtime, resolve_runtime
from ..core.validate import check_choice, check_float, check_int
from ..core.volumes import Volume, as_volume
from ..match.ann.params import check_ann_request
from ..match.ann.search import DEFAULT_TILE
from .burst_bm3d import BurstBM3DPlan, check_group_size
from .nlmeans_plan import NLMeansPlan
from .strength import Strength

__all__ = ["BURST_METHODS", "burst_defaults", "burst_denoise"]

BURST_METHODS = ("nlmeans", "bm3d")
#: The default NL-means bandwidth in units of sigma (many candidates are true copies of the
#: patch in a burst: a narrower kernel keeps out the others). 0.75 gave the best mean PSNR
#: of 16-frame bursts (sigma 12, shaken by up to 2 pixels and 1 degree) of four scenes on
#: the H100: a 1368x1024 photo mosaic, camera, astronaut and brick (512x512), 36.52 dB
#: against 36.50 with 0.7 or 0.8 and 36.45 with 0.85; each scene's best lay in 0.7 - 0.9.
H_FACTOR = 0.75
#: Each method's default patch size and step (see `burst_denoise`).
DEFAULTS = {"nlmeans": {"patch_size": 12, "step": 2}, "bm3d": {"patch_size": 8, "step": 3}}
#: Burst plans kept per runtime.
PLANS_KEPT = 4


def burst_defaults(method: str) -> dict[str, Any]:
    """The keywords `burst_denoise` takes for `method` when they are not given: patch_size,
    step, and h (NL-means, in units of sigma: "h_factor") or stages (BM3D)."""
    method = check_choice("method", method, BURST_METHODS)
    extra = {"h_factor": H_FACTOR} if method == "nlmeans" else {"stages": 2}
    return {**DEFAULTS[method], **extra}


def burst_denoise(frames: Any, sigma: float, *, reference: int = 0, method: str = "nlmeans",
                  tile: int = DEFAULT_TILE, k: int = 16, patch_size: int | None = None,
                  step: int | None = None, h: float | None = None, stages: int | None = None,
                  data_range: float | None = None, peak: float | None = None,
                  runtime: Runtime | None = None) -> Any:
    """Denoise frame `reference` of a burst with candidates from every frame.

    frames: (T, H, W) or (T, H, W, C), T ≥ 1 frames of one scene (a NumPy or pyopencl
        array of any real dtype, channels last; C = 3 is colour, searched on its
        luminance; method "bm3d" takes C = 1 or 3).
    sigma: standard deviation of the noise, in the frames' units (20 for 0–255 data).
    reference: the frame denoised.
    method: "nlmeans" (NL-means weights over the candidates) or "bm3d" (BM3D's two-stage
        collaborative filter on groups of the reference patch and its candidates).
    tile, k: the ANN's tile side and the candidates per patch (k at most the patch count
        of the smallest tile over all frames, and 32; for "bm3d" the largest group, a power
        of 2: 2, 4, 8, 16 or 32).
    patch_size, step: patch side and reference grid step (step ≤ patch_size); None: 12 and
        2 for "nlmeans", 8 and 3 for "bm3d".
    h: NL-means bandwidth (default H_FACTOR · sigma); "nlmeans" only.
    stages: "bm3d" only: 2 (default), or 1 for the basic estimate (hard thresholding) alone.
    data_range, peak: "bm3d" only, as in `clpatch.bm3d`: the data's range (default: the
        dtype's, or 1 for float frames within [-1, 1] and 255 otherwise) and the largest
        |value| of the frames (then the call, and a plan's `enqueue`, need not measure it
        first; frames above it raise ValueError).
    The NL-means defaults (patch 12, step 2; then h 0.85 σ) were the best of a sweep on a
    synthetic 16-frame burst (σ 12, shaken by up to 2 pixels and 1 degree): 39.3 dB
    against 38.6 dB with NL-means' own patch 8 and h = σ, and 36.3 dB for the reference
    frame alone; h is now 0.75 σ (H_FACTOR, from a later sweep on four scenes).
    method "bm3d" keeps BM3D's patch 8 and its matching threshold and shrinkage; on a
    synthetic 16-frame burst of a 192x256 crop of the camera image (σ 12)
    it gave 34.15 dB (step 3; 34.19 dB with step 2) against 33.13 dB for `clpatch.bm3d` on
    the reference frame alone, and 34.72 dB for method "nlmeans" (32.44 dB alone).
    Returns the denoised reference frame, float32 (H, W[, C]), NumPy for NumPy input,
    device array for device input.
    """
    volume = as_volume(frames, name="frames", video=True)
    rt = resolve_runtime(runtime, frames)
    # Keyed by the arguments as given, each with its type (equal values of other types,
    # 16 and 16.0, are checked anew: the checks accept one and refuse the other).
    key = ("burst", volume.frames, volume.rows, volume.cols, volume.channels,
           volume.on_device, *((type(v), v) for v in (reference, method, tile, k, patch_size,
                                                      step, h, stages)))
    strength = burst_strength(method, sigma, h, data_range, peak)
    with rt.plan_cache().using(key, lambda: plan_burst(
            rt, volume, sigma, reference=reference, method=method, tile=tile, k=k,
            patch_size=patch_size, step=step, h=h, stages=stages)[0], PLANS_KEPT) as plan:
        return plan.apply(frames, strength)


def burst_strength(method: Any, sigma: Any, h: Any, data_range: Any = None,
                   peak: Any = None) -> Strength:
    """The checked filter strength of a burst call."""
    method = check_choice("method", method, BURST_METHODS)
    sigma = check_float("sigma", sigma)
    if method == "bm3d":
        return Strength.check(sigma, data_range=data_range, peak=peak)
    for name, value in (("data_range", data_range), ("peak", peak)):
        if value is not None:
            raise ValueError(f"{name} applies to method='bm3d' only")
    return Strength.check(sigma, h=H_FACTOR * sigma if h is None else h)


def plan_burst(rt: Runtime, volume: Volume, sigma: Any, *, reference: Any, method: Any,
               tile: Any, k: Any, patch_size: Any, step: Any, h: Any, stages: Any,
               data_range: Any = None, peak: Any = None) -> tuple[Any, Strength]:
    """A new plan of `burst_denoise`'s arguments for frames like `volume` (device output for
    a device volume), and the call's checked strength; every argument checked."""
    method = check_choice("method", method, BURST_METHODS)
    defaults = burst_defaults(method)
    if method == "bm3d":
        if h is not None:
            raise ValueError("h is NL-means' bandwidth: it applies to method='nlmeans' only")
        k = check_group_size(k)
        n_stages = check_int("stages", defaults["stages"] if stages is None else stages, 1, 2)
    elif stages is not None:
        raise ValueError("stages applies to method='bm3d' only")
    strength = burst_strength(method, sigma, h, data_range, peak)
    ref = check_int("reference", reference, 0, volume.frames - 1)
    p = check_int("patch_size", defaults["patch_size"] if patch_size is None else patch_size,
                  1, 32)
    s = check_int("step", defaults["step"] if step is None else step, 1, p)
    if method == "bm3d" and volume.channels not in (1, 3):
        raise ValueError(f"frames must have 1 or 3 channels for method='bm3d' (grayscale or "
                         f"RGB), got {volume.channels}")
    search_c = 1 if volume.channels == 3 else volume.channels
    request = check_ann_request(patch_size=p, step=s, k=k, tile=tile, neighbour_clusters=0,
                                channels=search_c, rows=volume.rows, cols=volume.cols,
                                frames=volume.frames)
    if method == "bm3d":
        return BurstBM3DPlan(rt, volume.frames, volume.rows, volume.cols, volume.channels,
                             request, ref, stages=n_stages,
                             device_output=volume.on_device), strength
    return NLMeansPlan(
        rt, volume.frames, volume.rows, volume.cols, volume.channels, patch_size=p, step=s,
        window=request.tile, n=request.k, video=True, device_output=volume.on_device,
        search="ann", reference=ref, search_options={"tile": request.tile,
                                                     "reference": ref}), strength
