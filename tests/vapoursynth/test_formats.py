"""The filters on other formats (16-bit, YUV planes of their own sizes, YUV444 through the
opponent space) and their errors: variable format or size, arguments out of range."""

from __future__ import annotations

import numpy as np
import pytest

import clpatch
from tests.vapoursynth.common import gray_video, require_vapoursynth, to_uint8, vs

require_vapoursynth()

import clpatch.vapoursynth as cvs  # noqa: E402
from clpatch.vapoursynth.formats import clip_format  # noqa: E402
from clpatch.vapoursynth.jobs import plane_jobs  # noqa: E402


def yuv_clip(frames: np.ndarray, format: int) -> tuple:
    """A YUV clip whose luma is `frames` (uint8) and whose chroma planes are noisy ramps at
    their own (subsampled) size; returns (clip, [luma, u, v] arrays (T, h, w))."""
    core = vs.core
    t, h, w = frames.shape
    blank = core.std.BlankClip(format=format, width=w, height=h, length=t)
    ch, cw = h >> blank.format.subsampling_h, w >> blank.format.subsampling_w
    rng = np.random.default_rng(2)
    ramp = np.linspace(90, 170, cw)[None, None, :] + rng.normal(0, 12, (t, ch, cw))
    chroma = [np.clip(np.rint(ramp), 0, 255).astype(np.uint8),
              np.clip(np.rint(ramp[:, ::-1, ::-1]), 0, 255).astype(np.uint8)]
    planes = [frames, *chroma]

    def fill(n, f):
        out = f.copy()
        for p in range(3):
            np.asarray(out[p])[...] = planes[p][n]
        return out

    return core.std.ModifyFrame(blank, blank, fill), planes


def planes_of(clip, p: int) -> np.ndarray:
    return np.stack([np.asarray(f[p]).copy() for f in cvs.frames(clip)])


def test_gray16_sigma_in_8bit_units(runtime, threads):
    noisy = gray_video(frames=3).astype(np.uint16) * 257
    clip = cvs.bm3d(cvs.clip_from_array(noisy), 20.0, device=runtime)
    assert clip.format.name == "Gray16"
    expected = np.stack([clpatch.bm3d(f, 20.0 * 257, data_range=65535, peak=65535,
                                      runtime=runtime) for f in noisy])
    np.testing.assert_array_equal(cvs.clip_to_array(clip),
                                  np.clip(np.rint(expected), 0, 65535).astype(np.uint16))


def test_ten_bit_and_half_float(runtime, threads):
    """YUV420P10: sigma x 1023 / 255, data_range and peak 1023; GRAYH: float16 frames in
    [0, 1], stored back as half (the device kernel's vstore_half, NumPy's rounding)."""
    luma = gray_video(frames=2, size=(32, 64))
    clip, _ = yuv_clip(luma, vs.YUV420P10)
    ten = luma.astype(np.uint16) * 4
    clip = vs.core.std.ModifyFrame(clip, clip, lambda n, f: _with_luma(f, ten[n]))
    expected = np.stack([clpatch.bm3d(f, 20.0 * 1023 / 255, data_range=1023, peak=1023,
                                      runtime=runtime) for f in ten])
    np.testing.assert_array_equal(planes_of(cvs.bm3d(clip, 20.0, device=runtime), 0),
                                  np.clip(np.rint(expected), 0, 1023).astype(np.uint16))
    half = (luma / 255.0).astype(np.float16)
    blank = vs.core.std.BlankClip(format=vs.GRAYH, width=64, height=32, length=2)
    clip = vs.core.std.ModifyFrame(blank, blank, lambda n, f: _with_luma(f, half[n]))
    out = cvs.nlmeans(clip, 20.0, device=runtime)
    assert out.format.name == "GrayH"
    expected = np.stack([clpatch.nlmeans(f, 20.0 / 255, peak=4.0, runtime=runtime)
                         for f in half])
    np.testing.assert_array_equal(planes_of(out, 0), expected.astype(np.float16))


def _with_luma(frame, values):
    out = frame.copy()
    np.asarray(out[0])[...] = values
    return out


def test_yuv420_luma_by_default_and_planes_at_their_size(runtime, threads):
    luma = gray_video(frames=3, size=(32, 48))
    clip, planes = yuv_clip(luma, vs.YUV420P8)
    out = cvs.nlmeans(clip, 20.0, device=runtime)
    assert out.format.name == "YUV420P8"
    expected = np.stack([clpatch.nlmeans(f, 20.0, peak=255, runtime=runtime) for f in luma])
    np.testing.assert_array_equal(planes_of(out, 0), to_uint8(expected))
    for p in (1, 2):                                    # copied as they are
        np.testing.assert_array_equal(planes_of(out, p), planes[p])
    every = cvs.bm3d(clip, [20.0, 12.0, 12.0], planes=[0, 1, 2], device=runtime)
    for p, s in ((1, 12.0), (2, 12.0)):                 # 16x24 planes, each on its own
        chroma = np.stack([clpatch.bm3d(f, s, data_range=255, peak=255, runtime=runtime)
                           for f in planes[p]])
        np.testing.assert_array_equal(planes_of(every, p), to_uint8(chroma))
    only_v = cvs.vbm3d(clip, [0, 0, 12.0], planes=[0, 1, 2], radius=1, device=runtime)
    np.testing.assert_array_equal(planes_of(only_v, 0), luma)    # sigma 0: copied
    assert not np.array_equal(planes_of(only_v, 2), planes[2])


def test_yuv444_chroma_through_the_opponent_space(runtime, threads):
    """chroma=True: the pseudo-RGB the job hands clpatch is transformed back exactly (no
    filtering: the round trip alone), and filtering it denoises all three planes."""
    luma = gray_video(frames=4, size=(32, 40))
    clip, planes = yuv_clip(luma, vs.YUV444P8)
    fmt = clip_format(clip, "test")
    (job,) = plane_jobs(fmt, (20.0, 12.0, 12.0), True, "test")
    assert job.kind == "yuv" and job.scales[0] == pytest.approx(1.0)
    frame = [planes[p][0] for p in range(3)]
    back = job.unpack(job.pack(frame))
    for p in range(3):
        np.testing.assert_allclose(back[p], frame[p], atol=1e-3)
    rgb = job.pack(frame)                               # the opponent Y of it is the luma
    np.testing.assert_allclose(rgb.mean(axis=-1), frame[0], atol=1e-3)
    assert np.abs(rgb).max() <= job.peak
    out = cvs.bm3d(clip, [20.0, 12.0, 12.0], chroma=True, device=runtime)
    assert out.format.name == "YUV444P8"
    for p in range(3):
        changed = np.abs(planes_of(out, p).astype(int) - planes[p]).mean()
        assert changed > 2, (p, changed)


def test_variable_format_and_size_are_refused():
    core = vs.core
    a = core.std.BlankClip(format=vs.GRAY8, width=32, height=24, length=2)
    b = core.std.BlankClip(format=vs.RGBS, width=32, height=24, length=2)
    c = core.std.BlankClip(format=vs.GRAY8, width=40, height=24, length=2)
    with pytest.raises(ValueError, match="variable format"):
        cvs.bm3d(core.std.Splice([a, b], mismatch=True), 5)
    with pytest.raises(ValueError, match="variable frame size"):
        cvs.vbm3d(core.std.Splice([a, c], mismatch=True), 5)
    with pytest.raises(TypeError, match="VideoNode"):
        cvs.nlmeans(np.zeros((2, 8, 8)), 5)


@pytest.mark.parametrize("call, match", [
    (lambda c, y, r: cvs.bm3d(c, 5, radius=2), "use clpatch.vapoursynth.vbm3d"),
    (lambda c, y, r: cvs.vbm3d(c, 5, radius=-1), "radius must be an integer >= 0"),
    (lambda c, y, r: cvs.nlmeans(c, 5, temporal_radius=1.5), "temporal_radius must be"),
    (lambda c, y, r: cvs.bm3d(r, [5, 6, 7]), "one sigma for its three planes"),
    (lambda c, y, r: cvs.bm3d(y, 5, chroma=True), "chroma=True takes YUV444"),
    (lambda c, y, r: cvs.bm3d(c, 5, planes=[1]), r"indices in \[0, 1\)"),
    (lambda c, y, r: cvs.bm3d(c, -1), "sigma must be finite and >= 0"),
    (lambda c, y, r: cvs.bm3d(c, [5, 5]), "one value or one per plane"),
    (lambda c, y, r: cvs.bm3d(y, [0, 5, 5], planes=[0]), "nothing to filter"),
    (lambda c, y, r: cvs.bm3d(c, 5, ref=r), "ref must have the clip's format"),
    (lambda c, y, r: cvs.vbm3d(c, 5, chunk_frames=0), "chunk_frames must be"),
    (lambda c, y, r: cvs.bm3d(c, 5, lanes=0), "lanes must be"),
])
def test_arguments_are_checked_when_the_script_builds_the_filter(call, match, runtime):
    core = vs.core
    gray = core.std.BlankClip(format=vs.GRAY8, width=32, height=24, length=3)
    yuv = core.std.BlankClip(format=vs.YUV420P8, width=32, height=24, length=3)
    rgb = core.std.BlankClip(format=vs.RGBS, width=32, height=24, length=3)
    with pytest.raises((ValueError, TypeError), match=match):
        call(gray, yuv, rgb)


def test_clpatch_parameters_pass_through_and_are_checked(runtime):
    gray = vs.core.std.BlankClip(format=vs.GRAY8, width=32, height=24, length=3)
    with pytest.raises(ValueError, match="patch_size"):
        cvs.bm3d(gray, 5, patch_size=40, device=runtime)
    with pytest.raises(TypeError, match="unknown parameter"):
        cvs.nlmeans(gray, 5, colour_space="x", device=runtime)
