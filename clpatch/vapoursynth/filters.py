"""The filters: `bm3d`, `vbm3d`, `nlmeans`, each returning a VideoNode in the clip's format.

Every filter checks its clip and arguments when the script builds it (the first lane's
plans are made then, so a bad parameter raises there, naming it), and runs clpatch's plans
on the frames VapourSynth asks for (`clpatch.vapoursynth.spatial` frame by frame,
`clpatch.vapoursynth.temporal` by chunks). Each frame's result equals clpatch's own
function on the same frames with the filter's `data_range` and `peak`
(`clpatch.vapoursynth.formats`), rounded to the clip's format.
"""

from __future__ import annotations

import math
from typing import Any

import vapoursynth as vs

import clpatch

from .formats import ClipFormat, clip_format, plane_sigmas
from .jobs import PlaneJob, plane_jobs
from .lanes import Lanes
from .spatial import FrameFilter
from .temporal import ChunkFilter, chunk_length

__all__ = ["bm3d", "nlmeans", "vbm3d"]

#: Lanes of a temporal filter by default: one enqueues a chunk while another's runs.
TEMPORAL_LANES = 2


def _lane_count(lanes: int | None, temporal: bool) -> int:
    if lanes is not None:
        return lanes
    return TEMPORAL_LANES if temporal else max(1, vs.core.num_threads)


def _check_radius(name: str, what: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: {what} must be an integer >= 0, got {value!r}")


def _setup(name: str, clip: Any, sigma: Any, planes: Any, chroma: bool,
           colour: str) -> tuple[ClipFormat, list[PlaneJob]]:
    fmt = clip_format(clip, name)
    default = (0,) if fmt.family == "yuv" and not chroma else tuple(range(fmt.planes))
    sigmas = plane_sigmas(sigma, fmt, planes, name, default)
    return fmt, plane_jobs(fmt, sigmas, bool(chroma), name, colour)


def _chunked(name: str, clip: Any, fmt: ClipFormat, jobs: list[PlaneJob], lanes: Lanes,
             make: Any, halo: int, chunk_frames: int | None) -> Any:
    frame_bytes = max(4 * math.prod(job.shape) for job in jobs)
    length = chunk_length(halo, frame_bytes, chunk_frames)
    callback = ChunkFilter(clip, fmt, jobs, lanes, make, halo, length)
    callback.prepare()
    return callback.node()


def bm3d(clip: Any, sigma: Any = 3.0, *, preset: str = "fast", radius: int = 0,
         ref: Any = None, planes: Any = None, chroma: bool = False, device: Any = None,
         lanes: int | None = None, **params: Any) -> Any:
    """BM3D (CBM3D for RGB and, with `chroma`, YUV444) on every frame of `clip`.

    sigma: the noise's standard deviation in 8-bit units whatever the bit depth
        (BM3DCUDA's convention): one number, or one per plane (0: the plane is copied).
    preset: "fast" or "reference" (see `clpatch.bm3d`). radius: 0 only; temporal BM3D is
        `vbm3d` (clpatch's temporal filter is VBM3D's predictive search, not BM3D-V).
    ref: a clip of the same format and size (BM3DCUDA's `ref`): the basic estimate; only
        stage 2 runs, its groups matched on `ref` and its Wiener oracle taken from it.
    planes: the planes to filter (None: every plane, but the luma alone for YUV).
    chroma: YUV444 only: the three planes together through CBM3D's opponent space (groups
        matched on the luma), as BM3DCUDA's `chroma=True`.
    device: clpatch's device spec (`clpatch.select_device`; None: CLPATCH_DEVICE or the
        best GPU), or a `clpatch.Runtime` whose context the filter shares.
    lanes: concurrent requests on their own queues (None: `core.num_threads`).
    params: `clpatch.bm3d`'s other parameters (patch_size, step, window, k, ...).
    """
    name = "clpatch.vapoursynth.bm3d"
    if radius != 0:
        raise ValueError(f"{name}: radius must be 0 (got {radius!r}): for temporal denoising "
                         "use clpatch.vapoursynth.vbm3d(clip, sigma, radius=...)")
    fmt, jobs = _setup(name, clip, sigma, planes, chroma, "opponent")
    guided = ref is not None
    if guided:
        ref_fmt = clip_format(ref, name, "ref")
        if (ref_fmt.name, ref_fmt.plane_shapes) != (fmt.name, fmt.plane_shapes) or \
                ref.num_frames != clip.num_frames:
            raise ValueError(f"{name}: ref must have the clip's format, size and length "
                             f"({fmt.name} {clip.width}x{clip.height}, {clip.num_frames} "
                             f"frames), got {ref_fmt.name} {ref.width}x{ref.height}, "
                             f"{ref.num_frames} frames")
        if params.get("stages", 2) != 2:
            raise ValueError(f"{name}: ref is the basic estimate, for stage 2: stages must "
                             f"be 2 with ref, got {params['stages']!r}")
        params = {**params, "stages": 2}
    extra = {"guide": True, "guide_role": "oracle"} if guided else {}

    def make(runtime: Any, job: PlaneJob) -> Any:
        return clpatch.make_plan("bm3d", job.shape, dtype=job.dtype, runtime=runtime,
                                 sigma=job.sigma, preset=preset, data_range=job.data_range,
                                 peak=job.peak, **extra, **params)

    callback = FrameFilter(fmt, jobs, Lanes(device, _lane_count(lanes, False)), make, guided)
    callback.prepare()
    return vs.core.std.ModifyFrame(clip, [clip, ref] if guided else clip, callback)


def vbm3d(clip: Any, sigma: Any = 3.0, *, radius: int = 4, planes: Any = None,
          chroma: bool = False, device: Any = None, lanes: int | None = None,
          chunk_frames: int | None = None, **params: Any) -> Any:
    """VBM3D (its colour version for RGB and, with `chroma`, YUV444) on `clip`.

    radius: frames searched on each side of a reference's (clpatch.vbm3d's
        temporal_radius); frames n − radius … n + radius, truncated at the clip's ends.
        Frame n equals `clpatch.vbm3d` on the whole clip (see
        `clpatch.vapoursynth.temporal`). chunk_frames: output frames per chunk (None: see
        `clpatch.vapoursynth.temporal`). sigma, planes, chroma, device, lanes (None: 2): as
        in `bm3d`. params: `clpatch.vbm3d`'s other parameters.
    """
    name = "clpatch.vapoursynth.vbm3d"
    _check_radius(name, "radius", radius)
    fmt, jobs = _setup(name, clip, sigma, planes, chroma, "opponent")

    def make(runtime: Any, job: PlaneJob, frames: int) -> Any:
        return clpatch.make_plan("vbm3d", (frames, *job.shape), dtype=job.dtype,
                                 runtime=runtime, sigma=job.sigma, temporal_radius=radius,
                                 data_range=job.data_range, peak=job.peak, **params)

    stages = params.get("stages") or 2
    halo = 2 * radius * (stages if stages in (1, 2) else 2)
    return _chunked(name, clip, fmt, jobs, Lanes(device, _lane_count(lanes, True)), make,
                    halo, chunk_frames)


def nlmeans(clip: Any, sigma: Any = 3.0, *, temporal_radius: int = 0, h: float | None = None,
            planes: Any = None, device: Any = None, lanes: int | None = None,
            chunk_frames: int | None = None, **params: Any) -> Any:
    """NL-means (`clpatch.nlmeans`; `clpatch.nlmeans_video` with a temporal window) on
    `clip`; RGB is filtered in NL-means' opponent colour space, searched on its luminance.

    sigma: the noise's standard deviation in 8-bit units (one number or one per plane; 0:
        copied); h: the weights' bandwidth in 8-bit units (None: sigma). KNLMeansCL's `h`
        is a different quantity: at sigma 20 its best PSNR came near h = 11.
    temporal_radius: 0 (frame by frame) or frames searched on each side (KNLMeansCL's `d`),
        truncated at the clip's ends: frame n then equals `clpatch.nlmeans_video` on the
        whole clip, with `clpatch.nlmeans_video`'s defaults (16x16 patches, step 8).
    planes, device, lanes, chunk_frames: as in `bm3d` and `vbm3d`. params:
        `clpatch.nlmeans`'s other parameters (patch_size, step, window, k, ...).
    """
    name = "clpatch.vapoursynth.nlmeans"
    _check_radius(name, "temporal_radius", temporal_radius)
    fmt, jobs = _setup(name, clip, sigma, planes, False, "nlmeans")

    native_h = None if h is None else fmt.to_native(h)

    def strength(job: PlaneJob) -> dict[str, Any]:
        return {"sigma": job.sigma, "h": native_h, "peak": job.peak}

    if temporal_radius == 0:
        def make(runtime: Any, job: PlaneJob) -> Any:
            return clpatch.make_plan("nlmeans", job.shape, dtype=job.dtype, runtime=runtime,
                                     **strength(job), **params)

        callback = FrameFilter(fmt, jobs, Lanes(device, _lane_count(lanes, False)), make)
        callback.prepare()
        return vs.core.std.ModifyFrame(clip, clip, callback)

    def make_video(runtime: Any, job: PlaneJob, frames: int) -> Any:
        return clpatch.make_plan("nlmeans_video", (frames, *job.shape), dtype=job.dtype,
                                 runtime=runtime, temporal_window=temporal_radius,
                                 **strength(job), **params)

    return _chunked(name, clip, fmt, jobs, Lanes(device, _lane_count(lanes, True)),
                    make_video, temporal_radius, chunk_frames)
