"""`clpatch nnf`: the approximate nearest-neighbour field from the command line.

Images are tiny PNG (or .npy) files written to tmp_path (the suite runs on 2-core CPUs);
what the command saves is compared with calling `clpatch.nnf` and `clpatch.reconstruct`
directly on the same arrays and device.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import clpatch
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.helpers import load_image, read_npz, write_png

KEYS = {"positions", "distances", "grid_y", "grid_x", "patch_size", "k", "pca_dims",
        "candidates", "leaf_size", "seed", "device"}


def _noise(shape, seed: int, high: int = 256, dtype=np.uint8) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, shape).astype(dtype)


def _rounded(image) -> np.ndarray:
    return np.clip(np.rint(np.asarray(image)), 0, 255).astype(np.uint8)


def assert_saved(saved: dict, expected, **params) -> None:
    """The .npz holds the direct call's field and the parameters it was run with."""
    assert KEYS <= set(saved), sorted(saved)
    np.testing.assert_array_equal(saved["positions"], expected.positions)
    np.testing.assert_array_equal(saved["distances"], expected.distances)
    np.testing.assert_array_equal(saved["grid_y"], expected.grid_y)
    np.testing.assert_array_equal(saved["grid_x"], expected.grid_x)
    for name, value in params.items():
        assert int(saved[name]) == value, (name, saved[name], value)


def test_colour_pair_with_reconstruction(capsys, tmp_path, runtime):
    a = np.ascontiguousarray(load_image("motorcycle_left", np.uint8)[60:80, 90:114])
    b = np.ascontiguousarray(load_image("motorcycle_right", np.uint8)[58:80, 84:104])
    a_path, b_path = write_png(tmp_path / "a.png", a), write_png(tmp_path / "b.png", b)
    out, rec = tmp_path / "field.npz", tmp_path / "rebuilt.png"
    code, text, err = run(capsys, "nnf", a_path, b_path, "-p", 4, "-k", 2, "--pca-dims", 6,
                          "--candidates", 8, "--leaf-size", 16, "--seed", 3, "-o", out,
                          "--reconstruct", rec, "--device", spec_of(runtime))
    assert code == 0, err
    params = dict(patch_size=4, k=2, pca_dims=6, candidates=8, leaf_size=16, seed=3)
    expected = clpatch.nnf(a, b, runtime=runtime, **params)
    assert_saved(read_npz(out), expected, **params)
    assert str(runtime.device.name.strip()) == str(read_npz(out)["device"])
    for fragment in (f"a:          {a_path}: 20x24x3 uint8 (17 x 21 = 357 patches)",
                     f"b:          {b_path}: 22x20x3 uint8 (19 x 17 = 323 patches)",
                     "patch 4, k 2, pca_dims 6, candidates 8, leaf size 16, seed 3",
                     runtime.device.name.strip(), "wall time:",
                     f"first neighbour mean {expected.distances[..., 0].mean():.6g}",
                     f"saved:      {out}", f"rebuilt:    {rec}"):
        assert fragment in text, (fragment, text)
    rebuilt = np.asarray(Image.open(rec))
    assert rebuilt.shape == a.shape and rebuilt.dtype == np.uint8
    np.testing.assert_array_equal(rebuilt, _rounded(clpatch.reconstruct(expected, b,
                                                                         runtime=runtime)))


def test_gray_defaults(capsys, tmp_path, runtime):
    a, b = _noise((21, 18), seed=1), _noise((17, 19), seed=2)
    a_path, b_path = write_png(tmp_path / "a.png", a), write_png(tmp_path / "b.png", b)
    out = tmp_path / "field.npz"
    code, text, err = run(capsys, "nnf", a_path, b_path, "-o", out, "--device",
                          spec_of(runtime))
    assert code == 0, err
    expected = clpatch.nnf(a, b, runtime=runtime)
    # leaf_size 0: the default rule picked it
    assert_saved(read_npz(out), expected, patch_size=8, k=1, pca_dims=10, candidates=8,
                 leaf_size=0, seed=0)
    assert "patch 8, k 1, pca_dims 10, candidates 8, leaf size default, seed 0" in text
    assert "rebuilt:" not in text


def test_reconstruction_keeps_depth_and_alpha(capsys, tmp_path, runtime):
    """16-bit gray stays 16-bit; RGBA's alpha is a channel like the others; float .npy
    data is written as float32 .npy."""
    device = ["--device", spec_of(runtime), "-p", 3, "--pca-dims", 4]
    cases = [
        ("deep", _noise((17, 16), seed=3, high=60000, dtype=np.uint16),
         _noise((15, 18), seed=4, high=60000, dtype=np.uint16), ".png"),
        ("rgba", _noise((16, 17, 4), seed=5), _noise((18, 15, 4), seed=6), ".png"),
        ("float", _noise((16, 15, 2), seed=7).astype(np.float32) / 7,
         _noise((15, 17, 2), seed=8).astype(np.float32) / 7, ".npy"),
    ]
    for name, a, b, suffix in cases:
        if suffix == ".npy":
            np.save(tmp_path / f"{name}_a.npy", a)
            np.save(tmp_path / f"{name}_b.npy", b)
            paths = [tmp_path / f"{name}_a.npy", tmp_path / f"{name}_b.npy"]
        else:
            paths = [write_png(tmp_path / f"{name}_a.png", a), write_png(tmp_path / f"{name}_b.png", b)]
        rec = tmp_path / f"{name}_rebuilt{suffix}"
        code, _, err = run(capsys, "nnf", *paths, "-o", tmp_path / f"{name}.npz",
                           "--reconstruct", rec, *device)
        assert code == 0, (name, err)
        field = clpatch.nnf(a, b, patch_size=3, pca_dims=4, runtime=runtime)
        expected = clpatch.reconstruct(field, b, runtime=runtime)
        got = np.load(rec) if suffix == ".npy" else np.asarray(Image.open(rec))
        assert got.shape == a.shape, name
        if name == "deep":
            assert got.max() > 255
            np.testing.assert_array_equal(got, np.clip(np.rint(expected), 0, 65535))
        elif name == "rgba":
            assert Image.open(rec).mode == "RGBA"
            np.testing.assert_array_equal(got, _rounded(expected))
        else:
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, expected)


def test_existing_outputs_are_refused(capsys, tmp_path, runtime):
    a_path = write_png(tmp_path / "a.png", _noise((12, 12), seed=9))
    out, rec = tmp_path / "exists.npz", tmp_path / "exists.png"
    out.write_bytes(b"keep me")
    argv = ["nnf", a_path, a_path, "-p", 3, "--pca-dims", 4, "--device", spec_of(runtime)]
    code, text, err = run(capsys, *argv, "-o", out)
    assert code == 2 and text == ""
    assert_one_error_line(err, str(out), "already exists", "--overwrite")
    assert out.read_bytes() == b"keep me"
    rec.write_bytes(b"keep me too")
    code, text, err = run(capsys, *argv, "-o", tmp_path / "new.npz", "--reconstruct", rec)
    assert code == 2 and text == ""
    assert_one_error_line(err, str(rec), "already exists")
    assert rec.read_bytes() == b"keep me too" and not (tmp_path / "new.npz").exists()
    code, _, err = run(capsys, *argv, "-o", out, "--reconstruct", rec, "--overwrite")
    assert code == 0, err
    assert int(read_npz(out)["patch_size"]) == 3
    assert np.asarray(Image.open(rec)).shape == (12, 12)
    code, _, err = run(capsys, *argv, "-o", a_path, "--overwrite")  # never over an input
    assert code == 2
    assert_one_error_line(err, str(a_path))


@pytest.mark.parametrize("argv,fragment", [
    (["-k", "0"], "k must be in [1, 32], got 0"),
    (["-k", "9"], "candidates (8) must be at least k (9)"),
    (["-k", "many"], "invalid int value"),
    (["--patch-size", "0"], "patch_size must be in [1, 32], got 0"),
    (["--patch-size", "13"], "patch_size 13 is larger than a (12x12) or b (12x12)"),
    (["--candidates", "65"], "candidates must be in [1, 64], got 65"),
    (["--pca-dims", "0"], "pca_dims must be in [1, 9], got 0"),
    (["--pca-dims", "10"], "pca_dims must be in [1, 9], got 10"),   # the default, for p 3
    (["--leaf-size", "12"], "leaf_size must be a power of two, got 12"),
    (["--leaf-size", "4"], "leaf_size (4) must be at least candidates (8)"),
    (["--seed", "-1"], "must be >= 0, got -1"),
])
def test_bad_arguments_exit_2(capsys, tmp_path, runtime, argv, fragment):
    a_path = write_png(tmp_path / "a.png", _noise((12, 12), seed=10))
    out = tmp_path / "bad.npz"
    base = ["nnf", a_path, a_path, "-o", out, "--device", spec_of(runtime), "-p", "3"]
    if "--pca-dims" not in argv:
        base += ["--pca-dims", "4"]
    code, text, err = run(capsys, *base, *argv)
    assert code == 2 and text == ""
    assert_one_error_line(err, fragment)
    assert not out.exists()


def test_bad_images(capsys, tmp_path, runtime):
    gray = write_png(tmp_path / "gray.png", _noise((12, 12), seed=11))
    rgb = write_png(tmp_path / "rgb.png", _noise((12, 12, 3), seed=12))
    broken = np.zeros((12, 12), np.float32)
    broken[3, 4] = np.nan
    np.save(tmp_path / "nan.npy", broken)
    frames = [Image.fromarray(_noise((12, 12), seed=s)) for s in (13, 14)]
    frames[0].save(tmp_path / "two.gif", save_all=True, append_images=frames[1:])
    device = ["-p", "3", "--pca-dims", "4", "--device", spec_of(runtime)]
    for argv, code, fragment in [
        ([gray, rgb], 2, "b has 3 channels, a has 1"),
        ([tmp_path / "nan.npy", gray], 2, "a contains NaN or infinite values"),
        ([gray, tmp_path / "nan.npy"], 2, "b contains NaN or infinite values"),
        ([tmp_path / "two.gif", gray], 2, "a multi-frame file"),
        ([gray, tmp_path / "missing.png"], 2, "missing.png"),
    ]:
        out = tmp_path / "bad.npz"
        got, text, err = run(capsys, "nnf", *argv, "-o", out, *device)
        assert got == code and text == "", (argv, err)
        assert_one_error_line(err, fragment)
        assert not out.exists()
    for rec, fragment in [(tmp_path / "r.xyz", "cannot write '.xyz' files"),
                          (tmp_path / "r.jpg", "JPEG cannot store an alpha channel")]:
        rgba = write_png(tmp_path / "rgba.png", _noise((12, 12, 4), seed=15))
        got, _, err = run(capsys, "nnf", rgba, rgba, "-o", tmp_path / "x.npz",
                          "--reconstruct", rec, *device)
        assert got == 2
        assert_one_error_line(err, fragment)
        assert not (tmp_path / "x.npz").exists()


def test_needs_an_output_and_has_help(capsys, tmp_path):
    path = write_png(tmp_path / "small.png", _noise((10, 10), seed=16))
    code, _, err = run(capsys, "nnf", path, path)
    assert code == 2
    assert_one_error_line(err, "--output")
    code, out, _ = run(capsys, "nnf", "--help")
    assert code == 0
    for option in ("--patch-size", "--pca-dims", "--candidates", "--leaf-size", "--seed",
                   "--reconstruct", "--overwrite", "--device"):
        assert option in out
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "nnf" in out
