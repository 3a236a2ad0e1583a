"""OpenCL C code generation helpers for the templates (pure Python, no device needed).

The BM3D filter kernel applies small fixed matrices (DCT, Bior1.5, Hadamard, Haar) to
vectors held in registers. These helpers turn a matrix into straight-line C statements,
skipping zero coefficients and factoring a common magnitude out of a row (Haar and
Hadamard rows are ±c), and emit the Walsh–Hadamard transform as butterflies.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

# Coefficients below this (relative to the row's largest) are exact zeros of the
# closed-form matrices, only rounding noise.
_ZERO = 1e-13


def literal(value: float) -> str:
    """A float literal that round-trips to the float32 nearest `value`."""
    text = repr(float(np.float32(value)))
    if "e" not in text and "." not in text and "inf" not in text:
        text += ".0"
    return text + "f"


def matvec(matrix: np.ndarray, src: list[str], dst: list[str]) -> str:
    """Statements ``dst[i] = Σ_j matrix[i, j] · src[j]`` (dst and src must not alias)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    lines = []
    for i, row in enumerate(matrix):
        big = float(np.abs(row).max()) if row.size else 0.0
        terms = [(j, float(c)) for j, c in enumerate(row) if abs(c) > _ZERO * max(big, 1.0)]
        if not terms:
            lines.append(f"{dst[i]} = 0.0f;")
            continue
        mags = {abs(c) for _, c in terms}
        if len(terms) > 1 and max(mags) - min(mags) <= 1e-15 * max(mags):
            # Every coefficient is ±c: one multiplication.
            body = ""
            for k, (j, c) in enumerate(terms):
                sign = "-" if c < 0 else ("+" if k else "")
                body += f" {sign} {src[j]}" if k else f"{'-' if c < 0 else ''}{src[j]}"
            c = abs(terms[0][1])
            lines.append(f"{dst[i]} = {literal(c)} * ({body.strip()});" if c != 1.0
                         else f"{dst[i]} = {body.strip()};")
        else:
            expr = " + ".join(f"{literal(c)} * {src[j]}" for j, c in terms)
            lines.append(f"{dst[i]} = {expr};")
    return "\n".join(lines)


def transform_in_place(matrix: np.ndarray, values: list[str], temp: str) -> str:
    """A block applying `matrix` to the variables `values` in place, through temporaries
    named ``temp0``, ``temp1``… (declared inside the block)."""
    n = len(values)
    temps = [f"{temp}{i}" for i in range(n)]
    head = " ".join(f"const float {t} = {v};" for t, v in zip(temps, values, strict=True))
    return "{\n" + head + "\n" + matvec(matrix, temps, values) + "\n}"


def hadamard_in_place(values: list[str], temp: str) -> str:
    """The Sylvester-ordered Walsh–Hadamard transform divided by √n, in place, as
    log2(n) stages of butterflies (n log n additions instead of n² multiply-adds)."""
    n = len(values)
    if n & (n - 1):
        raise ValueError(f"Hadamard needs a power-of-2 length, got {n}")
    if n == 1:
        return ""
    lines = ["{"]
    half = n // 2
    while half >= 1:
        for start in range(0, n, 2 * half):
            for i in range(start, start + half):
                a, b = values[i], values[i + half]
                lines.append(f"{{ const float {temp}a = {a}, {temp}b = {b}; "
                             f"{a} = {temp}a + {temp}b; {b} = {temp}a - {temp}b; }}")
        half //= 2
    scale = literal(1.0 / math.sqrt(n))
    lines += [f"{v} *= {scale};" for v in values]
    lines.append("}")
    return "\n".join(lines)


def lag_products(matrix: np.ndarray) -> np.ndarray:
    """r[a, d] = Σ_u matrix[a, u] · matrix[a, u + d] for lags d = 0 … p − 1: the covariance of
    coefficient a of two windows d samples apart under white noise of variance 1 (r_a(−d) =
    r_a(d); 0 from d = p on)."""
    m = np.asarray(matrix, dtype=np.float64)
    p = m.shape[1]
    return np.array([[float(np.dot(m[a, :p - d], m[a, d:])) for d in range(p)]
                     for a in range(m.shape[0])])


def haar_variances(size: int, single: str, out: list[str], cross: Callable[[int, int], str],
                   temp: str = "hv") -> str:
    """A block setting ``out[c]`` to the noise variance of row c of the Haar transform
    (`transforms.haar_matrix` order: [a_L, d_L, …, d_1]) of a group of `size` members, each
    of variance `single`, where ``cross(lo, h)`` is an expression for the covariance summed
    over the pairs i in [lo, lo + h), j in [lo + h, lo + 2h). Bottom-up over the dyadic tree:
    a node's halves L and R (sums of covariances S_L, S_R over their own pairs, diagonal
    included) and cross sum X give its detail coefficient's variance (S_L + S_R − 2X) / |node|
    and its own sum S_L + S_R + 2X; the root's sum / size is the DC's variance."""
    if size < 1 or size & (size - 1):
        raise ValueError(f"the Haar transform needs a power-of-2 size, got {size}")
    lines, sums, h = ["{"], [single] * size, 1
    while h < size:
        level = []
        for b in range(size // (2 * h)):
            x, s = f"{temp}x{h}_{b}", f"{temp}s{h}_{b}"
            left, right = sums[2 * b], sums[2 * b + 1]
            lines.append(f"const float {x} = {cross(2 * h * b, h)};")
            lines.append(f"{out[size // (2 * h) + b]} = ({left} + {right} - 2.0f * {x}) * "
                         f"{literal(1.0 / (2 * h))};")
            lines.append(f"const float {s} = {left} + {right} + 2.0f * {x};")
            level.append(s)
        sums, h = level, 2 * h
    lines.append(f"{out[0]} = {sums[0]} * {literal(1.0 / size)};")
    lines.append("}")
    return "\n".join(lines)
