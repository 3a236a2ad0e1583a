"""`make_plan`: one plan contract for every method, for pipelines on device arrays.

    plan = clpatch.make_plan(method, shape, dtype=np.float32, runtime=None, **params)
    result, event = plan.enqueue(*device_inputs, out=None, wait_for=None)
    result = plan(*inputs)
    results = plan.stream(inputs)

`params` are the keyword parameters of the method's one-shot function (`search` takes
those of `search_patches`), checked once here and fixed for the plan; the two-image
methods (knn, nnf) take `reference_shape=`, the guided filters `guide=True`. The plan runs
the same kernels as the one-shot function, so its results are the same bit for bit. The
contract (`enqueue` waits for nothing, except where a plan says so with a `waits_for_…`
flag; data checks deferred; `out=`) is the one of `clpatch.core.plans.Plan`, the base of
every plan.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from .core.plans import Plan
from .core.runtime import Runtime, default_runtime
from .core.validate import check_choice, k_or_n
from .core.volumes import planned_volume
from .denoise.bm3d import bm3d, sized_stages
from .denoise.bm3d_guide import check_guide_role
from .denoise.bm3d_params import switch_noise
from .denoise.bm3d_plan import BM3DPlan
from .denoise.burst import burst_denoise, plan_burst
from .denoise.given import matches_search, stage_matches
from .denoise.nlmeans import NLMeansPlan, nlmeans, nlmeans_options, nlmeans_video
from .denoise.nlmeans_guide import check_guide_sigma_use
from .denoise.strength import Strength
from .denoise.vbm3d import VBM3DPlan, vbm3d, vbm3d_options
from .denoise.vbm3d_params import check_guide_role as check_video_guide_role
from .match.ann.search import AnnPlan, ann_request, ann_search
from .match.knn.search import knn, knn_request, plan_knn
from .match.nnf.pca import check_model
from .match.nnf.search import NnfPlan, nnf, nnf_request
from .match.window.search import plan_search, search_patches


def _params(method: str, function: Callable[..., Any], inputs: int,
            given: dict[str, Any]) -> dict[str, Any]:
    """`given` completed with the defaults of `function`'s keyword parameters (those after
    its `inputs` leading inputs, but `runtime`); TypeError naming an unknown one."""
    accepted: dict[str, Any] = {}
    for i, (name, parameter) in enumerate(inspect.signature(function).parameters.items()):
        if i < inputs or name == "runtime":
            continue
        accepted[name] = parameter.default
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise TypeError(f"make_plan({method!r}) got unknown parameter(s) {', '.join(unknown)}; "
                        f"it takes {', '.join(accepted)}")
    missing = [n for n, v in accepted.items() if v is inspect.Parameter.empty and n not in given]
    if missing:
        raise TypeError(f"make_plan({method!r}) needs {', '.join(missing)}")
    return {**accepted, **given}


def _search(rt: Runtime, shape: Any, dtype: Any, given: dict[str, Any]) -> Plan:
    p = _params("search", search_patches, 1, given)
    tw = p["temporal_window"]
    volume = planned_volume(shape, dtype, video=p["video"],
                            temporal_window=tw if isinstance(tw, int) else 0)
    k = k_or_n(p["k"], p["n"], 16, "make_plan('search')")
    return plan_search(rt, volume, patch_size=p["patch_size"], step=p["step"],
                       window=p["window"], n=k, metric=p["metric"], variant=p["variant"],
                       temporal_window=tw, video=p["video"], fused_check=True)


def _ann(rt: Runtime, shape: Any, dtype: Any, given: dict[str, Any]) -> Plan:
    p = _params("ann", ann_search, 1, given)
    volume = planned_volume(shape, dtype, video=False)
    request = ann_request(volume, **p)
    return AnnPlan(rt, 1, volume.rows, volume.cols, volume.channels, request,
                   device_output=True)


def _knn(rt: Runtime, shape: Any, dtype: Any, given: dict[str, Any]) -> Plan:
    given = dict(given)
    reference_shape = given.pop("reference_shape", None)
    p = _params("knn", knn, 2, given)
    q = planned_volume(shape, dtype, name="query", video=False)
    r = q if reference_shape is None else planned_volume(reference_shape, dtype,
                                                         name="reference", video=False)
    request = knn_request(rt, q, r, reference_shape is None, **p)
    plan = plan_knn(rt, q, r, request, device_output=True)
    plan.input_shapes = (tuple(shape),) if reference_shape is None else (
        tuple(shape), tuple(reference_shape))
    return plan


def _channels_last(method: str, channel_axis: Any, ndim: int) -> None:
    """make_plan's inputs are device arrays: their channels come last."""
    if channel_axis is not None and channel_axis not in (-1, ndim - 1):
        raise ValueError(f"make_plan({method!r}) takes device arrays, whose channels come last: "
                         f"channel_axis must be None or -1, got {channel_axis!r}")


def _guide_input(method: str, guide: Any) -> bool:
    """Whether the plan takes a guide as its second input (`guide=True`)."""
    if guide is None or guide is False:
        return False
    if guide is True:
        return True
    raise TypeError(f"make_plan({method!r}) takes guide=True (the plan then takes the guide "
                    f"as enqueue's second input) or None, got {type(guide).__name__}")


def _filter_params(method: str, function: Callable[..., Any], shape: Any,
                   given: dict[str, Any], strength_keys: tuple[str, ...],
                   k_default: Any) -> tuple[dict[str, Any], bool, Strength]:
    """A filter's parameters (`function`'s, completed with its defaults) with what every
    filter's plan checks alike taken out: (the rest, with the group size as `n`; whether
    the plan takes a guide; the checked `Strength` of sigma and `strength_keys`)."""
    p = _params(method, function, 1, given)
    guided = _guide_input(method, p.pop("guide"))
    strength = Strength.check(p.pop("sigma"), **{key: p.pop(key) for key in strength_keys})
    _channels_last(method, p.pop("channel_axis"), len(tuple(shape)))
    p["n"] = k_or_n(p.pop("k"), p["n"], k_default, f"make_plan({method!r})")
    return p, guided, strength


def _fixed(plan: Any, shape: Any, guided: bool, strength: Strength) -> Plan:
    """`plan` with its strength and its inputs (the image, and the guide when `guided`)."""
    plan.strength = strength
    plan.input_shapes = (tuple(shape),) * (2 if guided else 1)
    return plan


def _nlmeans(video: bool) -> Callable[[Runtime, Any, Any, dict[str, Any]], Plan]:
    method, function = ("nlmeans_video", nlmeans_video) if video else ("nlmeans", nlmeans)

    def build(rt: Runtime, shape: Any, dtype: Any, given: dict[str, Any]) -> Plan:
        p, guided, strength = _filter_params(method, function, shape, given,
                                             ("h", "flat_beta", "peak", "guide_sigma"), 16)
        check_guide_sigma_use(True if guided else None, strength)
        p["search"] = matches_search(p["search"], p["matches"],
                                     guide=True if guided else None, variant=p["variant"])
        volume = planned_volume(shape, dtype, name="frames" if video else "image",
                                video=video)
        p.setdefault("temporal_window", 0)
        options = nlmeans_options(volume, video=video, **p)
        plan = NLMeansPlan(rt, volume.frames, volume.rows, volume.cols, volume.channels,
                           video=video, device_output=True, **options)
        if p["matches"] is not None:
            plan.search.use(p["matches"])
        return _fixed(plan, shape, guided, strength)

    return build


def _bm3d(rt: Runtime, shape: Any, dtype: Any, given: dict[str, Any]) -> Plan:
    p, guided, strength = _filter_params("bm3d", bm3d, shape, given, ("data_range", "peak"),
                                         None)
    role = check_guide_role(p.pop("guide_role"), guided, p["stages"]
                            if isinstance(p["stages"], int) else None)
    volume = planned_volume(shape, dtype, video=False)
    if volume.channels not in (1, 3):
        raise ValueError(f"shape must be (H, W), (H, W, 1) or (H, W, 3), got {tuple(shape)}")
    preset = p.pop("preset")
    noise = switch_noise(strength.sigma, strength.data_range, volume.dtype, strength.peak,
                         preset)
    if noise is None:
        raise ValueError(f"make_plan('bm3d', preset={preset!r}) on {volume.dtype} data needs "
                         "data_range= or peak=: at this sigma the preset's settings differ "
                         "between data in [0, 1] and in [0, 255]")
    aggregation, variant, search = p.pop("aggregation"), p.pop("variant"), p.pop("search")
    given = stage_matches(p.pop("matches"), search, guide=True if guided else None,
                          variant=variant)
    stages, count = sized_stages(volume.rows, volume.cols, preset=preset, noise=noise,
                                 search=search, matches=given, **p)
    plan = _fixed(BM3DPlan(rt, volume.rows, volume.cols, volume.channels, stages, count,
                           aggregation=aggregation, variant=variant, device_output=True,
                           search=search, given=tuple(m is not None for m in given)),
                  shape, guided, strength)
    plan.use_matches(given)
    plan.guide_role = role
    return plan


def _vbm3d(rt: Runtime, shape: Any, dtype: Any, given: dict[str, Any]) -> Plan:
    p, guided, strength = _filter_params("vbm3d", vbm3d, shape, given, ("data_range", "peak"),
                                         None)
    role = p.pop("guide_role")
    pair = stage_matches(p.pop("matches"), "window", guide=True if guided else None,
                         variant=p["variant"])
    volume = planned_volume(shape, dtype, name="frames", video=True)
    options = vbm3d_options(volume, matches=pair, **p)
    role = check_video_guide_role(role, guided, options["stages"])
    plan = _fixed(VBM3DPlan(rt, volume.rows, volume.cols, volume.channels, **options),
                  shape, guided, strength)
    plan.use_matches(pair)
    plan.guide_role = role or "match"
    return plan


def _nnf(rt: Runtime, shape: Any, dtype: Any, given: dict[str, Any]) -> Plan:
    given = dict(given)
    if "reference_shape" not in given:
        raise TypeError("make_plan('nnf') needs reference_shape= (the shape of b)")
    reference_shape = given.pop("reference_shape")
    p = _params("nnf", nnf, 2, given)
    va = planned_volume(shape, dtype, name="a", video=False)
    vb = planned_volume(reference_shape, dtype, name="b", video=False)
    model = p.pop("model")
    patch, k, dims, m, leaf, seed = nnf_request(va, vb, **p)
    plan = NnfPlan(rt, va.rows, va.cols, vb.rows, vb.cols, va.channels, patch_size=patch,
                   k=k, pca_dims=dims, candidates=m, leaf_size=leaf, seed=seed,
                   device_output=True,
                   model=None if model is None else check_model(model, patch * patch
                                                                * va.channels, dims))
    plan.input_shapes = (tuple(shape), tuple(reference_shape))
    return plan


def _burst(rt: Runtime, shape: Any, dtype: Any, given: dict[str, Any]) -> Plan:
    p = _params("burst", burst_denoise, 1, given)
    volume = planned_volume(shape, dtype, name="frames", video=True)
    plan, strength = plan_burst(rt, volume, **p)
    return _fixed(plan, shape, False, strength)


#: method -> builder(runtime, shape, dtype, params) of its plan.
BUILDERS: dict[str, Callable[[Runtime, Any, Any, dict[str, Any]], Plan]] = {
    "search": _search,
    "ann": _ann,
    "knn": _knn,
    "nnf": _nnf,
    "nlmeans": _nlmeans(False),
    "nlmeans_video": _nlmeans(True),
    "bm3d": _bm3d,
    "vbm3d": _vbm3d,
    "burst": _burst,
}


def methods() -> tuple[str, ...]:
    """The names `make_plan` accepts."""
    return tuple(BUILDERS)


def make_plan(method: str, shape: Any, /, *, dtype: Any = np.float32,
              runtime: Runtime | None = None, **params: Any) -> Plan:
    """A plan of `method` for device inputs of `shape` and `dtype` (see the module doc).

    method: one of `methods()`. shape: the input's shape, as the one-shot function takes
    it ((H, W), (H, W, C), video (T, H, W[, C])). dtype: the inputs' dtype (any real type;
    it fixes, as in the one-shot function, what depends on it). runtime: the device, context
    and queue (default: `clpatch.default_runtime()`); the plan's inputs, outputs and events
    live there. params: the one-shot function's keyword parameters."""
    builder = BUILDERS.get(method) if isinstance(method, str) else None
    if builder is None:
        check_choice("method", method, methods())
    if runtime is None:
        runtime = default_runtime()
    elif not isinstance(runtime, Runtime):
        raise TypeError(f"runtime must be a clpatch.Runtime or None, got {type(runtime).__name__}")
    plan = builder(runtime, shape, dtype, params)
    if not plan.input_shapes:
        plan.input_shapes = (tuple(int(v) for v in shape),)
    plan.input_dtype = np.dtype(dtype)
    return plan
