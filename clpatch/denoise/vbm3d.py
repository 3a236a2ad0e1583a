"""VBM3D video denoising (Dabov et al. 2007; Davy–Ehret §2.3, §4.2): `vbm3d` and `VBM3DPlan`.

VBM3D is BM3D with a video patch search: the groups of a reference patch in frame t come
from a ``window_ref``² window around it in frame t, and from the union of ``window_pred``²
windows centred on the ``q`` best positions of the neighbouring frame, frame by frame outwards
up to ``temporal_radius`` frames away (each frame keeps its q best; the group takes the n best
of them all). Candidates are ordered by (distance, t, y, x), so every search variant makes
the same choices. The filtering and aggregation are BM3D's fused kernel (clpatch/bm3d.py):
stage 1 hard thresholding on groups matched on the noisy video, stage 2 Wiener shrinkage on
groups matched on the basic estimate; every filtered patch is aggregated into its own frame.

Davy–Ehret use 8×8 patches in both stages (the original's stage 2 uses 7×7; their Table 2
shows no loss). Defaults follow the original VBM3D as implemented by Ehret (the paper's
[26]): steps 6 and 4, windows 7 and 5, q 2, n 8, temporal radius 4, matching thresholds
3000 and 1500 (mean squared difference per pixel, 0–255 units), λ 2.7, Bior1.5 / DCT and Haar.
The original's distance penalty on the predictive search is not used.

Guide video (`guide=`, BM3D-CUDA's `ref`, KNLMeansCL's `rclip`): a video of the frames' shape
(e.g. a pre-filtered clip) that replaces, by `guide_role`:
- "match" (default): the video the predictive searches run on, in both stages: stage 1
  matches on the guide instead of the noisy frames, stage 2 instead of the basic estimate.
  Hard thresholding and Wiener filtering still act on the noisy frames, and the Wiener oracle
  is still the basic estimate. With one stage only stage 1's matching changes, so
  guide=frames then gives exactly the unguided result (with two stages it does not: stage 2
  then matches on the noisy frames).
- "oracle": the basic estimate. Stage 1 is skipped; stage 2 matches on the guide and uses its
  spectra as the Wiener oracle (needs stages=2). The device's own basic estimate as guide
  gives the two-stage result.
A colour guide goes through the opponent transform as the frames do; matching uses its Y.
The frames alone set data_range and the fixed-point aggregation's peak.

Streaming: `VBM3DPlan.stream(frames)` takes any iterable of frames and yields denoised frames
in order, 4·radius + 1 frames behind the input. Device memory holds rings of frame slots
(noisy and basic frames: 4·radius + 2 slots, the two accumulators 2·radius + 2 slots each),
so it is bounded by the temporal window, never by the video's length (a guide to match on
takes one more ring of 4·radius + 2 slots; `stream(frames, sigma, guide=guide_frames)`
reads the guide's frames in step with the frames). Each frame goes
through: upload (and the opponent transform for colour), stage-1 search and filtering of its
references once the frames ``radius`` ahead are in, the basic estimate once no more stage-1
group can reach it, then stage 2 likewise, then the output. Frames whose rings do not fit
the device's memory are split into overlapping bands of rows, bit-identical to one band
(clpatch/denoise/vbm3d_tiles.py): a video goes through the bands one after the other, a
stream by chunks of frames.

Given matches (`matches=`, `clpatch.denoise.vbm3d_given`): a stage's groups come from any
video `clpatch.Matches` on its grid (positions (T, gy, gx, k, 3) as (t, y, x) of every
frame's references: the windowed search's on the video, or the video search's own, or a
caller's) instead of the predictive search, as BM3D's do (`clpatch.bm3d`): the reference
patch, then its matches in order without it, thresholded by the stage's tau_match.

Search variants (Davy–Ehret §4.2): "naive" (one work-item per reference), "window" (the
search windows' columns spread over work-items, §4.2.3), "patch" (the patch's columns spread
over work-items, partial distances summed with PTX warp shuffles on NVIDIA, else through
local memory, §4.2.4). `choose_video_search` picks one per device.
"""

from __future__ import annotations

from typing import Any

from ..core.runtime import Runtime, resolve_runtime
from ..core.validate import check_choice, k_or_n
from ..core.volumes import Volume, as_volume, channels_last
from .bm3d_params import AGGREGATIONS
from .given import stage_matches
from .strength import Strength
from .vbm3d_given import given_defaults, given_stages
from .vbm3d_params import VIDEO_SEARCHES, check_guide_role, video_stage_params
from .vbm3d_plan import VBM3DPlan

__all__ = ["VBM3DPlan", "vbm3d"]

#: VBM3D plans kept per runtime (least recently used dropped first).
PLANS_KEPT = 2


def vbm3d(frames: Any, sigma: float, *, patch_size: int | None = None,
          temporal_radius: int | None = None, step: Any = None, window_ref: Any = None,
          window_pred: Any = None, q: Any = None, k: Any = None, tau_match: Any = None,
          transform_2d: Any = None, transform_1d: Any = None, lambda_3d: float | None = None,
          stages: int | None = None, aggregation: str | None = None,
          data_range: float | None = None, channel_axis: int | None = None,
          variant: str | None = None, peak: float | None = None, guide: Any = None,
          guide_role: str = "match", matches: Any = None, runtime: Runtime | None = None,
          n: Any = None) -> Any:
    """Denoise a video with VBM3D (grayscale) or its colour version (RGB, opponent space).

    frames: (T, H, W) or (T, H, W, 3), any real dtype, NumPy or pyopencl array.
    sigma: standard deviation of the noise, in the video's units (20 for 0–255 frames).
    patch_size: 8 (2 to 16; other sizes use the DCT); temporal_radius: 4 (frames searched on
        each side of the reference's); step (6, 4); window_ref (7): search window in the
        reference's frame; window_pred (5): windows around the q (2) best positions of the
        neighbouring frame; k (8): largest group, a power of 2 up to 32 (n: its deprecated
        name); tau_match (3000, 1500): matching thresholds, mean squared difference per
        pixel on a 0–255 scale; transform_2d ("bior1.5", "dct"); transform_1d "haar" (or
        "hadamard"); lambda_3d 2.7; stages 2 (1: the basic estimate). Per-stage parameters
        take a value or a pair.
    aggregation: None (device's best), "fixed" or "cas" (see clpatch.bm3d).
    data_range: as in clpatch.bm3d. channel_axis: where the colour channels are (None: last).
    variant: the search variant, "naive", "window" or "patch" (None: the device's rule).
    peak: as in clpatch.bm3d (pieces of a larger video pass its peak: clpatch.dask does).
    guide: None, or a guide video of exactly the frames' shape (channel_axis applies to it
        too), any real dtype, NumPy, array-like or pyopencl array (whatever the frames are).
    guide_role: what the guide replaces (see the module doc): "match" (the searches of both
        stages run on it) or "oracle" (it is the basic estimate: stage 1 is skipped, stage 2
        matches on it and uses it as the Wiener oracle; needs stages=2).
    matches: groups given instead of searched (not with guide= or variant=): a video
        `clpatch.Matches` for both stages, or a (stage 1, stage 2) pair whose None stage
        searches as usual (stage 2 on the basic estimate). Positions (T, gy, gx, k, 3) as
        (t, y, x) for every frame of `frames` (T its frame count) on the grid of the stage's
        patch_size and step (None takes the matches'), each within temporal_radius frames
        of its reference (None takes the matches' temporal_window, the largest of a pair's);
        l2 distances as the search gives them (on the first channel, Y for colour),
        ascending, thresholded by the stage's tau_match; NumPy or device arrays. A group is
        the reference patch, then its matches in order without it, k (lowered to the
        matches' k, a power of 2) at most. Entries the video search leaves empty (-1, +inf)
        are refused, like any position outside the frames. See `clpatch.match.given` and
        `clpatch.denoise.vbm3d_given`.
    Returns float32 of the input's shape, NumPy for NumPy input, device array for device input.
    For videos too long for memory, use `VBM3DPlan.stream`, which reads frames one at a time.
    """
    strength = Strength.check(sigma, data_range=data_range, peak=peak)
    given = stage_matches(matches, "window", guide=guide, variant=variant)
    frames, restore = channels_last(frames, channel_axis, video=True)
    volume = as_volume(frames, name="frames", video=True)
    options = vbm3d_options(volume, patch_size=patch_size, temporal_radius=temporal_radius,
                            step=step, window_ref=window_ref, window_pred=window_pred, q=q,
                            n=k_or_n(k, n, None, "vbm3d"),
                            tau_match=tau_match, transform_2d=transform_2d,
                            transform_1d=transform_1d, lambda_3d=lambda_3d, stages=stages,
                            aggregation=aggregation, variant=variant, matches=given)
    check_guide_role(guide_role, guide is not None, options["stages"])
    if guide is not None:
        guide, _ = channels_last(guide, channel_axis, video=True)
    rt = resolve_runtime(runtime, frames)
    key = ("vbm3d", volume.rows, volume.cols, volume.channels, *options.values())
    with rt.plan_cache().using(key, lambda: VBM3DPlan(
            rt, volume.rows, volume.cols, volume.channels, **options), PLANS_KEPT) as plan:
        plan.use_matches(given)
        return restore(plan.apply(frames, strength, guide=guide, guide_role=guide_role))


def vbm3d_options(volume: Volume, *, aggregation: Any, variant: Any,
                  matches: tuple[Any, Any] = (None, None), **params: Any) -> dict[str, Any]:
    """The checked `VBM3DPlan` arguments (params, stages, temporal_radius, aggregation,
    variant, given, frames) of `vbm3d`'s parameters (`params`: patch_size,
    temporal_radius, step, ...) on frames like `volume`; `matches`: the stages' given
    matches (`clpatch.denoise.given.stage_matches`), which set patch_size, step and
    temporal_radius where they are None and lower k to theirs
    (`clpatch.denoise.vbm3d_given`)."""
    if volume.channels not in (1, 3):
        raise ValueError(f"frames must be (T, H, W), (T, H, W, 1) or (T, H, W, 3), "
                         f"got shape {tuple(volume.array.shape)}")
    p1, p2, count, radius = video_stage_params(**given_defaults(matches, params))
    check_choice("aggregation", aggregation, AGGREGATIONS, allow_none=True)
    check_choice("variant", variant, VIDEO_SEARCHES, allow_none=True)
    p = p1.patch_size
    if p > volume.rows or p > volume.cols:
        raise ValueError(f"patch_size {p} is larger than the frames ({volume.rows}x{volume.cols})")
    (p1, p2), given = given_stages(volume, matches, (p1, p2), count)
    return dict(params=(p1, p2), stages=count, temporal_radius=radius,
                aggregation=aggregation, variant=variant, given=given,
                frames=volume.frames if any(given) else None)
