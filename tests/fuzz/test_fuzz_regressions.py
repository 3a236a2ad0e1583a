"""The defects the fuzz tests found, as plain tests (each failed before its fix)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import clpatch


def test_knn_vectors_errors_name_its_arguments(runtime):
    good = np.ones((4, 2), np.float32)
    with pytest.raises(TypeError, match="queries must have a real numeric dtype"):
        clpatch.knn_vectors(np.ones((1, 1), bool), good[:, :1], 1, runtime=runtime)
    with pytest.raises(ValueError, match="queries or references contains NaN"):
        clpatch.knn_vectors(good, np.array([[math.nan, 0.0]], np.float32), 1, runtime=runtime)
    with pytest.raises(ValueError, match="references must be a non-empty"):
        clpatch.knn_vectors(good, np.ones((0, 2), np.float32), 1, runtime=runtime)


@pytest.mark.parametrize(("args", "error", "name"), [
    ((2**31, 1, 1), ValueError, "size"),        # took all memory (a list of 2³¹ ints)
    ((10**30, 1, 1), ValueError, "size"),
    ((5, 6, 1), ValueError, "patch_size"),      # IndexError (empty list)
    ((5, 0, 1), ValueError, "patch_size"),
    ((5, 1, 0), ValueError, "step"),            # range() arg 3 must not be zero
    ((5, 1.0, 1), TypeError, "patch_size"),
])
def test_grid_positions_checks_its_arguments(args, error, name):
    with pytest.raises(error, match=name):
        clpatch.grid_positions(*args)


def test_grid_positions_values():
    assert clpatch.grid_positions(10, 3, 4).tolist() == [0, 4, 7]
    assert clpatch.grid_positions(1, 1, 1).tolist() == [0]
    assert clpatch.grid_positions(70, 8, 100).tolist() == [0, 62]


def test_found_by_the_long_profile_and_fixed(runtime):
    """Defects the long profile reported in files outside the fuzz suite, fixed since."""
    with pytest.raises(ValueError, match="frames is empty"):
        clpatch.nlmeans_video(np.zeros((0, 0, 0), np.uint8), 20, runtime=runtime)
    with pytest.raises(ValueError, match="image must have 1 to 8 channels"):
        clpatch.nlmeans(np.zeros((16, 16, 9), np.float32), 20, runtime=runtime)
    from clpatch.denoise.vbm3d_params import video_stage_params
    s1, s2, _, _ = video_stage_params(n=1)     # the default q (2) used to exceed n
    assert (s1.q, s2.q) == (1, 1)
    with pytest.raises(ValueError, match="q must be in"):
        video_stage_params(n=1, q=2)
    da = pytest.importorskip("dask.array")
    cdask = pytest.importorskip("clpatch.dask")
    with pytest.raises(ValueError, match=r"image is empty \(shape \(8, 0\)\)"):
        cdask.bm3d(da.from_array(np.zeros((8, 0), np.float32), chunks=8), 20)
