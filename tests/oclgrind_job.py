"""One Oclgrind job, run in its own process by tests/test_oclgrind.py.

    python tests/oclgrind_job.py search VARIANT TABLE [--video] [--channels C]
    python tests/oclgrind_job.py nlmeans AGGREGATION AVERAGING [--video] [--channels C]
    python tests/oclgrind_job.py bm3d AGGREGATION [--channels C] [--stagger] [--exact]
    python tests/oclgrind_job.py vbm3d SEARCH_VARIANT AGGREGATION [--channels C]
    python tests/oclgrind_job.py knn METHOD METRIC [--channels C]
    python tests/oclgrind_job.py nnf [--channels C]
    python tests/oclgrind_job.py ann local|global|bad-values [--burst] [--select] [--dense]
        [--units] [--pair]
    python tests/oclgrind_job.py planted race|uninit_local|uninit_private|uninit_global

Runs on the device CLPATCH_DEVICE names (the tests set `oclgrind`) and refuses any other.
`search` runs one search configuration on a tiny image and checks it against the NumPy
oracle (exit 1 with the reason when it differs); `nlmeans` likewise runs NL-means with one
aggregation strategy and averaging kernel against its NumPy reference; `bm3d` runs both
BM3D stages (CBM3D with 3 channels) with one aggregation strategy against the NumPy
reference, keeping every buffer alive (see `keep_buffers_alive`); `vbm3d` runs VBM3D on a
tiny video with one search variant and aggregation against its NumPy reference; `knn` runs
the exhaustive kNN with one engine and metric on two tiny images against its NumPy brute
force (several splits and heap blocks, so the merge runs too; METHOD "offsets-group" or
"offsets-warp" forces the offsets engine's team top-k, "offsets-k40" the heaps with k = 40,
sorted by the finish in local memory, "direct-banded" windows and bands merged on the
device); `nnf` runs the
approximate nearest-neighbour field on two tiny images against its NumPy oracle (a tree of
several levels, a backtracking row, propagation and refinement); `planted` runs a
test-only kernel with a planted bug, which Oclgrind must report on stderr. Oclgrind's own
diagnostics go to stderr; the test reads them there. One configuration per process: Oclgrind's
uninitialised-value plugin reports false positives once a second plan in the same
process reuses memory.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pyopencl as cl

import clpatch
from tests.helpers import check_search, random_image, smooth_noisy

# Tiny on purpose: Oclgrind interprets every work-item. 17x19 with patch 8 and step 4 puts
# the last grid row and column off the lattice, so the border (naive) kernel runs as well.
SHAPE = (17, 19)
PATCH, STEP, WINDOW, K = 8, 4, 7, 4
FRAMES, TEMPORAL_WINDOW = 3, 1

PLANTED = """
// Every work-item writes its own local slot and, with no barrier in between, reads its
// neighbour's, which the neighbour writes: a read-write race on local memory. The first
// write and barrier make sure every slot holds a value, so only the race is reported.
__kernel void race(__global float *out) {
    __local float slot[16];
    int i = get_local_id(0);
    slot[i] = (float)i;
    barrier(CLK_LOCAL_MEM_FENCE);
    slot[i] = 2.0f * (float)i;
    out[get_global_id(0)] = slot[(i + 1) % 16];
}

// Slot 0 is never written; work-item 15 reads it (after a barrier: no race).
__kernel void uninit_local(__global float *out) {
    __local float slot[16];
    int i = get_local_id(0);
    if (i > 0) slot[i] = (float)i;
    barrier(CLK_LOCAL_MEM_FENCE);
    out[get_global_id(0)] = slot[(i + 1) % 16];
}

// Only the first `k` entries of a private array are written; half the work-items read past them.
__kernel void uninit_private(__global float *out, int k) {
    float priv[8];
    int i = get_local_id(0);
    for (int j = 0; j < k; ++j) priv[j] = (float)(i + j);
    out[get_global_id(0)] = priv[(i + 1) % 8];
}

// Copies a global buffer that nothing ever wrote (run with every buffer kept alive, as the
// bm3d job does, to show that this still gets reported).
__kernel void uninit_global(__global float *out, __global const float *never) {
    out[get_global_id(0)] = never[get_global_id(0)];
}
"""


def simulator_runtime(**options) -> clpatch.Runtime:
    runtime = clpatch.Runtime(**options)
    if not runtime.is_simulator:
        sys.exit(f"oclgrind_job: CLPATCH_DEVICE must select the Oclgrind simulator, got {runtime}")
    return runtime


def run_search(variant: str, table: str, video: bool, channels: int) -> None:
    runtime = simulator_runtime()
    shape = ((FRAMES,) if video else ()) + SHAPE + ((channels,) if channels > 1 else ())
    image = random_image(shape, seed=len(variant) + 7 * channels + 13 * video)
    # Small work-groups keep the simulation short and exercise several groups per row.
    knobs = {"convolution": dict(group=16), "column": dict(group=16), "square": dict(tile=4)}
    config = clpatch.SearchConfig(variant, table=table, **knobs.get(variant, {}))
    tw = TEMPORAL_WINDOW if video else 0
    result = clpatch.search_patches(image, PATCH, STEP, WINDOW, K, variant=config,
                                    temporal_window=tw, runtime=runtime,
                                    video=True if video else None)
    check_search(result, image, patch_size=PATCH, step=STEP, window=WINDOW, k=K,
                 temporal_window=tw, video=video)
    print(f"ok: {result.config.describe()} on {image.shape}")


def run_nlmeans(aggregation: str, averaging: str, video: bool, channels: int) -> None:
    from tests.reference.nlmeans import nlmeans_reference

    runtime = simulator_runtime()
    shape = ((FRAMES,) if video else ()) + SHAPE + ((channels,) if channels > 1 else ())
    image = random_image(shape, seed=len(aggregation) + 5 * channels + 11 * video)
    tw = TEMPORAL_WINDOW if video else 0
    params = dict(patch_size=PATCH, step=STEP, window=WINDOW, k=K, aggregation=aggregation,
                  averaging=averaging, runtime=runtime)
    if video:
        out = clpatch.nlmeans_video(image, 20.0, temporal_window=tw, **params)
    else:
        # Twice: the second run finds the accumulation zeroed by the first's finalize and
        # skips its clearing launch ("cas" adds floats in the atomics' order: rounding).
        first = clpatch.nlmeans(image, 20.0, **params)
        out = clpatch.nlmeans(image, 20.0, **params)
        if not float(np.abs(first - out).max()) <= (2e-3 if aggregation == "cas" else 0.0):
            sys.exit(f"nlmeans {aggregation}/{averaging}: a second run differs from the first")
    expected = nlmeans_reference(image, 20.0, patch_size=PATCH, step=STEP, window=WINDOW, k=K,
                                 temporal_window=tw, video=video)
    error = float(np.abs(out - expected).max())
    if not error <= 2e-3:
        sys.exit(f"nlmeans {aggregation}/{averaging} differs from the reference by {error}")
    print(f"ok: nlmeans {aggregation}/{averaging} on {image.shape} (max error {error:.2g})")


class _KeptBuffer(cl.Buffer):
    """A pyopencl Buffer that is never released before the process ends."""

    kept: list = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _KeptBuffer.kept.append(self)


def keep_buffers_alive() -> None:
    """Make every later `pyopencl.Buffer(...)` live until the process ends.

    The uninitialised-value plugin of Oclgrind 19.10 keeps the shadow of a released buffer,
    and a new buffer that gets the released one's slot inherits that stale shadow with its
    old size: stores beyond it are dropped and loads beyond it read as uninitialised. The
    search's border launches create small (4-16 byte) position buffers and release them
    right away; a BM3D pool buffer allocated after them (the basic estimate) then looks
    uninitialised beyond its first 16 bytes, and stage 2 reports "Uninitialized value" on
    reads of the basic estimate although the kernels wrote every element. With no buffer
    ever released no slot is reused, and reads of never-written memory are still reported
    (`planted uninit_global`).
    """
    cl.Buffer = _KeptBuffer


def run_bm3d(aggregation: str, channels: int, stagger: bool = False, exact: bool = False) -> None:
    from tests.reference.bm3d import bm3d_reference

    keep_buffers_alive()
    runtime = simulator_runtime()
    shape = SHAPE + ((channels,) if channels > 1 else ())
    image = smooth_noisy(shape, seed=len(aggregation) + 5 * channels)
    # Patch 8 (the paper's conflict-free transposes), step 4, both stages; window 7 keeps
    # the search short while every reference still has 16 or more candidates (n = 8).
    # --stagger: step 3 on the staggered grid, searched by the column variant (its shifted
    # column sums) with the naive kernel for the last row and column.
    # --exact: the exact noise variances (the reference preset's; Haar along the group).
    extra = dict(step=3, stagger=True) if stagger else {}
    if exact:
        extra.update(exact_variance=True, transform_1d="haar")
    out = clpatch.bm3d(image, 20.0, preset="fast", window=WINDOW, aggregation=aggregation,
                       variant="column" if stagger else None, runtime=runtime, **extra)
    expected = bm3d_reference(image.astype(np.float64), 20.0, "fast", window=WINDOW, **extra)
    if out.shape != image.shape:
        sys.exit(f"bm3d {aggregation} returned shape {out.shape} for {image.shape}")
    error = float(np.abs(out - expected).max())
    if not error <= 1e-3:
        sys.exit(f"bm3d {aggregation} on {image.shape} differs from the reference by {error}")
    print(f"ok: bm3d {aggregation} on {image.shape} (max error {error:.2g})")


def run_vbm3d(variant: str, aggregation: str, channels: int) -> None:
    from tests.reference.vbm3d import vbm3d_reference

    keep_buffers_alive()
    runtime = simulator_runtime()
    # 4 frames with temporal radius 1 (a ring of 6 frame slots, 4 accumulator slots), both
    # stages; 14 x 17 puts the last grid row and column off the step lattice.
    frames = np.stack([smooth_noisy((14, 17) + ((channels,) if channels > 1 else ()), seed=t)
                       for t in range(4)])
    out = clpatch.vbm3d(frames, 20.0, temporal_radius=1, variant=variant,
                        aggregation=aggregation, runtime=runtime)
    expected = vbm3d_reference(frames.astype(np.float64), 20.0, temporal_radius=1)
    error = float(np.abs(out - expected).max())
    if out.shape != frames.shape or not error <= 1e-3:
        sys.exit(f"vbm3d {variant} {aggregation} on {frames.shape}: shape {out.shape}, "
                 f"error {error}")
    print(f"ok: vbm3d {variant} {aggregation} on {frames.shape} (max error {error:.2g})")


def force_knn_topk(name: str) -> None:
    """Make clpatch.knn's offsets engine use the top-k variant `name` ("group", "warp")
    for every k."""
    from dataclasses import replace

    from clpatch.match.knn import search as knn_module
    from clpatch.match.knn.config import TOPK_GROUP, TOPK_WARP

    rule = knn_module.choose_knn

    def choose(*args, **kw):
        config = rule(*args, **kw)
        if name == "warp":
            return replace(config, topk=TOPK_WARP, topk_k=1, tile_x=8, tile_y=4)
        # (fewer offsets per pass: the lists' staging fits Oclgrind's 32 KiB local memory)
        return replace(config, topk=TOPK_GROUP, topk_k=1, offsets=min(config.offsets, 3),
                       dys=min(config.dys, 2))

    knn_module.choose_knn = choose


def run_knn(method: str, metric: str, channels: int) -> None:
    from tests.reference.knn import knn_brute

    keep_buffers_alive()
    banded = method == "direct-banded"
    # direct-banded: a memory limit that cuts the query into windows and the reference
    # into bands, whose matches the merge kernel joins on the device.
    runtime = simulator_runtime(memory_limit=3000) if banded else simulator_runtime()
    method = "direct" if banded else method
    shape = (11, 13) + ((channels,) if channels > 1 else ())
    rng = np.random.default_rng(3)
    levels = 3 if metric.startswith("chamfer") else 256
    query = rng.integers(0, levels, shape).astype(np.uint8)
    reference = rng.integers(0, levels, (10, 12) + shape[2:]).astype(np.uint8)
    p, k = (3, 5) if metric.startswith("chamfer") else (4, 6)
    team = method.split("-")[1] if method in ("offsets-group", "offsets-warp") else None
    if team:
        # The offsets engine's team top-k forced (the warp one in work-groups of one warp,
        # its ballots through local memory), k large enough for two list rows per lane.
        force_knn_topk(team)
        method, k = "offsets", 40
    elif method == "offsets-k40":
        # The heaps with k = 40: the finish sorts in local memory (its buffers made to fit
        # the simulator's 32 KiB), the splits share a bound.
        from clpatch.match.knn import plan as knn_plan

        knn_plan.SORTED_MAX = 512
        method, k = "offsets", 40
    got = clpatch.knn(query, reference, patch_size=p, k=k, metric=metric, step=2,
                      method=method, runtime=runtime)
    if team:
        from clpatch.match.knn.config import TOPK_GROUP, TOPK_WARP

        plan = next(reversed(runtime.plan_cache().values()))
        if plan.topk != (TOPK_WARP if team == "warp" else TOPK_GROUP):
            sys.exit(f"knn: the {team} top-k did not run (variant {plan.topk})")
        method = f"offsets ({team} top-k)"
    if k == 40 and not team:
        plan = next(reversed(runtime.plan_cache().values()))
        if not (plan.sorted_finish and plan.splits > 1):
            sys.exit("knn: the sorting finish of several splits did not run")
    if banded:
        plan = next(reversed(runtime.plan_cache().values()))
        if getattr(plan, "layout", None) is None or len(plan.layout.bands) < 2:
            sys.exit("knn: the banded plan did not run")
        method = "direct (banded, merged on the device)"
    positions, distances = knn_brute(query, reference, p, k, metric, step=2)
    if not (np.array_equal(got.positions, positions)
            and np.allclose(got.distances, distances, rtol=0, atol=1e-3)):
        sys.exit(f"knn {method} {metric} differs from the brute force")
    print(f"ok: knn {method} {metric} on {shape} (exact)")


def run_nnf(channels: int, pca_dims: int = 3) -> None:
    from clpatch.match.nnf.plan import BAND, POLISH, REFINE, VISITS, hard_effort
    from tests.reference.nnf import nnf_oracle

    keep_buffers_alive()
    # Work-groups of at most 16: the sort's blocks hold 32 of the 128 slots, so the global
    # bitonic steps and the merges run as well as the local sort.
    runtime = simulator_runtime(profile_overrides={"max_work_group_size": 16})
    extra = (channels,) if channels > 1 else ()
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (12, 14) + extra).astype(np.uint8)
    b = rng.integers(0, 256, (11, 13) + extra).astype(np.uint8)
    # b's 9 x 11 = 99 patches in leaves of 4: 5 levels, the last of 25 real leaves short
    # (3 points < 4 candidates); a's 10 rows of patches: row 0 by backtracking, rows 1-9
    # propagated, then the refinement passes.
    # Above 10 reduced dimensions the hard queries' expansion also traverses the tree.
    params = dict(patch_size=3, k=2, pca_dims=pca_dims, candidates=4, leaf_size=4, seed=0)
    got = clpatch.nnf(a, b, runtime=runtime, **params)
    slack, points, leaves, expand_visits = hard_effort(pca_dims)
    positions, distances = nnf_oracle(a, b, band=BAND, visits=VISITS, refine=REFINE,
                                      expand_points=points, expand_leaves=leaves,
                                      slack=slack, expand_visits=expand_visits,
                                      polish_passes=POLISH, **params)
    if not (np.array_equal(got.positions, positions)
            and np.array_equal(got.distances, distances)):
        sys.exit(f"nnf differs from the oracle at "
                 f"{np.argwhere(np.any(got.positions != positions, axis=-1))[:4].tolist()}")
    print(f"ok: nnf on {a.shape} and {b.shape}, {pca_dims} dimensions (exact)")


def run_ann_bad_values() -> None:
    """The ANN on images with a NaN and an infinite pixel, step 1 and 2: every kernel stays
    in bounds (a NaN key once sent the partition past its node) and the call raises."""
    runtime = simulator_runtime()
    for value, step in ((np.nan, 1), (np.inf, 2)):
        image = np.random.default_rng(7).normal(0, 1, (20, 22)).astype(np.float32)
        image[3, 4] = value
        try:
            clpatch.ann_search(image, patch_size=4, k=4, tile=6, step=step, runtime=runtime)
        except ValueError as exc:
            if "NaN or infinite" not in str(exc):
                sys.exit(f"unexpected error: {exc}")
        else:
            sys.exit(f"ann_search accepted an image with {value}")
    print("ok: ann on NaN and infinite pixels raised, in bounds")


def run_ann(pixels: str, burst: bool, dense: bool, units: bool = False,
            pair: bool = False) -> None:
    from clpatch.match.ann.pair import AnnPair
    from clpatch.match.ann.params import AnnConfig, check_ann_request
    from clpatch.match.ann.plan import AnnPlan
    from tests.reference.ann import ann, ann_pair_image

    runtime = simulator_runtime()
    frames = 2 if burst else 1
    rng = np.random.default_rng(6)
    # 13 x 15 positions of 3 x 3 patches in tiles of 6: edge tiles of 7 x 9 = 63 patches
    # (126 in a burst of 2), so nodes split on two levels and the partition scans run
    # over several chunks of a 32-item group; one neighbour cluster. Dense: every position
    # a reference and no neighbour cluster (an image's symmetric distance tables, the
    # vote of at most 32 candidates in registers). Units: tiles of 5 and a query of one
    # warp, so that a last-row tile (8 x 5 positions: 2 clusters against an inner tile's 1)
    # is answered by two work-groups. Pair: the filters' two tilings (tiles of 5; the second
    # of origin 2 on both axes), each answering its share of the references.
    image = rng.integers(0, 256, (frames, 15, 17, 1)).astype(np.float32)
    step, neighbours = (1, 0) if dense else (2, 1)
    tile = 5 if units or pair else 6
    request = check_ann_request(patch_size=3, step=step, k=6, tile=tile,
                                neighbour_clusters=neighbours, channels=1, rows=15, cols=17,
                                frames=frames)
    config = AnnConfig(32, False, tile, neighbours, local_pixels=pixels == "local",
                       query_group=32 if units else 64)
    if pair:
        plan = AnnPair(runtime, 15, 17, 1, request, config)
        if plan.second is None or plan.second.origin != (2, 2):
            sys.exit("the pair did not plan a second tiling of origin (2, 2)")
    else:
        plan = AnnPlan(runtime, frames, 15, 17, 1, request, config, video=burst,
                       reference=frames - 1)
    if bool(plan.block) != (pixels == "local"):
        sys.exit(f"the plan did not take its pixels from {pixels} memory")
    if units and plan.units[1] >> 8 < 2:
        sys.exit("no tile was answered by several work-groups")
    got = plan.run(image if burst else image[0])
    if pair:
        positions, distances = ann_pair_image(image[0], patch_size=3, k=6, tile=tile,
                                              step=step, neighbour_clusters=neighbours)
    else:
        positions, distances = ann(image, patch_size=3, k=6, tile=tile, step=step,
                                   neighbour_clusters=neighbours, reference=frames - 1)
    if not (burst or pair):
        positions = positions[..., 1:]
    if not (np.array_equal(got.positions, positions)
            and np.array_equal(got.distances, distances)):
        sys.exit("ann differs from the oracle")
    print(f"ok: ann ({pixels} pixels{', burst' if burst else ''}{', dense' if dense else ''}"
          f"{', units' if units else ''}{', pair' if pair else ''}) equals the oracle")


def run_noise_level(channels: int) -> None:
    from tests.reference.noise_level import estimate_sigma

    runtime = simulator_runtime()
    rng = np.random.default_rng(7)
    # 30 x 28 positions: 22 x 20 = 440 patches of 9 x 9 (the least the estimate takes is 324),
    # smooth structure plus noise so that the selection rejects some of them.
    y, x = np.mgrid[:30, :28]
    clean = 100 + 60 * np.sin(x / 5.0) * np.cos(y / 7.0)
    if channels > 1:
        clean = np.stack([clean + 10 * c for c in range(channels)], -1)
    image = (clean + rng.normal(0, 8.0, clean.shape)).astype(np.float32)
    got = np.asarray(clpatch.estimate_sigma(image, runtime=runtime), np.float64)
    want = np.asarray(estimate_sigma(image), np.float64)
    if not np.allclose(got, want, rtol=1e-4, atol=0):
        sys.exit(f"estimate_sigma differs from the oracle: {got} against {want}")
    print(f"ok: estimate_sigma on {image.shape} = {got} (oracle {want})")


def run_planted(kernel_name: str) -> None:
    runtime = simulator_runtime()
    program = runtime.programs.build(PLANTED, template="<planted bugs>")
    extra: tuple = ()
    if kernel_name == "uninit_private":
        extra = (np.int32(4),)
    elif kernel_name == "uninit_global":
        keep_buffers_alive()
        extra = (cl.Buffer(runtime.context, cl.mem_flags.READ_ONLY, 16 * 4),)
    out = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE, 16 * 4)
    getattr(program, kernel_name)(runtime.queue, (16,), (16,), out, *extra)
    host = np.empty(16, np.float32)
    cl.enqueue_copy(runtime.queue, host, out)
    runtime.queue.finish()
    print(f"ran planted kernel {kernel_name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    jobs = parser.add_subparsers(dest="job", required=True)
    search = jobs.add_parser("search")
    search.add_argument("variant")
    search.add_argument("table")
    search.add_argument("--video", action="store_true")
    search.add_argument("--channels", type=int, default=1)
    nlm = jobs.add_parser("nlmeans")
    nlm.add_argument("aggregation")
    nlm.add_argument("averaging")
    nlm.add_argument("--video", action="store_true")
    nlm.add_argument("--channels", type=int, default=1)
    bm3d = jobs.add_parser("bm3d")
    bm3d.add_argument("aggregation")
    bm3d.add_argument("--channels", type=int, default=1)
    bm3d.add_argument("--stagger", action="store_true")
    bm3d.add_argument("--exact", action="store_true")
    vbm3d = jobs.add_parser("vbm3d")
    vbm3d.add_argument("variant")
    vbm3d.add_argument("aggregation")
    vbm3d.add_argument("--channels", type=int, default=1)
    knn = jobs.add_parser("knn")
    knn.add_argument("method")
    knn.add_argument("metric")
    knn.add_argument("--channels", type=int, default=1)
    nnf = jobs.add_parser("nnf")
    nnf.add_argument("--channels", type=int, default=1)
    nnf.add_argument("--pca-dims", type=int, default=3)
    ann_job = jobs.add_parser("ann")
    ann_job.add_argument("pixels", choices=("local", "global", "bad-values"))
    ann_job.add_argument("--burst", action="store_true")
    ann_job.add_argument("--select", action="store_true",
                         help="every node's median by the digit selection (RANK_SELECT 0)")
    ann_job.add_argument("--dense", action="store_true",
                         help="step 1 and no neighbour cluster")
    ann_job.add_argument("--units", action="store_true",
                         help="a larger tile answered by several query work-groups")
    ann_job.add_argument("--pair", action="store_true",
                         help="the filters' two tilings (an image only)")
    noise_job = jobs.add_parser("noise_level")
    noise_job.add_argument("--channels", type=int, default=1)
    planted = jobs.add_parser("planted")
    planted.add_argument("kernel", choices=("race", "uninit_local", "uninit_private",
                                            "uninit_global"))
    args = parser.parse_args()
    if args.job == "search":
        run_search(args.variant, args.table, args.video, args.channels)
    elif args.job == "nlmeans":
        run_nlmeans(args.aggregation, args.averaging, args.video, args.channels)
    elif args.job == "bm3d":
        run_bm3d(args.aggregation, args.channels, args.stagger, args.exact)
    elif args.job == "vbm3d":
        run_vbm3d(args.variant, args.aggregation, args.channels)
    elif args.job == "knn":
        run_knn(args.method, args.metric, args.channels)
    elif args.job == "nnf":
        run_nnf(args.channels, args.pca_dims)
    elif args.job == "ann":
        if args.select:
            from clpatch.match.ann import plan as ann_plan
            ann_plan.RANK_SELECT = 0
        if args.pixels == "bad-values":
            run_ann_bad_values()
        else:
            run_ann(args.pixels, args.burst, args.dense, args.units, args.pair)
    elif args.job == "noise_level":
        run_noise_level(args.channels)
    else:
        run_planted(args.kernel)


if __name__ == "__main__":
    main()
