"""The NNF's PCA model (Oancea et al., FITPCA): fitted on the host from a seeded random
subset of the patches of both images — a 1000-patch fit is a few milliseconds of NumPy, and
the projection of every patch, the part that grows with the images, runs on the device
(`cl_src/match/nnf_index.cl.mako`, nnf_project). The sampled patches of an image that lives
on the device are gathered there (nnf_sample) and only they are downloaded.

The rule, fixed so that the NumPy oracle (tests/reference/nnf.py) fits the same model:
n_m = min(SAMPLES, Na + Nb) patch indices drawn without replacement by
`numpy.random.default_rng(seed).choice(Na + Nb, n_m, replace=False)` (index < Na: patch of
a, else patch index − Na of b; patch index = y · (W − p + 1) + x), patch vectors with
element (c · p + i) · p + j = pixel (y + i, x + j) of channel c, as float64 from the
images' float32 values; mean and covariance (divided by n_m − 1), `numpy.linalg.eigh`,
components by descending eigenvalue (stable order), each signed so that its entry of
largest magnitude (the first, on ties) is positive.

A model fitted once can be given back (`NnfModel`, `clpatch.nnf(..., model=)`): the run
then samples nothing and waits for nothing (a video's frames against one model, or a
pipeline's plan whose `enqueue` must not wait for the device).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["SAMPLES", "NnfModel", "check_model", "fit_pca", "fit_rows", "patch_vectors",
           "sample_picks"]


class NnfModel(NamedTuple):
    """The NNF's PCA model: `mean` float32 (d,) and `basis` float32 (d, pca_dims), d =
    patch_size² · channels, element (c · p + i) · p + j of a patch vector being pixel
    (y + i, x + j) of channel c (`clpatch.nnf_model` fits one)."""

    mean: np.ndarray
    basis: np.ndarray


def check_model(model: Any, values: int, dims: int) -> NnfModel:
    """`model` as a checked NnfModel for patch vectors of `values` elements and `dims`
    reduced dimensions: a (mean, basis) pair of finite real arrays of shapes (values,) and
    (values, dims), converted to C-ordered float32. TypeError/ValueError naming `model`."""
    if not isinstance(model, tuple) or len(model) != 2:
        raise TypeError(f"model must be a clpatch.NnfModel (mean, basis), got "
                        f"{type(model).__name__}")
    arrays = []
    for name, part, shape in (("mean", model[0], (values,)),
                              ("basis", model[1], (values, dims))):
        array = np.asarray(part.get() if hasattr(part, "get") else part)
        if array.dtype.kind not in "fiu":
            raise TypeError(f"model {name} must hold real numbers, got dtype {array.dtype}")
        if array.shape != shape:
            raise ValueError(f"model {name} must have shape {shape} (patch_size² · channels"
                             f"{', pca_dims' if name == 'basis' else ''}), got {array.shape}")
        array = np.ascontiguousarray(array, np.float32)
        if not np.isfinite(array).all():
            raise ValueError(f"model {name} holds NaN or infinite values")
        arrays.append(array)
    return NnfModel(*arrays)

#: Patches the model is fitted on (the paper's n_m).
SAMPLES = 1000


def patch_vectors(image: np.ndarray, p: int, indices: np.ndarray) -> np.ndarray:
    """(len(indices), p·p·C) float64 patch vectors of an (H, W, C) image of any real dtype,
    its values taken as float32 first (as the device's conversion takes them): only the
    sampled pixels are converted."""
    rows, cols, channels = image.shape
    wc = cols - p + 1
    ys, xs = np.divmod(np.asarray(indices, np.int64), wc)
    i, j = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    # (n, p, p, C) -> (n, C, p, p): element (c·p + i)·p + j.
    block = image[ys[:, None, None] + i, xs[:, None, None] + j]
    block = block.astype(np.float32, copy=False).astype(np.float64)
    return block.transpose(0, 3, 1, 2).reshape(len(ys), -1)


def sample_picks(na: int, nb: int, seed: int) -> np.ndarray:
    """The sampled patch indices into a's Na patches then b's Nb (index >= Na: patch
    index - Na of b), in draw order."""
    count = min(SAMPLES, na + nb)
    return np.random.default_rng(seed).choice(na + nb, size=count, replace=False)


def fit_rows(rows: np.ndarray, dims: int) -> NnfModel:
    """(mean float32 (d,), basis float32 (d, dims)) of the float64 sample rows (n, d), in
    draw order."""
    count = rows.shape[0]
    mean = rows.mean(axis=0)
    centred = rows - mean
    cov = centred.T @ centred / max(count - 1, 1)
    values, vectors = np.linalg.eigh(cov)
    order = np.argsort(-values, kind="stable")[:dims]
    basis = vectors[:, order]
    lead = np.argmax(np.abs(basis), axis=0)
    signs = np.where(basis[lead, np.arange(basis.shape[1])] < 0, -1.0, 1.0)
    return NnfModel(np.ascontiguousarray(mean, np.float32),
                    np.ascontiguousarray(basis * signs, np.float32))  # C order: uploaded as is


def fit_pca(a: np.ndarray, b: np.ndarray, p: int, dims: int, seed: int) -> NnfModel:
    """(mean float32 (d,), basis float32 (d, dims)) of (H, W, C) images a and b."""
    na = (a.shape[0] - p + 1) * (a.shape[1] - p + 1)
    nb = (b.shape[0] - p + 1) * (b.shape[1] - p + 1)
    picks = sample_picks(na, nb, seed)
    rows = np.empty((picks.size, p * p * a.shape[2]), np.float64)
    in_a = picks < na
    rows[in_a] = patch_vectors(a, p, picks[in_a])
    rows[~in_a] = patch_vectors(b, p, picks[~in_a] - na)
    return fit_rows(rows, dims)
