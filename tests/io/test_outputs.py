"""The output rule (clpatch.io.outputs) and the writers built on it: every output is checked
before any work and written through a temporary beside it, so an interrupted or failed write
leaves the previous file untouched and no temporary behind."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from clpatch.io import images as imageio
from clpatch.io import outputs
from clpatch.io.images import ImageInfo, write_image
from clpatch.io.outputs import OutputError, TemporaryOutput, check_output, same_file
from clpatch.io.video import VideoInfo, VideoWriter, read_video

H, W = 16, 16


def names(folder: Path) -> list[str]:
    """Every entry of `folder`, hidden ones (temporaries) included."""
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def unwritable(monkeypatch):
    """Makes a folder read-only (as root, who may write anyway, os.access is told so too);
    its mode is restored afterwards."""
    locked: list[Path] = []
    real = os.access

    def make(folder: Path) -> None:
        folder.chmod(0o555)
        locked.append(folder)
        if real(folder, os.W_OK):
            monkeypatch.setattr(outputs.os, "access", lambda path, mode: False
                                if Path(path) in locked else real(path, mode))

    yield make
    for folder in locked:
        folder.chmod(0o755)


def video_info(tmp_path: Path, frames: int = 3) -> VideoInfo:
    return VideoInfo("npy", frames, (H, W), np.dtype(np.uint8), 255.0, None, tmp_path / "src.npy")


def frame(value: int) -> np.ndarray:
    return np.full((H, W), value, np.float32)


# ---- check_output ------------------------------------------------------------------------

def test_same_file_through_links(tmp_path):
    source = tmp_path / "in.png"
    source.write_bytes(b"x")
    (tmp_path / "link.png").symlink_to(source)
    os.link(source, tmp_path / "hard.png")
    for alias in ("in.png", "link.png", "hard.png", "./in.png"):
        assert same_file(tmp_path / alias, source)
        with pytest.raises(OutputError, match=rf"{alias}: is the input .*in\.png; write the result"):
            check_output(tmp_path / alias, inputs=[None, source], overwrite=True)
    assert not same_file(tmp_path / "new.png", source)
    (tmp_path / "sub").mkdir()
    assert same_file(tmp_path / "sub" / ".." / "new.png", tmp_path / "new.png")  # neither exists


def test_check_output_places(tmp_path, unwritable):
    with pytest.raises(OutputError, match=r"out\.png: cannot write here: the folder .*missing "
                                          r"does not exist"):
        check_output(tmp_path / "missing" / "out.png")
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(OutputError, match=r"dir\.png: is a directory"):
        check_output(tmp_path / "dir.png", overwrite=True)
    (tmp_path / "old.png").write_bytes(b"old")
    with pytest.raises(OutputError, match=r"old\.png: already exists; pass --overwrite"):
        check_output(tmp_path / "old.png", overwrite_option="--overwrite")
    assert check_output(tmp_path / "old.png", overwrite=True) == tmp_path / "old.png"
    with pytest.raises(OutputError, match=r"old\.png: exists and is not a directory"):
        check_output(tmp_path / "old.png", overwrite=True, directory=True)
    frames = tmp_path / "frames"
    frames.mkdir()
    check_output(frames, directory=True)  # empty: nothing to lose
    (frames / "frame_00000.png").write_bytes(b"x")
    with pytest.raises(OutputError, match=r"frames: the output directory is not empty"):
        check_output(frames, directory=True)
    check_output(frames, directory=True, overwrite=True)
    locked = tmp_path / "locked"
    locked.mkdir()
    unwritable(locked)
    with pytest.raises(OutputError, match=r"out\.png: cannot write here: .*locked is not writable"):
        check_output(locked / "out.png")


# ---- TemporaryOutput ---------------------------------------------------------------------

def test_temporary_output_commits_whole_and_keeps_the_mode(tmp_path):
    target = tmp_path / "out.npy"
    target.write_bytes(b"previous")
    target.chmod(0o640)
    with TemporaryOutput(target) as output:
        assert output.temporary.parent == tmp_path and output.temporary.name.startswith(".out.npy.")
        assert output.temporary.suffix == ".npy" and ".partial" in output.temporary.name
        output.temporary.write_bytes(b"new")
        assert target.read_bytes() == b"previous"  # nothing in place before the end
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o777 == 0o640
    assert names(tmp_path) == ["out.npy"]


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_temporary_output_discards_on_any_exception(tmp_path, error):
    target = tmp_path / "out.png"
    target.write_bytes(b"previous")
    with pytest.raises(error):
        with TemporaryOutput(target) as output:
            output.temporary.write_bytes(b"half")
            raise error()
    assert target.read_bytes() == b"previous" and names(tmp_path) == ["out.png"]
    with pytest.raises(error), TemporaryOutput(tmp_path / "new.png"):
        raise error()
    assert names(tmp_path) == ["out.png"]


def test_temporary_output_replaces_the_file_a_link_points_to(tmp_path):
    (tmp_path / "real.png").write_bytes(b"previous")
    (tmp_path / "link.png").symlink_to("real.png")
    with TemporaryOutput(tmp_path / "link.png") as output:
        output.temporary.write_bytes(b"new")
    assert (tmp_path / "link.png").is_symlink() and (tmp_path / "real.png").read_bytes() == b"new"


def test_directory_output_replaces_stale_entries_and_rolls_back(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("frame_00000.png", "frame_00001.png", "frame_00002.png", "notes.txt"):
        (out / name).write_text(f"old {name}")

    def stale(entry: Path) -> bool:
        return entry.name.startswith("frame_")

    output = TemporaryOutput(out, directory=True, stale=stale)
    for k in range(2):
        (output.temporary / f"frame_{k:05d}.png").write_text("new")
    real_replace = os.replace
    calls = []

    def failing(source, dest):  # the disk fails on the second new frame
        calls.append(dest)
        if Path(source).parent == output.temporary and len(calls) > 4:
            raise OSError(28, "No space left on device")
        real_replace(source, dest)

    monkeypatch.setattr(outputs.os, "replace", failing)
    with pytest.raises(OSError, match="No space left"):
        output.commit()
    monkeypatch.undo()
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        name: f"old {name}" for name in ("frame_00000.png", "frame_00001.png", "frame_00002.png",
                                         "notes.txt")}
    assert names(tmp_path) == ["out"]  # no temporary and no trash left

    with TemporaryOutput(out, directory=True, stale=stale) as output:
        for k in range(2):
            (output.temporary / f"frame_{k:05d}.png").write_text("new")
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        "frame_00000.png": "new", "frame_00001.png": "new", "notes.txt": "old notes.txt"}
    assert names(tmp_path) == ["out"]


# ---- write_image and VideoWriter ----------------------------------------------------------

def test_write_image_interrupted_mid_write_leaves_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "out.png"
    write_image(target, frame(10), ImageInfo(8, "L"))
    before = target.read_bytes()
    real_write = imageio._write

    def half_then_interrupted(path, fmt, data, mode):
        real_write(path, fmt, data[: H // 2], mode)
        raise KeyboardInterrupt

    monkeypatch.setattr(imageio, "_write", half_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_image(target, frame(200), ImageInfo(8, "L"))
    assert target.read_bytes() == before and names(tmp_path) == ["out.png"]
    monkeypatch.undo()
    write_image(target, frame(200), ImageInfo(8, "L"))
    assert np.asarray(Image.open(target)).max() == 200


@pytest.mark.parametrize("name", ["out.npy", "out.tif", "out"])
def test_video_writer_interrupted_after_one_frame(tmp_path, name):
    target = tmp_path / name
    with VideoWriter(target, video_info(tmp_path)) as writer:
        for k in range(3):
            writer.write(frame(k))
    previous, _ = read_video(target)
    listing = names(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        with VideoWriter(target, video_info(tmp_path), overwrite=True) as writer:
            writer.write(frame(100))
            assert writer.temporary.exists() and writer.temporary.parent == tmp_path
            raise KeyboardInterrupt
    assert names(tmp_path) == listing  # no temporary left
    again, _ = read_video(target)
    np.testing.assert_array_equal(again, previous)


def test_npy_video_of_too_few_frames_is_not_written(tmp_path):
    writer = VideoWriter(tmp_path / "out.npy", video_info(tmp_path, frames=3))
    writer.write(frame(1))
    with pytest.raises(ValueError, match=r"1 of the 3 frames were written; the \.npy video was "
                                         r"not written"):
        writer.close()
    assert names(tmp_path) == []


def test_directory_video_overwrite_keeps_other_files_until_complete(tmp_path):
    out = tmp_path / "out"
    with VideoWriter(out, video_info(tmp_path, frames=3), frame_format="png") as writer:
        for k in range(3):
            writer.write(frame(k))
    (out / "notes.txt").write_text("mine")
    with VideoWriter(out, video_info(tmp_path, frames=2), overwrite=True,
                     frame_format="png") as writer:
        writer.write(frame(50))
        writer.write(frame(60))
        assert names(out) == ["frame_00000.png", "frame_00001.png", "frame_00002.png",
                              "notes.txt"]  # the old result stays whole until the end
    assert names(out) == ["frame_00000.png", "frame_00001.png", "notes.txt"]
    video, _ = read_video(out)
    assert video[:, 0, 0].tolist() == [50, 60]
    assert names(tmp_path) == ["out"]


def test_video_writer_checks_its_place_first(tmp_path, unwritable):
    with pytest.raises(OutputError, match="does not exist"):
        VideoWriter(tmp_path / "missing" / "out.npy", video_info(tmp_path))
    with pytest.raises(OutputError, match="does not exist"):
        VideoWriter(tmp_path / "missing" / "frames", video_info(tmp_path))
    locked = tmp_path / "locked"
    locked.mkdir()
    unwritable(locked)
    for name in ("out.tif", "frames"):
        with pytest.raises(OutputError, match="is not writable"):
            VideoWriter(locked / name, video_info(tmp_path))
    assert names(locked) == []
