"""Every search variant, neighbour table and metric against the NumPy brute force."""

import itertools
import random

import numpy as np
import pytest

import clpatch
from tests.helpers import check_search, load_image, random_image, tiered

VARIANTS = ["naive", "convolution", "square", "column"]
# The sweeps below run whole in `make test-slow`; CI runs a subset in which every variant,
# table, metric, channel count, parameter set and image shape still appears.


def applicable(variant: str, patch: int, step: int) -> bool:
    return variant != "square" or (patch, step) == (8, 4)


@pytest.mark.parametrize("variant,table,metric", tiered(
    itertools.product(VARIANTS, ["ordered", "unordered"], ["l2", "l1"]),
    keep=lambda variant, table, metric: (table == "ordered") == (metric == "l2")))
def test_variant_table_metric(runtime, variant, table, metric):
    image = random_image((37, 53), seed=1)
    config = clpatch.SearchConfig(variant, table=table)
    result = clpatch.search_patches(image, 8, 4, 21, 16, metric=metric, variant=config,
                                    runtime=runtime)
    assert result.config.variant == variant and result.config.table == table
    check_search(result, image, patch_size=8, step=4, window=21, k=16, metric=metric)


# (patch, step, k, window): a representative spread of the supported ranges.
PARAMS = [
    (2, 1, 4, 5),
    (3, 2, 8, 11),
    (5, 1, 16, 21),
    (7, 3, 8, 21),
    (4, 5, 2, 9),
    (16, 8, 32, 41),
    (6, 6, 1, 1),
    (12, 2, 16, 15),
]


STEP_VARIANTS = ["rule", "naive", "convolution", "column"]


@pytest.mark.parametrize("patch,step,k,window,variant", tiered(
    (params + (variant,) for params in PARAMS for variant in STEP_VARIANTS),
    keep=lambda *case: PARAMS.index(case[:4]) % 4 == STEP_VARIANTS.index(case[4])))
def test_patch_step_n_window(runtime, patch, step, k, window, variant):
    image = random_image((37, 53), seed=patch * 100 + step)
    result = clpatch.search_patches(image, patch, step, window, k,
                                    variant=None if variant == "rule" else variant,
                                    runtime=runtime)
    check_search(result, image, patch_size=patch, step=step, window=window, k=k)


def _sweep():
    rng = random.Random(2026)
    combos = []
    for patch, step, k, window in itertools.product(range(2, 17), range(1, 9), [1, 2, 4, 8, 16, 32],
                                                    [3, 11, 21, 41]):
        if k <= (window // 2 + 1) ** 2:
            combos.append((patch, step, k, window))
    return rng.sample(combos, 60)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("patch,step,k,window", _sweep())
def test_sweep(runtime, patch, step, k, window, variant):
    if not applicable(variant, patch, step):
        pytest.skip("square needs p=8, step=4")
    image = random_image((29 + patch, 31 + 2 * patch), seed=patch + 17 * step)
    for table in ("ordered", "unordered"):
        result = clpatch.search_patches(image, patch, step, window, k,
                                        variant=clpatch.SearchConfig(variant, table=table),
                                        runtime=runtime)
        check_search(result, image, patch_size=patch, step=step, window=window, k=k)


BORDERS = [
    ((8, 9), 8, 4, 21, 2),       # one grid row, two columns
    ((9, 8), 8, 4, 21, 2),
    ((8, 8), 8, 4, 21, 1),       # image is exactly one patch
    ((12, 15), 8, 4, 41, 16),    # image smaller than the window
    ((37, 53), 8, 4, 21, 16),    # odd sizes, last row and column off the grid
    ((40, 44), 8, 4, 21, 16),    # last row and column on the grid
    ((3, 70), 2, 1, 7, 8),       # very flat
    ((70, 3), 3, 2, 9, 4),       # very tall, patch as wide as the image
    ((1, 16), 1, 3, 5, 3),       # one row, 1x1 patches
]


def _border_kept(shape, patch, step, window, k, variant) -> bool:
    """Each shape with one variant in CI, in turn among the variants that apply to it."""
    i = BORDERS.index((shape, patch, step, window, k))
    usable = [v for v in VARIANTS if applicable(v, patch, step)]
    return variant == usable[i % len(usable)]


@pytest.mark.parametrize("shape,patch,step,window,k,variant", tiered(
    (case + (variant,) for case in BORDERS for variant in VARIANTS), keep=_border_kept))
def test_odd_sizes_and_borders(runtime, shape, patch, step, window, k, variant):
    if not applicable(variant, patch, step):
        pytest.skip("square needs p=8, step=4")
    image = random_image(shape, seed=sum(shape))
    result = clpatch.search_patches(image, patch, step, window, k, variant=variant, runtime=runtime)
    check_search(result, image, patch_size=patch, step=step, window=window, k=k)


@pytest.mark.parametrize("name,crop,patch,step,window,k", [
    ("camera", (slice(100, 228), slice(150, 310)), 8, 4, 21, 16),
    ("camera", (slice(0, 64), slice(0, 80)), 5, 1, 21, 16),
    ("text", (slice(0, 90), slice(0, 130)), 8, 4, 21, 16),      # flat paper: many exact ties
    ("coins", (slice(40, 120), slice(60, 170)), 7, 3, 15, 8),
    ("brick", (slice(0, 96), slice(0, 96)), 8, 2, 21, 32),
])
@pytest.mark.parametrize("variant", [None, "naive"])
def test_real_images(runtime, name, crop, patch, step, window, k, variant):
    image = load_image(name)[crop]
    result = clpatch.search_patches(image, patch, step, window, k, variant=variant, runtime=runtime)
    check_search(result, image, patch_size=patch, step=step, window=window, k=k)


@pytest.mark.parametrize("variant", [None, "naive", "column"])
def test_real_colour_image(runtime, variant):
    image = load_image("motorcycle_left")[40:120, 60:170]
    assert image.shape[2] == 3
    result = clpatch.search_patches(image, 8, 4, 21, 16, variant=variant, runtime=runtime)
    check_search(result, image, patch_size=8, step=4, window=21, k=16)


@pytest.mark.parametrize("variant,metric,channels", tiered(
    itertools.product(VARIANTS, ["l2", "l1"], [2, 3, 4]),
    keep=lambda variant, metric, channels: (VARIANTS.index(variant) + (metric == "l1")
                                            + channels) % 3 == 0))
def test_multichannel(runtime, channels, metric, variant):
    image = random_image((29, 34, channels), seed=channels)
    result = clpatch.search_patches(image, 8, 4, 15, 8, metric=metric, variant=variant,
                                    runtime=runtime)
    check_search(result, image, patch_size=8, step=4, window=15, k=8, metric=metric)


def test_full_camera_image_rule_variant(runtime):
    image = load_image("camera")
    result = clpatch.search_patches(image, runtime=runtime)
    assert result.config.variant == "square" and result.config.source == "rule"
    check_search(result, image, patch_size=8, step=4, window=21, k=16)


def test_results_do_not_depend_on_variant(runtime):
    """Distances are the same whichever variant runs (up to float rounding)."""
    image = random_image((45, 47), seed=9)
    base = clpatch.search_patches(image, 8, 4, 21, 16, variant="naive", runtime=runtime)
    for variant in ("convolution", "square", "column"):
        other = clpatch.search_patches(image, 8, 4, 21, 16, variant=variant, runtime=runtime)
        np.testing.assert_allclose(other.distances, base.distances, rtol=3e-5, atol=1e-2)


@pytest.mark.parametrize("step,width", [(4, 43), (3, 34)])
def test_border_column_alone_in_a_work_group(runtime, step, width):
    """The row-band kernels search the grid's last column (off the lattice) themselves; here
    it falls alone in the last work-group (group 16: 3 lattice columns per group at steps 3
    and 4), which then starts at it. The last row is off the lattice too."""
    image = random_image((30, width), seed=width)
    config = clpatch.SearchConfig("column", group=16)
    result = clpatch.search_patches(image, 8, step, 15, 8, variant=config, runtime=runtime)
    assert (len(result.grid_x) - 1) % 3 == 0 and result.grid_x[-1] % step
    assert result.grid_y[-1] % step
    check_search(result, image, patch_size=8, step=step, window=15, k=8)
