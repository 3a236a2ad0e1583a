"""Self-checks of the NumPy VBM3D reference (tests/reference/vbm3d.py), the oracle of the
future VBM3D kernels, and of the synthetic motion videos (tests/reference/video.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import load_image
from tests.reference import vbm3d as V
from tests.reference import video as Vd
from tests.reference.bm3d import PRESETS as BM3D_PRESETS
from tests.reference.bm3d import bm3d_reference
from tests.reference.search import grid

SIGMA = 20.0

# --------------------------------------------------------------------------- slow oracles


def slow_vbm3d_search(guide, t_ref, p, step, window_ref, window_pred, q, n, radius):
    """The search of the module docstring, literally: Python sets for the union of the
    windows, sorted() on (d, t, y, x) tuples. Returns positions and distances like
    V.vbm3d_search."""
    frames, rows, cols = guide.shape
    gy, gx = grid(rows, p, step), grid(cols, p, step)
    positions = np.full((len(gy), len(gx), n, 3), -1)
    distances = np.full((len(gy), len(gx), n), np.inf)
    for i, ry in enumerate(gy):
        for j, rx in enumerate(gx):
            ref = guide[t_ref, ry:ry + p, rx:rx + p]

            def best(f, centres, window, ry=ry, rx=rx, ref=ref):
                h = window // 2
                cands = {(y, x) for cy, cx in centres
                         for y in range(cy - h, cy + h + 1) for x in range(cx - h, cx + h + 1)
                         if 0 <= y <= rows - p and 0 <= x <= cols - p}
                keys = [(float(((guide[f, y:y + p, x:x + p] - ref) ** 2).sum()), f, y, x)
                        for y, x in cands]
                return sorted(keys)[:q]

            kept = {t_ref: best(t_ref, [(ry, rx)], window_ref)}
            for f in range(t_ref + 1, min(frames - 1, t_ref + radius) + 1):
                kept[f] = best(f, [(y, x) for _, _, y, x in kept[f - 1]], window_pred)
            for f in range(t_ref - 1, max(0, t_ref - radius) - 1, -1):
                kept[f] = best(f, [(y, x) for _, _, y, x in kept[f + 1]], window_pred)
            result = sorted(e for entries in kept.values() for e in entries)[:n]
            for m, (d, t, y, x) in enumerate(result):
                positions[i, j, m] = (t, y, x)
                distances[i, j, m] = d
    return gy, gx, positions, distances


def brute_force_frame(frame, p, step):
    """Every valid position of one frame sorted by (d, y, x), for each grid reference."""
    rows, cols = frame.shape
    gy, gx = grid(rows, p, step), grid(cols, p, step)
    out = {}
    for ry in gy:
        for rx in gx:
            ref = frame[ry:ry + p, rx:rx + p]
            out[ry, rx] = sorted((float(((frame[y:y + p, x:x + p] - ref) ** 2).sum()), y, x)
                                 for y in range(rows - p + 1) for x in range(cols - p + 1))
    return gy, gx, out


def search(guide, t_ref, p=3, step=2, window_ref=5, window_pred=3, q=2, n=8, radius=2):
    return V.vbm3d_search(guide, t_ref, p, step, window_ref, window_pred, q, n, radius)


def psnr(a, b):
    return Vd.psnr(a, b)


# --------------------------------------------------------------------------- search


@pytest.mark.parametrize("levels", [3, None])
def test_single_frame_whole_window_is_brute_force(levels):
    """temporal_radius 0, window_ref covering the image, q = n = all positions: the result is
    the sort by (d, y, x) of every candidate of the frame."""
    rng = np.random.default_rng(1)
    shape = (1, 11, 13)
    video = rng.integers(0, levels, shape).astype(float) if levels else rng.random(shape) * 255
    p, step = 3, 3
    count = (shape[1] - p + 1) * (shape[2] - p + 1)
    gy, gx, pos, dist = V.vbm3d_search(video, 0, p, step, 2 * max(shape) + 1, 5, count, count, 0)
    bgy, bgx, expected = brute_force_frame(video[0], p, step)
    np.testing.assert_array_equal(gy, bgy)
    np.testing.assert_array_equal(gx, bgx)
    for i, ry in enumerate(gy):
        for j, rx in enumerate(gx):
            exp = expected[ry, rx]
            np.testing.assert_array_equal(pos[i, j], [(0, y, x) for _, y, x in exp])
            np.testing.assert_allclose(dist[i, j], [d for d, _, _ in exp], rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("case", [
    dict(shape=(5, 12, 14), levels=2, p=3, step=2, window_ref=5, window_pred=3, q=2, n=8, radius=2),
    dict(shape=(6, 13, 12), levels=4, p=2, step=3, window_ref=3, window_pred=5, q=3, n=16, radius=4),
    dict(shape=(4, 10, 11), levels=256, p=4, step=2, window_ref=7, window_pred=5, q=2, n=4, radius=1),
    dict(shape=(3, 9, 9), levels=1, p=3, step=3, window_ref=1, window_pred=3, q=4, n=8, radius=2),
])
def test_search_matches_literal_implementation(case):
    """Integer-valued videos (exact distances, many ties with few levels): the vectorised search
    equals the literal set-and-sort reading of the specification, for every reference frame."""
    c = dict(case)
    video = np.random.default_rng(7).integers(0, c.pop("levels"), c.pop("shape")).astype(float)
    args = (c["p"], c["step"], c["window_ref"], c["window_pred"], c["q"], c["n"], c["radius"])
    for t in range(video.shape[0]):
        gy, gx, pos, dist = V.vbm3d_search(video, t, *args)
        sgy, sgx, spos, sdist = slow_vbm3d_search(video, t, *args)
        np.testing.assert_array_equal(pos, spos)
        np.testing.assert_array_equal(dist, sdist)
        assert pos.dtype.kind == "i" and dist.dtype == np.float64


def test_overlapping_predictive_windows_are_a_union():
    """Constant video (all d = 0): the reference frame keeps the 3×3 window around (4, 4); in
    frame 1 their nine 5×5 windows overlap and their union is the 7×7 square rows/cols 1–7,
    each position once, in (y, x) order; then the padding."""
    video = np.zeros((2, 10, 10))
    p, q, n = 2, 40, 64
    gy, gx, pos, dist = V.vbm3d_search(video, 0, p, 4, 3, 5, q, n, 1)
    i, j = list(gy).index(4), list(gx).index(4)
    frame0 = [(0, y, x) for y in range(3, 6) for x in range(3, 6)]
    frame1 = [(1, y, x) for y in range(1, 8) for x in range(1, 8)][:q]
    np.testing.assert_array_equal(pos[i, j, :len(frame0) + q], frame0 + frame1)
    assert np.all(pos[i, j, len(frame0) + q:] == -1)
    for r in pos.reshape(-1, n, 3):                     # no duplicates for any reference
        real = [tuple(e) for e in r if e[0] >= 0]
        assert len(real) == len(set(real))


def test_overlap_with_textured_static_video():
    """Two neighbouring centres in frame 0 (window_ref 3) whose 5×5 windows overlap around the
    reference position in frame 1: that position (d = 0 on a static video) appears once."""
    frame = np.random.default_rng(3).integers(0, 256, (12, 12)).astype(float)
    video = np.stack([frame, frame])
    gy, gx, pos, dist = V.vbm3d_search(video, 0, 3, 3, 3, 5, 4, 8, 1)
    for i, ry in enumerate(gy):
        for j, rx in enumerate(gx):
            real = [tuple(e) for e in pos[i, j] if e[0] >= 0]
            assert len(real) == len(set(real)) == 8
            assert real.count((1, ry, rx)) == 1


def test_ties_are_ordered_by_frame_row_column():
    video = np.full((5, 9, 10), 7.0)
    gy, gx, pos, dist = V.vbm3d_search(video, 2, 3, 3, 5, 3, 4, 16, 2)
    assert np.all(dist == 0)
    for r in pos.reshape(-1, 16, 3):
        keys = [tuple(e) for e in r]
        assert keys == sorted(keys) and len(set(keys)) == 16
        assert keys[0][0] == 0                          # frame t_ref − 2 comes first
    # The reference (frame 2) is pushed out of the results by the 15 earlier ties + others:
    # the group rule still counts it, and group_sizes agrees with build_groups.
    members, k = V.build_groups(pos, dist, 2, gy, gx, 0.0, 3)
    np.testing.assert_array_equal(k, V.group_sizes(dist, 0.0, 3))
    assert np.all(k == 16)
    assert np.all(members[..., 0, 0] == 2)


def test_padding_when_fewer_candidates_than_n():
    video = np.random.default_rng(0).random((1, 12, 12)) * 255
    gy, gx, pos, dist = V.vbm3d_search(video, 0, 4, 4, 7, 5, 2, 8, 4)
    assert pos.shape == (len(gy), len(gx), 8, 3) and dist.shape == (len(gy), len(gx), 8)
    assert np.all(pos[..., :2, 0] == 0) and np.all(np.isfinite(dist[..., :2]))
    assert np.all(pos[..., 2:, :] == -1) and np.all(np.isinf(dist[..., 2:]))
    ref = np.stack(np.meshgrid(gy, gx, indexing="ij"), -1)
    np.testing.assert_array_equal(pos[..., 0, 1:], ref)   # the reference itself, d = 0
    assert np.all(dist[..., 0] == 0)


def test_static_video_finds_the_reference_in_every_frame():
    frame = load_image("camera", np.float64)[220:250, 240:272]
    video = np.repeat(frame[None], 5, 0)
    gy, gx, pos, dist = V.vbm3d_search(video, 2, 8, 6, 7, 5, 2, 16, 2)
    for i, ry in enumerate(gy):
        for j, rx in enumerate(gx):
            found = {tuple(e): d for e, d in zip(pos[i, j], dist[i, j], strict=True)}
            for f in range(5):
                assert found.get((f, ry, rx)) == 0.0, (f, ry, rx)


def test_group_sizes_and_members():
    """group_sizes (distances only) equals build_groups' explicit rule; the group is the
    reference then the results without it, all distinct."""
    rng = np.random.default_rng(5)
    video = rng.integers(0, 3, (5, 12, 12)).astype(float)
    p, n = 3, 8
    for tau in (0.0, 0.2, 0.5, 1.0):
        for t in range(5):
            gy, gx, pos, dist = V.vbm3d_search(video, t, p, 3, 5, 3, 2, n, 2)
            members, k = V.build_groups(pos, dist, t, gy, gx, tau, p)
            np.testing.assert_array_equal(k, V.group_sizes(dist, tau, p))
            assert np.all((k >= 1) & (k <= n) & ((k & (k - 1)) == 0))
            for i, ry in enumerate(gy):
                for j, rx in enumerate(gx):
                    group = [tuple(e) for e in members[i, j, :k[i, j]]]
                    assert group[0] == (t, ry, rx)
                    assert len(set(group)) == len(group) and min(min(g) for g in group) >= 0
                    others = [tuple(e) for e in pos[i, j] if tuple(e) != (t, ry, rx)]
                    assert group[1:] == others[:k[i, j] - 1]


# --------------------------------------------------------------------------- pipeline


@pytest.fixture(scope="module")
def static_camera():
    clean = np.repeat(load_image("camera", np.float64)[200:240, 200:248][None], 6, 0)
    return clean, Vd.add_noise(clean, SIGMA, seed=0)


def test_tiny_threshold_reproduces_the_input():
    """lambda_3d ≈ 0: every group comes back unchanged, so the basic estimate is the input;
    on a moving video with temporal_radius 2 this also checks that patches found in other
    frames are aggregated into their own frames."""
    clean, _ = Vd.motion_video(load_image("camera", np.float64), 4, (32, 40), seed=3)
    noisy = Vd.add_noise(clean, SIGMA, seed=1)
    out = V.vbm3d_reference(noisy, SIGMA, stages=1, lambda_3d=1e-9, temporal_radius=2)
    np.testing.assert_allclose(out, noisy, rtol=0, atol=1e-9)


def test_radius_zero_equals_bm3d_frame_by_frame():
    """With no temporal search, q = k and BM3D's window and parameters (Davy–Ehret's: window
    21, 8 patches, step 4, as VBM3D's grid takes one step), VBM3D is BM3D per frame (same
    groups: on float data no exact ties, so both orders agree)."""
    cam = load_image("camera", np.float64)
    clean = np.stack([cam[100:132, 200:240], cam[300:332, 100:140]])
    noisy = Vd.add_noise(clean, SIGMA, seed=2)
    out = V.vbm3d_reference(noisy, SIGMA, temporal_radius=0, window_ref=21, q=8, k=8, step=4,
                            tau_match=(2500.0, 400.0), transform_1d="hadamard",
                            lambda_3d=BM3D_PRESETS["fast"]["lambda_3d"])
    expected = np.stack([bm3d_reference(f, SIGMA, "fast", window=21, k=8, step=4)
                         for f in noisy])
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-9)


def test_vbm3d_beats_bm3d_per_frame_on_static_video(static_camera):
    clean, noisy = static_camera
    basic = V.vbm3d_reference(noisy, SIGMA, stages=1)
    final = V.vbm3d_reference(noisy, SIGMA)
    per_frame = np.stack([bm3d_reference(f, SIGMA, "fast") for f in noisy])
    assert final.shape == clean.shape and final.dtype == np.float64
    assert psnr(final, clean) > psnr(per_frame, clean) + 1.0, (psnr(final, clean),
                                                               psnr(per_frame, clean))
    assert psnr(final, clean) > psnr(basic, clean) + 0.3
    assert Vd.temporal_flicker(final, clean) < Vd.temporal_flicker(per_frame, clean)


def test_colour_vbm3d_denoises():
    clean, _ = Vd.motion_video(load_image("astronaut", np.float64)[..., :3], 4, (32, 32), seed=4)
    noisy = Vd.add_noise(clean, SIGMA, seed=3)
    out = V.vbm3d_reference(noisy, SIGMA)
    assert out.shape == clean.shape
    assert psnr(out, clean) > psnr(noisy, clean) + 6.0


def test_data_range_scales_the_thresholds():
    """The same video in [0, 1] with data_range 1 and σ/255 gives the 0–255 result / 255."""
    clean = np.repeat(load_image("camera", np.float64)[200:224, 200:232][None], 3, 0)
    noisy = Vd.add_noise(clean, SIGMA, seed=4)
    a = V.vbm3d_reference(noisy, SIGMA, temporal_radius=1)
    b = V.vbm3d_reference(noisy / 255, SIGMA / 255, data_range=1.0, temporal_radius=1)
    np.testing.assert_allclose(b * 255, a, rtol=0, atol=1e-8)


def test_stage_params():
    p1, p2 = V.stage_params(1), V.stage_params(2, data_range=1.0, tau_match=255.0)
    assert (p1["step"], p2["step"], p1["transform_2d"], p2["transform_2d"]) == (6, 4, "bior1.5", "dct")
    assert p1["tau_match"] == 3000.0 and p2["tau_match"] == pytest.approx(1 / 255)
    assert V.stage_params(1, patch_size=4)["transform_2d"] == "dct"
    with pytest.raises(TypeError):
        V.stage_params(1, window=7)


# --------------------------------------------------------------------------- motion videos


def test_motion_video():
    image = load_image("camera", np.float64)
    clean, traj = Vd.motion_video(image, frames=12, size=(64, 48), seed=5, max_speed=1.5)
    again, traj2 = Vd.motion_video(image, frames=12, size=(64, 48), seed=5, max_speed=1.5)
    other, traj3 = Vd.motion_video(image, frames=12, size=(64, 48), seed=6, max_speed=1.5)
    assert clean.shape == (12, 64, 48) and traj.shape == (12, 2) and clean.dtype == np.float64
    np.testing.assert_array_equal(clean, again)
    np.testing.assert_array_equal(traj, traj2)
    assert not np.array_equal(traj, traj3)
    frac = traj - np.round(traj)
    assert np.all(np.abs(frac) > 1e-6)                            # sub-pixel positions
    speed = np.linalg.norm(np.diff(traj, axis=0), axis=1)
    assert speed.max() <= 1.5 + 1e-9 and speed.max() > 0.5
    assert np.all(traj >= 0) and np.all(traj[:, 0] <= 512 - 64) and np.all(traj[:, 1] <= 512 - 48)
    # Bilinear sampling: a frame lies between the integer crops around its position.
    y, x = traj[3]
    iy, ix = int(y), int(x)
    lo = np.minimum.reduce([image[iy + a:iy + a + 64, ix + b:ix + b + 48] for a in (0, 1) for b in (0, 1)])
    hi = np.maximum.reduce([image[iy + a:iy + a + 64, ix + b:ix + b + 48] for a in (0, 1) for b in (0, 1)])
    assert np.all(clean[3] >= lo - 1e-9) and np.all(clean[3] <= hi + 1e-9)


def test_motion_video_colour_margin_and_errors():
    image = load_image("astronaut", np.float64)[..., :3]
    clean, traj = Vd.motion_video(image, frames=6, size=(40, 50), seed=1, margin=20)
    assert clean.shape == (6, 40, 50, 3)
    assert np.all(traj >= 20) and np.all(traj[:, 0] <= 256 - 40 - 20) and np.all(traj[:, 1] <= 256 - 50 - 20)
    with pytest.raises(ValueError, match="too small"):
        Vd.motion_video(image, frames=24, size=(256, 256))


def test_noise_psnr_flicker():
    clean = np.zeros((3, 4, 5))
    noisy = Vd.add_noise(clean, 10.0, seed=1)
    np.testing.assert_array_equal(noisy, Vd.add_noise(clean, 10.0, seed=1))
    assert abs(noisy.std() - 10.0) < 3.0
    assert Vd.psnr(clean + 1.0, clean, peak=255) == pytest.approx(20 * np.log10(255))
    assert Vd.temporal_flicker(clean + 5.0, clean) == 0.0           # constant error: no flicker
    steps = clean + np.arange(3)[:, None, None] * 2.0
    assert Vd.temporal_flicker(steps, clean) == pytest.approx(2.0)
