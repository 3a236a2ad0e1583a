"""The optional packages behind some files: tifffile (floating-point, 16-bit colour and
unusual TIFF files; the `tiff` extra) and imageio with its ffmpeg plugin (video files; the
`video` extra), imported when needed, with errors that say how to install them."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from .errors import ImageFileError

VIDEO_EXTRA_HINT = 'install the video extra: pip install "clpatch[video]"'
TIFF_EXTRA_HINT = 'install the tiff extra: pip install "clpatch[tiff]"'


def require_tifffile(path: Path, what: str, hint: str = "") -> ModuleType:
    """The tifffile module; else an ImageFileError '{path}: {what} needs the optional tifffile
    package; install the tiff extra: pip install "clpatch[tiff]"{hint}'."""
    try:
        import tifffile
    except ImportError:
        raise ImageFileError(f"{path}: {what} needs the optional tifffile package; "
                             f"{TIFF_EXTRA_HINT}{hint}") from None
    return tifffile


def require_imageio_ffmpeg(path: Path) -> ModuleType:
    """imageio's v2 API, when imageio and its ffmpeg plugin are installed."""
    try:
        import imageio.v2 as iio
        import imageio_ffmpeg  # noqa: F401  (the plugin's ffmpeg binary)
    except ImportError:
        raise ImageFileError(f"{path}: reading and writing video files needs imageio and "
                             f"imageio-ffmpeg; {VIDEO_EXTRA_HINT}") from None
    return iio
