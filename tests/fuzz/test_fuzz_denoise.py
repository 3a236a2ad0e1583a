"""Fuzzing the filters: nlmeans, nlmeans_video, bm3d, vbm3d, burst_denoise and
estimate_sigma (see this package's docstring for the rule)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import event, given
from hypothesis import strategies as st

import clpatch

from .harness import call, check_image
from .strategies import HOSTILE, HOSTILE_FLOAT, LONG, SIGMAS, ints, start

#: channel_axis values: valid ones, and hostile ones (out of range, wrong type).
AXES_VALID = st.sampled_from([None, None, -1, 0, 1, 2])
AXES_HOSTILE = [3, -4, 7, 2**63, "0", 1.0, True, math.nan, [0]]
VIDEO_AXES_VALID = st.sampled_from([None, None, -1, 0, 1, 2, 3])

#: Arguments a function's errors may name besides its own parameters (none: the long profile
#: found nlmeans_video calling its `frames` "image", since fixed).
MISNAMED: dict[str, tuple[str, ...]] = {}


def place_channels(drawn, axis, video: bool):
    """(the value to pass, the shape the output must have): the image with its last axis
    moved to `axis` when that is a valid axis of a NumPy colour image."""
    value, ndim = drawn.value, len(drawn.shape)
    colour = ndim == (4 if video else 3)
    if (isinstance(value, np.ndarray) and colour and isinstance(axis, int)
            and not isinstance(axis, bool) and -ndim <= axis < ndim):
        moved = np.moveaxis(value, -1, axis)
        return moved, moved.shape
    return value, drawn.shape


def filtered(fn, pick, drawn, video: bool, axis, **kwargs):
    """Call the filter `fn` on `drawn` with channel_axis `axis`, checking the rule, and the
    output when there is one; returns the error (None when it ran)."""
    value, shape = place_channels(drawn, axis, video)
    out, error = call(fn, value, channel_axis=axis, extra_names=MISNAMED.get(fn.__name__, ()),
                      **kwargs)
    event(f"{fn.__name__}: {'hostile' if pick.hostile else 'valid'} example "
          f"{'refused' if error is not None else 'ran'}")
    if error is None:
        check_image(out, shape, drawn.on_device)
        assert drawn.valid, "a non-finite or non-real input was accepted"
    return error


def _axis_accepted(drawn, axis, video: bool) -> bool:
    """Whether `axis` is a valid channel_axis for the value passed: None, or the axis
    `place_channels` put a NumPy colour image's channels on."""
    return axis is None or place_channels(drawn, axis, video)[0] is not drawn.value


def _fits(drawn, patch: int, video: bool, channels: tuple[int, ...]) -> bool:
    """Whether a valid image is large enough for `patch`, with channels it accepts."""
    shape = drawn.shape
    if len(shape) != (4 if video else 3):
        shape = (*shape, 1)
    spatial = shape[1:3] if video else shape[:2]
    return min(shape[:-1]) > 0 and min(spatial) >= patch and shape[-1] in channels


@given(data=st.data())
def test_nlmeans(runtime, data):
    pick = start(data)
    img = pick.array(queue=runtime.queue, channels=(None, 1, 3) + ((2, 8, 9) if LONG else ()))
    p = pick(ints([8, 4], 1, 32))
    step = pick(ints([4, 2], 1, 32))
    window = pick(ints([21], 1, 127))
    k = pick(ints([16], 1, 32))
    h = pick(SIGMAS, HOSTILE_FLOAT, default=True)
    beta = pick(st.sampled_from([1.05, 0.5, 10.0]), [0.0, -1.0, math.nan, "x", None])
    agg = pick(st.sampled_from([None, "buffers", "fixed", "cas"] if LONG else [None]),
               ["bogus", 3])
    search_channels = pick(st.sampled_from(["luminance", "all"]), ["x", None])
    search = pick(st.sampled_from(["window", "ann"] if LONG else ["window"]), ["bogus", None])
    peak = pick(st.sampled_from([None, 1e4]), [1.0, 0.0, -1.0, math.inf, "1"])
    axis = pick(AXES_VALID, AXES_HOSTILE)
    error = filtered(clpatch.nlmeans, pick, img, False, axis, sigma=pick(SIGMAS, HOSTILE_FLOAT),
                     patch_size=p, step=step, window=window, k=k, h=h, flat_beta=beta,
                     aggregation=agg, search_channels=search_channels, search=search,
                     peak=peak, runtime=runtime)
    if error is not None and not pick.hostile and step <= p and axis is None and agg is None:
        assert not _fits(img, p, False, tuple(range(1, 9))) or search == "ann", \
            f"a valid call was refused: {error!r}"


@given(data=st.data())
def test_nlmeans_video(runtime, data):
    pick = start(data)
    vid = pick.array(frames=True, queue=runtime.queue, max_frames=4)
    tw = pick(ints([1], 0, 63))
    p = pick(ints([4], 1, 32))
    step = pick(ints([2], 1, 32))
    axis = pick(VIDEO_AXES_VALID, AXES_HOSTILE)
    error = filtered(clpatch.nlmeans_video, pick, vid, True, axis,
                     sigma=pick(SIGMAS, HOSTILE_FLOAT), temporal_window=tw, patch_size=p,
                     step=step, runtime=runtime)
    if error is not None and not pick.hostile and axis is None and step <= p:
        assert not _fits(vid, p, True, (1, 3)), f"a valid call was refused: {error!r}"


@given(data=st.data())
def test_bm3d(runtime, data):
    pick = start(data)
    img = pick.array(queue=runtime.queue, channels=(None, 1, 3) + ((2, 4) if LONG else ()))
    preset = pick(st.sampled_from(["fast", "reference"] if LONG else ["fast"]),
                  ["bogus", None, 1])
    p = pick(ints([8], 2, 16), [*HOSTILE, 1, 17], default=True)
    k = pick(st.sampled_from([1, 2, 4, 8, 16, 32, (16, 32)] if LONG else [16]),
             [3, 0, 64, (16, 64), (8,), "8"], default=True)
    window = pick(ints([21], 1, 127), [0, -3, 10**6, (5, 5, 5), "21"], default=True)
    stages = pick(st.sampled_from([1, 2] if LONG else [2]), [0, 3, "2", 2.0], default=True)
    lam = pick(SIGMAS, HOSTILE_FLOAT, default=True)
    mu2 = pick(SIGMAS, HOSTILE_FLOAT, default=True)
    data_range = pick(SIGMAS, HOSTILE_FLOAT, default=True)
    stagger = pick(st.sampled_from([True, False] if LONG else [False]), ["yes", 1],
                   default=True)
    axis = pick(AXES_VALID, AXES_HOSTILE)
    error = filtered(clpatch.bm3d, pick, img, False, axis, sigma=pick(SIGMAS, HOSTILE_FLOAT),
                     preset=preset, patch_size=p, k=k, window=window, stages=stages,
                     lambda_3d=lam, mu2=mu2, data_range=data_range, stagger=stagger,
                     runtime=runtime)
    # Documented refusals of valid values: other channel counts than 1 and 3, an image
    # smaller than the patch (the preset's 8 when none is given).
    if error is not None and not pick.hostile and _axis_accepted(img, axis, False):
        assert not _fits(img, 8 if p is None else p, False, (1, 3)), \
            f"a valid call was refused: {error!r}"


@given(data=st.data())
def test_vbm3d(runtime, data):
    pick = start(data)
    # (2 channels, refused, only in hostile examples: valid ones must run)
    vid = pick.array(frames=True, queue=runtime.queue, max_frames=4,
                     channels=(None, 1, 3, 2) if pick.hostile else (None, 1, 3))
    radius = pick(ints([1], 0, 8), default=True)
    p = pick(ints([8], 2, 16), [*HOSTILE, 1, 17], default=True)
    q = pick(ints([2], 1, 8), [0, -1, 10**6, "2"], default=True)
    stages = pick(st.sampled_from([1, 2] if LONG else [2]), [0, 3, "2"], default=True)
    variant = pick(st.sampled_from([None, "naive", "window", "patch"] if LONG else [None]),
                   ["bogus", 4])
    axis = pick(VIDEO_AXES_VALID, AXES_HOSTILE)
    error = filtered(clpatch.vbm3d, pick, vid, True, axis, sigma=pick(SIGMAS, HOSTILE_FLOAT),
                     temporal_radius=radius, patch_size=p, q=q, stages=stages,
                     variant=variant, runtime=runtime)
    # Documented refusals of valid values: frames smaller than the patch (8 when none is
    # given), no frames.
    if error is not None and not pick.hostile and _axis_accepted(vid, axis, True):
        assert not _fits(vid, 8 if p is None else p, True, (1, 3)), \
            f"a valid call was refused: {error!r}"


@given(data=st.data())
def test_burst_denoise(runtime, data):
    pick = start(data)
    vid = pick.array(frames=True, queue=runtime.queue, max_frames=4, channels=(None, 1, 3))
    reference = pick(st.integers(0, 3), [-1, 2**31, 1.0, "0", None])
    tile = pick(ints([15], 1, 64))
    k = pick(ints([16], 1, 32))
    p = pick(ints([12], 1, 32))
    step = pick(ints([2], 1, 32))
    method = pick(st.just("nlmeans"), ["bm3d", None, 1])
    h = pick(SIGMAS, HOSTILE_FLOAT, default=True)
    out, error = call(clpatch.burst_denoise, vid.value, pick(SIGMAS, HOSTILE_FLOAT),
                      reference=reference, method=method, tile=tile, k=k, patch_size=p,
                      step=step, h=h, runtime=runtime)
    event(f"burst_denoise: {'hostile' if pick.hostile else 'valid'} example "
          f"{'refused' if error is not None else 'ran'}")
    if error is None:
        check_image(out, vid.shape[1:], vid.on_device)
        assert vid.valid


@given(data=st.data())
def test_estimate_sigma(runtime, data):
    pick = start(data)
    img = pick.array(queue=runtime.queue, channels=(None, 1, 3, 2),
                     sides=st.one_of(st.integers(0, 30), st.integers(20, 70)))
    axis = pick(AXES_VALID, AXES_HOSTILE)
    value, shape = place_channels(img, axis, False)
    out, error = call(clpatch.estimate_sigma, value, channel_axis=axis, runtime=runtime)
    event(f"estimate_sigma: {'hostile' if pick.hostile else 'valid'} example "
          f"{'refused' if error is not None else 'ran'}")
    if error is None:
        assert img.valid
        if len(shape) == 2:
            assert isinstance(out, float) and math.isfinite(out) and out >= 0
        else:
            channels = shape[axis if axis is not None else -1]
            assert isinstance(out, np.ndarray) and out.shape == (channels,)
            assert np.isfinite(out).all() and (out >= 0).all()
    elif not pick.hostile and min(img.shape[:2]) >= 27 and axis is None:
        raise AssertionError(f"a valid call was refused: {error!r}")
