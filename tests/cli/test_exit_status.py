"""One exit-status convention for every command (clpatch.cli.common, `clpatch --help`'s
epilog): 2 when the command line is refused before any work (argparse's own status), 1 when
the work fails, 130 after Ctrl-C, 0 when done."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from PIL import Image

from clpatch.cli import common as cli_common
from clpatch.cli import main as cli
from clpatch.cli import search as cli_search
from clpatch.cli import video as cli_video
from clpatch.cli.common import (
    ARGUMENT_ERRORS,
    EXIT_FAILURE,
    EXIT_USAGE,
    CommandError,
    UsageError,
    usage_checks,
)
from clpatch.cli.outputs import INTERRUPTED_CODE
from clpatch.core.errors import ClpatchError, KernelBuildError, NoOpenCLError
from tests.cli.test_cli import assert_one_error_line, run, spec_of

#: A bad option value for every command: (argv, the option argparse's error names).
BAD_VALUES = {
    "devices": (["devices", "--check=yes"], "--check"),
    "search": (["search", "in.png", "--patch-size", "eight"], "--patch-size"),
    "knn": (["knn", "in.png", "-o", "o.npz", "-k", "many"], "-k"),
    "nnf": (["nnf", "in.png", "in.png", "-o", "o.npz", "--seed", "-1"], "--seed"),
    "denoise": (["denoise", "in.png", "out.png", "--sigma", "twenty"], "--sigma"),
    "demo": (["demo", "--device", " "], "--device"),
    "explain": (["explain", "search", "--channels", "three"], "--channels"),
    "autotune": (["autotune", "--jobs", "0"], "--jobs"),
    "bench": (["bench", "--size", "10x10"], "--size"),
    "selftest": (["selftest", "--device", ""], "--device"),
    "warmup": (["warmup", "--channels", "0"], "--channels"),
}


def commands() -> list[str]:
    parser = cli.build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(action.choices)


@pytest.fixture
def no_device(monkeypatch):
    """Opening a device fails the test: a usage error comes before any work."""
    def refuse(*args, **kwargs):
        raise AssertionError("a device was opened before the command line was checked")

    monkeypatch.setattr(cli_common, "Runtime", refuse)


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "in.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (24, 24), np.uint8)).save(path)
    return path


def test_every_command_has_a_bad_value_case():
    assert sorted(BAD_VALUES) == commands()


@pytest.mark.parametrize("command", sorted(BAD_VALUES))
def test_a_bad_option_value_exits_2_naming_the_option(capsys, tmp_path, monkeypatch,
                                                      no_device, command):
    monkeypatch.chdir(tmp_path)
    argv, option = BAD_VALUES[command]
    code, out, err = run(capsys, *argv)
    assert code == EXIT_USAGE and out == "", err
    assert_one_error_line(err, "argument ", option)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv,fragment", [
    (["denoise", "{image}", "o.png", "--sigma", "20", "--scheduler", "tcp://x:1"],
     "--scheduler goes with --chunks"),
    (["denoise", "{image}", "o.png", "--sigma", "20", "--guide-role", "oracle"],
     "--guide-role goes with --guide"),
    (["denoise", "{image}", "o.png", "--sigma", "20", "--preset", "fast"],
     "--preset does not apply to --method nlmeans"),
    (["explain", "vbm3d", "--search", "ann"], "--search ann does not apply to vbm3d"),
    (["search", "{image}", "-o", "o.txt"], "ending in .npz"),
])
def test_conflicting_options_exit_2_before_any_work(capsys, tmp_path, monkeypatch, no_device,
                                                    image, argv, fragment):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *[a.format(image=image) for a in argv])
    assert code == EXIT_USAGE and out == "", err
    assert_one_error_line(err, fragment)


@pytest.mark.parametrize("argv", [
    ["search", "{missing}"],
    ["knn", "{missing}", "-o", "o.npz"],
    ["nnf", "{image}", "{missing}", "-o", "o.npz"],
    ["denoise", "{missing}", "o.png", "--sigma", "20"],
    ["denoise", "{missing}", "o.png", "--sigma", "20", "--method", "burst"],
    ["denoise", "{image}", "o.png", "--sigma", "20", "--clean", "{missing}"],
    ["denoise", "{image}", "o.png", "--sigma", "20", "--guide", "{missing}"],
])
def test_a_missing_input_exits_2_before_any_work(capsys, tmp_path, monkeypatch, no_device,
                                                 image, argv):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "missing.png"
    code, out, err = run(capsys, *[a.format(image=image, missing=missing) for a in argv])
    assert code == EXIT_USAGE and out == "", err
    assert_one_error_line(err, str(missing), "no such file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.png"]


def test_invalid_data_found_during_the_run_exits_1(capsys, tmp_path, runtime, monkeypatch):
    """A float video whose frame 1 holds NaN: found as the frames stream through the
    denoiser (here one that passes them on), after the checks."""
    frames = np.random.default_rng(1).random((3, 16, 16)).astype(np.float32) * 255
    frames[1, 4, 5] = np.nan
    np.save(tmp_path / "in.npy", frames)

    def passing(args, info, pairs, kwargs, runtime, queue, guide=({}, None)):
        for noisy, clean in pairs:
            queue.append((noisy, clean))
            yield noisy

    monkeypatch.setattr(cli_video, "_denoised", passing)
    out = tmp_path / "out.npy"
    code, _, err = run(capsys, "denoise", tmp_path / "in.npy", out, "--sigma", 20,
                       "--device", spec_of(runtime))
    assert code == EXIT_FAILURE
    assert_one_error_line(err, "frame 1 holds NaN or infinite values", f"{out} was not written")
    assert not out.exists()


def test_a_failure_inside_the_method_exits_1(capsys, tmp_path, runtime, monkeypatch, image):
    from clpatch.cli import denoise as cli_denoise

    def failing(image, sigma, *, runtime=None):
        raise KernelBuildError("the compiler said no")

    monkeypatch.setitem(cli_denoise._FUNCTIONS, "nlmeans", failing)
    code, _, err = run(capsys, "denoise", image, tmp_path / "o.png", "--sigma", 20,
                       "--device", spec_of(runtime))
    assert code == EXIT_FAILURE
    assert_one_error_line(err, "the compiler said no", "o.png was not written")


@pytest.mark.parametrize("raised,code", [
    (UsageError("refused"), EXIT_USAGE),
    (CommandError("failed"), EXIT_FAILURE),
    (CommandError("interrupted", code=INTERRUPTED_CODE), INTERRUPTED_CODE),
    (ValueError("found bad"), EXIT_FAILURE),
    (OSError("disk full"), EXIT_FAILURE),
    (ClpatchError("device failed"), EXIT_FAILURE),
    (KeyboardInterrupt(), INTERRUPTED_CODE),
])
def test_main_maps_what_a_command_raises(capsys, monkeypatch, raised, code):
    def command(args):
        raise raised

    monkeypatch.setattr(cli_search, "cmd_search", command)
    got, out, err = run(capsys, "search", "in.png")
    assert got == code and out == ""
    assert err.startswith("clpatch: ") and "Traceback" not in err


def test_usage_checks_sorts_refusals_from_failures():
    with pytest.raises(UsageError, match="no such file") as caught:
        with usage_checks():
            raise FileNotFoundError("x.png: no such file")
    assert caught.value.code == EXIT_USAGE
    failure = CommandError("failed")
    with pytest.raises(CommandError) as caught:
        with usage_checks():
            raise failure
    assert caught.value is failure and caught.value.code == EXIT_FAILURE
    with pytest.raises(UsageError, match="k must be"):
        with usage_checks(ARGUMENT_ERRORS):
            raise ValueError("k must be in [1, 32]")
    with pytest.raises(ClpatchError):  # a library call's failure stays a failure
        with usage_checks(ARGUMENT_ERRORS):
            raise ClpatchError("device failed")


def test_no_opencl_driver_is_a_failure_and_a_bad_device_a_usage_error(capsys, monkeypatch,
                                                                      image):
    def no_driver(*args, **kwargs):
        raise NoOpenCLError("no OpenCL platform")

    monkeypatch.setattr(cli_common, "Runtime", no_driver)
    code, _, err = run(capsys, "search", image)
    assert code == EXIT_FAILURE and err.startswith("clpatch: error: no OpenCL platform")
    monkeypatch.undo()
    code, out, err = run(capsys, "search", image, "--device", "no-such-device-anywhere")
    assert code == EXIT_USAGE and out == ""
    assert err.startswith("clpatch: error: cannot open --device 'no-such-device-anywhere'")


def test_the_convention_is_in_the_top_level_help(capsys):
    code, out, _ = run(capsys, "--help")
    words = " ".join(out.split())
    assert code == 0
    assert "Exit status, the same for every command: 0 done; 2 the command line was refused" \
        in words
    assert "1 the work failed" in words and "130 interrupted (Ctrl-C)" in words
