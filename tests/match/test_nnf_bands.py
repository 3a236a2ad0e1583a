"""The NNF on an `a` larger than the device allows, searched in bands of rows
(clpatch/match/nnf/bands.py): the same field as one pass, bit for bit, on NumPy and device
images, gray and colour, into NumPy or device results; b too large is refused."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.core.errors import DeviceResourceError
from clpatch.match.nnf.bands import NnfBand, plan_bands
from clpatch.match.nnf.plan import BAND, HALO, NnfPlan
from tests.helpers import random_image

PARAMS = dict(patch_size=5, k=2, pca_dims=6, candidates=8, leaf_size=8, seed=3)


def test_bands_keep_every_row_once_and_start_on_band_rows():
    for rows, kept in ((100, 7), (64, 16), (33, 32), (17, 40)):
        bands = plan_bands(rows, kept, HALO, BAND)
        assert [b.a0 for b in bands] == list(range(0, rows, kept)) or bands == [
            NnfBand(0, rows, 0, rows)]
        assert bands[-1].a1 == rows
        for b in bands:
            assert b.s % BAND == 0 and b.s <= max(0, b.a0 - HALO)
            assert b.e == min(rows, b.a1 + HALO)


def banded(runtime, shape_a, shape_b, channels, device_output, want=3):
    """A plan of at least `want` bands (the smallest memory limit tried that gives them)."""
    whole = NnfPlan(runtime, *shape_a, *shape_b, channels, device_output=device_output,
                    **PARAMS)
    assert len(whole.bands) == 1
    limit = 64 << 20
    while limit > 1024:
        plan = NnfPlan(runtime, *shape_a, *shape_b, channels, device_output=device_output,
                       tile_bytes=limit, **PARAMS)
        if len(plan.bands) >= want:
            return whole, plan
        limit = limit * 3 // 4
    raise AssertionError("no memory limit gave bands")


@pytest.mark.parametrize("channels,device", [(1, False), (3, True)])
def test_bands_give_the_field_of_one_pass(runtime, channels, device):
    shape_a, shape_b = (83, 41), (38, 35)
    a = random_image((*shape_a, channels) if channels > 1 else shape_a, seed=1)
    b = random_image((*shape_b, channels) if channels > 1 else shape_b, seed=2)
    whole, plan = banded(runtime, shape_a, shape_b, channels, device)
    if device:
        q = runtime.queue
        a, b = cla.to_device(q, a), cla.to_device(q, b)
    expected, got = whole.run(a, b), plan.run(a, b)
    for what in ("positions", "distances"):
        e, g = getattr(expected, what), getattr(got, what)
        if device:
            e, g = e.get(), g.get()
        np.testing.assert_array_equal(g, e, err_msg=f"{what}, {len(plan.bands)} bands")


def test_runtime_memory_limit_bands_the_public_call(runtime):
    a, b = random_image((70, 30), seed=4), random_image((30, 30), seed=5)
    whole, plan = banded(runtime, (70, 30), (30, 30), 1, False)
    limited = clpatch.Runtime(runtime.device, memory_limit=plan.tile_bytes)
    kw = {k: v for k, v in PARAMS.items() if k in ("patch_size", "k", "seed")}
    expected = clpatch.nnf(a, b, runtime=runtime, pca_dims=6, candidates=8, leaf_size=8, **kw)
    got = clpatch.nnf(a, b, runtime=limited, pca_dims=6, candidates=8, leaf_size=8, **kw)
    np.testing.assert_array_equal(got.positions, expected.positions)
    np.testing.assert_array_equal(got.distances, expected.distances)


def test_b_too_large_is_refused(runtime):
    with pytest.raises(DeviceResourceError, match=r"b \(60x60\)"):
        NnfPlan(runtime, 40, 40, 60, 60, 1, device_output=False, tile_bytes=20000, **PARAMS)
