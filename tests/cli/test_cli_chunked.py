"""`clpatch denoise --chunks`: TIFF and Zarr read and written by chunks, the same result as
clpatch.dask (itself bit-identical to one in-memory call: tests/dask)."""

from __future__ import annotations

import numpy as np
import pytest

from clpatch.denoise.bm3d import bm3d
from clpatch.denoise.nlmeans import nlmeans
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.cli.test_cli_denoise import crop, noisy

pytest.importorskip("dask.array")
zarr = pytest.importorskip("zarr")
tifffile = pytest.importorskip("tifffile")


def test_tiff_to_zarr_and_back(capsys, runtime, tmp_path):
    image = noisy(crop("camera", 48, 37), 20)
    source = tmp_path / "in.tif"
    tifffile.imwrite(source, image, tile=(16, 16))
    code, out, err = run(capsys, "denoise", source, tmp_path / "out.zarr", "--sigma", 20,
                         "--chunks", 32, "--device", spec_of(runtime))
    assert code == 0, err
    assert "4 chunks of 32x32" in out
    expected = np.clip(np.rint(nlmeans(image.astype(np.float32), 20, runtime=runtime)), 0, 255)
    written = zarr.open_array(str(tmp_path / "out.zarr"), mode="r")
    assert written.dtype == np.uint8 and written.chunks == (32, 32)
    np.testing.assert_array_equal(written[:], expected)
    # Zarr in, tiled TIFF out, BM3D.
    code, out, err = run(capsys, "denoise", tmp_path / "out.zarr", tmp_path / "again.tif",
                         "--sigma", 5, "--method", "bm3d", "--chunks", 32,
                         "--device", spec_of(runtime))
    assert code == 0, err
    again = tifffile.imread(tmp_path / "again.tif")
    want = bm3d(np.asarray(expected, np.float32), 5, data_range=255.0, runtime=runtime)
    np.testing.assert_array_equal(again, np.clip(np.rint(want), 0, 255))


def test_colour_16_bit_tiff(capsys, runtime, tmp_path):
    rgb = (noisy(crop("astronaut", 33, 40), 10).astype(np.uint16) * 257)
    source = tmp_path / "rgb.tif"
    tifffile.imwrite(source, rgb, photometric="rgb")
    code, _, err = run(capsys, "denoise", source, tmp_path / "rgb_out.tif", "--sigma", 2570,
                       "--chunks", 16, "-p", 5, "-w", 9, "--device", spec_of(runtime))
    assert code == 0, err
    got = tifffile.imread(tmp_path / "rgb_out.tif")
    want = nlmeans(rgb.astype(np.float32), 2570, patch_size=5, window=9, runtime=runtime)
    assert got.dtype == np.uint16 and got.shape == rgb.shape
    np.testing.assert_array_equal(got, np.clip(np.rint(want), 0, 65535))


@pytest.mark.parametrize("argv,fragments", [
    (["in.png", "out.zarr", "--chunks", "32"], ["TIFF", "in.png"]),
    (["in.tif", "out.zarr", "--chunks", "8"], ["at least 16"]),
    (["in.tif", "out.zarr", "--chunks", "32", "--method", "vbm3d"], ["nlmeans or bm3d"]),
    (["in.tif", "out.tif", "--chunks", "40"], ["multiple of 16"]),
    (["in.tif", "out.zarr", "--scheduler", "tcp://x:1"], ["--scheduler goes with --chunks"]),
    (["in.tif", "in.tif", "--chunks", "32", "--overwrite"], ["must not be IN"]),
])
def test_errors(capsys, tmp_path, argv, fragments):
    tifffile.imwrite(tmp_path / "in.tif", np.zeros((40, 40), np.uint8))
    code, _, err = run(capsys, "denoise", *[tmp_path / a if "." in a and not a.startswith("tcp")
                                            else a for a in argv], "--sigma", 10)
    assert code == 2
    assert_one_error_line(err, *fragments)
