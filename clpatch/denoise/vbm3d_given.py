"""VBM3D on given matches (`clpatch.vbm3d(..., matches=)`): a stage's groups come from a
video `Matches` (positions (T, gy, gx, k, 3) as (t, y, x), every frame's references) instead
of the predictive search, copied by a `clpatch.match.given.GivenMatcher` (which checks them).

What VBM3D adds to the checks of `clpatch.match.given`:

- a reference's matches must lie within `temporal_radius` frames of its own frame: the
  device holds only the frames of that radius around a reference frame (its rings);
- the fixed-point scales bound the patches one pixel gathers. The predictive search's bound
  (`clpatch.denoise.vbm3d_params.contributions`) counts its q patches per frame within its
  windows' drift; given matches are measured instead (by a kernel, on NumPy and device
  matches alike): for every frame offset d, the most matches a reference has in the frame d
  away and how far (rows or columns) they lie from it. The bound is the larger of the two,
  so that the predictive search's own matches give its scales, hence its result bit for
  bit, and any other matches a bound that holds for them;
- the frames of a run are the matches' frames: a plan on given matches runs (or streams)
  videos of exactly their frame count, in one band of whole frames (the matches may point
  anywhere in a frame).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import numpy as np
import pyopencl.array as cla
from pyopencl.elementwise import ElementwiseKernel

from ..core.volumes import Volume
from ..match.given import check_given
from ..match.matches import usable_n
from .given import stage_label
from .vbm3d_params import DEFAULTS, VideoStageParams, contributions, references_within

__all__ = ["counted", "given_defaults", "given_stages", "measured_contributions"]

#: Work-item i: reference i of the matches ((frame * gy + row) * gx + col), its first N of
#: K entries. stats[0]: the largest |frame offset| of an entry; for offsets d in -R..R,
#: stats[1 + R + d]: the most entries a reference has at offset d, stats[2 + 3R + d]: the
#: largest |row| or |column| offset of those entries from their reference.
_ARGUMENTS = ("const int *pos, const int *ys, const int *xs, const int K, const int N,"
              " const int gy, const int gx, const int R, int *stats")
_OPERATION = """
    const int r = (int)i;
    const int t = r / (gy * gx);
    const int ry = ys[(r / gx) % gy], rx = xs[r % gx];
    __global const int *e = pos + (size_t)r * K * 3;
    int far = 0;
    for (int j = 0; j < N; ++j)
        far = max(far, (int)abs(e[3 * j] - t));     /* (abs of an int is a uint) */
    atomic_max(stats, far);
    for (int d = -R; d <= R; ++d) {
        int count = 0, spread = 0;
        for (int j = 0; j < N; ++j) {
            if (e[3 * j] - t == d) {
                ++count;
                spread = max(spread, (int)max(abs(e[3 * j + 1] - ry), abs(e[3 * j + 2] - rx)));
            }
        }
        if (count) {
            atomic_max(stats + 1 + R + d, count);
            atomic_max(stats + 2 + 3 * R + d, spread);
        }
    }
"""


def given_defaults(given: tuple[Any, Any], params: dict[str, Any]) -> dict[str, Any]:
    """`vbm3d`'s parameters with those the given matches set where the caller gave none:
    patch_size (the first given stage's), step (each given stage's; the default for a stage
    that searches) and temporal_radius (the largest temporal_window of the given matches).
    Anything but a Matches sets nothing (`check_given` refuses it later, naming it)."""
    if all(m is None for m in given):
        return params
    params = dict(params)
    ms = [m for m in given if m is not None]
    if params.get("patch_size") is None:
        params["patch_size"] = getattr(ms[0], "patch_size", None)
    if params.get("step") is None:
        default = DEFAULTS["step"]
        params["step"] = tuple(default[s] if m is None else getattr(m, "step", default[s])
                               for s, m in enumerate(given))
    if params.get("temporal_radius") is None:
        radii = [getattr(m, "temporal_window", None) for m in ms]
        params["temporal_radius"] = max((r for r in radii if r is not None), default=None)
    return params


def given_stages(volume: Volume, given: tuple[Any, Any], params: tuple[VideoStageParams, ...],
                 stages: int) -> tuple[tuple[VideoStageParams, ...], tuple[bool, ...]]:
    """(the stages' parameters, whether each stage's groups are given) for frames like
    `volume`: a given stage's matches checked against its grid and the frames
    (`check_given`, errors naming `matches` or `matches[s]`), its group size k lowered to
    the matches' k (a power of 2). Matches of a stage not run (stages=1) are ignored."""
    out, flags = list(params), []
    for s in range(stages):
        m = given[s]
        flags.append(m is not None)
        if m is None:
            continue
        sp = params[s]
        k = check_given(m, rows=volume.rows, cols=volume.cols, frames=volume.frames,
                        patch_size=sp.patch_size, step=sp.step, video=True,
                        name=stage_label(given, s)).k
        n = usable_n(sp.n, k, power_of_two=True)
        out[s] = replace(sp, n=n, q=min(sp.q, n))
    return tuple(out), tuple(flags)


def _kernel(runtime: Any) -> AbstractContextManager[ElementwiseKernel]:
    """The statistics kernel of `_OPERATION`, built once per runtime, this thread's for the
    `with` block (`PlanCache.using`)."""
    return runtime.plan_cache().using(
        ("vbm3d-given-stats",),
        lambda: ElementwiseKernel(runtime.context, _ARGUMENTS, _OPERATION,
                                  "vbm3d_given_stats"), 1)


def measured_contributions(runtime: Any, matches: Any, grid: tuple[Any, Any],
                           params: VideoStageParams, radius: int, name: str) -> int:
    """An upper bound of the patches that the groups of `matches` (checked already: see
    `clpatch.match.given.GivenMatcher.use`) aggregate into one pixel, at least the
    predictive search's (`contributions`); `grid`: the reference rows and columns as
    int32 device arrays. ValueError naming `name` when a match lies more than `radius`
    frames from its reference."""
    queue = runtime.queue
    pos = matches.positions
    if not isinstance(pos, cla.Array):
        pos = cla.to_device(queue, np.ascontiguousarray(pos))
    t, gy, gx, k = matches.distances.shape
    stats = cla.zeros(queue, 2 + 4 * radius + 1, np.int32)
    with _kernel(runtime) as kernel:
        kernel(pos, *grid, np.int32(k), np.int32(params.n), np.int32(gy), np.int32(gx),
               np.int32(radius), stats, range=slice(t * gy * gx), queue=queue)
    host = stats.get(queue=queue)       # (a synchronous part of planning, as `use`'s check)
    far = int(host[0])
    if far > radius:
        raise ValueError(f"{name} reach frames {far} away from their references' frames, "
                         f"beyond temporal_radius={radius} (the frames VBM3D holds around a "
                         "reference frame): pass a larger temporal_radius")
    counts, spreads = host[1:2 * radius + 2], host[2 * radius + 2:]
    p, total = params.patch_size, 0
    for d in range(-radius, radius + 1):
        count = int(counts[d + radius]) + (d == 0)      # the reference is always in its group
        if count:
            per_axis = references_within(p - 1 + int(spreads[d + radius]), params.step)
            total += per_axis * per_axis * min(count, params.n)
    return max(total, contributions(params, radius))


def counted(frames: Iterable[Any], total: int) -> Iterator[Any]:
    """`frames`, checked to be `total` of them (the frames given matches hold): ValueError
    when one more comes, or when they end before (before the last outputs are made)."""
    count = 0
    for frame in frames:
        if count == total:
            raise ValueError(f"frames has more frames than the {total} the plan's matches "
                             "hold")
        count += 1
        yield frame
    if count != total:
        raise ValueError(f"frames ended after {count} frames; the plan's matches hold {total}")
