"""Autotuning of the exhaustive kNN (`clpatch autotune --knn`): for each request (metric,
patch size, channels, grid density), every candidate configuration the device can run —
offsets tiles, dy and dx per pass; GEMM work-groups, register tiles and depth; the direct
engine's work-group — is timed with profiling events on a photo mosaic quantised to
integers (so every engine's matches must equal the rule's exactly, which is checked
first), and the fastest is recorded in the tuning file under `knn_key`.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from ..core.runtime import Runtime
from ..match.knn.config import KnnConfig, choose_knn, config_to_json, fits, knn_key
from ..match.knn.plan import KnnPlan
from .timing import event_ms, photo_mosaic

__all__ = ["KNN_REQUESTS", "knn_candidates", "tune_knn"]

#: (metric, patch size, channels, step) tuned by default.
KNN_REQUESTS = tuple((metric, p, c, 1) for metric in ("l2", "l1") for p in (5, 7, 8, 11)
                     for c in (1, 3))


def knn_candidates(profile: Any, *, metric: str, patch: int, channels: int,
                   step: int) -> list[KnnConfig]:
    """The configurations worth timing for a request on this device (the rule's first)."""
    rule = choose_knn(profile, metric=metric, patch=patch, channels=channels, step=step)
    found = [rule]
    group = int(profile.max_work_group_size)
    options: list[KnnConfig] = []
    if metric in ("l2", "l1"):
        for tx, ty in ((16, 8), (16, 16), (8, 8), (32, 8)):
            width = tx + patch - 1
            busy = max(1, tx * ty // width)
            for dys in (1, 2, 4):
                for dx in sorted({busy, max(1, busy // 2)}):
                    options.append(KnnConfig("offsets", tx, ty, dx, min(64, group), dys=dys))
    if metric == "l2":
        for wx, wy, tm, tn, bk in ((8, 8, 8, 8, 32), (8, 8, 8, 8, 16), (16, 16, 4, 8, 16),
                                   (16, 8, 8, 8, 16)):
            options.append(KnnConfig("gemm", wx, wy, 0, min(64, group), "", tm, tn, bk))
    for lx in (32, 64, 128):
        options.append(KnnConfig("direct", group=min(lx, group)))
    seen = [config_to_json(rule)]          # the rule's reason differs: compare the knobs
    for option in options:
        knobs = config_to_json(option)
        if knobs not in seen and not fits(option, profile, metric=metric, patch=patch,
                                          channels=channels):
            seen.append(knobs)
            found.append(option)
    return found


def _time(runtime: Runtime, plan: KnnPlan, image: Any, repeats: int) -> tuple[float, Any]:
    result = plan.run(image)
    runtime.queue.finish()
    times = []
    for _ in range(repeats):
        plan.run(image)
        runtime.queue.finish()
        times.append(sum(event_ms(e) for _, e in plan.last_events))
    return statistics.median(times), result


def tune_knn(runtime: Runtime, requests: Iterable[tuple[str, int, int, int]] = KNN_REQUESTS,
             *, size: tuple[int, int] = (256, 256), k: int = 16, repeats: int = 3,
             include_direct: bool = False, quick: bool = False,
             progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Tune each (metric, patch, channels, step) request on a `size` self-search with `k`
    neighbours; records the winners in `runtime.tuning` (save it to keep them) and returns
    one summary per request. The direct engine is timed only with `include_direct` (or for
    Chamfer): on image patches it is far slower than the others. `quick`: the rule's
    configuration and the first candidate of each other engine only."""
    if not runtime.profiling:
        raise ValueError("tune_knn needs a runtime with profiling=True")
    summaries = []
    for metric, patch, channels, step in requests:
        mosaic = photo_mosaic(*size, sigma=0.0)
        image = np.round(np.stack([mosaic] * channels, axis=-1) if channels > 1 else mosaic)
        candidates = knn_candidates(runtime.profile, metric=metric, patch=patch,
                                    channels=channels, step=step)
        if not include_direct and metric in ("l2", "l1"):
            candidates = [c for c in candidates if c.method != "direct" or c is candidates[0]]
        if quick:
            first: dict[str, KnnConfig] = {}
            for c in candidates[1:]:
                first.setdefault(c.method, c)
            candidates = [candidates[0], *(c for m, c in first.items()
                                           if m != candidates[0].method)]
        timed: list[tuple[float, KnnConfig]] = []
        rejected = []
        expected = None
        for config in candidates:
            plan = KnnPlan(runtime, size[0], size[1], channels, size[0], size[1],
                           patch_size=patch, k=k, metric=metric, step=step, config=config,
                           self_search=True, device_output=False, rescore=False)
            ms, found = _time(runtime, plan, image.astype(np.float32), repeats)
            if expected is None:
                expected = found
            elif not (np.array_equal(found.positions, expected.positions)
                      and np.array_equal(found.distances, expected.distances)):
                rejected.append({"config": config_to_json(config),
                                 "reason": "matches differ from the rule's configuration"})
                continue
            timed.append((ms, config))
            if progress is not None:
                progress(f"knn {metric} p{patch} c{channels}: {config.describe()}: {ms:.3f} ms")
        best_ms, best = min(timed, key=lambda item: item[0])
        rule_ms = timed[0][0]
        entry = {"config": config_to_json(replace(best, reason="")), "time_ms": best_ms,
                 "rule_config": config_to_json(candidates[0]), "rule_time_ms": rule_ms,
                 "rejected": rejected, "size": list(size), "k": k,
                 "date": datetime.date.today().isoformat()}
        runtime.tuning.record(knn_key(metric, patch, channels, step), entry)
        summaries.append({"request": [metric, patch, channels, step], **entry})
    return summaries
