"""`clpatch.explain`: which kernel configuration an operation would run, and why.

The operations are those the engines registered (`clpatch.core.registry`); this module
imports no engine. Each engine checks the parameters as its public function does, so an
impossible request gets the same error here as from the call itself.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..core.registry import operation as find_operation
from ..core.registry import operations
from ..core.runtime import resolve_runtime
from ..core.validate import k_or_n

__all__ = ["explain", "operations"]


def explain(operation: str = "search", *, patch_size: int | None = None,
            step: int | None = None, k: int | None = None, window: int | None = None,
            channels: int = 1, metric: str = "l2", video: bool = False, variant: Any = None,
            preset: str = "fast", pca_dims: int | None = None, candidates: int | None = None,
            leaf_size: int | None = None, search: str = "window", runtime: Any = None,
            n: int | None = None) -> Any:
    """Which kernel configuration `operation` ("search", "nlmeans", "bm3d", "vbm3d")
    would run with these parameters on `runtime`'s device (default device if None), and
    why: `forced`, `tuned` or `rule`. `str()` of the result is what `clpatch explain` prints.

    Unset parameters take the operation's defaults: patch 8, step 4, k 16, window 21 for
    search and nlmeans; the `preset`'s for bm3d (both stages' searches, the filter's layout
    and the aggregation); VBM3D's defaults for vbm3d (`window` is its window_ref); for nnf,
    `clpatch.nnf`'s (pca_dims, candidates and leaf_size are its own and apply to
    nnf only). `search` is the search engine of nlmeans and bm3d ("window", the default, or
    "ann": the clustering ANN's configuration; see `clpatch.match.matcher.searches()`);
    another operation refuses any other engine than "window". `n` is the deprecated name
    of `k`."""
    found = find_operation(operation)
    if search != "window" and not takes_search(operation):
        users = [name for name in operations() if takes_search(name)]
        raise ValueError(f"search={search!r}: {operation} has no choice of search engine "
                         f"(search= applies to {', '.join(users)})")
    k = k_or_n(k, n, None, "explain")
    rt = resolve_runtime(runtime)
    return found.explain(rt, patch_size=patch_size, step=step, n=k, window=window,
                         channels=channels, metric=metric, video=video, variant=variant,
                         preset=preset, pca_dims=pca_dims, candidates=candidates,
                         leaf_size=leaf_size, search=search)


def takes_search(operation: str) -> bool:
    """Whether the registered `operation`'s explanation depends on its search engine (its
    explain function names a `search` parameter; every one takes and ignores unknown
    keywords)."""
    return "search" in inspect.signature(find_operation(operation).explain).parameters
