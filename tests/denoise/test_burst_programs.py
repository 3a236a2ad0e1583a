"""A burst of a new frame size reuses the programs built for the last one (issue 43: each
new size compiled the clustering ANN again, 8–10 s on PoCL): the ANN's local-memory sizes
for a burst are those of the largest tile any frame size can have
(clpatch/match/ann/plan.py, `AnnPlan._local_sizes`)."""

from __future__ import annotations

import numpy as np
import pytest

import clpatch


def _programs(runtime) -> int:
    """Programs this runtime's cache compiled or loaded so far."""
    return runtime.programs.builds + runtime.programs.loads


@pytest.mark.parametrize("method", ["nlmeans", "bm3d"])
def test_a_new_frame_size_builds_no_new_program(runtime, method):
    rng = np.random.default_rng(3)
    # The largest tile of each axis differs between these sizes (tile 15: 29 x 37
    # positions of patch 12 have runs of 29 and 22; 33 x 50: 18 and 25, ...).
    shapes = [(3, 40, 48), (3, 44, 61), (3, 52, 57)]
    counts = []
    for shape in shapes:
        frames = rng.normal(100.0, 10.0, shape).astype(np.float32)
        out = clpatch.burst_denoise(frames, 10.0, method=method, runtime=runtime)
        assert out.shape == shape[1:] and np.isfinite(out).all()
        counts.append(_programs(runtime))
    assert counts[1] == counts[0] and counts[2] == counts[0], counts
