"""The fused input check of the windowed search: a float32 single-channel input (already
planar) is searched as it is, its values checked by the search's first launch instead of a
conversion launch; results and errors are those of the converted path.

The images are 37×53 with 8×8 patches, step 4, window 21, n 16 (the square search plus
naive launches for the off-lattice border), the configuration tests/core/test_inputs.py
builds, so few tests here build kernels of their own.
"""

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core import kernels as kernel_module
from clpatch.core.kernels import render
from clpatch.core.profiles import family_profile
from clpatch.core.upload import needs_conversion
from clpatch.core.volumes import as_volume
from clpatch.match.window.params import check_search_request
from clpatch.match.window.plan import SearchPlan
from tests.helpers import check_search, random_image

SHAPE = (37, 53)
ARGS = dict(patch_size=8, step=4, window=21, k=16)


def search(image, runtime, **kwargs):
    return clpatch.search_patches(image, runtime=runtime, **{**ARGS, **kwargs})


def last_plan(runtime):
    cache = runtime.plan_cache()
    return cache[next(reversed(cache))]


def stages(runtime):
    return [stage for stage, _ in last_plan(runtime).last_events]


def host(array):
    return array.get() if isinstance(array, cla.Array) else np.asarray(array)


def assert_same(result, expected):
    np.testing.assert_array_equal(host(result.positions), host(expected.positions))
    np.testing.assert_array_equal(host(result.distances), host(expected.distances))


def test_needs_conversion_only_for_inputs_not_already_planar(runtime):
    image = random_image(SHAPE, seed=3)
    device = cla.to_device(runtime.queue, image)
    wide = cla.to_device(runtime.queue, np.zeros((SHAPE[0] + 1, SHAPE[1]), np.float32))
    assert not needs_conversion(as_volume(image))
    assert not needs_conversion(as_volume(image[:, ::-1]))          # host: copied contiguous
    assert not needs_conversion(as_volume(device))
    assert not needs_conversion(as_volume(image[..., None]))        # (H, W, 1)
    assert not needs_conversion(as_volume(np.stack([image, image]), video=True))
    assert needs_conversion(as_volume(wide[1:]))                    # device, offset
    assert needs_conversion(as_volume(device[:, ::2]))              # device, strided
    assert needs_conversion(as_volume(image.astype(np.float64)))
    assert needs_conversion(as_volume(image.astype(np.uint8)))
    assert needs_conversion(as_volume(np.stack([image, image], axis=-1)))   # two channels


def test_planar_inputs_skip_the_conversion_and_match_the_converted_path(runtime):
    image = random_image(SHAPE, seed=4)
    padded = cla.to_device(runtime.queue, np.concatenate([image[:1], image]))
    converted = search(padded[1:], runtime)                  # offset: goes through to_planar
    assert "convert" in stages(runtime)
    assert last_plan(runtime).fused
    device = search(cla.to_device(runtime.queue, image), runtime)
    assert stages(runtime) == ["search"] * len(stages(runtime)) and stages(runtime)
    assert_same(device, converted)
    numpy = search(image, runtime)
    assert stages(runtime)[0] == "upload" and "convert" not in stages(runtime)
    assert_same(numpy, converted)
    check_search(numpy, image, **ARGS)


def test_check_words_stay_right_across_fused_and_converted_calls(runtime):
    """Each run folds its values into its own check word and clears the next run's,
    whichever path it takes: an error never leaks into the next call, nor a clean run
    hides one."""
    image = random_image(SHAPE, seed=5)
    bad = image.copy()
    bad[36, 52] = np.nan
    huge = image.copy()
    huge[0, 0] = 1e30
    padded = cla.to_device(runtime.queue, np.zeros((SHAPE[0] + 1, SHAPE[1]), np.float32))

    def converted(values):
        padded[1:].set(values)
        return padded[1:]

    expected = search(image, runtime)
    calls = [
        (lambda: cla.to_device(runtime.queue, bad), "NaN or infinite"),
        (lambda: cla.to_device(runtime.queue, image), None),
        (lambda: converted(huge), "overflow"),
        (lambda: cla.to_device(runtime.queue, image), None),
        (lambda: cla.to_device(runtime.queue, huge), "overflow"),
        (lambda: converted(image), None),
        (lambda: bad, "NaN or infinite"),
        (lambda: image, None),
        (lambda: cla.to_device(runtime.queue, image), None),
    ]
    for make, error in calls:
        if error is None:
            assert_same(search(make(), runtime), expected)
        else:
            with pytest.raises(ValueError, match=error):
                search(make(), runtime)


def test_fused_call_enqueues_only_the_search(runtime, monkeypatch):
    """A repeated call on a planar device array: its search launches and nothing else is
    enqueued (no conversion, no buffer allocated by the plan), and the launch that
    checks repeats its arguments, so no argument but the output buffers is set again."""
    image = cla.to_device(runtime.queue, random_image(SHAPE, seed=6))
    search(image, runtime)
    search(image, runtime)
    launches, set_args, buffers = [], [], []
    real_launch, real_buffer = cl.enqueue_nd_range_kernel, cl.Buffer
    monkeypatch.setattr(kernel_module.cl, "enqueue_nd_range_kernel",
                        lambda queue, k, *a, **kw: launches.append(k.function_name)
                        or real_launch(queue, getattr(k, "wrapped", k), *a, **kw))
    monkeypatch.setattr(cl, "Buffer", lambda *a, **kw: buffers.append(a) or real_buffer(*a, **kw))
    plan = last_plan(runtime)
    template = plan.template(plan.chunks[0], len(plan.grid_y))    # the run's, one chunk
    for k in {launch[0] for launch in template.launches} | set(template.first_kernels):
        monkeypatch.setattr(k, "kernel", _Recorder(k.kernel, set_args))
    search(image, runtime)
    monkeypatch.undo()
    assert launches and all(name.startswith("search_") for name in launches), launches
    assert not buffers
    # Per launch, at most the two output buffers change (positions, distances).
    assert len(set_args) <= 2 * len(launches), set_args


class _Recorder:
    """A `pyopencl.Kernel` stand-in recording the indices its `set_arg` is called with."""

    def __init__(self, kernel, record):
        self.wrapped, self._record = kernel, record

    def set_arg(self, index, value):
        self._record.append(index)
        return self.wrapped.set_arg(index, value)

    def __getattr__(self, name):
        return getattr(self.wrapped, name)


def test_fused_video_matches_the_converted_path(runtime):
    video = np.stack([random_image((20, 24), seed=s) for s in range(3)])
    args = dict(patch_size=4, step=3, window=7, k=4, temporal_window=1)
    fused = clpatch.search_patches(cla.to_device(runtime.queue, video), runtime=runtime, **args)
    assert stages(runtime) and set(stages(runtime)) == {"search"}
    converted = clpatch.search_patches(video.astype(np.float64), runtime=runtime, **args)
    assert "convert" in stages(runtime)
    assert_same(fused, converted)
    bad = video.copy()
    bad[2, 19, 23] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        clpatch.search_patches(cla.to_device(runtime.queue, bad), runtime=runtime, **args)


@pytest.mark.parametrize("variant,extra", [
    ("naive", {}), ("rowband", dict(step=4, width=64, rows=2, batch=4)),
    ("square", dict(tile=8, batch=4))])
def test_check_parameter_adds_the_fold_and_leaves_other_sources_unchanged(variant, extra):
    params = dict(variant=variant, patch=8, n=16, channels=1, metric="l2", table="ordered",
                  video=False, **extra)
    profile = family_profile("nvidia")
    plain = render("match/search.cl.mako", profile, **params)
    assert render("match/search.cl.mako", profile, check=False, **params).replace(
        "check=False, ", "") == plain
    checking = render("match/search.cl.mako", profile, check=True, **params)
    assert "check_count" not in plain and "atomic_max" not in plain
    assert "const int check_count)" in checking and "atomic_max(check + word" in checking


def test_plans_made_without_fused_check_keep_their_kernels_and_convert(runtime):
    """The filters make their plans without `fused_check`: kernels without the check's
    arguments, and `run` converts (and checks) every input."""
    image = random_image(SHAPE, seed=7)
    fused = search(image, runtime)
    request = check_search_request(patch_size=ARGS["patch_size"], step=ARGS["step"],
                                   window=ARGS["window"], n=ARGS["k"], channels=1)  # its n: k
    plan = SearchPlan(runtime, 1, *SHAPE, 1, request, fused.config)
    assert not plan.fused
    assert plan.main_kernel.get_info(cl.kernel_info.NUM_ARGS) < last_plan(
        runtime).main_kernel.get_info(cl.kernel_info.NUM_ARGS)
    plain = plan.run(image)
    assert "convert" in [stage for stage, _ in plan.last_events]
    assert_same(plain, fused)
    bad = image.copy()
    bad[36, 52] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        plan.run(bad)
