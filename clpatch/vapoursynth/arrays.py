"""NumPy arrays to and from clips, for tests, benchmarks and scripts that make or check
frames in NumPy: `clip_from_array`, `clip_to_array`, and `frames` (a clip's frames in order,
requested ahead in parallel as `VideoNode.frames()` does).

`VideoNode.frames()` of VapourSynth R79 can hang for good at a clip's end when the frames
are made by Python callbacks (as every ModifyFrame filter's are): once it has yielded the
last frame while a frame's done-callback has not run yet, it spins in compiled code that
never releases the GIL, and the callback waits for the GIL. It also spins for ever after a
frame fails, instead of raising. `frames` waits on each future instead (the GIL is released
while it waits) and raises a frame's error.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import vapoursynth as vs

__all__ = ["clip_from_array", "clip_to_array", "frames"]


def frames(clip: Any, indices: Iterable[int] | None = None,
           prefetch: int | None = None) -> Iterator[Any]:
    """The frames of `clip` (every frame, or those of `indices`) in order, `prefetch`
    requests in flight (None: `core.num_threads`), as VideoNode.frames() without its
    hang (module doc)."""
    wanted = iter(range(clip.num_frames) if indices is None else [int(n) for n in indices])
    ahead = max(1, prefetch or vs.core.num_threads)
    pending: deque[Any] = deque()
    for n in wanted:
        pending.append(clip.get_frame_async(n))
        if len(pending) >= ahead:
            break
    while pending:
        frame = pending.popleft().result()
        following = next(wanted, None)
        if following is not None:
            pending.append(clip.get_frame_async(following))
        yield frame

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


def clip_to_array(clip: Any, indices: Iterable[int] | None = None) -> np.ndarray:
    """The planes of `clip`'s frames (every frame, or those of `indices`, in that order) as
    an array (T, H, W) for one plane, (T, H, W, P) for P planes of one size; the frames are
    requested in parallel (`frames`)."""
    count = clip.format.num_planes
    if clip.format.subsampling_w or clip.format.subsampling_h:
        raise ValueError(f"clip_to_array takes planes of one size, got {clip.format.name}")
    out = [np.stack([np.asarray(f[p]) for p in range(count)], axis=-1)
           for f in frames(clip, indices)]
    array = np.stack(out)
    return array[..., 0] if count == 1 else array
