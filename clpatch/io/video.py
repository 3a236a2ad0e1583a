"""Video files for the command line: reading and writing frame sequences, one frame at a time.

A video is a sequence of frames of one shape and bit depth, each (H, W) grayscale or
(H, W, 3) RGB; alpha channels are refused. Four containers are read and written:

- ``"directory"``: a directory of image files (anything `imageio.read_image` reads, picked by
  extension: see FRAME_EXTENSIONS), in natural order (``frame2`` before ``frame10``); hidden
  files, subdirectories and other files are ignored. Frames are decoded by `read_image` and
  written by `write_image` (as ``frame_00000.png``, ...), so bit depth, 16-bit colour and
  ``.npy`` frames behave exactly as for single images.
- ``"tiff"``: a multi-page TIFF file, one frame per page, decoded page by page with Pillow
  (``Image.seek``); 16-bit colour pages, which Pillow reduces to 8 bits, go through the
  optional ``tifffile`` package, as in `imageio`. Written page by page, so memory stays
  bounded: Pillow's ``save_all=True, append_images=...`` accepts an iterator but turns it into
  a list first (every frame in memory), and ``append=True`` does not append single images, so
  the writer does what ``save_all`` does inside: it saves each page into Pillow's
  ``TiffImagePlugin.AppendingTiffWriter`` (a file-like object) and calls its ``newFrame()``.
  16-bit colour pages, which Pillow cannot write, are written with ``tifffile``. Like
  ``save_all``, Pillow walks the file's chain of pages for each new page: about 2 ms a page
  for a 1000-page file, small next to denoising the page.
- ``"npy"``: a NumPy array file (T, H, W) or (T, H, W, C), C in 1 or 3, of any real dtype,
  memory-mapped for reading (``np.load(mmap_mode="r")``) and written through
  ``np.lib.format.open_memmap``, so the writer needs the frame count up front.
- ``"file"``: .mp4, .avi, .mkv, .mov and .webm files, through the optional ``imageio``
  package and its ffmpeg plugin (``pip install "clpatch[video]"``): lossy, 8-bit, even frame
  sizes only, and always read as RGB (a grayscale video comes back as (H, W, 3)).

`open_video` checks what it can without decoding every frame (the frame count and the first
frame) and returns a lazy iterator; a frame that differs from the first one in shape or bit
depth is reported when the iterator reaches it. Frames are float32 in the file's own units
(0–255 for 8-bit data, 0–65535 for 16-bit data; other `.npy` dtypes are taken as they are,
on the 0–255 scale), as `read_image` gives them. `VideoWriter` rounds and clips them back to
the video's bit depth (floating-point data is kept as float32 in `.npy` outputs and written as
8-bit elsewhere, again as `write_image` does).

A 3-D `.npy` array is ambiguous: (T, H, W) grayscale video or (H, W, C) image. `is_video_path`,
which the command line uses to choose between the image and the video path, takes it as an
image when its last axis is 1 to 4 (what `read_image` reads as L, LA, RGB or RGBA: frames that
narrow are no use for patch denoising) and as a video otherwise; 4-D arrays are videos.
`open_video` itself always reads a 3-D array as (T, H, W) and a 4-D one as (T, H, W, C).

Errors are `ImageFileError` (a ValueError: unreadable or unsupported contents),
`FileNotFoundError`, or ValueError for wrong frames given to a writer, with one-line messages
that start with the path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

import numpy as np

from .images import (
    WRITE_FORMATS,
    ImageFileError,
    ImageInfo,
    _bit_depth,
    _first_line,
    _frame_array,
    _is_16bit_colour,
    _is_tiff,
    output_format,
    quantize,
    read_image,
    write_image,
)

KINDS = ("directory", "tiff", "npy", "file")
# Files of a frame directory, by extension; everything else there is ignored.
FRAME_EXTENSIONS = frozenset({".png", ".tif", ".tiff", ".jpg", ".jpeg", ".npy", ".bmp", ".webp",
                              ".pgm", ".ppm", ".pnm"})
TIFF_EXTENSIONS = frozenset({".tif", ".tiff"})
VIDEO_EXTENSIONS = frozenset({".mp4", ".avi", ".mkv", ".mov", ".webm"})
VIDEO_EXTRA_HINT = 'install the video extra: pip install "clpatch[video]"'
DEFAULT_FPS = 25.0
VIDEO_QUALITY = 8  # imageio-ffmpeg's 0-10 scale (its default is 5)

_FRAME_NAME = re.compile(r"frame_\d+\.[A-Za-z]+")  # what VideoWriter names frames
_FORMAT_EXTENSIONS = {"PNG": ".png", "TIFF": ".tif", "JPEG": ".jpg", "NPY": ".npy"}


@dataclass(frozen=True)
class VideoInfo:
    """What `open_video` learnt about a video, for writing a result back in the same form.

    kind: "directory", "tiff", "npy" or "file" (see the module docstring).
    frames: the number of frames T (at least 1).
    shape: one frame's shape, (H, W) or (H, W, 3).
    dtype: the frames' dtype on disk (uint8, uint16; float32 for frames `read_image` reads
        as floating point, i.e. non-8/16-bit `.npy` frames of a directory).
    peak: the nominal range, as `ImageInfo.peak`: 65535 for 16-bit data, else 255.
    frame_info: how one frame is written back (bit depth, mode, format): for `.npy` and video
        files it is made up from the dtype and shape, with format "NPY" and "PNG".
    source: the path the video was read from.
    fps: frames per second of a video file, else None (writers then use DEFAULT_FPS).
    """

    kind: str
    frames: int
    shape: tuple[int, ...]
    dtype: np.dtype
    peak: float
    frame_info: ImageInfo | None
    source: Path
    fps: float | None = None

    @property
    def colour(self) -> bool:
        return len(self.shape) == 3

    @property
    def bit_depth(self) -> int | None:
        """8, 16, or None for floating-point data (on the 0–255 scale)."""
        return _frame_info(self).bit_depth

    def describe(self) -> str:
        """E.g. '40 frames of 64x48 16-bit L (tiff)'."""
        height, width = self.shape[:2]
        depth = f"{self.bit_depth}-bit" if self.bit_depth else str(np.dtype(self.dtype))
        return (f"{self.frames} frame{'s' if self.frames != 1 else ''} of {width}x{height} {depth} "
                f"{'RGB' if self.colour else 'L'} ({self.kind})")


# ---- recognising videos --------------------------------------------------------------------

def is_video_path(path: str | Path) -> bool:
    """Whether the command line should treat `path` as a video rather than a single image.

    True for a directory, a TIFF file of more than one page, a `.npy` array of 4 or more
    dimensions or of 3 whose last axis is not 1 to 4 (see the module docstring), and any path
    with a video-file extension (existing or not). False for anything else, including missing
    or unreadable files (the image reader then reports the problem).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in VIDEO_EXTENSIONS:
        return True
    if path.is_dir():
        return True
    if not path.is_file():
        return False
    if suffix == ".npy":
        try:
            shape = np.load(path, mmap_mode="r", allow_pickle=False).shape
        except (OSError, ValueError, EOFError):
            return False
        return len(shape) >= 4 or (len(shape) == 3 and shape[2] not in (1, 2, 3, 4))
    if suffix in TIFF_EXTENSIONS:
        try:
            return _tiff_pages(path)[1] > 1
        except (ImageFileError, OSError):
            return False
    return False


def output_kind(path: str | Path) -> str:
    """The kind `VideoWriter` writes to `path` when not told: "directory" for an existing
    directory or a name without extension, "tiff", "npy" or "file" by extension."""
    path = Path(path)
    suffix = path.suffix.lower()
    if path.is_dir() or not suffix:
        return "directory"
    if suffix in TIFF_EXTENSIONS:
        return "tiff"
    if suffix == ".npy":
        return "npy"
    if suffix in VIDEO_EXTENSIONS:
        return "file"
    raise ImageFileError(f"{path}: cannot write a video to a '{suffix}' file; use a directory, "
                         f".tif/.tiff, .npy or {'/'.join(sorted(VIDEO_EXTENSIONS))}")


# ---- reading -------------------------------------------------------------------------------

def open_video(path: str | Path) -> tuple[VideoInfo, Iterator[np.ndarray]]:
    """Open a video for reading, frame by frame.

    Returns (info, frames): `frames` yields info.frames float32 arrays of info.shape, in the
    file's units, each read when it is reached. Raises FileNotFoundError for a missing path
    and ImageFileError for anything that is not a readable grayscale or RGB video (frames
    that differ from the first are reported when the iterator reaches them).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    suffix = path.suffix.lower()
    if path.is_dir():
        return _open_directory(path)
    if not path.is_file():
        raise ImageFileError(f"{path}: not a file or directory")
    if suffix == ".npy":
        return _open_npy(path)
    if suffix in VIDEO_EXTENSIONS:
        return _open_video_file(path)
    if suffix in TIFF_EXTENSIONS or _is_tiff(path):
        return _open_tiff(path)
    raise ImageFileError(f"{path}: not a video; use a directory of frames, a multi-page "
                         f".tif/.tiff, a (T, H, W[, 3]) .npy array or "
                         f"{'/'.join(sorted(VIDEO_EXTENSIONS))}")


def read_video(path: str | Path) -> tuple[np.ndarray, VideoInfo]:
    """All frames of a video at once: (T, H, W) or (T, H, W, 3) float32, and its info."""
    info, frames = open_video(path)
    video = np.empty((info.frames, *info.shape), np.float32)
    count = 0
    for count, frame in enumerate(frames, 1):
        if count > info.frames:
            raise ImageFileError(f"{path}: holds more than the {info.frames} frames it announced")
        video[count - 1] = frame
    if count != info.frames:
        raise ImageFileError(f"{path}: holds {count} frames, not the {info.frames} it announced")
    return video, info


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


def _open_directory(path: Path) -> tuple[VideoInfo, Iterator[np.ndarray]]:
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


def _open_npy(path: Path) -> tuple[VideoInfo, Iterator[np.ndarray]]:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ImageFileError(f"{path}: not a readable .npy array ({_first_line(exc)})") from None
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
    depth = _bit_depth(path, np.empty(0, array.dtype.newbyteorder("=")), "NPY")
    info = VideoInfo("npy", array.shape[0], tuple(shape), array.dtype, 65535.0 if depth == 16 else 255.0,
                     ImageInfo(depth, "RGB" if len(shape) == 3 else "L", None, "NPY"), path)

    def frames() -> Iterator[np.ndarray]:
        for index in range(array.shape[0]):
            frame = np.array(array[index], dtype=np.float32).reshape(shape)
            if depth is None and not np.all(np.isfinite(frame)):
                raise ImageFileError(f"{path}: frame {index} holds NaN or infinite values")
            yield frame

    return info, frames()


def _tiff_pages(path: Path) -> tuple[str, int]:
    """Which library reads this TIFF file ("pillow" or "tifffile") and its page count."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            if not _is_16bit_colour(image, path, "TIFF"):
                return "pillow", int(getattr(image, "n_frames", 1))
    except UnidentifiedImageError:
        if not _is_tiff(path):
            raise ImageFileError(f"{path}: not a TIFF file") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageFileError(f"{path}: cannot read the TIFF file ({_first_line(exc)})") from None
    tifffile = _tifffile(path, "reading this TIFF file (16-bit colour, or a layout Pillow does "
                               "not read)")
    try:
        with tifffile.TiffFile(path) as tif:
            return "tifffile", len(tif.pages)
    except (tifffile.TiffFileError, ValueError, OSError) as exc:
        raise ImageFileError(f"{path}: cannot read the TIFF file ({_first_line(exc)})") from None


def _tifffile(path: Path, what: str) -> ModuleType:
    try:
        import tifffile
    except ImportError:
        raise ImageFileError(f"{path}: {what} needs the optional tifffile package "
                             "(pip install tifffile)") from None
    return tifffile


def _tiff_native_pages(path: Path, backend: str) -> Iterator[np.ndarray]:
    """The pages of a TIFF file as native arrays (uint8 / uint16), read one at a time."""
    if backend == "pillow":
        from PIL import Image

        with Image.open(path) as image:
            for index in range(int(getattr(image, "n_frames", 1))):
                yield _frame_array(image, index)
        return
    tifffile = _tifffile(path, "reading this TIFF file")
    with tifffile.TiffFile(path) as tif:
        for page in tif.pages:
            array = page.asarray()
            if array.ndim == 3 and page.axes.startswith("S"):  # planar: (C, H, W)
                array = np.moveaxis(array, 0, -1)
            yield np.ascontiguousarray(array).astype(array.dtype.newbyteorder("="))


def _open_tiff(path: Path) -> tuple[VideoInfo, Iterator[np.ndarray]]:
    backend, count = _tiff_pages(path)
    if count < 1:
        raise ImageFileError(f"{path}: the TIFF file has no pages")
    pages = _tiff_native_pages(path, backend)
    try:
        first = _tiff_page(path, 0, next(pages))
    except ImageFileError:
        raise
    except Exception as exc:  # Pillow and tifffile raise many kinds of errors on bad data
        raise ImageFileError(f"{path}: cannot read the TIFF file ({_first_line(exc)})") from None
    depth = _bit_depth(path, first, "TIFF")
    shape = first.shape if first.ndim == 2 else first.shape[:2] + (3,)
    info = VideoInfo("tiff", count, shape, first.dtype, 65535.0 if depth == 16 else 255.0,
                     ImageInfo(depth, "RGB" if len(shape) == 3 else "L", None, "TIFF"), path)

    def frames() -> Iterator[np.ndarray]:
        yield first.astype(np.float32)
        for index in range(1, count):
            try:
                page = next(pages, None)
            except Exception as exc:  # as above
                raise ImageFileError(f"{path}: cannot read page {index} "
                                     f"({_first_line(exc)})") from None
            if page is None:
                raise ImageFileError(f"{path}: has {index} pages, not the {count} it announced")
            page = _tiff_page(path, index, page)
            if page.shape != first.shape or page.dtype != first.dtype:
                raise ImageFileError(f"{path}: page {index} is {page.dtype} {page.shape}; "
                                     f"page 0 is {first.dtype} {first.shape}")
            yield page.astype(np.float32)

    return info, frames()


def _tiff_page(path: Path, index: int, page: np.ndarray) -> np.ndarray:
    """A native page checked to be (H, W) or (H, W, 3) (single channels squeezed)."""
    if page.ndim == 3 and page.shape[2] == 1:
        page = page[:, :, 0]
    if page.ndim == 3 and page.shape[2] in (2, 4):
        raise ImageFileError(f"{path}: page {index} has an alpha channel; video frames must be "
                             "grayscale or RGB: drop the alpha channel first")
    if page.ndim not in (2, 3) or (page.ndim == 3 and page.shape[2] != 3) or 0 in page.shape:
        raise ImageFileError(f"{path}: page {index} has shape {page.shape}, not (H, W) or (H, W, 3)")
    return page


def _imageio_ffmpeg(path: Path) -> ModuleType:
    """imageio's v2 API, when imageio and its ffmpeg plugin are installed."""
    try:
        import imageio.v2 as iio
        import imageio_ffmpeg  # noqa: F401  (the plugin's ffmpeg binary)
    except ImportError:
        raise ImageFileError(f"{path}: reading and writing video files needs imageio and "
                             f"imageio-ffmpeg; {VIDEO_EXTRA_HINT}") from None
    return iio


def _open_video_file(path: Path) -> tuple[VideoInfo, Iterator[np.ndarray]]:
    iio = _imageio_ffmpeg(path)
    try:
        with iio.get_reader(path, format="FFMPEG") as reader:
            meta = reader.get_meta_data()
            count = int(reader.count_frames())
    except Exception as exc:  # ffmpeg failures come as OSError, RuntimeError, IndexError...
        raise ImageFileError(f"{path}: cannot read the video ({_first_line(exc)})") from None
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


# ---- writing -------------------------------------------------------------------------------

def _frame_info(info: VideoInfo) -> ImageInfo:
    """How one frame of `info` is written: its frame_info (alpha dropped), or one made up."""
    mode = "RGB" if len(info.shape) == 3 else "L"
    if info.frame_info is not None:
        return ImageInfo(info.frame_info.bit_depth, mode, None, info.frame_info.format)
    dtype = np.dtype(info.dtype)
    depth = 8 if dtype == np.uint8 else 16 if dtype == np.uint16 else None
    return ImageInfo(depth, mode, None, {"npy": "NPY", "tiff": "TIFF"}.get(info.kind, "PNG"))


class VideoWriter:
    """Writes a video frame by frame, in the form `info` describes (a context manager).

    kind: "directory", "tiff", "npy" or "file"; None picks it from `path` (see `output_kind`).
    overwrite: for directories, allow a non-empty one (its frame_NNNNN files are deleted
        first); files are always replaced, like `write_image` does.
    frame_format: for directories, "png", "tif", "jpg", "npy"...: the frame files' format
        (default: that of the input's frames; video files' frames become PNG).

    Frames are float32 arrays of info.shape in the video's units; integer outputs are rounded
    and clipped to their range. A `.npy` output holds exactly info.frames frames: more are
    refused, and closing it with fewer is an error, as is closing any writer that wrote no
    frame (leaving the context on an exception only releases the files).
    """

    def __init__(self, path: str | Path, info: VideoInfo, *, kind: str | None = None,
                 overwrite: bool = False, frame_format: str | None = None) -> None:
        self.path = Path(path)
        self.info = info
        self.kind = kind if kind is not None else output_kind(self.path)
        if self.kind not in KINDS:
            raise ValueError(f"{self.path}: unknown video kind {self.kind!r}; use one of {KINDS}")
        if len(info.shape) not in (2, 3) or (len(info.shape) == 3 and info.shape[2] != 3):
            raise ImageFileError(f"{self.path}: frames of shape {info.shape} cannot be written; "
                                 "video frames are (H, W) or (H, W, 3)")
        if self.path.exists() and self.path.resolve() == Path(info.source).resolve():
            raise ImageFileError(f"{self.path}: is the input video; write the result elsewhere")
        self.frame_info = _frame_info(info)
        self.written = 0
        self._closed = False
        self._memmap: np.memmap | None = None
        self._tiff: Any = None
        self._ffmpeg: Any = None
        self._suffix = ""
        if self.kind == "directory":
            self._open_directory(overwrite, frame_format)
        elif self.kind == "npy":
            self._open_npy()
        elif self.kind == "tiff":
            self._open_tiff()
        else:
            self._open_file()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.close()
        else:  # release the files without masking the error with a frame-count complaint
            self._release()

    # -- set-up for each kind

    def _open_directory(self, overwrite: bool, frame_format: str | None) -> None:
        if frame_format is None:
            self._suffix = _FORMAT_EXTENSIONS.get(self.frame_info.format, ".png")
        else:
            self._suffix = "." + frame_format.lower().lstrip(".")
            if self._suffix not in WRITE_FORMATS:
                raise ValueError(f"{self.path}: unknown frame format {frame_format!r}; use one of "
                                 f"{', '.join(sorted(s[1:] for s in WRITE_FORMATS))}")
        output_format(self.path / f"frame_00000{self._suffix}", self.frame_info)  # e.g. JPEG 16-bit
        if self.path.exists() and not self.path.is_dir():
            raise ImageFileError(f"{self.path}: exists and is not a directory")
        if self.path.is_dir() and any(self.path.iterdir()):
            if not overwrite:
                raise ImageFileError(f"{self.path}: the output directory is not empty; choose an "
                                     "empty or new one, or allow overwriting")
            for entry in self.path.iterdir():
                if _FRAME_NAME.fullmatch(entry.name) and entry.suffix.lower() in FRAME_EXTENSIONS \
                        and entry.is_file():
                    entry.unlink()
            others = frame_files(self.path)
            if others:
                raise ImageFileError(f"{self.path}: holds other image files ({others[0].name}...) "
                                     "that would be read as frames; choose an empty directory")
        self.path.mkdir(parents=True, exist_ok=True)

    def _open_npy(self) -> None:
        if self.info.frames < 1:
            raise ValueError(f"{self.path}: a .npy video needs the frame count up front, "
                             f"got {self.info.frames}")
        depth = self.frame_info.bit_depth
        dtype = np.uint16 if depth == 16 else np.uint8 if depth == 8 else np.float32
        try:
            self._memmap = np.lib.format.open_memmap(self.path, mode="w+", dtype=dtype,
                                                     shape=(self.info.frames, *self.info.shape))
        except OSError as exc:
            raise OSError(f"{self.path}: cannot write the video ({_first_line(exc)})") from None

    def _open_tiff(self) -> None:
        try:
            if self.frame_info.bit_depth == 16 and self.frame_info.colour:
                tifffile = _tifffile(self.path, "writing 16-bit colour TIFF")
                self._tiff = tifffile.TiffWriter(self.path)
            else:
                from PIL import TiffImagePlugin

                self._tiff = TiffImagePlugin.AppendingTiffWriter(str(self.path), new=True)
        except OSError as exc:
            raise OSError(f"{self.path}: cannot write the video ({_first_line(exc)})") from None

    def _open_file(self) -> None:
        if self.frame_info.bit_depth == 16:
            raise ImageFileError(f"{self.path}: video files hold 8-bit frames; write this 16-bit "
                                 "video to a directory, a .tif or a .npy file instead")
        height, width = self.info.shape[:2]
        if height % 2 or width % 2:  # ffmpeg's yuv420p (imageio's default) halves the chroma
            raise ImageFileError(f"{self.path}: video files need an even frame width and height, "
                                 f"got {width}x{height}; write a directory, a .tif or a .npy file")
        iio = _imageio_ffmpeg(self.path)
        try:
            # macro_block_size=1: never resize frames (ffmpeg itself may refuse odd sizes).
            self._ffmpeg = iio.get_writer(self.path, format="FFMPEG", fps=self.info.fps or DEFAULT_FPS,
                                          quality=VIDEO_QUALITY, macro_block_size=1)
        except Exception as exc:
            raise ImageFileError(f"{self.path}: cannot write the video ({_first_line(exc)})") from None

    # -- writing

    def write(self, frame: np.ndarray) -> None:
        """Append one frame (info.shape, in the video's units)."""
        if self._closed:
            raise ValueError(f"{self.path}: the video writer is closed")
        index = self.written
        frame = np.asarray(frame)
        if frame.shape != tuple(self.info.shape):
            raise ValueError(f"{self.path}: frame {index} has shape {frame.shape}; the video's "
                             f"frames are {tuple(self.info.shape)}")
        if not np.all(np.isfinite(frame)):
            raise ImageFileError(f"{self.path}: frame {index} holds NaN or infinite values")
        if self.kind == "npy":
            assert self._memmap is not None
            if index >= self.info.frames:
                raise ValueError(f"{self.path}: frame {index} is one too many; the .npy video "
                                 f"was opened for {self.info.frames} frames")
            depth = self.frame_info.bit_depth
            self._memmap[index] = frame if depth is None else quantize(frame, depth)
        elif self.kind == "directory":
            write_image(self.path / f"frame_{index:05d}{self._suffix}", frame, self.frame_info)
        elif self.kind == "tiff":
            self._write_page(frame)
        else:
            try:
                self._ffmpeg.append_data(quantize(frame, 8))
            except Exception as exc:
                raise ImageFileError(f"{self.path}: cannot write frame {index} "
                                     f"({_first_line(exc)})") from None
        self.written += 1

    def _write_page(self, frame: np.ndarray) -> None:
        data = quantize(frame, self.frame_info.bit_depth or 8)
        try:
            if data.ndim == 3 and data.dtype == np.uint16:  # 16-bit colour, through tifffile
                self._tiff.write(data, photometric="rgb", planarconfig="contig", contiguous=False)
                return
            from PIL import Image

            # What Pillow's save_all does for each page: encode it into the appending writer
            # (a file-like object), then link it as the file's next page.
            Image.fromarray(data).save(self._tiff, format="TIFF")  # L, RGB or I;16
            self._tiff.newFrame()
        except OSError as exc:
            raise OSError(f"{self.path}: cannot write the video ({_first_line(exc)})") from None

    def close(self) -> None:
        """Finish the file. For `.npy` outputs, an error if fewer frames than announced were
        written (the file is left with zero frames at the end)."""
        if self._closed:
            return
        self._release()
        if self.kind == "npy" and self.written < self.info.frames:
            raise ValueError(f"{self.path}: {self.written} of the {self.info.frames} frames were "
                             "written; the .npy video is incomplete")
        if self.written == 0:
            raise ValueError(f"{self.path}: no frames were written")

    def _release(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._memmap is not None:
            self._memmap.flush()
            self._memmap = None
        tiff, ffmpeg, self._tiff, self._ffmpeg = self._tiff, self._ffmpeg, None, None
        if tiff is not None:
            tiff.close()
        if ffmpeg is not None:
            try:
                ffmpeg.close()  # ffmpeg encodes the last frames and writes the file here
            except Exception as exc:
                raise ImageFileError(f"{self.path}: cannot write the video ({_first_line(exc)})") from None
            if self.written and (not self.path.is_file() or self.path.stat().st_size == 0):
                raise ImageFileError(f"{self.path}: ffmpeg wrote no video (see its messages above)")
