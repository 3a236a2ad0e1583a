"""Where the kernel templates, device profiles and sample data live.

In an installed wheel `cl_src/` and `device_profiles/` sit inside the package
(`clpatch/cl_src`, `clpatch/device_profiles`); in a source checkout they sit
beside the package, at the top of the repository.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # the clpatch package folder


def _find(name: str) -> Path:
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"clpatch cannot find its '{name}' folder (looked in {_PACKAGE} and {_PACKAGE.parent}); "
        "the installation is incomplete — reinstall clpatch"
    )


@cache
def cl_src_dir() -> Path:
    """Folder of the Mako-templated OpenCL sources."""
    return _find("cl_src")


@cache
def profiles_dir() -> Path:
    """Folder of the per-family device profile files."""
    return _find("device_profiles")


def sample_image_path() -> Path:
    """The bundled sample photograph (512×512 grayscale 'camera')."""
    return _PACKAGE / "data" / "camera.png"
