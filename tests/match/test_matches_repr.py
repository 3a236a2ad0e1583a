"""A Matches prints as one line (shape, k, how it was found, the distances' range), not
as kilobytes of array dumps."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla

import clpatch


def matches(distances, positions, config=None):
    gy, gx = distances.shape[-3:-1]
    return clpatch.Matches(positions, distances, np.arange(gy, dtype=np.int32),
                           np.arange(gx, dtype=np.int32), 8, 1, 0, distances.shape[-1], "l2",
                           0, config)


def test_repr_is_one_short_line():
    d = np.sort(np.random.default_rng(0).random((120, 160, 16)).astype(np.float32), -1) * 100
    m = matches(d, np.zeros(d.shape + (2,), np.int32))
    text = repr(m)
    assert "\n" not in text and len(text) < 200, text
    assert "120x160 references x k=16" in text and "patch 8" in text and "given" in text
    assert f"distances {d.min():.4g}..{d.max():.4g}" in text and "NumPy" in text
    video = matches(d[None].repeat(3, 0), np.zeros((3, *d.shape, 3), np.int32))
    assert "3 frames x 120x160" in repr(video)


def test_repr_of_an_engine_and_device_arrays(runtime):
    image = np.random.default_rng(1).random((30, 40)).astype(np.float32) * 255
    m = clpatch.search_patches(cla.to_device(runtime.queue, image), k=4, runtime=runtime)
    text = repr(m)
    assert "device arrays" in text and m.config.variant in text and "distances" not in text
