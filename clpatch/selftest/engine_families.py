"""Self-test families of the other search engines, on integer-valued inputs where the tests
demand the oracle's result bit for bit (positions and distances, ties included):

- kNN (`clpatch.knn`): each engine forced by `method=`, and the Chamfer distances, against
  `oracles/knn.py`;
- the clustering ANN (`clpatch.ann_search`) against `oracles/ann.py`;
- the k-d-tree nearest-neighbour field (`clpatch.nnf`) against `oracles/nnf.py`.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..core.runtime import Runtime
from ..match.ann.search import ann_search
from ..match.knn.search import knn
from ..match.nnf.plan import BAND, EXPAND, EXPAND_LEAVES, POLISH, REFINE, VISITS
from ..match.nnf.search import nnf
from .compare import Family, ascending, distinct, equal, host, matches_equal
from .inputs import integers
from .oracles import oracle

#: (label, query, reference or None, patch, k, step): label images (few values, many ties).
KNN_CASES = {
    "self": (partial(integers, (20, 23), 3, 4, np.uint8), None, 5, 16, 1),
    "two images": (partial(integers, (22, 21), 5, 3, np.uint8),
                   partial(integers, (20, 24), 6, 3, np.uint8), 4, 7, 3),
    "small self": (partial(integers, (14, 15), 7, 3, np.uint8), None, 3, 16, 1),
    "small two images": (partial(integers, (15, 13), 8, 3, np.uint8),
                         partial(integers, (13, 16), 9, 3, np.uint8), 4, 7, 3),
}

#: Family -> (method, [(case, metric), ...]).
KNN_FAMILIES = {
    "knn/offsets": ("offsets", [("self", "l2"), ("two images", "l1")]),
    "knn/gemm": ("gemm", [("self", "l2"), ("two images", "l2")]),
    "knn/direct": ("direct", [("self", "l1"), ("two images", "l2")]),
    "knn/chamfer": ("direct", [("small self", "chamfer"), ("small two images", "chamfer_sym")]),
}


def check_knn(result, query, reference, *, patch_size: int, k: int, metric: str,
              step: int) -> list[str]:
    """A kNN result on integer data against the brute force, bit for bit."""
    knn_oracle = oracle("knn")
    want_pos, want_dist = knn_oracle.knn_brute(query, reference, patch_size, k, metric, step)
    found = (equal(result.grid_y, knn_oracle.grid(query.shape[0], patch_size, step),
                   what="query rows")
             + equal(result.grid_x, knn_oracle.grid(query.shape[1], patch_size, step),
                     what="query columns"))
    positions, distances = host(result.positions), host(result.distances)
    found += matches_equal(positions, distances, want_pos, want_dist)
    if positions.shape == want_pos.shape:
        cols = (query if reference is None else reference).shape[1] - patch_size + 1
        found += distinct(positions[..., 0].astype(np.int64) * cols + positions[..., 1])
        found += ascending(distances)
    return found


def run_knn(method: str, cases: list[tuple[str, str]], runtime: Runtime) -> list[str]:
    found = []
    for case, metric in cases:
        make_query, make_reference, p, k, step = KNN_CASES[case]
        query = make_query()
        reference = None if make_reference is None else make_reference()
        result = knn(query, reference, patch_size=p, k=k, metric=metric, step=step, method=method,
                     runtime=runtime)
        found += [f"{case}, {metric}: {line}" for line in
                  check_knn(result, query, reference, patch_size=p, k=k, metric=metric, step=step)]
    return found


#: The ANN's case: tiles of 7 and one neighbour cluster, a step-2 grid whose last row and
#: column are off the lattice.
ANN_PARAMS = dict(patch_size=5, k=9, tile=7, step=2, neighbour_clusters=1)


def run_ann(runtime: Runtime) -> list[str]:
    image = integers((30, 33), 10)
    result = ann_search(image, runtime=runtime, **ANN_PARAMS)
    want_pos, want_dist = oracle("ann").ann_image(image, **ANN_PARAMS)
    found = matches_equal(host(result.positions), host(result.distances), want_pos, want_dist)
    if not found:
        found += ascending(host(result.distances))
    return found


#: The NNF's case (the tests' "gray-Nb315-leaf4"): b has 315 patches, 79 real leaves of 4,
#: the last one short; a has more than 16 rows of patches (backtracking rows and propagation).
NNF_PARAMS = dict(patch_size=3, k=2, pca_dims=4, candidates=4, leaf_size=4, seed=0)


def run_nnf(runtime: Runtime) -> list[str]:
    a = integers((21, 19), 11, dtype=np.uint8)
    b = integers((17, 23), 12, dtype=np.uint8)
    result = nnf(a, b, runtime=runtime, **NNF_PARAMS)
    want_pos, want_dist = oracle("nnf").nnf_oracle(
        a, b, band=BAND, visits=VISITS, refine=REFINE, expand_points=EXPAND,
        expand_leaves=EXPAND_LEAVES, polish_passes=POLISH, **NNF_PARAMS)
    positions, distances = host(result.positions), host(result.distances)
    found = matches_equal(positions, distances, want_pos, want_dist)
    if positions.shape == want_pos.shape:
        found += distinct(positions[..., 0].astype(np.int64) * b.shape[1] + positions[..., 1])
        found += ascending(distances)
    return found


FAMILIES = (
    *(Family(name, partial(run_knn, method, cases),
             f"exhaustive kNN, {method} engine, " + " and ".join(sorted({m for _, m in cases})))
      for name, (method, cases) in KNN_FAMILIES.items()),
    Family("ann", run_ann, "clustering ANN (Tsai et al.)"),
    Family("nnf", run_nnf, "k-d-tree nearest-neighbour field (Oancea et al.)"),
)
