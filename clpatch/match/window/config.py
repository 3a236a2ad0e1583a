"""The windowed search's configurations: which kernel configuration runs a request, and why.

Order of precedence: an explicit `variant=` (source `forced`); else the entry that
`clpatch autotune` measured fastest on this device (source `tuned`, kept in the runtime's
`clpatch.core.tuning.TuningCache` under `request_key`); else
the Davy–Ehret §4.5 rules (source `rule`): the square search for 8×8 patches on a step-4
grid, the convolution search for step 1, the column search otherwise. Knobs a
configuration leaves open come from the device profile, clamped to the device's limits.
`clpatch.explain()` says which configuration a call would run and why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...core.profiles import NEIGHBOUR_TABLES, DeviceProfile
from ..matches import lattice_count

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
             None takes the device profile's. Both keep the same matches, ties included
             (cl_src/lib/nn_table.mako's key order): the kind only changes the speed.
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


#: Work-groups per compute unit the rules' square search aims for: a smaller image gets a
#: smaller tile (down to MIN_SQUARE_TILE) until it has this many. On the H100 (132 units,
#: p 8, step 4, n 16, window 21) the profile's tile 16 took 0.176 ms at 512² (81 groups)
#: against 0.156 ms with tile 8 (361 groups), and at 256² 0.169 ms against 0.105 ms with
#: tile 4 (441 groups); at 1024² (289 groups with tile 16) the two tiles were within 8 %.
GROUPS_PER_UNIT = 2
MIN_SQUARE_TILE = 4


#: Work-groups per compute unit the rules' column search aims for: a smaller image gets
#: fewer reference rows per work-group (rows) until it has this many. On the H100 (132
#: units, 8×8 patches, n 16, group 64) at 512²: step 6, window 35: rows 6 took 0.400 ms,
#: rows 4 (198 groups, this rule) 0.353; step 5, window 21: 0.165 against 0.151 (rows 4);
#: at 256² rows 1 took 0.22 instead of 0.37 ms (step 6) and 0.107 instead of 0.157 (step
#: 5); from 1024² on, rows = step stayed the fastest (benchmarks/results/h100_session12.md).
COLUMN_GROUPS_PER_UNIT = 1.5


def column_groups(request: SearchRequest, config: SearchConfig, size: tuple[int, int]) -> int:
    """Work-groups of a column search (a completed `config`) on an image of `size` (on a
    staggered grid a work-group may hold one lattice column fewer: a close estimate)."""
    p, s = request.patch_size, request.step
    lattice_rows, border_row = lattice_count(size[0], p, s)
    cols, border_col = lattice_count(size[1], p, s)
    per_row = (config.group - p) // s + 1
    return -(-(cols + border_col) // per_row) * (-(-lattice_rows // config.rows) + border_row)


def rule_config(request: SearchRequest, profile: DeviceProfile,
                size: tuple[int, int] | None = None) -> SearchConfig:
    """The configuration the §4.5 rules give, completed from the profile; with the image's
    `size` (rows, cols), the square search's tile is halved while the image would give
    fewer than GROUPS_PER_UNIT work-groups per compute unit, and the column search's rows
    lowered while it would give fewer than COLUMN_GROUPS_PER_UNIT."""
    name, reason = rule_variant(request)
    config = complete(SearchConfig(name, source="rule", reason=reason), request, profile)
    if size is None or config.variant == "convolution":
        return config
    if config.variant == "column":
        want = COLUMN_GROUPS_PER_UNIT * profile.compute_units
        rows = config.rows
        while rows > 1 and column_groups(request, dataclasses.replace(config, rows=rows),
                                         size) < want:
            rows -= 1
        if rows == config.rows:
            return config
        return complete(dataclasses.replace(
            config, rows=rows, reason=f"{reason}; {rows} reference rows per work-group to give "
            f"this {size[0]}x{size[1]} image {COLUMN_GROUPS_PER_UNIT:g} work-groups per "
            "compute unit"), request, profile)
    refs = [(max(extent - request.patch_size, 0)) // request.step + 1 for extent in size]
    tile = config.tile
    while (tile // 2 >= MIN_SQUARE_TILE and (-(-refs[0] // (tile - 1))) * (-(-refs[1] // (tile - 1)))
           < GROUPS_PER_UNIT * profile.compute_units):
        tile //= 2
    if tile == config.tile:
        return config
    return complete(dataclasses.replace(
        config, tile=tile, reason=f"{reason}; tile {tile} to give this {size[0]}x{size[1]} "
        f"image {GROUPS_PER_UNIT} work-groups per compute unit"), request, profile)


def choose_search(request: SearchRequest, profile: DeviceProfile,
                  variant: str | SearchConfig | None = None, tuning: Any = None,
                  operation: str = "search", size: tuple[int, int] | None = None) -> SearchConfig:
    """The configuration that will run `request` on a device with `profile`: `variant` if
    given, else the tuned entry of `tuning` (a TuningCache) for `operation`, else the rules
    (which fit the square search's tile to the image's `size` when given)."""
    if variant is None:
        tuned = tuned_config(tuning, operation, request) if tuning is not None else None
        if tuned is not None:
            return complete(tuned[0], request, profile)
        return rule_config(request, profile, size)
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


# ---- tuning entries ---------------------------------------------------------------------------

_CONFIG_FIELDS = ("variant", "table", "group", "rows", "tile", "batch")
# The templates the tuned kernels are rendered from (the search and its input conversion).
# Other kernel families do not invalidate the search's tuning when they change.
TUNED_TEMPLATES = ("match/search.cl.mako", "lib/convert.cl.mako", "lib/nn_table.mako",
                   "lib/metric.mako", "lib/matches.mako", "lib/peak_check.mako")


def request_key(operation: str, request: SearchRequest) -> str:
    """The tuning-cache key of a request (everything a tuned choice may depend on)."""
    r = request
    return (f"{operation}:p{r.patch_size}:s{r.step}:n{r.n}:w{r.window}:c{r.channels}:"
            f"{r.metric}:{'video' if r.video else 'image'}")


def config_to_json(config: SearchConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in _CONFIG_FIELDS}


def config_from_json(data: dict[str, Any], *, source: str = "tuned", reason: str = "") -> SearchConfig:
    return SearchConfig(**{name: data[name] for name in _CONFIG_FIELDS if name in data},
                        source=source, reason=reason)


def tuned_config(tuning: Any, operation: str,
                 request: SearchRequest) -> tuple[SearchConfig, dict] | None:
    """The tuned configuration of a request in `tuning` (a TuningCache), with its entry, or
    None; an entry whose configuration is not valid is dropped with a warning."""
    key = request_key(operation, request)
    entry = tuning.entry(key)
    if entry is None:
        return None
    speedup = entry.get("rule_time_ms", 0) / entry["time_ms"] if entry.get("time_ms") else 0
    reason = (f"tuned on this device ({entry.get('date', '?')}): {entry['time_ms']:.3f} ms, "
              f"{speedup:.2f}x the rule-based choice" if speedup else "tuned on this device")
    try:
        return config_from_json(entry["config"], reason=reason), entry
    except (TypeError, ValueError) as exc:
        tuning.drop(key, str(exc))
        return None
