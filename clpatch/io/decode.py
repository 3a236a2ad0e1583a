"""The frames of an image file as native arrays (uint8 / uint16, alpha kept), and its format.

PNG, TIFF, JPEG, WebP, BMP and anything else Pillow reads are decoded by Pillow, except
16-bit colour (gray+alpha, RGB, RGBA), which Pillow silently reduces to 8 bits, and
floating-point TIFF: such PNG files are decoded by `png.decode_png`, such TIFF files (and
TIFF layouts Pillow does not read) through the optional `tifffile` package (the `tiff`
extra), float TIFF keeping its float dtype. `.npy` files are loaded as they are. Shared by
the image reader (`images`) and the TIFF video reader.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ImageFileError, first_line
from .optional import require_tifffile
from .png import decode_png


def check_file(path: Path) -> None:
    """FileNotFoundError for a missing path, ImageFileError for one that is not a file."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if not path.is_file():
        raise ImageFileError(f"{path}: not a file")


#: What `frame_array` does to the Pillow modes it converts, said to the user.
CONVERSIONS = {
    "P": "a palette image: denoised as RGB (or RGBA with its transparency) and written so",
    "PA": "a palette image with alpha: denoised as RGBA and written so",
    "1": "a 1-bit image: denoised as 8-bit grey levels (0 and 255) and written as 8-bit",
    "La": "premultiplied alpha: un-premultiplied to LA",
    "RGBa": "premultiplied alpha: un-premultiplied to RGBA",
    "CMYK": "a CMYK image: denoised and written as RGB",
    "YCbCr": "a YCbCr image: denoised and written as RGB",
    "LAB": "a LAB image: denoised and written as RGB",
    "HSV": "an HSV image: denoised and written as RGB",
}


def decode_frames(path: Path) -> tuple[list[np.ndarray], str]:
    """The frames of a file as native arrays, and its format name."""
    frames, fmt, _ = decode_file(path)
    return frames, fmt


def decode_file(path: Path) -> tuple[list[np.ndarray], str, str | None]:
    """The frames of a file as native arrays, its format name, and what was converted to
    read it (`CONVERSIONS`; None when nothing was)."""
    check_file(path)
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise ImageFileError(f"{path}: not a readable .npy array ({first_line(exc)})") from None
        # The API's rule (and the video reader's): real numbers only. Complex data lost
        # its imaginary part here, with a NumPy warning, and the command went on.
        if array.dtype.kind not in "biuf":
            raise ImageFileError(f"{path}: {array.dtype} arrays are not supported (only real "
                                 "numbers)")
        return [array], "NPY", None

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            fmt = image.format or "unknown"
            note = CONVERSIONS.get(image.mode)
            elsewhere = needs_tifffile(image, path, fmt)
            if not elsewhere:
                frames = [frame_array(image, k) for k in range(getattr(image, "n_frames", 1))]
        if elsewhere:
            frames = _decode_elsewhere(path, fmt)
    except UnidentifiedImageError:
        if is_tiff(path):  # layouts Pillow does not know: float RGB, 16-bit gray + alpha...
            return _decode_elsewhere(path, "TIFF"), "TIFF", None
        raise ImageFileError(f"{path}: not an image file clpatch can read "
                             "(PNG, TIFF, JPEG, other formats Pillow reads, or .npy)") from None
    except Image.DecompressionBombError as exc:
        raise ImageFileError(f"{path}: {first_line(exc)}") from None
    except ImageFileError:
        raise
    except (OSError, ValueError, SyntaxError, struct.error, zlib.error) as exc:
        raise ImageFileError(f"{path}: cannot read the image ({first_line(exc)})") from None
    return frames, fmt, note


def frame_array(image: Any, index: int) -> np.ndarray:
    """Frame `index` of an open Pillow image as a native array: L, LA, RGB, RGBA or 16-bit
    grayscale (palette, premultiplied, 1-bit and other colour spaces converted)."""
    image.seek(index)
    mode = image.mode
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif mode in ("PA", "La", "RGBa"):
        image = image.convert("RGBA" if mode != "La" else "LA")
    elif mode == "1":
        image = image.convert("L")
    elif mode in ("CMYK", "YCbCr", "LAB", "HSV", "RGBX"):
        image = image.convert("RGB")
    array = np.asarray(image)
    if array.dtype.byteorder not in ("=", "|"):  # e.g. big-endian 16-bit TIFF
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def pillow_frames(path: Path) -> int:
    """The number of frames Pillow finds in an image file (1 for single images); 0 when
    Pillow cannot open it."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return int(getattr(image, "n_frames", 1))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return 0


def needs_tifffile(image: Any, path: Path, fmt: str) -> bool:
    """Whether an open Pillow image is read by clpatch itself or tifffile instead: 16-bit
    colour (`is_16bit_colour`) or floating-point TIFF (`is_float_tiff`)."""
    return is_16bit_colour(image, path, fmt) or is_float_tiff(image, fmt)


def is_float_tiff(image: Any, fmt: str) -> bool:
    """Whether a TIFF's samples are floating point (SampleFormat 3). Pillow reads only
    float32 grayscale (mode F), and tifffile every float layout: all go through tifffile."""
    if fmt != "TIFF":
        return False
    kinds = image.tag_v2.get(339, (1,))
    return 3 in (kinds if isinstance(kinds, tuple) else (kinds,))


def is_16bit_colour(image: Any, path: Path, fmt: str) -> bool:
    """Whether Pillow would reduce this file's 16-bit colour samples to 8 bits."""
    if image.mode not in ("LA", "RGB", "RGBA"):
        return False
    if fmt == "PNG":
        with open(path, "rb") as fh:
            head = fh.read(26)
        return len(head) == 26 and head[12:16] == b"IHDR" and head[24] == 16
    if fmt == "TIFF":
        bits = image.tag_v2.get(258, (8,))
        bits = bits if isinstance(bits, tuple) else (bits,)
        return max(bits) > 8
    return False


def is_tiff(path: Path) -> bool:
    """Whether the file starts like a TIFF (or BigTIFF) file."""
    with open(path, "rb") as fh:
        return fh.read(4) in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")


def tifffile_page_array(page: Any) -> np.ndarray:
    """A tifffile page as a native (H, W) or (H, W, C) array (planar pages made contiguous)."""
    array = page.asarray()
    if array.ndim == 3 and page.axes.startswith("S"):  # planar: (C, H, W)
        array = np.moveaxis(array, 0, -1)
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("="))


#: What needs tifffile among TIFF files, for the message when it is missing.
TIFFFILE_LAYOUTS = ("this TIFF file (floating-point, 16-bit colour, or another layout Pillow "
                    "does not read)")


def _decode_elsewhere(path: Path, fmt: str) -> list[np.ndarray]:
    """The frames of a 16-bit colour PNG (decoded here) or TIFF (through tifffile)."""
    if fmt == "PNG":
        return [decode_png(path.read_bytes(), str(path))]
    tifffile = require_tifffile(path, TIFFFILE_LAYOUTS)
    frames = []
    try:
        with tifffile.TiffFile(path) as tif:
            for page in tif.pages:
                frames.append(tifffile_page_array(page))
    except (tifffile.TiffFileError, ValueError, OSError) as exc:
        raise ImageFileError(f"{path}: cannot read the TIFF file ({first_line(exc)})") from None
    return frames
