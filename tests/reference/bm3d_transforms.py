"""Transforms and window of the BM3D / CBM3D oracle (tests/reference/bm3d.py re-exports these
names): the p×p Kaiser aggregation window, the 1-D transform matrices (DCT-II, Hadamard,
Haar, the Tampere 8-point Bior1.5) and the separable 3-D transform of groups and its inverse.
Written from the definitions; nothing is imported from clpatch.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np


def kaiser_window(p: int, beta: float) -> np.ndarray:
    """p×p aggregation window: the outer product of the 1-D Kaiser window
    ``w[i] = I0(β √(1 − (2i/(p−1) − 1)²)) / I0(β)`` (``numpy.kaiser``) with itself."""
    w = np.kaiser(int(p), float(beta))
    return np.outer(w, w)


def _haar(n: int) -> np.ndarray:
    """Orthonormal Haar matrix, full decomposition, rows ``[a_L, d_L, …, d_1]`` (pywt's
    ``wavedec`` order) with ``d[k] = (x[2k] − x[2k+1]) / √2`` at every level."""
    if n == 1:
        return np.ones((1, 1))
    half = _haar(n // 2)
    return np.vstack([np.kron(half, [1.0, 1.0]), np.kron(np.eye(n // 2), [1.0, -1.0])]) / math.sqrt(2)


def _bior15() -> np.ndarray:
    """The 8-point Bior1.5 matrix of the Tampere BM3D (the bm3d package's hard-coded one).

    Rows 4–7: the finest details ``(x[2k] − x[2k+1]) / √2``. Rows 0–3: the 4-point transform
    ``[sum / 2, (second half − first half) / 2, (a0 − a1) / √2, (a2 − a3) / √2]`` of the
    level-1 approximation ``a[k] = c (128 (x[2k] + x[2k+1]) + 22 (x[2k+2] − x[2k+3])
    − 22 (x[2k−2] − x[2k−1]))`` (indices mod 8: the periodised CDF 1,5 low-pass √2/256·[3, −3,
    −22, 22, 128, 128, 22, −22, −3, 3] wrapped onto 8 samples, where its ±3 taps cancel), with
    c = √2/256 divided by the norm of that wrapped filter (‖·‖² = 17352/16384).
    """
    low = np.zeros((4, 8))
    for k in range(4):
        for offset, tap in ((0, 128), (1, 128), (2, 22), (3, -22), (-2, -22), (-1, 22)):
            low[k, (2 * k + offset) % 8] += tap
    low *= math.sqrt(2) / 256 / math.sqrt(17352 / 16384)
    r2 = 1 / math.sqrt(2)
    coarse = np.array([[0.5, 0.5, 0.5, 0.5], [-0.5, -0.5, 0.5, 0.5], [r2, -r2, 0, 0], [0, 0, r2, -r2]])
    fine = np.kron(np.eye(4), [r2, -r2])
    return np.vstack([coarse @ low, fine])


@cache
def transform_pair(name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(forward, inverse) matrices of a transform on n points, acting on column vectors:
    ``dct`` (orthonormal DCT-II), ``hadamard`` (Sylvester order, /√n), ``haar`` (any power of
    2) and ``bior1.5`` (n = 8; not orthogonal: its inverse is the matrix inverse)."""
    if name == "dct":
        k, i = np.arange(n)[:, None], np.arange(n)[None, :]
        forward = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * math.sqrt(2 / n)
        forward[0] = math.sqrt(1 / n)
    elif name == "hadamard":
        forward = np.ones((1, 1))
        while forward.shape[0] < n:
            forward = np.kron([[1.0, 1.0], [1.0, -1.0]], forward)
        forward = forward / math.sqrt(n)
    elif name == "haar":
        forward = _haar(n)
    elif name == "bior1.5" and n == 8:
        forward = _bior15()
    else:
        raise ValueError(f"no transform {name!r} on {n} points")
    if forward.shape != (n, n):
        raise ValueError(f"{name} needs a power of 2 size, got {n}")
    inverse = forward.T.copy() if name != "bior1.5" else np.linalg.inv(forward)
    forward.setflags(write=False)
    inverse.setflags(write=False)
    return forward, inverse


# --------------------------------------------------------------------------- 3-D transform


def transform_3d(stack: np.ndarray, transform_2d: str, transform_1d: str) -> np.ndarray:
    """3-D spectrum of stacks (..., k, p, p): 2-D transform of each patch, then 1-D along k."""
    k, p = stack.shape[-3], stack.shape[-1]
    f2, _ = transform_pair(transform_2d, p)
    f1, _ = transform_pair(transform_1d, k)
    spec = np.einsum("ij,...zjl,ml->...zim", f2, stack, f2)
    return np.einsum("yz,...zim->...yim", f1, spec)


def inverse_transform_3d(spec: np.ndarray, transform_2d: str, transform_1d: str) -> np.ndarray:
    k, p = spec.shape[-3], spec.shape[-1]
    _, i2 = transform_pair(transform_2d, p)
    _, i1 = transform_pair(transform_1d, k)
    stack = np.einsum("zy,...yim->...zim", i1, spec)
    return np.einsum("ij,...zjl,ml->...zim", i2, stack, i2)
