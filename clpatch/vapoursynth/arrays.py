"""NumPy arrays to and from clips, for tests, benchmarks and scripts that make or check
frames in NumPy: `clip_from_array` and `clip_to_array`."""

from __future__ import annotations

from typing import Any

import numpy as np
import vapoursynth as vs

__all__ = ["clip_from_array", "clip_to_array"]

_FORMATS = {("u1", 1): vs.GRAY8, ("u2", 1): vs.GRAY16, ("f4", 1): vs.GRAYS,
            ("u1", 3): vs.RGB24, ("u2", 3): vs.RGB48, ("f4", 3): vs.RGBS}


def clip_from_array(frames: Any, format: Any = None, *, fps: tuple[int, int] = (24, 1)) -> Any:
    """A clip of the frames of `frames`, (T, H, W) (one plane) or (T, H, W, P) (P planes of
    one size, e.g. R, G, B), whose dtype and plane count pick GRAY8/16/S or RGB24/48/S
    unless `format` (a vapoursynth preset such as `vs.YUV444P8`) says otherwise. The values
    are copied as they are (float clips hold [0, 1] by VapourSynth's convention). The
    array is kept; frame n is copied from it when VapourSynth asks for it."""
    frames = np.asarray(frames)
    if frames.ndim == 3:
        frames = frames[..., None]
    if frames.ndim != 4 or frames.shape[0] < 1:
        raise ValueError(f"frames must be (T, H, W) or (T, H, W, P), got shape {frames.shape}")
    if format is None:
        format = _FORMATS.get((frames.dtype.str[1:], frames.shape[3]))
        if format is None:
            raise ValueError(f"no default format for {frames.shape[3]} planes of "
                             f"{frames.dtype}: pass format=")
    core = vs.core
    blank = core.std.BlankClip(format=format, width=frames.shape[2], height=frames.shape[1],
                               length=frames.shape[0], fpsnum=fps[0], fpsden=fps[1])
    if blank.format.num_planes != frames.shape[3] or blank.format.subsampling_w \
            or blank.format.subsampling_h:
        raise ValueError(f"format {blank.format.name} takes {blank.format.num_planes} planes "
                         f"of one size; frames have {frames.shape[3]}")

    def fill(n: int, f: Any) -> Any:
        out = f.copy()
        for p in range(frames.shape[3]):
            np.asarray(out[p])[...] = frames[n, :, :, p]
        return out

    return core.std.ModifyFrame(blank, blank, fill)


def clip_to_array(clip: Any, frames: Any = None) -> np.ndarray:
    """The planes of `clip`'s frames (every frame, or the indices `frames`) as an array
    (T, H, W) for one plane, (T, H, W, P) for P planes of one size; frames are requested
    in parallel (`clip.frames()`) when all are wanted."""
    count = clip.format.num_planes
    if clip.format.subsampling_w or clip.format.subsampling_h:
        raise ValueError(f"clip_to_array takes planes of one size, got {clip.format.name}")
    source = clip.frames() if frames is None else (clip.get_frame(int(n)) for n in frames)
    out = [np.stack([np.asarray(f[p]) for p in range(count)], axis=-1) for f in source]
    array = np.stack(out)
    return array[..., 0] if count == 1 else array
