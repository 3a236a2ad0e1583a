"""Which kernel configuration runs a request, and why.

Order of precedence: an explicit `variant=` (source `forced`); else the entry that
`clpatch autotune` measured fastest on this device (source `tuned`, see tuning.py); else
the Davy–Ehret §4.5 rules (source `rule`): the square search for 8×8 patches on a step-4
grid, the convolution search for step 1, the column search otherwise. Knobs a
configuration leaves open come from the device profile, clamped to the device's limits.
`explain()` says which configuration a call would run and why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..core.profiles import NEIGHBOUR_TABLES, DeviceProfile

SEARCH_VARIANTS = ("naive", "convolution", "square", "column")

# Registers a work-item of the column search may spend on its reference and candidate
# columns (floats, both columns together); more rows per work-group would spill.
_COLUMN_REGISTER_BUDGET = 96


@dataclass(frozen=True)
class SearchRequest:
    """The static parameters of a patch search (what a compiled kernel depends on)."""

    patch_size: int
    step: int
    n: int
    window: int
    channels: int = 1
    metric: str = "l2"
    video: bool = False


@dataclass(frozen=True)
class SearchConfig:
    """A concrete kernel configuration for the windowed search.

    variant: "naive" | "convolution" | "square" | "column"
    table:   neighbour table kind, "ordered" (Algorithm 2) or "unordered" (Algorithm 3);
             None takes the device profile's.
    group:   naive: work-items per work-group; convolution/column: work-items per row band
             (the paper's row of threads); 0 takes the profile's.
    rows:    column: reference rows per work-group (the paper's k + 1); 0 chooses from
             the step and the register budget. Always 1 for convolution.
    tile:    square: the T of the T×T work-group covering (T-1)² references; 0 takes the profile's.
    batch:   convolution/column/square: window offsets per barrier (their partial distances
             share one local-memory exchange); 0 takes the profile's. Square: 1 or a multiple of 4.
    source:  "forced", "rule" or "tuned"; reason: why this configuration was chosen.
    """

    variant: str
    table: str | None = None
    group: int = 0
    rows: int = 0
    tile: int = 0
    batch: int = 0
    source: str = "forced"
    reason: str = ""

    def __post_init__(self) -> None:
        if self.variant not in SEARCH_VARIANTS:
            raise ValueError(f"variant must be one of {SEARCH_VARIANTS}, got {self.variant!r}")
        if self.table is not None and self.table not in NEIGHBOUR_TABLES:
            raise ValueError(f"table must be one of {NEIGHBOUR_TABLES} or None, got {self.table!r}")
        for name in ("group", "rows", "tile", "batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if self.batch > 32:
            raise ValueError(f"batch must be at most 32 (offsets per barrier), got {self.batch}")

    def describe(self) -> str:
        knobs = {"naive": f"group={self.group}",
                 "convolution": f"group={self.group}, batch={self.batch}",
                 "column": f"group={self.group}, rows={self.rows}, batch={self.batch}",
                 "square": f"tile={self.tile}, batch={self.batch}"}
        return f"{self.variant} ({self.table} table, {knobs[self.variant]})"


def rule_variant(request: SearchRequest) -> tuple[str, str]:
    """The Davy–Ehret §4.5 choice of search variant, with the reason."""
    if request.patch_size == 8 and request.step == 4:
        return "square", "Davy-Ehret 4.5: 8x8 patches on a step-4 grid use the square search"
    if request.step == 1:
        return "convolution", "Davy-Ehret 4.5: step 1 uses the convolution search"
    return "column", "Davy-Ehret 4.5: other steps use the column search"


def rule_config(request: SearchRequest, profile: DeviceProfile) -> SearchConfig:
    """The configuration the §4.5 rules give, completed from the profile."""
    name, reason = rule_variant(request)
    return complete(SearchConfig(name, source="rule", reason=reason), request, profile)


def choose_search(request: SearchRequest, profile: DeviceProfile,
                  variant: str | SearchConfig | None = None, tuning: Any = None,
                  operation: str = "search") -> SearchConfig:
    """The configuration that will run `request` on a device with `profile`: `variant` if
    given, else the tuned entry of `tuning` (a TuningCache) for `operation`, else the rules."""
    if variant is None:
        tuned = tuning.lookup(operation, request) if tuning is not None else None
        if tuned is not None:
            return complete(tuned[0], request, profile)
        return rule_config(request, profile)
    elif isinstance(variant, SearchConfig):
        config = variant
    elif isinstance(variant, str):
        config = SearchConfig(variant, source="forced", reason="variant given by the caller")
    else:
        raise TypeError(f"variant must be a string, a SearchConfig or None, got {type(variant).__name__}")
    if config.variant == "square" and (request.patch_size != 8 or request.step != 4):
        raise ValueError("variant 'square' needs patch_size=8 and step=4 "
                         f"(got patch_size={request.patch_size}, step={request.step})")
    return complete(config, request, profile)


def column_rows(request: SearchRequest, width: int) -> int:
    """Reference rows per work-group of the column search: ideally `step` (one reference
    per work-item), fewer when the work-group or the register budget is too small."""
    p, s, c = request.patch_size, request.step, request.channels
    per_row = (width - p) // s + 1
    by_group = width // per_row
    by_registers = (max(_COLUMN_REGISTER_BUDGET // (2 * c), p) - p) // s + 1
    return max(1, min(s, by_group, by_registers))


def complete(config: SearchConfig, request: SearchRequest, profile: DeviceProfile) -> SearchConfig:
    """Fill the knobs a configuration leaves open from the profile, and clamp them to the
    device's limits (an untuned device always gets a configuration that can run)."""
    limit = profile.max_work_group_size
    table = config.table or profile.neighbour_table
    group, rows, tile = config.group, config.rows, config.tile
    batch = config.batch or profile.search_batch
    if config.variant == "naive":
        group = min(group or profile.naive_group_size, limit)
        rows = tile = batch = 0
    elif config.variant in ("convolution", "column"):
        group = min(group or profile.rowband_width, limit)
        group = max(group, request.patch_size)  # a band must span at least one patch
        if group > limit:
            raise ValueError(f"variant {config.variant!r} needs work-groups of at least "
                             f"{request.patch_size} work-items; this device allows {limit}")
        if config.variant == "convolution":
            rows = 1
        else:
            per_row = (group - request.patch_size) // request.step + 1
            rows = rows or column_rows(request, group)
            if rows * per_row > group:
                raise ValueError(f"column search with rows={rows} needs {rows * per_row} "
                                 f"work-items per group, more than group={group}")
        tile = 0
        # Double-buffered partial sums: 2 * batch * rows * group floats of local memory.
        while batch > 1 and 8 * batch * rows * group > profile.local_mem_size - 1024:
            batch //= 2
    else:  # square
        tile = tile or profile.square_tile
        while tile * tile > limit and tile > 2:
            tile //= 2
        if tile < 2:
            raise ValueError(f"square search needs tile >= 2, got {tile}")
        if batch != 1 and batch % 4:
            if config.batch:
                raise ValueError(f"square search needs batch 1 or a multiple of 4, got {batch}")
            batch = 4 * max(1, batch // 4)
        while batch > 4 and 8 * batch * tile * tile > profile.local_mem_size - 1024:
            batch -= 4
        group = rows = 0
    return dataclasses.replace(config, table=table, group=group, rows=rows, tile=tile,
                               batch=batch)


OPERATIONS = ("search", "nlmeans", "bm3d", "vbm3d")


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
            f"{self.operation} on {self.device}: patch {r.patch_size}, step {r.step}, n {r.n}, "
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


def explain(operation: str = "search", *, patch_size: int | None = None, step: int | None = None,
            n: int | None = None, window: int | None = None, channels: int = 1,
            metric: str = "l2", video: bool = False, variant: str | SearchConfig | None = None,
            preset: str = "fast", runtime: Any = None) -> Explanation:
    """Which kernel configuration `operation` would run with these parameters, and why
    (`forced`, `tuned` or `rule`), on `runtime`'s device (default device if None).

    Unset parameters take the operation's defaults: patch 8, step 4, n 16, window 21 for
    search and nlmeans; the `preset`'s for bm3d, whose explanation covers the stage-1 search
    and adds the stage-2 search, the filter kernel's layout and the aggregation."""
    if operation not in OPERATIONS:
        raise ValueError(f"operation must be one of {OPERATIONS}, got {operation!r}")
    from ..core.runtime import resolve_runtime

    rt = resolve_runtime(runtime)
    if operation == "bm3d":
        return _explain_bm3d(rt, patch_size, step, n, window, channels, variant, preset)
    if operation == "vbm3d":
        return _explain_vbm3d(rt, patch_size, step, n, window, channels, variant)
    patch_size = 8 if patch_size is None else patch_size
    step = 4 if step is None else step
    n = 16 if n is None else n
    window = 21 if window is None else window
    request = SearchRequest(patch_size, step, n, window, channels, metric.lower(), video)
    tuning = rt.tuning
    config = choose_search(request, rt.profile, variant, tuning, operation="search")
    entry = None
    if config.source == "tuned":
        entry = tuning.lookup("search", request)[1]
    explanation = Explanation(operation, request, rt.device.name.strip(), config,
                              rule_config(request, rt.profile), entry, tuning.problem,
                              str(tuning.path))
    if operation == "nlmeans":
        from ..denoise.nlmeans import choose_aggregation

        kind, why = choose_aggregation(patch_size, step, rt.profile)
        explanation.notes.append(f"then: columns averaging (p work-items per patch, Davy-Ehret "
                                 f"Algorithm 4), aggregation '{kind}' — rule: {why}")
        if step > patch_size:
            explanation.notes.append("nlmeans needs step <= patch_size")
    return explanation


@dataclass
class VideoExplanation:
    """What VBM3D runs and why (its video search is chosen by rule or forced, not tuned)."""

    operation: str
    device: str
    variant: str
    source: str
    reason: str
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join([f"{self.operation} on {self.device}",
                          f"runs: {self.variant} video search (Davy-Ehret 4.2)",
                          f"why:  {self.source} — {self.reason}", *self.notes])


def _explain_vbm3d(rt: Any, patch_size: int | None, step: int | None, n: int | None,
                   window: int | None, channels: int, variant: Any) -> VideoExplanation:
    from ..denoise.bm3d import choose_aggregation, filter_layout
    from ..denoise.vbm3d import choose_video_search, search_layout, video_stage_params

    p1, p2, stages, radius = video_stage_params(patch_size=patch_size, step=step, n=n,
                                                window_ref=window)
    if channels not in (1, 3):
        raise ValueError(f"vbm3d filters 1 or 3 channels, got {channels}")
    chosen, why = choose_video_search(rt.profile, variant)
    if why == "forced":
        source, why = "forced", "given by the caller"
    else:
        source, why = "rule", why.removeprefix("rule: ")
    out = VideoExplanation("vbm3d", rt.device.name.strip(), chosen, source, why)
    for params in (p1, p2)[:stages]:
        lanes, group = search_layout(chosen, params)
        out.notes.append(
            f"stage {params.stage}: patch {params.patch_size}, step {params.step}, window "
            f"{params.window_ref} then {params.window_pred} around the {params.q} best of each "
            f"frame, n {params.n}, +-{radius} frames; search {lanes} work-item(s) per reference"
            f"; filter: {filter_layout(params, rt.profile)}")
    kind, why = choose_aggregation(rt.profile)
    out.notes.append(f"aggregation '{kind}' — rule: {why}")
    if channels == 3:
        out.notes.append("colour: groups matched on the opponent luminance Y")
    out.notes.append("not tuned: clpatch autotune times the windowed searches only")
    return out


def _explain_bm3d(rt: Any, patch_size: int | None, step: int | None, n: int | None,
                  window: int | None, channels: int, variant: str | SearchConfig | None,
                  preset: str) -> Explanation:
    from ..denoise.bm3d import choose_aggregation, filter_layout, stage_params

    p1, p2, stages = stage_params(preset, patch_size=patch_size, step=step, window=window, n=n)
    if channels not in (1, 3):
        raise ValueError(f"bm3d filters 1 or 3 channels, got {channels}")
    tuning = rt.tuning
    out = None
    for params in (p1, p2)[:stages]:
        request = SearchRequest(params.patch_size, params.step, params.n, params.window, 1, "l2")
        config = choose_search(request, rt.profile, variant, tuning, operation="search")
        layout = filter_layout(params, rt.profile)
        line = (f"stage {params.stage} filter: {layout}; {params.transform_2d} 2-D, "
                f"{params.transform_1d} 1-D, "
                + ("hard thresholding" if params.stage == 1 else "Wiener shrinkage"))
        if out is None:
            entry = tuning.lookup("search", request)[1] if config.source == "tuned" else None
            out = Explanation(f"bm3d ({preset}) stage-1 search", request, rt.device.name.strip(),
                              config, rule_config(request, rt.profile), entry, tuning.problem,
                              str(tuning.path))
        else:
            out.notes.append(f"stage 2 search: patch {params.patch_size}, step {params.step}, "
                             f"n {params.n}, window {params.window}: {config.describe()} "
                             f"[{config.source}] — {config.reason}")
        out.notes.append(line)
    if p1.stagger and p1.step > 1:
        out.notes.append(f"grid: staggered (grid row i's references sit i mod {p1.step} columns "
                         "right of the lattice, as in the bm3d package)")
    kind, why = choose_aggregation(rt.profile)
    out.notes.append(f"aggregation '{kind}' — rule: {why}")
    if channels == 3:
        out.notes.append("colour: CBM3D, groups matched on the opponent luminance Y")
    return out
