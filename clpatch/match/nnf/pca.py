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
"""

from __future__ import annotations

import numpy as np

__all__ = ["SAMPLES", "fit_pca", "fit_rows", "patch_vectors", "sample_picks"]

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


def fit_rows(rows: np.ndarray, dims: int) -> tuple[np.ndarray, np.ndarray]:
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
    return (np.ascontiguousarray(mean, np.float32),
            np.ascontiguousarray(basis * signs, np.float32))   # C order: uploaded as is


def fit_pca(a: np.ndarray, b: np.ndarray, p: int, dims: int,
            seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean float32 (d,), basis float32 (d, dims)) of (H, W, C) images a and b."""
    na = (a.shape[0] - p + 1) * (a.shape[1] - p + 1)
    nb = (b.shape[0] - p + 1) * (b.shape[1] - p + 1)
    picks = sample_picks(na, nb, seed)
    rows = np.empty((picks.size, p * p * a.shape[2]), np.float64)
    in_a = picks < na
    rows[in_a] = patch_vectors(a, p, picks[in_a])
    rows[~in_a] = patch_vectors(b, p, picks[~in_a] - na)
    return fit_rows(rows, dims)
