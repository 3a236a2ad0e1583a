"""VBM3D's parameters: defaults, per-stage parameters and their checks, the choice of the
video search variant and its work-group layout (what `clpatch.vbm3d`, its plan and
`clpatch explain vbm3d` share)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.validate import check_float, check_int, stage_pair
from ..match.window.video import VIDEO_SEARCHES, choose_video_search, video_layout
from .bm3d_guide import GUIDE_ROLES
from .bm3d_guide import check_guide_role as check_bm3d_role
from .bm3d_params import capped_steps, group_and_transforms, merge_params

__all__ = ["DEFAULTS", "GUIDE_ROLES", "VIDEO_SEARCHES", "VideoStageParams", "check_guide_role",
           "choose_video_search", "contributions", "references_within", "search_layout",
           "video_stage_params"]

MAX_VIDEO_WINDOW = 31          # the window variant gives each window column a work-item
MAX_Q = 8
MAX_TEMPORAL_RADIUS = 16

DEFAULTS: dict[str, Any] = dict(
    patch_size=8, step=(6, 4), window_ref=(7, 7), window_pred=(5, 5), q=(2, 2), n=(8, 8),
    temporal_radius=4, tau_match=(3000.0, 1500.0), transform_2d=("bior1.5", "dct"),
    transform_1d=("haar", "haar"), lambda_3d=2.7, beta=2.0, stages=2)
_PER_STAGE = ("step", "window_ref", "window_pred", "q", "n", "tau_match", "transform_2d",
              "transform_1d", "beta")


@dataclass(frozen=True)
class VideoStageParams:
    """Parameters of one VBM3D stage (1: hard thresholding, 2: Wiener)."""

    stage: int
    patch_size: int
    step: int
    window_ref: int
    window_pred: int
    q: int
    n: int
    tau_match: float
    transform_2d: str
    transform_1d: str
    lambda_3d: float = 2.7
    beta: float = 2.0


def video_stage_params(**overrides: Any) -> tuple[VideoStageParams, VideoStageParams, int, int]:
    """(stage-1 params, stage-2 params, number of stages, temporal radius) for DEFAULTS plus
    overrides. Per-stage parameters (step, window_ref, window_pred, q, n, tau_match,
    transform_2d, transform_1d, beta) take a scalar or a (stage 1, stage 2) pair; None keeps
    the default. With a patch size other than 8 the 2-D transform defaults to the DCT, and
    the default step is lowered to a smaller patch size (as BM3D's presets' are)."""
    cfg, p = merge_params(DEFAULTS, overrides, "VBM3D")
    stages = check_int("stages", cfg["stages"], 1, 2)
    radius = check_int("temporal_radius", cfg["temporal_radius"], 0, MAX_TEMPORAL_RADIUS)
    lam = check_float("lambda_3d", cfg["lambda_3d"])
    # (n, the group size, is `k` to the caller: the errors name it so)
    per = {k: stage_pair("k" if k == "n" else k, cfg[k]) for k in _PER_STAGE}
    if overrides.get("step") is None:   # the default step never exceeds a given patch size
        per["step"] = capped_steps(per["step"], (p, p))
    out = []
    for s in (0, 1):
        n, t2, t1 = group_and_transforms(per, s, p)
        q = per["q"][s]
        if overrides.get("q") is None:      # the default q (2) is lowered to a smaller n
            q = min(q, n)
        q = check_int("q", q, 1, min(MAX_Q, n))
        out.append(VideoStageParams(
            stage=s + 1, patch_size=p, step=check_int("step", per["step"][s], 1, p),
            window_ref=check_int("window_ref", per["window_ref"][s], 1, MAX_VIDEO_WINDOW),
            window_pred=check_int("window_pred", per["window_pred"][s], 1, MAX_VIDEO_WINDOW),
            q=q, n=n, tau_match=check_float("tau_match", per["tau_match"][s], positive=False),
            transform_2d=t2, transform_1d=t1, lambda_3d=lam,
            beta=check_float("beta", per["beta"][s], positive=False)))
    return out[0], out[1], stages, radius


def search_layout(variant: str, params: VideoStageParams) -> tuple[int, int]:
    """(work-items per reference, references per work-group) of a search variant."""
    return video_layout(variant, params.patch_size, params.window_ref, params.window_pred)


def contributions(p: VideoStageParams, radius: int) -> int:
    """An upper bound of the patches aggregated into one pixel in one stage: a reference k
    frames away reaches at most window_ref // 2 + k · (window_pred // 2) pixels away, and
    keeps at most q patches in any frame (q + 1 in its own: the group always holds the
    reference)."""
    total = 0
    for k in range(radius + 1):
        per_axis = references_within(
            p.patch_size - 1 + p.window_ref // 2 + k * (p.window_pred // 2), p.step)
        total += (2 if k else 1) * per_axis * per_axis * min(p.q + (0 if k else 1), p.n)
    return total


def references_within(reach: int, step: int) -> int:
    """An upper bound of the references along one axis of a grid of `step` whose patches
    can put a pixel into their groups when they reach `reach` pixels from the reference's
    top-left (its patch's far edge included)."""
    return -(-(2 * reach + 1) // step) + 1


def check_guide_role(guide_role: Any, guided: bool, stages: int) -> str | None:
    """The role of a call's guide (`guided`: whether one was given), checked as BM3D's
    (`clpatch.denoise.bm3d_guide.check_guide_role`); None without a guide."""
    role = check_bm3d_role(guide_role, guided, stages, "video")
    return role if guided else None
