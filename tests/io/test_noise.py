"""The PSNR's peak (`clpatch.io.noise.psnr_peak`): the nominal range the denoisers assume,
so that float data in [0, 1] is measured against 1, not 255."""

import numpy as np
import pytest

from clpatch.io.noise import psnr, psnr_peak


@pytest.mark.parametrize("clean,bit_depth,expected", [
    (np.full((4, 4), 0.5, np.float32), 8, 255.0),       # an 8-bit file read as floats
    (np.full((4, 4), 0.5, np.float32), 16, 65535.0),
    (np.linspace(0, 1, 16, dtype=np.float32).reshape(4, 4), None, 1.0),
    (np.linspace(0, 1, 16).reshape(4, 4), None, 1.0),                     # float64
    (np.linspace(0, 255, 16, dtype=np.float32).reshape(4, 4), None, 255.0),
    (np.arange(16, dtype=np.uint8).reshape(4, 4), None, 255.0),
    (np.arange(16, dtype=np.uint16).reshape(4, 4), None, 65535.0),
    (np.zeros((0, 4), np.float32), None, 255.0),        # no values: the 0–255 scale
])
def test_psnr_peak(clean, bit_depth, expected):
    assert psnr_peak(clean, bit_depth) == expected


def test_psnr_peak_refuses_other_bit_depths():
    with pytest.raises(ValueError, match="bit_depth must be 8, 16 or None, got 12"):
        psnr_peak(np.zeros((2, 2)), 12)


def test_psnr_of_unit_range_floats_uses_peak_1():
    rng = np.random.default_rng(3)
    clean = rng.random((16, 16)).astype(np.float32)
    noisy = clean + rng.normal(0, 0.05, clean.shape).astype(np.float32)
    mse = float(np.mean((noisy.astype(np.float64) - clean) ** 2))
    expected = 10 * np.log10(1.0 / mse)
    assert psnr(noisy, clean) == pytest.approx(expected)
    assert psnr(noisy, clean, psnr_peak(clean)) == pytest.approx(expected)
    # The same data on the 0–255 scale gives the same PSNR.
    assert psnr(noisy * 255, clean * 255) == pytest.approx(expected, abs=1e-4)
    assert psnr(noisy, clean, 255.0) == pytest.approx(expected + 20 * np.log10(255))
