"""Reading each kind of video frame by frame: a directory of image files, a multi-page TIFF
file, a `.npy` array and a video file (through imageio's ffmpeg plugin). Each `open_*`
function checks what it can up front and returns (VideoInfo, lazy frame iterator); `video`'s
`open_video` picks among them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .decode import (
    TIFFFILE_LAYOUTS,
    frame_array,
    is_tiff,
    needs_tifffile,
    pillow_frames,
    tifffile_page_array,
)
from .errors import ImageFileError, first_line
from .images import ImageInfo, bit_depth_of, read_image
from .optional import require_imageio_ffmpeg, require_tifffile
from .video_info import FRAME_EXTENSIONS, VideoInfo


def _natural_key(name: str) -> list[Any]:
    """Sort key for file names with numbers compared as numbers: frame2 < frame10."""
    parts = re.split(r"(\d+)", name)
    return [int(part) if i % 2 else part.lower() for i, part in enumerate(parts)] + [name]


def frame_files(directory: str | Path) -> list[Path]:
    """The frame files of a directory, in natural order (see FRAME_EXTENSIONS)."""
    directory = Path(directory)
    files = [entry for entry in directory.iterdir()
             if not entry.name.startswith(".") and entry.suffix.lower() in FRAME_EXTENSIONS
             and entry.is_file()]
    return sorted(files, key=lambda entry: _natural_key(entry.name))


def open_directory(path: Path) -> tuple[VideoInfo, Iterator[np.ndarray]]:
    """A directory of frame files (see `frame_files`), each read by `read_image`."""
    files = frame_files(path)
    if not files:
        raise ImageFileError(f"{path}: no frames in the directory (image files named "
                             f"*{'/*'.join(sorted(FRAME_EXTENSIONS))})")
    first, first_info = read_image(files[0])
    _check_frame_mode(files[0], first_info)
    depth = first_info.bit_depth
    info = VideoInfo("directory", len(files), first.shape, _dtype(depth), first_info.peak,
                     ImageInfo(depth, first_info.mode, None, first_info.format), path)

    def frames() -> Iterator[np.ndarray]:
        yield first
        for file in files[1:]:
            frame, frame_info = read_image(file)
            _check_frame_mode(file, frame_info)
            if frame.shape != first.shape or frame_info.bit_depth != depth:
                raise ImageFileError(f"{file}: {_layout(frame.shape, frame_info.bit_depth)} "
                                     f"frame; the first one, {files[0].name}, is "
                                     f"{_layout(first.shape, depth)}")
            yield frame

    return info, frames()


def _check_frame_mode(path: Path, info: ImageInfo) -> None:
    if info.alpha is not None:
        raise ImageFileError(f"{path}: has an alpha channel ({info.mode}); video frames must be "
                             "grayscale or RGB: drop the alpha channel first")


def _layout(shape: tuple[int, ...], depth: int | None) -> str:
    """E.g. '64x48 8-bit RGB'."""
    return (f"{shape[1]}x{shape[0]} {f'{depth}-bit' if depth else 'float'} "
            f"{'RGB' if len(shape) == 3 else 'L'}")


def _dtype(depth: int | None) -> np.dtype:
    return np.dtype(np.uint16 if depth == 16 else np.uint8 if depth == 8 else np.float32)


def open_npy(path: Path) -> tuple[VideoInfo, Iterator[np.ndarray]]:
    """A (T, H, W) or (T, H, W, C) `.npy` array, C in 1 or 3, memory-mapped."""
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ImageFileError(f"{path}: not a readable .npy array ({first_line(exc)})") from None
    if array.dtype.kind not in "biuf":
        raise ImageFileError(f"{path}: {array.dtype} arrays are not supported (only real numbers)")
    if array.ndim == 4 and array.shape[3] in (2, 4):
        raise ImageFileError(f"{path}: frames with {array.shape[3]} channels have an alpha channel; "
                             "video frames must be grayscale or RGB: drop the alpha channel first")
    if array.ndim not in (3, 4) or (array.ndim == 4 and array.shape[3] not in (1, 3)):
        raise ImageFileError(f"{path}: shape {array.shape} is not a video "
                             "((T, H, W) or (T, H, W, C) with 1 or 3 channels)")
    if min(array.shape[:3]) == 0:
        raise ImageFileError(f"{path}: the video is empty (shape {array.shape})")
    squeeze = array.ndim == 4 and array.shape[3] == 1
    shape = array.shape[1:3] if squeeze or array.ndim == 3 else array.shape[1:]
    depth = bit_depth_of(path, np.empty(0, array.dtype.newbyteorder("=")), "NPY")
    info = VideoInfo("npy", array.shape[0], tuple(shape), array.dtype, 65535.0 if depth == 16 else 255.0,
                     ImageInfo(depth, "RGB" if len(shape) == 3 else "L", None, "NPY"), path)

    def frames() -> Iterator[np.ndarray]:
        for index in range(array.shape[0]):
            frame = np.array(array[index], dtype=np.float32).reshape(shape)
            if depth is None and not np.all(np.isfinite(frame)):
                raise ImageFileError(f"{path}: frame {index} holds NaN or infinite values")
            yield frame

    return info, frames()


def tiff_pages(path: Path) -> tuple[str, int]:
    """Which library reads this TIFF file ("pillow" or "tifffile") and its page count."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            if not needs_tifffile(image, path, "TIFF"):
                return "pillow", int(getattr(image, "n_frames", 1))
    except UnidentifiedImageError:
        if not is_tiff(path):
            raise ImageFileError(f"{path}: not a TIFF file") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageFileError(f"{path}: cannot read the TIFF file ({first_line(exc)})") from None
    tifffile = require_tifffile(path, f"reading {TIFFFILE_LAYOUTS}")
    try:
        with tifffile.TiffFile(path) as tif:
            return "tifffile", len(tif.pages)
    except (tifffile.TiffFileError, ValueError, OSError) as exc:
        raise ImageFileError(f"{path}: cannot read the TIFF file ({first_line(exc)})") from None


def _tiff_native_pages(path: Path, backend: str) -> Iterator[np.ndarray]:
    """The pages of a TIFF file as native arrays (uint8 / uint16 / float), read one at a
    time."""
    if backend == "pillow":
        from PIL import Image

        with Image.open(path) as image:
            for index in range(int(getattr(image, "n_frames", 1))):
                yield frame_array(image, index)
        return
    tifffile = require_tifffile(path, "reading this TIFF file")
    with tifffile.TiffFile(path) as tif:
        for page in tif.pages:
            yield tifffile_page_array(page)


def open_tiff(path: Path) -> tuple[VideoInfo, Iterator[np.ndarray]]:
    """A multi-page TIFF file, read page by page (Pillow, or tifffile for 16-bit colour and
    floating-point pages)."""
    backend, count = tiff_pages(path)
    return _open_pages(path, backend, count, "tiff", "TIFF", "page")


def open_frames(path: Path) -> tuple[VideoInfo, Iterator[np.ndarray]]:
    """A multi-frame image file other than TIFF (an animated GIF, PNG or WebP), read frame
    by frame by Pillow (palette frames as RGB)."""
    from PIL import Image

    with Image.open(path) as image:
        fmt = image.format or "unknown"
    return _open_pages(path, "pillow", pillow_frames(path), "frames", fmt, "frame")


def _open_pages(path: Path, backend: str, count: int, kind: str, fmt: str,
                unit: str) -> tuple[VideoInfo, Iterator[np.ndarray]]:
    """The pages (`unit`s) of a multi-page file, read one at a time by `backend`."""
    if count < 1:
        raise ImageFileError(f"{path}: the {fmt} file has no {unit}s")
    pages = _tiff_native_pages(path, backend)
    try:
        first = _tiff_page(path, 0, next(pages), unit)
    except ImageFileError:
        raise
    except Exception as exc:  # Pillow and tifffile raise many kinds of errors on bad data
        raise ImageFileError(f"{path}: cannot read the {fmt} file ({first_line(exc)})") from None
    depth = bit_depth_of(path, first, fmt)
    shape = first.shape if first.ndim == 2 else first.shape[:2] + (3,)
    info = VideoInfo(kind, count, shape, first.dtype, 65535.0 if depth == 16 else 255.0,
                     ImageInfo(depth, "RGB" if len(shape) == 3 else "L", None, fmt), path)

    def frames() -> Iterator[np.ndarray]:
        yield _float_page(path, 0, first, depth, unit)
        for index in range(1, count):
            try:
                page = next(pages, None)
            except Exception as exc:  # as above
                raise ImageFileError(f"{path}: cannot read {unit} {index} "
                                     f"({first_line(exc)})") from None
            if page is None:
                raise ImageFileError(f"{path}: has {index} {unit}s, not the {count} it announced")
            page = _tiff_page(path, index, page, unit)
            if page.shape != first.shape or page.dtype != first.dtype:
                raise ImageFileError(f"{path}: {unit} {index} is {page.dtype} {page.shape}; "
                                     f"{unit} 0 is {first.dtype} {first.shape}")
            yield _float_page(path, index, page, depth, unit)

    return info, frames()


def _float_page(path: Path, index: int, page: np.ndarray, depth: int | None,
                unit: str) -> np.ndarray:
    """A native page as float32; floating-point pages (depth None) checked to be finite."""
    page = page.astype(np.float32)
    if depth is None and not np.all(np.isfinite(page)):
        raise ImageFileError(f"{path}: {unit} {index} holds NaN or infinite values")
    return page


def _tiff_page(path: Path, index: int, page: np.ndarray, unit: str = "page") -> np.ndarray:
    """A native page checked to be (H, W) or (H, W, 3) (single channels squeezed)."""
    if page.ndim == 3 and page.shape[2] == 1:
        page = page[:, :, 0]
    if page.ndim == 3 and page.shape[2] in (2, 4):
        raise ImageFileError(f"{path}: {unit} {index} has an alpha channel; video frames must be "
                             "grayscale or RGB: drop the alpha channel first")
    if page.ndim not in (2, 3) or (page.ndim == 3 and page.shape[2] != 3) or 0 in page.shape:
        raise ImageFileError(f"{path}: {unit} {index} has shape {page.shape}, not (H, W) or (H, W, 3)")
    return page


def open_video_file(path: Path) -> tuple[VideoInfo, Iterator[np.ndarray]]:
    """An .mp4, .mkv, ... file through imageio's ffmpeg plugin: 8-bit RGB frames."""
    iio = require_imageio_ffmpeg(path)
    try:
        with iio.get_reader(path, format="FFMPEG") as reader:
            meta = reader.get_meta_data()
            count = int(reader.count_frames())
    except Exception as exc:  # ffmpeg failures come as OSError, RuntimeError, IndexError...
        raise ImageFileError(f"{path}: cannot read the video ({first_line(exc)})") from None
    if count < 1:
        raise ImageFileError(f"{path}: the video has no frames")
    width, height = meta["size"]
    fps = meta.get("fps")
    info = VideoInfo("file", count, (int(height), int(width), 3), np.dtype(np.uint8), 255.0,
                     ImageInfo(8, "RGB", None, "PNG"), path, float(fps) if fps else None)

    def frames() -> Iterator[np.ndarray]:
        with iio.get_reader(path, format="FFMPEG") as reader:
            for index, frame in enumerate(reader):
                if index >= count:
                    return
                yield np.asarray(frame, dtype=np.float32)[:, :, :3]

    return info, frames()
