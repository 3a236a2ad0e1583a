"""Video input and output (`clpatch.videoio`) and the command line's progress bar: round trips
for every container, frame order, laziness, the `.npy` / TIFF heuristics and the error
messages. No OpenCL needed."""

from __future__ import annotations

import dataclasses
import io
import sys

import numpy as np
import pytest
from PIL import Image

from clpatch.cli.progress import Progress, format_duration
from clpatch.io.images import ImageFileError, ImageInfo, write_image
from clpatch.io.video import (
    VideoInfo,
    VideoWriter,
    frame_files,
    is_video_path,
    open_video,
    output_kind,
    read_video,
)

T, H, W = 4, 9, 13


def frames_of(dtype, colour: bool = False, seed: int = 0) -> np.ndarray:
    """(T, H, W[, 3]) test frames covering the dtype's range."""
    rng = np.random.default_rng(seed)
    shape = (T, H, W, 3) if colour else (T, H, W)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-20, 300, shape).astype(dtype)
    return rng.integers(0, np.iinfo(dtype).max, shape, endpoint=True).astype(dtype)


def write_dir(directory, video: np.ndarray, depth: int, suffix: str = ".png", names=None) -> None:
    directory.mkdir(exist_ok=True)
    info = ImageInfo(depth, "RGB" if video.ndim == 4 else "L", None, "PNG")
    for k, frame in enumerate(video):
        write_image(directory / (names[k] if names else f"f{k}{suffix}"), frame.astype(np.float32), info)


def write_tiff(path, video: np.ndarray) -> None:
    pages = [Image.fromarray(frame) for frame in video]
    pages[0].save(path, save_all=True, append_images=pages[1:])


def round_trip(source, target, **kwargs) -> tuple[np.ndarray, VideoInfo, np.ndarray, VideoInfo]:
    """Read `source` frame by frame, write it to `target`, read that back."""
    info, frames = open_video(source)
    with VideoWriter(target, info, **kwargs) as writer:
        for frame in frames:
            writer.write(frame)
    video, _ = read_video(source)
    again, info2 = read_video(target)
    return video, info, again, info2


# ---- round trips ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, colour", [(np.uint8, False), (np.uint8, True), (np.uint16, False),
                                           (np.uint16, True)])
def test_directory_round_trip(tmp_path, dtype, colour):
    expected = frames_of(dtype, colour)
    depth = 8 * np.dtype(dtype).itemsize
    write_dir(tmp_path / "in", expected, depth)
    video, info, again, info2 = round_trip(tmp_path / "in", tmp_path / "out")
    assert (info.kind, info.frames, info.shape, info.dtype) == ("directory", T, expected.shape[1:],
                                                                np.dtype(dtype))
    assert info.peak == (65535.0 if depth == 16 else 255.0)
    assert info.frame_info.bit_depth == depth and info.frame_info.format == "PNG"
    assert video.dtype == np.float32 and np.array_equal(video, expected)
    assert np.array_equal(again, expected) and info2 == dataclasses.replace(info, source=tmp_path / "out")
    assert [f.name for f in frame_files(tmp_path / "out")] == [f"frame_{k:05d}.png" for k in range(T)]
    if depth == 16:
        with Image.open(tmp_path / "out" / "frame_00000.png") as image:
            assert image.mode in ("I", "I;16", "RGB")  # 16-bit colour is decoded by clpatch itself
        assert np.asarray(read_video(tmp_path / "out")[0]).max() > 255


@pytest.mark.parametrize("frame_format, suffix", [("npy", ".npy"), ("tif", ".tif"), (".TIFF", ".tiff")])
def test_directory_frame_format(tmp_path, frame_format, suffix):
    expected = frames_of(np.uint16)
    write_dir(tmp_path / "in", expected, 16)
    _, _, again, info2 = round_trip(tmp_path / "in", tmp_path / "out", frame_format=frame_format)
    assert np.array_equal(again, expected) and info2.dtype == np.uint16
    assert {f.suffix for f in (tmp_path / "out").iterdir()} == {suffix}


def test_directory_keeps_jpeg_and_refuses_16bit_jpeg(tmp_path):
    write_dir(tmp_path / "in", frames_of(np.uint8), 8, suffix=".jpg")
    info, _ = open_video(tmp_path / "in")
    assert info.frame_info.format == "JPEG"
    with VideoWriter(tmp_path / "out", info) as writer:
        for frame in read_video(tmp_path / "in")[0]:
            writer.write(frame)
    assert sorted(f.suffix for f in (tmp_path / "out").iterdir()) == [".jpg"] * T
    deep = VideoInfo("npy", T, (H, W), np.dtype(np.uint16), 65535.0, None, tmp_path / "x.npy")
    with pytest.raises(ImageFileError, match="16-bit"):
        VideoWriter(tmp_path / "out16", deep, frame_format="jpg")


@pytest.mark.parametrize("dtype, colour", [(np.uint8, False), (np.uint8, True), (np.uint16, False)])
def test_tiff_round_trip(tmp_path, dtype, colour):
    expected = frames_of(dtype, colour)
    write_tiff(tmp_path / "in.tif", expected)
    video, info, again, info2 = round_trip(tmp_path / "in.tif", tmp_path / "out.tiff")
    assert (info.kind, info.frames, info.shape, info.dtype) == ("tiff", T, expected.shape[1:],
                                                                np.dtype(dtype))
    assert info.frame_info.format == "TIFF"
    assert np.array_equal(video, expected) and np.array_equal(again, expected)
    assert info2.kind == "tiff" and info2.dtype == np.dtype(dtype)
    with Image.open(tmp_path / "out.tiff") as image:
        assert image.n_frames == T


def test_tiff_16bit_colour_through_tifffile(tmp_path):
    pytest.importorskip("tifffile")
    expected = frames_of(np.uint16, colour=True)
    write_dir(tmp_path / "in", expected, 16)
    _, info, again, info2 = round_trip(tmp_path / "in", tmp_path / "out.tif")
    assert np.array_equal(again, expected) and info2.dtype == np.uint16 and info2.peak == 65535.0


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
@pytest.mark.parametrize("colour", [False, True])
def test_npy_round_trip(tmp_path, dtype, colour):
    expected = frames_of(dtype, colour)
    np.save(tmp_path / "in.npy", expected)
    video, info, again, info2 = round_trip(tmp_path / "in.npy", tmp_path / "out.npy")
    assert (info.kind, info.frames, info.shape, info.dtype) == ("npy", T, expected.shape[1:],
                                                                np.dtype(dtype))
    assert info.peak == (65535.0 if dtype == np.uint16 else 255.0)
    assert np.array_equal(video, expected.astype(np.float32)) and np.array_equal(again, video)
    assert np.load(tmp_path / "out.npy").dtype == np.dtype(dtype)


def test_npy_single_channel_axis_is_squeezed(tmp_path):
    expected = frames_of(np.uint8)
    np.save(tmp_path / "in.npy", expected[..., None])
    video, info = read_video(tmp_path / "in.npy")
    assert info.shape == (H, W) and np.array_equal(video, expected)


def test_writer_rounds_and_clips(tmp_path):
    info = VideoInfo("npy", 1, (2, 2), np.dtype(np.uint8), 255.0, None, tmp_path / "src.npy")
    with VideoWriter(tmp_path / "out.npy", info) as writer:
        writer.write(np.array([[-3.0, 0.4], [254.6, 999.0]], np.float32))
    assert np.load(tmp_path / "out.npy").tolist() == [[[0, 0], [255, 255]]]


def test_cross_kind_npy_to_directory_and_tiff(tmp_path):
    expected = frames_of(np.uint16)
    np.save(tmp_path / "in.npy", expected)
    _, _, again, info2 = round_trip(tmp_path / "in.npy", tmp_path / "frames", frame_format="png")
    assert info2.kind == "directory" and info2.dtype == np.uint16 and np.array_equal(again, expected)
    _, _, again, info3 = round_trip(tmp_path / "in.npy", tmp_path / "out.tif")
    assert info3.dtype == np.uint16 and np.array_equal(again, expected)


# ---- directories ---------------------------------------------------------------------------

def test_natural_order_and_ignored_files(tmp_path):
    video = frames_of(np.uint8)
    names = ["frame2.png", "frame10.png", "frame1.png", "Frame3.png"]
    write_dir(tmp_path, video, 8, names=names)
    (tmp_path / "notes.txt").write_text("not a frame")
    (tmp_path / ".hidden.png").write_bytes(b"not even a png")
    (tmp_path / "sub").mkdir()
    assert [f.name for f in frame_files(tmp_path)] == ["frame1.png", "frame2.png", "Frame3.png",
                                                       "frame10.png"]
    frames, info = read_video(tmp_path)
    assert info.frames == T
    assert np.array_equal(frames, video[[2, 0, 3, 1]])


def test_directory_reading_is_lazy(tmp_path):
    video = frames_of(np.uint8)
    write_dir(tmp_path, video, 8)
    info, frames = open_video(tmp_path)
    assert np.array_equal(next(frames), video[0])
    write_image(tmp_path / "f3.png", np.full((H, W), 7, np.float32), ImageInfo(8, "L"))
    rest = list(frames)
    assert np.array_equal(rest[1], video[2]) and np.all(rest[2] == 7)


def test_empty_directory(tmp_path):
    (tmp_path / "readme.txt").write_text("no frames here")
    with pytest.raises(ImageFileError, match=f"^{tmp_path}: no frames"):
        open_video(tmp_path)


def test_mixed_shapes_and_depths(tmp_path):
    write_dir(tmp_path / "a", frames_of(np.uint8)[:2], 8)
    write_image(tmp_path / "a" / "f2.png", np.zeros((H + 1, W), np.float32), ImageInfo(8, "L"))
    with pytest.raises(ImageFileError, match=r"f2\.png: 13x10 8-bit L frame; the first one, f0\.png"):
        read_video(tmp_path / "a")
    write_dir(tmp_path / "b", frames_of(np.uint8)[:2], 8)
    write_image(tmp_path / "b" / "f2.png", np.zeros((H, W), np.float32), ImageInfo(16, "L"))
    with pytest.raises(ImageFileError, match=r"f2\.png: 13x9 16-bit L"):
        read_video(tmp_path / "b")
    write_dir(tmp_path / "c", frames_of(np.uint8)[:2], 8)
    write_dir(tmp_path / "c", frames_of(np.uint8, colour=True)[2:], 8, names=["f2.png", "f3.png"])
    with pytest.raises(ImageFileError, match=r"f2\.png: 13x9 8-bit RGB"):
        read_video(tmp_path / "c")


def test_alpha_frames_are_refused(tmp_path):
    rgba = np.zeros((H, W, 4), np.uint8)
    Image.fromarray(rgba).save(tmp_path / "f0.png")
    with pytest.raises(ImageFileError, match=r"f0\.png: has an alpha channel \(RGBA\).*drop the alpha"):
        open_video(tmp_path)
    np.save(tmp_path / "alpha.npy", np.zeros((T, H, W, 4), np.uint8))
    with pytest.raises(ImageFileError, match=r"alpha\.npy: .*drop the alpha"):
        open_video(tmp_path / "alpha.npy")
    pages = [Image.fromarray(rgba)] * 2
    pages[0].save(tmp_path / "alpha.tif", save_all=True, append_images=pages[1:])
    with pytest.raises(ImageFileError, match=r"alpha\.tif: page 0 has an alpha channel"):
        open_video(tmp_path / "alpha.tif")


def test_missing_and_unreadable_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.npy: no such file"):
        open_video(tmp_path / "nothing.npy")
    (tmp_path / "bad.npy").write_bytes(b"garbage")
    with pytest.raises(ImageFileError, match=r"bad\.npy: not a readable \.npy"):
        open_video(tmp_path / "bad.npy")
    (tmp_path / "bad.tif").write_bytes(b"II*\0\x08\0\0\0" + bytes(20))  # a page of no tags
    with pytest.raises(ImageFileError, match=r"bad\.tif: "):
        open_video(tmp_path / "bad.tif")
    (tmp_path / "image.png").write_bytes(b"")
    with pytest.raises(ImageFileError, match=r"image\.png: not a video"):
        open_video(tmp_path / "image.png")
    for array, what in [(np.zeros((0, H, W), np.uint8), "empty"), (np.zeros((H, W), np.uint8), "not a video"),
                        (np.zeros((T, H, W), np.complex64), "complex64")]:
        np.save(tmp_path / "odd.npy", array)
        with pytest.raises(ImageFileError, match=what):
            open_video(tmp_path / "odd.npy")
    np.save(tmp_path / "nan.npy", np.full((T, H, W), np.nan, np.float32))
    info, frames = open_video(tmp_path / "nan.npy")
    with pytest.raises(ImageFileError, match=r"nan\.npy: frame 0 holds NaN"):
        next(frames)


def test_single_page_tiff_is_a_one_frame_video(tmp_path):
    Image.fromarray(frames_of(np.uint8)[0]).save(tmp_path / "one.tif")
    assert not is_video_path(tmp_path / "one.tif")
    video, info = read_video(tmp_path / "one.tif")
    assert info.frames == 1 and video.shape == (1, H, W)


@pytest.mark.parametrize("suffix", [".gif", ".png", ".webp"])
def test_animated_images_are_videos(tmp_path, suffix):
    """An animated GIF, PNG or WebP is read frame by frame (palette GIF frames as RGB); a
    single-frame one stays an image."""
    video = frames_of(np.uint8, colour=True)
    pages = [Image.fromarray(frame) for frame in video]
    path = tmp_path / f"clip{suffix}"
    options = {"lossless": True} if suffix == ".webp" else {}
    pages[0].save(path, save_all=True, append_images=pages[1:], **options)
    assert is_video_path(path)
    got, info = read_video(path)
    assert info.kind == "frames" and info.frames == T and got.shape == (T, H, W, 3)
    if suffix != ".gif":        # GIF quantises colours to a palette
        np.testing.assert_array_equal(got, video.astype(np.float32))
    pages[0].save(tmp_path / f"one{suffix}")
    assert not is_video_path(tmp_path / f"one{suffix}")


# ---- npy laziness and the heuristics -------------------------------------------------------

def test_npy_reading_is_lazy(tmp_path):
    video = frames_of(np.uint8)
    np.save(tmp_path / "v.npy", video)
    info, frames = open_video(tmp_path / "v.npy")
    assert np.array_equal(next(frames), video[0])
    on_disk = np.load(tmp_path / "v.npy", mmap_mode="r+")  # change frame 1 after opening
    on_disk[1] = 42
    on_disk.flush()
    del on_disk
    assert np.all(next(frames) == 42)


def test_is_video_path(tmp_path):
    cases = {"gray_video.npy": (T, H, W), "rgb_video.npy": (T, H, W, 3), "mono4d.npy": (T, H, W, 1),
             "rgb_image.npy": (H, W, 3), "gray1.npy": (H, W, 1), "rgba_image.npy": (H, W, 4),
             "image.npy": (H, W)}
    for name, shape in cases.items():
        np.save(tmp_path / name, np.zeros(shape, np.uint8))
    video = [name for name in cases if is_video_path(tmp_path / name)]
    assert sorted(video) == ["gray_video.npy", "mono4d.npy", "rgb_video.npy"]
    write_tiff(tmp_path / "stack.tiff", frames_of(np.uint8))
    Image.fromarray(frames_of(np.uint8)[0]).save(tmp_path / "one.png")
    assert is_video_path(tmp_path / "stack.tiff") and not is_video_path(tmp_path / "one.png")
    assert is_video_path(tmp_path) and is_video_path(tmp_path / "clip.MP4")
    assert not is_video_path(tmp_path / "missing.tif") and not is_video_path(tmp_path / "missing")
    (tmp_path / "bad.npy").write_bytes(b"garbage")
    assert not is_video_path(tmp_path / "bad.npy")
    # open_video reads a 3-D array as (T, H, W) even when its last axis is 3
    assert open_video(tmp_path / "rgb_image.npy")[0].shape == (W, 3)


def test_output_kind(tmp_path):
    assert output_kind(tmp_path) == "directory" and output_kind(tmp_path / "new") == "directory"
    assert output_kind("a.TIF") == "tiff" and output_kind("a.npy") == "npy" and output_kind("a.mkv") == "file"
    with pytest.raises(ImageFileError, match=r"a\.png: cannot write a video"):
        output_kind("a.png")


# ---- writer errors -------------------------------------------------------------------------

def gray_info(tmp_path, frames: int = 2) -> VideoInfo:
    return VideoInfo("npy", frames, (H, W), np.dtype(np.uint8), 255.0, None, tmp_path / "src.npy")


def test_non_empty_output_directory(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(ImageFileError, match=f"^{out}: the output directory is not empty"):
        VideoWriter(out, gray_info(tmp_path))
    for k in range(3):  # an earlier, longer result: overwriting removes its frames
        write_image(out / f"frame_{k:05d}.png", np.zeros((H, W), np.float32), ImageInfo(8, "L"))
    with VideoWriter(out, gray_info(tmp_path), overwrite=True) as writer:  # .npy frames, as the source
        writer.write(np.zeros((H, W), np.float32))
    assert sorted(p.name for p in out.iterdir()) == ["frame_00000.npy", "keep.txt"]
    write_image(out / "mine.png", np.zeros((H, W), np.float32), ImageInfo(8, "L"))
    with pytest.raises(ImageFileError, match=r"other image files \(mine\.png"):
        VideoWriter(out, gray_info(tmp_path), overwrite=True)
    assert (out / "mine.png").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ImageFileError, match="not a directory"):
        VideoWriter(tmp_path / "file", gray_info(tmp_path), kind="directory")


@pytest.mark.parametrize("target", ["out", "out.tif", "out.npy"])
def test_wrong_frame_shape(tmp_path, target):
    with VideoWriter(tmp_path / target, gray_info(tmp_path)) as writer:
        writer.write(np.zeros((H, W), np.float32))
        with pytest.raises(ValueError, match=rf"{target}: frame 1 has shape \(9, 13, 3\)"):
            writer.write(np.zeros((H, W, 3), np.float32))
        writer.write(np.zeros((H, W), np.float32))


def test_npy_writer_frame_count(tmp_path):
    writer = VideoWriter(tmp_path / "out.npy", gray_info(tmp_path, frames=2))
    writer.write(np.zeros((H, W)))
    with pytest.raises(ValueError, match=r"out\.npy: 1 of the 2 frames"):
        writer.close()
    with VideoWriter(tmp_path / "out.npy", gray_info(tmp_path, frames=1)) as writer:
        writer.write(np.zeros((H, W)))
        with pytest.raises(ValueError, match=r"out\.npy: frame 1 is one too many"):
            writer.write(np.zeros((H, W)))


def test_writer_refuses_its_source_and_bad_frames(tmp_path):
    np.save(tmp_path / "v.npy", frames_of(np.uint8))
    info, _ = open_video(tmp_path / "v.npy")
    with pytest.raises(ImageFileError, match="is the input video"):
        VideoWriter(tmp_path / "v.npy", info)
    with VideoWriter(tmp_path / "w.npy", gray_info(tmp_path, frames=1)) as writer:
        with pytest.raises(ImageFileError, match="frame 0 holds NaN"):
            writer.write(np.full((H, W), np.inf))
        writer.write(np.zeros((H, W)))
    with pytest.raises(ValueError, match="unknown frame format 'gif'"):
        VideoWriter(tmp_path / "d", gray_info(tmp_path), frame_format="gif")


# ---- video files ---------------------------------------------------------------------------

def test_video_files_without_imageio(tmp_path, monkeypatch):
    for module in ("imageio", "imageio.v2", "imageio_ffmpeg"):
        monkeypatch.setitem(sys.modules, module, None)  # makes `import imageio` fail
    (tmp_path / "clip.mp4").write_bytes(b"\0" * 64)
    hint = r'install the video extra: pip install "clpatch\[video\]"'
    with pytest.raises(ImageFileError, match=rf"clip\.mp4: .*{hint}"):
        open_video(tmp_path / "clip.mp4")
    even = VideoInfo("npy", 2, (8, 12, 3), np.dtype(np.uint8), 255.0, None, tmp_path / "src.npy")
    with pytest.raises(ImageFileError, match=rf"out\.webm: .*{hint}"):
        VideoWriter(tmp_path / "out.webm", even)


def test_video_file_limits(tmp_path):
    with pytest.raises(ImageFileError, match=r"odd\.mp4: video files need an even frame width and "
                                             r"height, got 13x9"):
        VideoWriter(tmp_path / "odd.mp4", gray_info(tmp_path))
    deep = VideoInfo("npy", 2, (8, 12), np.dtype(np.uint16), 65535.0, None, tmp_path / "src.npy")
    with pytest.raises(ImageFileError, match=r"deep\.mkv: video files hold 8-bit frames"):
        VideoWriter(tmp_path / "deep.mkv", deep)


def test_video_file_round_trip(tmp_path):
    pytest.importorskip("imageio")
    pytest.importorskip("imageio_ffmpeg")
    expected = np.zeros((T, 32, 48, 3), np.float32)
    expected[:, 8:24, 16:32] = [200, 100, 50]
    info = VideoInfo("npy", T, expected.shape[1:], np.dtype(np.uint8), 255.0, None, tmp_path / "x.npy")
    with VideoWriter(tmp_path / "clip.mp4", info) as writer:
        for frame in expected:
            writer.write(frame)
    video, info2 = read_video(tmp_path / "clip.mp4")
    assert (info2.kind, info2.frames, info2.shape) == ("file", T, (32, 48, 3))
    assert info2.fps == pytest.approx(25.0)
    assert np.abs(video - expected).mean() < 8  # lossy


# ---- progress ------------------------------------------------------------------------------

def test_progress_with_total():
    stream = io.StringIO()
    with Progress(3, "denoise", stream, enabled=True, min_interval=0.0) as progress:
        for done in range(1, 4):
            progress.update(done, note=f"frame {done}")
    text = stream.getvalue()
    lines = text.split("\r")[1:]
    assert len(lines) == 4  # three updates and the final redraw on close
    assert lines[0].startswith("denoise [") and "1/3" in lines[0] and "frame 1" in lines[0]
    assert "frames/s" in lines[0] and "ETA" in lines[0]
    assert "3/3" in lines[-1] and "[" + "#" * 24 + "]" in lines[-1]
    assert text.endswith("\n") and text.count("\n") == 1


def test_progress_without_total_and_rate_limit():
    stream = io.StringIO()
    progress = Progress(None, "frames", stream, enabled=True, min_interval=3600)
    for done in range(1, 6):
        progress.update(done)
    progress.close()
    progress.close()
    lines = stream.getvalue().split("\r")[1:]
    assert len(lines) == 2  # the first update, then the rest held back until close
    assert lines[0].startswith("frames 1 frames") and "/" not in lines[0].split("frames/s")[0]
    assert lines[1].startswith("frames 5 frames") and lines[1].endswith("\n")
    assert "ETA" not in lines[1]


def test_progress_final_update_is_never_held_back():
    stream = io.StringIO()
    progress = Progress(4, "x", stream, enabled=True, min_interval=3600)
    progress.update(1)
    progress.update(4)
    assert stream.getvalue().count("\r") == 2 and "4/4" in stream.getvalue()


def test_progress_disabled():
    stream = io.StringIO()  # not a terminal: disabled by default
    with Progress(10, "quiet", stream) as progress:
        progress.update(5)
    with Progress(10, "off", stream, enabled=False) as progress:
        progress.update(10)
    assert stream.getvalue() == ""


def test_format_duration():
    assert format_duration(0) == "00:00" and format_duration(75.4) == "01:15"
    assert format_duration(3725) == "1:02:05" and format_duration(float("inf")) == "--:--"
