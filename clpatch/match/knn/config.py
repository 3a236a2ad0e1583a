"""How the exhaustive kNN runs a request: the engine (method) and its tile sizes.

Methods:
- ``"offsets"`` (l2, l1): for each offset between the two images, the distances of all
  query patches to the candidates at that offset are box sums of one difference image, so a
  (query, candidate) pair costs a few additions whatever the patch size
  (`cl_src/match/knn_offsets.cl.mako`). The k kept are re-scored with direct sums.
- ``"direct"`` (every metric): each pair's distance summed directly, partial sums pruned
  against the k-th best (`cl_src/match/knn_direct.cl.mako`): Chamfer's only method, and the
  fallback where the offsets tile does not fit the device's local memory.
- ``"gemm"`` (l2): Tang's decomposition ||r||² − 2 q·r (+ ||q||²) through a register-tiled
  matrix product with the top-k fused into it (`cl_src/match/knn_gemm.cl.mako`), patches
  extracted as matrix rows; its cost grows with p² C. The k kept are re-scored exactly.

A configuration `clpatch autotune --knn` recorded for the request's key (`knn_key`) in the
runtime's tuning file comes first; then the rule (`choose_knn`): Chamfer -> direct; 1x1
patches (vectors) -> gemm for l2, direct for l1; l2/l1 -> offsets when the query grid is
dense (step <= 2: the offsets engine computes every position of its tiles) and its tile
fits the device's local memory, else gemm (l2) or direct (l1). `method=` forces one.

The offsets engine's top-k (`KnnConfig.topk`, used from `topk_k` neighbours up,
per-work-item heaps below; see `cl_src/match/knn_offsets.cl.mako`): TOPK_HEAP, per-work-item
4-ary heaps of packed keys in global memory (their top levels in registers and local
memory); TOPK_WARP (NVIDIA, inline PTX; elsewhere work-groups of one
warp), candidates before a query's threshold are buffered and a warp merges a query's
buffer into its sorted list at once; TOPK_GROUP (portable), the same merge by the whole
work-group through local memory and barriers. The three give identical matches; the rule
takes the heaps (RULE_TOPK: the fastest on the H100 at every k timed), a tuning entry may
name another.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ...core.validate import check_choice, check_int

__all__ = ["KNN_METHODS", "TOPK_HEAP", "TOPK_GROUP", "TOPK_WARP", "RULE_TOPK", "topk_variant",
           "heap_level_fits",
           "team_buffer", "team_rows", "warp_ready", "KNN_METRICS", "KNN_TEMPLATES",
           "KnnConfig", "choose_knn",
           "MAX_CHANNELS", "MAX_PATCH", "MAX_CHAMFER_PATCH", "check_knn_params",
           "config_from_json", "config_to_json", "fits", "knn_key", "offsets_local_bytes"]

KNN_METRICS = ("l2", "l1", "chamfer", "chamfer_sym")
KNN_METHODS = ("offsets", "direct", "gemm")
#: Largest patch side (Chamfer: 16; its cost grows as p^4).
MAX_PATCH = 64
MAX_CHAMFER_PATCH = 16
#: Largest number of channels (vector dimensions for knn_vectors).
MAX_CHANNELS = 4096
#: The templates a tuned kNN configuration was timed with (the tuning file's source hash).
KNN_TEMPLATES = ("lib/topk.mako", "lib/matches.mako", "match/knn_offsets.cl.mako",
                 "match/knn_direct.cl.mako", "match/knn_gemm.cl.mako", "match/knn_finish.cl.mako")

#: The offsets engine's tile of query positions per work-group, most consecutive dx and
#: consecutive dy per pass: of 30 shapes timed on the H100 (256² RGB p 11, 384² RGB p 7,
#: 256² grey p 5, k 12), 16x8 with 4 dy was fastest or within 4 % of it in each case.
OFFSETS_TILE = (16, 8)
OFFSETS_BATCH = 12
OFFSETS_DYS = 4
#: Work-items per work-group of the direct and finishing kernels.
DIRECT_GROUP = 64
#: The GEMM engine's work-group (x, y), register tile (queries, references) and depth
#: (the fastest of 10 shapes timed on an H100 for 100 000 x 100 000 vectors of 128).
GEMM_GROUP = (8, 8)
GEMM_TILE = (8, 8)
GEMM_DEPTH = 32
#: The offsets engine's top-k variants (see the module doc).
TOPK_HEAP, TOPK_GROUP, TOPK_WARP = 0, 1, 2
TOPK_NAMES = {TOPK_HEAP: "per-work-item heaps in global memory",
              TOPK_GROUP: "sorted lists merged by the work-group (local memory, barriers)",
              TOPK_WARP: "sorted lists merged by warps (inline-PTX ballots; elsewhere "
                         "work-groups of one warp)"}
#: The rule's top-k: the heaps, on every device. On the H100 (Table 4 case: 256x256 RGB
#: self-search, 11x11 patches, 2026-11-24) the warp-merged lists took 37.8 / 42.4 / 87.9 /
#: 145.3 ms for k = 1 / 16 / 128 / 256, the work-group-merged ones 74 / 82 / 133 / 186 ms,
#: the heaps 25.0 / 27.4 / 61.5 / 98.8 ms (binary heaps then; the packed 4-ary heaps that
#: replaced them take 21.2 / 23.1 / 35.3 / 46.0 ms, 2026-11-25, the team variants not timed
#: again); a tuning entry (or a forced configuration) with topk set and topk_k = the
#: smallest k to use it on selects a team variant.
RULE_TOPK = TOPK_HEAP


@dataclass(frozen=True)
class KnnConfig:
    """method: "offsets", "direct" or "gemm"; tile_x, tile_y: the offsets engine's tile
    (the GEMM's work-group); offsets, dys: the offsets engine's consecutive dx and dy per
    pass; group: work-items per work-group of the direct and finishing kernels; tile_m,
    tile_n, depth: the GEMM's register tile and depth; reason: why (rule or forced);
    topk: the offsets engine's top-k variant (TOPK_*) for k >= topk_k, heaps below."""

    method: str
    tile_x: int = 0
    tile_y: int = 0
    offsets: int = 0
    group: int = DIRECT_GROUP
    reason: str = ""
    tile_m: int = 0
    tile_n: int = 0
    depth: int = 0
    dys: int = 1
    topk: int = TOPK_HEAP
    topk_k: int = 0

    def describe(self) -> str:
        if self.method == "offsets":
            top = ("" if self.topk == TOPK_HEAP else
                   f", top-k: {TOPK_NAMES.get(self.topk, '?')} from k = {self.topk_k}")
            return (f"offsets engine, {self.tile_x}x{self.tile_y} query tile, "
                    f"{self.dys}x{self.offsets} offsets (dy x dx) per pass{top} "
                    f"({self.reason})")
        if self.method == "gemm":
            return (f"GEMM engine, {self.tile_x}x{self.tile_y} work-items with "
                    f"{self.tile_m}x{self.tile_n} register tiles, depth {self.depth} "
                    f"({self.reason})")
        return f"direct engine, {self.group} work-items per group ({self.reason})"

    def __str__(self) -> str:
        return self.describe()


def offsets_local_bytes(patch: int, channels: int, tile_x: int, tile_y: int,
                        offsets: int, dys: int = 1) -> int:
    """Local memory of one offsets work-group: query pixels, column sums, box sums
    (`offsets` dx times `dys` dy per pass)."""
    offsets *= dys
    cw, rh = tile_x + patch - 1, tile_y + patch - 1
    return 4 * (channels * rh * cw + offsets * tile_y * cw + offsets * tile_y * tile_x)


def heap_level_fits(config: KnnConfig, profile: Any, *, patch: int, channels: int) -> bool:
    """Whether the offsets engine's heaps can keep their third level (16 entries of 8 bytes
    per work-item) in local memory beside the tile's sums."""
    return (config.method == "offsets"
            and offsets_local_bytes(patch, channels, config.tile_x, config.tile_y,
                                    config.offsets, config.dys)
            + 128 * config.tile_x * config.tile_y <= int(profile.local_mem_size) - 1024)


def warp_ready(config: KnnConfig, profile: Any) -> bool:
    """Whether the warp top-k runs here: whole warps with inline PTX ballots, or (any
    device) work-groups of exactly one warp, 32 work-items, whose ballots go through local
    memory."""
    group = config.tile_x * config.tile_y
    return group == 32 or (profile.subgroup_ops == "ptx" and group % 32 == 0)


def team_rows(config: KnnConfig, k: int) -> int:
    """List entries per work-item of the team top-k variants for k neighbours."""
    team = 32 if config.topk == TOPK_WARP else config.tile_x * config.tile_y
    return -(-k // team)


def team_buffer(config: KnnConfig) -> int:
    """Candidates a team variant buffers per list: a pass's (offsets x dys) plus 32, rounded
    up to 32. A buffer is merged once it could not take another pass, so every merge but a
    launch's last takes more than 32 candidates."""
    return 32 * ((config.offsets * config.dys + 63) // 32)


def team_local_bytes(config: KnnConfig, k: int) -> int:
    """Local memory the team variants add to an offsets work-group: thresholds, heap
    offsets, counts and flags of its positions, the lists and buffers being merged."""
    group = config.tile_x * config.tile_y
    teams = group // 32 if config.topk == TOPK_WARP else 1
    team = group // teams
    return (20 * group + 8 * teams * (team * team_rows(config, k) + 2 * team_buffer(config))
            + 4 * 32)


def topk_variant(config: KnnConfig, profile: Any, *, patch: int, channels: int,
                 k: int) -> int:
    """The offsets engine's top-k variant (TOPK_*) for k neighbours: the configuration's
    from its topk_k up, where its lists fit the local memory and the profile has the warp
    ballots it needs; the heaps otherwise."""
    if config.method != "offsets" or config.topk == TOPK_HEAP or k < config.topk_k:
        return TOPK_HEAP
    if config.topk == TOPK_WARP and not warp_ready(config, profile):
        return TOPK_HEAP
    local = offsets_local_bytes(patch, channels, config.tile_x, config.tile_y,
                                config.offsets, config.dys) + team_local_bytes(config, k)
    return config.topk if local <= int(profile.local_mem_size) - 1024 else TOPK_HEAP


def _offsets_config(profile: Any, patch: int, channels: int) -> KnnConfig | None:
    """The offsets tile for a device: 16x8 query positions, as many consecutive dx per pass
    as one round of column sums keeps busy (a work-item per dx and column), OFFSETS_DYS
    consecutive dy; fewer dy, then fewer dx, then a smaller tile where the local memory is
    short (None when nothing fits)."""
    local = int(profile.local_mem_size) - 1024          # the compiler's own use
    group = int(profile.max_work_group_size)
    for tile in (OFFSETS_TILE, (8, 8), (8, 4)):
        if tile[0] * tile[1] > group:
            continue
        width = tile[0] + patch - 1
        dx = max(1, min(OFFSETS_BATCH, tile[0] * tile[1] // width))
        for dys in range(OFFSETS_DYS, 0, -1):
            for batch in range(dx, 0, -1):
                if offsets_local_bytes(patch, channels, *tile, batch, dys) <= local:
                    return KnnConfig("offsets", tile[0], tile[1], batch,
                                     min(DIRECT_GROUP, group), dys=dys, topk=RULE_TOPK)
    return None


def _gemm_config(profile: Any, group: int) -> KnnConfig | None:
    wx, wy = GEMM_GROUP
    tm, tn = GEMM_TILE
    if wx * wy > int(profile.max_work_group_size):
        return None
    local = 4 * GEMM_DEPTH * (wy * tm + 1 + wx * tn + 1)
    if local > int(profile.local_mem_size) - 1024:
        return None
    return KnnConfig("gemm", wx, wy, 0, group, "", tm, tn, GEMM_DEPTH)


def check_knn_params(metric: Any, patch_size: Any, channels: Any) -> tuple[str, int, int]:
    """The checked (metric, patch size, channels) of a kNN request, as `clpatch.knn` and
    `clpatch explain knn` both take them (ValueError/TypeError naming the argument)."""
    if isinstance(metric, str):
        metric = metric.lower()
    metric = check_choice("metric", metric, KNN_METRICS)
    top = MAX_PATCH if metric in ("l2", "l1") else MAX_CHAMFER_PATCH
    patch = check_int("patch_size", patch_size, 1, top)
    return metric, patch, check_int("channels", channels, 1, MAX_CHANNELS)


def knn_key(metric: str, patch: int, channels: int, step: int) -> str:
    """The tuning file's key of a request: dense grids (step <= 2) and sparse ones apart."""
    return f"knn:p{patch}:c{channels}:{metric}:{'dense' if step <= 2 else 'sparse'}"


def config_to_json(config: KnnConfig) -> dict[str, Any]:
    return {k: v for k, v in asdict(config).items() if k != "reason"}


def config_from_json(data: dict[str, Any], reason: str = "") -> KnnConfig:
    """A configuration from a tuning entry (ValueError/TypeError when it is not one)."""
    names = {f.name for f in fields(KnnConfig)} - {"reason"}
    if not isinstance(data, dict) or set(data) - names or data.get("method") not in KNN_METHODS:
        raise ValueError(f"not a kNN configuration: {data!r}")
    for name, value in data.items():
        if name != "method" and (not isinstance(value, int) or isinstance(value, bool)
                                 or value < 0):
            raise ValueError(f"kNN configuration field {name} must be an integer >= 0")
    return KnnConfig(reason=reason, **data)


def fits(config: KnnConfig, profile: Any, *, metric: str, patch: int, channels: int) -> str:
    """Why `config` cannot run this request on this device ("" when it can)."""
    group = int(profile.max_work_group_size)
    local = int(profile.local_mem_size) - 1024
    if config.method == "offsets":
        if metric not in ("l2", "l1"):
            return f"the offsets engine computes l2 and l1, not {metric}"
        if config.tile_x * config.tile_y > group or config.tile_x % 2:
            return "its tile does not fit a work-group"
        if min(config.offsets, config.dys) < 1 or offsets_local_bytes(
                patch, channels, config.tile_x, config.tile_y, config.offsets,
                config.dys) > local:
            return "its tile does not fit the local memory"
        if config.topk not in TOPK_NAMES:
            return f"unknown top-k variant {config.topk}"
        if config.topk == TOPK_WARP and not warp_ready(config, profile):
            return "its warp top-k needs inline PTX and whole warps, or one warp a group"
    elif config.method == "gemm":
        if metric != "l2":
            return f"the GEMM engine computes l2, not {metric}"
        wx, wy, tm, tn, bk = (config.tile_x, config.tile_y, config.tile_m, config.tile_n,
                              config.depth)
        if (min(wx, wy, tm, tn, bk) < 1 or tm % 4 or tn % 4 or bk % 4 or wx * wy > group
                or 2 * wx * wy * tm > bk * (wy * tm + wx * tn)
                or 4 * bk * (wy * tm + wx * tn) > local):
            return "its tiles do not fit this device"
    if not 1 <= config.group <= group:
        return "its work-group does not fit this device"
    return ""


def choose_knn(profile: Any, *, metric: str, patch: int, channels: int, step: int,
               method: str | None = None, tuning: Any = None) -> KnnConfig:
    """The configuration for a request (see the module doc for the rule)."""
    if method is None and tuning is not None:
        key = knn_key(metric, patch, channels, step)
        entry = tuning.entry(key)
        if entry is not None:
            try:
                tuned = config_from_json(entry["config"], reason=(
                    f"tuned on this device ({entry.get('date', '?')}): "
                    f"{entry.get('time_ms', 0):.3f} ms"))
                why = fits(tuned, profile, metric=metric, patch=patch, channels=channels)
            except (KeyError, TypeError, ValueError) as exc:
                tuned, why = None, str(exc)
            if not why:
                return tuned
            tuning.drop(key, why)
    group = min(DIRECT_GROUP, int(profile.max_work_group_size))
    offsets = _offsets_config(profile, patch, channels) if metric in ("l2", "l1") else None
    gemm = _gemm_config(profile, group)
    if method is not None:
        if method == "gemm":
            if metric != "l2":
                raise ValueError(f"method 'gemm' computes l2 only, not {metric!r}")
            if gemm is None:
                raise ValueError("the GEMM engine's work-group does not fit this device")
            return replace(gemm, reason="forced")
        if method == "offsets":
            if metric not in ("l2", "l1"):
                raise ValueError(f"method 'offsets' computes l2 and l1 only, not {metric!r}")
            if offsets is None:
                raise ValueError(f"the offsets tile for patch_size {patch} and {channels} "
                                 f"channels does not fit this device's local memory")
            return replace(offsets, reason="forced")
        return KnnConfig("direct", group=group, reason="forced")
    if metric not in ("l2", "l1"):
        return KnnConfig("direct", group=group, reason="Chamfer has no decomposition")
    fallback = (replace(gemm, reason="") if metric == "l2" and gemm is not None
                else KnnConfig("direct", group=group))
    if patch == 1:
        return replace(fallback, reason="1x1 patches (vectors): box sums save nothing")
    if offsets is None:
        return replace(fallback, reason="the offsets tile does not fit the local memory")
    if step > 2:
        return replace(fallback, reason=f"step {step} > 2: the offsets engine would compute "
                                        f"{step * step}x the distances needed")
    return replace(offsets, reason=f"step {step} <= 2, l2/l1")
