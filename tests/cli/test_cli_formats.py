"""`clpatch denoise` writing WebP and BMP, and reading and writing floating-point TIFF (the
files themselves: tests/io/test_image_formats.py)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from clpatch.denoise.nlmeans import nlmeans
from clpatch.io import images as imageio
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.cli.test_cli_denoise import crop, noisy, psnr_values


def test_denoise_writes_lossless_webp_and_its_psnr_is_the_files(capsys, tmp_path, runtime):
    """The PSNR printed for a WebP output is the written file's (lossless: the values the
    8-bit result holds), as for PNG."""
    clean = crop("astronaut")
    src, dst = tmp_path / "clean.png", tmp_path / "out.webp"
    Image.fromarray(clean).save(src)
    code, out, err = run(capsys, "denoise", src, dst, "--add-noise", 20, "--seed", 3,
                         "-w", 11, "-n", 8, "--device", spec_of(runtime))
    assert code == 0, err
    assert f"output:     {dst} (8-bit RGB WEBP)" in out
    _, after = psnr_values(out)
    written, info = imageio.read_image(dst)
    assert info.format == "WEBP" and info.mode == "RGB"
    assert imageio.psnr(written, clean.astype(np.float32), 255) == pytest.approx(after, abs=0.005)
    noisy_image = imageio.add_noise(clean.astype(np.float32), 20, 3)
    expected = np.clip(np.rint(nlmeans(noisy_image, 20, window=11, k=8, runtime=runtime)), 0, 255)
    np.testing.assert_array_equal(written, expected)


def test_denoise_writes_bmp_and_refuses_16bit_webp_and_bmp(capsys, tmp_path, runtime):
    image = noisy(crop("camera"), 20)
    src = tmp_path / "noisy.png"
    Image.fromarray(image).save(src)
    code, out, err = run(capsys, "denoise", src, tmp_path / "out.bmp", "--sigma", 20,
                         "-w", 11, "-n", 8, "--device", spec_of(runtime))
    assert code == 0, err
    assert "(8-bit L BMP)" in out
    with Image.open(tmp_path / "out.bmp") as written:
        assert written.format == "BMP" and written.mode == "L"
    deep = tmp_path / "deep.png"
    Image.fromarray(image.astype(np.uint16) * 257).save(deep)
    for name, fmt in (("deep.webp", "WebP"), ("deep.bmp", "BMP")):
        code, out, err = run(capsys, "denoise", deep, tmp_path / name, "--sigma", 5000)
        assert code == 2 and out == ""
        assert_one_error_line(err, name, f"{fmt} cannot store 16-bit images",
                              "write .png or .tif instead")
        assert not (tmp_path / name).exists()


def test_denoise_float_tiff_to_float_tiff(capsys, tmp_path, runtime):
    """A float32 TIFF is denoised in its own values and written back as float32, exactly the
    library's result; `--clean` compares against a float TIFF."""
    tifffile = pytest.importorskip("tifffile")
    clean = crop("astronaut").astype(np.float32) / 255  # a 0-1 scientific image
    image = imageio.add_noise(clean, 0.05, 4)
    src, ref, dst = tmp_path / "in.tif", tmp_path / "clean.tif", tmp_path / "out.tif"
    tifffile.imwrite(src, image, photometric="rgb")
    tifffile.imwrite(ref, clean, photometric="rgb")
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 0.05, "--clean", ref,
                         "-w", 11, "-n", 8, "--device", spec_of(runtime))
    assert code == 0, err
    assert "in.tif: 40x50, float32 RGB TIFF" in out
    assert f"output:     {dst} (float32 RGB TIFF)" in out
    written = tifffile.imread(dst)
    assert written.dtype == np.float32
    expected = nlmeans(image, 0.05, window=11, k=8, runtime=runtime)
    np.testing.assert_array_equal(written, expected)
    _, after = psnr_values(out)
    assert imageio.psnr(written, clean, 1.0) == pytest.approx(after, abs=0.005)


def test_float_input_written_8bit_reports_the_files_psnr(capsys, tmp_path, runtime):
    """A float result written to an 8-bit format is rounded to 0-255: the PSNR printed is
    that of the file written (read back), not of the float result."""
    clean = crop("astronaut")[..., 0].astype(np.float32)
    src, ref, dst = tmp_path / "in.npy", tmp_path / "clean.npy", tmp_path / "out.png"
    np.save(src, imageio.add_noise(clean, 20, 5))
    np.save(ref, clean)
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20, "--clean", ref,
                         "-w", 11, "-n", 8, "--device", spec_of(runtime))
    assert code == 0, err
    assert "of the PNG file written" in out
    _, after = psnr_values(out)
    written, _ = imageio.read_image(dst)
    assert imageio.psnr(written.astype(np.float32), clean, 255) == pytest.approx(after,
                                                                                  abs=0.005)
