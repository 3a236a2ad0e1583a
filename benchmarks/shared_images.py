"""The benchmark scripts' image loader: every PNG of a folder (the shared images), by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
#: Where the images are looked for: the shared data set, else the tests' own images.
DEFAULT_FOLDERS = [ROOT.parent / "shared" / "data" / "images", ROOT / "tests" / "data"]


def load_images(folder: Path, only: list[str] | None = None,
                dtype: type = np.float32) -> list[tuple[str, np.ndarray]]:
    """(name, image) for every PNG of `folder` in name order (only those named in `only`,
    when given): (H, W) for grey-level files, (H, W, 3) RGB otherwise (alpha dropped)."""
    out = []
    for path in sorted(folder.glob("*.png")):
        if only and path.stem not in only:
            continue
        with Image.open(path) as im:
            mode = "L" if im.mode in ("1", "L", "LA") else "RGB"
            out.append((path.stem, np.asarray(im.convert(mode), dtype)))
    return out
