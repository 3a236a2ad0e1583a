"""`clpatch explain search`: which configuration of the windowed search a call runs, and why.

The "search" operation of `clpatch.engines`; the denoisers build their
explanations on `explain_search_request` for their own searches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config import (
    GROUPS_PER_UNIT,
    MIN_SQUARE_TILE,
    SearchConfig,
    SearchRequest,
    choose_search,
    rule_config,
    tuned_config,
)
from .params import check_search_request


@dataclass
class Explanation:
    """Which configuration a call runs and why (`str()` gives the text `clpatch explain` prints)."""

    operation: str
    request: SearchRequest
    device: str
    config: SearchConfig
    rule: SearchConfig
    tuned_entry: dict | None = None
    tuning_problem: str | None = None
    tuning_path: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        return self.config.source

    def __str__(self) -> str:
        r = self.request
        lines = [
            f"{self.operation} on {self.device}: patch {r.patch_size}, step {r.step}, k {r.n}, "
            f"window {r.window}, {r.channels} channel(s), {r.metric}"
            + (", video" if r.video else ""),
            f"runs: {self.config.describe()}",
            f"why:  {self.config.source} — {self.config.reason}",
        ]
        if self.config.source != "rule":
            lines.append(f"rule: {self.rule.describe()} — {self.rule.reason}")
        entry = self.tuned_entry
        if entry is not None:
            lines.append(f"tuned: {entry['time_ms']:.3f} ms against {entry.get('rule_time_ms', 0):.3f} ms "
                         f"for the rule's choice, on a {entry['size'][0]}x{entry['size'][1]} image")
            for rejected in entry.get("rejected", []):
                c = rejected["config"]
                knobs = ", ".join(f"{k}={v}" for k, v in c.items() if k != "variant" and v)
                lines.append(f"rejected: {c['variant']} ({knobs}) — {rejected['reason']}")
        elif self.tuning_problem:
            lines.append(self.tuning_problem)
        elif self.config.source == "rule":
            lines.append(f"not tuned (no entry in {self.tuning_path}); run `clpatch autotune`")
        lines.extend(self.notes)
        return "\n".join(lines)


def explain_search_request(runtime: Any, operation: str, request: SearchRequest,
                           variant: str | SearchConfig | None = None) -> Explanation:
    """The explanation of one windowed search `request` on `runtime`'s device, titled
    `operation`."""
    tuning = runtime.tuning
    config = choose_search(request, runtime.profile, variant, tuning, operation="search")
    entry = None
    if config.source == "tuned":
        found = tuned_config(tuning, "search", request)
        entry = found[1] if found else None
    notes = []
    if config.source == "rule" and config.variant == "square" and operation == "search":
        notes.append(f"the square tile is fitted to the image at call time: halved (down to "
                     f"{MIN_SQUARE_TILE}) while the image gives fewer than {GROUPS_PER_UNIT} "
                     f"work-groups per compute unit ({runtime.profile.compute_units} here)")
    return Explanation(operation, request, runtime.device.name.strip(), config,
                       rule_config(request, runtime.profile), entry, tuning.problem,
                       str(tuning.path), notes)


def explain_search(runtime: Any, *, patch_size: int | None = None, step: int | None = None,
                   n: int | None = None, window: int | None = None, channels: int = 1,
                   metric: str = "l2", video: bool = False,
                   variant: str | SearchConfig | None = None, **_: Any) -> Explanation:
    """`clpatch.explain("search", ...)`: unset parameters take `search_patches`' defaults
    (patch 8, step 4, n 16, window 21); the parameters are checked as the search checks them."""
    request = check_search_request(
        patch_size=8 if patch_size is None else patch_size, step=4 if step is None else step,
        n=16 if n is None else n, window=21 if window is None else window, channels=channels,
        metric=metric, video=video)
    return explain_search_request(runtime, "search", request, variant)

