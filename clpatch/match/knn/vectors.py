"""`knn_vectors`' cosine and inner-product metrics, reduced on the device to the exact L2
search of transformed vectors (the engines and their exactness are the L2 ones):

- "cosine": every row divided by its norm; for unit vectors ||q - r||² = 2 - 2 cos, so the
  L2 order is the cosine order and the reported distance is 1 - cos = ||q - r||² / 2.
  A zero row has no direction: ValueError naming it (as for a row holding NaN or inf).
- "ip" (inner product, largest first, as FAISS's IndexFlatIP): references get one more
  coordinate, sqrt(M² - ||r||²) with M² the largest ||r||², queries a 0 (Bachrach et
  al.'s reduction of maximum inner product search to nearest neighbours), so that
  ||q' - r'||² = ||q||² + M² - 2 q·r: ascending L2 is descending q·r, and the reported
  value is q·r = (||q||² + M² - ||q' - r'||²) / 2, in the search's order. Its absolute
  error is a few float32 roundings of ||q||² + M².

Ties of the computed distances keep the smaller reference row first, as for "l2"; rows
whose cosines are equal in exact arithmetic (parallel rows; every row in one dimension) may
get distances that differ by the device's rounding of x / sqrt(x²), so their order can
differ between devices. The transforms run in float32 on
the device (each row's squared norm summed in index order), so NumPy and device inputs
give the same result on one device.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import pyopencl.array as cla
from pyopencl.elementwise import ElementwiseKernel

from ...core.runtime import Runtime

__all__ = ["TRANSFORMED_METRICS", "ip_values", "transformed"]

#: The metrics `knn_vectors` answers through an L2 search of transformed vectors.
TRANSFORMED_METRICS = ("cosine", "ip")


def _kernels(context: Any) -> dict[str, Any]:
    """The transforms' element-wise kernels: index i over the rows (launched with
    `range=slice(0, rows)`: an ElementwiseKernel's own range is its first array's size)
    or, for "ip", over the results."""
    return {
        # Squared norm of row i of a (rows, d) matrix.
        "norms": ElementwiseKernel(
            context, "float *out, const float *x, const int d",
            "float s = 0.0f; for (int c = 0; c < d; ++c) s += x[i * d + c] * x[i * d + c];"
            " out[i] = s;", "knn_vector_norms"),
        # Row i divided by its norm (norms: squared); flags[0] = 1 when a row is zero,
        # flags[1] = 1 when its norm is not finite (NaN or infinite values).
        "unit": ElementwiseKernel(
            context, "float *out, const float *x, const float *norms, const int d, int *flags",
            "const float n = sqrt(norms[i]); if (norms[i] == 0.0f) flags[0] = 1;"
            " if (!isfinite(norms[i])) flags[1] = 1;"
            " for (int c = 0; c < d; ++c) out[i * d + c] = n > 0.0f ? x[i * d + c] / n : 0.0f;",
            "knn_vector_unit"),
        # Row i with one more coordinate: sqrt(max(top[0] - norms[i], 0)) (references) or 0
        # (queries: lift 0).
        "lift": ElementwiseKernel(
            context, "float *out, const float *x, const float *norms, const float *top,"
            " const int d, const int lift",
            "for (int c = 0; c < d; ++c) out[i * (d + 1) + c] = x[i * d + c];"
            " out[i * (d + 1) + d] = lift ? sqrt(fmax(top[0] - norms[i], 0.0f)) : 0.0f;",
            "knn_vector_lift"),
        # q·r of result e = i * k + j from the L2 distance of the lifted vectors.
        "ip": ElementwiseKernel(
            context, "float *out, const float *dist, const float *qnorms, const float *top,"
            " const int k",
            "out[i] = 0.5f * ((qnorms[i / k] + top[0]) - dist[i]);", "knn_vector_ip"),
    }


def _kernels_of(rt: Runtime) -> AbstractContextManager[dict[str, Any]]:
    """The runtime's transform kernels, made once (kept in its plan cache), this thread's
    for the `with` block (a kernel's arguments are set, then it is enqueued)."""
    return rt.plan_cache().using(("knn-vectors",), lambda: _kernels(rt.context), 1)


def _device_rows(rt: Runtime, array: Any, name: str) -> Any:
    """A C-contiguous float32 (rows, d) device array of `array` ((rows, d), NumPy or a
    device array on `rt`'s context)."""
    if isinstance(array, cla.Array):
        if not array.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous for the cosine and inner-product "
                             "metrics (a device array view: copy it first)")
        return array if array.dtype == np.float32 else array.astype(np.float32)
    return cla.to_device(rt.queue, np.ascontiguousarray(array, dtype=np.float32))


def transformed(rt: Runtime, queries: Any, references: Any,
                metric: str) -> tuple[Any, Any, Any]:
    """(queries', references', query squared norms or None): the device vectors whose L2
    search answers `metric` (module doc); ValueError naming a zero row for "cosine"."""
    with _kernels_of(rt) as kernels:
        return _transformed(rt, kernels, queries, references, metric)


def _transformed(rt: Runtime, kernels: dict[str, Any], queries: Any, references: Any,
                 metric: str) -> tuple[Any, Any, Any]:
    queue = rt.queue
    q = _device_rows(rt, queries, "queries")
    r = _device_rows(rt, references, "references")
    d = np.int32(q.shape[1])
    qn = cla.empty(queue, (q.shape[0],), np.float32)
    rn = cla.empty(queue, (r.shape[0],), np.float32)
    kernels["norms"](qn, q, d, queue=queue)
    kernels["norms"](rn, r, d, queue=queue)
    if metric == "cosine":
        out = []
        for x, norms, name in ((q, qn, "queries"), (r, rn, "references")):
            flags = cla.zeros(queue, (2,), np.int32)
            unit = cla.empty(queue, x.shape, np.float32)
            kernels["unit"](unit, x, norms, d, flags, queue=queue,
                            range=slice(0, int(x.shape[0])))
            zero, bad = (int(v) for v in flags.get())
            if bad:
                raise ValueError(f"{name} contains NaN or infinite values (or rows whose "
                                 "squared norm overflows float32)")
            if zero:
                row = int(np.flatnonzero(norms.get() == 0)[0])
                raise ValueError(f"{name} row {row} is zero: the cosine metric needs "
                                 "non-zero vectors")
            out.append(unit)
        return out[0], out[1], None
    top = cla.max(rn, queue=queue)
    lifted = []
    for x, norms, lift in ((q, qn, 0), (r, rn, 1)):
        wide = cla.empty(queue, (x.shape[0], x.shape[1] + 1), np.float32)
        kernels["lift"](wide, x, norms, top, d, np.int32(lift), queue=queue,
                        range=slice(0, int(x.shape[0])))
        lifted.append(wide)
    return lifted[0], lifted[1], (qn, top)


def ip_values(rt: Runtime, distances: Any, norms: tuple[Any, Any]) -> Any:
    """The inner products of an L2 search of lifted vectors: float32 (N, k) device array."""
    qn, top = norms
    out = cla.empty(rt.queue, distances.shape, np.float32)
    with _kernels_of(rt) as kernels:
        kernels["ip"](out, distances, qn, top, np.int32(distances.shape[-1]), queue=rt.queue)
    return out
