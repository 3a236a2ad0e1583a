"""Video files for the command line: reading and writing frame sequences, one frame at a time.

A video is a sequence of frames of one shape and bit depth, each (H, W) grayscale or
(H, W, 3) RGB; alpha channels are refused. Four containers are read and written, and
animated images are read:

- ``"directory"``: a directory of image files (anything `images.read_image` reads, picked by
  extension: see FRAME_EXTENSIONS), in natural order (``frame2`` before ``frame10``); hidden
  files, subdirectories and other files are ignored. Frames are decoded by `read_image` and
  written by `write_image` (as ``frame_00000.png``, ...), so bit depth, 16-bit colour and
  ``.npy`` frames behave exactly as for single images.
- ``"tiff"``: a multi-page TIFF file, one frame per page, decoded page by page with Pillow
  (``Image.seek``); 16-bit colour pages, which Pillow reduces to 8 bits, and floating-point
  pages go through the optional ``tifffile`` package (the ``tiff`` extra), as in `images`.
  Written page by page, so memory stays bounded: Pillow's ``save_all=True,
  append_images=...`` accepts an iterator but turns it into a list first (every frame in
  memory), and ``append=True`` does not append single images, so the writer does what
  ``save_all`` does inside: it saves each page into Pillow's
  ``TiffImagePlugin.AppendingTiffWriter`` (a file-like object) and calls its ``newFrame()``.
  16-bit colour and float32 pages, which Pillow cannot write, are written with ``tifffile``.
  Like ``save_all``, Pillow walks the file's chain of pages for each new page: about 2 ms a page
  for a 1000-page file, small next to denoising the page.
- ``"npy"``: a NumPy array file (T, H, W) or (T, H, W, C), C in 1 or 3, of any real dtype,
  memory-mapped for reading (``np.load(mmap_mode="r")``) and written through
  ``np.lib.format.open_memmap``, so the writer needs the frame count up front.
- ``"frames"`` (read only): an animated GIF, PNG or WebP file (any file Pillow reads with
  more than one frame), decoded frame by frame with Pillow; palette frames are read as RGB.
- ``"file"``: .mp4, .avi, .mkv, .mov and .webm files, through the optional ``imageio``
  package and its ffmpeg plugin (``pip install "clpatch[video]"``): lossy, 8-bit, even frame
  sizes only, and always read as RGB (a grayscale video comes back as (H, W, 3)).

`open_video` checks what it can without decoding every frame (the frame count and the first
frame) and returns a lazy iterator; a frame that differs from the first one in shape or bit
depth is reported when the iterator reaches it. Frames are float32 in the file's own units
(0–255 for 8-bit data, 0–65535 for 16-bit data; floating-point TIFF and other `.npy` dtypes
are taken as they are, on the 0–255 scale), as `read_image` gives them. `VideoWriter` rounds
and clips them back to the video's bit depth (floating-point data is kept as float32 in `.npy`
and TIFF outputs and written as 8-bit elsewhere, again as `write_image` does).

A 3-D `.npy` array is ambiguous: (T, H, W) grayscale video or (H, W, C) image. `is_video_path`,
which the command line uses to choose between the image and the video path, takes it as an
image when its last axis is 1 to 4 (what `read_image` reads as L, LA, RGB or RGBA: frames that
narrow are no use for patch denoising) and as a video otherwise; 4-D arrays are videos.
`open_video` itself always reads a 3-D array as (T, H, W) and a 4-D one as (T, H, W, C).

Errors are `ImageFileError` (a ValueError: unreadable or unsupported contents),
`FileNotFoundError`, or ValueError for wrong frames given to a writer, with one-line messages
that start with the path.

This module holds the entry points (`is_video_path`, `open_video`, `read_video`); `VideoInfo`
lives in `video_info`, the readers of each kind in `video_readers` and `VideoWriter` and
`output_kind` in `video_writer`, and they can all be imported from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .decode import is_tiff, pillow_frames
from .errors import ImageFileError
from .optional import VIDEO_EXTRA_HINT
from .video_info import (
    DEFAULT_FPS,
    FRAME_EXTENSIONS,
    KINDS,
    TIFF_EXTENSIONS,
    VIDEO_EXTENSIONS,
    VideoInfo,
    output_frame_info,
)
from .video_readers import (
    frame_files,
    open_directory,
    open_frames,
    open_npy,
    open_tiff,
    open_video_file,
    tiff_pages,
)
from .video_writer import VIDEO_QUALITY, VideoWriter, output_kind

__all__ = [
    "DEFAULT_FPS", "FRAME_EXTENSIONS", "KINDS", "TIFF_EXTENSIONS", "VIDEO_EXTENSIONS",
    "VIDEO_EXTRA_HINT", "VIDEO_QUALITY", "VideoInfo", "VideoWriter", "frame_files",
    "is_video_path", "open_video", "output_frame_info", "output_kind", "read_video",
]


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
            return tiff_pages(path)[1] > 1
        except (ImageFileError, OSError):
            return False
    return pillow_frames(path) > 1      # an animated GIF, PNG or WebP



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
        return open_directory(path)
    if not path.is_file():
        raise ImageFileError(f"{path}: not a file or directory")
    if suffix == ".npy":
        return open_npy(path)
    if suffix in VIDEO_EXTENSIONS:
        return open_video_file(path)
    if suffix in TIFF_EXTENSIONS or is_tiff(path):
        return open_tiff(path)
    if pillow_frames(path) > 1:
        return open_frames(path)
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
