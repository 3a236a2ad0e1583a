"""NumPy reference ("oracle") of the clustering approximate-nearest-neighbour search of
Tsai, Steinberger, Pająk and Pulli (per-tile hierarchical clustering, each node cut at
the median along the principal direction of a sub-sample, then each cluster's k nearest
patches among its own and its neighbouring clusters), written from the
algorithm's specification (the docstring of clpatch/match/ann/params.py, restated below)
and nothing of clpatch: tile geometry, grid and arithmetic are all re-implemented here.

Every rounding and ordering rule is followed literally, so that the OpenCL implementation
returns bit-identical positions and distances on integer-valued images.

Specification
-------------
- Frames: (T, H, W, C) float32; a single image is one frame (`as_frames`). Patches are
  p × p, their top-left positions form the plane Py × Px (Py = H − p + 1, Px = W − p + 1).
- Tiles: each axis of the plane is cut into max(1, P // tile) runs; run i starts at
  i · tile, the last ends at P (`tile_runs`). With an origin o > 0 on an axis (leaving at
  least two runs: P − o ≥ 2 · tile), there are (P − o) // tile runs, run i ≥ 1 starting
  at o + i · tile, run 0 at 0. A tile is a run of rows × a run of columns
  and holds the positions of every frame; its slots 0 … M − 1 number them in the order
  (frame, row, column).
- Patch vector: D = C · p · p values ordered (channel, row, column). Every distance
  (patch–patch and patch–centre) is acc = float32(acc + float32(diff · diff)),
  diff = float32(a − b), over d = 0 … D − 1 in order, acc starting at 0 (`distances`).
- Clustering (`cluster`): a node is a run of slots [lo, hi), the root the whole tile; a node
  of at most LEAF (32) patches is a leaf, a larger one (m patches) is split (`split_node`):
  1. samples j = 0 … 15 (SAMPLES) at slots lo + (j · m) // 16;
  2. their mean mu = (float32 sum over j in order) · (1/16) (exact: a power of two);
     z_j = float32(s_j − mu) per value;
  3. Gram matrix G_ij = Σ_d float32(z_i,d · z_j,d), summed in float32 in d order (so
     G_ij = G_ji); trace = Σ_j G_jj in j order; trace == 0 (the samples are all equal) →
     halves, the first m // 2 slots and the rest;
  4. POWER_ITERATIONS (8) power iterations from v = diag(G): w_i = Σ_j float32(G_ij · v_j)
     in j order; t = max_i |w_i|; when 0 < t < inf, v = w · 2^−e with e the exponent of
     t (t = f · 2^e, 0.5 ≤ f < 1: an exact scaling), else v stays;
  5. direction u = Σ_j float32(v_j · z_j) per value, summed in float32 in j order (the
     principal direction of the samples); every patch's key is Σ_d float32(x_d · u_d),
     summed in float32 in d order (`keys`);
  6. balanced split at the median: a patch's rank is the number of the node's patches
     with a smaller key, or an equal key at an earlier slot; the m // 2 patches of rank
     below m // 2 are the left child, the others the right one, each in slot order (a
     stable partition). (u = 0 gives equal keys, hence the halves too.)
  The leaves, in slot order, are the clusters; a node of m patches has children of m // 2
  and m − m // 2, so the tree's shape depends on M alone.
- Query: a reference patch in cluster L takes cluster L, then L + 1, L − 1, L + 2, L − 2, …
  (indices outside [0, nclusters) skipped), adding clusters while fewer than
  1 + neighbour_clusters clusters or fewer than k patches are taken (and clusters remain).
  The candidates are the contiguous run of (clustered) slots they cover; they are ranked
  the patch itself first, then by (distance, slot), the slot being the position after
  clustering; the first k are the result.
- References: the patches of frame `reference` whose top-left corner lies on the grid
  (`grid`: 0, step, 2 · step, … plus the last position of each axis); candidates come from
  every frame of the reference's tile.

`exact_in_tile` is the exact counterpart (all patches of the tile are candidates, ties by
the unclustered (frame, row, column) slot) and `quality` compares the two (recall and
Tsai's D_ann / D_knn).

Conventions: positions int32 as (t, y, x) (`ann`, `exact_in_tile`) or (y, x) (`ann_image`),
distances float32, both indexed by (grid row, grid column, rank).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

F32 = np.float32

LEAF = 32              # a node of at most LEAF patches is a cluster
SAMPLES = 16           # sub-sample of a node whose principal direction splits it
POWER_ITERATIONS = 8   # power iterations for that direction
_CHUNK = 1 << 21   # elements of one broadcast difference block in `distances`


# ----------------------------------------------------------------------------- geometry


def grid(size: int, patch_size: int, step: int) -> np.ndarray:
    """Top-left coordinates of the reference patches along one axis (int32):
    0, step, 2 · step, … plus size − patch_size when it is not already the last."""
    last = size - patch_size
    assert last >= 0, f"patch_size {patch_size} does not fit size {size}"
    assert step >= 1, f"step must be >= 1, got {step}"
    values = list(range(0, last + 1, step))
    if values[-1] != last:
        values.append(last)
    return np.array(values, dtype=np.int32)


def tile_runs(positions: int, tile: int, origin: int = 0) -> list[tuple[int, int]]:
    """The (start, end) runs of one axis of `positions` top-left positions: max(1,
    (positions − origin) // tile) runs, run i ≥ 1 starting at origin + i · tile, run 0 at
    0, the last one ending at positions."""
    assert positions >= 1 and tile >= 1
    assert origin == 0 or positions - origin >= 2 * tile, "the origin leaves one run"
    runs = max(1, (positions - origin) // tile)
    starts = [0] + [origin + i * tile for i in range(1, runs)]
    return list(zip(starts, starts[1:] + [positions], strict=True))


# ----------------------------------------------------------------------------- patches


def as_frames(image) -> np.ndarray:
    """(1, H, W, C) float32 copy of one image given as (H, W) or (H, W, C)."""
    data = np.asarray(image).astype(np.float32)
    if data.ndim == 2:
        data = data[..., None]
    assert data.ndim == 3, f"image must be (H, W) or (H, W, C), got shape {data.shape}"
    return np.ascontiguousarray(data[None])


def _check_frames(frames) -> np.ndarray:
    data = np.asarray(frames).astype(np.float32)
    assert data.ndim == 4, f"frames must be (T, H, W, C), got shape {data.shape}"
    return data


def patch_windows(frames: np.ndarray, patch_size: int) -> np.ndarray:
    """(T, Py, Px, C, p, p) view of every patch of (T, H, W, C) frames."""
    return sliding_window_view(frames, (patch_size, patch_size), axis=(1, 2))


def tile_vectors(windows: np.ndarray, rows: tuple[int, int], cols: tuple[int, int]
                 ) -> np.ndarray:
    """(M, D) float32 patch matrix of one tile: row = slot in (frame, row, column) order,
    column d = (c · p + i) · p + j."""
    block = windows[:, rows[0]:rows[1], cols[0]:cols[1]]
    return np.ascontiguousarray(block.reshape(-1, int(np.prod(block.shape[3:]))),
                                dtype=np.float32)


# ----------------------------------------------------------------------------- distances


def distances(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(n, m) float32: the distance of every row of x (n, D) to every row of y (m, D), each
    the sequential float32 sum over d = 0 … D − 1 of float32(diff · diff),
    diff = float32(x − y), every operation rounded on its own. (np.cumsum along d is
    that sequential sum: out[d] = float32(out[d − 1] + in[d]).)"""
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    assert x.ndim == 2 and y.ndim == 2 and x.shape[1] == y.shape[1]
    n, m, d = x.shape[0], y.shape[0], x.shape[1]
    out = np.empty((n, m), dtype=np.float32)
    if n == 0 or m == 0:
        return out
    if d == 0:
        out[:] = 0
        return out
    rows = max(1, _CHUNK // max(1, m * d))
    yt = np.ascontiguousarray(y.T)                      # (D, m)
    xt = np.ascontiguousarray(x.T)                      # (D, n)
    for a in range(0, n, rows):
        b = min(n, a + rows)
        diff = xt[:, a:b, None] - yt[:, None, :]        # (D, rows, m) float32
        np.multiply(diff, diff, out=diff)
        np.cumsum(diff, axis=0, dtype=np.float32, out=diff)
        out[a:b] = diff[-1]
    return out


def _sum_rows(a: np.ndarray) -> np.ndarray:
    """Per column: the float32 sum of the rows of a (n, D) in row order."""
    return np.cumsum(a, axis=0, dtype=np.float32)[-1]


# ----------------------------------------------------------------------------- clustering


def keys(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """(m,) float32: Σ_d float32(x_d · u_d) of every row of x (m, D), summed in float32 in
    the order of d, every operation rounded on its own."""
    x = np.asarray(x, dtype=np.float32)
    if x.shape[0] == 0 or x.shape[1] == 0:
        return np.zeros(x.shape[0], np.float32)
    products = (x * np.asarray(u, dtype=np.float32)[None, :]).astype(np.float32)
    return np.cumsum(products, axis=1, dtype=np.float32)[:, -1]


def samples_of(x: np.ndarray) -> np.ndarray:
    """(SAMPLES, D): step 1, the sub-sample of a node whose patches are the rows of x."""
    m = x.shape[0]
    return np.asarray(x, dtype=np.float32)[(np.arange(SAMPLES) * m) // SAMPLES]


def gram(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z, G): steps 2–3, the centred samples (S, D) and their Gram matrix (S, S)."""
    mean = (_sum_rows(samples) * np.float32(1.0 / SAMPLES)).astype(np.float32)
    z = (samples - mean[None, :]).astype(np.float32)
    if z.shape[1] == 0:
        return z, np.zeros((z.shape[0], z.shape[0]), np.float32)
    products = (z[:, None, :] * z[None, :, :]).astype(np.float32)
    return z, np.cumsum(products, axis=2, dtype=np.float32)[..., -1]


def direction(x: np.ndarray) -> np.ndarray | None:
    """(D,) float32: steps 1–5, the direction u of a node whose patches (in slot order) are
    the rows of x (m, D); None when its samples are all equal (halves)."""
    z, g = gram(samples_of(x))
    diagonal = np.diagonal(g).astype(np.float32)
    if _sum_rows(diagonal[:, None])[0] == 0:
        return None
    v = diagonal.copy()
    for _ in range(POWER_ITERATIONS):
        w = np.cumsum((g * v[None, :]).astype(np.float32), axis=1, dtype=np.float32)[:, -1]
        top = np.abs(w).max()
        if 0 < top < np.inf:
            _, exponent = np.frexp(top)
            v = np.ldexp(w, -exponent).astype(np.float32)
    return _sum_rows((v[:, None] * z).astype(np.float32))


def split_node(x: np.ndarray) -> tuple[np.ndarray, int]:
    """(permutation of the node's m > LEAF slots, m0 = m // 2): steps 1–6 of the split of a
    node whose patches (in slot order) are the rows of x (m, D)."""
    m = x.shape[0]
    u = direction(x)
    if u is None:
        return np.arange(m), m // 2         # the samples are all equal: halves
    key = keys(x, u)
    slot = np.arange(m)
    before = (key[None, :] < key[:, None]) | ((key[None, :] == key[:, None])
                                              & (slot[None, :] < slot[:, None]))
    rank = before.sum(axis=1)
    left = rank < m // 2
    return np.concatenate([np.flatnonzero(left), np.flatnonzero(~left)]), m // 2


def cluster(vectors: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """(order, leaves) of one tile's patch matrix (M, D): order[s] is the unclustered slot
    of the patch at clustered slot s; leaves are the clusters' (lo, hi) in slot order."""
    vectors = np.asarray(vectors, dtype=np.float32)
    order = np.arange(vectors.shape[0])
    leaves: list[tuple[int, int]] = []
    stack = [(0, vectors.shape[0])]
    while stack:
        lo, hi = stack.pop()
        if hi - lo <= LEAF:
            leaves.append((lo, hi))
            continue
        node = order[lo:hi]
        perm, m0 = split_node(vectors[node])
        order[lo:hi] = node[perm]
        stack.append((lo + m0, hi))         # right child, split after the left one
        stack.append((lo, lo + m0))
    assert all(a[1] == b[0] for a, b in zip(leaves, leaves[1:], strict=False))
    return order, leaves


def candidate_run(leaves: list[tuple[int, int]], cluster_index: int, k: int,
                  neighbour_clusters: int) -> tuple[int, int]:
    """(lo, hi) clustered slots of the candidates of a patch in cluster `cluster_index`."""
    n = len(leaves)
    a = b = cluster_index
    taken = 1
    sequence = (c for j in range(1, n) for c in (cluster_index + j, cluster_index - j)
                if 0 <= c < n)
    for c in sequence:
        if taken >= 1 + neighbour_clusters and leaves[b][1] - leaves[a][0] >= k:
            break
        a, b = min(a, c), max(b, c)
        taken += 1
    return leaves[a][0], leaves[b][1]


def _rank(dist: np.ndarray, keys: np.ndarray, me: np.ndarray, k: int) -> np.ndarray:
    """(R, k) column indices of the first k candidates of each row: the column `me[r]`
    first, then by (dist, keys)."""
    rows = dist.shape[0]
    not_self = np.ones(dist.shape, dtype=bool)
    not_self[np.arange(rows), me] = False
    key = np.broadcast_to(keys, dist.shape)
    return np.lexsort((key, dist, not_self), axis=-1)[:, :k]


# ----------------------------------------------------------------------------- search


def _setup(frames, patch_size, k, tile, step, reference, origin=(0, 0)):
    data = _check_frames(frames)
    t, h, w, _ = data.shape
    p = patch_size
    assert 1 <= p <= min(h, w), f"patch_size {p} does not fit {h}x{w}"
    assert 0 <= reference < t, f"reference frame {reference} outside [0, {t})"
    assert k >= 1 and tile >= 1
    py, px = h - p + 1, w - p + 1
    gy, gx = grid(h, p, step), grid(w, p, step)
    runs_y, runs_x = tile_runs(py, tile, origin[0]), tile_runs(px, tile, origin[1])
    smallest = t * min(b - a for a, b in runs_y) * min(b - a for a, b in runs_x)
    assert k <= smallest, f"k={k} exceeds the smallest tile's {smallest} patches"
    return data, gy, gx, runs_y, runs_x


def _tiles(gy, gx, runs_y, runs_x):
    """Per tile: its runs and the grid indices/coordinates of its references."""
    for ya, yb in runs_y:
        iy = np.flatnonzero((gy >= ya) & (gy < yb))
        for xa, xb in runs_x:
            ix = np.flatnonzero((gx >= xa) & (gx < xb))
            if iy.size and ix.size:
                yield (ya, yb), (xa, xb), iy, ix


def _search(frames, *, patch_size, k, tile, step, reference, neighbour_clusters, exact,
            origin=(0, 0)):
    data, gy, gx, runs_y, runs_x = _setup(frames, patch_size, k, tile, step, reference, origin)
    windows = patch_windows(data, patch_size)
    positions = np.empty((gy.size, gx.size, k, 3), dtype=np.int32)
    dists = np.empty((gy.size, gx.size, k), dtype=np.float32)
    for (ya, yb), (xa, xb), iy, ix in _tiles(gy, gx, runs_y, runs_x):
        rows, cols = yb - ya, xb - xa
        vec = tile_vectors(windows, (ya, yb), (xa, xb))
        m = vec.shape[0]
        slot_t, rest = np.divmod(np.arange(m), rows * cols)
        slot_y, slot_x = ya + rest // cols, xa + rest % cols
        # references of the tile (grid row index, grid column index, unclustered slot)
        ref_i = np.repeat(iy, ix.size)
        ref_j = np.tile(ix, iy.size)
        ref_slot = (reference * rows * cols + (gy[ref_i] - ya) * cols + (gx[ref_j] - xa))
        if exact:
            # candidates: every slot; the reference is its own column; ties by slot
            groups = [(ref_slot, np.arange(m), ref_slot, np.arange(m))]
            sel = [np.arange(ref_slot.size)]
        else:
            order, leaves = cluster(vec)
            where = np.empty(m, dtype=np.int64)
            where[order] = np.arange(m)
            leaf_id = np.empty(m, dtype=np.int64)
            for index, (lo, hi) in enumerate(leaves):
                leaf_id[lo:hi] = index
            ref_leaf = leaf_id[where[ref_slot]]
            groups, sel = [], []
            for index in np.unique(ref_leaf):
                mine = np.flatnonzero(ref_leaf == index)
                lo, hi = candidate_run(leaves, int(index), k, neighbour_clusters)
                assert hi - lo >= k, f"a tile of {m} patches cannot give k={k}"
                # candidates: unclustered slots order[lo:hi]; ties by clustered slot
                groups.append((ref_slot[mine], order[lo:hi], where[ref_slot[mine]] - lo,
                               np.arange(lo, hi)))
                sel.append(mine)
        for (refs, cand, me, keys), mine in zip(groups, sel, strict=True):
            d = distances(vec[refs], vec[cand])
            best = _rank(d, keys, me, k)
            chosen = cand[best]
            a, b = ref_i[mine], ref_j[mine]
            positions[a, b, :, 0] = slot_t[chosen]
            positions[a, b, :, 1] = slot_y[chosen]
            positions[a, b, :, 2] = slot_x[chosen]
            dists[a, b] = np.take_along_axis(d, best, axis=1)
    return positions, dists


def ann(frames, *, patch_size: int = 8, k: int = 16, tile: int = 15, step: int = 1,
        neighbour_clusters: int = 0, reference: int = 0, origin=(0, 0)):
    """(positions int32 (gy, gx, k, 3) as (t, y, x), distances float32 (gy, gx, k)): the
    clustering ANN of the grid patches of frame `reference` of (T, H, W, C) frames, in the
    tiling of `origin` (y, x)."""
    assert neighbour_clusters >= 0
    return _search(frames, patch_size=patch_size, k=k, tile=tile, step=step,
                   reference=reference, neighbour_clusters=neighbour_clusters, exact=False,
                   origin=origin)


def ann_image(image, *, patch_size: int = 8, k: int = 16, tile: int = 15, step: int = 1,
              neighbour_clusters: int = 0, origin=(0, 0)):
    """(positions int32 (gy, gx, k, 2) as (y, x), distances float32 (gy, gx, k)): `ann` of a
    single (H, W) or (H, W, C) image."""
    pos, dist = ann(as_frames(image), patch_size=patch_size, k=k, tile=tile, step=step,
                    neighbour_clusters=neighbour_clusters, origin=origin)
    return np.ascontiguousarray(pos[..., 1:]), dist


def _centre_distance(coords: np.ndarray, positions: int, tile: int, origin: int) -> np.ndarray:
    """|2c − (start + end − 1)| of each coordinate's run [start, end) in the tiling."""
    out = np.empty(len(coords), dtype=np.int64)
    for a, b in tile_runs(positions, tile, origin):
        sel = (coords >= a) & (coords < b)
        out[sel] = np.abs(2 * coords[sel] - (a + b - 1))
    return out


def ann_pair_image(image, *, patch_size: int = 8, k: int = 16, tile: int = 15,
                   step: int = 1, neighbour_clusters: int = 0):
    """`ann_image` on two tilings of one image (the filters' search): the plain one and the
    one whose origin on each axis is tile // 2 where that leaves two runs (else 0); each
    reference takes its result from the tiling where max(|2y − (y0 + y1 − 1)|,
    |2x − (x0 + x1 − 1)|) of its tile [y0, y1) × [x0, x1) is smaller, the plain one where
    equal."""
    frames = as_frames(image)
    _, h, w, _ = frames.shape
    p, half = patch_size, tile // 2
    py, px = h - p + 1, w - p + 1
    origin = tuple(half if n - half >= 2 * tile else 0 for n in (py, px))
    options = dict(patch_size=p, k=k, tile=tile, step=step,
                   neighbour_clusters=neighbour_clusters)
    pos, dist = ann_image(image, **options)
    if origin == (0, 0):
        return pos, dist
    pos2, dist2 = ann_image(image, origin=origin, **options)
    gy, gx = grid(h, p, step), grid(w, p, step)
    plain = np.maximum(_centre_distance(gy, py, tile, 0)[:, None],
                       _centre_distance(gx, px, tile, 0)[None, :])
    shifted = np.maximum(_centre_distance(gy, py, tile, origin[0])[:, None],
                         _centre_distance(gx, px, tile, origin[1])[None, :])
    second = shifted < plain
    return (np.where(second[..., None, None], pos2, pos),
            np.where(second[..., None], dist2, dist))


def exact_in_tile(frames, *, patch_size: int, k: int, tile: int, step: int = 1,
                  reference: int = 0):
    """The exact k nearest patches of every grid reference among all patches of its tile
    (all frames): the reference itself first, then by (distance, slot), slot in the tile's
    (frame, row, column) order. Same layout as `ann`; same float32 distances."""
    return _search(frames, patch_size=patch_size, k=k, tile=tile, step=step,
                   reference=reference, neighbour_clusters=0, exact=True)


def exact_in_tile_image(image, *, patch_size: int, k: int, tile: int, step: int = 1):
    """`exact_in_tile` of a single image: positions (gy, gx, k, 2) as (y, x)."""
    pos, dist = exact_in_tile(as_frames(image), patch_size=patch_size, k=k, tile=tile,
                              step=step)
    return np.ascontiguousarray(pos[..., 1:]), dist


# ----------------------------------------------------------------------------- quality


def quality(ann_dist, exact_dist, ann_pos, exact_pos) -> tuple[float, float]:
    """(recall, ratio): recall = the fraction of the exact neighbours (as a set per
    reference) that the ANN returned; ratio = Σ ANN distances / Σ exact distances (Tsai's
    D_ann / D_knn; 1.0 when both are 0)."""
    ann_pos = np.asarray(ann_pos)
    exact_pos = np.asarray(exact_pos)
    assert ann_pos.shape[:-2] == exact_pos.shape[:-2]
    assert ann_pos.shape[-1] == exact_pos.shape[-1]
    c = ann_pos.shape[-1]
    a = ann_pos.reshape(-1, ann_pos.shape[-2], c)
    e = exact_pos.reshape(-1, exact_pos.shape[-2], c)
    hit = (e[:, :, None, :] == a[:, None, :, :]).all(-1).any(-1)    # (R, k_exact)
    recall = float(hit.mean()) if hit.size else 1.0
    d_ann = float(np.asarray(ann_dist, dtype=np.float64).sum())
    d_exact = float(np.asarray(exact_dist, dtype=np.float64).sum())
    if d_exact == 0:
        ratio = 1.0 if d_ann == 0 else float("inf")
    else:
        ratio = d_ann / d_exact
    return recall, ratio
