"""Image files for the command line: reading, writing, noise and PSNR.

Two readers share one decoder:

- `read_image(path)` gives a single image for denoising: float32 values in the file's own
  units (0–255 for 8-bit files, 0–65535 for 16-bit ones), shaped (H, W) or (H, W, 3), with
  the alpha channel split off into an `ImageInfo` that `write_image` uses to write the
  result back in the same bit depth and mode.
- `read_array(path)` gives the file's values unchanged (uint8 / uint16, alpha kept as a
  channel, multi-frame files stacked as video) for `clpatch search`.

PNG, TIFF, JPEG and anything else Pillow reads are decoded by Pillow, except 16-bit colour
(gray+alpha, RGB, RGBA), which Pillow silently reduces to 8 bits: such PNG files are
decoded here (NumPy and zlib; non-interlaced files only) and such TIFF files through the
optional `tifffile` package. `.npy` files are loaded as they are. Errors are `ImageFileError`
(a ValueError: unreadable or unsupported contents) or `FileNotFoundError`, with one-line
messages that start with the path.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# Output formats, chosen by the file name's extension.
WRITE_FORMATS = {".png": "PNG", ".tif": "TIFF", ".tiff": "TIFF", ".jpg": "JPEG", ".jpeg": "JPEG",
                 ".npy": "NPY"}
MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}  # channels -> mode
JPEG_QUALITY = 95

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # PNG colour type -> channels (palette excluded)
_PNG_COLOUR_TYPES = {channels: kind for kind, channels in _PNG_CHANNELS.items()}


class ImageFileError(ValueError):
    """A file that cannot be read or written as an image; the message starts with its path."""


@dataclass(frozen=True)
class ImageInfo:
    """What `read_image` split off or learnt from a file, for writing a result back.

    bit_depth: 8 or 16, or None for a floating-point (or other non-uint8/uint16) `.npy`
        array, whose values are taken to be on the 0–255 scale.
    mode: "L", "LA", "RGB" or "RGBA": the layout of the file (palette and CMYK images are
        read as RGB or RGBA, 1-bit images as L).
    alpha: the alpha channel as read (uint8 / uint16, or float32 for `.npy`), else None.
    format: "PNG", "TIFF", "JPEG", "NPY", or the Pillow format name of other files.
    """

    bit_depth: int | None
    mode: str
    alpha: np.ndarray | None = field(default=None, repr=False, compare=False)
    format: str = "PNG"

    @property
    def peak(self) -> float:
        """The largest value of the file's range: 65535 for 16-bit files, else 255."""
        return 65535.0 if self.bit_depth == 16 else 255.0

    @property
    def colour(self) -> bool:
        return self.mode in ("RGB", "RGBA")

    def describe(self, fmt: str | None = None) -> str:
        """E.g. '8-bit RGBA PNG' or 'float32 L NPY'; with `fmt`, what `write_image` writes in
        that format (float data goes to image formats as 8-bit)."""
        fmt = fmt or self.format
        depth = (f"{self.bit_depth}-bit" if self.bit_depth else
                 "float32" if fmt == "NPY" else "8-bit")
        return f"{depth} {self.mode} {fmt}"


# ---- reading -------------------------------------------------------------------------------

def read_image(path: str | Path) -> tuple[np.ndarray, ImageInfo]:
    """Read one image for denoising.

    Returns (image, info): `image` is float32 in the file's units (0–255 or 0–65535),
    (H, W) for grayscale and (H, W, 3) for colour; `info` holds the bit depth, the mode,
    the format and the untouched alpha channel (see `ImageInfo`). Multi-frame files and
    arrays of other shapes are refused with a ValueError.
    """
    path = Path(path)
    frames, fmt = _decode(path)
    if len(frames) != 1:
        raise ImageFileError(f"{path}: has {len(frames)} frames; only single images can be read here")
    array = frames[0]
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in MODES):
        raise ImageFileError(f"{path}: shape {array.shape} is not an image "
                         "((H, W) or (H, W, C) with 1 to 4 channels)")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ImageFileError(f"{path}: the image is empty ({array.shape[0]}x{array.shape[1]})")
    channels = 1 if array.ndim == 2 else array.shape[2]
    mode = MODES[channels]
    bit_depth = _bit_depth(path, array, fmt)
    if bit_depth is None:
        array = array.astype(np.float32)
        if not np.all(np.isfinite(array)):
            raise ImageFileError(f"{path}: the array holds NaN or infinite values")
    alpha = None
    if mode in ("LA", "RGBA"):
        alpha = array[:, :, -1].copy()
        array = array[:, :, 0] if mode == "LA" else array[:, :, :3]
    return np.ascontiguousarray(array, dtype=np.float32), ImageInfo(bit_depth, mode, alpha, fmt)


def read_array(path: str | Path) -> tuple[np.ndarray, bool]:
    """Read an image file or `.npy` array keeping its values and dtype (for `clpatch search`).

    Grayscale as (H, W), colour as (H, W, C) with alpha kept as a channel (RGB, RGBA, LA;
    palette images are expanded), 16-bit images as uint16. Multi-frame files (TIFF stacks,
    animations) become video (T, H, W[, C]). `.npy` files are loaded as they are.
    Returns (array, is_video) where is_video is True only for multi-frame image files.
    """
    path = Path(path)
    frames, _ = _decode(path)
    if len(frames) == 1:
        return frames[0], False
    if len({(f.shape, f.dtype) for f in frames}) != 1:
        raise ImageFileError(f"{path}: its {len(frames)} frames differ in size or type; "
                         "save them as a (T, H, W[, C]) .npy array instead")
    return np.stack(frames), True


def _bit_depth(path: Path, array: np.ndarray, fmt: str) -> int | None:
    if array.dtype == np.uint8:
        return 8
    if array.dtype == np.uint16:
        return 16
    if fmt == "NPY":
        return None
    if fmt == "PNG" and array.dtype == np.int32:  # 16-bit grayscale as Pillow mode "I"
        return 16
    raise ImageFileError(f"{path}: {array.dtype} {fmt} images are not supported "
                     "(only 8- and 16-bit; save other data as a .npy array)")


def _check_file(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if not path.is_file():
        raise ImageFileError(f"{path}: not a file")


def _decode(path: Path) -> tuple[list[np.ndarray], str]:
    """The frames of a file as native arrays, and its format name."""
    _check_file(path)
    if path.suffix.lower() == ".npy":
        try:
            return [np.load(path, allow_pickle=False)], "NPY"
        except (OSError, ValueError, EOFError) as exc:
            raise ImageFileError(f"{path}: not a readable .npy array ({_first_line(exc)})") from None

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            fmt = image.format or "unknown"
            deep_colour = _is_16bit_colour(image, path, fmt)
            if not deep_colour:
                frames = [_frame_array(image, k) for k in range(getattr(image, "n_frames", 1))]
        if deep_colour:
            frames = _decode_16bit_colour(path, fmt)
    except UnidentifiedImageError:
        if _is_tiff(path):  # layouts Pillow does not know, e.g. 16-bit gray + alpha
            return _decode_16bit_colour(path, "TIFF"), "TIFF"
        raise ImageFileError(f"{path}: not an image file clpatch can read "
                         "(PNG, TIFF, JPEG, other formats Pillow reads, or .npy)") from None
    except Image.DecompressionBombError as exc:
        raise ImageFileError(f"{path}: {_first_line(exc)}") from None
    except ImageFileError:
        raise
    except (OSError, ValueError, SyntaxError, struct.error, zlib.error) as exc:
        raise ImageFileError(f"{path}: cannot read the image ({_first_line(exc)})") from None
    return frames, fmt


def _frame_array(image: Any, index: int) -> np.ndarray:
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


def _is_16bit_colour(image: Any, path: Path, fmt: str) -> bool:
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


def _is_tiff(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")


def _decode_16bit_colour(path: Path, fmt: str) -> list[np.ndarray]:
    """The frames of a 16-bit colour PNG (decoded here) or TIFF (through tifffile)."""
    if fmt == "PNG":
        return [decode_png(path.read_bytes(), str(path))]
    try:
        import tifffile
    except ImportError:
        raise ImageFileError(f"{path}: this TIFF file (16-bit colour, or a layout Pillow does not "
                             "read) needs the optional tifffile package (pip install tifffile)"
                             ) from None
    frames = []
    try:
        with tifffile.TiffFile(path) as tif:
            for page in tif.pages:
                array = page.asarray()
                if array.ndim == 3 and page.axes.startswith("S"):  # planar: (C, H, W)
                    array = np.moveaxis(array, 0, -1)
                frames.append(np.ascontiguousarray(array).astype(array.dtype.newbyteorder("=")))
    except (tifffile.TiffFileError, ValueError, OSError) as exc:
        raise ImageFileError(f"{path}: cannot read the TIFF file ({_first_line(exc)})") from None
    return frames


def decode_png(data: bytes, name: str = "PNG data") -> np.ndarray:
    """Decode a non-interlaced 8- or 16-bit grayscale, gray+alpha, RGB or RGBA PNG.

    Pillow decodes everything but 16-bit colour, so this is only used for that; it is
    written for any of these layouts so that it can be checked against Pillow. Returns
    (H, W) or (H, W, C), uint8 or uint16. Raises ValueError for other PNG files.
    """
    if not data.startswith(_PNG_SIGNATURE):
        raise ImageFileError(f"{name}: not a PNG file")
    pos, header, idat = len(_PNG_SIGNATURE), None, []
    while True:
        if pos + 8 > len(data):
            raise ImageFileError(f"{name}: truncated PNG file (no IEND chunk)")
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc = data[pos + 8 + length:pos + 12 + length]
        if len(body) != length or len(crc) != 4:
            raise ImageFileError(f"{name}: truncated PNG file (in a {kind!r} chunk)")
        if zlib.crc32(kind + body) != struct.unpack(">I", crc)[0]:
            raise ImageFileError(f"{name}: corrupt PNG file (bad checksum in a {kind!r} chunk)")
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise ImageFileError(f"{name}: PNG file without a header")
    width, height, depth, colour_type, _, _, interlace = header
    if colour_type not in _PNG_CHANNELS or depth not in (8, 16):
        raise ImageFileError(f"{name}: PNG colour type {colour_type} at {depth} bits is not supported")
    if interlace:
        raise ImageFileError(f"{name}: interlaced {depth}-bit PNG files are not supported; "
                         "save it without interlacing")
    channels = _PNG_CHANNELS[colour_type]
    bpp = channels * depth // 8
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as exc:
        raise ImageFileError(f"{name}: corrupt PNG image data ({exc})") from None
    if len(raw) < height * (1 + width * bpp):
        raise ImageFileError(f"{name}: truncated PNG image data")
    rows = np.frombuffer(raw, np.uint8, height * (1 + width * bpp)).reshape(height, 1 + width * bpp)
    filters = rows[:, 0]
    if np.any(filters > 4):
        raise ImageFileError(f"{name}: corrupt PNG image data (filter type {int(filters.max())})")
    pixels = _unfilter(rows[:, 1:].reshape(height, width, bpp), filters)
    if depth == 16:
        pixels = pixels.view(">u2").astype(np.uint16)
    return pixels.reshape(height, width, channels) if channels > 1 else pixels.reshape(height, width)


def _unfilter(filtered: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """Undo PNG's per-row filters: (H, W, bpp) filtered bytes -> (H, W, bpp) bytes.

    Pixel (y, x) depends on its left, upper and upper-left neighbours, so all pixels of one
    anti-diagonal y + x = t are independent: the loop runs over the H + W - 1 diagonals and
    handles every filter type of the diagonal's rows at once.
    """
    height, width, bpp = filtered.shape
    out = np.zeros((height + 1, width + 1, bpp), np.int16)  # zero row above, zero column left
    kinds = filters.astype(np.int16)
    for t in range(height + width - 1):
        y = np.arange(max(0, t - width + 1), min(height - 1, t) + 1)
        x = t - y
        a, b, c = out[y + 1, x], out[y, x + 1], out[y, x]  # left, up, upper left
        p = a + b - c
        pa, pb, pc = np.abs(p - a), np.abs(p - b), np.abs(p - c)
        paeth = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))
        kind = kinds[y, None]
        predictor = np.select([kind == 1, kind == 2, kind == 3, kind == 4],
                              [a, b, (a + b) >> 1, paeth], 0)
        out[y + 1, x + 1] = (filtered[y, x] + predictor) & 255
    return out[1:, 1:].astype(np.uint8)


# ---- writing -------------------------------------------------------------------------------

def output_format(path: str | Path, info: ImageInfo) -> str:
    """The format `write_image(path, ..., info)` would write; ValueError when the file name's
    extension is not one of WRITE_FORMATS, or the format cannot hold the image's bit depth
    or alpha channel. Lets a command fail before it computes anything."""
    path = Path(path)
    fmt = WRITE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ImageFileError(f"{path}: cannot write '{path.suffix or 'no extension'}' files; "
                         "use .png, .tif/.tiff, .jpg/.jpeg or .npy")
    if fmt == "JPEG" and info.bit_depth == 16:
        raise ImageFileError(f"{path}: JPEG cannot store 16-bit images; write .png or .tif instead")
    if fmt == "JPEG" and info.alpha is not None:
        raise ImageFileError(f"{path}: JPEG cannot store an alpha channel; write .png or .tif instead")
    return fmt


def quantize(array: np.ndarray, depth: int) -> np.ndarray:
    """Round and clip to the range of a `depth`-bit file (8: 0–255, 16: 0–65535), as
    uint8 or uint16."""
    dtype = np.uint16 if depth == 16 else np.uint8
    return np.clip(np.rint(array), 0, 2 ** depth - 1).astype(dtype)


def write_image(path: str | Path, array: np.ndarray, info: ImageInfo) -> None:
    """Write `array` ((H, W) or (H, W, 3), in the units `read_image` gave) as `info` says.

    The format comes from the extension (see `output_format`). Values are rounded and
    clipped to the bit depth's range (0–255, 0–65535; a float `.npy` source is written as
    8-bit to image formats and as float32 to `.npy`), and info's alpha channel is
    re-attached unchanged. JPEG is written at quality 95.
    """
    path = Path(path)
    fmt = output_format(path, info)
    array = np.asarray(array)
    expected = 3 if info.colour else 2
    if array.ndim != expected or (info.colour and array.shape[2] != 3):
        raise ImageFileError(f"{path}: a {info.mode} image must be written from an array of "
                         f"{expected} dimensions{' (H, W, 3)' if info.colour else ' (H, W)'}, "
                         f"got shape {array.shape}")
    if info.alpha is not None and info.alpha.shape != array.shape[:2]:
        raise ImageFileError(f"{path}: the alpha channel is {info.alpha.shape}, the image {array.shape[:2]}")
    if not np.all(np.isfinite(array)):
        raise ImageFileError(f"{path}: the image to write holds NaN or infinite values")
    if fmt == "NPY" and info.bit_depth is None:
        data = array.astype(np.float32)
    else:
        data = quantize(array, info.bit_depth or 8)
    if info.alpha is not None:
        alpha = info.alpha
        if alpha.dtype != data.dtype:  # only for a float .npy source written as 8-bit
            alpha = np.clip(np.rint(alpha), 0, 255).astype(data.dtype)
        data = np.concatenate([data.reshape(*data.shape[:2], -1), alpha[:, :, None]], axis=2)
    try:
        _write(path, fmt, data)
    except OSError as exc:
        raise OSError(f"{path}: cannot write the image ({_first_line(exc)})") from None


def _write(path: Path, fmt: str, data: np.ndarray) -> None:
    if fmt == "NPY":
        with open(path, "wb") as fh:
            np.save(fh, data, allow_pickle=False)
        return
    if data.dtype == np.uint16 and data.ndim == 3:  # 16-bit colour: Pillow cannot write it
        if fmt == "PNG":
            path.write_bytes(encode_png(data))
            return
        _write_tiff_16bit_colour(path, data)
        return

    from PIL import Image

    image = Image.fromarray(data)  # L, LA, RGB, RGBA or I;16
    image.save(path, format=fmt, **({"quality": JPEG_QUALITY} if fmt == "JPEG" else {}))


def _write_tiff_16bit_colour(path: Path, data: np.ndarray) -> None:
    try:
        import tifffile
    except ImportError:
        raise ImageFileError(f"{path}: writing 16-bit colour TIFF needs the optional tifffile package "
                         "(pip install tifffile); write .png instead") from None
    channels = data.shape[2]
    photometric = "rgb" if channels >= 3 else "minisblack"
    extra = ["unassalpha"] if channels in (2, 4) else None
    tifffile.imwrite(path, data, photometric=photometric, planarconfig="contig",
                     extrasamples=extra)


def encode_png(data: np.ndarray) -> bytes:
    """A PNG file of a uint8 or uint16 (H, W) or (H, W, C) array, C in 1–4 (no filtering,
    zlib level 6). Used for 16-bit colour, which Pillow cannot write."""
    if data.dtype not in (np.uint8, np.uint16) or data.ndim not in (2, 3):
        raise ValueError(f"encode_png takes uint8/uint16 (H, W[, C]) arrays, not {data.dtype} "
                         f"{data.shape}")
    height, width = data.shape[:2]
    channels = 1 if data.ndim == 2 else data.shape[2]
    if channels not in _PNG_COLOUR_TYPES:
        raise ValueError(f"encode_png: {channels} channels; PNG holds 1 to 4")
    depth = 8 * data.dtype.itemsize
    samples = data.astype(data.dtype.newbyteorder(">")).reshape(height, -1).view(np.uint8)
    raw = np.concatenate([np.zeros((height, 1), np.uint8), samples], axis=1)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, depth, _PNG_COLOUR_TYPES[channels], 0, 0, 0)
    return (_PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw.tobytes(), 6))
            + chunk(b"IEND", b""))


# ---- noise and quality ---------------------------------------------------------------------

def add_noise(image: np.ndarray, sigma: float, seed: int | None = None) -> np.ndarray:
    """`image` plus white Gaussian noise of standard deviation `sigma` (float32).

    The noise comes from `numpy.random.default_rng(seed)`, so a given seed always gives the
    same noise for the same shape. It is neither clipped nor rounded.
    """
    if not sigma > 0:
        raise ValueError(f"the noise sigma must be > 0, got {sigma}")
    rng = np.random.default_rng(seed)
    image = np.asarray(image, dtype=np.float32)
    return (image + rng.normal(0.0, sigma, image.shape)).astype(np.float32)


def psnr(a: np.ndarray, b: np.ndarray, peak: float) -> float:
    """Peak signal-to-noise ratio of `a` against `b` in dB: 10 log10(peak² / MSE), computed in
    float64; inf when they are equal."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"psnr: shapes differ, {a.shape} and {b.shape}")
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else 10.0 * float(np.log10(peak * peak / mse))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
