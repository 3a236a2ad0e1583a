"""The command line, called in-process through clpatch.cli.main(argv) (plus one real process)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import clpatch
from clpatch.cli import devices as cli_devices
from clpatch.cli import main as cli
from clpatch.core.devices import INSTALL_HELP, is_simulator, list_devices
from tests.conftest import device_specs
from tests.helpers import (
    assert_close,
    check_search,
    load_image,
    random_image,
    read_npz,
    write_png,
)

REPO = Path(__file__).resolve().parents[2]  # tests/cli/ -> the repository root


def spec_of(runtime: clpatch.Runtime) -> str:
    """The 'P:D' index of a test runtime's device, as the CLI takes it."""
    for entry in list_devices():
        if entry.device == runtime.device:
            return entry.index
    raise AssertionError(f"{runtime} is not in list_devices()")


@pytest.fixture
def first_device() -> str:
    specs = device_specs()
    if not specs:
        pytest.skip("no OpenCL test device")
    return specs[0][0]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one error line, got:\n{err}"
    assert lines[0].startswith("clpatch: error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], err


# ---- devices ------------------------------------------------------------------------------

def test_devices_lists_every_device_and_marks_the_default(capsys):
    code, out, err = run(capsys, "devices")
    assert code == 0, err
    entries = list_devices()
    for entry in entries:
        assert f"{entry.index}  {entry.label}" in out
    default = clpatch.select_device()
    marked = [line for line in out.splitlines() if line.startswith("* ")]
    assert len(marked) == 1 and default.name.strip() in marked[0]
    for word in ("profile", "compute units", "local memory", "max work-group", "sub-groups",
                 "int64", "float", "fp64"):
        assert word in out


def test_devices_honours_clpatch_device(capsys, monkeypatch, first_device):
    monkeypatch.setenv("CLPATCH_DEVICE", first_device)
    code, out, _ = run(capsys, "devices")
    assert code == 0
    chosen = clpatch.select_device(first_device)
    index = next(e.index for e in list_devices() if e.device == chosen)
    marked = [line for line in out.splitlines() if line.startswith("* ")]
    assert len(marked) == 1 and marked[0].startswith(f"* {index}  ")
    assert f"CLPATCH_DEVICE={first_device}" in out


def test_devices_check(capsys):
    code, out, err = run(capsys, "devices", "--check")
    assert code == 0, out + err
    assert ": ok (" in out
    for entry in list_devices():
        if is_simulator(entry.device):
            assert f"{entry.index}  {entry.device.name.strip()}: skipped (simulator)" in out


def test_devices_check_fails_when_no_device_works(capsys, monkeypatch):
    monkeypatch.setattr(cli_devices, "check_device", lambda entry: "planted failure")
    code, out, err = run(capsys, "devices", "--check")
    assert code == 1
    assert "FAILED: planted failure" in out
    assert err.startswith("clpatch: error: no OpenCL device other than a simulator works")
    assert INSTALL_HELP.splitlines()[-1] in err and "pocl-opencl-icd" in err
    assert "Traceback" not in err


def test_devices_without_any_platform(capsys, monkeypatch):
    monkeypatch.setattr(cli_devices, "list_devices", lambda: [])
    monkeypatch.setattr(cli_devices, "get_platforms", lambda: [])
    code, out, err = run(capsys, "devices")
    assert code == 1 and out == ""
    assert err.startswith("clpatch: error: ") and INSTALL_HELP in err


def test_python_m_clpatch_devices_in_a_subprocess():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-m", "clpatch", "devices"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "OpenCL devices" in done.stdout and "<- default" in done.stdout


# ---- search -------------------------------------------------------------------------------

def test_search_png_writes_the_result(capsys, tmp_path, runtime):
    image = load_image("camera", np.uint8)[100:164, 150:230]
    path = tmp_path / "crop.png"
    Image.fromarray(image).save(path)
    out_file = tmp_path / "result.npz"
    code, out, err = run(capsys, "search", path, "--device", spec_of(runtime),
                         "--output", out_file)
    assert code == 0, err
    assert "64x80 uint8" in out and "square" in out and "rule" in out
    assert runtime.device.name.strip() in out
    saved = read_npz(out_file)
    expected = clpatch.search_patches(image, runtime=runtime)
    np.testing.assert_array_equal(saved["grid_y"], expected.grid_y)
    np.testing.assert_array_equal(saved["grid_x"], expected.grid_x)
    assert saved["positions"].shape == expected.positions.shape
    assert_close(saved["distances"], expected.distances, rtol=1e-6, atol=1e-3,
                 what="CLI distances vs search_patches")
    assert str(saved["config"]) == expected.config.describe()
    assert int(saved["k"]) == expected.k             # the one vocabulary: k, not n

    class Saved:
        positions, distances = saved["positions"], saved["distances"]
        grid_y, grid_x = saved["grid_y"], saved["grid_x"]

    check_search(Saved, image, patch_size=8, step=4, window=21, k=16)


def test_search_16bit_png_keeps_its_values(capsys, tmp_path, runtime):
    image = (np.random.default_rng(3).random((30, 41)) * 65535).astype(np.uint16)
    path = tmp_path / "deep.png"
    Image.fromarray(image).save(path)
    assert np.array_equal(np.asarray(Image.open(path)), image)
    out_file = tmp_path / "deep.npz"
    code, out, err = run(capsys, "search", path, "-p", 5, "-s", 2, "-w", 9, "-n", 8,
                         "--metric", "l1", "--variant", "column", "--device", spec_of(runtime),
                         "-o", out_file)
    assert code == 0, err
    assert "30x41 uint16" in out and "column" in out and "forced" in out
    saved = read_npz(out_file)
    expected = clpatch.search_patches(image, 5, 2, 9, 8, metric="l1", variant="column",
                                      runtime=runtime)
    assert_close(saved["distances"], expected.distances, rtol=1e-6, atol=1e-3,
                 what="16-bit CLI distances vs search_patches")
    # Quantised to 8 bits, the distances would be about 256 times smaller.
    assert saved["distances"][..., -1].mean() > 1000 * 25


def test_search_colour_png_and_npy_video(capsys, tmp_path, runtime):
    colour = load_image("motorcycle_left", np.uint8)[:40, :48]
    png = tmp_path / "colour.png"
    Image.fromarray(colour).save(png)
    code, out, err = run(capsys, "search", png, "-w", 9, "-n", 4, "--device", spec_of(runtime))
    assert code == 0, err
    assert "40x48x3 uint8 (H, W, C)" in out

    video = random_image((3, 20, 23), seed=4)
    npy = tmp_path / "video.npy"
    np.save(npy, video)
    out_file = tmp_path / "video.npz"
    code, out, err = run(capsys, "search", npy, "-t", 1, "-w", 7, "-n", 4,
                         "--device", spec_of(runtime), "-o", out_file)
    assert code == 0, err
    assert "video" in out and "temporal window 1" in out
    saved = read_npz(out_file)
    assert saved["positions"].shape[0] == 3 and saved["positions"].shape[-1] == 3
    expected = clpatch.search_patches(video, 8, 4, 7, 4, temporal_window=1, runtime=runtime)
    assert_close(saved["distances"], expected.distances, rtol=1e-6, atol=1e-3,
                 what="video CLI distances vs search_patches")


def test_search_uses_clpatch_device(capsys, tmp_path, monkeypatch, first_device):
    path = tmp_path / "small.npy"
    np.save(path, random_image((20, 24)))
    monkeypatch.setenv("CLPATCH_DEVICE", first_device)
    code, out, err = run(capsys, "search", path, "-w", 7, "-n", 4)
    assert code == 0, err
    assert clpatch.select_device(first_device).name.strip() in out
    monkeypatch.setenv("CLPATCH_DEVICE", "no-such-device-anywhere")
    code, out, err = run(capsys, "search", path, "-w", 7, "-n", 4)
    assert code == 2
    assert err.splitlines()[0].startswith("clpatch: error: device 'no-such-device-anywhere'")
    assert "Traceback" not in err


# ---- errors -------------------------------------------------------------------------------

def test_missing_file(capsys, tmp_path):
    code, out, err = run(capsys, "search", tmp_path / "nothing-here.png")
    assert code == 2 and out == ""
    assert_one_error_line(err, "nothing-here.png", "no such file")


def test_unreadable_image(capsys, tmp_path):
    path = tmp_path / "fake.png"
    path.write_text("this is not a picture\n")
    code, _, err = run(capsys, "search", path)
    assert code == 2
    assert_one_error_line(err, "fake.png")


@pytest.mark.parametrize("argv,fragment", [
    (["--patch-size", "0"], "patch_size must be in [1, 32]"),
    (["--patch-size", "40"], "patch_size must be in [1, 32]"),
    (["-n", "500"], "k must be in [1, 32]"),
    (["--variant", "square", "-s", "2"], "variant 'square' needs patch_size=8 and step=4"),
    (["--temporal-window", "1"], "temporal_window > 0 needs a video input"),
    (["--patch-size", "eight"], "invalid int value"),
    (["--metric", "l3"], "invalid choice"),
])
def test_bad_arguments(capsys, tmp_path, first_device, argv, fragment):
    path = tmp_path / "small.npy"
    np.save(path, random_image((20, 24)))
    code, out, err = run(capsys, "search", path, "--device", first_device, *argv)
    assert code == 2 and out == ""
    assert_one_error_line(err, fragment)


def test_help_and_no_command(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "devices" in out and "search" in out and "demo" in out
    code, out, _ = run(capsys, "search", "--help")
    assert code == 0 and "--patch-size" in out and "--temporal-window" in out
    code, out, _ = run(capsys)
    assert code == 2 and "usage" in out
    code, _, err = run(capsys, "frobnicate")
    assert code == 2
    assert_one_error_line(err, "invalid choice")


@pytest.mark.parametrize("command", ["search", "knn", "nnf"])
def test_archives_must_be_named_npz(capsys, tmp_path, command):
    """`-o res.txt` wrote an .npz archive named res.txt: refused before any work, naming
    the option (exit 2, as the other output errors)."""
    image = write_png(tmp_path / "in.png", load_image("camera", np.uint8)[:40, :40])
    argv = {"search": ["search", image], "knn": ["knn", image],
            "nnf": ["nnf", image, image]}[command]
    code, out, err = run(capsys, *argv, "-o", tmp_path / "res.txt")
    assert code == 2 and "--output" in err and "res.txt" in err and ".npz" in err, err
    assert not (tmp_path / "res.txt").exists()


def test_complex_npy_is_refused_as_the_api_refuses_it(capsys, tmp_path):
    path = tmp_path / "complex.npy"
    np.save(path, (np.ones((20, 20)) * (1 + 2j)).astype(np.complex64))
    for argv in (["search", path], ["denoise", path, tmp_path / "out.npy", "--sigma", 20]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and "complex64" in err and "real numbers" in err, err
        assert not (tmp_path / "out.npy").exists()


def test_every_option_has_a_help_text():
    """`clpatch CMD --help` explains every argument of every command."""
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {a.option_strings or a.dest}" for name, sub in commands.choices.items()
               for a in sub._actions if a.help is None and not isinstance(a, argparse._HelpAction)]
    assert not missing, missing


def test_short_options_mean_one_thing():
    """-m is a method (or methods) wherever it exists; -k the number of matches."""
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        for a in sub._actions:
            if "-m" in a.option_strings:
                assert a.dest in ("method", "methods"), (name, a.dest)
            if "-k" in a.option_strings:
                assert a.dest == "k", (name, a.dest)
