"""What a video is to clpatch: `VideoInfo` (kind, frame count, frame shape, bit depth, how a
frame is written back), the kinds of video and the file extensions that pick them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .images import ImageInfo

KINDS = ("directory", "tiff", "npy", "file")
# Files of a frame directory, by extension; everything else there is ignored.
FRAME_EXTENSIONS = frozenset({".png", ".tif", ".tiff", ".jpg", ".jpeg", ".npy", ".bmp", ".webp",
                              ".pgm", ".ppm", ".pnm"})
TIFF_EXTENSIONS = frozenset({".tif", ".tiff"})
VIDEO_EXTENSIONS = frozenset({".mp4", ".avi", ".mkv", ".mov", ".webm"})
DEFAULT_FPS = 25.0


@dataclass(frozen=True)
class VideoInfo:
    """What `open_video` learnt about a video, for writing a result back in the same form.

    kind: "directory", "tiff", "npy", "file" or "frames" (read only: an animated image; see
        the `video` module docstring).
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
        return output_frame_info(self).bit_depth

    def describe(self) -> str:
        """E.g. '40 frames of 64x48 16-bit L (tiff)'."""
        height, width = self.shape[:2]
        depth = f"{self.bit_depth}-bit" if self.bit_depth else str(np.dtype(self.dtype))
        return (f"{self.frames} frame{'s' if self.frames != 1 else ''} of {width}x{height} {depth} "
                f"{'RGB' if self.colour else 'L'} ({self.kind})")


def output_frame_info(info: VideoInfo) -> ImageInfo:
    """How one frame of `info` is written: its frame_info (alpha dropped), or one made up."""
    mode = "RGB" if len(info.shape) == 3 else "L"
    if info.frame_info is not None:
        return ImageInfo(info.frame_info.bit_depth, mode, None, info.frame_info.format)
    dtype = np.dtype(info.dtype)
    depth = 8 if dtype == np.uint8 else 16 if dtype == np.uint16 else None
    return ImageInfo(depth, mode, None, {"npy": "NPY", "tiff": "TIFF"}.get(info.kind, "PNG"))

