"""NumPy float64 reference of VBM3D / colour VBM3D: the oracle of clpatch's VBM3D kernels.

VBM3D (Dabov, Foi, Egiazarian 2007) as described by Davy–Ehret §2.3 and §4.2: BM3D whose
block matching follows the motion through neighbouring frames. The grouping, filtering and
aggregation are BM3D's (:mod:`tests.reference.bm3d`, whose :func:`filter_stack` is used as
is); only the search and the frames the patches come from differ. This docstring is the
specification the GPU kernels are tested against.

Notation: video (T, H, W), patch size p, a patch is named by its top-left corner (t, y, x);
*valid* positions are ``0 <= y <= H−p``, ``0 <= x <= W−p``. ``half(w) = w // 2`` (a window
of size w spans offsets ``−w//2 … w//2``; odd sizes are the intended ones).

Search (:func:`vbm3d_search`), on a single-channel guide video, for one reference frame t_ref:

- reference patches: ``grid(H, p, step) × grid(W, p, step)`` of ``tests/reference/search``
  (0, step, 2·step, … plus the last position H−p, resp. W−p);
- distance ``d`` = sum over the p×p patch of squared differences between the reference patch
  (frame t_ref) and the candidate patch (in its own frame);
- candidates are totally ordered by the key ``(d, t, y, x)`` compared lexicographically
  (ties broken by frame, then row, then column; within one frame that is ``(d, y, x)``);
- reference frame: candidates = the valid positions with ``|y − ry| <= half(window_ref)`` and
  ``|x − rx| <= half(window_ref)`` (the reference itself included, d = 0); the q smallest by
  key form ``S[t_ref]`` (fewer when the window holds fewer than q valid positions);
- forward, ``f = t_ref+1 … min(T−1, t_ref+temporal_radius)``: the centres are the entries of
  ``S[f−1]``; the candidates of frame f are the UNION over the centres c of the valid
  positions with ``|y − c.y| <= half(window_pred)`` and ``|x − c.x| <= half(window_pred)``,
  each position counted once however many windows contain it; the q smallest by key → S[f];
- backward, ``f = t_ref−1 … max(0, t_ref−temporal_radius)``: the same with centres S[f+1];
- result: every kept entry of every frame, sorted by key, the first n: positions (t, y, x)
  and distances; when fewer than n exist the rest is padded with (−1, −1, −1) and +inf.

Groups (:func:`build_groups`; the rule of clpatch's BM3D kernel, ``cl_src/bm3d.cl.mako``):

- a candidate is *similar* when ``d <= tau·p²`` (tau: mean squared difference per pixel);
- the group is the reference patch (t_ref, ry, rx) first, then the result entries in order,
  skipping the reference itself where it is among them, the first k−1 of them;
- ``k`` = the largest power of 2 <= ``min(n, S)`` where S = the number of result entries with
  ``d <= tau·p²``, plus 1 when the reference is not among the n results (it can only be
  missing when n entries with d = 0 precede it, so then S = n + 1); k >= 1. This equals the
  largest power of 2 <= ``min(n, max(1, #{d <= tau·p²}))``, :func:`group_sizes`, which needs
  the distances only.

Filtering and aggregation (:func:`vbm3d_stage`), per channel, as BM3D (:func:`filter_stack`):

- stage 1: hard thresholding of the 3-D spectrum at ``lambda_3d·σ_c``, group weight
  ``1 / kept`` (1 when none is kept); stage 2: Wiener shrinkage with the spectrum of the
  same group cut from the basic estimate, weight ``1 / (σ_c² max(Σw², 2⁻¹⁰))``;
- EVERY patch of a group is aggregated into ITS OWN frame: numerator += weight·K·patch,
  denominator += weight·K (K the p×p Kaiser window of parameter beta) at (t, y, x) of that
  patch, so patches found in other frames contribute to those frames;
- every frame is a reference frame (all of them are searched and filtered before any
  division); the estimate of each frame is numerator / denominator.

Pipeline (:func:`vbm3d_reference`):

- stage 1 (basic estimate): groups searched on the noisy video, hard thresholding;
- stage 2 (final estimate): groups searched on the basic estimate, the noisy video filtered
  with the basic estimate's groups as Wiener oracle; ``stages=1`` returns the basic estimate;
- colour (T, H, W, 3) RGB: CBM3D's opponent space (``OPP`` of tests/reference/bm3d.py); the
  groups of both stages are matched on channel 0 (Y; the noisy Y in stage 1, the basic
  estimate's Y in stage 2) and shared by the three channels; channel c has the noise level
  ``σ_c = σ·‖OPP row c‖``; the result goes back to RGB with ``OPP_INV``;
- the matching thresholds ``tau_match`` are given for 0–255 data and are multiplied by
  ``(data_range / 255)²`` (``lambda_3d·σ`` is already in the image's units).

Guide video (:func:`vbm3d_reference`'s ``guide``, of the video's shape, colour guides in the
opponent space like the video, matching on its channel 0):

- ``guide_role="match"``: the searches of both stages run on the guide (stage 1 instead of
  the noisy video, stage 2 instead of the basic estimate); the filtering is unchanged (hard
  thresholding of the noisy video; Wiener filtering of the noisy video with the basic
  estimate as oracle);
- ``guide_role="oracle"``: the guide is the basic estimate: no stage 1; stage 2 searches on
  the guide and uses it as the Wiener oracle (needs ``stages=2``).

Given matches (:func:`vbm3d_reference`'s ``matches``, clpatch's ``matches=``): a stage's
result is not searched but given, positions (T, gy, gx, K, 3) as (t, y, x) and ascending
distances (T, gy, gx, K) for the references of every frame on the stage's grid; its first
n (the stage's largest group) are the result the groups are built from (:func:`build_groups`:
the reference first, then the entries in order without it). A stage given None searches.

Parameters (:data:`DEFAULTS`, (stage 1, stage 2) pairs where per-stage; every parameter but
``stages`` accepts a scalar for both stages or a pair): Davy–Ehret §4.2's search defaults
(p = 8, window_ref 7, window_pred 5, q = 2, n = 8, step 6 / 4), with their 8×8 patches in
stage 2 too (§2.3), ±4 frames, and the transforms of the original VBM3D (Bior1.5 / DCT, Haar).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .bm3d import OPP, OPP_INV, filter_stack, kaiser_window, pair
from .search import grid

# Stated here, not imported from clpatch (an oracle imports nothing from the code it checks).
DEFAULTS: dict[str, Any] = dict(
    patch_size=8,
    step=(6, 4),
    window_ref=(7, 7),
    window_pred=(5, 5),
    q=(2, 2),
    n=(8, 8),
    temporal_radius=4,
    tau_match=(3000.0, 1500.0),
    transform_2d=("bior1.5", "dct"),
    transform_1d=("haar", "haar"),
    lambda_3d=2.7,
    beta=2.0,
    stages=2,
)

#: Keys of one stage's parameter dict (see :func:`stage_params`).
STAGE_KEYS = tuple(k for k in DEFAULTS if k != "stages")
SEARCH_KEYS = ("patch_size", "step", "window_ref", "window_pred", "q", "n", "temporal_radius")

# Largest number of float64 patch values gathered at once (memory bound of the search).
_CHUNK_VALUES = 1 << 23

# --------------------------------------------------------------------------- search


def _window_offsets(window: int) -> np.ndarray:
    """(w², 2) offsets (dy, dx) of a window, raster order."""
    half = int(window) // 2
    r = np.arange(-half, half + 1)
    dy, dx = np.meshgrid(r, r, indexing="ij")
    return np.stack([dy.ravel(), dx.ravel()], -1)


def _select_in_frame(ref_patches, frame_view, centres, centre_ok, window, q):
    """The q best candidates of one frame for every reference.

    ref_patches (G, p, p); frame_view: sliding-window view (H−p+1, W−p+1, p, p) of the
    candidate frame; centres (G, m, 2) with centre_ok (G, m) saying which are real.
    Candidates: the union of the windows around the real centres, clipped to the valid
    positions. Returns (d, y, x, ok), each (G, q), ascending by (d, y, x); ok False (d inf,
    y = x = −1) where fewer than q candidates exist.
    """
    vy, vx = frame_view.shape[:2]
    offs = _window_offsets(window)
    cy = (centres[..., 0, None] + offs[:, 0]).reshape(len(centres), -1)     # (G, m·w²)
    cx = (centres[..., 1, None] + offs[:, 1]).reshape(len(centres), -1)
    ok = (np.repeat(centre_ok, len(offs), axis=1)
          & (cy >= 0) & (cy < vy) & (cx >= 0) & (cx < vx))
    # Union: sort each row by raster index (invalid last), drop repeated positions.
    flat = np.where(ok, cy * vx + cx, vy * vx)
    order = np.argsort(flat, axis=1, kind="stable")
    flat = np.take_along_axis(flat, order, 1)
    ok = np.take_along_axis(ok, order, 1)
    ok[:, 1:] &= flat[:, 1:] != flat[:, :-1]
    cy, cx = flat // vx, flat % vx                      # rows now in (y, x) order
    g, m = flat.shape
    p = ref_patches.shape[-1]
    d = np.full((g, m), np.inf)
    rows = max(1, _CHUNK_VALUES // max(1, m * p * p))
    for a in range(0, g, rows):
        b = min(g, a + rows)
        cand = frame_view[np.minimum(cy[a:b], vy - 1), np.minimum(cx[a:b], vx - 1)]
        diff = cand - ref_patches[a:b, None]
        d[a:b] = np.where(ok[a:b], (diff * diff).sum(axis=(-2, -1)), np.inf)
    # Stable sort by d of rows already in (y, x) order: the (d, y, x) order.
    best = np.argsort(d, axis=1, kind="stable")[:, :q]
    d = np.take_along_axis(d, best, 1)
    ok = np.take_along_axis(ok, best, 1)
    y = np.where(ok, np.take_along_axis(cy, best, 1), -1)
    x = np.where(ok, np.take_along_axis(cx, best, 1), -1)
    if best.shape[1] < q:                               # fewer candidates than q in all
        pad = q - best.shape[1]
        d = np.pad(d, ((0, 0), (0, pad)), constant_values=np.inf)
        ok = np.pad(ok, ((0, 0), (0, pad)), constant_values=False)
        y = np.pad(y, ((0, 0), (0, pad)), constant_values=-1)
        x = np.pad(x, ((0, 0), (0, pad)), constant_values=-1)
    return d, y, x, ok


def _check_search_params(guide, patch_size, step, window_ref, window_pred, q, n, temporal_radius):
    guide = np.asarray(guide, dtype=np.float64)
    if guide.ndim != 3:
        raise ValueError(f"guide must be a (T, H, W) video, got shape {guide.shape}")
    for name, value, low in (("patch_size", patch_size, 1), ("step", step, 1),
                             ("window_ref", window_ref, 1), ("window_pred", window_pred, 1),
                             ("q", q, 1), ("n", n, 1), ("temporal_radius", temporal_radius, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if guide.shape[1] < patch_size or guide.shape[2] < patch_size:
        raise ValueError(f"frames {guide.shape[1]}×{guide.shape[2]} are smaller than the patch "
                         f"size {patch_size}")
    return guide


def vbm3d_search(guide, t_ref: int, patch_size: int, step: int, window_ref: int, window_pred: int,
                 q: int, n: int, temporal_radius: int):
    """VBM3D's predictive search for the reference patches of frame ``t_ref`` (see the module
    docstring for the exact semantics).

    guide: (T, H, W) single-channel video. Returns ``(grid_y, grid_x, positions, distances)``:
    positions (gy, gx, n, 3) int64 as (t, y, x), distances (gy, gx, n) float64, sorted by the
    key (d, t, y, x), padded with (−1, −1, −1) / inf.
    """
    guide = _check_search_params(guide, patch_size, step, window_ref, window_pred, q, n,
                                 temporal_radius)
    frames, rows, cols = guide.shape
    if not 0 <= t_ref < frames:
        raise ValueError(f"t_ref must be in [0, {frames - 1}], got {t_ref}")
    p = patch_size
    gy, gx = grid(rows, p, step), grid(cols, p, step)
    ry, rx = [a.ravel() for a in np.meshgrid(gy, gx, indexing="ij")]      # (G,) raster order
    views = sliding_window_view(guide, (p, p), axis=(1, 2))                # (T, vy, vx, p, p)
    ref_patches = views[t_ref, ry, rx]                                     # (G, p, p)

    kept = {}                                           # frame -> (d, y, x, ok), each (G, q)
    centres = np.stack([ry, rx], -1)[:, None]           # the reference frame: one centre
    kept[t_ref] = _select_in_frame(ref_patches, views[t_ref], centres,
                                   np.ones(centres.shape[:2], bool), window_ref, q)
    for direction in (1, -1):
        prev = t_ref
        for f in range(t_ref + direction, t_ref + direction * (temporal_radius + 1), direction):
            if not 0 <= f < frames:
                break
            _, py, px, pok = kept[prev]
            kept[f] = _select_in_frame(ref_patches, views[f], np.stack([py, px], -1), pok,
                                       window_pred, q)
            prev = f

    # Merge all frames' kept entries by the key (d, t, y, x); padding sorts last.
    fs = sorted(kept)
    d = np.concatenate([kept[f][0] for f in fs], 1)
    ok = np.concatenate([kept[f][3] for f in fs], 1)
    t = np.concatenate([np.full_like(kept[f][1], f) for f in fs], 1)
    y = np.concatenate([kept[f][1] for f in fs], 1)
    x = np.concatenate([kept[f][2] for f in fs], 1)
    big = frames + rows + cols
    order = np.lexsort((np.where(ok, x, big), np.where(ok, y, big), np.where(ok, t, big),
                        np.where(ok, d, np.inf)), axis=-1)[:, :n]
    def take(a):
        return np.take_along_axis(a, order, 1)

    ok = take(ok)
    pos = np.where(ok[..., None], np.stack([take(t), take(y), take(x)], -1), -1)
    dist = np.where(ok, take(d), np.inf)
    if order.shape[1] < n:
        pad = n - order.shape[1]
        pos = np.pad(pos, ((0, 0), (0, pad), (0, 0)), constant_values=-1)
        dist = np.pad(dist, ((0, 0), (0, pad)), constant_values=np.inf)
    shape = (len(gy), len(gx), n)
    return gy, gx, pos.astype(np.int64).reshape(shape + (3,)), dist.reshape(shape)


def vbm3d_search_all(guide, patch_size: int, step: int, window_ref: int, window_pred: int, q: int,
                     n: int, temporal_radius: int):
    """:func:`vbm3d_search` for every reference frame: ``(grid_y, grid_x, positions (T, gy, gx,
    n, 3), distances (T, gy, gx, n))``."""
    guide = np.asarray(guide, dtype=np.float64)
    res = [vbm3d_search(guide, t, patch_size, step, window_ref, window_pred, q, n, temporal_radius)
           for t in range(guide.shape[0])]
    return res[0][0], res[0][1], np.stack([r[2] for r in res]), np.stack([r[3] for r in res])


# --------------------------------------------------------------------------- groups


def _floor_pow2(v: np.ndarray) -> np.ndarray:
    """Largest power of 2 <= v (v >= 1), exactly (frexp: v = m·2^e with 0.5 <= m < 1)."""
    _, e = np.frexp(np.maximum(np.asarray(v, dtype=np.int64), 1).astype(np.float64))
    return np.left_shift(1, e - 1).astype(np.int64)


def group_sizes(distances, tau: float, patch_size: int) -> np.ndarray:
    """Group size k per reference: the largest power of 2 <= ``min(n, S)``, S the number of
    entries with ``d <= tau·p²`` counting the reference itself (always the group's first
    patch) even when it is not among the results; k >= 1. distances (..., n) of
    :func:`vbm3d_search`; tau in the data's units² per pixel (already scaled by data_range).

    The reference can only be missing when all n results have d = 0 (they precede it in key
    order), i.e. S = n + 1 > n: so counting the entries with ``d <= tau·p²`` and flooring at 1
    gives the same k as the kernel's explicit rule (:func:`build_groups`).
    """
    distances = np.asarray(distances, dtype=np.float64)
    n = distances.shape[-1]
    similar = np.sum(distances <= tau * patch_size * patch_size, axis=-1)
    return _floor_pow2(np.clip(similar, 1, n))


def build_groups(positions, distances, t_ref: int, grid_y, grid_x, tau: float, patch_size: int):
    """The groups of one reference frame, by the rule of clpatch's BM3D filter kernel.

    positions (gy, gx, n, 3), distances (gy, gx, n) of :func:`vbm3d_search`. Returns
    (members (gy, gx, n, 3), k (gy, gx)): member 0 is the reference (t_ref, ry, rx), members
    1, 2, … the result entries in order without the reference; only the first k form the
    group (entries beyond it are −1 or unused results). k: the largest power of 2 <=
    ``min(n, #{d <= tau·p²} + (reference not among the results))``.
    """
    positions = np.asarray(positions)
    distances = np.asarray(distances, dtype=np.float64)
    n = distances.shape[-1]
    ref = np.stack(np.broadcast_arrays(t_ref, np.asarray(grid_y)[:, None],
                                       np.asarray(grid_x)[None, :]), -1)          # (gy, gx, 3)
    is_self = np.all(positions == ref[..., None, :], axis=-1)                     # (gy, gx, n)
    where = np.where(is_self.any(-1), np.argmax(is_self, -1), n)                  # n: absent
    similar = np.sum(distances <= tau * patch_size * patch_size, -1) + (where == n)
    k = _floor_pow2(np.minimum(similar, n))
    m = np.arange(1, n)                                                           # members 1..n−1
    j = (m - 1) + (m - 1 >= where[..., None])                                     # (gy, gx, n−1)
    others = np.take_along_axis(positions, np.minimum(j, n - 1)[..., None], -2)
    others = np.where((j < n)[..., None], others, -1)
    members = np.concatenate([ref[..., None, :], others], -2)
    return members.astype(np.int64), k


# --------------------------------------------------------------------------- stages


def stage_params(stage: int, data_range: float = 255.0, **overrides: Any) -> dict[str, Any]:
    """The parameter dict of one stage (keys :data:`STAGE_KEYS`): :data:`DEFAULTS` with
    ``overrides`` (scalars or (stage 1, stage 2) pairs), ``tau_match`` multiplied by
    ``(data_range / 255)²``. A patch size other than 8 switches the default 2-D transform to
    the DCT (Bior1.5 exists on 8 points only), as clpatch's BM3D does."""
    if stage not in (1, 2):
        raise ValueError(f"stage must be 1 or 2, got {stage!r}")
    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"unknown VBM3D parameter(s) {sorted(unknown)}; accepted: {sorted(DEFAULTS)}")
    cfg = dict(DEFAULTS)
    cfg.update({k: v for k, v in overrides.items() if v is not None})
    out = {key: pair(key, cfg[key])[stage - 1] for key in STAGE_KEYS}
    if out["patch_size"] != 8 and overrides.get("transform_2d") is None:
        out["transform_2d"] = "dct"
    if not data_range > 0:
        raise ValueError(f"data_range must be > 0, got {data_range}")
    out["tau_match"] = float(out["tau_match"]) * (float(data_range) / 255.0) ** 2
    return out


def vbm3d_stage(noisy_work, sigmas, stage_params_dict: dict[str, Any], stage: int, basic=None,
                groups=None) -> np.ndarray:
    """One VBM3D stage on a working-space video (T, H, W, C) (opponent space for colour).

    sigmas: per-channel noise std (length C, or a scalar). stage_params_dict: one stage's
    parameters (:func:`stage_params`; tau_match in the data's units). The groups are searched
    on channel 0 of ``noisy_work`` (stage 1) or of ``basic`` (stage 2) unless ``groups`` (the
    output of :func:`vbm3d_search_all`) is given. Stage 2 filters ``noisy_work`` with the
    groups cut from ``basic`` as Wiener oracle. Returns the stage's estimate (T, H, W, C).
    """
    prm = stage_params_dict
    noisy = np.asarray(noisy_work, dtype=np.float64)
    if noisy.ndim != 4:
        raise ValueError(f"noisy_work must be (T, H, W, C), got shape {noisy.shape}")
    frames, rows, cols, channels = noisy.shape
    if stage not in (1, 2):
        raise ValueError(f"stage must be 1 or 2, got {stage!r}")
    sigmas = np.broadcast_to(np.asarray(sigmas, dtype=np.float64), (channels,))
    if stage == 2:
        if basic is None:
            raise ValueError("stage 2 needs the basic estimate")
        basic = np.asarray(basic, dtype=np.float64)
        if basic.shape != noisy.shape:
            raise ValueError(f"basic shape {basic.shape} != noisy shape {noisy.shape}")
    p = int(prm["patch_size"])
    if groups is None:
        guide = noisy[..., 0] if stage == 1 else basic[..., 0]
        groups = vbm3d_search_all(guide, **{k: prm[k] for k in SEARCH_KEYS})
    gy, gx, positions, distances = groups

    members, sizes = [], []
    for t in range(frames):
        mem, k = build_groups(positions[t], distances[t], t, gy, gx, prm["tau_match"], p)
        members.append(mem.reshape(-1, *mem.shape[-2:]))
        sizes.append(k.ravel())
    members = np.concatenate(members)                  # (all references, n, 3)
    sizes = np.concatenate(sizes)

    kaiser = kaiser_window(p, prm["beta"])
    size = frames * rows * cols
    num = np.zeros((channels, size))
    den = np.zeros((channels, size))
    a = np.arange(p)
    noisy_views = sliding_window_view(noisy, (p, p), axis=(1, 2))          # (T, vy, vx, C, p, p)
    basic_views = None if basic is None else sliding_window_view(basic, (p, p), axis=(1, 2))
    for k in np.unique(sizes):
        sel = np.flatnonzero(sizes == k)
        batch = max(1, _CHUNK_VALUES // (k * p * p * channels))
        for s in range(0, len(sel), batch):
            mem = members[sel[s:s + batch], :k]                            # (B, k, 3)
            ts, ys, xs = mem[..., 0], mem[..., 1], mem[..., 2]
            flat = (((ts[..., None, None] * rows + ys[..., None, None] + a[:, None]) * cols)
                    + xs[..., None, None] + a[None, :]).ravel()
            stacks = noisy_views[ts, ys, xs]                               # (B, k, C, p, p)
            oracles = None if basic_views is None else basic_views[ts, ys, xs]
            for c in range(channels):
                est, weight = filter_stack(
                    stacks[:, :, c], sigmas[c], stage=stage,
                    oracle=None if oracles is None else oracles[:, :, c],
                    transform_2d=prm["transform_2d"], transform_1d=prm["transform_1d"],
                    lambda_3d=prm["lambda_3d"])
                wk = np.broadcast_to(weight[:, None, None, None] * kaiser, est.shape)
                num[c] += np.bincount(flat, weights=(wk * est).ravel(), minlength=size)
                den[c] += np.bincount(flat, weights=wk.ravel(), minlength=size)
    return (num / den).T.reshape(frames, rows, cols, channels)


def given_result(matches, rows: int, cols: int, prm: dict[str, Any]):
    """:func:`vbm3d_search_all`'s result for a stage given ``matches`` (positions (T, gy, gx,
    K, 3), distances (T, gy, gx, K)) on frames of (rows, cols): the stage's grid and the
    first n (``prm["n"]``) entries of every reference."""
    p, n = int(prm["patch_size"]), int(prm["n"])
    positions, distances = (np.asarray(a) for a in matches)
    gy, gx = grid(rows, p, prm["step"]), grid(cols, p, prm["step"])
    if positions.shape[1:3] != (len(gy), len(gx)) or positions.shape[-2] < n:
        raise ValueError(f"given matches of shape {positions.shape} do not hold n={n} entries "
                         f"of the {len(gy)}x{len(gx)} grid")
    return (gy, gx, positions[..., :n, :].astype(np.int64),
            np.asarray(distances, dtype=np.float64)[..., :n])


def vbm3d_reference(video, sigma: float, *, k=None, data_range: float = 255.0, guide=None,
                    guide_role: str = "match", matches=None, **params: Any) -> np.ndarray:
    """VBM3D of a (T, H, W) grayscale or colour VBM3D of a (T, H, W, 3) RGB video (float64,
    the input's shape). k: the largest group (clpatch.vbm3d's k; a scalar or a (stage 1,
    stage 2) pair; None: the default), the ``n`` of :data:`DEFAULTS`. params: any other key
    of :data:`DEFAULTS` (scalars or (stage 1, stage 2) pairs where per-stage; ``stages=1``
    returns the basic estimate). The matching thresholds
    are scaled by ``(data_range / 255)²``. guide: None or a video of the input's shape,
    guide_role "match" or "oracle" (module docstring). matches: None or a (stage 1, stage 2)
    pair of given matches (positions, distances), None for a stage that searches (module
    docstring; not with a guide)."""
    sigma = float(sigma)
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma must be a finite number > 0, got {sigma}")
    vid = np.asarray(video, dtype=np.float64)
    shape = vid.shape
    if vid.ndim == 4 and vid.shape[-1] == 1:
        vid = vid[..., 0]
    if vid.ndim == 3:
        work, colour, sigmas = vid[..., None], False, np.array([sigma])
    elif vid.ndim == 4 and vid.shape[-1] == 3:
        work, colour = vid @ OPP.T, True
        sigmas = sigma * np.sqrt((OPP ** 2).sum(1))
    else:
        raise ValueError(f"video must be (T, H, W), (T, H, W, 1) or (T, H, W, 3), got shape {shape}")
    stages = params.pop("stages", DEFAULTS["stages"])
    if stages not in (1, 2):
        raise ValueError(f"stages must be 1 or 2, got {stages!r}")
    if guide_role not in ("match", "oracle"):
        raise ValueError(f"guide_role must be 'match' or 'oracle', got {guide_role!r}")
    if "n" in params:
        raise TypeError("vbm3d_reference takes the largest group as k, not n")
    p1 = stage_params(1, data_range, n=k, **params)
    p2 = stage_params(2, data_range, n=k, **params)
    if matches is not None:
        if guide is not None:
            raise ValueError("given matches replace the search: no guide")
        rows, cols = work.shape[1:3]
        groups = [None if m is None else given_result(m, rows, cols, prm)
                  for m, prm in zip(matches, (p1, p2), strict=True)]
        out = vbm3d_stage(work, sigmas, p1, 1, groups=groups[0])
        if stages == 2:
            out = vbm3d_stage(work, sigmas, p2, 2, basic=out, groups=groups[1])
    elif guide is None:
        if guide_role != "match":
            raise ValueError("guide_role 'oracle' needs a guide")
        basic = vbm3d_stage(work, sigmas, p1, 1)
        out = basic
        if stages == 2:
            out = vbm3d_stage(work, sigmas, p2, 2, basic=basic)
    else:
        g = np.asarray(guide, dtype=np.float64)
        if g.shape != shape:
            raise ValueError(f"guide shape {g.shape} != video shape {shape}")
        g_work = g @ OPP.T if colour else g.reshape(work.shape)
        if guide_role == "oracle":
            if stages != 2:
                raise ValueError("guide_role 'oracle' needs stages=2")
            out = vbm3d_stage(work, sigmas, p2, 2, basic=g_work)
        else:
            def groups(prm):
                return vbm3d_search_all(g_work[..., 0], **{k: prm[k] for k in SEARCH_KEYS})

            out = vbm3d_stage(work, sigmas, p1, 1, groups=groups(p1))
            if stages == 2:
                out = vbm3d_stage(work, sigmas, p2, 2, basic=out, groups=groups(p2))
    if colour:
        return out @ OPP_INV.T
    return out.reshape(shape)
