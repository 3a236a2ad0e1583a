"""Every ```python block of docs/*.md runs (each page's blocks in order, in one namespace),
on each test device (CLPATCH_DEVICE), in a temporary folder. The blocks are snippets: they
use the names a reader has already (an image, a noisy copy, a video, ...), which PRELUDE
defines on small data; a block preceded by a `<!-- schematic ... -->` comment shows a
shape, not a program, and is skipped. The README's first example and the pipeline example
are checked in more detail by tests/test_readme.py."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import clpatch
from tests.test_readme import use_test_device

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"(<!-- schematic[^>]*-->\s*)?```python\n(.*?)```", flags=re.S)

PRELUDE = '''
import threading
import numpy as np
import clpatch
from PIL import Image
rng = np.random.default_rng(0)
image = np.asarray(Image.open("photo.png"))                       # 64x64 uint8
noisy = image.astype(np.float32) + rng.normal(0, 20, image.shape).astype(np.float32)
rgb = np.stack([noisy, noisy[::-1], noisy[:, ::-1]], axis=-1)
frames = np.stack([np.roll(noisy, 2 * t, axis=1)[8:56, 8:56] for t in range(4)])
pre_frames = frames.copy()
H, W = frames.shape[1:]
query = image
a, b = noisy[:40, :40], noisy[6:46, 4:44]
previous, frame = noisy[:48, :48], noisy[3:51, 2:50]


class Writer:
    def __init__(self):
        self.frames = []

    def write(self, f):
        self.frames.append(f)


reader, writer = list(frames), Writer()
'''


def pages() -> list[Path]:
    return [p for p in sorted(DOCS.glob("*.md")) if BLOCK.search(p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_docs_blocks_run(page, runtime, monkeypatch, tmp_path, capsys):
    use_test_device(runtime, monkeypatch)
    monkeypatch.chdir(tmp_path)
    camera = Path(clpatch.__file__).parent / "data" / "camera.png"
    Image.fromarray(np.asarray(Image.open(camera))[:64, :64]).save(tmp_path / "photo.png")
    scope: dict = {"__name__": "docs"}
    exec(compile(PRELUDE, "docs prelude", "exec"), scope)
    if page.name == "dask.md":
        pytest.importorskip("dask")
        pytest.importorskip("zarr")
        import zarr

        zarr.save_array(str(tmp_path / "scan.zarr"), scope["noisy"])
    ran = 0
    for marker, block in BLOCK.findall(page.read_text(encoding="utf-8")):
        if marker:
            continue
        exec(compile(block, f"docs/{page.name}", "exec"), scope)
        ran += 1
    assert ran, f"docs/{page.name}: no block ran"
