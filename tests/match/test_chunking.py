"""Memory plan and launch splitting: inputs processed in bands of grid rows, chunks of frames
and several launches give the same results as one pass, and the oracle's.

The runtime's memory limit (`Runtime.memory_limit`) and the launch limit
(`clpatch.match.window.layout.MAX_PAIRS_PER_LAUNCH`) are made small so that 37×53 images and 5-frame
videos are split. Each test searches with a fresh plan cache (the runtime's own plans are
put back afterwards), so plans made under a small budget never serve other tests.
"""

import dataclasses

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
import clpatch.match.window.layout as layout_module
from tests.helpers import check_search, random_image, tiered

VARIANTS = ["square", "column", "convolution", "naive"]
IMAGE = dict(patch_size=8, step=4, window=21, k=16)                      # test_search_basic's
VIDEO = dict(patch_size=8, step=4, window=9, k=8, temporal_window=1)      # test_search_video's
IMAGE_SHAPE = (37, 53)       # grid rows 0..28 + 29, columns 0..44 + 45: last ones off the lattice
VIDEO_SHAPE = (5, 25, 31)    # grid rows 0..16 + 17, columns 0..20 + 23: last ones off the lattice


def fresh_search(runtime, monkeypatch, image, args, variant, *, video=False):
    """search_patches on a plan made now (under whatever is monkeypatched); returns the
    result and the plan."""
    runtime.plan_cache().clear()
    result = clpatch.search_patches(image, variant=variant, runtime=runtime, video=video, **args)
    (plan,) = runtime.plan_cache().values()
    return result, plan


def host(result):
    if isinstance(result.positions, cla.Array):
        return dataclasses.replace(result, positions=result.positions.get(),
                                   distances=result.distances.get())
    return result


def assert_identical(result, expected):
    result, expected = host(result), host(expected)
    np.testing.assert_array_equal(result.positions, expected.positions)
    np.testing.assert_array_equal(result.distances, expected.distances)


def launches(plan) -> int:
    return sum(1 for name, _ in plan.last_events if name == "search")


def split_and_compare(runtime, monkeypatch, image, args, variant, patch, *, video=False):
    """Run once unsplit, once with `patch` applied; both must agree with each other and the
    oracle. Returns (unsplit plan, split plan)."""
    whole, whole_plan = fresh_search(runtime, monkeypatch, image, args, variant, video=video)
    with monkeypatch.context() as m:
        patch(m)
        split, split_plan = fresh_search(runtime, monkeypatch, image, args, variant, video=video)
    assert split.config.variant == variant
    assert_identical(split, whole)
    reference = image.get() if isinstance(image, cla.Array) else image
    check_search(host(split), reference, video=video, **args)
    return whole_plan, split_plan


def budget(m, runtime, nbytes):
    """A search budget of `nbytes`: the search takes a third of the memory limit."""
    m.setattr(runtime, "memory_limit", 3 * nbytes)


# ---- bands of grid rows and chunks of frames (memory budget) ---------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
def test_image_in_row_bands(runtime, monkeypatch, variant):
    image = random_image(IMAGE_SHAPE, seed=31)
    # 6000 bytes: the 9 grid rows' results (1664 bytes each) and rows need several bands.
    whole, split = split_and_compare(runtime, monkeypatch, image, IMAGE, variant,
                                     lambda m: budget(m, runtime, 6000))
    assert len(whole.chunks) == 1
    assert len(split.chunks) >= 3
    assert [c.g0 for c in split.chunks] == sorted({c.g0 for c in split.chunks})
    assert split.chunks[0].g0 == 0 and split.chunks[-1].g1 == len(split.grid_y)
    assert all(a.g1 == b.g0 for a, b in zip(split.chunks, split.chunks[1:], strict=False))
    # The band with the off-lattice row starts inside the image (its upload is a true band).
    assert split.chunks[-1].y_lo > 0 and split.chunks[0].y_hi < IMAGE_SHAPE[0]


# CI: two variants (the others' frame chunks run in the combined test below and under
# make test-slow).
@pytest.mark.parametrize("variant", tiered([(v,) for v in VARIANTS],
                                           keep=lambda v: v in ("column", "naive")))
def test_video_in_frame_chunks(runtime, monkeypatch, variant):
    video = random_image(VIDEO_SHAPE, seed=32)
    # 10000 bytes: a frame's results take 4032 bytes and a frame 3100: frames are split,
    # rows are not.
    whole, split = split_and_compare(runtime, monkeypatch, video, VIDEO, variant,
                                     lambda m: budget(m, runtime, 10000), video=True)
    assert len(whole.chunks) == 1
    assert len({c.r0 for c in split.chunks}) >= 2
    assert {(c.g0, c.g1) for c in split.chunks} == {(0, len(split.grid_y))}
    # Chunks after the first upload the frame before them (temporal window 1).
    assert any(c.f_lo == c.r0 - 1 for c in split.chunks)


@pytest.mark.parametrize("variant", VARIANTS)
def test_video_in_frame_chunks_and_row_bands(runtime, monkeypatch, variant):
    video = random_image(VIDEO_SHAPE, seed=33)
    # 6100 bytes: one frame with its neighbours no longer fits, one grid row band of them does.
    _, split = split_and_compare(runtime, monkeypatch, video, VIDEO, variant,
                                 lambda m: budget(m, runtime, 6100), video=True)
    assert len({c.r0 for c in split.chunks}) == VIDEO_SHAPE[0]
    assert len({c.g0 for c in split.chunks}) >= 2


@pytest.mark.parametrize("variant", ["square", "naive"])
def test_device_input_in_row_bands(runtime, monkeypatch, variant):
    """A device input whose result fits one buffer is converted band by band, written in
    place into the device result."""
    image = random_image(IMAGE_SHAPE, seed=34)
    args = {**IMAGE, "k": 2}         # 1872 bytes of results: they fit, the image (7844) does not
    device = cla.to_device(runtime.queue, image)
    whole, split = split_and_compare(runtime, monkeypatch, device, args, variant,
                                     lambda m: budget(m, runtime, 6000))
    assert len(whole.chunks) == 1 and len(split.chunks) >= 3
    assert split.device_output
    assert_identical(clpatch.search_patches(image, variant=variant, runtime=runtime, **args),
                     clpatch.search_patches(device, variant=variant, runtime=runtime, **args))


@pytest.mark.parametrize("variant", ["square"])
def test_device_video_in_frame_chunks(runtime, monkeypatch, variant):
    """A device video is converted a few frames at a time; each chunk's results land at
    their frames of the device result."""
    video = random_image(VIDEO_SHAPE, seed=41)
    args = {**VIDEO, "k": 2}         # 5040 bytes of results: they fit, the video (15500) does not
    device = cla.to_device(runtime.queue, video)
    _, split = split_and_compare(runtime, monkeypatch, device, args, variant,
                                 lambda m: budget(m, runtime, 10000), video=True)
    assert len({c.r0 for c in split.chunks}) >= 2


def test_budget_too_small_for_one_row(runtime, monkeypatch):
    budget(monkeypatch, runtime, 1000)
    runtime.plan_cache().clear()
    with pytest.raises(clpatch.DeviceResourceError, match=r"one row of references .*1000 bytes"):
        clpatch.search_patches(random_image(IMAGE_SHAPE, seed=35), runtime=runtime, **IMAGE)
    with pytest.raises(clpatch.DeviceResourceError, match="one row of references"):
        clpatch.search_patches(random_image(VIDEO_SHAPE, seed=35), runtime=runtime, video=True,
                               **VIDEO)
    assert not runtime.plan_cache()          # no half-made plan is kept


def test_device_result_too_large_for_one_buffer(runtime, monkeypatch):
    budget(monkeypatch, runtime, 10000)               # the result takes 14976 bytes
    runtime.plan_cache().clear()
    device = cla.to_device(runtime.queue, random_image(IMAGE_SHAPE, seed=36))
    with pytest.raises(clpatch.DeviceResourceError, match=r"14976 bytes .*10000 bytes.*NumPy array"):
        clpatch.search_patches(device, runtime=runtime, **IMAGE)
    # The same budget processes a NumPy input in bands.
    result = clpatch.search_patches(device.get(), runtime=runtime, **IMAGE)
    check_search(result, device.get(), **IMAGE)


@pytest.mark.parametrize("shape,args,nbytes", [
    (IMAGE_SHAPE, IMAGE, 6000),
    (IMAGE_SHAPE, {**IMAGE, "k": 2}, 6000),
    (VIDEO_SHAPE, VIDEO, 10000),
    (VIDEO_SHAPE, VIDEO, 6100),
], ids=["image", "image-n2", "video-frames", "video-frames-rows"])
def test_every_chunk_fits_the_budget(runtime, monkeypatch, shape, args, nbytes):
    budget(monkeypatch, runtime, nbytes)
    runtime.plan_cache().clear()
    clpatch.search_patches(random_image(shape, seed=37), runtime=runtime, **args)
    (plan,) = runtime.plan_cache().values()
    per_ref = args["k"] * 4 * plan.dim
    for c in plan.chunks:
        image_bytes = (c.f_hi - c.f_lo) * plan.channels * (c.y_hi - c.y_lo) * plan.cols * 4
        result_bytes = (c.r1 - c.r0) * (c.g1 - c.g0) * len(plan.grid_x) * per_ref
        assert image_bytes <= nbytes and result_bytes <= nbytes, (c, image_bytes, result_bytes)


# ---- several launches per chunk (MAX_PAIRS_PER_LAUNCH) ---------------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
def test_image_launches_split_by_rows(runtime, monkeypatch, variant):
    image = random_image(IMAGE_SHAPE, seed=38)
    whole, split = split_and_compare(
        runtime, monkeypatch, image, IMAGE, variant,
        lambda m: m.setattr(layout_module, "MAX_PAIRS_PER_LAUNCH", 1))
    assert len(split.chunks) == 1
    # One launch per lattice row at least (9 grid rows, the last off the lattice: the
    # naive kernel's own launch for the square variant, the last row-band launch's border
    # row otherwise).
    assert launches(split) >= split.lattice_rows and launches(split) > launches(whole)
    assert split.lattice_rows == len(split.grid_y) - 1


@pytest.mark.parametrize("variant", VARIANTS)
def test_video_launches_split_by_frames(runtime, monkeypatch, variant):
    video = random_image(VIDEO_SHAPE, seed=39)
    # Room for two frames of lattice rows per launch: (6 columns x 243 candidates) x 10 rows.
    whole, split = split_and_compare(
        runtime, monkeypatch, video, VIDEO, variant,
        lambda m: m.setattr(layout_module, "MAX_PAIRS_PER_LAUNCH", 6 * 243 * 10), video=True)
    assert launches(split) > launches(whole)


@pytest.mark.parametrize("variant", VARIANTS)
def test_video_launches_split_by_frames_and_rows(runtime, monkeypatch, variant):
    video = random_image(VIDEO_SHAPE, seed=40)

    def patch(m):
        m.setattr(layout_module, "MAX_PAIRS_PER_LAUNCH", 1)
        budget(m, runtime, 10000)

    whole, split = split_and_compare(runtime, monkeypatch, video, VIDEO, variant, patch,
                                     video=True)
    assert len(split.chunks) >= 2
    # A launch per frame and lattice row at least (the border row may share the last).
    assert launches(split) >= VIDEO_SHAPE[0] * split.lattice_rows


@pytest.mark.parametrize("frames,rows,cols,candidates,limit", [
    (1, 9, 12, 441, 1 << 31),
    (5, 6, 6, 243, 1),
    (5, 6, 6, 243, 6 * 243 * 10),
    (5, 6, 6, 243, 6 * 243 * 4),
    (3, 7, 1, 100, 250),
])
def test_launch_splits_cover_everything_once(monkeypatch, frames, rows, cols, candidates, limit):
    """The (frame range, row range) pieces tile frames × rows exactly, each under the limit
    unless it is a single row of one frame."""
    monkeypatch.setattr(layout_module, "MAX_PAIRS_PER_LAUNCH", limit)
    pieces = layout_module.launch_pieces(frames, rows, cols, candidates)
    covered = np.zeros((frames, rows), int)
    for f0, f1, r0, r1 in pieces:
        assert 0 <= f0 < f1 <= frames and 0 <= r0 < r1 <= rows
        covered[f0:f1, r0:r1] += 1
        pairs = (f1 - f0) * (r1 - r0) * cols * candidates
        assert pairs <= limit or (f1 - f0, r1 - r0) == (1, 1)
    np.testing.assert_array_equal(covered, 1)


def test_cpu_launches_are_bounded(runtime):
    """On a CPU device a launch evaluates at most MAX_PAIRS_PER_LAUNCH_CPU distances (so Ctrl-C
    and cancel leave little queued work); the pieces give the GPU profiles' single launch's
    result exactly."""
    from clpatch.match.window.layout import MAX_PAIRS_PER_LAUNCH_CPU

    image = np.random.default_rng(7).random((200, 200)).astype(np.float32)
    cpu = clpatch.Runtime(runtime.device, profile="cpu")
    gpu = clpatch.Runtime(runtime.device, profile="nvidia")
    kw = dict(patch_size=5, step=1, window=21, k=4, variant="naive")
    a = clpatch.search_patches(image, runtime=cpu, **kw)
    b = clpatch.search_patches(image, runtime=gpu, **kw)
    np.testing.assert_array_equal(a.positions, b.positions)
    np.testing.assert_array_equal(a.distances, b.distances)
    plan = list(cpu.plan_cache().values())[-1]
    launches = sum(1 for stage, _ in plan.last_events if stage == "search")
    assert launches >= 196 * 196 * 441 / MAX_PAIRS_PER_LAUNCH_CPU
