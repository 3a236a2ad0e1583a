"""Exact transform matrices of BM3D/CBM3D/VBM3D, as float64 NumPy arrays.

Every transform is a pair of n×n matrices ``(forward, inverse)`` acting on column vectors:
``coefficients = forward @ x`` and ``x = inverse @ coefficients``. A 2-D patch transform is
the separable ``forward @ patch @ forward.T`` (inverse ``inverse @ coeffs @ inverse.T``); the
1-D transform along a stack of k patches is ``forward(k)`` applied to the stack axis.
These matrices are baked into the OpenCL kernels, so they are small and computed exactly here
(closed forms, no iterative solvers).

- ``dct``: orthonormal DCT-II (SciPy's ``dct(norm="ortho")``); inverse = transpose.
- ``hadamard``: Sylvester-ordered Walsh–Hadamard matrix divided by √n (symmetric,
  orthonormal, its own inverse); n a power of 2.
- ``haar``: orthonormal Haar wavelet transform with full decomposition (log2 n levels),
  rows ordered like ``pywt.wavedec``: ``[a_L, d_L, d_{L-1}, …, d_1]``; at every level
  ``a[k] = (x[2k] + x[2k+1])/√2`` and ``d[k] = (x[2k] − x[2k+1])/√2``. Inverse = transpose.
- ``bior1.5``: the 8-point biorthogonal (CDF 1,5) wavelet matrix of the Tampere BM3D
  (see :func:`bior15_matrices` for exactly what it is); the inverse is its exact dual, *not*
  its transpose.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

__all__ = [
    "MAX_SIZE",
    "TRANSFORMS",
    "bior15_matrices",
    "dct_matrix",
    "haar_matrix",
    "hadamard_matrix",
    "kaiser_window",
    "transform_pair",
]

#: Largest transform size accepted (patch sizes and stack sizes in BM3D are at most 32).
MAX_SIZE = 32

#: Names accepted by :func:`transform_pair`.
TRANSFORMS = ("dct", "bior1.5", "hadamard", "haar")

_R2 = math.sqrt(2.0)


def _check_size(n, what: str, *, power_of_two: bool, allowed=None) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{what}: size n must be an int, got {type(n).__name__}")
    n = int(n)
    if allowed is not None:
        if n not in allowed:
            raise ValueError(f"{what}: size n must be one of {sorted(allowed)}, got {n}")
        return n
    if not 1 <= n <= MAX_SIZE:
        raise ValueError(f"{what}: size n must be in [1, {MAX_SIZE}], got {n}")
    if power_of_two and n & (n - 1):
        raise ValueError(f"{what}: size n must be a power of 2 (1, 2, 4, …, {MAX_SIZE}), got {n}")
    return n


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


# --------------------------------------------------------------------------- DCT-II


@cache
def _dct(n: int) -> np.ndarray:
    k = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    # cos(π m / 2n) with m = (2i+1)k reduced to [0, 4n) first: exact integer phase, one rounding.
    m = ((2 * i + 1) * k) % (4 * n)
    m = np.cos(np.pi * m / (2 * n)) * math.sqrt(2.0 / n)
    m[0] = math.sqrt(1.0 / n)
    return _readonly(m)


def dct_matrix(n: int) -> np.ndarray:
    """Orthonormal DCT-II matrix: ``C[k, i] = s_k cos(π (2i+1) k / (2n))`` with
    ``s_0 = √(1/n)``, ``s_k = √(2/n)``; ``C @ x == scipy.fft.dct(x, norm="ortho")``."""
    return _dct(_check_size(n, "dct_matrix", power_of_two=False)).copy()


# --------------------------------------------------------------------------- Hadamard


@cache
def _hadamard(n: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return _readonly(h / math.sqrt(n))


def hadamard_matrix(n: int) -> np.ndarray:
    """Normalised Walsh–Hadamard matrix in Sylvester (natural) order:
    ``H[i, j] = (−1)^popcount(i & j) / √n``; symmetric and orthonormal (``H @ H = I``)."""
    return _hadamard(_check_size(n, "hadamard_matrix", power_of_two=True)).copy()


# --------------------------------------------------------------------------- wavelets


def _periodic_step(size: int, low, high, shift: int) -> np.ndarray:
    """One periodised two-channel analysis step on ``size`` samples as a size×size matrix:
    rows ``k < size/2`` give ``Σ_j low[j] x[(2k + shift − j) mod size]``, rows ``size/2 + k``
    the same with ``high`` (the convention of ``pywt.dwt(mode="periodization")`` for
    ``shift = len(filter)//2``)."""
    half = size // 2
    m = np.zeros((size, size))
    for k in range(half):
        for j, (lo, hi) in enumerate(zip(low, high, strict=True)):
            col = (2 * k + shift - j) % size
            m[k, col] += lo
            m[half + k, col] += hi
    return m


def _full_decomposition(n: int, step) -> np.ndarray:
    """Matrix of a full dyadic decomposition, rows ordered ``[a_L, d_L, …, d_1]``.
    ``step(size)`` is the analysis matrix applied to the current approximation."""
    m = np.eye(n)
    size = n
    while size > 1:
        m[:size] = step(size) @ m[:size]
        size //= 2
    return m


@cache
def _haar(n: int) -> np.ndarray:
    low = (1 / _R2, 1 / _R2)
    high = (-1 / _R2, 1 / _R2)       # with shift 1: d[k] = (x[2k] − x[2k+1]) / √2
    return _readonly(_full_decomposition(n, lambda size: _periodic_step(size, low, high, 1)))


def haar_matrix(n: int) -> np.ndarray:
    """Orthonormal Haar matrix, full decomposition, rows ``[a_L, d_L, d_{L-1}, …, d_1]``
    (row 0 is the constant 1/√n); n a power of 2, ``haar_matrix(1) == [[1]]``."""
    return _haar(_check_size(n, "haar_matrix", power_of_two=True)).copy()


# CDF 1,5 ("bior1.5") filters in pywt's order, exact: analysis low-pass
# √2/256 · [3, −3, −22, 22, 128, 128, 22, −22, −3, 3] and analysis high-pass the Haar pair
# at taps 4, 5; the synthesis (dual) filters are the same two swapped with alternating signs.
_B15_DEC_LO = tuple(_R2 / 256 * c for c in (3, -3, -22, 22, 128, 128, 22, -22, -3, 3))
_B15_DEC_HI = tuple(_R2 / 2 * c for c in (0, 0, 0, 0, -1, 1, 0, 0, 0, 0))
_B15_REC_LO = tuple(_R2 / 2 * c for c in (0, 0, 0, 0, 1, 1, 0, 0, 0, 0))
_B15_REC_HI = tuple(_R2 / 256 * c for c in (3, 3, -22, -22, 128, -128, 22, 22, -3, -3))
_B15_SHIFT = len(_B15_DEC_LO) // 2

#: Row factors turning the periodised CDF 1,5 matrix into the Tampere BM3D one (see below):
#: rows 0–3 × 1/‖h̃‖ with ‖h̃‖² = 1 + 4·(22√2/256)² = 17352/16384, row 1 negated.
BIOR15_ROW_SCALE = tuple(s * 64 / math.sqrt(4338) for s in (1, -1, 1, 1)) + (1.0, 1.0, 1.0, 1.0)


@cache
def _bior15_periodized(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Full periodised CDF 1,5 decomposition (== stacked ``pywt.wavedec(e_i, "bior1.5",
    mode="periodization", level=log2 n)``) and its exact inverse, the synthesis matrix
    (transpose of the analysis matrix built on the dual filters, level by level)."""
    forward = _full_decomposition(
        n, lambda size: _periodic_step(size, _B15_DEC_LO, _B15_DEC_HI, _B15_SHIFT))
    # The dual analysis filters are the time-reversed synthesis filters.
    dual_lo, dual_hi = _B15_REC_LO[::-1], _B15_REC_HI[::-1]
    inverse = np.eye(n)
    size = n
    while size > 1:                  # undo the coarsest level last: finest step's inverse first
        step = _periodic_step(size, dual_lo, dual_hi, _B15_SHIFT)
        inverse[:, :size] = inverse[:, :size] @ step.T
        size //= 2
    return forward, inverse


@cache
def _bior15(n: int) -> tuple[np.ndarray, np.ndarray]:
    forward, inverse = _bior15_periodized(n)
    scale = np.asarray(BIOR15_ROW_SCALE)
    return _readonly(scale[:, None] * forward), _readonly(inverse / scale[None, :])


def bior15_matrices(n: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """``(forward, inverse)`` of the 8-point Bior1.5 transform of BM3D's first stage.

    This is the matrix the Tampere BM3D (the ``bm3d``/``bm4d`` PyPI packages, which keep it
    "for MATLAB compatibility") hard-codes for ``"bior1.5"`` with 8×8 blocks, rebuilt exactly
    (it agrees with the 15 printed digits of the hard-coded values to < 1e-14):

    - start from the periodised, fully decomposed (3 levels) CDF 1,5 analysis matrix ``W``,
      i.e. row i of ``W`` is ``np.hstack(pywt.wavedec(x, "bior1.5", mode="periodization",
      level=3))`` as a function of x, rows ordered ``[a3, d3, d2 (2), d1 (4)]``;
    - multiply rows 0–3 (everything computed from the level-1 approximation) by
      ``1/‖h̃‖ = 64/√4338 ≈ 0.971707``, where h̃ is the level-1 low-pass filter wrapped onto
      8 samples (``‖h̃‖² = 17352/16384``); on 4 and 2 samples the wrapped filters are exactly
      Haar, so this normalises the level-1 low-pass rows and leaves the rest as it is;
    - negate row 1 (the level-3 detail is ``(second half − first half)``-signed there).

    The rows are not all of unit norm (row 0: ``‖·‖² = 0.944``, row 1: ``1.056``, others 1):
    the transform is biorthogonal and the reference thresholds its coefficients as they
    are. ``inverse`` is the exact inverse (the dual synthesis matrix scaled back), so
    ``inverse @ forward == I`` to rounding; it is *not* ``forward.T``.
    Only n = 8 is defined (the reference uses other constructions for other sizes).
    """
    n = _check_size(n, "bior15_matrices", power_of_two=True, allowed={8})
    forward, inverse = _bior15(n)
    return forward.copy(), inverse.copy()


# --------------------------------------------------------------------------- dispatch


def transform_pair(name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(forward, inverse)`` float64 matrices of transform ``name`` on n points.

    name: ``"dct"`` (any n in [1, 32]), ``"hadamard"`` / ``"haar"`` (n a power of 2 ≤ 32),
    ``"bior1.5"`` (n = 8 only). For n = 1 every name but bior1.5 gives ``[[1.]]``.
    """
    if not isinstance(name, str):
        raise TypeError(f"transform name must be a str, one of {TRANSFORMS}, got {type(name).__name__}")
    key = name.strip().lower()
    if key == "dct":
        f = dct_matrix(n)
        return f, f.T.copy()
    if key == "hadamard":
        f = hadamard_matrix(n)
        return f, f.T.copy()
    if key == "haar":
        f = haar_matrix(n)
        return f, f.T.copy()
    if key == "bior1.5":
        return bior15_matrices(n)
    raise ValueError(f"unknown transform {name!r}: expected one of {', '.join(TRANSFORMS)}")


# --------------------------------------------------------------------------- Kaiser window


def kaiser_window(p: int, beta: float = 2.0) -> np.ndarray:
    """BM3D's p×p aggregation window: the outer product of the 1-D Kaiser window
    ``w[i] = I0(β √(1 − (2i/(p−1) − 1)²)) / I0(β)`` with itself (``numpy.kaiser(p, beta)``);
    ``[[1.]]`` for p = 1. β = 2 in both BM3D stages."""
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
        raise TypeError(f"kaiser_window: size p must be an int, got {type(p).__name__}")
    if not 1 <= int(p) <= MAX_SIZE:
        raise ValueError(f"kaiser_window: size p must be in [1, {MAX_SIZE}], got {p}")
    beta = float(beta)
    if not math.isfinite(beta) or beta < 0:
        raise ValueError(f"kaiser_window: beta must be a finite number >= 0, got {beta}")
    p = int(p)
    if p == 1:
        return np.ones((1, 1))
    t = (2.0 * np.arange(p) - (p - 1)) / (p - 1)         # exactly antisymmetric: w is symmetric
    w = np.i0(beta * np.sqrt(np.clip(1.0 - t * t, 0.0, None))) / np.i0(beta)
    return np.outer(w, w)
