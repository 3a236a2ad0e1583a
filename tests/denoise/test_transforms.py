"""The exact transform matrices of clpatch.transforms against their definitions; the BM3D
oracle's (tests/reference/bm3d_transforms.py) against PyWavelets."""

from __future__ import annotations

import numpy as np
import pytest

from clpatch.denoise import transforms as T
from tests.reference import bm3d_transforms as oracle

SIZES = [1, 2, 4, 8, 16, 32]
ATOL = 1e-14


def identity_error(a: np.ndarray) -> float:
    return float(np.abs(a - np.eye(a.shape[0])).max())


@pytest.mark.parametrize("name", ["dct", "hadamard", "haar"])
@pytest.mark.parametrize("n", SIZES)
def test_orthonormal_pairs(name, n):
    forward, inverse = T.transform_pair(name, n)
    assert forward.shape == inverse.shape == (n, n)
    assert forward.dtype == inverse.dtype == np.float64
    assert identity_error(forward @ forward.T) < ATOL
    assert identity_error(inverse @ forward) < ATOL
    np.testing.assert_array_equal(inverse, forward.T)


@pytest.mark.parametrize("n", [1, 3, 5, 7, 8, 12, 16, 32])
def test_dct_definition(n):
    c = T.dct_matrix(n)
    try:
        from scipy.fft import dct
    except ImportError:                                  # the formula itself
        k, i = np.arange(n)[:, None], np.arange(n)[None, :]
        expected = np.sqrt(2.0 / n) * np.cos(np.pi * (2 * i + 1) * k / (2 * n))
        expected[0] = np.sqrt(1.0 / n)
    else:
        expected = dct(np.eye(n), norm="ortho", axis=0)
    # cos of arguments up to ~pi n differs by a few ulp between formulations (1.9e-15 seen
    # at n = 8 on a machine without SciPy); 1e-14 is still far below float32 resolution.
    np.testing.assert_allclose(c, expected, rtol=0, atol=1e-14)
    assert identity_error(c @ c.T) < ATOL


@pytest.mark.parametrize("n", SIZES)
def test_hadamard_definition(n):
    h = T.hadamard_matrix(n)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    parity = np.vectorize(lambda v: bin(v).count("1") % 2)(i & j)
    np.testing.assert_array_equal(h, np.where(parity, -1.0, 1.0) / np.sqrt(n))
    np.testing.assert_array_equal(h, h.T)
    assert identity_error(h @ h) < ATOL
    try:
        from scipy.linalg import hadamard
    except ImportError:
        return
    np.testing.assert_array_equal(h, hadamard(n) / np.sqrt(n))


@pytest.mark.parametrize("n", SIZES)
def test_haar_definition(n):
    h = T.haar_matrix(n)
    assert identity_error(h @ h.T) < ATOL
    np.testing.assert_allclose(h[0], np.full(n, 1 / np.sqrt(n)), atol=1e-15)
    # rows [a_L, d_L, ..., d_1]: the finest details are (x[2k] - x[2k+1]) / sqrt 2
    for k in range(n // 2):
        row = np.zeros(n)
        row[2 * k], row[2 * k + 1] = 1 / np.sqrt(2), -1 / np.sqrt(2)
        np.testing.assert_allclose(h[n // 2 + k], row, atol=1e-15)
    # one level of the fast algorithm on a random vector
    x = np.random.default_rng(n).standard_normal(n)
    if n >= 2:
        coarse = (x[0::2] + x[1::2]) / np.sqrt(2)
        np.testing.assert_allclose((h @ x)[n // 2:], (x[0::2] - x[1::2]) / np.sqrt(2), atol=1e-13)
        np.testing.assert_allclose((h @ x)[:n // 2], T.haar_matrix(n // 2) @ coarse, atol=1e-13)


@pytest.mark.filterwarnings("ignore:Level value")
def test_haar_matches_pywt():
    pywt = pytest.importorskip("pywt")
    for n in (2, 4, 8, 16, 32):
        level = int(np.log2(n))
        cols = [np.hstack(pywt.wavedec(e, "haar", mode="periodization", level=level)) for e in np.eye(n)]
        np.testing.assert_allclose(T.haar_matrix(n), np.array(cols).T, atol=1e-15)


# The matrix hard-coded in the Tampere BM3D (BM3D.m, bm3d/bm4d on PyPI) for 8x8 'bior1.5',
# to the 15 digits it is written with: the values of its distinct entries, row by row.
TAMPERE_BIOR15_ROWS = {
    0: [0.343550200747110] * 8,
    1: [-0.225454819240296, -0.461645582253923, -0.461645582253923, -0.225454819240296,
        0.225454819240296, 0.461645582253923, 0.461645582253923, 0.225454819240296],
    2: [0.569359398342840, 0.402347308162280, -0.402347308162280, -0.569359398342840,
        -0.083506045090280, 0.083506045090280, -0.083506045090280, 0.083506045090280],
    3: [-0.083506045090280, 0.083506045090280, -0.083506045090280, 0.083506045090280,
        0.569359398342840, 0.402347308162280, -0.402347308162280, -0.569359398342840],
}


def test_bior15_is_the_tampere_matrix():
    forward, inverse = T.bior15_matrices(8)
    for row, values in TAMPERE_BIOR15_ROWS.items():
        np.testing.assert_allclose(forward[row], values, rtol=0, atol=1e-14)
    for k in range(4):                                    # rows 4-7: the finest Haar-like details
        expected = np.zeros(8)
        expected[2 * k], expected[2 * k + 1] = np.sqrt(0.5), -np.sqrt(0.5)
        np.testing.assert_allclose(forward[4 + k], expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose((forward ** 2).sum(1)[:2], [0.9442139234670366, 1.0557860765329634],
                               rtol=1e-13)


def test_bior15_perfect_reconstruction():
    forward, inverse = T.transform_pair("bior1.5", 8)
    assert identity_error(inverse @ forward) < ATOL
    assert identity_error(forward @ inverse) < ATOL
    assert np.abs(inverse - forward.T).max() > 0.1      # biorthogonal, not orthonormal
    patch = np.random.default_rng(1).uniform(0, 255, (8, 8))
    coeffs = forward @ patch @ forward.T
    np.testing.assert_allclose(inverse @ coeffs @ inverse.T, patch, rtol=0, atol=1e-11)


@pytest.mark.filterwarnings("ignore:Level value")
def test_bior15_from_pywt():
    """Rows = pywt's periodised 3-level bior1.5 decomposition, rows 0-3 scaled by 64/sqrt(4338),
    row 1 negated (what bior15_matrices documents)."""
    pywt = pytest.importorskip("pywt")
    cols = [np.hstack(pywt.wavedec(e, "bior1.5", mode="periodization", level=3)) for e in np.eye(8)]
    w = np.array(cols).T
    scale = np.array([1, -1, 1, 1, 1, 1, 1, 1]) * np.r_[np.full(4, 64 / np.sqrt(4338)), np.ones(4)]
    forward, inverse = T.bior15_matrices(8)
    np.testing.assert_allclose(forward, scale[:, None] * w, rtol=0, atol=1e-15)
    # the inverse is the periodised synthesis (waverec) with the same scaling undone
    for i in range(8):
        coeffs = np.eye(8)[i] / scale          # the coefficients that inverse maps to column i
        parts = [coeffs[:1], coeffs[1:2], coeffs[2:4], coeffs[4:]]
        np.testing.assert_allclose(pywt.waverec(parts, "bior1.5", mode="periodization"),
                                   inverse[:, i], rtol=0, atol=1e-14)


@pytest.mark.filterwarnings("ignore:Level value")
def test_oracle_transforms_match_pywt():
    """The oracle writes its Haar and Bior1.5 from their definitions: PyWavelets' periodised
    full decompositions are the same matrices (Bior1.5: rows 0-3 scaled by 64/sqrt(4338),
    row 1 negated, as the Tampere matrix is), and its inverses their synthesis."""
    pywt = pytest.importorskip("pywt")
    for n in (2, 4, 8, 16, 32):
        cols = [np.hstack(pywt.wavedec(e, "haar", mode="periodization", level=int(np.log2(n))))
                for e in np.eye(n)]
        forward, inverse = oracle.transform_pair("haar", n)
        np.testing.assert_allclose(forward, np.array(cols).T, rtol=0, atol=1e-15)
        np.testing.assert_allclose(inverse, forward.T, rtol=0, atol=0)
    cols = [np.hstack(pywt.wavedec(e, "bior1.5", mode="periodization", level=3))
            for e in np.eye(8)]
    scale = np.array([1, -1, 1, 1, 1, 1, 1, 1]) * np.r_[np.full(4, 64 / np.sqrt(4338)), np.ones(4)]
    forward, inverse = oracle.transform_pair("bior1.5", 8)
    np.testing.assert_allclose(forward, scale[:, None] * np.array(cols).T, rtol=0, atol=1e-14)
    for i in range(8):
        coeffs = np.eye(8)[i] / scale
        parts = [coeffs[:1], coeffs[1:2], coeffs[2:4], coeffs[4:]]
        np.testing.assert_allclose(pywt.waverec(parts, "bior1.5", mode="periodization"),
                                   inverse[:, i], rtol=0, atol=1e-13)


def test_kaiser_window():
    for p in (1, 2, 5, 8, 16):
        for beta in (0.0, 2.0, 2.5):
            k = T.kaiser_window(p, beta)
            np.testing.assert_allclose(k, np.outer(np.kaiser(p, beta), np.kaiser(p, beta)),
                                       rtol=1e-14, atol=1e-15)
            np.testing.assert_array_equal(k, k.T)
            np.testing.assert_array_equal(k, k[::-1, ::-1])
    assert T.kaiser_window(8).shape == (8, 8)
    # the 2-decimal window the Tampere code hard-codes for p = 8, beta = 2
    np.testing.assert_allclose(T.kaiser_window(8)[3, :4], [0.4325, 0.6717, 0.8644, 0.9718], atol=6e-5)


@pytest.mark.parametrize("call, error", [
    (lambda: T.transform_pair("dst", 8), ValueError),
    (lambda: T.transform_pair(3, 8), TypeError),
    (lambda: T.transform_pair("bior1.5", 4), ValueError),
    (lambda: T.bior15_matrices(16), ValueError),
    (lambda: T.hadamard_matrix(6), ValueError),
    (lambda: T.haar_matrix(12), ValueError),
    (lambda: T.haar_matrix(64), ValueError),
    (lambda: T.dct_matrix(0), ValueError),
    (lambda: T.dct_matrix(33), ValueError),
    (lambda: T.dct_matrix(8.0), TypeError),
    (lambda: T.kaiser_window(0), ValueError),
    (lambda: T.kaiser_window(8, beta=-1), ValueError),
])
def test_bad_arguments(call, error):
    with pytest.raises(error):
        call()


def test_names_are_case_insensitive_and_results_writable():
    f1, _ = T.transform_pair("DCT", 8)
    f2, _ = T.transform_pair("dct", 8)
    np.testing.assert_array_equal(f1, f2)
    f1[0, 0] = 42.0                                      # callers get their own copies
    assert T.dct_matrix(8)[0, 0] != 42.0
