"""Video search: frames t - tw ... t + tw."""

import numpy as np
import pytest

import clpatch
from tests.helpers import check_search, load_image, random_image


@pytest.mark.parametrize("temporal_window", [0, 1, 2])
@pytest.mark.parametrize("variant", ["naive", "convolution", "square", "column"])
def test_video_variants(runtime, variant, temporal_window):
    frames = random_image((5, 24, 31), seed=temporal_window)
    result = clpatch.search_patches(frames, 8, 4, 9, 8, variant=variant,
                                    temporal_window=temporal_window, runtime=runtime, video=True)
    assert result.positions.shape[-1] == 3 and result.positions.shape[0] == 5
    check_search(result, frames, patch_size=8, step=4, window=9, k=8,
                 temporal_window=temporal_window, video=True)


def test_colour_video(runtime):
    frames = random_image((3, 21, 26, 3), seed=5)
    result = clpatch.search_patches(frames, 5, 2, 7, 16, temporal_window=1, runtime=runtime)
    check_search(result, frames, patch_size=5, step=2, window=7, k=16, temporal_window=1,
                 video=True)


def test_moving_real_video_finds_the_motion(runtime):
    """A real image shifted by (1, 2) pixels per frame: the best match of a reference in the
    next frame is the shifted patch, at distance zero."""
    base = load_image("camera")[100:180, 100:200]
    frames = np.stack([np.roll(base, (k, 2 * k), axis=(0, 1)) for k in range(4)])
    result = clpatch.search_patches(frames, 8, 4, 11, 8, temporal_window=1, runtime=runtime)
    check_search(result, frames, patch_size=8, step=4, window=11, k=8, temporal_window=1,
                 video=True)
    # Interior reference of frame 1: its own patch and the shifted ones in frames 0 and 2.
    i, j = 5, 5
    y, x = result.grid_y[i], result.grid_x[j]
    zero = {tuple(p) for p, d in zip(result.positions[1, i, j], result.distances[1, i, j],
                                      strict=True) if d == 0}
    assert {(1, y, x), (0, y - 1, x - 2), (2, y + 1, x + 2)} <= zero


def test_three_d_input_is_colour_unless_video(runtime):
    data = random_image((4, 20, 22), seed=1)
    as_colour = clpatch.search_patches(np.moveaxis(data, 0, -1), 4, 2, 5, 4, runtime=runtime)
    as_video = clpatch.search_patches(data, 4, 2, 5, 4, runtime=runtime, video=True)
    assert as_colour.positions.shape == (len(as_colour.grid_y), len(as_colour.grid_x), 4, 2)
    assert as_video.positions.shape == (4, len(as_video.grid_y), len(as_video.grid_x), 4, 3)
