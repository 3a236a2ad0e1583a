"""Nothing lost, nothing half-written: every command that writes a file (denoise on images and
videos, search --output, knn --output, demo --output) refuses to write over its input or, without
--overwrite, over an existing output, checks the output's place before any work, and an
interrupted or failed run leaves the previous output untouched, no temporary behind, and says so.
An output refused is a usage error (exit 2, before any work); a write failing during the work
exit 1; Ctrl-C exit 130.

The denoisers are replaced by fakes where only the writing is under test, so that every run
is quick; `forbid_work` makes any computation (or even opening a device) fail the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from clpatch.cli import common as cli_common
from clpatch.cli import denoise as cli_denoise
from clpatch.cli import knn as cli_knn
from clpatch.cli import search as cli_search
from clpatch.cli import video as cli_video
from clpatch.io import images as imageio
from clpatch.io.video import VideoWriter, read_video
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.io import test_outputs

unwritable = test_outputs.unwritable  # the fixture: a read-only folder, even for root

SIZE = 16
FRAMES = 3


def names(folder: Path) -> list[str]:
    """Every entry of `folder`, hidden ones (temporaries) included."""
    return sorted(p.name for p in folder.iterdir())


def snapshot(path: Path) -> dict[str, bytes] | bytes:
    """The bytes of a file, or of every file of a directory."""
    if path.is_dir():
        return {p.name: p.read_bytes() for p in sorted(path.iterdir())}
    return path.read_bytes()


@pytest.fixture
def image(tmp_path) -> Path:
    path = tmp_path / "in.png"
    values = np.random.default_rng(0).integers(0, 256, (SIZE, SIZE), dtype=np.uint8)
    Image.fromarray(values).save(path)
    return path


@pytest.fixture
def video(tmp_path) -> Path:
    path = tmp_path / "in.npy"
    np.save(path, np.random.default_rng(1).integers(0, 256, (FRAMES, SIZE, SIZE), dtype=np.uint8))
    return path


@pytest.fixture
def forbid_work(monkeypatch):
    """Any device opened or any denoising, search or knn started fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("work started before the output was checked")

    monkeypatch.setattr(cli_common, "Runtime", refuse)  # every command's open_runtime
    monkeypatch.setattr(cli_video, "_denoised", refuse)
    monkeypatch.setattr(cli_search, "search_patches", refuse)
    monkeypatch.setattr(cli_knn, "knn", refuse)
    for method in ("nlmeans", "bm3d"):
        monkeypatch.setitem(cli_denoise._FUNCTIONS, method, refuse)


def fake_image_denoiser(monkeypatch, interrupt: bool = False) -> None:
    """`--method nlmeans` becomes the identity, or a Ctrl-C in the middle of the work."""
    def identity(image, sigma, *, runtime=None):
        if interrupt:
            raise KeyboardInterrupt
        return np.asarray(image, np.float32) + 1

    monkeypatch.setitem(cli_denoise._FUNCTIONS, "nlmeans", identity)


def fake_video_denoiser(monkeypatch, interrupt_after: int | None = None,
                        value: float | None = None) -> None:
    """The video denoiser yields its input frames (or frames of `value`); with
    `interrupt_after`, Ctrl-C comes when that many frames were yielded (and written)."""
    def frames(args, info, pairs, kwargs, runtime, queue, guide=({}, None)):
        for k, (noisy, clean) in enumerate(pairs):
            if k == interrupt_after:
                raise KeyboardInterrupt
            queue.append((noisy, clean))
            yield noisy if value is None else np.full_like(noisy, value)

    monkeypatch.setattr(cli_video, "_denoised", frames)


def denoise(capsys, runtime, source, target, *extra):
    return run(capsys, "denoise", source, target, "--sigma", 20, "--method", "bm3d"
               if Path(source).suffix == ".npy" else "nlmeans", "--device", spec_of(runtime),
               *extra)


# ---- OUT is never IN ----------------------------------------------------------------------

@pytest.mark.parametrize("alias", ["same", "symlink", "hardlink"])
def test_denoise_never_writes_over_its_input(capsys, runtime, tmp_path, image, video, alias,
                                             forbid_work):
    for source in (image, video):
        target = {"same": source, "symlink": tmp_path / f"link{source.suffix}",
                  "hardlink": tmp_path / f"hard{source.suffix}"}[alias]
        if alias == "symlink":
            target.symlink_to(source.name)
        elif alias == "hardlink":
            os.link(source, target)
        before = source.read_bytes()
        for extra in ([], ["--overwrite"]):
            code, out, err = denoise(capsys, runtime, source, target, *extra)
            assert code == 2 and out == ""
            assert_one_error_line(err, str(target), "is the input", "write the result elsewhere")
            assert source.read_bytes() == before


def test_other_outputs_are_checked_against_inputs_and_each_other(capsys, runtime, tmp_path,
                                                                 image, forbid_work):
    reference = tmp_path / "ref.png"
    reference.write_bytes(image.read_bytes())
    out = tmp_path / "out.png"
    for extra, fragment in [
        (["--add-noise", 20, "--save-noisy", image], "is the input"),
        (["--add-noise", 20, "--save-noisy", out], "is also"),
    ]:
        code, _, err = denoise(capsys, runtime, image, out, *extra)
        assert code == 2
        assert_one_error_line(err, fragment)
    code, _, err = denoise(capsys, runtime, image, reference, "--clean", reference,
                           "--overwrite")
    assert code == 2
    assert_one_error_line(err, "ref.png: is the input")
    assert reference.read_bytes() == image.read_bytes() and not out.exists()


def test_search_and_knn_never_write_over_their_inputs(capsys, runtime, tmp_path, video,
                                                      forbid_work):
    query = tmp_path / "q.npy"
    np.save(query, np.zeros((SIZE, SIZE), np.float32))
    before = query.read_bytes()
    for argv in (["search", query, "-o", query, "--overwrite"],
                 ["knn", query, video, "-o", video, "--overwrite"],
                 ["knn", query, "-o", query, "--overwrite"]):
        code, _, err = run(capsys, *argv)
        assert code == 2
        assert_one_error_line(err, "is the input")
    assert query.read_bytes() == before


# ---- an existing output is replaced only with --overwrite ----------------------------------

def test_existing_image_output_needs_overwrite(capsys, runtime, tmp_path, image, monkeypatch):
    out = tmp_path / "out.png"
    out.write_bytes(b"keep me")
    fake_image_denoiser(monkeypatch)
    code, stdout, err = denoise(capsys, runtime, image, out)
    assert code == 2 and stdout == ""
    assert_one_error_line(err, str(out), "already exists", "--overwrite")
    assert out.read_bytes() == b"keep me"
    code, _, err = denoise(capsys, runtime, image, out, "--overwrite")
    assert code == 0, err
    np.testing.assert_array_equal(np.asarray(Image.open(out)),
                                  np.minimum(np.asarray(Image.open(image)).astype(int) + 1, 255))
    assert names(tmp_path) == ["in.png", "out.png"]


@pytest.mark.parametrize("name", ["out.npy", "out.tif", "out"])
def test_existing_video_output_needs_overwrite(capsys, runtime, tmp_path, video, monkeypatch,
                                               name):
    target = tmp_path / name
    fake_video_denoiser(monkeypatch, value=7)
    code, _, err = denoise(capsys, runtime, video, target)
    assert code == 0, err
    before = snapshot(target)
    fake_video_denoiser(monkeypatch)
    code, _, err = denoise(capsys, runtime, video, target)
    assert code == 2
    assert_one_error_line(err, str(target), "--overwrite")
    assert snapshot(target) == before
    code, _, err = denoise(capsys, runtime, video, target, "--overwrite")
    assert code == 0, err
    np.testing.assert_array_equal(read_video(target)[0], read_video(video)[0])
    assert names(tmp_path) == sorted(["in.npy", name])


def test_search_knn_and_demo_outputs_need_overwrite(capsys, tmp_path, image, forbid_work):
    out = tmp_path / "old.npz"
    out.write_bytes(b"keep me")
    for argv in (["search", image, "-o", out], ["knn", image, "-o", out],
                 ["demo", "-o", tmp_path / "old.png"]):
        (tmp_path / "old.png").write_bytes(b"keep me")
        code, _, err = run(capsys, *argv)
        assert code == 2
        assert_one_error_line(err, "already exists", "--overwrite")
    assert out.read_bytes() == b"keep me" and (tmp_path / "old.png").read_bytes() == b"keep me"


def test_search_overwrites_only_when_asked(capsys, runtime, tmp_path):
    source = tmp_path / "in.npy"
    np.save(source, np.random.default_rng(2).random((SIZE, SIZE), dtype=np.float32))
    out = tmp_path / "out.npz"
    out.write_bytes(b"old")
    argv = ["search", source, "-p", 4, "-w", 5, "-n", 2, "--device", spec_of(runtime), "-o", out]
    assert run(capsys, *argv)[0] == 2 and out.read_bytes() == b"old"
    code, _, err = run(capsys, *argv, "--overwrite")
    assert code == 0, err
    with np.load(out) as saved:
        assert saved["positions"].shape[-2] == 2
    assert names(tmp_path) == ["in.npy", "out.npz"]


# ---- the output's place is checked before any work ---------------------------------------

def test_unwritable_places_fail_before_any_work(capsys, tmp_path, image, video, unwritable,
                                                forbid_work):
    locked = tmp_path / "locked"
    locked.mkdir()
    unwritable(locked)
    (tmp_path / "dir.png").mkdir()
    (tmp_path / "file").write_bytes(b"x")
    missing = tmp_path / "missing"
    cases = [  # (argv, the path the error names, what it says)
        (["denoise", image, missing / "out.png", "--sigma", 20], missing / "out.png",
         "does not exist"),
        (["denoise", image, locked / "out.png", "--sigma", 20], locked / "out.png",
         "is not writable"),
        (["denoise", image, tmp_path / "dir.png", "--sigma", 20, "--overwrite"],
         tmp_path / "dir.png", "is a directory"),
        (["denoise", image, tmp_path / "out.png", "--add-noise", 20, "--save-noisy",
          locked / "noisy.png"], locked / "noisy.png", "is not writable"),
        (["denoise", video, missing / "frames", "--sigma", 20], missing / "frames",
         "does not exist"),
        (["denoise", video, locked / "out.npy", "--sigma", 20], locked / "out.npy",
         "is not writable"),
        (["denoise", video, locked, "--sigma", 20], locked, "is not writable"),
        (["denoise", video, tmp_path / "file", "--sigma", 20, "--overwrite"], tmp_path / "file",
         "not a directory"),
        (["search", image, "-o", locked / "out.npz"], locked / "out.npz", "is not writable"),
        (["search", image, "-o", tmp_path / "dir.png", "--overwrite"], tmp_path / "dir.png",
         "is a directory"),
        (["knn", image, "-o", missing / "out.npz"], missing / "out.npz", "does not exist"),
        (["demo", "-o", locked / "demo.png"], locked / "demo.png", "is not writable"),
        (["autotune", "--quick", "--json", locked / "t.json"], locked / "t.json",
         "is not writable"),
        (["bench", "--json", missing / "b.json"], missing / "b.json", "does not exist"),
    ]
    for argv, path, fragment in cases:
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "", argv
        assert_one_error_line(err, f"{path}: ", fragment)
    assert names(locked) == [] and names(tmp_path / "dir.png") == []


# ---- an interrupted or failed run leaves nothing half-written ------------------------------

def test_reports_are_written_whole(tmp_path, monkeypatch):
    """A --json report goes through a temporary renamed into place: a failure while writing
    it leaves the previous report and no temporary."""
    from clpatch.cli import outputs as cli_outputs

    report = tmp_path / "r.json"
    report.write_text("previous")
    cli_outputs.write_report(str(report), "new")
    assert report.read_text() == "new" and names(tmp_path) == ["r.json"]

    def failing(self, text):
        raise OSError("disk full")
    monkeypatch.setattr(Path, "write_text", failing)
    with pytest.raises(cli_outputs.CommandError, match=r"r\.json: cannot write the report "
                                                       r"\(disk full\)"):
        cli_outputs.write_report(str(report), "newer")
    monkeypatch.undo()
    assert report.read_text() == "new" and names(tmp_path) == ["r.json"]


@pytest.mark.parametrize("previous", [True, False])
def test_interrupted_image_denoising(capsys, runtime, tmp_path, image, monkeypatch, previous):
    out = tmp_path / "out.png"
    if previous:
        out.write_bytes(b"previous")
    fake_image_denoiser(monkeypatch, interrupt=True)
    code, stdout, err = denoise(capsys, runtime, image, out, "--overwrite")
    # The header (what was running) is printed before the work; no result line follows.
    assert code == 130 and "time:" not in stdout and "output:" not in stdout
    note = "; the previous file is untouched" if previous else ""
    assert_one_error_line(err, f"interrupted: {out} was not written{note}")
    assert names(tmp_path) == (["in.png", "out.png"] if previous else ["in.png"])
    if previous:
        assert out.read_bytes() == b"previous"


def test_image_write_failing_half_way(capsys, runtime, tmp_path, image, monkeypatch):
    out = tmp_path / "out.png"
    out.write_bytes(b"previous")
    fake_image_denoiser(monkeypatch)

    def disk_full(path, fmt, data, mode):  # half the file, then the disk is full
        Path(path).write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(imageio, "_write", disk_full)
    code, _, err = denoise(capsys, runtime, image, out, "--overwrite")
    assert code == 1
    assert_one_error_line(err, "No space left on device",
                          f"{out} was not written; the previous file is untouched")
    assert out.read_bytes() == b"previous" and names(tmp_path) == ["in.png", "out.png"]


@pytest.mark.parametrize("name", ["out.npy", "out.tif", "out"])
@pytest.mark.parametrize("previous", [True, False])
def test_interrupted_video_denoising(capsys, runtime, tmp_path, video, monkeypatch, name,
                                     previous):
    target = tmp_path / name
    if previous:
        fake_video_denoiser(monkeypatch, value=9)
        assert denoise(capsys, runtime, video, target)[0] == 0
        before = snapshot(target)
    listing = names(tmp_path)
    written = []
    real_write = VideoWriter.write

    def counting(writer, frame):
        real_write(writer, frame)
        written.append(writer.temporary)

    monkeypatch.setattr(VideoWriter, "write", counting)
    fake_video_denoiser(monkeypatch, interrupt_after=1)  # Ctrl-C after the first frame
    code, out, err = denoise(capsys, runtime, video, target, "--overwrite", "--add-noise", 20,
                             "--save-noisy", tmp_path / "noisy.npy")
    assert code == 130 and out == ""
    assert len(written) == 2 and all(p.parent == tmp_path for p in written)  # both writers began
    untouched = ("; the directory is untouched" if name == "out" else
                 "; the previous file is untouched") if previous else ""
    assert_one_error_line(err, f"interrupted: {target} was not written{untouched}; "
                               f"{tmp_path / 'noisy.npy'} was not written")
    assert names(tmp_path) == listing  # no temporary, no noisy.npy
    if previous:
        assert snapshot(target) == before


def test_video_frame_writer_failing_after_one_frame(capsys, runtime, tmp_path, video,
                                                    monkeypatch):
    target = tmp_path / "out.tif"
    fake_video_denoiser(monkeypatch, value=9)
    assert denoise(capsys, runtime, video, target)[0] == 0
    before = snapshot(target)
    real_write = VideoWriter.write

    def disk_full_after_one(writer, frame):
        if writer.written == 1:
            raise OSError(28, "No space left on device")
        real_write(writer, frame)

    monkeypatch.setattr(VideoWriter, "write", disk_full_after_one)
    fake_video_denoiser(monkeypatch)
    code, _, err = denoise(capsys, runtime, video, target, "--overwrite")
    assert code == 1
    assert_one_error_line(err, "No space left on device",
                          f"{target} was not written; the previous file is untouched")
    assert snapshot(target) == before and names(tmp_path) == ["in.npy", "out.tif"]
