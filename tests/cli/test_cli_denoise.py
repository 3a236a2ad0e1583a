"""`clpatch denoise` and `clpatch demo` (the image files behind them: tests/io/test_images.py).

Images are small crops of tests/data written to tmp_path, so that every denoising run is quick
on a CPU; the command's results are compared with calling `nlmeans` directly.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from clpatch.cli import denoise as cli_denoise
from clpatch.denoise.bm3d import bm3d
from clpatch.denoise.nlmeans import nlmeans
from clpatch.denoise.noise_level import estimate_sigma
from clpatch.io import images as imageio
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.helpers import load_image

PSNR_LINE = re.compile(r"PSNR: +noisy (-?[\d.]+) dB -> denoised (-?[\d.]+) dB")


def crop(name: str, rows: int = 40, cols: int = 50, top: int = 100, left: int = 120) -> np.ndarray:
    """A uint8 crop of a test photograph."""
    return load_image(name, np.uint8)[top:top + rows, left:left + cols]


def noisy(image: np.ndarray, sigma: float, seed: int = 1, peak: int = 255) -> np.ndarray:
    """`image` with seeded Gaussian noise, rounded and clipped to its range, as image.dtype."""
    values = imageio.add_noise(image.astype(np.float32), sigma, seed)
    return np.clip(np.rint(values), 0, peak).astype(image.dtype)


def expected_output(image: np.ndarray, sigma: float, runtime, peak: int = 255) -> np.ndarray:
    """What the command should write: nlmeans of the float image, rounded and clipped."""
    result = nlmeans(image.astype(np.float32), sigma, runtime=runtime)
    return np.clip(np.rint(result), 0, peak)


def assert_same_output(written: np.ndarray, expected: np.ndarray) -> None:
    """Equal up to one unit where float rounding lands on the other side of .5."""
    assert written.shape == expected.shape
    diff = np.abs(written.astype(np.float64) - expected)
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01, f"max {diff.max()}, {(diff > 0).sum()} differ"


def psnr_values(out: str) -> tuple[float, float]:
    found = PSNR_LINE.search(out)
    assert found, f"no PSNR line in:\n{out}"
    return float(found.group(1)), float(found.group(2))


# ---- round trips through the command ----------------------------------------------------

def test_denoise_8bit_gray_png(capsys, tmp_path, runtime):
    image = noisy(crop("camera"), 20)
    src, dst = tmp_path / "noisy.png", tmp_path / "out.png"
    Image.fromarray(image).save(src)
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20, "--device", spec_of(runtime))
    assert code == 0, err
    assert "noisy.png: 40x50, 8-bit L PNG" in out and "nlmeans, sigma 20, patch 8" in out
    assert re.search(r"time: +\d+\.\d+ s", out) and "PSNR" not in out
    assert f"output:     {dst} (8-bit L PNG)" in out
    with Image.open(dst) as written:
        assert written.mode == "L"
        assert_same_output(np.asarray(written), expected_output(image, 20, runtime))


def test_denoise_16bit_gray_png_keeps_16_bits(capsys, tmp_path, runtime):
    image = noisy(crop("moon").astype(np.uint16) * 257, 20 * 257, peak=65535)
    src, dst = tmp_path / "deep.png", tmp_path / "deep-out.png"
    Image.fromarray(image).save(src)
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20 * 257,
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert "16-bit L PNG" in out
    with Image.open(dst) as written:
        assert written.mode.startswith("I")
        values = np.asarray(written)
    assert values.max() > 255  # not reduced to 8 bits
    assert_same_output(values, expected_output(image, 20 * 257, runtime, peak=65535))


def test_denoise_rgb_png(capsys, tmp_path, runtime):
    image = noisy(crop("astronaut"), 20)
    src, dst = tmp_path / "colour.png", tmp_path / "colour-out.tif"
    Image.fromarray(image).save(src)
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20, "-w", 11, "-n", 8,
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert "8-bit RGB PNG" in out and "window 11, k 8" in out and "(8-bit RGB TIFF)" in out
    with Image.open(dst) as written:
        assert written.mode == "RGB"
        values = np.asarray(written)
    expected = np.clip(np.rint(nlmeans(image.astype(np.float32), 20, window=11, k=8,
                                       runtime=runtime)), 0, 255)
    assert_same_output(values, expected)


def test_denoise_rgba_keeps_alpha(capsys, tmp_path, runtime):
    rgb = noisy(crop("astronaut"), 20)
    alpha = np.random.default_rng(5).integers(0, 256, rgb.shape[:2], dtype=np.uint8)
    src, dst = tmp_path / "rgba.png", tmp_path / "rgba-out.png"
    Image.fromarray(np.dstack([rgb, alpha])).save(src)
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20, "--device", spec_of(runtime))
    assert code == 0, err
    assert "8-bit RGBA PNG" in out
    with Image.open(dst) as written:
        assert written.mode == "RGBA"
        values = np.asarray(written)
    np.testing.assert_array_equal(values[..., 3], alpha)
    assert_same_output(values[..., :3], expected_output(rgb, 20, runtime))


def test_npy_channels_are_all_filtered(capsys, tmp_path, runtime):
    """A (H, W, 4) .npy array has no alpha: the command filters all four channels, as the
    library does; BM3D, which filters 1 or 3 channels, says so before any work."""
    image = np.dstack([noisy(crop("camera"), 20, seed=s) for s in range(4)]).astype(np.float32)
    src, dst = tmp_path / "four.npy", tmp_path / "out.npy"
    np.save(src, image)
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20, "--window", 11, "-n", 8,
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert "float32 4-channel NPY" in out
    expected = nlmeans(image, 20, window=11, k=8, runtime=runtime)
    np.testing.assert_array_equal(np.load(dst), expected)
    code, _, err = run(capsys, "denoise", src, tmp_path / "b.npy", "--method", "bm3d",
                       "--sigma", 20, "--device", spec_of(runtime))
    assert code == 2 and "filters grayscale or RGB images, and four.npy is a 4-channel" in err
    code, _, err = run(capsys, "denoise", src, tmp_path / "b.png", "--sigma", 20)
    assert code == 2 and "is written as .npy only" in err


def test_palette_image_says_how_it_is_read(capsys, tmp_path, runtime):
    rgb = noisy(crop("astronaut"), 20)
    src, dst = tmp_path / "palette.png", tmp_path / "out.png"
    Image.fromarray(rgb).convert("P").save(src)
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20, "--window", 11, "-n", 8,
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert "note:       a palette image: denoised as RGB" in out
    with Image.open(dst) as written:
        assert written.mode == "RGB"


def test_denoise_16bit_rgb_png(capsys, tmp_path, runtime):
    """Pillow reads 16-bit colour PNG as 8 bits; clpatch decodes and writes it itself."""
    image = noisy(crop("astronaut").astype(np.uint16) * 257, 20 * 257, peak=65535)
    src, dst = tmp_path / "deep-colour.png", tmp_path / "deep-colour-out.png"
    src.write_bytes(imageio.encode_png(image))
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20 * 257,
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert "16-bit RGB PNG" in out
    written, video = imageio.read_array(dst)
    assert not video and written.dtype == np.uint16
    assert_same_output(written, expected_output(image, 20 * 257, runtime, peak=65535))


def test_denoise_reads_and_writes_jpeg(capsys, tmp_path, runtime):
    image = noisy(crop("camera"), 20)
    src, dst = tmp_path / "photo.jpg", tmp_path / "photo-out.jpeg"
    Image.fromarray(image).save(src, quality=95)
    with Image.open(src) as decoded:
        as_read = np.asarray(decoded)
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20, "--device", spec_of(runtime))
    assert code == 0, err
    assert "8-bit L JPEG" in out and "(8-bit L JPEG)" in out
    with Image.open(dst) as written:
        assert written.format == "JPEG" and written.mode == "L"
        values = np.asarray(written).astype(np.float64)
    # JPEG is lossy: the written file is close to, not equal to, the denoised image.
    assert np.abs(values - expected_output(as_read, 20, runtime)).mean() < 2


# ---- noise, PSNR and the demo ------------------------------------------------------------

def test_add_noise_with_a_seed_is_reproducible(capsys, tmp_path, runtime):
    clean = crop("camera")
    src = tmp_path / "clean.png"
    Image.fromarray(clean).save(src)
    outputs = []
    for k, seed in enumerate((7, 7, 8)):
        dst, noisy_file = tmp_path / f"out{k}.png", tmp_path / f"noisy{k}.png"
        code, out, err = run(capsys, "denoise", src, dst, "--add-noise", 20, "--seed", seed,
                             "--save-noisy", noisy_file, "--device", spec_of(runtime))
        assert code == 0, err
        assert f"sigma 20, seed {seed}" in out and "nlmeans, sigma 20," in out  # sigma from noise
        outputs.append((np.asarray(Image.open(noisy_file)), np.asarray(Image.open(dst)),
                        psnr_values(out)))
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])
    np.testing.assert_array_equal(outputs[0][1], outputs[1][1])
    assert outputs[0][2] == outputs[1][2]
    assert not np.array_equal(outputs[0][0], outputs[2][0])
    np.testing.assert_array_equal(outputs[0][0], noisy(clean, 20, seed=7))


def test_denoise_bm3d_gray_and_16_bit(capsys, tmp_path, runtime):
    image = noisy(crop("camera"), 20)
    src, dst = tmp_path / "noisy.png", tmp_path / "out.png"
    Image.fromarray(image).save(src)
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20, "--method", "bm3d",
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert "bm3d, sigma 20, preset fast, patch 8, step 6/5, window 35/21, k 16/16" in out
    with Image.open(dst) as written:
        assert_same_output(np.asarray(written), np.clip(np.rint(
            bm3d(image.astype(np.float32), 20, runtime=runtime)), 0, 255))
    # A 16-bit file: the matching thresholds follow the file's range (data_range 65535), so
    # the result is the 8-bit one scaled by 257 (up to rounding).
    deep = image.astype(np.uint16) * 257
    src16, dst16 = tmp_path / "deep.png", tmp_path / "deep-out.png"
    Image.fromarray(deep).save(src16)
    code, out, err = run(capsys, "denoise", src16, dst16, "--sigma", 20 * 257, "-m", "bm3d",
                         "--device", spec_of(runtime))
    assert code == 0, err
    with Image.open(dst16) as written:
        values = np.asarray(written).astype(np.float64)
    expected = bm3d(image.astype(np.float32), 20, runtime=runtime).astype(np.float64)
    diff = np.abs(values / 257 - np.clip(expected, 0, 255))
    assert diff.max() <= 0.01, diff.max()


@pytest.mark.slow       # 39 s on PoCL; the library's CBM3D reference tests run in CI
def test_denoise_cbm3d_reference_preset(capsys, tmp_path, runtime):
    image = noisy(crop("astronaut"), 20)
    src, dst = tmp_path / "colour.png", tmp_path / "colour-out.png"
    Image.fromarray(image).save(src)
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20, "-m", "bm3d", "--preset",
                         "reference", "-w", 15, "--device", spec_of(runtime))
    assert code == 0, err
    assert "preset reference, patch 8, step 3/3, window 15/15, k 16/32" in out
    with Image.open(dst) as written:
        assert written.mode == "RGB"
        values = np.asarray(written)
    expected = np.clip(np.rint(bm3d(image.astype(np.float32), 20, preset="reference", window=15,
                                    runtime=runtime)), 0, 255)
    assert_same_output(values, expected)


def test_psnr_improves_on_a_photograph(capsys, tmp_path, runtime):
    clean = crop("camera", 64, 64, top=180, left=200)
    noisy_image = noisy(clean, 20, seed=3)
    clean_file, noisy_file = tmp_path / "clean.png", tmp_path / "noisy.png"
    Image.fromarray(clean).save(clean_file)
    Image.fromarray(noisy_image).save(noisy_file)
    dst = tmp_path / "out.png"
    code, out, err = run(capsys, "denoise", noisy_file, dst, "--sigma", 20, "--clean", clean_file,
                         "--device", spec_of(runtime))
    assert code == 0, err
    before, after = psnr_values(out)
    assert before == pytest.approx(imageio.psnr(noisy_image, clean, 255), abs=0.01)
    assert after == pytest.approx(imageio.psnr(np.asarray(Image.open(dst)), clean, 255), abs=0.01)
    assert after > before + 3, out
    assert "peak 255, against clean.png" in out


def test_psnr_of_a_jpeg_output_is_the_file_s(capsys, tmp_path, runtime):
    """The PSNR printed is what the user gets: a JPEG output's, read back from the file
    (it was the float result's: 33.64 printed, 33.34 in the file)."""
    clean = crop("camera", 64, 64, top=180, left=200)
    clean_file, noisy_file = tmp_path / "clean.png", tmp_path / "noisy.png"
    Image.fromarray(clean).save(clean_file)
    Image.fromarray(noisy(clean, 20, seed=4)).save(noisy_file)
    dst = tmp_path / "out.jpg"
    code, out, err = run(capsys, "denoise", noisy_file, dst, "--sigma", 20, "--clean",
                         clean_file, "--device", spec_of(runtime))
    assert code == 0, err
    _, after = psnr_values(out)
    with Image.open(dst) as written:
        assert after == pytest.approx(imageio.psnr(np.asarray(written), clean, 255), abs=0.01)
    assert "of the JPEG file written" in out


def test_demo_prints_psnr_and_writes_only_with_output(capsys, tmp_path, monkeypatch, runtime):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "demo", "--device", spec_of(runtime))
    assert code == 0, err
    assert "camera.png (bundled sample): 512x512, 8-bit L PNG" in out
    assert "sigma 20, seed 0" in out and re.search(r"time: +\d+\.\d+ s", out)
    before, after = psnr_values(out)
    assert 21.5 < before < 22.5 and after > before + 5, out
    assert list(tmp_path.iterdir()) == []

    code, again, err = run(capsys, "demo", "--device", spec_of(runtime), "--output", "demo.png")
    assert code == 0, err
    assert psnr_values(again) == (before, after)  # the same seeded noise, the same result
    with Image.open(tmp_path / "demo.png") as written:
        assert written.mode == "L" and written.size == (512, 512)
        clean = load_image("camera", np.uint8)
        assert imageio.psnr(np.asarray(written), clean, 255) == pytest.approx(after, abs=0.01)

    code, _, err = run(capsys, "demo", "--output", tmp_path / "x.gif")
    assert code == 2
    assert_one_error_line(err, "x.gif", "cannot write '.gif' files")


# ---- errors -------------------------------------------------------------------------------

@pytest.fixture
def small_png(tmp_path) -> Path:
    path = tmp_path / "small.png"
    Image.fromarray(crop("camera")).save(path)
    return path


def test_missing_file(capsys, tmp_path):
    code, out, err = run(capsys, "denoise", tmp_path / "nothing-here.png", tmp_path / "out.png",
                         "--sigma", 20)
    assert code == 2 and out == ""
    assert_one_error_line(err, "nothing-here.png", "no such file")


def test_unreadable_file(capsys, tmp_path):
    path = tmp_path / "fake.png"
    path.write_text("this is not a picture\n")
    code, out, err = run(capsys, "denoise", path, tmp_path / "out.png", "--sigma", 20)
    assert code == 2 and out == ""
    assert_one_error_line(err, "fake.png", "not an image file")


def test_truncated_png(capsys, tmp_path, small_png):
    path = tmp_path / "cut.png"
    path.write_bytes(small_png.read_bytes()[:200])
    code, _, err = run(capsys, "denoise", path, tmp_path / "out.png", "--sigma", 20)
    assert code == 2
    assert_one_error_line(err, "cut.png", "cannot read the image")


@pytest.mark.parametrize("argv,fragment", [
    (["--sigma", "0"], "argument --sigma: must be a number > 0, got 0"),
    (["--sigma", "-5"], "argument --sigma: must be a number > 0"),
    (["--sigma", "nan"], "must be a number > 0"),
    (["--sigma", "twenty"], "expected a number, got 'twenty'"),
    ([], "--sigma is required"),
    (["--add-noise", "0"], "argument --add-noise: must be a number > 0"),
    (["--sigma", "20", "--method", "bm4d"], "argument --method/-m: invalid choice: 'bm4d'"),
    (["--sigma", "20", "--method", "bm3d", "--h", "3"],
     "--h does not apply to --method bm3d (only to nlmeans)"),
    (["--sigma", "20", "--preset", "reference"],
     "--preset does not apply to --method nlmeans (only to bm3d)"),
    (["--sigma", "20", "--method", "bm3d", "--preset", "slow"], "invalid choice: 'slow'"),
    (["--sigma", "20", "--method", "bm3d", "-n", "12"], "k must be a power of 2"),
    (["--sigma", "20", "--method", "bm3d", "--aggregation", "buffers"],
     "aggregation must be one of"),
    (["--sigma", "20", "--aggregation", "atomic"], "invalid choice: 'atomic'"),
    (["--sigma", "20", "--seed", "3"], "--seed and --save-noisy go with --add-noise"),
    (["--add-noise", "20", "--seed", "-3"], "argument --seed: must be >= 0, got -3"),
    (["--add-noise", "20", "--clean", "x.png"], "not allowed with argument"),
])
def test_bad_arguments(capsys, tmp_path, small_png, argv, fragment):
    code, out, err = run(capsys, "denoise", small_png, tmp_path / "out.png", *argv)
    assert code == 2 and out == ""
    assert_one_error_line(err, fragment)
    assert not (tmp_path / "out.png").exists()


def test_unwritable_outputs_fail_before_denoising(capsys, tmp_path, small_png):
    rgba = tmp_path / "rgba.png"
    Image.fromarray(np.zeros((20, 24, 4), np.uint8)).save(rgba)
    deep = tmp_path / "deep.png"
    Image.fromarray(np.zeros((20, 24), np.uint16)).save(deep)
    for src, dst, fragment in [
        (small_png, tmp_path / "out.gif", "cannot write '.gif' files"),
        (small_png, tmp_path / "no-folder" / "out.png", "folder"),
        (rgba, tmp_path / "out.jpg", "JPEG cannot store an alpha channel"),
        (deep, tmp_path / "out.jpg", "JPEG cannot store 16-bit images"),
    ]:
        code, out, err = run(capsys, "denoise", src, dst, "--sigma", 20)
        assert code == 2 and out == ""
        assert_one_error_line(err, fragment)


def test_clean_reference_must_match(capsys, tmp_path, small_png):
    other = tmp_path / "other.png"
    Image.fromarray(crop("camera", 30, 50)).save(other)
    code, _, err = run(capsys, "denoise", small_png, tmp_path / "out.png", "--sigma", 20,
                       "--clean", other)
    assert code == 2
    assert_one_error_line(err, "other.png is 30x50 grayscale, the input 40x50 grayscale")


def test_help_lists_denoise(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "denoise" in out
    code, out, _ = run(capsys, "denoise", "--help")
    assert code == 0
    for option in ("--method", "--sigma", "--add-noise", "--seed", "--clean", "--patch-size",
                   "--step", "--window", "--aggregation", "--h", "--device"):
        assert option in out


# ---- --sigma auto -----------------------------------------------------------------------------

SIGMA_LINE = re.compile(r"sigma: +([\d.]+), estimated on (.+?) \(clpatch\.estimate_sigma\)(.*)")


def test_sigma_auto_estimates_prints_and_uses_it(capsys, tmp_path, runtime):
    image = noisy(crop("camera", 48, 56), 15)
    src, dst = tmp_path / "noisy.png", tmp_path / "out.png"
    Image.fromarray(image).save(src)
    code, out, err = run(capsys, "denoise", src, dst, "--sigma", "auto",
                         "--device", spec_of(runtime))
    assert code == 0, err
    found = SIGMA_LINE.search(out)
    assert found and found.group(2) == "noisy.png" and found.group(3) == "", out
    estimate = estimate_sigma(image.astype(np.float32), runtime=runtime)
    assert found.group(1) == f"{estimate:.4g}"
    assert f"nlmeans, sigma {estimate:g}, patch 8" in out
    with Image.open(dst) as written:
        assert_same_output(np.asarray(written), expected_output(image, estimate, runtime))


def test_sigma_auto_colour_after_added_noise(capsys, tmp_path, runtime):
    src = tmp_path / "colour.png"
    Image.fromarray(crop("astronaut", 48, 56)).save(src)
    code, out, err = run(capsys, "denoise", src, tmp_path / "out.png", "--add-noise", 12,
                         "--seed", 4, "--sigma", "AUTO", "--device", spec_of(runtime))
    assert code == 0, err
    found = SIGMA_LINE.search(out)
    assert found and found.group(2) == "colour.png", out
    per_channel = re.fullmatch(r"; per channel R ([\d.]+), G ([\d.]+), B ([\d.]+); their root "
                               r"mean square is used", found.group(3))
    assert per_channel, out
    values = np.array([float(v) for v in per_channel.groups()])
    assert float(found.group(1)) == pytest.approx(np.sqrt(np.mean(values ** 2)), rel=1e-3)
    assert 9 < float(found.group(1)) < 15


def test_sigma_auto_on_a_video_uses_the_first_frame(capsys, tmp_path, runtime):
    rng = np.random.default_rng(6)
    frames = np.stack([crop("moon", 40, 44, top=100 + 2 * t) for t in range(3)]).astype(np.float32)
    frames += rng.normal(0, 10, frames.shape).astype(np.float32)
    np.save(tmp_path / "clip.npy", frames)
    code, out, err = run(capsys, "denoise", tmp_path / "clip.npy", tmp_path / "out.npy",
                         "--method", "bm3d", "--sigma", "auto", "--device", spec_of(runtime))
    assert code == 0, err
    found = SIGMA_LINE.search(out)
    assert found and found.group(2) == "frame 0 of clip.npy", out
    estimate = estimate_sigma(frames[0], runtime=runtime)
    assert found.group(1) == f"{estimate:.4g}" and f"bm3d, sigma {estimate:g}" in out


def test_sigma_auto_errors(capsys, tmp_path, runtime):
    tiny = tmp_path / "tiny.png"
    Image.fromarray(crop("camera", 20, 20)).save(tiny)
    code, out, err = run(capsys, "denoise", tiny, tmp_path / "out.png", "--sigma", "auto",
                         "--device", spec_of(runtime))
    assert code == 2 and out == ""
    assert_one_error_line(err, "--sigma auto: image is too small to estimate noise")
    flat = tmp_path / "flat.png"
    Image.fromarray(np.full((40, 40), 9, np.uint8)).save(flat)
    code, out, err = run(capsys, "denoise", flat, tmp_path / "out.png", "--sigma", "auto",
                         "--device", spec_of(runtime))
    assert code == 2 and out == ""
    assert_one_error_line(err, "--sigma auto: the estimated noise of flat.png is 0")
    assert not (tmp_path / "out.png").exists()
    code, out, err = run(capsys, "denoise", flat, tmp_path / "out.tif", "--sigma", "auto",
                         "--chunks", 64)
    assert code == 2 and out == ""
    assert_one_error_line(err, "--sigma auto does not go with --chunks")
    code, out, _ = run(capsys, "denoise", "--help")
    words = " ".join(out.split())
    assert "or 'auto': estimated from IN" in words and "videos: on the first frame" in words


def test_the_header_comes_before_the_work(capsys, tmp_path, small_png, monkeypatch, runtime):
    """What runs (image, method, device) is printed before the call, so a long call or its
    kernel builds are not silent; the time and the output after it."""
    real = cli_denoise.method_function("nlmeans")
    seen = {}

    @functools.wraps(real)
    def spy(*args, **kwargs):
        seen["before"] = capsys.readouterr().out
        return real(*args, **kwargs)

    monkeypatch.setattr(cli_denoise, "method_function", lambda name: spy)
    code, out, err = run(capsys, "denoise", small_png, tmp_path / "out.png", "--sigma", 20,
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert "image:" in seen["before"] and "device:" in seen["before"]
    assert "time:" not in seen["before"] and "time:" in out and "output:" in out


def test_a_16_bit_image_with_an_8_bit_sigma_is_warned_about(capsys, tmp_path, runtime):
    """sigma in 8-bit units on 16-bit data leaves the image as it was (+0.00 dB): the sigma
    line says so, with the units the data implies; a sigma in the file's units is quiet."""
    clean = crop("camera", 64, 64, top=180, left=200).astype(np.float64) * 257
    rng = np.random.default_rng(5)
    deep = np.clip(np.rint(clean + rng.normal(0, 20 * 257, clean.shape)), 0, 65535)
    path = tmp_path / "deep.png"
    Image.fromarray(deep.astype(np.uint16)).save(path)
    code, out, err = run(capsys, "denoise", path, tmp_path / "a.png", "--sigma", 20,
                         "--device", spec_of(runtime))
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("sigma:"))
    assert "WARNING" in line and "16-bit units" in line and "x 257" in line, out
    code, out, err = run(capsys, "denoise", path, tmp_path / "b.png", "--sigma", 20 * 257,
                         "--device", spec_of(runtime))
    assert code == 0 and "WARNING" not in out, out
