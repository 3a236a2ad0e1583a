"""Exhaustive k-nearest-patch search between two images, for any distance (Tang et al.).

For every query patch (top-left corners on the project's grid: 0, step, 2·step, … plus the
last valid position of each axis), the k most similar patches anywhere in the reference
image, exactly. Metrics:

- ``"l2"``: sum of squared differences over the patch and its channels;
- ``"l1"``: sum of absolute differences;
- ``"chamfer"``: Tang's eq. 4, one way from the query patch Q to the candidate R: for each
  pixel of Q, the smallest L∞ offset max(|i − x|, |j − y|) to a pixel of R with an equal
  label (the pixel's value, all channels equal), or 2·(p − 1) when R has none; summed over
  Q's pixels;
- ``"chamfer_sym"``: Q → R plus R → Q.

Ties: candidates are ordered by (distance, candidate index), the index being
cy · (Wr − p + 1) + cx, so equal distances keep the candidate first in row-major order; the
k returned are the k smallest of that order. Every engine and device computing the same
distances returns the same matches: for integer-valued images (8- or 16-bit data) the
distances are exact, so the matches are identical everywhere; for other float data,
reported l2/l1 distances are direct sums (re-scored), and candidates whose distances differ
by float32 rounding may change places at the k-th.

`knn_vectors` runs the same engines on plain feature vectors (one "pixel" per vector).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyopencl.array as cla
from pyopencl.elementwise import ElementwiseKernel

from ...core.runtime import Runtime, resolve_runtime
from ...core.validate import check_choice, check_int
from ...core.volumes import Volume, as_array, as_volume
from ..matches import Matches
from .banded import BandedKnnPlan
from .bands import band_layout
from .config import (
    KNN_METHODS,
    MAX_CHANNELS,
    MAX_PATCH,
    KnnConfig,
    check_knn_params,
    choose_knn,
)
from .plan import KnnPlan, query_bytes
from .vectors import TRANSFORMED_METRICS, ip_values, transformed

__all__ = ["MAX_CHANNELS", "MAX_PATCH", "KnnPlan", "KnnVectors", "knn", "knn_vectors"]

#: kNN plans kept per runtime.
PLANS_KEPT = 8


def knn(query: Any, reference: Any = None, *, patch_size: int = 8, k: int = 16,
        metric: str = "l2", step: int = 1, method: str | None = None,
        runtime: Runtime | None = None) -> Matches:
    """The k nearest patches in `reference` of every grid patch of `query`.

    query, reference: images (H, W) or (H, W, C) with the same C, NumPy or device arrays,
        any real dtype; reference None searches `query` itself (each patch then finds
        itself at distance 0: first, unless an identical patch has a smaller index).
    patch_size: side of the square patches, 1–64 (Chamfer: 1–16).
    k: neighbours per query patch, 1 to the number of candidates (Hr − p + 1)·(Wr − p + 1).
    metric: "l2", "l1", "chamfer" or "chamfer_sym" (see the module doc).
    step: spacing of the query grid (the last row and column are always included).
    method: None (the rule in `clpatch.match.knn.config`), "offsets" (l2, l1), "gemm" (l2)
        or "direct" (any metric).
    Returns Matches: positions (gy, gx, k, 2) int32 as (y, x) in `reference`, distances
    (gy, gx, k) float32 ascending, grid_y/grid_x the query grid; NumPy arrays for a NumPy
    query, device arrays for a device query.
    """
    return _knn(query, reference, patch_size=patch_size, k=k, metric=metric, step=step,
                method=method, runtime=runtime, names=("query", "reference"))


def _knn(query: Any, reference: Any, *, patch_size: Any, k: Any, metric: Any, step: Any,
         method: Any, runtime: Runtime | None, names: tuple[str, str]) -> Matches:
    """`knn`, its errors naming the inputs `names` (the caller's argument names)."""
    qn, rn = names
    q = as_volume(query, name=qn, video=False)
    r = q if reference is None else as_volume(reference, name=rn, video=False)
    rt = resolve_runtime(runtime, query, reference)
    for name, volume in ((qn, q), (rn, r)):
        if volume.on_device and volume.array.context != rt.context:
            raise ValueError(f"{name} lives in another OpenCL context than the runtime's")
    request = knn_request(rt, q, r, reference is None, patch_size=patch_size, k=k,
                          metric=metric, step=step, method=method, names=names)
    with _plan(rt, q, r, request) as plan:
        return plan.run(query, reference, names=names)


@dataclass(frozen=True)
class KnnRequest:
    """A kNN call's checked parameters and what follows from them on a device: the engine's
    configuration, whether distances are rescored (float inputs), and the reference bands
    (`layout`, None when the whole reference fits one pass)."""

    self_search: bool
    patch_size: int
    k: int
    metric: str
    step: int
    config: KnnConfig
    rescore: bool
    layout: Any


def knn_request(rt: Runtime, q: Volume, r: Volume, self_search: bool, *, patch_size: Any,
                k: Any, metric: Any, step: Any, method: Any,
                names: tuple[str, str] = ("query", "reference")) -> KnnRequest:
    """`knn`'s parameters checked for a query like `q` in a reference like `r` (the same
    volume for a self-search), and the configuration chosen for them on `rt`."""
    qn, rn = names
    if r.channels != q.channels:
        raise ValueError(f"{rn} has {r.channels} channels, {qn} has {q.channels}: "
                         f"they must be equal")
    metric, p, _ = check_knn_params(metric, patch_size, q.channels)
    if p > min(q.rows, q.cols, r.rows, r.cols):
        raise ValueError(f"patch_size {p} is larger than the {qn} ({q.rows}x{q.cols}) or "
                         f"the {rn} ({r.rows}x{r.cols})")
    s = check_int("step", step, 1, max(q.rows, q.cols))
    candidates = (r.rows - p + 1) * (r.cols - p + 1)
    kk = check_int("k", k, 1, candidates)
    method = check_choice("method", method, KNN_METHODS, allow_none=True)
    rescore = q.dtype.kind == "f" or r.dtype.kind == "f"
    config = choose_knn(rt.profile, metric=metric, patch=p, channels=q.channels, step=s,
                        method=method, tuning=rt.tuning)
    # Per query patch: its heaps and results, and the banded merge's band, running and
    # window lists (12 bytes an entry each).
    layout = band_layout(rt, q, r, patch=p, step=s,
                         heap_bytes=query_bytes(config, kk, candidates) + 36 * kk)
    return KnnRequest(self_search, p, kk, metric, s, config, rescore, layout)


def plan_knn(rt: Runtime, q: Volume, r: Volume, request: KnnRequest, *,
             device_output: bool | None = None) -> KnnPlan | BandedKnnPlan:
    """A new plan of `request`: one pass, or the reference in bands when it does not fit
    (`request.layout`); device output for a device query unless `device_output` says."""
    device = q.on_device if device_output is None else device_output
    params = dict(patch_size=request.patch_size, k=request.k, metric=request.metric,
                  step=request.step, config=request.config, self_search=request.self_search,
                  device_output=device, rescore=request.rescore)
    if request.layout is not None:
        return BandedKnnPlan(rt, q.rows, q.cols, q.channels, r.rows, r.cols,
                             layout=request.layout, **params)
    return KnnPlan(rt, q.rows, q.cols, q.channels, r.rows, r.cols, **params)


def _plan(rt: Runtime, q: Volume, r: Volume,
          request: KnnRequest) -> AbstractContextManager[KnnPlan | BandedKnnPlan]:
    """The runtime's cached plan for these shapes and parameters, this thread's for the
    `with` block (`PlanCache.using`)."""
    key = ("knn", q.rows, q.cols, q.channels, r.rows, r.cols, request.self_search,
           request.patch_size, request.k, request.metric, request.step, request.config,
           q.on_device, request.rescore, request.layout)
    return rt.plan_cache().using(key, lambda: plan_knn(rt, q, r, request), PLANS_KEPT)


def _vectors(name: str, array: Any) -> Any:
    array = as_array(array, name=name)
    if len(array.shape) != 2 or 0 in array.shape:
        raise ValueError(f"{name} must be a non-empty (count, dimensions) array, "
                         f"got shape {array.shape}")
    return array.reshape(1, array.shape[0], array.shape[1])


class KnnVectors(NamedTuple):
    """`knn_vectors`' result, in the order of FAISS, scikit-learn, SciPy and torch.topk:
    distances first."""

    distances: Any      # float32 (N, k), ascending
    indices: Any        # int32 (N, k), rows of the references


def knn_vectors(queries: Any, references: Any, k: int, metric: str = "l2", *,
                method: str | None = None,
                runtime: Runtime | None = None) -> KnnVectors:
    """The k nearest rows of `references` (M, D) of every row of `queries` (N, D).

    metric: "l2" (sum of squared differences), "l1", "cosine" (1 − cos, ascending) or "ip"
        (the inner product q·r, largest first: FAISS's IndexFlatIP); the last two through
        an exact L2 search of transformed vectors (`clpatch.match.knn.vectors`). Ties: the
        smaller row index first.
    method: None (l2, cosine, ip: the GEMM engine; l1: direct), or one of `knn`'s.
    Returns `KnnVectors(distances, indices)`: distances float32 (N, k) (ascending; "ip":
    the inner products, descending) and indices int32 (N, k), distances first as in FAISS,
    scikit-learn and torch.topk (before 0.x, clpatch returned (indices, distances)); NumPy
    arrays for a NumPy `queries`, device arrays for a device one.
    """
    if isinstance(metric, str):
        metric = metric.lower()
    metric = check_choice("metric", metric, ("l2", "l1", *TRANSFORMED_METRICS))
    q = _vectors("queries", queries)
    r = _vectors("references", references)
    if q.shape[2] != r.shape[2]:
        raise ValueError(f"references have {r.shape[2]} dimensions, queries have "
                         f"{q.shape[2]}: they must be equal")
    norms = None
    if metric in TRANSFORMED_METRICS:
        rt = resolve_runtime(runtime, queries, references)
        tq, tr, norms = transformed(rt, q.reshape(q.shape[1:]), r.reshape(r.shape[1:]),
                                    metric)
        q, r, runtime = tq.reshape(1, *tq.shape), tr.reshape(1, *tr.shape), rt
    found = _knn(q, r, patch_size=1, k=k,
                 metric="l2" if metric in TRANSFORMED_METRICS else metric, step=1,
                 method=method, runtime=runtime, names=("queries", "references"))
    positions, distances = found.positions, found.distances
    n = positions.shape[1]
    if metric == "cosine":
        distances = distances * np.float32(0.5)
    elif metric == "ip":
        distances = ip_values(runtime, distances.reshape(n, k), norms)
    if isinstance(positions, cla.Array):
        indices = cla.empty(positions.queue, (n, k), np.int32, allocator=positions.allocator)
        rt = resolve_runtime(runtime, queries)
        with rt.plan_cache().using(("knn-column",), lambda: _column(rt.context), 1) as column:
            column(indices, positions.reshape(n * k * 2), queue=positions.queue)
        result = KnnVectors(distances.reshape(n, k), indices)
        if metric in TRANSFORMED_METRICS and not isinstance(queries, cla.Array):
            return KnnVectors(result.distances.get(), result.indices.get())
        return result
    return KnnVectors(distances[0], np.ascontiguousarray(positions[0, :, :, 1]))


def _column(context: Any) -> Any:
    """out[i] = pos[2 i + 1]: the x column of (y, x) positions (the row index of a vector).
    Kept in the runtime's plan cache (a module-level cache keyed by context kept every
    context alive)."""
    return ElementwiseKernel(context, "int *out, const int *pos", "out[i] = pos[2 * i + 1]",
                             "knn_column")
