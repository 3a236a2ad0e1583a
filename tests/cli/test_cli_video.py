"""`clpatch denoise` on videos: VBM3D streamed from/to .npy, frame directories and multi-page
TIFF, per-frame BM3D and video NL-means, the PSNR report, and usage errors."""

from __future__ import annotations

import re

import numpy as np
from PIL import Image

import clpatch
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.reference.video import load_image, motion_video

SIGMA = 20.0


def clean_video(frames: int = 8, rows: int = 48, cols: int = 56) -> np.ndarray:
    clean, _ = motion_video(load_image("camera", gray=True), frames=frames, size=(rows, cols),
                            seed=2)
    return np.clip(np.rint(clean), 0, 255).astype(np.uint8)


def psnr_line(out: str) -> tuple[float, float]:
    match = re.search(r"PSNR:\s+noisy ([\d.]+) dB -> denoised ([\d.]+) dB", out)
    assert match, out
    return float(match.group(1)), float(match.group(2))


def test_vbm3d_npy_to_npy_matches_the_library(runtime, tmp_path, capsys):
    video = clean_video()
    noisy = (video + np.random.default_rng(0).normal(0, SIGMA, video.shape)).astype(np.float32)
    np.save(tmp_path / "noisy.npy", noisy)
    np.save(tmp_path / "clean.npy", video)
    code, out, err = run(capsys, "denoise", tmp_path / "noisy.npy", tmp_path / "out.npy",
                         "--method", "vbm3d", "--sigma", SIGMA, "--clean", tmp_path / "clean.npy",
                         "-t", 2, "--device", spec_of(runtime))
    assert code == 0, err
    result = np.load(tmp_path / "out.npy")
    expected = clpatch.vbm3d(noisy, SIGMA, temporal_radius=2, runtime=runtime)
    assert result.dtype == np.float32 and result.shape == video.shape
    np.testing.assert_allclose(result, expected, atol=1e-4)
    before, after = psnr_line(out)
    assert after > before + 6
    assert "vbm3d, sigma 20, temporal radius 2" in out and "8 frames" in out


def test_vbm3d_directory_of_frames_with_added_noise(runtime, tmp_path, capsys):
    video = clean_video(frames=6)
    (tmp_path / "in").mkdir()
    for t, frame in enumerate(video):
        Image.fromarray(frame).save(tmp_path / "in" / f"f{t}.png")
    code, out, err = run(capsys, "denoise", tmp_path / "in", tmp_path / "out", "--method",
                         "vbm3d", "--add-noise", SIGMA, "--seed", 3, "--save-noisy",
                         tmp_path / "noisy", "--device", spec_of(runtime))
    assert code == 0, err
    frames = sorted((tmp_path / "out").glob("*.png"))
    assert len(frames) == 6 and len(list((tmp_path / "noisy").glob("*.png"))) == 6
    first = np.asarray(Image.open(frames[0]))
    assert first.dtype == np.uint8 and first.shape == video.shape[1:]
    before, after = psnr_line(out)
    assert after > before + 6 and "seed 3" in out


def test_bm3d_and_nlmeans_on_a_multipage_tiff(runtime, tmp_path, capsys):
    video = clean_video(frames=4)
    pages = [Image.fromarray(f) for f in video]
    pages[0].save(tmp_path / "in.tif", save_all=True, append_images=pages[1:])
    for method in ("bm3d", "nlmeans"):
        code, out, err = run(capsys, "denoise", tmp_path / "in.tif", tmp_path / f"{method}.tif",
                             "--method", method, "--add-noise", SIGMA, "--seed", 1,
                             "--device", spec_of(runtime))
        assert code == 0, err
        with Image.open(tmp_path / f"{method}.tif") as written:
            assert written.n_frames == 4
        before, after = psnr_line(out)
        assert after > before + 5, (method, out)


def test_video_usage_errors(runtime, tmp_path, capsys):
    np.save(tmp_path / "v.npy", clean_video(frames=3))
    spec = spec_of(runtime)
    code, _, err = run(capsys, "denoise", tmp_path / "v.npy", tmp_path / "o.npy", "--method",
                       "vbm3d", "--sigma", 20, "--preset", "fast", "--device", spec)
    assert code == 2
    assert_one_error_line(err, "--preset does not apply to --method vbm3d")
    Image.fromarray(clean_video(frames=1)[0]).save(tmp_path / "one.png")
    code, _, err = run(capsys, "denoise", tmp_path / "one.png", tmp_path / "o.png", "--method",
                       "vbm3d", "--sigma", 20, "--device", spec)
    assert code == 2
    assert_one_error_line(err, "vbm3d denoises videos")
    np.save(tmp_path / "other.npy", clean_video(frames=2))
    code, _, err = run(capsys, "denoise", tmp_path / "v.npy", tmp_path / "o.npy", "--method",
                       "vbm3d", "--sigma", 20, "--clean", tmp_path / "other.npy", "--device", spec)
    assert code == 2
    assert_one_error_line(err, "clean reference")
    code, _, err = run(capsys, "denoise", tmp_path / "one.png", tmp_path / "o.png", "--sigma",
                       20, "-t", 2, "--device", spec)
    assert code == 2
    assert_one_error_line(err, "--temporal-radius does not apply")
