"""Each filter of clpatch.vapoursynth equals clpatch's own function on the same frames (GRAY8
and RGBS clips), in the clip's format, whatever order VapourSynth asks for the frames in.

The filters pass clpatch data_range = the format's peak and a fixed peak (255 for 8-bit
clips, 4.0 for float ones: clpatch.vapoursynth.formats), so the expected frames are the
functions' results with those arguments; 8-bit results are rounded and clipped."""

from __future__ import annotations

import numpy as np
import pytest

import clpatch
from tests.vapoursynth.common import gray_video, require_vapoursynth, rgb_video, to_uint8

require_vapoursynth()

import clpatch.vapoursynth as cvs  # noqa: E402

SIGMA = 20.0
#: (filter, its arguments, clpatch's function of a whole video (T, H, W[, 3]) in the clip's
#: values, with sigma in those values and the fixed peak)
CASES = {
    "bm3d": (cvs.bm3d, {}, lambda v, s, peak, rt: np.stack(
        [clpatch.bm3d(f, s, data_range=peak_range(peak), peak=peak, runtime=rt) for f in v])),
    "vbm3d": (cvs.vbm3d, {"radius": 1, "chunk_frames": 5}, lambda v, s, peak, rt: clpatch.vbm3d(
        v, s, temporal_radius=1, data_range=peak_range(peak), peak=peak, runtime=rt)),
    "nlmeans": (cvs.nlmeans, {}, lambda v, s, peak, rt: np.stack(
        [clpatch.nlmeans(f, s, peak=peak, runtime=rt) for f in v])),
    "nlmeans_temporal": (cvs.nlmeans, {"temporal_radius": 2, "chunk_frames": 4},
                         lambda v, s, peak, rt: clpatch.nlmeans_video(
                             v, s, temporal_window=2, peak=peak, runtime=rt)),
}


def peak_range(peak: float) -> float:
    """The data_range the filters pass with this fixed peak: 255 for 8-bit, 1 for float."""
    return 255.0 if peak == 255.0 else 1.0


@pytest.mark.parametrize("case", sorted(CASES))
def test_gray8_equals_clpatch(case, runtime, threads):
    # 64 columns: rows without padding, copied straight from and into the frames' memory
    # (the RGBS clip's 40 columns of floats are padded to 48: they go through a copy)
    noisy = gray_video(frames=11, size=(32, 64))
    run, kwargs, function = CASES[case]
    clip = run(cvs.clip_from_array(noisy), SIGMA, device=runtime, **kwargs)
    assert clip.format.name == "Gray8" and clip.num_frames == 11
    out = cvs.clip_to_array(clip)
    expected = to_uint8(function(noisy, SIGMA, 255.0, runtime))
    np.testing.assert_array_equal(out, expected)
    assert np.abs(out.astype(int) - noisy).mean() > 3          # it did denoise


@pytest.mark.parametrize("case", sorted(CASES))
def test_rgbs_equals_clpatch(case, runtime, threads):
    noisy = rgb_video(frames=7)
    run, kwargs, function = CASES[case]
    clip = run(cvs.clip_from_array(noisy), SIGMA, device=runtime, **kwargs)
    assert clip.format.name == "RGBS"
    out = cvs.clip_to_array(clip)
    expected = function(noisy, SIGMA / 255.0, 4.0, runtime)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("case", ["bm3d", "vbm3d", "nlmeans_temporal", "vbm3d_default_chunks"])
def test_fifty_frames_out_of_order(case, runtime, threads):
    """50 frames asked for at once in a shuffled order (4 threads): the same frames as
    clpatch's function on the whole video; the temporal filters' chunks (and chunks
    enqueued ahead) are made in whatever order the requests come."""
    noisy = gray_video(frames=50, size=(24, 32), seed=3)
    run, kwargs, function = CASES[case.replace("_default_chunks", "")]
    if case.endswith("default_chunks"):
        kwargs = {"radius": 1}
    clip = run(cvs.clip_from_array(noisy), SIGMA, device=runtime, **kwargs)
    order = np.random.default_rng(5).permutation(50)
    futures = {int(n): clip.get_frame_async(int(n)) for n in order}
    out = np.stack([np.asarray(futures[n].result()[0]) for n in range(50)])
    np.testing.assert_array_equal(out, to_uint8(function(noisy, SIGMA, 255.0, runtime)))
    again = cvs.clip_to_array(clip, order[:7])                  # asked for again
    np.testing.assert_array_equal(again, out[order[:7]])


def test_bm3d_ref_is_the_basic_estimate(runtime, threads):
    """ref (BM3DCUDA's): stage 2 alone with ref as its basic estimate, as clpatch.bm3d's
    guide_role="oracle"."""
    noisy = gray_video(frames=3)
    basic = to_uint8(np.stack([clpatch.bm3d(f, SIGMA, stages=1, runtime=runtime)
                               for f in noisy]))
    clip = cvs.bm3d(cvs.clip_from_array(noisy), SIGMA, ref=cvs.clip_from_array(basic),
                    device=runtime)
    expected = np.stack([clpatch.bm3d(f, SIGMA, guide=b, guide_role="oracle", data_range=255,
                                      peak=255, runtime=runtime)
                         for f, b in zip(noisy, basic, strict=True)])
    np.testing.assert_array_equal(cvs.clip_to_array(clip), to_uint8(expected))


@pytest.mark.parametrize("frames, chunk", [(1, None), (2, 1), (5, 2), (7, 3)])
def test_short_clips_and_small_chunks(frames, chunk, runtime, threads):
    """Chunks of one frame and clips shorter than a halo: the chunks' inputs (the clip
    shifted and held, clamped at both ends) still give the whole-video functions' frames."""
    noisy = gray_video(frames=frames, size=(24, 32))
    clip = cvs.clip_from_array(noisy)
    out = cvs.clip_to_array(cvs.vbm3d(clip, SIGMA, radius=1, chunk_frames=chunk,
                                      device=runtime)).reshape(noisy.shape)
    np.testing.assert_array_equal(out, to_uint8(CASES["vbm3d"][2](noisy, SIGMA, 255.0, runtime)))
    out = cvs.clip_to_array(cvs.nlmeans(clip, SIGMA, temporal_radius=2, chunk_frames=chunk,
                                        device=runtime)).reshape(noisy.shape)
    np.testing.assert_array_equal(
        out, to_uint8(CASES["nlmeans_temporal"][2](noisy, SIGMA, 255.0, runtime)))
