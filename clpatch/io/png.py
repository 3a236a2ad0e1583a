"""clpatch's own PNG decoder and encoder (NumPy and zlib), for the 16-bit colour files that
Pillow reduces to 8 bits on reading and cannot write.

Non-interlaced 8- and 16-bit grayscale, gray+alpha, RGB and RGBA files only.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from .errors import ImageFileError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # PNG colour type -> channels (palette excluded)
_PNG_COLOUR_TYPES = {channels: kind for kind, channels in _PNG_CHANNELS.items()}


def decode_png(data: bytes, name: str = "PNG data") -> np.ndarray:
    """Decode a non-interlaced 8- or 16-bit grayscale, gray+alpha, RGB or RGBA PNG.

    Pillow decodes everything but 16-bit colour, so this is only used for that; it is
    written for any of these layouts so that it can be checked against Pillow. Returns
    (H, W) or (H, W, C), uint8 or uint16. Raises ValueError for other PNG files.
    """
    if not data.startswith(PNG_SIGNATURE):
        raise ImageFileError(f"{name}: not a PNG file")
    pos, header, idat = len(PNG_SIGNATURE), None, []
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
    return (PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw.tobytes(), 6))
            + chunk(b"IEND", b""))
