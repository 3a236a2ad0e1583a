"""The clustering-ANN oracle (tests/reference/ann.py) against literal loops, float64
brute force and its own exact counterpart. Pure NumPy: no OpenCL, so the oracle is trusted
before it judges the library's ANN."""

from __future__ import annotations

import numpy as np
import pytest

from tests.reference.ann import (
    LEAF,
    POWER_ITERATIONS,
    SAMPLES,
    ann,
    ann_image,
    as_frames,
    candidate_run,
    cluster,
    distances,
    exact_in_tile,
    exact_in_tile_image,
    grid,
    patch_windows,
    quality,
    split_node,
    tile_runs,
    tile_vectors,
)
from tests.reference.images import smooth_image

F32 = np.float32


def burst(frames, size, seed, noise=4.0):
    """(T, size, size, 1) integer-valued frames: shifted crops of one smooth image + noise."""
    base = smooth_image((size + 2 * frames, size + 3 * frames), seed, clip=True)
    rng = np.random.default_rng(seed + 1)
    out = np.stack([base[t:t + size, 2 * t:2 * t + size] for t in range(frames)])
    out = np.round(out + rng.normal(0, noise, out.shape))
    return out[..., None].astype(np.float32)


def tile_index(coordinate, positions, tile):
    """Run of one axis holding a coordinate (array), from `tile_runs`."""
    runs = tile_runs(positions, tile)
    starts = np.array([a for a, _ in runs])
    return np.searchsorted(starts, coordinate, side="right") - 1


def patch64(frames, t, y, x, p):
    """(C, p, p) float64 patch of frame t at (y, x)."""
    return np.moveaxis(frames[t, y:y + p, x:x + p].astype(np.float64), -1, 0)


# ----------------------------------------------------------------------------- geometry


def test_grid():
    assert grid(10, 3, 1).tolist() == list(range(8))
    assert grid(10, 3, 3).tolist() == [0, 3, 6, 7]
    assert grid(9, 3, 3).tolist() == [0, 3, 6]
    assert grid(5, 5, 4).tolist() == [0]
    assert grid(10, 3, 3).dtype == np.int32


def test_tile_runs_geometry():
    for positions in range(1, 90):
        for tile in range(1, 24):
            runs = tile_runs(positions, tile)
            assert len(runs) == max(1, positions // tile)
            assert runs[0][0] == 0 and runs[-1][1] == positions
            for (a0, a1), (b0, _) in zip(runs, runs[1:], strict=False):
                assert a1 == b0 and a1 - a0 == tile
            for i, (a, _) in enumerate(runs):
                assert a == i * tile
            last = runs[-1][1] - runs[-1][0]
            if positions >= tile:
                assert tile <= last <= 2 * tile - 1
            else:
                assert last == positions


def test_tile_vectors_element_order():
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 1000, (2, 7, 8, 3)).astype(np.float32)
    p = 3
    win = patch_windows(frames, p)
    rows, cols = (1, 4), (2, 6)
    vec = tile_vectors(win, rows, cols)
    nr, nc = rows[1] - rows[0], cols[1] - cols[0]
    assert vec.shape == (2 * nr * nc, 3 * p * p) and vec.dtype == np.float32
    for s in range(vec.shape[0]):
        t, rest = divmod(s, nr * nc)
        y, x = rows[0] + rest // nc, cols[0] + rest % nc
        for c in range(3):
            for i in range(p):
                for j in range(p):
                    assert vec[s, (c * p + i) * p + j] == frames[t, y + i, x + j, c]


# ----------------------------------------------------------------------------- arithmetic


def literal_distance(a, b):
    acc = F32(0)
    for d in range(a.shape[0]):
        diff = F32(F32(a[d]) - F32(b[d]))
        acc = F32(acc + F32(diff * diff))
    return acc


def test_distances_are_the_sequential_float32_sum():
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(9, 75)) * 37.3).astype(np.float32)
    y = (rng.normal(size=(6, 75)) * 11.1 + 3.7).astype(np.float32)
    d = distances(x, y)
    assert d.dtype == np.float32 and d.shape == (9, 6)
    for i in range(9):
        for j in range(6):
            assert d[i, j] == literal_distance(x[i], y[j])
    assert np.array_equal(distances(x[:1], x[:1]), np.zeros((1, 1), F32))


def literal_sum(values):
    acc = F32(0)
    for v in values:
        acc = F32(acc + F32(v))
    return acc


def literal_split(x):
    """Steps 1–6 of a node split, written as the specification reads (scalar loops)."""
    m, dim = x.shape
    halves = (list(range(m)), m // 2)
    samples = [x[(j * m) // SAMPLES] for j in range(SAMPLES)]
    mean = [F32(literal_sum(s[d] for s in samples) * F32(1 / SAMPLES)) for d in range(dim)]
    z = [[F32(F32(s[d]) - mean[d]) for d in range(dim)] for s in samples]
    g = [[literal_sum(F32(zi[d] * zj[d]) for d in range(dim)) for zj in z] for zi in z]
    if literal_sum(g[j][j] for j in range(SAMPLES)) == 0:
        return halves
    v = [g[j][j] for j in range(SAMPLES)]
    for _ in range(POWER_ITERATIONS):
        w = [literal_sum(F32(g[i][j] * v[j]) for j in range(SAMPLES)) for i in range(SAMPLES)]
        top = max(abs(value) for value in w)
        if 0 < top < np.inf:
            exponent = 0                    # top = f · 2^exponent, 0.5 <= f < 1
            while top >= 2.0 ** exponent:
                exponent += 1
            while top < 2.0 ** (exponent - 1):
                exponent -= 1
            v = [F32(value * F32(2.0 ** -exponent)) for value in w]
    u = [literal_sum(F32(v[j] * z[j][d]) for j in range(SAMPLES)) for d in range(dim)]
    keys = []
    for v in x:
        acc = F32(0)
        for d in range(dim):
            acc = F32(acc + F32(v[d] * u[d]))
        keys.append(acc)
    rank = [sum(1 for j in range(m) if keys[j] < keys[i] or (keys[j] == keys[i] and j < i))
            for i in range(m)]
    left = [i for i in range(m) if rank[i] < m // 2]
    right = [i for i in range(m) if rank[i] >= m // 2]
    return left + right, m // 2


@pytest.mark.parametrize("seed", range(6))
def test_split_node_matches_the_literal_specification(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(LEAF + 1, 80))
    if seed % 3 == 0:       # clustered integers
        centres = rng.integers(0, 255, (3, 12))
        x = centres[rng.integers(0, 3, m)] + rng.integers(-6, 7, (m, 12))
    elif seed % 3 == 1:     # non-integer values: the roundings matter
        x = rng.normal(size=(m, 12)) * 13.7
    else:                   # few distinct values: many ties
        x = rng.integers(0, 2, (m, 12))
    x = x.astype(np.float32)
    perm, m0 = split_node(x)
    want_perm, want_m0 = literal_split(x)
    assert perm.tolist() == want_perm and m0 == want_m0


def test_split_node_halves():
    x = np.full((40, 5), 7, np.float32)                 # total == 0
    perm, m0 = split_node(x)
    assert perm.tolist() == list(range(40)) and m0 == 20
    x = np.zeros((41, 5), np.float32)                   # samples alike, one outlier elsewhere
    x[3] = 100
    perm, m0 = split_node(x)
    assert perm.tolist() == list(range(41)) and m0 == 20


def test_cluster_is_a_partition_into_leaves():
    rng = np.random.default_rng(3)
    x = np.round(rng.uniform(0, 255, (300, 16))).astype(np.float32)
    order, leaves = cluster(x)
    assert sorted(order.tolist()) == list(range(300))
    assert leaves[0][0] == 0 and leaves[-1][1] == 300
    for (_, a1), (b0, _) in zip(leaves, leaves[1:], strict=False):
        assert a1 == b0
    assert all(0 < b - a <= LEAF for a, b in leaves)
    # Median splits: 300 -> 150 -> 75 -> 37, 38 -> 18, 19: every leaf at depth 4.
    assert len(leaves) == 16 and {b - a for a, b in leaves} == {18, 19}
    small = x[:LEAF]
    order, leaves = cluster(small)
    assert order.tolist() == list(range(LEAF)) and leaves == [(0, LEAF)]


def test_candidate_run():
    leaves = [(0, 10), (10, 20), (20, 30), (30, 40)]
    assert candidate_run(leaves, 0, 5, 0) == (0, 10)
    assert candidate_run(leaves, 0, 16, 0) == (0, 20)
    assert candidate_run(leaves, 3, 5, 2) == (10, 40)       # 3, then 2, then 1
    assert candidate_run(leaves, 1, 5, 1) == (10, 30)       # 1, then 2
    assert candidate_run(leaves, 1, 5, 2) == (0, 30)        # 1, 2, 0
    assert candidate_run(leaves, 2, 25, 0) == (10, 40)      # 2, 3, 1
    assert candidate_run(leaves, 1, 40, 0) == (0, 40)
    assert candidate_run([(0, 20)], 0, 16, 2) == (0, 20)
    uneven = [(0, 3), (3, 4), (4, 30), (30, 31)]
    assert candidate_run(uneven, 1, 4, 0) == (3, 30)         # 1 (1 patch), then 2
    assert candidate_run(uneven, 3, 3, 0) == (4, 31)         # 3, then 2


# ----------------------------------------------------------------------------- search


def brute_in_tile(frames, p, k, tile, step, reference):
    """float64 brute force over each reference's tile: the reference first, then by
    (distance, (frame, row, column) slot)."""
    t_n, h, w, _ = frames.shape
    py, px = h - p + 1, w - p + 1
    gy, gx = grid(h, p, step), grid(w, p, step)
    runs_y, runs_x = tile_runs(py, tile), tile_runs(px, tile)
    pos = np.empty((gy.size, gx.size, k, 3), np.int32)
    dist = np.empty((gy.size, gx.size, k))
    for a, y in enumerate(gy):
        y0, y1 = runs_y[tile_index(y, py, tile)]
        for b, x in enumerate(gx):
            x0, x1 = runs_x[tile_index(x, px, tile)]
            q = patch64(frames, reference, y, x, p)
            cand = [(t, cy, cx) for t in range(t_n) for cy in range(y0, y1)
                    for cx in range(x0, x1)]
            d = [((patch64(frames, *c, p) - q) ** 2).sum() for c in cand]
            order = sorted(range(len(cand)),
                           key=lambda i: (cand[i] != (reference, y, x), d[i], i))[:k]
            pos[a, b] = [cand[i] for i in order]
            dist[a, b] = [d[i] for i in order]
    return pos, dist


def test_exact_in_tile_matches_float64_brute_force():
    frames = as_frames(smooth_image((17, 19, 2), 4, clip=True))
    pos, dist = exact_in_tile(frames, patch_size=3, k=7, tile=5, step=2)
    want_pos, want_dist = brute_in_tile(frames, 3, 7, 5, 2, 0)
    assert np.array_equal(pos, want_pos)
    assert np.array_equal(dist, want_dist.astype(np.float32))       # integers: exact


@pytest.mark.parametrize("tile, k, step, channels, nc",
                         [(4, 8, 1, 1, 0), (4, 16, 2, 3, 2), (3, 9, 1, 1, 1), (3, 5, 3, 2, 0)])
def test_single_cluster_tiles_give_the_exact_result(tile, k, step, channels, nc):
    h, w, p = 20, 23, 3
    runs_y, runs_x = tile_runs(h - p + 1, tile), tile_runs(w - p + 1, tile)
    biggest = max(b - a for a, b in runs_y) * max(b - a for a, b in runs_x)
    assert biggest <= LEAF                      # every tile is one cluster
    img = smooth_image((h, w, channels), 5, clip=True)[..., :channels]
    got = ann_image(img, patch_size=p, k=k, tile=tile, step=step, neighbour_clusters=nc)
    want = exact_in_tile_image(img, patch_size=p, k=k, tile=tile, step=step)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert got[0].shape == (grid(h, p, step).size, grid(w, p, step).size, k, 2)


def test_single_cluster_burst_gives_the_exact_result():
    frames = burst(3, 14, 6)                    # py = px = 12: tiles of 3 × 3 × 3 slots
    assert all(b - a == 3 for a, b in tile_runs(12, 3)) and 3 * 3 * 3 <= LEAF
    got = ann(frames, patch_size=3, k=12, tile=3, reference=2)
    want = exact_in_tile(frames, patch_size=3, k=12, tile=3, reference=2)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def check_candidates(frames, pos, dist, p, tile, step, reference):
    """Candidates in the reference's tile, the reference first at 0, no repeats, ascending
    distances equal to the float64 squared distances."""
    _, h, w, _ = frames.shape
    py, px = h - p + 1, w - p + 1
    gy, gx = grid(h, p, step), grid(w, p, step)
    k = pos.shape[2]
    assert pos.shape == (gy.size, gx.size, k, 3) and pos.dtype == np.int32
    assert dist.shape == (gy.size, gx.size, k) and dist.dtype == np.float32
    ref_ty = tile_index(gy, py, tile)[:, None, None]
    ref_tx = tile_index(gx, px, tile)[None, :, None]
    assert np.array_equal(tile_index(pos[..., 1], py, tile), np.broadcast_to(ref_ty, dist.shape))
    assert np.array_equal(tile_index(pos[..., 2], px, tile), np.broadcast_to(ref_tx, dist.shape))
    assert (pos[..., 0, 0] == reference).all()
    assert np.array_equal(pos[..., 0, 1], np.broadcast_to(gy[:, None], gy.shape + gx.shape))
    assert np.array_equal(pos[..., 0, 2], np.broadcast_to(gx[None, :], gy.shape + gx.shape))
    assert (dist[..., 0] == 0).all()
    assert (np.diff(dist, axis=-1) >= 0).all()
    codes = (pos[..., 0].astype(np.int64) * h + pos[..., 1]) * w + pos[..., 2]
    codes = np.sort(codes, axis=-1)
    assert (np.diff(codes, axis=-1) > 0).all()
    win = patch_windows(frames.astype(np.float64), p)            # (T, Py, Px, C, p, p)
    refs = win[reference][gy[:, None], gx[None, :]]              # (gy, gx, C, p, p)
    cands = win[pos[..., 0], pos[..., 1], pos[..., 2]]           # (gy, gx, k, C, p, p)
    true = ((cands - refs[:, :, None]) ** 2).sum(axis=(-1, -2, -3))
    np.testing.assert_allclose(dist, true, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nc", [0, 1, 2])
def test_candidates_are_valid(nc):
    rng = np.random.default_rng(7)
    img = smooth_image((40, 44), 7, clip=True) / 7.3 + rng.normal(0, 0.3, (40, 44))
    img = img.astype(np.float32)
    p, tile, step = 5, 8, 1                     # tiles of 64 … 225 patches: clustered
    pos, dist = ann(as_frames(img), patch_size=p, k=12, tile=tile, step=step,
                    neighbour_clusters=nc)
    check_candidates(as_frames(img), pos, dist, p, tile, step, 0)
    flat, flat_dist = ann_image(img, patch_size=p, k=12, tile=tile, step=step,
                                neighbour_clusters=nc)
    assert np.array_equal(flat, pos[..., 1:]) and np.array_equal(flat_dist, dist)


def test_deterministic():
    img = smooth_image((36, 41, 3), 8, clip=True)
    a = ann_image(img, patch_size=4, k=10, tile=9, step=2, neighbour_clusters=1)
    b = ann_image(np.asfortranarray(img.copy()), patch_size=4, k=10, tile=9, step=2,
                  neighbour_clusters=1)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def print_quality(name, image, nc=0):
    e_pos, e_dist = exact_in_tile_image(image, patch_size=8, k=16, tile=15)
    a_pos, a_dist = ann_image(image, patch_size=8, k=16, tile=15, neighbour_clusters=nc)
    recall, ratio = quality(a_dist, e_dist, a_pos, e_pos)
    print(f"{name}, {nc} neighbour cluster(s): recall {recall:.3f}, D_ann/D_knn {ratio:.3f}")
    # the ANN's candidates are a subset of the tile: rank by rank never closer than exact
    assert (a_dist >= e_dist).all()
    return recall, ratio, a_dist


def test_quality_is_plausible():
    smooth = smooth_image((96, 96), 9, clip=True)
    recall, ratio, d0 = print_quality("smooth 0..255 integers 96x96", smooth)
    assert recall > 0.2 and ratio < 2.0
    recall2, ratio2, d2 = print_quality("smooth 0..255 integers 96x96", smooth, nc=2)
    assert (d2 <= d0).all()                     # a superset of candidates
    assert recall2 >= recall and ratio2 <= ratio
    noise = np.random.default_rng(9).integers(0, 256, (96, 96)).astype(np.float32)
    recall, ratio, _ = print_quality("uniform 0..255 integers 96x96", noise)
    assert recall > 1 / 16 and ratio < 2.0      # noise: hardly better than random picks


def test_quality_measure():
    pos = np.arange(2 * 3 * 4 * 2).reshape(2, 3, 4, 2)
    dist = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert quality(dist, dist, pos, pos) == (1.0, 1.0)
    other = pos.copy()
    other[..., 2:, :] += 1000
    recall, ratio = quality(2 * dist, dist, other, pos)
    assert recall == 0.5 and ratio == 2.0
    shuffled = pos[..., ::-1, :]
    assert quality(dist, dist, shuffled, pos)[0] == 1.0


def test_burst_candidates_come_from_several_frames():
    frames = burst(3, 36, 10)
    p, tile, step, k = 6, 10, 2, 16
    pos, dist = ann(frames, patch_size=p, k=k, tile=tile, step=step, reference=1,
                    neighbour_clusters=1)
    gy, gx = grid(36, p, step), grid(36, p, step)
    assert pos.shape == (gy.size, gx.size, k, 3) and dist.shape == (gy.size, gx.size, k)
    check_candidates(frames, pos, dist, p, tile, step, 1)
    counts = np.bincount(pos[..., 1:, 0].ravel(), minlength=3)
    assert (counts > 0.1 * counts.sum()).all(), counts
    e_pos, e_dist = exact_in_tile(frames, patch_size=p, k=k, tile=tile, step=step,
                                  reference=1)
    assert (dist >= e_dist).all()
    recall, ratio = quality(dist, e_dist, pos, e_pos)
    print(f"burst of 3: recall {recall:.3f}, D_ann/D_knn {ratio:.3f}")
    assert recall > 0.2 and ratio < 2.0


def test_rejects_a_k_larger_than_the_smallest_tile():
    img = smooth_image((20, 20), 11, clip=True)
    with pytest.raises(AssertionError):
        ann_image(img, patch_size=3, k=17, tile=4)
    ann_image(img, patch_size=3, k=16, tile=4)
