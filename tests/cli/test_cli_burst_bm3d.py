"""`clpatch denoise IN OUT --method burst --burst-method bm3d`: the burst's filter picked on
the command line (`clpatch.cli.burst.add_burst_arguments`), compared with the burst oracles
(tests/reference/burst.py) on the ANN oracle's matches (`tests.cli.test_cli_burst.expected`).
Bursts: 4 frames of 40x48 (tests/cli/test_cli_burst.py's), saved as 8-bit PNG files in
tmp_path.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from clpatch.cli.burst import add_burst_arguments, burst_line, burst_options
from clpatch.cli.common import CommandError
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.cli.test_cli_burst import SIGMA, burst, expected, read, save_frames
from tests.cli.test_cli_denoise import assert_same_output


def test_burst_method_bm3d_matches_the_oracle(capsys, tmp_path, runtime):
    frames = burst()
    src = save_frames(tmp_path / "burst", frames)
    dst = tmp_path / "out.png"
    code, out, err = run(capsys, "denoise", src, dst, "--method", "burst", "--burst-method",
                         "bm3d", "--sigma", SIGMA, "--reference", 1, "--k", 8,
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert ("burst, sigma 20, bm3d (hard thresholding, then Wiener) on the clustering ANN's "
            "candidates from every frame, reference frame 1, tile 15, k 8, patch 8, step 3"
            in out), out
    assert ", h " not in out
    written = read(dst)
    assert written.dtype == np.uint8 and written.shape == frames.shape[1:]
    assert_same_output(written, expected(frames, runtime, method="bm3d", reference=1, k=8))
    # --burst-method nlmeans is the default's computation.
    nlm = tmp_path / "nlm.png"
    code, out, err = run(capsys, "denoise", src, nlm, "-m", "burst", "--burst-method",
                         "nlmeans", "--sigma", SIGMA, "--device", spec_of(runtime))
    assert code == 0, err
    assert "nlmeans on the clustering ANN's candidates" in out and "patch 12, step 2" in out
    assert_same_output(read(nlm), expected(frames, runtime))


def test_burst_method_bm3d_with_options(capsys, tmp_path, runtime):
    frames = burst()
    src = save_frames(tmp_path / "burst", frames)
    dst = tmp_path / "out.png"
    code, out, err = run(capsys, "denoise", src, dst, "-m", "burst", "--burst-method", "bm3d",
                         "--sigma", SIGMA, "--tile", 10, "--k", 4, "--step", 2,
                         "--device", spec_of(runtime))
    assert code == 0, err
    assert "reference frame 0, tile 10, k 4, patch 8, step 2" in out
    assert_same_output(read(dst), expected(frames, runtime, method="bm3d", tile=10, k=4,
                                           step=2))


def test_burst_method_usage_errors(capsys, tmp_path, runtime):
    spec = spec_of(runtime)
    frames = burst()
    src = save_frames(tmp_path / "burst", frames)
    out = tmp_path / "o.png"

    def error(*argv, code: int = 2) -> str:
        got, _, err = run(capsys, "denoise", *argv, "--device", spec)
        assert got == code, err
        assert not out.exists()
        return err

    bm3d_args = ("-m", "burst", "--burst-method", "bm3d", "--sigma", SIGMA)
    assert_one_error_line(error(src, out, *bm3d_args, "--h", 10), "--h",
                          "does not apply to --burst-method bm3d")
    assert_one_error_line(error(src, out, *bm3d_args, "--k", 12), "k must be a power of 2",
                          "got 12")
    assert_one_error_line(error(src / "frame0.png", out, "--sigma", SIGMA, "--burst-method",
                                "bm3d"), "--burst-method applies to --method burst only")
    assert_one_error_line(error(src, out, "-m", "burst", "--burst-method", "bm4d", "--sigma",
                                SIGMA), "--burst-method", "bm4d")


def test_burst_options_and_line_without_the_command():
    """burst_options and burst_line on a namespace, as `denoise` hands them over."""
    parser = argparse.ArgumentParser()
    add_burst_arguments(parser)
    assert parser.parse_args([]).burst_method is None
    assert parser.parse_args(["--burst-method", "bm3d"]).burst_method == "bm3d"
    with pytest.raises(SystemExit):
        parser.parse_args(["--burst-method", "vbm3d"])
    args = argparse.Namespace(burst_method="bm3d", k=8, h=None)
    kwargs = burst_options(args)
    assert kwargs == {"method": "bm3d", "k": 8}
    line = burst_line(12.0, kwargs)
    assert line.startswith("burst, sigma 12, bm3d (hard thresholding, then Wiener)")
    assert line.endswith("reference frame 0, tile 15, k 8, patch 8, step 3")
    assert burst_options(argparse.Namespace(burst_method=None)) == {}
    assert burst_line(12.0, {}).endswith("patch 12, step 2, h auto")
    with pytest.raises(CommandError, match="--h is NL-means"):
        burst_options(argparse.Namespace(burst_method="bm3d", h=5.0))
