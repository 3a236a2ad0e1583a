"""Image files for the command line: reading one image for denoising or search, and writing
the result back in the same bit depth and mode.

- `read_image(path)` gives a single image for denoising: float32 values in the file's own
  units (0–255 for 8-bit files, 0–65535 for 16-bit ones, as they are for floating-point
  TIFF and `.npy`), shaped (H, W) or (H, W, 3), with the alpha channel split off into an
  `ImageInfo` that `write_image` uses to write the result back in the same bit depth and
  mode.
- `read_array(path)` gives the file's values unchanged (uint8 / uint16 / float, alpha kept
  as a channel, multi-frame files stacked as video) for `clpatch search`.

Written formats (WRITE_FORMATS): PNG, TIFF, JPEG (quality 95), WebP (lossless, 8-bit),
BMP (8-bit, no alpha) and `.npy`. Floating-point data (a float TIFF or `.npy` source) is
written as float32 to TIFF and `.npy`, as 8-bit to the other formats.

Files are decoded by `decode.decode_frames` (Pillow; `png`, and the optional `tifffile` for
16-bit colour and floating-point TIFF). Errors are `ImageFileError` (a ValueError:
unreadable or unsupported contents) or `FileNotFoundError`, with one-line messages that
start with the path.

`add_noise`, `psnr` (from `noise`), `decode_png`, `encode_png` (from `png`) and
`ImageFileError` (from `errors`) can also be imported from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .decode import CONVERSIONS, decode_file, decode_frames
from .errors import ImageFileError, first_line
from .noise import add_noise, psnr
from .optional import require_tifffile
from .outputs import TemporaryOutput
from .png import decode_png, encode_png

__all__ = [
    "JPEG_QUALITY", "MODES", "WEBP_MAX_SIDE", "WRITE_FORMATS", "ImageFileError", "ImageInfo",
    "add_noise", "bit_depth_of", "decode_png", "encode_png", "output_format", "psnr", "quantize",
    "read_array", "read_image", "write_image",
]

# Output formats, chosen by the file name's extension.
WRITE_FORMATS = {".png": "PNG", ".tif": "TIFF", ".tiff": "TIFF", ".jpg": "JPEG", ".jpeg": "JPEG",
                 ".webp": "WEBP", ".bmp": "BMP", ".npy": "NPY"}
EIGHT_BIT_FORMATS = {"JPEG": "JPEG", "WEBP": "WebP", "BMP": "BMP"}  # format -> its name
FLOAT_FORMATS = ("TIFF", "NPY")  # where floating-point data is written as float32
WEBP_MAX_SIDE = 16383  # the WebP format's largest width and height
MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}  # channels -> mode
LAYOUT_CHANNELS = {"L": 1, "LA": 1, "RGB": 3, "RGBA": 3}  # mode -> channels denoised
NPY_MODES = {1: "L", 2: "2-channel", 3: "RGB", 4: "4-channel"}  # a .npy array has no alpha
JPEG_QUALITY = 95


@dataclass(frozen=True)
class ImageInfo:
    """What `read_image` split off or learnt from a file, for writing a result back.

    bit_depth: 8 or 16, or None for floating-point data (a float TIFF, or a float or other
        non-uint8/uint16 `.npy` array), whose values are taken as they are (0–255 scale for
        the PSNR and for 8-bit outputs).
    mode: "L", "LA", "RGB" or "RGBA": the layout of the file (palette and CMYK images are
        read as RGB or RGBA, 1-bit images as L).
        Floating-point data (a `.npy` array, a float TIFF) has no alpha channel: its 2 or 4
        channels are all data ("2-channel", "4-channel" modes, written back to `.npy` or
        float TIFF only).
    alpha: the alpha channel as read (uint8 / uint16), else None.
    format: "PNG", "TIFF", "JPEG", "NPY", or the Pillow format name of other files ("WEBP",
        "BMP", ...).
    note: what was converted to read the file (a palette, 1-bit, CMYK image; float64 or
        integer data read as float32), for the command line to say; else None.
    """

    bit_depth: int | None
    mode: str
    alpha: np.ndarray | None = field(default=None, repr=False, compare=False)
    format: str = "PNG"
    note: str | None = field(default=None, compare=False)

    @property
    def peak(self) -> float:
        """The largest value of the file's range: 65535 for 16-bit files, else 255."""
        return 65535.0 if self.bit_depth == 16 else 255.0

    @property
    def colour(self) -> bool:
        return self.mode in ("RGB", "RGBA")

    @property
    def channels(self) -> int:
        """Channels of the image that is denoised (alpha apart)."""
        return LAYOUT_CHANNELS.get(self.mode) or int(self.mode.split("-")[0])

    def describe(self, fmt: str | None = None) -> str:
        """E.g. '8-bit RGBA PNG' or 'float32 L TIFF'; with `fmt`, what `write_image` writes in
        that format (float data goes to formats other than TIFF and NPY as 8-bit; WebP,
        which has no grayscale, stores L and LA as RGB and RGBA)."""
        fmt = fmt or self.format
        depth = (f"{self.bit_depth}-bit" if self.bit_depth else
                 "float32" if fmt in FLOAT_FORMATS else "8-bit")
        stored = {"L": "RGB", "LA": "RGBA"}.get(self.mode) if fmt == "WEBP" else None
        return f"{depth} {self.mode} {fmt}" + (f" (stored as {stored})" if stored else "")


# ---- reading -------------------------------------------------------------------------------

def read_image(path: str | Path) -> tuple[np.ndarray, ImageInfo]:
    """Read one image for denoising.

    Returns (image, info): `image` is float32 in the file's units (0–255 or 0–65535),
    (H, W) for grayscale and (H, W, 3) for colour; `info` holds the bit depth, the mode,
    the format and the untouched alpha channel (see `ImageInfo`). Multi-frame files and
    arrays of other shapes are refused with a ValueError.
    """
    path = Path(path)
    frames, fmt, note = decode_file(path)
    if len(frames) != 1:
        raise ImageFileError(f"{path}: has {len(frames)} frames; only single images can be read "
                             "here (clpatch denoise reads multi-frame files as video)")
    array = frames[0]
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in MODES):
        raise ImageFileError(f"{path}: shape {array.shape} is not an image "
                             "((H, W) or (H, W, C) with 1 to 4 channels)")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ImageFileError(f"{path}: the image is empty ({array.shape[0]}x{array.shape[1]})")
    channels = 1 if array.ndim == 2 else array.shape[2]
    bit_depth = bit_depth_of(path, array, fmt)
    # Float data (a float TIFF, like any .npy array) has no alpha: every channel is data.
    mode = (NPY_MODES if fmt == "NPY" or bit_depth is None else MODES)[channels]
    if bit_depth is None:
        if array.dtype != np.float32:
            note = f"{array.dtype} values read as float32 (and written back as float32)"
        array = array.astype(np.float32)
        if not np.all(np.isfinite(array)):
            raise ImageFileError(f"{path}: the {'array' if fmt == 'NPY' else 'image'} holds "
                                 "NaN or infinite values")
    if note == CONVERSIONS["P"] and mode == "RGB" and _grey(array):
        array, mode = array[:, :, 0], "L"
        note = "a palette image of grey levels: denoised as 8-bit L and written so"
    alpha = None
    if mode in ("LA", "RGBA"):
        alpha = array[:, :, -1].copy()
        array = array[:, :, 0] if mode == "LA" else array[:, :, :3]
    return (np.ascontiguousarray(array, dtype=np.float32),
            ImageInfo(bit_depth, mode, alpha, fmt, note))


def _grey(rgb: np.ndarray) -> bool:
    return bool(np.array_equal(rgb[:, :, 0], rgb[:, :, 1])
                and np.array_equal(rgb[:, :, 0], rgb[:, :, 2]))


def read_array(path: str | Path) -> tuple[np.ndarray, bool]:
    """Read an image file or `.npy` array keeping its values and dtype (for `clpatch search`).

    Grayscale as (H, W), colour as (H, W, C) with alpha kept as a channel (RGB, RGBA, LA;
    palette images are expanded), 16-bit images as uint16. Multi-frame files (TIFF stacks,
    animations) become video (T, H, W[, C]). `.npy` files are loaded as they are.
    Returns (array, is_video) where is_video is True only for multi-frame image files.
    """
    path = Path(path)
    frames, _ = decode_frames(path)
    if len(frames) == 1:
        return frames[0], False
    if len({(f.shape, f.dtype) for f in frames}) != 1:
        raise ImageFileError(f"{path}: its {len(frames)} frames differ in size or type; "
                             "save them as a (T, H, W[, C]) .npy array instead")
    return np.stack(frames), True


def bit_depth_of(path: Path, array: np.ndarray, fmt: str) -> int | None:
    """The bit depth of a native array read from a `fmt` file: 8 or 16, or None for
    floating-point TIFF and other `.npy` dtypes; ImageFileError for other dtypes of image
    formats."""
    if array.dtype == np.uint8:
        return 8
    if array.dtype == np.uint16:
        return 16
    if fmt == "NPY" or (fmt == "TIFF" and array.dtype.kind == "f"):
        return None
    if fmt == "PNG" and array.dtype == np.int32:  # 16-bit grayscale as Pillow mode "I"
        return 16
    raise ImageFileError(f"{path}: {array.dtype} {fmt} images are not supported "
                         "(only 8- and 16-bit, and floating-point TIFF; save other data as a "
                         ".npy array)")


# ---- writing -------------------------------------------------------------------------------

def output_format(path: str | Path, info: ImageInfo) -> str:
    """The format `write_image(path, ..., info)` would write; ValueError when the file name's
    extension is not one of WRITE_FORMATS, the format cannot hold the image's bit depth or
    alpha channel, or the optional package it needs (tifffile for float TIFF) is missing.
    Lets a command fail before it computes anything."""
    path = Path(path)
    fmt = WRITE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ImageFileError(f"{path}: cannot write '{path.suffix or 'no extension'}' files; "
                             "use .png, .tif/.tiff, .jpg/.jpeg, .webp, .bmp or .npy")
    name = EIGHT_BIT_FORMATS.get(fmt)
    if name and info.bit_depth == 16:
        raise ImageFileError(f"{path}: {name} cannot store 16-bit images; write .png or .tif "
                             "instead")
    if fmt == "JPEG" and info.alpha is not None:
        raise ImageFileError(f"{path}: JPEG cannot store an alpha channel; write .png or .tif instead")
    if fmt == "BMP" and info.alpha is not None:  # Pillow reads its 32-bit BMP back as RGB
        raise ImageFileError(f"{path}: BMP files as clpatch writes them keep no alpha channel; "
                             "write .png, .tif or .webp instead")
    float_data = info.bit_depth is None and fmt in FLOAT_FORMATS
    if fmt != "NPY" and info.mode not in LAYOUT_CHANNELS and not float_data:
        source = ".npy array" if info.format == "NPY" else f"{info.format} image"
        also = " or as float32 .tif" if info.bit_depth is None else ""
        raise ImageFileError(f"{path}: a {info.mode} {source} is written as .npy only{also} "
                             "(every channel is data; an image file would take the last one "
                             f"for alpha); write .npy{also and ' or .tif'}")
    if fmt == "TIFF" and info.bit_depth is None:
        require_tifffile(path, "writing a floating-point TIFF", "; or write .npy")
    return fmt


def quantize(array: np.ndarray, depth: int) -> np.ndarray:
    """Round and clip to the range of a `depth`-bit file (8: 0–255, 16: 0–65535), as
    uint8 or uint16."""
    dtype = np.uint16 if depth == 16 else np.uint8
    return np.clip(np.rint(array), 0, 2 ** depth - 1).astype(dtype)


def write_image(path: str | Path, array: np.ndarray, info: ImageInfo) -> None:
    """Write `array` ((H, W) or (H, W, C), in the units `read_image` gave) as `info` says.

    The format comes from the extension (see `output_format`). Values are rounded and
    clipped to the bit depth's range (0–255, 0–65535; floating-point data is written as
    float32 to TIFF (through tifffile) and `.npy`, as 8-bit to the other formats), and info's
    alpha channel is re-attached unchanged. JPEG is written at quality 95, WebP lossless
    (exact values, also under transparent pixels; grayscale stored as RGB, at most
    WEBP_MAX_SIDE pixels a side), BMP as 8-bit L or RGB. The file is written to a temporary
    beside `path` and renamed into place when complete (see `outputs.TemporaryOutput`): an
    existing file is replaced whole or, when the write fails, left untouched.
    """
    path = Path(path)
    fmt = output_format(path, info)
    array = np.asarray(array)
    c = info.channels
    if array.ndim != (2 if c == 1 else 3) or (c > 1 and array.shape[2] != c):
        raise ImageFileError(f"{path}: a {info.mode} image must be written from an array of "
                             f"shape {'(H, W)' if c == 1 else f'(H, W, {c})'}, "
                             f"got shape {array.shape}")
    if info.alpha is not None and info.alpha.shape != array.shape[:2]:
        raise ImageFileError(f"{path}: the alpha channel is {info.alpha.shape}, the image {array.shape[:2]}")
    if fmt == "WEBP" and max(array.shape[:2]) > WEBP_MAX_SIDE:
        raise ImageFileError(f"{path}: WebP images are at most {WEBP_MAX_SIDE} pixels a side, "
                             f"this one is {array.shape[1]}x{array.shape[0]}; write .png or .tif "
                             "instead")
    if not np.all(np.isfinite(array)):
        raise ImageFileError(f"{path}: the image to write holds NaN or infinite values")
    if fmt in FLOAT_FORMATS and info.bit_depth is None:
        data = array.astype(np.float32)
    else:
        data = quantize(array, info.bit_depth or 8)
    if info.alpha is not None:
        alpha = info.alpha
        if alpha.dtype != data.dtype:  # float alpha (nnf --reconstruct) to 8 bits, or not
            alpha = (alpha.astype(data.dtype) if data.dtype == np.float32 else
                     np.clip(np.rint(alpha), 0, 255).astype(data.dtype))
        data = np.concatenate([data.reshape(*data.shape[:2], -1), alpha[:, :, None]], axis=2)
    try:
        with TemporaryOutput(path) as output:  # never half-written, even when interrupted
            _write(output.temporary, fmt, data, info.mode)
    except OSError as exc:
        raise OSError(f"{path}: cannot write the image ({first_line(exc)})") from None


#: Pillow's options for each format it writes here.
SAVE_OPTIONS = {"JPEG": {"quality": JPEG_QUALITY}, "WEBP": {"lossless": True, "exact": True}}


def _write(path: Path, fmt: str, data: np.ndarray, mode: str) -> None:
    if fmt == "NPY":
        with open(path, "wb") as fh:
            np.save(fh, data, allow_pickle=False)
        return
    if data.dtype == np.float32:  # float TIFF (output_format allows no other format)
        write_tifffile(path, data, mode, "writing a floating-point TIFF")
        return
    if data.dtype == np.uint16 and data.ndim == 3:  # 16-bit colour: Pillow cannot write it
        if fmt == "PNG":
            path.write_bytes(encode_png(data))
            return
        write_tifffile(path, data, mode, "writing 16-bit colour TIFF", "; write .png instead")
        return

    from PIL import Image

    image = Image.fromarray(data)  # L, LA, RGB, RGBA or I;16
    image.save(path, format=fmt, **SAVE_OPTIONS.get(fmt, {}))


def write_tifffile(path: Path, data: np.ndarray, mode: str, what: str, hint: str = "") -> None:
    """Write one (H, W) or (H, W, C) page through tifffile: RGB(A) as RGB, other layouts as
    grayscale with extra samples, the alpha of LA and RGBA marked as (unassociated) alpha,
    the channels of a "2-channel" or "4-channel" array as unspecified data."""
    tifffile = require_tifffile(path, what, hint)
    channels = 1 if data.ndim == 2 else data.shape[2]
    rgb = mode in ("RGB", "RGBA")
    extra = channels - (3 if rgb else 1)
    kinds = (["unassalpha"] if mode in ("LA", "RGBA") else ["unspecified"] * extra) or None
    tifffile.imwrite(path, data, photometric="rgb" if rgb else "minisblack",
                     planarconfig="contig" if channels > 1 else None, extrasamples=kinds)
