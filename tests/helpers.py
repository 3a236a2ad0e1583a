"""Shared test helpers: test images, the tolerance check that reports where arrays
differ, the full check of a search result against the NumPy oracle, and runtimes with a
forced device profile."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest
from PIL import Image

import clpatch
from tests.reference.search import as_video, brute_force_search

DATA = Path(__file__).parent / "data"


def tiered(cases: Iterable[tuple], keep: Callable[..., bool]) -> list:
    """The parameter tuples `cases` for pytest.mark.parametrize, those for which
    `keep(*case)` is false marked `slow`: CI runs the kept ones (chosen so that every value
    of every parameter still runs there), `make test-slow` and the GPU machine the rest."""
    return [pytest.param(*case, marks=() if keep(*case) else pytest.mark.slow) for case in cases]


def read_npz(path: Path) -> dict:
    """Every array of an .npz file, read fully (the file is closed afterwards)."""
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def write_png(path: Path, image: np.ndarray) -> Path:
    """Save `image` as a PNG and check it reads back unchanged; returns the path."""
    Image.fromarray(image).save(path)
    assert np.array_equal(np.asarray(Image.open(path)), image)
    return path


def smooth_noisy(shape, seed: int = 0, sigma: float = 20.0) -> np.ndarray:
    """128 + 60 sin(y/5) cos(x/7) (phase-shifted per colour channel) plus N(0, sigma) noise,
    float32: clear matches, so few patch distances sit near the matching thresholds and
    float32 kernels take the decisions of the float64 oracles. shape (H, W) or (H, W, C)."""
    y, x = np.mgrid[:shape[0], :shape[1]].astype(np.float64)
    channels = shape[2] if len(shape) == 3 else 1
    base = np.stack([128 + 60 * np.sin(y / 5 + c) * np.cos(x / 7 - c / 2)
                     for c in range(channels)], -1).reshape(shape)
    return (base + np.random.default_rng(seed).normal(0, sigma, shape)).astype(np.float32)


_family_runtimes: dict = {}


def family_runtime(runtime, family):
    """A runtime on the test device with `family`'s profile (one per family and device)."""
    key = (runtime.device.int_ptr, family)
    if key not in _family_runtimes:
        _family_runtimes[key] = clpatch.Runtime(runtime.device, profile=family)
    return _family_runtimes[key]


def load_image(name: str, dtype=np.float32) -> np.ndarray:
    """A test image (copies of the project's shared photographs, see data/README.md)."""
    return np.asarray(Image.open(DATA / f"{name}.png")).astype(dtype)


def random_image(shape, seed: int = 0, scale: float = 255.0) -> np.ndarray:
    return (np.random.default_rng(seed).random(shape) * scale).astype(np.float32)


def assert_close(actual, expected, *, rtol: float, atol: float, what: str) -> None:
    """assert |actual - expected| <= atol + rtol |expected|, saying where it fails."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    err = np.abs(actual - expected)
    bad = err > atol + rtol * np.abs(expected)
    if bad.any():
        where = np.argwhere(bad)
        lines = [f"  at {tuple(int(i) for i in idx)}: got {actual[tuple(idx)]!r}, "
                 f"expected {expected[tuple(idx)]!r}" for idx in where[:8]]
        raise AssertionError(
            f"{what}: {bad.sum()} of {bad.size} values differ (max error {err.max():.3g}, "
            f"rtol={rtol}, atol={atol}):\n" + "\n".join(lines))


def assert_same(actual, expected, runtime, what: str, atol: float = 1e-3) -> None:
    """Bit-identical where the device has 64-bit atomics (the filters' deterministic
    fixed-point aggregation), else within `atol` (float atomics add in any order)."""
    if runtime.profile.int64_atomics:
        np.testing.assert_array_equal(actual, expected, err_msg=what)
    else:
        assert_close(actual, expected, rtol=0.0, atol=atol, what=what)


def true_distances(vol: np.ndarray, ref_t, ref_y, ref_x, positions, patch: int,
                   metric: str) -> np.ndarray:
    """Distances between each reference and each returned position, in float64.
    positions: (..., n, 3) as (t, y, x); ref_*: broadcastable to positions[..., 0]."""
    out = np.empty(positions.shape[:-1])
    flat_pos = positions.reshape(-1, 3)
    rt = np.broadcast_to(ref_t, positions.shape[:-1]).reshape(-1)
    ry = np.broadcast_to(ref_y, positions.shape[:-1]).reshape(-1)
    rx = np.broadcast_to(ref_x, positions.shape[:-1]).reshape(-1)
    a = np.arange(patch)
    flat = out.reshape(-1)
    for start in range(0, len(flat), 4096):
        sl = slice(start, start + 4096)
        yy = ry[sl, None, None] + a[None, :, None]
        xx = rx[sl, None, None] + a[None, None, :]
        ref = vol[rt[sl, None, None], yy, xx]
        cy = flat_pos[sl, 1, None, None] + a[None, :, None]
        cx = flat_pos[sl, 2, None, None] + a[None, None, :]
        cand = vol[flat_pos[sl, 0, None, None], cy, cx]
        diff = ref - cand
        terms = diff * diff if metric == "l2" else np.abs(diff)
        flat[sl] = terms.reshape(len(yy), -1).sum(-1)
    return out


def check_search(result, image, *, patch_size, step, window, k, metric="l2",
                 temporal_window=0, video=False) -> None:
    """Everything DESIGN.md fixes about a search result, checked against the oracle
    (k: the number of matches asked, search_patches's k)."""
    positions = np.asarray(result.positions)
    distances = np.asarray(result.distances)
    gy, gx, ref_d, _ = brute_force_search(image, patch_size, step, window, k, metric,
                                          temporal_window, video)
    np.testing.assert_array_equal(result.grid_y, gy)
    np.testing.assert_array_equal(result.grid_x, gx)
    assert positions.dtype == np.int32 and distances.dtype == np.float32
    scale = float(np.max(ref_d)) + 1.0
    tol = dict(rtol=3e-5, atol=1e-6 * scale)
    assert_close(distances, ref_d, what="distances vs brute force", **tol)
    assert np.all(np.diff(distances, axis=-1) >= 0), "distances are not ascending"

    vol = as_video(image, video)
    frames, rows, cols, _ = vol.shape
    if video:
        pos3 = positions
        ref_t = np.arange(frames)[:, None, None, None]
        ref_y = gy[None, :, None, None]
        ref_x = gx[None, None, :, None]
    else:
        pos3 = np.concatenate([np.zeros(positions.shape[:-1] + (1,), np.int32), positions], -1)
        ref_t, ref_y, ref_x = 0, gy[:, None, None], gx[None, :, None]
    half = window // 2
    t, y, x = pos3[..., 0], pos3[..., 1], pos3[..., 2]
    assert np.all((y >= 0) & (y <= rows - patch_size) & (x >= 0) & (x <= cols - patch_size)), \
        "a position is not a valid patch"
    assert np.all((np.abs(y - ref_y) <= half) & (np.abs(x - ref_x) <= half)), \
        "a position is outside the search window"
    assert np.all((np.abs(t - ref_t) <= temporal_window) & (t >= 0) & (t < frames)), \
        "a position is outside the temporal window"
    codes = (t.astype(np.int64) * rows + y) * cols + x
    codes = np.sort(codes, axis=-1)
    assert np.all(np.diff(codes, axis=-1) != 0), "a candidate is returned twice"
    actual = true_distances(vol, ref_t, ref_y, ref_x, pos3,
                            patch_size, metric)
    assert_close(distances, actual, what="reported vs true distance at returned positions", **tol)


def enqueue_behind_gate(plan, context, *inputs, **kwargs):
    """`plan.enqueue(*inputs, **kwargs)` behind an unfinished user event, in a thread:
    (whether it returned within 60 s, i.e. waited for nothing on the device; its result;
    its event). Nothing of the run can finish before the gate opens, so an enqueue that
    waited for the device would hang until the gate is set, after the 60 s."""
    gate = cl.UserEvent(context)
    done: list = []
    worker = threading.Thread(target=lambda: done.append(plan.enqueue(
        *inputs, wait_for=[gate], **kwargs)))
    worker.start()
    worker.join(60)
    returned = not worker.is_alive()
    gate.set_status(cl.command_execution_status.COMPLETE)
    worker.join()
    result, event = done[0]
    return returned, result, event

