"""The collaborative filter's kernels (`cl_src/denoise/collaborative.cl.mako`), shared by
BM3D and VBM3D: one program per stage, with its filter, finalize, clear and colour kernels."""

from __future__ import annotations

from typing import Any

from ..core.kernels import kernel


class FilterKernels:
    """The built kernels of one stage of the collaborative filter.

    params: a stage's parameters (patch_size, n, stage, transform_2d, transform_1d, beta);
    video: positions are (t, y, x) and frames sit in rings of slots (VBM3D);
    stagger: references of a staggered grid (per-reference columns, BM3D's reference preset);
    exact_variance: shrink with the exact noise variances of the groups' coefficients (BM3D's
    reference preset; a Haar transform along the group, images only).
    `group` is the work-items per reference of the filter kernel (min(n, 8) · patch_size).
    """

    def __init__(self, runtime: Any, params: Any, *, channels: int, aggregation: str,
                 colour: bool, video: bool = False, stagger: bool = False,
                 exact_variance: bool = False) -> None:
        extra: dict[str, Any] = {"video": True} if video else {}
        if stagger:
            extra["stagger"] = True
        if exact_variance:
            if video:
                raise ValueError("exact_variance is for images (BM3D), not videos")
            extra["exact_variance"] = True
        program = runtime.programs.get(
            "denoise/collaborative.cl.mako", patch=params.patch_size, n=params.n,
            channels=channels, stage=params.stage, transform_2d=params.transform_2d,
            transform_1d=params.transform_1d, beta=params.beta, aggregation=aggregation,
            colour=colour, **extra)
        self.filter = kernel(program, "bm3d_filter")
        self.group = min(params.n, 8) * params.patch_size
        self.finalize = kernel(program, "bm3d_finalize")
        self.finalize_planar = kernel(program, "bm3d_finalize_planar")
        self.clear = kernel(program, "bm3d_clear")
        self.opponent = kernel(program, "bm3d_to_opponent") if colour else None
