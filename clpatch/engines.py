"""Every engine's registration, in one table: the operations that `explain`, the scheduler,
autotune and the command line look up (`clpatch.core.registry.Operation`) and the search
engines the filters take as `search=` (`clpatch.core.registry.MatcherEngine`).

`import clpatch` calls `register_all()` once; a program that imports only a submodule gets
the same, since importing any submodule first imports the package. Calling it again
changes nothing (each entry replaces the one of its name).
"""

from __future__ import annotations

from .core.registry import MatcherEngine, Operation, register, register_matcher
from .denoise.explain import explain_bm3d, explain_nlmeans, explain_vbm3d
from .denoise.vbm3d_params import VIDEO_SEARCHES
from .match.ann.search import FILTER_NEIGHBOUR_CLUSTERS, FILTER_TILE, ann_capacity, ann_matcher
from .match.knn.config import KNN_METHODS, KNN_TEMPLATES
from .match.knn.config import config_from_json as knn_config_from_json
from .match.knn.explain import explain_knn
from .match.matches import min_candidates
from .match.nnf.explain import NNF_METHODS, explain_nnf
from .match.window.config import SEARCH_VARIANTS, TUNED_TEMPLATES
from .match.window.config import config_from_json as search_config_from_json
from .match.window.explain import explain_search
from .match.window.plan import SearchPlan

__all__ = ["MATCHERS", "OPERATIONS", "register_all"]

#: The operations, in the order `clpatch explain` lists them. The NNF has no tuned
#: templates: a tuning file's source hash covers the kernels autotune times, and none of
#: the NNF's is; the filters' own kernels are not tuned (their searches are).
OPERATIONS = (
    Operation("search", explain_search, TUNED_TEMPLATES, SEARCH_VARIANTS,
              search_config_from_json),
    Operation("knn", explain_knn, KNN_TEMPLATES, KNN_METHODS, knn_config_from_json),
    Operation("nnf", explain_nnf, (), NNF_METHODS),
    Operation("nlmeans", explain_nlmeans, variants=SEARCH_VARIANTS),
    Operation("bm3d", explain_bm3d, variants=SEARCH_VARIANTS),
    Operation("vbm3d", explain_vbm3d, variants=VIDEO_SEARCHES),
)

#: The search engines of the filters (`search=`), the default first.
MATCHERS = (
    MatcherEngine("window", SearchPlan, "the exact windowed search (Davy-Ehret 4.1)",
                  min_candidates),
    MatcherEngine("ann", ann_matcher,
                  "the clustering ANN (Tsai et al.): candidates from the patch's own cluster "
                  f"and its {FILTER_NEIGHBOUR_CLUSTERS} nearest sibling clusters in tiles of "
                  f"{FILTER_TILE}, of the two tilings (offset by half a tile) the one where "
                  "the patch lies nearer its tile's centre", ann_capacity),
)


def register_all() -> None:
    """Register every operation and search engine of the table above."""
    for operation in OPERATIONS:
        register(operation)
    for engine in MATCHERS:
        register_matcher(engine)
