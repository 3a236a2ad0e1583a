"""`clpatch.knn` (exhaustive k nearest patches) and `clpatch.knn_vectors` against the NumPy
oracle of tests/reference/knn.py.

Integer-valued inputs make every float32 sum exact, so there the positions (ties included:
keys (distance, candidate index) ascending) must equal the oracle's exactly. Float inputs
are compared to tolerance, and each returned position's true distance must equal the one
reported. Images stay small: CI runs these on a 2-core CPU through PoCL."""

from __future__ import annotations

import inspect
import itertools

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from tests.helpers import assert_close, load_image, random_image
from tests.reference.knn import (
    grid,
    knn_brute,
    knn_vectors_brute,
    patch_distances,
    vector_distances,
)

CHAMFERS = ("chamfer", "chamfer_sym")


def host(array) -> np.ndarray:
    return array.get() if isinstance(array, cla.Array) else np.asarray(array)


def n_candidates(reference, patch_size: int) -> int:
    return (reference.shape[0] - patch_size + 1) * (reference.shape[1] - patch_size + 1)


def labels(shape, values: int, seed: int, dtype=np.uint8) -> np.ndarray:
    """A random image of the integer labels 0 … values − 1 (frequent ties)."""
    return np.random.default_rng(seed).integers(0, values, shape).astype(dtype)


def crop(name: str, y: int, x: int, h: int, w: int, dtype=np.float32) -> np.ndarray:
    return np.ascontiguousarray(load_image(name)[y:y + h, x:x + w]).astype(dtype)


def smoothed(name: str, box) -> np.ndarray:
    """A 3x3 box-filtered crop (h, w) of a photograph: fractional float32 values, smooth areas
    where patches of large norm lie at small distances from each other."""
    y, x, h, w = box
    img = crop(name, y, x, h + 2, w + 2).astype(np.float64)
    out = sum(img[dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3)) / 9
    return out.astype(np.float32)


def check_knn(result, query, reference, *, patch_size, k, metric="l2", step=1,
              exact: bool) -> None:
    """Everything the spec fixes about a kNN result, against the oracle. exact: integer data,
    positions and distances must be the oracle's bit for bit."""
    p = patch_size
    ref_img = query if reference is None else reference
    exp_pos, exp_d = knn_brute(host(query), None if reference is None else host(reference),
                               p, k, metric, step)
    qh, qw = query.shape[:2]
    rh, rw = ref_img.shape[:2]

    assert isinstance(result, clpatch.Matches)
    assert (result.patch_size, result.step, result.k, result.metric) == (p, step, k, metric)
    assert result.window == 0 and result.temporal_window == 0
    np.testing.assert_array_equal(result.grid_y, grid(qh, p, step))
    np.testing.assert_array_equal(result.grid_x, grid(qw, p, step))
    assert np.asarray(result.grid_y).dtype == np.int32 and np.asarray(result.grid_x).dtype == np.int32

    positions, distances = host(result.positions), host(result.distances)
    assert positions.dtype == np.int32 and distances.dtype == np.float32
    assert positions.shape == exp_pos.shape, f"positions {positions.shape} != {exp_pos.shape}"
    assert distances.shape == exp_d.shape, f"distances {distances.shape} != {exp_d.shape}"
    y, x = positions[..., 0], positions[..., 1]
    assert np.all((y >= 0) & (y <= rh - p) & (x >= 0) & (x <= rw - p)), "a position is not a valid patch"
    codes = np.sort(y.astype(np.int64) * (rw - p + 1) + x, axis=-1)
    assert np.all(np.diff(codes, axis=-1) != 0), "a candidate is returned twice"
    assert np.all(np.diff(distances, axis=-1) >= 0), "distances are not ascending"

    if exact:
        bad = np.argwhere(np.any(positions != exp_pos, axis=-1))
        if len(bad):
            a, b, j = (int(v) for v in bad[0])
            raise AssertionError(
                f"{len(bad)} positions differ from the oracle; first at grid ({a}, {b}) = query "
                f"({result.grid_y[a]}, {result.grid_x[b]}), rank {j}: got {tuple(positions[a, b, j])} "
                f"at {distances[a, b, j]}, expected {tuple(exp_pos[a, b, j])} at {exp_d[a, b, j]}")
        np.testing.assert_array_equal(distances, exp_d.astype(np.float32))
        return

    scale = float(np.max(exp_d)) + 1.0
    tol = dict(rtol=1e-5, atol=2e-6 * scale + 1e-3)
    assert_close(distances, exp_d, what="distances vs the oracle", **tol)
    gy, gx = grid(qh, p, step), grid(qw, p, step)
    true = np.empty(distances.shape)
    for a, qy in enumerate(gy):
        for b, qx in enumerate(gx):
            d = patch_distances(host(query), None if reference is None else host(reference),
                                p, metric, int(qy), int(qx))
            true[a, b] = d[positions[a, b, :, 0], positions[a, b, :, 1]]
    assert_close(distances, true, what="reported vs true distance at the returned positions", **tol)


# =========================================================================== float images

# (query shape, reference shape or None, patch, k, step)
FLOAT_CASES = [
    ((20, 23), None, 5, 16, 1),
    ((21, 20), (22, 25), 4, 7, 3),          # 21 - 4 = 17: grid 0 … 15, 17
    ((21, 22, 3), None, 3, 1, 1),
    ((25, 22, 2), (20, 27, 2), 5, 100, 3),
    ((17, 19), None, 8, 16, 3),             # grid rows 0, 3, 6, 9; columns 0, 3, 6, 9, 11
    ((23, 21), (19, 24), 6, 16, 1),
]


@pytest.mark.parametrize("metric", ["l2", "l1"])
@pytest.mark.parametrize("shape,ref_shape,patch,k,step", FLOAT_CASES)
def test_random_float(runtime, metric, shape, ref_shape, patch, k, step):
    query = random_image(shape, seed=sum(shape) + patch)
    reference = None if ref_shape is None else random_image(ref_shape, seed=7 * k + step)
    result = clpatch.knn(query, reference, patch_size=patch, k=k, metric=metric, step=step,
                         runtime=runtime)
    check_knn(result, query, reference, patch_size=patch, k=k, metric=metric, step=step,
              exact=False)


@pytest.mark.parametrize("metric", ["l2", "l1"])
def test_self_search_finds_itself(runtime, metric):
    image = random_image((22, 21, 2), seed=11)
    result = clpatch.knn(image, patch_size=4, k=3, metric=metric, step=2, runtime=runtime)
    positions, distances = host(result.positions), host(result.distances)
    gy, gx = grid(22, 4, 2), grid(21, 4, 2)
    np.testing.assert_array_equal(positions[..., 0, 0], np.broadcast_to(gy[:, None], positions.shape[:2]))
    np.testing.assert_array_equal(positions[..., 0, 1], np.broadcast_to(gx[None, :], positions.shape[:2]))
    check_knn(result, image, None, patch_size=4, k=3, metric=metric, step=2, exact=False)
    explicit = clpatch.knn(image, image, patch_size=4, k=3, metric=metric, step=2, runtime=runtime)
    np.testing.assert_array_equal(host(explicit.positions), positions)
    np.testing.assert_array_equal(host(explicit.distances), distances)


# =========================================================================== integer images: exact

# (query shape, reference shape or None, patch, k, step, number of labels)
INTEGER_CASES = [
    ((20, 23), None, 5, 16, 1, 4),
    ((22, 21), (20, 24), 4, 7, 3, 3),
    ((21, 20, 3), None, 3, 100, 3, 2),
    ((19, 23, 2), (24, 20, 2), 5, 1, 1, 3),
    ((25, 24), None, 8, 16, 3, 4),
]


@pytest.mark.parametrize("metric", ["l2", "l1"])
@pytest.mark.parametrize("shape,ref_shape,patch,k,step,values", INTEGER_CASES)
def test_uint8_ties_exact(runtime, metric, shape, ref_shape, patch, k, step, values):
    query = labels(shape, values, seed=patch + k)
    reference = None if ref_shape is None else labels(ref_shape, values, seed=step + 3)
    result = clpatch.knn(query, reference, patch_size=patch, k=k, metric=metric, step=step,
                         runtime=runtime)
    check_knn(result, query, reference, patch_size=patch, k=k, metric=metric, step=step,
              exact=True)


# Chamfer: label images with few labels (many ties), at most ~20x20 with p 3–5.
CHAMFER_CASES = [
    ((14, 15), None, 3, 16, 1, 3),
    ((15, 13), (13, 16), 4, 7, 3, 3),
    ((13, 14, 3), None, 3, 100, 3, 2),
    ((14, 13, 2), (15, 14, 2), 5, 1, 1, 2),
    ((17, 18), None, 5, 16, 3, 3),
]


@pytest.mark.parametrize("metric", CHAMFERS)
@pytest.mark.parametrize("shape,ref_shape,patch,k,step,values", CHAMFER_CASES)
def test_chamfer_labels_exact(runtime, metric, shape, ref_shape, patch, k, step, values):
    query = labels(shape, values, seed=patch * 3 + k)
    reference = None if ref_shape is None else labels(ref_shape, values, seed=step + 5)
    result = clpatch.knn(query, reference, patch_size=patch, k=k, metric=metric, step=step,
                         runtime=runtime)
    check_knn(result, query, reference, patch_size=patch, k=k, metric=metric, step=step,
              exact=True)


@pytest.mark.parametrize("metric", CHAMFERS)
def test_chamfer_float_labels(runtime, metric):
    """Labels are values, not integers: float labels (and a random image, where every label
    is missing from every other patch) follow the same rule."""
    query = (labels((13, 14), 3, seed=21).astype(np.float32) - 0.5) * 0.37
    result = clpatch.knn(query, patch_size=3, k=16, metric=metric, runtime=runtime)
    check_knn(result, query, None, patch_size=3, k=16, metric=metric, exact=True)
    noise = random_image((12, 13), seed=22)
    result = clpatch.knn(noise, patch_size=4, k=5, metric=metric, step=3, runtime=runtime)
    check_knn(result, noise, None, patch_size=4, k=5, metric=metric, step=3, exact=True)


@pytest.mark.parametrize("metric", ["l2", "l1", "chamfer", "chamfer_sym"])
def test_k_all_candidates(runtime, metric):
    query = labels((12, 11), 3, seed=31)
    reference = labels((11, 13), 3, seed=32)
    k = n_candidates(reference, 4)                       # 8 * 10 = 80
    result = clpatch.knn(query, reference, patch_size=4, k=k, metric=metric, step=3,
                         runtime=runtime)
    check_knn(result, query, reference, patch_size=4, k=k, metric=metric, step=3, exact=True)
    k = n_candidates(query, 3)                           # 10 * 9 = 90, reference=None
    result = clpatch.knn(query, patch_size=3, k=k, metric=metric, step=1, runtime=runtime)
    check_knn(result, query, None, patch_size=3, k=k, metric=metric, step=1, exact=True)


def test_k_all_candidates_float(runtime):
    query = random_image((13, 12), seed=33)
    k = n_candidates(query, 5)
    result = clpatch.knn(query, patch_size=5, k=k, step=2, runtime=runtime)
    check_knn(result, query, None, patch_size=5, k=k, step=2, exact=False)


@pytest.mark.parametrize("step", [1, 3])
def test_k_all_candidates_larger(runtime, step):
    query = labels((20, 23), 4, seed=36)
    k = n_candidates(query, 5)                           # 16 * 19 = 304
    result = clpatch.knn(query, patch_size=5, k=k, step=step, runtime=runtime)
    check_knn(result, query, None, patch_size=5, k=k, step=step, exact=True)


def test_patch_as_large_as_the_image(runtime):
    query = labels((9, 11), 4, seed=34)
    reference = labels((9, 9), 4, seed=35)
    result = clpatch.knn(query, reference, patch_size=9, k=1, runtime=runtime)
    check_knn(result, query, reference, patch_size=9, k=1, exact=True)
    result = clpatch.knn(query, reference, patch_size=1, k=81, metric="l1", runtime=runtime)
    check_knn(result, query, reference, patch_size=1, k=81, metric="l1", exact=True)


# =========================================================================== real images


@pytest.mark.parametrize("metric", ["l2", "l1"])
@pytest.mark.parametrize("name,box,patch,k,step", [
    ("camera", (200, 240, 33, 29), 6, 16, 3),
    ("brick", (100, 100, 24, 27), 8, 7, 1),
    ("coins", (50, 60, 25, 31), 5, 100, 3),
    ("text", (60, 100, 23, 26), 4, 16, 1),
])
def test_gray_crops_exact(runtime, metric, name, box, patch, k, step):
    image = crop(name, *box)
    result = clpatch.knn(image, patch_size=patch, k=k, metric=metric, step=step, runtime=runtime)
    check_knn(result, image, None, patch_size=patch, k=k, metric=metric, step=step, exact=True)


@pytest.mark.parametrize("metric", ["l2", "l1"])
def test_stereo_pair_rgb(runtime, metric):
    """Two different images: a crop of the left view against the same area of the right."""
    left = crop("motorcycle_left", 80, 120, 22, 25, np.uint8)
    right = crop("motorcycle_right", 78, 110, 24, 30, np.uint8)
    result = clpatch.knn(left, right, patch_size=5, k=16, metric=metric, step=3, runtime=runtime)
    check_knn(result, left, right, patch_size=5, k=16, metric=metric, step=3, exact=True)


def test_astronaut_rgb_and_two_channels(runtime):
    rgb = crop("astronaut", 40, 100, 21, 23)
    result = clpatch.knn(rgb, patch_size=4, k=7, step=1, runtime=runtime)
    check_knn(result, rgb, None, patch_size=4, k=7, step=1, exact=True)
    two = np.ascontiguousarray(rgb[..., 1:])
    result = clpatch.knn(two, patch_size=5, k=16, metric="l1", step=3, runtime=runtime)
    check_knn(result, two, None, patch_size=5, k=16, metric="l1", step=3, exact=True)


@pytest.mark.parametrize("step", [1, 2, 3])
@pytest.mark.parametrize("metric", ["l2", "l1"])
def test_float_photo_smooth_area(runtime, metric, step):
    """Fractional values in a smooth area (camera's sky): the nearest patches lie at distances
    far below the patches' norms, so a distance computed as ||q||² − 2 q·r + ||r||² in float32
    would lose their order; the matches must still be the k nearest (to float tolerance)."""
    image = smoothed("camera", (20, 20, 27, 28))
    reference = smoothed("camera", (24, 30, 25, 24))
    result = clpatch.knn(image, patch_size=6, k=16, metric=metric, step=step, runtime=runtime)
    check_knn(result, image, None, patch_size=6, k=16, metric=metric, step=step, exact=False)
    result = clpatch.knn(image, reference, patch_size=5, k=7, metric=metric, step=step,
                         runtime=runtime)
    check_knn(result, image, reference, patch_size=5, k=7, metric=metric, step=step, exact=False)


@pytest.mark.parametrize("metric", CHAMFERS)
def test_chamfer_quantised_photos(runtime, metric):
    camera = crop("camera", 180, 200, 18, 19) // 32
    result = clpatch.knn(camera, patch_size=4, k=16, metric=metric, step=1, runtime=runtime)
    check_knn(result, camera, None, patch_size=4, k=16, metric=metric, step=1, exact=True)
    left = crop("motorcycle_left", 80, 120, 15, 16, np.uint8) // 64
    right = crop("motorcycle_right", 80, 114, 16, 17, np.uint8) // 64
    result = clpatch.knn(left, right, patch_size=3, k=7, metric=metric, step=3, runtime=runtime)
    check_knn(result, left, right, patch_size=3, k=7, metric=metric, step=3, exact=True)


# =========================================================================== inputs


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float64])
@pytest.mark.parametrize("metric", ["l2", "chamfer"])
def test_input_dtypes(runtime, dtype, metric):
    base = labels((16, 17), 5, seed=41).astype(np.int32)
    if dtype is np.int16:
        base = base * 100 - 250                          # negative values too
    image = base.astype(dtype)
    result = clpatch.knn(image, patch_size=4, k=16, metric=metric, step=3, runtime=runtime)
    check_knn(result, image, None, patch_size=4, k=16, metric=metric, step=3, exact=True)
    as_float = clpatch.knn(image.astype(np.float32), patch_size=4, k=16, metric=metric, step=3,
                           runtime=runtime)
    np.testing.assert_array_equal(host(result.positions), host(as_float.positions))
    np.testing.assert_array_equal(host(result.distances), host(as_float.distances))


def test_mixed_dtypes(runtime):
    query = labels((15, 16), 4, seed=42)
    reference = labels((17, 14), 4, seed=43).astype(np.float64)
    result = clpatch.knn(query, reference, patch_size=4, k=7, metric="l1", runtime=runtime)
    check_knn(result, query, reference, patch_size=4, k=7, metric="l1", exact=True)


def test_non_contiguous_inputs(runtime):
    big = labels((40, 44, 3), 4, seed=43)
    query = big[::2, 1::2]                               # strided view, (20, 22, 3)
    reference = np.asfortranarray(big[5:24, 3:25, :])
    result = clpatch.knn(query, reference, patch_size=4, k=16, runtime=runtime)
    check_knn(result, query, reference, patch_size=4, k=16, exact=True)


@pytest.mark.parametrize("metric", ["l2", "chamfer_sym"])
def test_device_arrays(runtime, metric):
    query = labels((18, 17), 3, seed=44).astype(np.float32)
    reference = labels((16, 19), 3, seed=45).astype(np.float32)
    expected = clpatch.knn(query, reference, patch_size=4, k=16, metric=metric, step=3,
                           runtime=runtime)
    got = clpatch.knn(cla.to_device(runtime.queue, query), cla.to_device(runtime.queue, reference),
                      patch_size=4, k=16, metric=metric, step=3, runtime=runtime)
    assert isinstance(got.positions, cla.Array) and isinstance(got.distances, cla.Array)
    np.testing.assert_array_equal(got.positions.get(), expected.positions)
    np.testing.assert_array_equal(got.distances.get(), expected.distances)
    np.testing.assert_array_equal(got.grid_y, expected.grid_y)
    np.testing.assert_array_equal(got.grid_x, expected.grid_x)
    check_knn(got, query, reference, patch_size=4, k=16, metric=metric, step=3, exact=True)
    alone = clpatch.knn(cla.to_device(runtime.queue, query), patch_size=4, k=5, metric=metric,
                        runtime=runtime)
    check_knn(alone, query, None, patch_size=4, k=5, metric=metric, exact=True)


def test_device_array_uint8_rgb(runtime):
    image = labels((15, 16, 3), 3, seed=46)
    got = clpatch.knn(cla.to_device(runtime.queue, image), patch_size=3, k=7, runtime=runtime)
    check_knn(got, image, None, patch_size=3, k=7, exact=True)


@pytest.mark.parametrize("limit,shape,patch,metric,step", [
    (200_000, (40, 40), 8, "l2", 1),
    (40_000, (40, 40), 8, "l1", 1),         # a few grid rows per block
    (40_000, (40, 40), 8, "l2", 3),
    (10_000, (20, 20), 4, "chamfer", 1),
])
def test_small_memory_limit_gives_the_same_result(runtime, limit, shape, patch, metric, step):
    image = labels(shape, 4, seed=47).astype(np.float32)
    small = clpatch.Runtime(runtime.device, memory_limit=limit)
    expected = clpatch.knn(image, patch_size=patch, k=16, metric=metric, step=step,
                           runtime=runtime)
    got = clpatch.knn(image, patch_size=patch, k=16, metric=metric, step=step, runtime=small)
    np.testing.assert_array_equal(got.positions, expected.positions)
    np.testing.assert_array_equal(got.distances, expected.distances)
    check_knn(got, image, None, patch_size=patch, k=16, metric=metric, step=step, exact=True)


def engine_methods() -> tuple[str, ...]:
    """The engines `knn` can be forced to (`method=`), where it takes that keyword (beyond
    the spec: the tests below then run every engine, not only the one the rule picks)."""
    if "method" not in inspect.signature(clpatch.knn).parameters:
        return ()
    try:
        from clpatch.match.knn.config import KNN_METHODS
    except ImportError:
        return ("offsets", "direct")
    return tuple(KNN_METHODS)


def forced_knn(query, reference, method, **kwargs):
    """clpatch.knn with method=; None where that engine refuses the request."""
    try:
        return clpatch.knn(query, reference, method=method, **kwargs)
    except ValueError as error:
        if "method" in str(error):
            return None
        raise


@pytest.mark.parametrize("kind", ["labels", "smooth photo"])
def test_engines_agree(runtime, kind):
    """Every engine (forced), on every grid, gives the oracle's matches."""
    methods = engine_methods()
    if not methods:
        pytest.skip("clpatch.knn has no method= keyword")
    if kind == "labels":
        query, reference = labels((21, 23), 4, seed=49), labels((22, 20), 4, seed=50)
    else:
        query, reference = smoothed("camera", (20, 20, 23, 25)), smoothed("camera", (24, 18, 24, 22))
    for method, metric, step, k in itertools.product(methods, ("l2", "l1"), (1, 3), (1, 16, 100)):
        result = forced_knn(query, reference, method, patch_size=5, k=k, metric=metric,
                            step=step, runtime=runtime)
        if result is None:
            continue
        try:
            check_knn(result, query, reference, patch_size=5, k=k, metric=metric, step=step,
                      exact=kind == "labels")
        except AssertionError as error:
            raise AssertionError(f"method={method}, metric={metric}, step={step}, k={k}: "
                                 f"{error}") from None


def test_defaults(runtime):
    image = labels((20, 21), 4, seed=48).astype(np.float32)
    result = clpatch.knn(image, runtime=runtime)
    assert (result.patch_size, result.k, result.metric, result.step) == (8, 16, "l2", 1)
    check_knn(result, image, None, patch_size=8, k=16, exact=True)


# =========================================================================== knn_vectors

VECTOR_CASES = [
    (50, 40, 1, 1),
    (120, 90, 3, 5),
    (300, 200, 17, 5),
    (80, 500, 64, 1),
    (60, 45, 17, 45),       # k = M
    (50, 40, 1, 40),
]


def check_vectors(got, queries, references, k, metric, *, exact: bool) -> None:
    assert isinstance(got, clpatch.KnnVectors)
    distances, indices = (host(a) for a in got)
    exp_i, exp_d = knn_vectors_brute(queries, references, k, metric)
    assert indices.dtype == np.int32 and distances.dtype == np.float32
    assert indices.shape == exp_i.shape and distances.shape == exp_d.shape
    assert np.all((indices >= 0) & (indices < len(references))), "an index is out of range"
    assert np.all(np.diff(np.sort(indices, -1), axis=-1) != 0), "a reference is returned twice"
    assert np.all(np.diff(distances, axis=-1) >= 0), "distances are not ascending"
    if exact:
        bad = np.argwhere(indices != exp_i)
        if len(bad):
            n, j = (int(v) for v in bad[0])
            raise AssertionError(f"{len(bad)} indices differ; first at query {n}, rank {j}: got "
                                 f"{indices[n, j]} at {distances[n, j]}, expected {exp_i[n, j]} "
                                 f"at {exp_d[n, j]}")
        np.testing.assert_array_equal(distances, exp_d.astype(np.float32))
        return
    scale = float(np.max(exp_d)) + 1.0
    tol = dict(rtol=1e-5, atol=2e-6 * scale + 1e-4)
    assert_close(distances, exp_d, what="vector distances vs the oracle", **tol)
    true = np.take_along_axis(vector_distances(queries, references, metric),
                              indices.astype(np.int64), axis=1)
    assert_close(distances, true, what="reported vs true vector distances", **tol)


@pytest.mark.parametrize("metric", ["l2", "l1"])
@pytest.mark.parametrize("n,m,d,k", VECTOR_CASES)
def test_knn_vectors_integer_exact(runtime, metric, n, m, d, k):
    rng = np.random.default_rng(n + m + d + k)
    queries = rng.integers(0, 4, (n, d)).astype(np.uint8)      # ties everywhere
    references = rng.integers(0, 4, (m, d)).astype(np.uint8)
    got = clpatch.knn_vectors(queries, references, k, metric, runtime=runtime)
    check_vectors(got, queries, references, k, metric, exact=True)


@pytest.mark.parametrize("metric", ["l2", "l1"])
@pytest.mark.parametrize("n,m,d,k", VECTOR_CASES)
def test_knn_vectors_float(runtime, metric, n, m, d, k):
    rng = np.random.default_rng(2 * n + m + d + k)
    queries = rng.standard_normal((n, d)).astype(np.float32)
    references = rng.standard_normal((m, d))                     # float64 input
    got = clpatch.knn_vectors(queries, references, k, metric=metric, runtime=runtime)
    check_vectors(got, queries, references, k, metric, exact=False)


@pytest.mark.parametrize("metric", ["l2", "l1"])
@pytest.mark.parametrize("offset,d", [(100.0, 64), (1000.0, 3), (1000.0, 17)])
def test_knn_vectors_far_from_the_origin(runtime, metric, offset, d):
    """Features with a large common mean (unnormalised descriptors, pixel values): distances
    far below the norms must still rank the nearest rows correctly."""
    rng = np.random.default_rng(int(offset) + d)
    queries = (offset + rng.standard_normal((120, d))).astype(np.float32)
    references = (offset + rng.standard_normal((150, d))).astype(np.float32)
    got = clpatch.knn_vectors(queries, references, 5, metric, runtime=runtime)
    check_vectors(got, queries, references, 5, metric, exact=False)


def test_knn_vectors_device_arrays(runtime):
    rng = np.random.default_rng(5)
    queries = rng.integers(0, 5, (70, 9)).astype(np.float32)
    references = rng.integers(0, 5, (55, 9)).astype(np.float32)
    got = clpatch.knn_vectors(cla.to_device(runtime.queue, queries),
                              cla.to_device(runtime.queue, references), 5, runtime=runtime)
    check_vectors(got, queries, references, 5, "l2", exact=True)


# =========================================================================== errors

GOOD = labels((12, 13), 3, seed=50).astype(np.float32)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(k=0), ValueError, "k"),
    (dict(k=-1), ValueError, "k"),
    (dict(patch_size=4, k=91), ValueError, "k"),             # 9 * 10 candidates
    (dict(k=2.5), TypeError, "k"),
    (dict(k=3.0), TypeError, "k"),
    (dict(k="4"), TypeError, "k"),
    (dict(metric="l3"), ValueError, "metric"),
    (dict(metric="L2x"), ValueError, "metric"),
    (dict(step=0), ValueError, "step"),
    (dict(step=-2), ValueError, "step"),
    (dict(patch_size=13), ValueError, "patch_size"),         # larger than 12 rows
    (dict(patch_size=0), ValueError, "patch_size"),
])
def test_bad_arguments(runtime, kwargs, error, match):
    args = dict(patch_size=4, k=3)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        clpatch.knn(GOOD, runtime=runtime, **args)


def test_bad_reference(runtime):
    with pytest.raises(ValueError, match="reference"):            # channel counts differ
        clpatch.knn(np.zeros((12, 13, 3), np.float32), np.zeros((12, 13, 2), np.float32),
                    patch_size=3, k=2, runtime=runtime)
    with pytest.raises(ValueError, match="reference"):
        clpatch.knn(np.zeros((12, 13, 3), np.float32), np.zeros((12, 13), np.float32),
                    patch_size=3, k=2, runtime=runtime)
    with pytest.raises(ValueError, match="patch_size"):           # larger than the reference
        clpatch.knn(GOOD, np.zeros((5, 20), np.float32), patch_size=6, k=2, runtime=runtime)
    with pytest.raises(ValueError, match="k"):                    # k above the reference's
        clpatch.knn(GOOD, np.zeros((5, 6), np.float32), patch_size=4, k=7, runtime=runtime)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["query", "reference"])
def test_non_finite_input(runtime, bad, where):
    broken = GOOD.copy()
    broken[5, 7] = bad
    query, reference = (broken, GOOD) if where == "query" else (GOOD, broken)
    with pytest.raises(ValueError, match="NaN"):
        clpatch.knn(query, reference, patch_size=4, k=3, runtime=runtime)
    if where == "query":
        with pytest.raises(ValueError, match="NaN"):
            clpatch.knn(broken, patch_size=4, k=3, runtime=runtime)


def test_knn_vectors_bad_arguments(runtime):
    q = np.zeros((10, 4), np.float32)
    r = np.zeros((8, 4), np.float32)
    with pytest.raises(ValueError, match="queries"):
        clpatch.knn_vectors(np.zeros(10, np.float32), r, 2, runtime=runtime)
    with pytest.raises(ValueError, match="queries"):
        clpatch.knn_vectors(np.zeros((2, 5, 4), np.float32), r, 2, runtime=runtime)
    with pytest.raises(ValueError, match="references"):
        clpatch.knn_vectors(q, np.zeros(8, np.float32), 2, runtime=runtime)
    with pytest.raises(ValueError, match="queries|references"):
        clpatch.knn_vectors(q, np.zeros((8, 5), np.float32), 2, runtime=runtime)
    for k in (0, 9, -1):
        with pytest.raises(ValueError, match="k"):
            clpatch.knn_vectors(q, r, k, runtime=runtime)
    with pytest.raises(TypeError, match="k"):
        clpatch.knn_vectors(q, r, 2.5, runtime=runtime)
    with pytest.raises(ValueError, match="metric"):
        clpatch.knn_vectors(q, r, 2, metric="chamfer", runtime=runtime)
    q_nan = q.copy()
    q_nan[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        clpatch.knn_vectors(q_nan, r, 2, runtime=runtime)


# =========================================================================== slow sweeps


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["l2", "l1"])
@pytest.mark.parametrize("patch,k,step", [(3, 16, 1), (5, 100, 2), (8, 16, 1), (7, 32, 3)])
def test_large_float(runtime, metric, patch, k, step):
    query = random_image((40, 37), seed=patch)
    reference = random_image((38, 40), seed=patch + 1)
    result = clpatch.knn(query, reference, patch_size=patch, k=k, metric=metric, step=step,
                         runtime=runtime)
    check_knn(result, query, reference, patch_size=patch, k=k, metric=metric, step=step,
              exact=False)


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["l2", "l1"])
def test_large_photo_exact(runtime, metric):
    image = crop("moon", 200, 200, 40, 40)
    result = clpatch.knn(image, patch_size=8, k=16, metric=metric, runtime=runtime)
    check_knn(result, image, None, patch_size=8, k=16, metric=metric, exact=True)


@pytest.mark.slow
@pytest.mark.parametrize("metric", CHAMFERS)
@pytest.mark.parametrize("patch", [3, 5])
def test_large_chamfer(runtime, metric, patch):
    query = crop("coins", 100, 100, 24, 24) // 48
    reference = crop("coins", 130, 90, 23, 24) // 48
    k = n_candidates(reference, patch)
    result = clpatch.knn(query, reference, patch_size=patch, k=k, metric=metric, step=2,
                         runtime=runtime)
    check_knn(result, query, reference, patch_size=patch, k=k, metric=metric, step=2, exact=True)


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["l2", "l1"])
def test_large_vectors(runtime, metric):
    rng = np.random.default_rng(60)
    queries = rng.integers(0, 6, (1000, 64)).astype(np.float32)
    references = rng.integers(0, 6, (2000, 64)).astype(np.float32)
    for k in (1, 16, 2000):
        got = clpatch.knn_vectors(queries, references, k, metric, runtime=runtime)
        check_vectors(got, queries, references, k, metric, exact=True)
