"""Approximate nearest-neighbour fields between two images by propagation-assisted k-d
trees (Oancea, Robroek and Gieseke, Algorithm 1), on the device.

For every patch of image a (all top-left positions, step 1), `nnf` finds close patches of
image b: candidates are found in a reduced space (the patches' first `pca_dims` principal
components), and the best `candidates` of them are re-ranked on the full patches (sum of
squared differences over the patch and channels); the k best come back with their exact
distances. The algorithm, fixed so that a NumPy implementation reproduces the fields bit
for bit (tests/reference/nnf.py):

1. PCA model from a seeded random subset of both images' patches (clpatch/match/nnf/pca.py).
2. Every patch projected to the model (float32, each product and sum rounded on its own).
3. A balanced k-d tree over b's reduced points: L levels so that leaf_size · 2^L ≥ Nb,
   padding points at +inf. A node's split dimension is the first of largest spread of its
   box (the root's box: the points' min and max; a child's: its parent's, cut at the
   parent's median); its points are sorted on that dimension (stably), the left half goes
   left, and its median is the left half's last value.
4. Each query (a patch of a) descends the tree (left when its value ≤ the median) and keeps
   the `candidates` best points of its leaf, by (reduced distance, point index); when the
   leaf holds fewer real points than that (the real points fill a prefix of the leaves:
   only the last non-empty leaf and the empty ones after it are short), the previous leaf
   too.
5. The query rows 0, 16, 32, … (`BAND`) search the tree by backtracking (depth first,
   nearer child first, a farther subtree skipped when the distance to its splitting plane
   exceeds the current worst candidate), visiting at most 32 leaves (`VISITS`: exact when
   the traversal ends before; the paper searches only the first row, exactly — a full
   traversal in 10 dimensions is one work-item's long sequential walk, 140 ms on an H100).
6. Propagation, for t = 1 … 15, all bands at once: each query of the rows y ≡ t (mod 16)
   also searches the leaves holding the patches one row below its upper neighbour's
   candidates (neighbours match neighbours) — the paper propagates from the first row
   down, one row per launch; restarting every 16 rows keeps the device busy (one launch
   covers every band) and bounds how far an error travels.
7. Refinement, 2 passes (`REFINE`), each in two halves over a checkerboard (the patches
   with x + y even, then odd; a half reads the other half's lists, which do not change
   meanwhile): every query is offered its four neighbours' candidates moved back by the
   neighbour's offset (PatchMatch's propagation, in both directions of both axes).
8. Re-ranking: exact full-patch distances of the candidates, ascending by (distance, index
   in b); the first k are kept.
9. Expansion, for the queries whose lists cannot vouch for their matches — the k-th full
   distance exceeds the list's M-th reduced distance (times a slack, below), so a point
   outside the list may be nearer on the full patches (the reduced distance is the part
   of the full one in the PCA subspace): the leaves holding the list's points, the first
   4 distinct ones (`EXPAND_LEAVES`) in list order, then (in more than 10 dimensions) a
   traversal of the tree as in 5, bounded by the smaller of the worst point collected and
   the k-th full distance, of at most 8 leaves (`EXPAND_VISITS`; those already scanned
   count but are not scanned again); their points not on the list, the 16 (`EXPAND`)
   nearest in the reduced space, are re-ranked too, nearest first, while their reduced
   distance is below the current k-th full distance.
10. Polish, 2 passes (`POLISH`), over the same kind of queries (tested anew each half
   pass), on a checkerboard as in 7: each is offered its four neighbours' first matches
   moved back by the neighbour's offset, on full distances. Steps 9–10 matter where a's
   patches have no close copy in b (the borders of a pan, occlusions): there the nearest
   neighbour on the full patches is often not among the M nearest in a 10-dimensional
   reduced space. The first k are returned.
   In more than 10 reduced dimensions (`EFFORT_DIMS`) the effort of 9–10 scales with
   f = ceil(pca_dims / 10), at most 4 (`nnf_plan.hard_effort`): the test compares with
   sqrt(10 / pca_dims) times the M-th reduced distance (float32), the expansion takes
   16 f points of 4 f leaves and a traversal of 8 (f − 1) leaves. There the reduced
   distance holds more of the full one, so an approximate list (not the true M nearest)
   passes the plain test more often, and a k-d tree's near points spread over more
   leaves: on the 800x1920 pan at PCA 20 the plain test left the field at 1.043 times the
   exact NNF's mean distance (PoCL, a 2000-query sample of its borders), most of the
   excess on queries whose lists had missed their region of the tree; this effort brings
   it to 1.026 (PCA 10 is unchanged: 1.040).

`reconstruct(matches, b)` rebuilds a from b's patches (each pixel the mean of the matched
pixels of the patches covering it): the paper's Fig. 1, a quick check of a field.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pyopencl as cl

from ...core.buffers import BufferPool
from ...core.kernels import kernel
from ...core.runtime import Runtime, resolve_runtime
from ...core.upload import Uploader, check_peak
from ...core.validate import check_int
from ...core.volumes import Volume, as_volume, magnitude_limit
from ..matches import Matches
from .pca import NnfModel, check_model, fit_pca
from .plan import (
    BAND,
    EFFORT_DIMS,
    EXPAND,
    EXPAND_LEAVES,
    EXPAND_VISITS,
    POLISH,
    REFINE,
    VISITS,
    NnfPlan,
)
from .sample import host_image

__all__ = ["BAND", "EFFORT_DIMS", "EXPAND", "EXPAND_LEAVES", "EXPAND_VISITS", "MAX_CANDIDATES",
           "MAX_K", "MAX_PATCH", "POLISH", "REFINE", "VISITS", "NnfModel", "check_nnf_params",
           "nnf", "nnf_model", "reconstruct"]

#: Bounds of the parameters (private arrays of the kernels hold a query's candidates).
MAX_K = 32
MAX_CANDIDATES = 64
MAX_PATCH = 32
MAX_PCA_DIMS = 64
MAX_LEAF = 4096
#: NNF plans kept per runtime.
PLANS_KEPT = 4


def _leaf_size(leaf_size: Any, candidates: int) -> int:
    if leaf_size is None:   # 32, or the smallest power of two holding the candidates
        return max(32, 1 << (candidates - 1).bit_length())
    leaf = check_int("leaf_size", leaf_size, 2, MAX_LEAF)
    if leaf & (leaf - 1):
        raise ValueError(f"leaf_size must be a power of two, got {leaf}")
    if leaf < candidates:
        raise ValueError(f"leaf_size ({leaf}) must be at least candidates ({candidates})")
    return leaf


def check_nnf_params(patch_size: Any, k: Any, pca_dims: Any, candidates: Any, leaf_size: Any,
                     seed: Any, channels: int) -> tuple[int, int, int, int, int, int]:
    """The checked (patch_size, k, pca_dims, candidates, leaf_size, seed) of an NNF request on
    images of `channels` channels, leaf_size None replaced by its default: the checks of
    `nnf` that need no image size (`clpatch explain nnf` makes them too). ValueError or
    TypeError naming the argument."""
    p = check_int("patch_size", patch_size, 1, MAX_PATCH)
    kk = check_int("k", k, 1, MAX_K)
    m = check_int("candidates", candidates, 1, MAX_CANDIDATES)
    if m < kk:
        raise ValueError(f"candidates ({m}) must be at least k ({kk})")
    values = p * p * channels
    try:
        dims = check_int("pca_dims", pca_dims, 1, min(MAX_PCA_DIMS, values))
    except ValueError as error:
        if values < MAX_PCA_DIMS:   # the default 10 is too many for small grey patches
            raise ValueError(f"{error} (a {p}x{p} patch of {channels} channel(s) has "
                             f"{values} values: pass pca_dims <= {values})") from None
        raise
    leaf = _leaf_size(leaf_size, m)
    s = check_int("seed", seed, 0, 2**63 - 1)
    return p, kk, dims, m, leaf, s


def nnf(a: Any, b: Any, *, patch_size: int = 8, k: int = 1, pca_dims: int = 10,
        candidates: int = 8, leaf_size: int | None = None, seed: int = 0,
        model: NnfModel | None = None, runtime: Runtime | None = None) -> Matches:
    """The approximate nearest-neighbour field of `a` in `b` (see the module doc).

    a, b: images (H, W) or (H, W, C) with the same C, NumPy or device arrays, any real dtype.
    patch_size: side of the square patches, 1–32, at most either image's sides.
    k: neighbours returned per patch of a, 1–32, at most `candidates`.
    pca_dims: dimensions of the reduced space, 1 to min(64, patch_size² · C).
    candidates: neighbours kept per query during the search (the paper's k), k–64, at most
        the number of patches of b.
    leaf_size: points per leaf of the k-d tree, a power of two ≥ candidates (default 32,
        or the smallest power of two ≥ candidates).
    seed: of the PCA model's random sample (the same seed gives the same field).
    model: a PCA model to use instead of fitting one to a and b (`nnf_model`, for example
        fitted once for a video's frames): with it the call samples nothing and a plan's
        `enqueue` waits for nothing; `nnf(a, b, model=nnf_model(a, b))` is `nnf(a, b)`.
    Returns Matches: positions (Ha − p + 1, Wa − p + 1, k, 2) int32 as (y, x) in b,
    distances (…, k) float32 ascending (exact sums of squared differences), grid_y/grid_x
    every row and column of a's patches; NumPy arrays for a NumPy `a`, device arrays for a
    device `a`.
    """
    va = as_volume(a, name="a", video=False)
    vb = as_volume(b, name="b", video=False)
    p, kk, dims, m, leaf, s = nnf_request(va, vb, patch_size=patch_size, k=k,
                                          pca_dims=pca_dims, candidates=candidates,
                                          leaf_size=leaf_size, seed=seed)
    given = None if model is None else check_model(model, p * p * va.channels, dims)
    rt = resolve_runtime(runtime, a, b)
    for name, volume in (("a", va), ("b", vb)):
        if volume.on_device and volume.array.context != rt.context:
            raise ValueError(f"{name} lives in another OpenCL context than the runtime's")
    key = ("nnf", va.rows, va.cols, vb.rows, vb.cols, va.channels, p, kk, dims, m, leaf, s,
           va.on_device, model_key(given))
    with rt.plan_cache().using(key, lambda: NnfPlan(
            rt, va.rows, va.cols, vb.rows, vb.cols, va.channels, patch_size=p, k=kk,
            pca_dims=dims, candidates=m, leaf_size=leaf, seed=s, device_output=va.on_device,
            model=given), PLANS_KEPT) as plan:
        return plan.run(a, b)


def nnf_model(a: Any, b: Any, *, patch_size: int = 8, pca_dims: int = 10,
              seed: int = 0) -> NnfModel:
    """The PCA model `nnf` fits to images `a` and `b` (its parameters of the same names;
    NumPy or device arrays, read on the host): an `NnfModel` of NumPy float32 arrays, to
    pass back as `nnf(..., model=)` for other pairs (a video's frames) or to a plan whose
    `enqueue` must not wait. The fit is the one of `clpatch.match.nnf.pca`, so
    `nnf(a, b, model=nnf_model(a, b))` is `nnf(a, b)` bit for bit."""
    va = as_volume(a, name="a", video=False)
    vb = as_volume(b, name="b", video=False)
    p, _, dims, _, _, s = nnf_request(va, vb, patch_size=patch_size, k=1, pca_dims=pca_dims,
                                      candidates=1, leaf_size=None, seed=seed)
    images = [host_image(volume) for volume in (va, vb)]
    for name, image in zip(("a", "b"), images, strict=True):
        check_peak(float(np.abs(image.astype(np.float32)).max()),
                   magnitude_limit(p, va.channels), name)
    return fit_pca(images[0], images[1], p, dims, s)


def model_key(model: NnfModel | None) -> str | None:
    """A plan-cache key of a checked model (a digest of its values)."""
    if model is None:
        return None
    return hashlib.sha256(model.mean.tobytes() + model.basis.tobytes()).hexdigest()


def nnf_request(va: Volume, vb: Volume, *, patch_size: Any, k: Any, pca_dims: Any,
                candidates: Any, leaf_size: Any, seed: Any) -> tuple[int, ...]:
    """`nnf`'s parameters checked for images like `va` and `vb`: (patch_size, k, pca_dims,
    candidates, leaf_size, seed)."""
    if va.channels != vb.channels:
        raise ValueError(f"b has {vb.channels} channels, a has {va.channels}: they must be "
                         f"equal")
    p, kk, dims, m, leaf, s = check_nnf_params(patch_size, k, pca_dims, candidates, leaf_size,
                                               seed, va.channels)
    if p > min(va.rows, va.cols, vb.rows, vb.cols):
        raise ValueError(f"patch_size {p} is larger than a ({va.rows}x{va.cols}) or b "
                         f"({vb.rows}x{vb.cols})")
    nb = (vb.rows - p + 1) * (vb.cols - p + 1)
    if m > nb:
        raise ValueError(f"candidates ({m}) must be at most the {nb} patches of b")
    return p, kk, dims, m, leaf, s


def reconstruct(matches: Matches, b: Any, *, runtime: Runtime | None = None) -> Any:
    """Image a rebuilt from `b`'s patches at the first neighbours of `matches` (an `nnf`
    result, or any step-1 Matches over a): each pixel the mean, over the patches of a
    covering it, of the pixel at the same offset in its matched patch of b. float32 of a's
    shape (with b's channels), NumPy or device array like `b`."""
    if not isinstance(matches, Matches):
        raise TypeError(f"matches must be clpatch Matches, got {type(matches).__name__}")
    positions = matches.positions
    if len(positions.shape) != 4 or positions.shape[-1] != 2:
        raise ValueError(f"matches must be an image field (rows, cols, k, 2), got positions "
                         f"of shape {tuple(positions.shape)}")
    if matches.step != 1:
        raise ValueError(f"matches must cover every patch of a (step 1), got step "
                         f"{matches.step}")
    p = int(matches.patch_size)
    vb = as_volume(b, name="b", video=False)
    hac, wac, k = (int(n) for n in positions.shape[:3])
    ha, wa = hac + p - 1, wac + p - 1
    host = positions.get() if hasattr(positions, "get") else np.asarray(positions)
    ys, xs = host[..., 0, 0], host[..., 0, 1]
    if ys.min() < 0 or xs.min() < 0 or ys.max() > vb.rows - p or xs.max() > vb.cols - p:
        raise ValueError(f"matches hold positions outside b's {vb.rows - p + 1}x"
                         f"{vb.cols - p + 1} patches (was the field computed for this b?)")
    rt = resolve_runtime(runtime, b)
    queue, i32, c = rt.queue, np.int32, vb.channels
    program = rt.programs.get("match/nnf_reconstruct.cl.mako", patch=p, channels=c)
    pool = BufferPool(rt.context)
    uploader = Uploader(rt, pool)
    uploader.begin()
    bbuf = pool.get("b", 4 * c * vb.rows * vb.cols)
    events = uploader.convert(vb, 0, 1, 0, vb.rows, bbuf)
    check_peak(uploader.peak([events[-1][1]]), magnitude_limit(p, c), "b")
    pos = pool.get("pos", 4 * host.size)
    wait = [cl.enqueue_copy(queue, pos, np.ascontiguousarray(host, np.int32),
                            is_blocking=False), events[-1][1]]
    out = pool.get("out", 4 * c * ha * wa)
    done = kernel(program, "nnf_reconstruct")(
        queue, (-(-wa // 64) * 64, ha), (64, 1), pos, i32(k), i32(ha), i32(wa), bbuf,
        i32(vb.rows), i32(vb.cols), out, wait_for=wait)
    planar = np.empty((c, ha, wa), np.float32)
    cl.enqueue_copy(queue, planar, out, wait_for=[done])
    image = np.ascontiguousarray(np.moveaxis(planar, 0, -1))
    if len(vb.array.shape) == 2:
        image = image[..., 0]
    if vb.on_device:
        device = rt.empty(image.shape, np.float32)
        device.set(image, queue=queue)
        return device
    return image
