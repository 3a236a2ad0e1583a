"""The scripts in examples/ run from their command line (slow: CLPATCH_SLOW=1)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.helpers import load_image

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str):
    """An example script as a module (examples/ is no package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_texture_synthesis_writes_the_requested_size(tmp_path, capsys):
    example = load_example("texture_synthesis")
    sample = tmp_path / "sample.png"
    Image.fromarray(load_image("brick", np.uint8)[100:124, 200:224]).save(sample)
    out = tmp_path / "grown.png"
    written = example.main([str(sample), "--out", str(out), "--size", "40", "36",
                            "--patch", "5", "-k", "4", "--passes", "1", "--seed", "3"])
    assert written == out and out.is_file()
    with Image.open(out) as image:
        assert image.size == (36, 40) and image.mode == "L"
        pixels = np.asarray(image)
    assert pixels.std() > 1  # a texture, not a flat fill
    assert "grown.png" in capsys.readouterr().out


def test_gallery_writes_three_small_pictures(tmp_path, capsys):
    example = load_example("gallery")
    written = example.main(["--quick", "--out", str(tmp_path)])
    assert [path.name for path in written] == ["denoise.png", "nnf.png", "autotune.png"]
    printed = capsys.readouterr().out
    for path in written:
        assert path.parent == tmp_path and path.stat().st_size < 300_000
        assert path.name in printed
        with Image.open(path) as image:
            image.load()
            width, height = image.size
        assert 300 <= width <= 2000 and 150 <= height <= 1000, (path.name, image.size)


def test_pipeline_on_one_queue_gives_the_round_trips_result(runtime, capsys):
    """examples/pipeline.py: the frames through its kernels and make_plan("bm3d") on one
    queue equal the NumPy round trips (it exits with an error when they differ)."""
    example = load_example("pipeline")
    result = example.main(["--size", "40", "56", "--frames", "2", "--repeats", "1"],
                          device=runtime.device)
    assert result["same"] and result["busy_ms"] > 0
    assert "outputs equal: True" in capsys.readouterr().out
