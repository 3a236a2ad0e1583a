"""`clpatch explain nnf`: what an approximate nearest-neighbour field request runs
(the "nnf" operation of `clpatch.engines`; no tuned templates: a tuning file's source
hash covers the kernels autotune times, and none of the NNF's is).

The NNF has one method (propagation-assisted k-d trees, "kdtree") and nothing tuned, so the
explanation is the checked request (the checks of `clpatch.nnf` that need no image: an
impossible request gets the same error here as from the call), the leaf size it runs with
and the steps of a run, with the constants that shape them. The tree's depth depends on
b's size, which a request does not have: the explanation gives the rule.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from ...core.validate import check_choice, check_int
from . import search as engine
from .pca import SAMPLES
from .plan import BAND, POLISH, REFINE, VISITS, hard_effort, tree_levels

__all__ = ["NNF_METHODS", "NnfExplanation", "explain_nnf"]

NNF_METHODS = ("kdtree",)


def _default(name: str) -> Any:
    """`clpatch.nnf`'s default of a parameter (one place says it)."""
    return inspect.signature(engine.nnf).parameters[name].default


@dataclass
class NnfExplanation:
    device: str
    patch_size: int
    k: int
    channels: int
    pca_dims: int
    candidates: int
    leaf_size: int
    leaf_given: bool

    def __str__(self) -> str:
        p, c, m, s = self.patch_size, self.channels, self.candidates, self.leaf_size
        rule = "given" if self.leaf_given else (
            "default: 32, or the smallest power of two >= candidates")
        slack, expand, expand_leaves, visits = hard_effort(self.pca_dims)
        scaled = "" if slack == 1.0 else f"{slack:.3g} x "
        traversal = f" and of a traversal of {visits} leaves" if visits else ""
        return "\n".join([
            f"nnf on {self.device}: patch {p}, k {self.k}, {c} channel(s) ({p * p * c} values "
            f"per patch), pca_dims {self.pca_dims}, candidates {m}, leaf size {s} ({rule})",
            "  runs: kdtree (propagation-assisted k-d trees; the only method, nothing tuned)",
            f"  1. PCA: {self.pca_dims} components of at most {SAMPLES} patches of a and b "
            f"(seeded sample, fitted on the host); every patch projected on the device",
            f"  2. tree: b's Nb points in 2^L leaves of {s}, L the smallest with {s} * 2^L >= "
            f"Nb (e.g. a 256x256 b: {tree_levels((257 - p) ** 2, s)} levels); each node split at the "
            f"median of its widest dimension",
            f"  3. every patch of a: the {m} nearest (reduced distance) of its leaf, and of the "
            f"previous leaf when its own holds fewer than {m} points",
            f"  4. rows 0, {BAND}, {2 * BAND}, ...: backtracking through the tree, at most "
            f"{VISITS} leaves",
            f"  5. propagation, rows y = t (mod {BAND}) for t = 1 ... {BAND - 1}: the leaves "
            f"of the patches one row below the upper neighbour's candidates",
            f"  6. refinement, {REFINE} passes: the four neighbours' candidates, moved back "
            f"by the neighbour's offset",
            f"  7. the {m} candidates re-ranked by their full-patch distance",
            f"  8. where the {self.k}-th full distance exceeds {scaled}the {m}-th reduced "
            f"one: the {expand} nearest other points of the leaves of the first "
            f"{expand_leaves} candidates{traversal} re-ranked too, then {POLISH} polish "
            f"passes (the four neighbours' first matches, moved back, on full distances)",
            f"  then: the {self.k} nearest returned, by (distance, index in b)",
        ])


def explain_nnf(runtime: Any, *, patch_size: int | None = None, n: int | None = None,
                channels: int = 1, pca_dims: int | None = None, candidates: int | None = None,
                leaf_size: int | None = None, step: int | None = None,
                window: int | None = None, metric: str = "l2", video: bool = False,
                variant: str | None = None, **_: Any) -> NnfExplanation:
    """`clpatch.explain("nnf", ...)`: n is k; unset parameters take `clpatch.nnf`'s
    defaults. Checked as `clpatch.nnf` checks them; the windowed search's step and window,
    another metric than l2 and video do not apply (ValueError naming them)."""
    c = check_int("channels", channels, 1, 1 << 30)
    p, k, dims, m, leaf, _seed = engine.check_nnf_params(
        _default("patch_size") if patch_size is None else patch_size,
        _default("k") if n is None else n,
        _default("pca_dims") if pca_dims is None else pca_dims,
        _default("candidates") if candidates is None else candidates, leaf_size, 0, c)
    if step not in (None, 1):
        raise ValueError(f"step does not apply to nnf (every patch of a is matched), got {step}")
    if window is not None:
        raise ValueError(f"window does not apply to nnf (all of b is searched), got {window}")
    check_choice("metric", metric, ("l2",))
    if video:
        raise ValueError("video does not apply to nnf (two images)")
    check_choice("variant", variant, NNF_METHODS, allow_none=True)
    return NnfExplanation(runtime.device.name.strip(), p, k, c, dims, m, leaf,
                          leaf_size is not None)

