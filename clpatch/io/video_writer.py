"""Writing a video frame by frame: `VideoWriter` and `output_kind`, the kind of video it
writes to a path. Frames are rounded and clipped to the video's bit depth as `write_image`
does; see the `video` module docstring for each kind's file layout. Every kind is written
to a temporary beside the target and put in place only when complete (see `outputs`)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from .errors import ImageFileError, first_line
from .images import WRITE_FORMATS, output_format, quantize, write_image
from .optional import require_imageio_ffmpeg, require_tifffile
from .outputs import TemporaryOutput, check_output, same_file
from .video_info import (
    DEFAULT_FPS,
    FRAME_EXTENSIONS,
    KINDS,
    TIFF_EXTENSIONS,
    VIDEO_EXTENSIONS,
    VideoInfo,
    output_frame_info,
)
from .video_readers import frame_files

VIDEO_QUALITY = 8  # imageio-ffmpeg's 0-10 scale (its default is 5)

_FRAME_NAME = re.compile(r"frame_\d+\.[A-Za-z]+")  # what VideoWriter names frames
_FORMAT_EXTENSIONS = {"PNG": ".png", "TIFF": ".tif", "JPEG": ".jpg", "NPY": ".npy"}


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



class VideoWriter:
    """Writes a video frame by frame, in the form `info` describes (a context manager).

    kind: "directory", "tiff", "npy" or "file"; None picks it from `path` (see `output_kind`).
    overwrite: for directories, allow a non-empty one (its frame_NNNNN files are replaced
        by the new ones when the writer closes; its other files are kept); files are always
        replaced, like `write_image` does.
    frame_format: for directories, "png", "tif", "jpg", "npy"...: the frame files' format
        (default: that of the input's frames; video files' frames become PNG).

    Frames are float32 arrays of info.shape in the video's units; integer outputs are rounded
    and clipped to their range. A `.npy` output holds exactly info.frames frames: more are
    refused, and closing it with fewer is an error, as is closing any writer that wrote no
    frame. Frames go to a temporary beside `path` (a hidden file, or a hidden directory for a
    directory of frames), renamed into place by a successful `close()`: a failed close,
    `discard()` or leaving the context on an exception (KeyboardInterrupt included) removes
    the temporary and leaves `path` as it was.
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
        if same_file(self.path, info.source):
            raise ImageFileError(f"{self.path}: is the input video; write the result elsewhere")
        self.frame_info = output_frame_info(info)
        self.written = 0
        self._closed = False
        self._memmap: np.memmap | None = None
        self._tiff: Any = None
        self._ffmpeg: Any = None
        self._suffix = ""
        if self.kind == "directory":
            self._check_directory(overwrite, frame_format)
        else:
            check_output(self.path, overwrite=True)
            if self.kind == "npy" and self.info.frames < 1:
                raise ValueError(f"{self.path}: a .npy video needs the frame count up front, "
                                 f"got {self.info.frames}")
            if self.kind == "file":
                self._check_file()
        self._output = TemporaryOutput(self.path, directory=self.kind == "directory",
                                       stale=_is_frame_file if self.kind == "directory" else None)
        try:
            if self.kind == "npy":
                self._open_npy()
            elif self.kind == "tiff":
                self._open_tiff()
            elif self.kind == "file":
                self._open_file()
        except BaseException:
            self._output.discard()
            raise

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.close()
        else:  # drop the output without masking the error with a frame-count complaint
            self.discard()

    @property
    def temporary(self) -> Path:
        """Where the frames go until `close()` renames it to `path`."""
        return self._output.temporary

    # -- checks and set-up for each kind

    def _check_directory(self, overwrite: bool, frame_format: str | None) -> None:
        if frame_format is None:
            self._suffix = _FORMAT_EXTENSIONS.get(self.frame_info.format, ".png")
        else:
            self._suffix = "." + frame_format.lower().lstrip(".")
            if self._suffix not in WRITE_FORMATS:
                raise ValueError(f"{self.path}: unknown frame format {frame_format!r}; use one of "
                                 f"{', '.join(sorted(s[1:] for s in WRITE_FORMATS))}")
        output_format(self.path / f"frame_00000{self._suffix}", self.frame_info)  # e.g. JPEG 16-bit
        check_output(self.path, overwrite=overwrite, directory=True)
        if self.path.is_dir():
            source = Path(os.path.realpath(self.info.source))
            if source.parent == Path(os.path.realpath(self.path)) and _is_frame_file(source):
                raise ImageFileError(f"{self.path}: would replace the input video {source.name}; "
                                     "write the result elsewhere")
            others = [f for f in frame_files(self.path) if not _is_frame_file(f)]
            if others:
                raise ImageFileError(f"{self.path}: holds other image files ({others[0].name}...) "
                                     "that would be read as frames; choose an empty directory")

    def _open_npy(self) -> None:
        depth = self.frame_info.bit_depth
        dtype = np.uint16 if depth == 16 else np.uint8 if depth == 8 else np.float32
        try:
            self._memmap = np.lib.format.open_memmap(self.temporary, mode="w+", dtype=dtype,
                                                     shape=(self.info.frames, *self.info.shape))
            _reserve(self.temporary)
        except OSError as exc:
            raise OSError(f"{self.path}: cannot write the video ({first_line(exc)})") from None

    def _open_tiff(self) -> None:
        depth = self.frame_info.bit_depth
        try:
            if depth is None or (depth == 16 and self.frame_info.colour):
                tifffile = require_tifffile(self.path, "writing floating-point TIFF" if depth is None
                                            else "writing 16-bit colour TIFF")
                self._tiff = tifffile.TiffWriter(self.temporary)
            else:
                from PIL import TiffImagePlugin

                self._tiff = TiffImagePlugin.AppendingTiffWriter(str(self.temporary), new=True)
        except OSError as exc:
            raise OSError(f"{self.path}: cannot write the video ({first_line(exc)})") from None

    def _check_file(self) -> None:
        if self.frame_info.bit_depth == 16:
            raise ImageFileError(f"{self.path}: video files hold 8-bit frames; write this 16-bit "
                                 "video to a directory, a .tif or a .npy file instead")
        height, width = self.info.shape[:2]
        if height % 2 or width % 2:  # ffmpeg's yuv420p (imageio's default) halves the chroma
            raise ImageFileError(f"{self.path}: video files need an even frame width and height, "
                                 f"got {width}x{height}; write a directory, a .tif or a .npy file")
        require_imageio_ffmpeg(self.path)

    def _open_file(self) -> None:
        iio = require_imageio_ffmpeg(self.path)
        try:
            # macro_block_size=1: never resize frames (ffmpeg itself may refuse odd sizes).
            # ffmpeg picks the container from the name: the temporary keeps the suffix.
            self._ffmpeg = iio.get_writer(self.temporary, format="FFMPEG",
                                          fps=self.info.fps or DEFAULT_FPS,
                                          quality=VIDEO_QUALITY, macro_block_size=1)
        except Exception as exc:
            raise ImageFileError(f"{self.path}: cannot write the video ({first_line(exc)})") from None

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
            write_image(self.temporary / f"frame_{index:05d}{self._suffix}", frame,
                        self.frame_info)
        elif self.kind == "tiff":
            self._write_page(frame)
        else:
            try:
                self._ffmpeg.append_data(quantize(frame, 8))
            except Exception as exc:
                raise ImageFileError(f"{self.path}: cannot write frame {index} "
                                     f"({first_line(exc)})") from None
        self.written += 1

    def _write_page(self, frame: np.ndarray) -> None:
        depth = self.frame_info.bit_depth
        data = frame.astype(np.float32) if depth is None else quantize(frame, depth)
        try:
            if depth is None or (data.ndim == 3 and depth == 16):  # through tifffile
                self._tiff.write(data, photometric="rgb" if data.ndim == 3 else "minisblack",
                                 planarconfig="contig" if data.ndim == 3 else None,
                                 contiguous=False)
                return
            from PIL import Image

            # What Pillow's save_all does for each page: encode it into the appending writer
            # (a file-like object), then link it as the file's next page.
            Image.fromarray(data).save(self._tiff, format="TIFF")  # L, RGB or I;16
            self._tiff.newFrame()
        except OSError as exc:
            raise OSError(f"{self.path}: cannot write the video ({first_line(exc)})") from None

    def close(self) -> None:
        """Finish the video and rename it into place. An error, with `path` left as it was,
        if no frame was written or, for `.npy` outputs, fewer than announced."""
        if self._closed:
            return
        try:
            self._release()
            if self.kind == "npy" and self.written < self.info.frames:
                raise ValueError(f"{self.path}: {self.written} of the {self.info.frames} frames "
                                 "were written; the .npy video was not written")
            if self.written == 0:
                raise ValueError(f"{self.path}: no frames were written")
            self._output.commit()
        except BaseException:
            self._output.discard()
            raise

    def discard(self) -> None:
        """Stop writing and remove what was written; `path` is left as it was."""
        try:
            with contextlib.suppress(Exception):  # what fails to close is thrown away anyway
                self._release(finish=False)
        finally:
            self._output.discard()

    def _release(self, finish: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        if self._memmap is not None:
            if finish:
                self._memmap.flush()
            self._memmap = None
        tiff, ffmpeg, self._tiff, self._ffmpeg = self._tiff, self._ffmpeg, None, None
        if tiff is not None:
            tiff.close()
        if ffmpeg is not None:
            try:
                ffmpeg.close()  # ffmpeg encodes the last frames and writes the file here
            except Exception as exc:
                if not finish:
                    return
                raise ImageFileError(f"{self.path}: cannot write the video ({first_line(exc)})") from None
            if finish and self.written and (not self.temporary.is_file()
                                            or self.temporary.stat().st_size == 0):
                raise ImageFileError(f"{self.path}: ffmpeg wrote no video (see its messages above)")


def _is_frame_file(entry: Path) -> bool:
    """Whether `entry` is a frame file a directory output replaces (frame_NNNNN.ext)."""
    return bool(_FRAME_NAME.fullmatch(entry.name)) and entry.suffix.lower() in FRAME_EXTENSIONS \
        and entry.is_file()


def _reserve(path: Path) -> None:
    """Allocate the disk blocks of a memory-mapped file now: writing into a sparse mapping on
    a full disk kills the process (SIGBUS) instead of raising an error."""
    if not hasattr(os, "posix_fallocate"):
        return
    with open(path, "r+b") as fh:
        size = os.fstat(fh.fileno()).st_size
        try:
            os.posix_fallocate(fh.fileno(), 0, size)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                return  # the file system cannot say; writing will
            raise OSError(exc.errno, f"cannot reserve {size} bytes ({exc.strerror})") from None
