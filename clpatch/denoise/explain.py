"""`clpatch explain nlmeans | bm3d | vbm3d`: what each filter runs and why.

The three operations of `clpatch.engines`; each checks its parameters
with the same functions its engine uses, so an impossible request is refused, not explained.
NL-means and BM3D take `search`, the engine their neighbours come from (as `search=` of
`clpatch.nlmeans` / `clpatch.bm3d`): "window" explains the windowed search's configuration,
"ann" the clustering ANN's (`clpatch.match.ann.search`), for which the window and the search
variant do not apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..match.ann.layout import ann_config
from ..match.ann.params import AnnConfig, AnnRequest
from ..match.ann.search import (
    FILTER_NEIGHBOUR_CLUSTERS,
    FILTER_TILE,
    FILTER_TILINGS,
    filter_request,
)
from ..match.matcher import check_search, description
from ..match.window.config import SearchConfig, SearchRequest
from ..match.window.explain import Explanation, explain_search_request
from ..match.window.params import check_search_request
from .bm3d_params import StageParams, filter_layout, stage_params
from .bm3d_params import choose_aggregation as bm3d_aggregation
from .nlm_aggregation import choose_aggregation as nlm_aggregation
from .vbm3d_params import choose_video_search, search_layout, video_stage_params

#: The image size an ANN request is checked against here, where there is no image: large
#: enough that only the parameters themselves can fail the checks.
NOMINAL_SIZE = 4096


@dataclass
class AnnExplanation:
    """What a filter runs with `search="ann"`: the clustering ANN's configuration (chosen
    by rule; `clpatch autotune` does not time it), then the filter's own choices."""

    operation: str
    device: str
    request: AnnRequest
    config: AnnConfig
    notes: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        return self.config.source

    def __str__(self) -> str:
        r = self.request
        return "\n".join([
            f"{self.operation} on {self.device}: patch {r.patch_size}, step {r.step}, "
            f"k {r.k}, {r.channels} channel(s) searched, l2",
            f"runs: {self.config.describe()}",
            f"why:  {self.config.source} — {self.config.reason}", *self.notes])


def ann_request(runtime: Any, *, patch_size: int, step: int, n: int, channels: int = 1,
                metric: str = "l2", video: bool = False) -> tuple[AnnRequest, AnnConfig]:
    """The ANN request of a filter's `search="ann"` (k = n, the default tile; checked
    against a nominal NOMINAL_SIZE² image) and its configuration on `runtime`'s device."""
    request = filter_request(patch_size=patch_size, step=step, n=n, channels=channels,
                             rows=NOMINAL_SIZE, cols=NOMINAL_SIZE, metric=metric,
                             several_frames=video)
    return request, ann_config(request, runtime.profile)


def _ann_notes(window: str, variant: Any) -> list[str]:
    """The engine's line, and what of the windowed search does not apply to the ANN."""
    ignored = "" if variant is None else \
        f" (the variant given, {getattr(variant, 'variant', variant)}, is ignored)"
    return [f"search engine: ann — {description('ann')}",
            f"not applied with the ANN: the window ({window}) and the search variant{ignored}"
            f"; candidates come from the patch's own cluster and its "
            f"{FILTER_NEIGHBOUR_CLUSTERS} nearest sibling clusters in tiles of {FILTER_TILE}"
            f" ({FILTER_TILINGS} tilings, the second offset by half a tile: each patch "
            "answered by the one where it lies nearer its tile's centre)",
            "not tuned: clpatch autotune times the windowed searches only"]


def explain_nlmeans(runtime: Any, *, patch_size: int | None = None, step: int | None = None,
                    n: int | None = None, window: int | None = None, channels: int = 1,
                    metric: str = "l2", video: bool = False,
                    variant: str | SearchConfig | None = None, search: str = "window",
                    **_: Any) -> Explanation | AnnExplanation:
    """NL-means: its search (defaults patch 8, step 4, n 16, window 21; `search` the engine,
    see the module doc), then the averaging and the aggregation."""
    search = check_search(search)
    request = check_search_request(
        patch_size=8 if patch_size is None else patch_size, step=4 if step is None else step,
        n=16 if n is None else n, window=21 if window is None else window, channels=channels,
        metric=metric, video=video, max_step=None)
    out: Explanation | AnnExplanation
    if search == "ann":
        searched = 1 if channels in (1, 3) else channels  # colour: searched on the luminance
        ann, config = ann_request(runtime, patch_size=request.patch_size, step=request.step,
                                  n=request.n, channels=searched, metric=request.metric,
                                  video=request.video)
        out = AnnExplanation("nlmeans", runtime.device.name.strip(), ann, config)
        out.notes += _ann_notes(str(request.window), variant)
    else:
        out = explain_search_request(runtime, "nlmeans", request, variant)
        out.notes.append(f"search engine: window — {description('window')}")
    kind, why = nlm_aggregation(request.patch_size, request.step, runtime.profile)
    out.notes.append(f"then: columns averaging (p work-items per patch, Davy-Ehret "
                     f"Algorithm 4), aggregation '{kind}' — rule: {why}")
    return out


def explain_bm3d(runtime: Any, *, patch_size: int | None = None, step: Any = None,
                 n: Any = None, window: Any = None, channels: int = 1,
                 variant: str | SearchConfig | None = None, preset: str = "fast",
                 search: str = "window", **_: Any) -> Explanation | AnnExplanation:
    """BM3D: both stages' searches (`search` the engine, see the module doc), the filter
    kernel's layout and the aggregation."""
    search = check_search(search)
    p1, p2, stages = stage_params(preset, patch_size=patch_size, step=step, window=window, n=n)
    if channels not in (1, 3):
        raise ValueError(f"bm3d filters 1 or 3 channels, got {channels}")
    used = (p1, p2)[:stages]
    out = (_bm3d_ann(runtime, preset, used, variant) if search == "ann" else
           _bm3d_window(runtime, preset, used, variant))
    if p1.stagger and p1.step > 1:
        out.notes.append(f"grid: staggered (grid row i's references sit i mod {p1.step} columns "
                         "right of the lattice, as in the bm3d package)")
    kind, why = bm3d_aggregation(runtime.profile)
    out.notes.append(f"aggregation '{kind}' — rule: {why}")
    if channels == 3:
        out.notes.append("colour: CBM3D, groups matched on the opponent luminance Y")
    return out


def _filter_line(params: StageParams, runtime: Any) -> str:
    layout = filter_layout(params, runtime.profile)
    exact = params.exact_variance
    shrink = (f"hard thresholding at {params.lambda_3d:g}σ{'·√v' if exact else ''}"
              if params.stage == 1 else
              f"Wiener shrinkage B²/(B² + {params.mu2:g}σ²{'·v' if exact else ''})")
    if exact:
        shrink += (", v: each 3-D coefficient's exact noise variance (in σ²) for the "
                   "group's patch positions")
    return (f"stage {params.stage} filter: {layout}; {params.transform_2d} 2-D, "
            f"{params.transform_1d} 1-D, {shrink}")


def _bm3d_window(runtime: Any, preset: str, stages: tuple[StageParams, ...],
                 variant: Any) -> Explanation:
    """BM3D's stages with the windowed search."""
    out = None
    for params in stages:
        request = SearchRequest(params.patch_size, params.step, params.n, params.window, 1, "l2")
        if out is None:
            out = explain_search_request(runtime, f"bm3d ({preset}) stage-1 search", request,
                                         variant)
        else:
            stage2 = explain_search_request(runtime, "", request, variant).config
            out.notes.append(f"stage 2 search: patch {params.patch_size}, step {params.step}, "
                             f"k {params.n}, window {params.window}: {stage2.describe()} "
                             f"[{stage2.source}] — {stage2.reason}")
        out.notes.append(_filter_line(params, runtime))
    assert out is not None
    out.notes.append(f"search engine: window — {description('window')}")
    return out


def _bm3d_ann(runtime: Any, preset: str, stages: tuple[StageParams, ...],
              variant: Any) -> AnnExplanation:
    """BM3D's stages with the ANN: k = each stage's n, matched on one channel (Y)."""
    out = None
    for params in stages:
        request, config = ann_request(runtime, patch_size=params.patch_size, step=params.step,
                                      n=params.n)
        if out is None:
            out = AnnExplanation(f"bm3d ({preset}) stage-1 search",
                                 runtime.device.name.strip(), request, config)
        else:
            out.notes.append(f"stage 2 search: patch {params.patch_size}, step {params.step}, "
                             f"k {params.n}: {config.describe()} [{config.source}] — "
                             f"{config.reason}")
        out.notes.append(_filter_line(params, runtime))
    assert out is not None
    out.notes += _ann_notes("/".join(str(p.window) for p in stages), variant)
    return out


@dataclass
class VideoExplanation:
    """What VBM3D runs and why (its video search is chosen by rule or forced, not tuned)."""

    operation: str
    device: str
    variant: str
    source: str
    reason: str
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join([f"{self.operation} on {self.device}",
                          f"runs: {self.variant} video search (Davy-Ehret 4.2)",
                          f"why:  {self.source} — {self.reason}", *self.notes])


def explain_vbm3d(runtime: Any, *, patch_size: int | None = None, step: Any = None,
                  n: Any = None, window: Any = None, channels: int = 1, variant: Any = None,
                  **_: Any) -> VideoExplanation:
    """VBM3D: the video search variant (rule or forced) and each stage's layouts."""
    p1, p2, stages, radius = video_stage_params(patch_size=patch_size, step=step, n=n,
                                                window_ref=window)
    if channels not in (1, 3):
        raise ValueError(f"vbm3d filters 1 or 3 channels, got {channels}")
    chosen, why = choose_video_search(runtime.profile, variant)
    if why == "forced":
        source, why = "forced", "given by the caller"
    else:
        source, why = "rule", why.removeprefix("rule: ")
    out = VideoExplanation("vbm3d", runtime.device.name.strip(), chosen, source, why)
    for params in (p1, p2)[:stages]:
        lanes, group = search_layout(chosen, params)
        out.notes.append(
            f"stage {params.stage}: patch {params.patch_size}, step {params.step}, window "
            f"{params.window_ref} then {params.window_pred} around the {params.q} best of each "
            f"frame, k {params.n}, +-{radius} frames; search {lanes} work-item(s) per reference"
            f"; filter: {filter_layout(params, runtime.profile)}")
    kind, why = bm3d_aggregation(runtime.profile)
    out.notes.append(f"aggregation '{kind}' — rule: {why}")
    if channels == 3:
        out.notes.append("colour: groups matched on the opponent luminance Y")
    out.notes.append("not tuned: clpatch autotune times the windowed searches only")
    return out

