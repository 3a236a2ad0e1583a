"""Checking image and video arguments, and describing them for the engines.

Engines see every input as frames × rows × columns × channels (`Volume`), whatever the
caller passed: a NumPy array or a `pyopencl.array.Array`, any real dtype, `(H, W)`,
`(H, W, C)`, `(T, H, W)` or `(T, H, W, C)`. Array-likes (nested lists or tuples of numbers,
objects NumPy converts through `__array__` or the array interface) become NumPy arrays, as
`numpy.asarray` makes them; `channels_last`, the first step of every denoiser, converts them
too, so that the rest of a call sees one array.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl.array as cla

FLT_MAX = float(np.finfo(np.float32).max)

# NumPy dtype -> OpenCL C type of the conversion kernel's source elements.
CL_TYPES = {
    np.dtype(np.uint8): "uchar", np.dtype(np.int8): "char",
    np.dtype(np.uint16): "ushort", np.dtype(np.int16): "short",
    np.dtype(np.uint32): "uint", np.dtype(np.int32): "int",
    np.dtype(np.uint64): "ulong", np.dtype(np.int64): "long",
    np.dtype(np.float16): "half", np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
}


@dataclass(frozen=True)
class Volume:
    """An input seen as (frames, rows, cols, channels); `video` says whether the frame
    axis was the caller's (else frames == 1 and results drop that axis)."""

    array: Any
    frames: int
    rows: int
    cols: int
    channels: int
    video: bool
    on_device: bool

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.array.dtype)

    def element_strides(self) -> tuple[int, int, int, int]:
        """Strides in elements of (frame, row, column, channel) of the caller's array."""
        item = self.dtype.itemsize
        strides = [s // item for s in self.array.strides]
        if any(s * item != b for s, b in zip(strides, self.array.strides, strict=True)):
            raise ValueError("image strides must be multiples of its item size")
        if not self.video:
            strides = [0, *strides]
        if len(strides) == 3:
            strides.append(0)
        return tuple(strides)  # type: ignore[return-value]

    def element_offset(self) -> int:
        return int(getattr(self.array, "offset", 0)) // self.dtype.itemsize


#: What an image argument may be, for error messages.
ACCEPTED_ARRAYS = ("a NumPy array, a pyopencl.array.Array or an array-like of real numbers "
                   "(e.g. nested lists of equal lengths)")


def _is_array_like(value: Any) -> bool:
    return isinstance(value, (list, tuple)) or any(
        hasattr(value, attr) for attr in ("__array__", "__array_interface__", "__array_struct__"))


def as_array(image: Any, *, name: str = "image") -> Any:
    """`image` as a NumPy array or the `pyopencl.array.Array` it is: array-likes are converted
    with `numpy.asarray`; TypeError naming `name` for anything else (strings, None, scalars,
    ragged lists)."""
    if isinstance(image, (np.ndarray, cla.Array)):
        return image
    if _is_array_like(image):
        try:
            array = np.asarray(image)
        except (ValueError, TypeError) as exc:   # ragged nesting, failing __array__
            raise TypeError(f"{name} must be {ACCEPTED_ARRAYS}; NumPy cannot convert this "
                            f"{type(image).__name__}: {exc}") from None
        if isinstance(array, np.ndarray):
            return array
    raise TypeError(f"{name} must be {ACCEPTED_ARRAYS}, got {type(image).__name__}")


def as_volume(image: Any, *, name: str = "image", video: bool | None = None,
              temporal_window: int = 0) -> Volume:
    """Check `image` and describe it as a Volume (its `array` is `as_array(image)`).

    Layouts: 2-D is (H, W); 4-D is (T, H, W, C) video; 3-D is (H, W, C) colour, unless
    `video` is True or `temporal_window` > 0, which make it (T, H, W) grayscale video.
    """
    image = as_array(image, name=name)
    on_device = isinstance(image, cla.Array)
    dtype = np.dtype(image.dtype)
    if dtype.kind not in "uif" or dtype not in CL_TYPES:
        raise TypeError(f"{name} must have a real numeric dtype (unsigned/signed integers, "
                        f"float16/32/64), got {dtype}")
    ndim = len(image.shape)
    if video is None:
        video = ndim == 4 or (ndim == 3 and temporal_window > 0)
    if video:
        if ndim not in (3, 4):
            raise ValueError(f"{name} as video must be (T, H, W) or (T, H, W, C), got shape {image.shape}")
        frames, rows, cols = image.shape[:3]
        channels = image.shape[3] if ndim == 4 else 1
    else:
        if ndim not in (2, 3):
            raise ValueError(f"{name} must be (H, W) or (H, W, C) (or video (T, H, W[, C])), "
                             f"got shape {image.shape}")
        frames = 1
        rows, cols = image.shape[:2]
        channels = image.shape[2] if ndim == 3 else 1
    if min(frames, rows, cols, channels) == 0:
        raise ValueError(f"{name} is empty (shape {image.shape})")
    return Volume(image, frames, rows, cols, channels, bool(video), on_device)


def planned_volume(shape: Any, dtype: Any = np.float32, *, name: str = "image",
                   video: bool | None = None, temporal_window: int = 0) -> Volume:
    """The Volume of a device input of `shape` and `dtype` that a plan is made for
    (`clpatch.make_plan`), checked as `as_volume` checks an array; its `array` is a
    read-only NumPy view of one zero of `dtype` (it holds no data)."""
    if isinstance(shape, (int, np.integer)) or not isinstance(shape, (tuple, list)):
        raise TypeError(f"shape must be a tuple of ints, got {shape!r}")
    dims = []
    for size in shape:
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
            raise TypeError(f"shape must be a tuple of ints, got {tuple(shape)!r}")
        if size < 1:
            raise ValueError(f"shape must hold positive sizes, got {tuple(shape)}")
        dims.append(int(size))
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a NumPy dtype, got {dtype!r}") from None
    stand_in = np.broadcast_to(np.zeros((), dtype), tuple(dims))
    volume = as_volume(stand_in, name=name, video=video, temporal_window=temporal_window)
    return Volume(volume.array, volume.frames, volume.rows, volume.cols, volume.channels,
                  volume.video, True)


def default_data_range(dtype: Any, peak: float | None) -> float:
    """The nominal range of data of `dtype` whose largest |value| is `peak` (None: unknown):
    the type's maximum for integers wider than 8 bits, 1 for floats within [-1, 1], else
    255. The one rule behind BM3D/VBM3D's `data_range=None` and the PSNR's peak."""
    dtype = np.dtype(dtype)
    if dtype.kind in "ui" and dtype.itemsize > 1:
        return float(np.iinfo(dtype).max)
    if dtype.kind == "f" and peak is not None and peak <= 1.0:
        return 1.0
    return 255.0


def magnitude_limit(patch_size: int, channels: int) -> float:
    """Largest |value| for which a float32 patch distance (a sum of patch_size² · channels
    squared differences) cannot overflow."""
    return math.sqrt(FLT_MAX / (8.0 * patch_size * patch_size * channels))


def check_planned(volume: Volume, shape: tuple[int, int, int, int], device_output: bool,
                  context: Any) -> None:
    """The checks of a plan's `run`: the input has the planned (frames, rows, cols,
    channels), is the planned kind of array, and lives in the plan's context."""
    if (volume.frames, volume.rows, volume.cols, volume.channels) != tuple(shape):
        raise ValueError(f"image shape {volume.array.shape} differs from the planned shape")
    if volume.on_device != device_output:
        raise TypeError("this plan was made for "
                        + ("device" if device_output else "NumPy") + " arrays")
    if volume.on_device and volume.array.context != context:
        raise ValueError("image lives in another OpenCL context than the runtime's")


def channels_last(image: Any, channel_axis: int | None, video: bool) -> tuple[Any, Any]:
    """The image with channels last, and a function restoring the caller's layout
    (`channel_axis` as in scikit-image; None: already last). Device arrays must already
    have their channels last. An array-like image comes back as a NumPy array; what cannot
    be one comes back as it is, for `as_volume` to refuse under the caller's name."""
    with contextlib.suppress(TypeError):
        image = as_array(image)
    if channel_axis is None or not isinstance(image, (np.ndarray, cla.Array)):
        return image, lambda out: out
    ndim = len(image.shape)
    if isinstance(channel_axis, np.ndarray) and channel_axis.ndim == 0:
        channel_axis = channel_axis[()]
    if not isinstance(channel_axis, (int, np.integer)) or isinstance(channel_axis,
                                                                      (bool, np.bool_)):
        raise TypeError(f"channel_axis must be an integer or None, got {channel_axis!r}")
    expected = 4 if video else 3
    if ndim != expected:
        raise ValueError(f"channel_axis={channel_axis} needs a {expected}-D input, got shape {image.shape}")
    if not -ndim <= channel_axis < ndim:
        raise ValueError(f"channel_axis must be in [{-ndim}, {ndim - 1}], got {channel_axis}")
    axis = channel_axis % ndim
    if axis == ndim - 1:
        return image, lambda out: out
    if isinstance(image, cla.Array):
        raise ValueError("device arrays must have their channels last (channel_axis=-1)")
    return np.moveaxis(image, axis, -1), lambda out: np.moveaxis(out, -1, axis)
