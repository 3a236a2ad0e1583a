"""`clpatch explain knn`: which kNN engine a request runs, and why (the "knn" operation of
`clpatch.engines`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.validate import check_choice, check_int
from .config import (
    KNN_METHODS,
    TOPK_NAMES,
    KnnConfig,
    check_knn_params,
    choose_knn,
    topk_variant,
)

__all__ = ["KnnExplanation", "explain_knn"]


@dataclass
class KnnExplanation:
    device: str
    patch_size: int
    k: int
    step: int
    channels: int
    metric: str
    config: KnnConfig
    #: The offsets engine's top-k variant for this k (knn_config.TOPK_*).
    topk: int = 0

    def __str__(self) -> str:
        top = (f"  top-k: {TOPK_NAMES[self.topk]}\n" if self.config.method == "offsets"
               else "")
        return (f"knn on {self.device}: patch {self.patch_size}, k {self.k}, step {self.step}, "
                f"{self.channels} channel(s), metric {self.metric}\n"
                f"  runs: {self.config.describe()}\n" + top +
                "  then: the k kept per query sorted by (distance, candidate index)"
                + (" (float inputs: re-scored with direct sums)"
                   if self.config.method == "offsets" else ""))


def explain_knn(runtime: Any, *, patch_size: int | None = None, step: int | None = None,
                n: int | None = None, channels: int = 1, metric: str = "l2",
                variant: str | None = None, **_: Any) -> KnnExplanation:
    """`clpatch.explain("knn", ...)`: n is k; variant forces the method ("offsets", "gemm"
    or "direct"); unset parameters take `clpatch.knn`'s defaults (patch 8, k 16, step 1).
    Metric, patch size and channels are checked as `clpatch.knn` checks them."""
    metric, p, c = check_knn_params(metric, 8 if patch_size is None else patch_size,
                                    channels)
    k = check_int("n", 16 if n is None else n, 1, 1 << 30)
    s = check_int("step", 1 if step is None else step, 1, 1 << 30)
    method = check_choice("variant", variant, KNN_METHODS, allow_none=True)
    config = choose_knn(runtime.profile, metric=metric, patch=p, channels=c, step=s,
                        method=method, tuning=runtime.tuning)
    return KnnExplanation(runtime.device.name.strip(), p, k, s, c, metric, config,
                          topk_variant(config, runtime.profile, patch=p, channels=c, k=k))

