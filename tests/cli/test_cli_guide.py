"""`clpatch denoise --guide`: the guide image or video reaches the filters as `guide=`, with
--guide-role (bm3d, vbm3d) and --guide-sigma (nlmeans), and bad combinations are refused
before any work."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import clpatch
from tests.cli.test_cli import assert_one_error_line, run, spec_of
from tests.cli.test_cli_denoise import assert_same_output, crop, noisy


@pytest.fixture
def pair(tmp_path):
    """(noisy path, clean path, noisy uint8, clean uint8): a 40x50 camera crop."""
    clean = crop("camera")
    dirty = noisy(clean, 20)
    Image.fromarray(clean).save(tmp_path / "clean.png")
    Image.fromarray(dirty).save(tmp_path / "noisy.png")
    return tmp_path / "noisy.png", tmp_path / "clean.png", dirty, clean


@pytest.mark.parametrize("method,options,kwargs", [
    ("nlmeans", ["--guide-sigma", "0", "-w", "11", "-n", "8"],
     dict(guide_sigma=0.0, window=11, k=8)),
    ("bm3d", ["--guide-role", "oracle"], dict(guide_role="oracle", data_range=255.0)),
    ("bm3d", [], dict(data_range=255.0)),
])
def test_image_guide_reaches_the_filter(capsys, tmp_path, runtime, pair, method, options,
                                        kwargs):
    src, guide, dirty, clean = pair
    out = tmp_path / "out.png"
    code, text, err = run(capsys, "denoise", src, out, "-m", method, "--sigma", 20, "--guide",
                          guide, *options, "--device", spec_of(runtime))
    assert code == 0, err
    assert "guide:      clean.png" in text
    function = clpatch.nlmeans if method == "nlmeans" else clpatch.bm3d
    expected = function(dirty.astype(np.float32), 20, guide=clean.astype(np.float32),
                        runtime=runtime, **kwargs)
    unguided = function(dirty.astype(np.float32), 20, runtime=runtime,
                        **{k: v for k, v in kwargs.items() if not k.startswith("guide")})
    assert not np.array_equal(np.rint(expected), np.rint(unguided))
    with Image.open(out) as written:
        assert_same_output(np.asarray(written), np.clip(np.rint(expected), 0, 255))


def test_video_guide_is_streamed_in_step(capsys, tmp_path, runtime, pair):
    _, _, dirty, clean = pair
    frames = np.stack([dirty, np.flipud(dirty), dirty]).astype(np.float32)
    guide = np.stack([clean, np.flipud(clean), clean]).astype(np.float32)
    np.save(tmp_path / "v.npy", frames)
    np.save(tmp_path / "g.npy", guide)
    code, text, err = run(capsys, "denoise", tmp_path / "v.npy", tmp_path / "o.npy", "-m",
                          "bm3d", "--sigma", 20, "--guide", tmp_path / "g.npy", "--guide-role",
                          "oracle", "--device", spec_of(runtime))
    assert code == 0, err
    assert "role oracle" in text
    expected = np.stack([clpatch.bm3d(f, 20, guide=g, guide_role="oracle", runtime=runtime)
                         for f, g in zip(frames, guide, strict=True)])
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), expected, atol=1e-3)
    np.save(tmp_path / "short.npy", guide[:2])
    code, _, err = run(capsys, "denoise", tmp_path / "v.npy", tmp_path / "o2.npy", "-m", "bm3d",
                       "--sigma", 20, "--guide", tmp_path / "short.npy")
    assert code == 2
    assert_one_error_line(err, "the guide", "is 2 frames of 40x50", "must match")


def test_bad_guide_options_fail_before_any_work(capsys, tmp_path, pair):
    src, guide, _, _ = pair
    out = tmp_path / "out.png"
    deep = tmp_path / "deep.png"
    Image.fromarray(np.zeros((40, 50), np.uint16) + 300).save(deep)
    Image.fromarray(np.zeros((40, 51), np.uint8)).save(tmp_path / "wide.png")
    cases = [
        (["--guide-role", "oracle"], "--guide-role goes with --guide"),
        (["--guide-sigma", "1"], "--guide-sigma goes with --guide"),
        (["--guide", guide, "--guide-role", "match"], "--guide-role applies to --method bm3d"),
        (["-m", "bm3d", "--guide", guide, "--guide-sigma", "1"],
         "--guide-sigma applies to --method nlmeans"),
        (["--guide", tmp_path / "wide.png"], "is 40x51, the input 40x50"),
        (["--guide", deep], "is 16-bit, the input 8-bit"),
        (["--guide", guide, "--chunks", "16"], "--guide does not go with --chunks"),
    ]
    for options, fragment in cases:
        code, text, err = run(capsys, "denoise", src, out, "--sigma", 20, *options)
        assert code == 2 and text == "", options
        assert fragment in err, (options, err)
    assert not out.exists()
    # the guide is an input: never written over, even with --overwrite
    before = guide.read_bytes()
    code, _, err = run(capsys, "denoise", src, guide, "--sigma", 20, "--guide", guide,
                       "--overwrite")
    assert code == 2 and "is the input" in err and guide.read_bytes() == before


def test_option_spellings_of_the_vocabulary_table(capsys, tmp_path, runtime):
    """--n and -n, --temporal-window and --temporal-radius are the same options (README's
    parameter table)."""
    from clpatch.cli.main import build_parser

    parser = build_parser()
    a = parser.parse_args(["denoise", "a.png", "b.png", "--n", "4", "--temporal-window", "2"])
    b = parser.parse_args(["denoise", "a.png", "b.png", "-n", "4", "--temporal-radius", "2"])
    assert (a.k, a.temporal_radius) == (b.k, b.temporal_radius) == (4, 2)
    c = parser.parse_args(["search", "a.png", "--n", "3", "--temporal-radius", "1"])
    assert (c.k, c.temporal_window) == (3, 1)
    d = parser.parse_args(["denoise", "a.png", "b.png", "-m", "burst", "-k", "8"])
    assert d.k == 8
