"""`clpatch denoise IN OUT --method burst` (a directory of frames, a multi-page TIFF or a
.npy array of one scene into one image) and `--search ann` for nlmeans and bm3d on images.

Bursts are 4 frames of 40x48 made by `synthetic_burst` from a crop of the camera image and
saved as 8-bit files in tmp_path; the command's results are compared with the NumPy oracles
(tests/reference/burst.py, nlmeans.py, bm3d.py) on the ANN's matches: the ANN oracle's
(tests/reference/ann.py) for 8-bit gray frames, where they are the device's bit for bit,
else the device ANN's (held to that oracle in tests/match/test_ann.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from clpatch.denoise.bm3d import bm3d
from clpatch.io.noise import add_noise, psnr, synthetic_burst
from clpatch.match.ann.params import check_ann_request
from clpatch.match.ann.plan import AnnPlan
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.cli.test_cli_denoise import assert_same_output, crop, psnr_values
from tests.denoise.test_ann_filters import bm3d_groups, filter_matches, luminance
from tests.reference import ann as ann_oracle
from tests.reference import bm3d as bm3d_oracle
from tests.reference.burst import burst_bm3d_reference, burst_nlmeans_reference
from tests.reference.nlmeans import nlmeans_reference
from tests.reference.search import grid

SIGMA = 20
FRAMES = 4
#: burst_denoise's documented defaults (clpatch/denoise/burst.py), written out for the oracle:
#: patch and step per method, NL-means' h in units of sigma, the ANN's tile and k.
BURST_DEFAULTS = {"nlmeans": (12, 2), "bm3d": (8, 3)}
H_FACTOR, TILE, K = 0.75, 15, 16


def as_8bit(values: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(values), 0, 255).astype(np.uint8)


def burst(noisy: bool = True, colour: bool = False) -> np.ndarray:
    """4 uint8 frames (40x48, or 40x48x3) of one scene with camera shake: noisy (sigma 20)
    or clean."""
    image = crop("astronaut" if colour else "camera", rows=40, cols=48)
    frames, clean = synthetic_burst(image.astype(np.float32), FRAMES, SIGMA, seed=4,
                                    max_shift=1.5)
    return as_8bit(frames if noisy else clean)


def save_frames(directory: Path, frames: np.ndarray, *, prefix: str = "frame") -> Path:
    directory.mkdir()
    for t, frame in enumerate(frames):
        Image.fromarray(frame).save(directory / f"{prefix}{t}.png")
    return directory


def burst_matches(runtime, frames: np.ndarray, reference: int, *, patch_size: int,
                  step: int, k: int, tile: int):
    """The ANN's matches of the reference frame's patches among every frame's: positions
    (gy, gx, k, 3), distances. 8-bit gray frames: the ANN oracle's; colour (searched on the
    float luminance) and wider data: the device ANN's (the burst's search: tiles of `tile`,
    no sibling clusters, one tiling)."""
    plane = frames.astype(np.float32)
    if plane.ndim == 4:
        plane = luminance(plane)
    options = dict(patch_size=patch_size, step=step, k=k, tile=tile)
    if frames.dtype == np.uint8 and frames.ndim == 3:
        return ann_oracle.ann(plane[..., None], reference=reference, **options)
    count, rows, cols = plane.shape
    request = check_ann_request(neighbour_clusters=0, channels=1, rows=rows, cols=cols,
                                frames=count, **options)
    found = AnnPlan(runtime, count, rows, cols, 1, request, video=True,
                    reference=reference).run(plane)
    return np.asarray(found.positions), np.asarray(found.distances)


def expected(frames: np.ndarray, runtime, *, reference: int = 0, method: str = "nlmeans",
             tile: int = TILE, k: int = K, patch_size: int | None = None,
             step: int | None = None, h: float | None = None, sigma: float = SIGMA,
             peak: int = 255) -> np.ndarray:
    """What the command should write: the burst oracle of `burst_denoise`'s arguments on the
    frames (as float32), rounded and clipped to [0, peak]."""
    p = BURST_DEFAULTS[method][0] if patch_size is None else patch_size
    s = BURST_DEFAULTS[method][1] if step is None else step
    pos, dist = burst_matches(runtime, frames, reference, patch_size=p, step=s, k=k,
                              tile=tile)
    values = frames.astype(np.float32)
    if method == "nlmeans":
        out = burst_nlmeans_reference(values, sigma, pos, dist, reference=reference,
                                      patch_size=p, step=s,
                                      h=H_FACTOR * sigma if h is None else h)
    else:
        # The "fast" preset's stage-1 threshold and lambda at sigma <= 40 in 0-255 units,
        # the threshold scaled to the data's range (peak).
        noise = sigma * 255 / peak
        assert noise <= bm3d_oracle.HIGH_NOISE_SIGMA
        out = burst_bm3d_reference(values, sigma, pos, dist, reference=reference,
                                   grid_y=grid(values.shape[1], p, s),
                                   grid_x=grid(values.shape[2], p, s), patch_size=p,
                                   tau=bm3d_oracle.fast_stage1_tau(noise) * (peak / 255) ** 2,
                                   lambda_3d=bm3d_oracle.PRESETS["fast"]["lambda_3d"])
    return np.clip(np.rint(out), 0, peak)


def read(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image)


# ---- bursts ---------------------------------------------------------------------------

def test_burst_directory_matches_the_oracle(capsys, tmp_path, runtime):
    frames = burst()
    src = save_frames(tmp_path / "burst", frames)
    dst = tmp_path / "out.png"
    code, out, err = run(capsys, "denoise", src, dst, "--method", "burst", "--sigma", SIGMA,
                         "--reference", 1, "--device", spec_of(runtime))
    assert code == 0, err
    assert "burst:      burst: 4 frames of 48x40 8-bit L (directory)" in out
    assert "burst, sigma 20," in out and "reference frame 1, tile 15, k 16, patch 12, step 2" in out
    assert "PSNR" not in out and re.search(r"time: +\d+\.\d+ s", out)
    assert f"output:     {dst} (8-bit L PNG, frame 1 denoised)" in out
    written = read(dst)
    assert written.dtype == np.uint8 and written.shape == frames.shape[1:]
    assert_same_output(written, expected(frames, runtime, reference=1))


def test_burst_options_reach_the_library(capsys, tmp_path, runtime):
    frames = burst()
    src = save_frames(tmp_path / "burst", frames)
    dst = tmp_path / "out.png"
    code, out, err = run(capsys, "denoise", src, dst, "-m", "burst", "--sigma", SIGMA,
                         "--tile", 10, "--k", 8, "-p", 5, "--step", 3, "--h", 25,
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert "reference frame 0, tile 10, k 8, patch 5, step 3, h 25" in out
    assert_same_output(read(dst), expected(frames, runtime, tile=10, k=8, patch_size=5,
                                           step=3, h=25))


def test_burst_with_added_noise_reports_the_reference_frames_psnr(capsys, tmp_path, runtime):
    clean = burst(noisy=False)
    src = save_frames(tmp_path / "clean", clean)
    dst, noisy_file = tmp_path / "out.png", tmp_path / "noisy.png"
    code, out, err = run(capsys, "denoise", src, dst, "-m", "burst", "--add-noise", SIGMA,
                         "--seed", 3, "--reference", 2, "--save-noisy", noisy_file,
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert "added Gaussian noise to every frame, sigma 20, seed 3" in out
    assert f"saved to {noisy_file} (frame 2)" in out
    assert "frame 2; peak 255, against frame 2 of clean (the input)" in out
    noisy = add_noise(clean.astype(np.float32), SIGMA, 3)       # every frame, one seed
    np.testing.assert_array_equal(read(noisy_file), as_8bit(noisy[2]))
    before, after = psnr_values(out)
    assert before == pytest.approx(psnr(noisy[2], clean[2], 255), abs=0.006)
    result = expected(noisy, runtime, reference=2)
    assert_same_output(read(dst), result)
    assert after == pytest.approx(psnr(result, clean[2], 255), abs=0.05)
    assert after > before + 3, out         # the other frames help


def test_burst_with_a_clean_reference_image(capsys, tmp_path, runtime):
    frames, clean = burst(), burst(noisy=False)
    src = save_frames(tmp_path / "burst", frames)
    Image.fromarray(clean[1]).save(tmp_path / "clean.png")
    Image.fromarray(clean[1, :, :40]).save(tmp_path / "small.png")
    dst = tmp_path / "out.png"
    code, out, err = run(capsys, "denoise", src, dst, "-m", "burst", "--sigma", SIGMA,
                         "--reference", 1, "--clean", tmp_path / "clean.png",
                         "--device", spec_of(runtime))
    assert code == 0, err
    before, after = psnr_values(out)
    assert "frame 1; peak 255, against clean.png" in out
    assert before == pytest.approx(psnr(frames[1], clean[1], 255), abs=0.006)
    assert after == pytest.approx(psnr(read(dst), clean[1], 255), abs=0.006)
    code, _, err = run(capsys, "denoise", src, tmp_path / "o.png", "-m", "burst", "--sigma",
                       SIGMA, "--clean", tmp_path / "small.png", "--device", spec_of(runtime))
    assert code == 2
    assert_one_error_line(err, "the clean reference", "small.png")


def test_burst_from_a_multipage_tiff_and_an_npy_array(capsys, tmp_path, runtime):
    frames = burst()
    pages = [Image.fromarray(frame) for frame in frames]
    pages[0].save(tmp_path / "burst.tif", save_all=True, append_images=pages[1:])
    np.save(tmp_path / "burst.npy", frames)
    want = expected(frames, runtime, reference=3)
    for name, kind in (("burst.tif", "tiff"), ("burst.npy", "npy")):
        dst = tmp_path / f"{kind}-out.png"
        code, out, err = run(capsys, "denoise", tmp_path / name, dst, "-m", "burst", "--sigma",
                             SIGMA, "--reference", 3, "--device", spec_of(runtime))
        assert code == 0, err
        assert f"4 frames of 48x40 8-bit L ({kind})" in out
        assert_same_output(read(dst), want)


def test_burst_of_colour_frames_keeps_the_reference_frames_alpha(capsys, tmp_path, runtime):
    frames = burst(colour=True)
    alphas = np.random.default_rng(2).integers(0, 256, (FRAMES, *frames.shape[1:3]),
                                               dtype=np.uint8)
    src = tmp_path / "burst"
    src.mkdir()
    for t in range(FRAMES):
        Image.fromarray(np.dstack([frames[t], alphas[t]])).save(src / f"f{t}.png")
    dst = tmp_path / "out.png"
    code, out, err = run(capsys, "denoise", src, dst, "-m", "burst", "--sigma", SIGMA,
                         "--reference", 1, "--device", spec_of(runtime))
    assert code == 0, err
    assert "(8-bit RGBA PNG, frame 1 denoised)" in out
    written = read(dst)
    assert written.shape == (*frames.shape[1:3], 4)
    np.testing.assert_array_equal(written[..., 3], alphas[1])
    assert_same_output(written[..., :3], expected(frames, runtime, reference=1))


def test_burst_16bit_frames_are_written_with_16_bits(capsys, tmp_path, runtime):
    frames = burst().astype(np.uint16) * 257
    src = save_frames(tmp_path / "deep", frames)
    dst = tmp_path / "out.png"
    code, out, err = run(capsys, "denoise", src, dst, "-m", "burst", "--sigma", SIGMA * 257,
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert "16-bit L" in out
    written = read(dst)
    assert written.max() > 255
    assert_same_output(written, expected(frames, runtime, sigma=SIGMA * 257, peak=65535))


def test_burst_refuses_an_existing_output_unless_overwrite(capsys, tmp_path, runtime):
    src = save_frames(tmp_path / "burst", burst())
    dst = tmp_path / "out.png"
    dst.write_bytes(b"previous")
    args = ("denoise", src, dst, "-m", "burst", "--sigma", SIGMA, "--device", spec_of(runtime))
    code, _, err = run(capsys, *args)
    assert code == 2
    assert_one_error_line(err, str(dst), "--overwrite")
    assert dst.read_bytes() == b"previous"
    code, _, err = run(capsys, *args, "--overwrite")
    assert code == 0, err
    assert read(dst).shape == (40, 48)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries


def test_burst_usage_errors(capsys, tmp_path, runtime):
    spec = spec_of(runtime)
    frames = burst()
    src = save_frames(tmp_path / "burst", frames)
    (tmp_path / "empty").mkdir()
    mixed = save_frames(tmp_path / "mixed", frames[:2])
    Image.fromarray(frames[2, :, :40]).save(mixed / "frame2.png")
    single = save_frames(tmp_path / "single", frames[:1])
    out = tmp_path / "o.png"

    def error(*argv, code: int = 2) -> str:
        got, _, err = run(capsys, "denoise", *argv, "--device", spec)
        assert got == code, err
        assert not out.exists()
        return err

    burst_args = ("-m", "burst", "--sigma", SIGMA)
    assert_one_error_line(error(tmp_path / "empty", out, *burst_args), "no images")
    assert_one_error_line(error(mixed, out, *burst_args), "frame2.png", "40x40",
                          "48x40", "same shape")
    assert_one_error_line(error(src, out, *burst_args, "--reference", 4),
                          "--reference 4 is out of range", "4 frames (0 to 3)")
    assert_one_error_line(error(src, out, *burst_args, "--reference", -1), "out of range")
    assert_one_error_line(error(src / "frame0.png", out, *burst_args),
                          "single image", "several frames")
    assert_one_error_line(error(single, out, *burst_args), "one image", "several frames")
    assert_one_error_line(error(src, src / "o.png", *burst_args), "inside the input directory")
    assert_one_error_line(error(src, out, *burst_args, "-w", 11), "--window does not apply")
    assert_one_error_line(error(src, out, *burst_args, "--search", "ann"),
                          "--search does not apply to --method burst")
    assert_one_error_line(error(src, tmp_path / "o.mp4", *burst_args), "cannot write")
    assert_one_error_line(error(src / "frame0.png", out, "--sigma", SIGMA, "--reference", 1),
                          "--reference applies to --method burst only")


# ---- --search ann on images -----------------------------------------------------------

@pytest.mark.parametrize("method", ["nlmeans", "bm3d"])
def test_search_ann_reaches_the_filter(capsys, tmp_path, runtime, method):
    image = burst()[0]
    src, dst = tmp_path / "noisy.png", tmp_path / "out.png"
    Image.fromarray(image).save(src)
    code, out, err = run(capsys, "denoise", src, dst, "-m", method, "--sigma", SIGMA,
                         "--search", "ann", "--device", spec_of(runtime))
    assert code == 0, err
    assert ("search ann (the clustering ANN, tiles of 21, 2 sibling clusters, 2 tilings)"
            in out)
    assert "window" not in out
    values = image.astype(np.float32)
    if method == "nlmeans":
        # The ANN oracle's matches (8-bit: the device's), NL-means' defaults.
        pos, dist = ann_oracle.ann_pair_image(values, patch_size=8, k=16, tile=21, step=4,
                                              neighbour_clusters=2)
        want = nlmeans_reference(values, SIGMA, patch_size=8, step=4, window=21, k=16,
                                 search=(pos[None], dist[None]))
    else:
        # The fast preset's stages on groups of the device ANN's matches (stage 2's on the
        # device's basic estimate), as tests/denoise/test_ann_filters.py holds the filter.
        p1, p2, _ = bm3d_oracle.stage_params("fast", SIGMA)
        rows, cols = image.shape
        work = values.astype(np.float64)[..., None]
        basic_out = bm3d(values, SIGMA, search="ann", stages=1, data_range=255.0,
                         runtime=runtime)
        groups = [bm3d_groups(filter_matches(runtime, plane, patch_size=sp.patch_size,
                                             step=sp.step, k=sp.n), sp, rows, cols)
                  for plane, sp in ((values, p1), (basic_out, p2))]
        basic = bm3d_oracle.bm3d_stage(work, [SIGMA], p1, groups=groups[0])
        want = bm3d_oracle.bm3d_stage(work, [SIGMA], p2, basic=basic, groups=groups[1])[..., 0]
    assert_same_output(read(dst), np.clip(np.rint(want), 0, 255))


def test_search_usage_errors(capsys, tmp_path, runtime):
    spec = spec_of(runtime)
    image = burst()[0]
    Image.fromarray(image).save(tmp_path / "in.png")
    np.save(tmp_path / "video.npy", burst())
    out = tmp_path / "o.png"
    code, _, err = run(capsys, "denoise", tmp_path / "in.png", out, "--sigma", SIGMA,
                       "--search", "ann", "-w", 11, "--device", spec)
    assert code == 2
    assert_one_error_line(err, "--window does not apply to --search ann")
    code, _, err = run(capsys, "denoise", tmp_path / "video.npy", tmp_path / "o.npy", "--sigma",
                       SIGMA, "--search", "ann", "--device", spec)
    assert code == 2
    assert_one_error_line(err, "--search ann denoises images", "--method burst")
    code, _, err = run(capsys, "denoise", tmp_path / "in.png", out, "--sigma", SIGMA,
                       "--search", "kdtree", "--device", spec)
    assert code == 2
    assert_one_error_line(err, "--search", "kdtree")
    assert not out.exists()
