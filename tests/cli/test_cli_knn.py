"""`clpatch knn`: the exhaustive k-nearest-patch search from the command line.

Images are tiny PNG files written to tmp_path (the suite runs on 2-core CPUs); what the command
saves is compared with calling `clpatch.knn` directly on the same arrays and device.
"""

from __future__ import annotations

import numpy as np
import pytest

import clpatch
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.helpers import assert_close, load_image, read_npz, write_png

KEYS = {"positions", "distances", "grid_y", "grid_x", "patch_size", "step", "k", "metric"}


def _labels(shape, seed: int) -> np.ndarray:
    """A label image (few distinct values), as the Chamfer distance expects."""
    return (np.random.default_rng(seed).integers(0, 4, shape) * 60).astype(np.uint8)


def assert_saved(saved: dict, expected, *, patch_size: int, step: int, k: int,
                 metric: str) -> None:
    """The .npz holds the direct call's result and the parameters it was run with."""
    assert KEYS <= set(saved), sorted(saved)
    np.testing.assert_array_equal(saved["grid_y"], expected.grid_y)
    np.testing.assert_array_equal(saved["grid_x"], expected.grid_x)
    assert saved["positions"].dtype == np.int32 and saved["distances"].dtype == np.float32
    assert saved["positions"].shape == (len(expected.grid_y), len(expected.grid_x), k, 2)
    np.testing.assert_array_equal(saved["positions"], np.asarray(expected.positions))
    assert_close(saved["distances"], np.asarray(expected.distances), rtol=1e-6, atol=1e-3,
                 what=f"CLI {metric} distances vs clpatch.knn")
    assert int(saved["patch_size"]) == patch_size and int(saved["step"]) == step
    assert int(saved["k"]) == k and str(saved["metric"]) == metric


def test_knn_self_search(capsys, tmp_path, runtime):
    image = load_image("brick", np.uint8)[200:224, 300:324]
    path = write_png(tmp_path / "brick.png", image)
    out_file = tmp_path / "knn.npz"
    code, out, err = run(capsys, "knn", path, "--patch-size", 5, "-k", 4, "--step", 3,
                         "--device", spec_of(runtime), "--output", out_file)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    # Query rows/columns 0, 3, ..., 18 plus the last valid 19: 8 x 8; candidates 20 x 20.
    assert "64 queries x 400 candidates" in lines[0] and "k 4" in lines[0], out
    assert str(out_file) in lines[0]
    expected = clpatch.knn(image, patch_size=5, k=4, step=3, runtime=runtime)
    saved = read_npz(out_file)
    assert_saved(saved, expected, patch_size=5, step=3, k=4, metric="l2")
    # Self-search: every query patch finds itself first, at distance 0 (this crop has no two
    # identical patches, which the tie rule would order by index instead).
    gy, gx = np.meshgrid(saved["grid_y"], saved["grid_x"], indexing="ij")
    np.testing.assert_array_equal(saved["positions"][:, :, 0], np.stack([gy, gx], axis=-1))
    assert np.all(saved["distances"][:, :, 0] == 0)
    assert np.all(np.diff(saved["distances"], axis=-1) >= 0)


def test_knn_two_colour_images(capsys, tmp_path, runtime):
    photo = load_image("motorcycle_left", np.uint8)
    query, reference = photo[20:36, 40:58], photo[60:82, 90:110]
    q_path = write_png(tmp_path / "query.png", query)
    r_path = write_png(tmp_path / "reference.png", reference)
    out_file = tmp_path / "pair.npz"
    code, out, err = run(capsys, "knn", q_path, r_path, "-p", 4, "-k", 3, "-s", 2,
                         "--metric", "l1", "--device", spec_of(runtime), "-o", out_file)
    assert code == 0, err
    assert f"x {19 * 17} candidates" in out, out
    expected = clpatch.knn(query, reference, patch_size=4, k=3, metric="l1", step=2,
                           runtime=runtime)
    saved = read_npz(out_file)
    assert_saved(saved, expected, patch_size=4, step=2, k=3, metric="l1")
    positions = saved["positions"]
    assert positions[..., 0].max() <= 22 - 4 and positions[..., 1].max() <= 20 - 4


@pytest.mark.parametrize("metric", ["chamfer", "chamfer_sym"])
def test_knn_chamfer(capsys, tmp_path, runtime, metric):
    query, reference = _labels((12, 14), seed=1), _labels((14, 12), seed=2)
    q_path = write_png(tmp_path / "q.png", query)
    r_path = write_png(tmp_path / "r.png", reference)
    out_file = tmp_path / f"{metric}.npz"
    code, out, err = run(capsys, "knn", q_path, r_path, "-p", 4, "-k", 3, "-s", 2,
                         "--metric", metric, "--device", spec_of(runtime), "-o", out_file)
    assert code == 0, err
    assert metric in out
    expected = clpatch.knn(query, reference, patch_size=4, k=3, metric=metric, step=2,
                           runtime=runtime)
    saved = read_npz(out_file)
    assert_saved(saved, expected, patch_size=4, step=2, k=3, metric=metric)
    # Per pixel the one-way distance is at most 2 (p - 1): the symmetric sum twice that.
    bound = 16 * 2 * 3 * (2 if metric == "chamfer_sym" else 1)
    assert saved["distances"].min() >= 0 and saved["distances"].max() <= bound


def test_knn_refuses_an_existing_output(capsys, tmp_path, runtime):
    path = write_png(tmp_path / "small.png", _labels((10, 10), seed=3))
    out_file = tmp_path / "exists.npz"
    out_file.write_bytes(b"keep me")
    argv = ["knn", path, "-p", 3, "-k", 2, "--device", spec_of(runtime), "-o", out_file]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert_one_error_line(err, str(out_file), "already exists", "--overwrite")
    assert out_file.read_bytes() == b"keep me"

    code, out, err = run(capsys, *argv, "--overwrite")
    assert code == 0, err
    assert int(read_npz(out_file)["k"]) == 2
    assert out_file.stat().st_mode & 0o777 == (tmp_path / "small.png").stat().st_mode & 0o777
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists.npz", "small.png"]


def test_knn_output_folder_must_exist(capsys, tmp_path, runtime):
    path = write_png(tmp_path / "small.png", _labels((10, 10), seed=3))
    code, _, err = run(capsys, "knn", path, "-p", 3, "-k", 2, "--device", spec_of(runtime),
                       "-o", tmp_path / "no-such-folder" / "out.npz")
    assert code == 2
    assert_one_error_line(err, "does not exist")


@pytest.mark.parametrize("argv,fragments", [
    (["-k", "0"], ["k must be in [1, 9], got 0"]),
    (["-k", "-3"], ["k must be in [1, 9], got -3"]),
    (["-k", "500"], ["k must be in [1, 9], got 500"]),
    (["-k", "many"], ["invalid int value"]),
    (["--patch-size", "0"], ["patch_size must be in [1,"]),
    (["--patch-size", "12"], ["patch_size 12 is larger than"]),
    (["--step", "0"], ["step must be in [1,"]),
    (["--metric", "l3"], ["invalid choice"]),
])
def test_knn_bad_arguments(capsys, tmp_path, runtime, argv, fragments):
    # 10 x 10 with the default 8 x 8 patches: 3 x 3 = 9 candidates, so k is 1 to 9.
    path = write_png(tmp_path / "small.png", _labels((10, 10), seed=3))
    out_file = tmp_path / "bad.npz"
    code, out, err = run(capsys, "knn", path, "--device", spec_of(runtime), "-o", out_file,
                         *argv)
    assert code == 2 and out == ""
    assert_one_error_line(err, *fragments)
    assert not out_file.exists()


def test_knn_needs_an_output_and_has_help(capsys, tmp_path):
    path = write_png(tmp_path / "small.png", _labels((10, 10), seed=3))
    code, _, err = run(capsys, "knn", path)
    assert code == 2
    assert_one_error_line(err, "--output")
    code, out, _ = run(capsys, "knn", "--help")
    assert code == 0 and "--patch-size" in out and "chamfer_sym" in out and "--overwrite" in out
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "knn" in out
