"""`clpatch denoise --guide G`: the guide image or video of the filters' `guide=` (patches are
matched, and for NL-means weighted, on G while IN is filtered: KNLMeansCL's `rclip`,
BM3D-CUDA's `ref`), with `--guide-role` (bm3d, vbm3d) and `--guide-sigma` (nlmeans).

G is read like IN (any format `denoise` reads; an image for an image, a video of as many
frames for a video) and must have IN's size and channels (alpha apart) and the same units: a
16-bit G does not go with an 8-bit IN (a float `.npy` is on the 0–255 scale, like 8-bit).
`--add-noise` adds noise to IN only. Everything here is checked before any work: a refusal
is a UsageError (exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..denoise.bm3d_guide import GUIDE_ROLES
from ..io.images import ImageInfo, read_image
from ..io.video import VideoInfo, open_video
from .common import UsageError, non_negative_number, usage_checks

__all__ = ["add_guide_options", "check_guide_options", "guide_line", "image_guide",
           "video_guide"]

# Methods each option applies to.
_ROLE_METHODS = ("bm3d", "vbm3d")
_SIGMA_METHODS = ("nlmeans",)
# What a role does, for the summary line.
_ROLES = {"match": "the groups of both stages are matched on it",
          "oracle": "it is the basic estimate: stage 1 skipped, stage 2 matched and "
                    "Wiener-filtered with it"}


def add_guide_options(parser: argparse.ArgumentParser) -> None:
    """Add --guide, --guide-role and --guide-sigma to `denoise`."""
    parser.add_argument("--guide", metavar="G", default=None,
                        help="an image (a video, for a video IN) of IN's size whose patches "
                             "are matched instead of IN's, e.g. a pre-filtered copy of IN "
                             "(KNLMeansCL's rclip, BM3D-CUDA's ref); nlmeans also weights them "
                             "on G; IN is what is filtered")
    parser.add_argument("--guide-role", choices=GUIDE_ROLES, default=None,
                        help="bm3d, vbm3d: what G replaces: match (default: the image both "
                             "stages match their groups on) or oracle (the basic estimate: "
                             "stage 1 is skipped, stage 2 matches on G and uses it as its "
                             "Wiener oracle)")
    parser.add_argument("--guide-sigma", type=non_negative_number, default=None,
                        metavar="SIGMA",
                        help="nlmeans: the noise level of G, in its units (default: --sigma; "
                             "0 for a clean or pre-filtered G)")


def check_guide_options(args: argparse.Namespace) -> None:
    """Before any work: the guide options go together and with the method."""
    if args.guide is None:
        for dest, option in (("guide_role", "--guide-role"), ("guide_sigma", "--guide-sigma")):
            if getattr(args, dest) is not None:
                raise UsageError(f"{option} goes with --guide")
        return
    if args.method == "burst" or args.chunks is not None:
        where = "--method burst" if args.method == "burst" else "--chunks"
        raise UsageError(f"--guide does not go with {where}")
    if args.guide_role is not None and args.method not in _ROLE_METHODS:
        raise UsageError(f"--guide-role applies to --method {' and '.join(_ROLE_METHODS)}, "
                         f"not to {args.method} (an NL-means guide is always matched on)")
    if args.guide_sigma is not None and args.method not in _SIGMA_METHODS:
        raise UsageError(f"--guide-sigma applies to --method nlmeans, not to {args.method}")


def _same_units(guide_depth: int | None, depth: int | None, guide: str) -> None:
    scale = {None: 8, 8: 8, 16: 16}
    if scale.get(guide_depth, guide_depth) != scale.get(depth, depth):
        what = {None: "float (0-255 scale)", 8: "8-bit", 16: "16-bit"}
        raise UsageError(f"the guide {guide} is {what.get(guide_depth, guide_depth)}, the input "
                         f"{what.get(depth, depth)}: give the guide in the input's units")


def _keywords(args: argparse.Namespace, guide: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"guide": guide}
    if args.guide_role is not None:
        kwargs["guide_role"] = args.guide_role
    if args.guide_sigma is not None:
        kwargs["guide_sigma"] = args.guide_sigma
    return kwargs


def image_guide(args: argparse.Namespace, image: np.ndarray,
                info: ImageInfo) -> dict[str, Any]:
    """The method's guide keywords for an image IN (empty without --guide, or for a command
    without the option, such as `demo`)."""
    if getattr(args, "guide", None) is None:
        return {}
    with usage_checks():
        guide, guide_info = read_image(args.guide)
    if guide.shape != image.shape:
        raise UsageError(f"the guide {args.guide} is {_layout(guide.shape)}, the input "
                         f"{_layout(image.shape)}: they must have the same size and channels "
                         "(alpha apart)")
    _same_units(guide_info.bit_depth, info.bit_depth, args.guide)
    return _keywords(args, guide)


def video_guide(args: argparse.Namespace, info: VideoInfo) -> tuple[dict[str, Any],
                                                                     Iterator[np.ndarray] | None]:
    """For a video IN: the method's guide keywords (without the frames) and the guide's
    frames, read one at a time (None without --guide)."""
    if args.guide is None:
        return {}, None
    with usage_checks():
        guide_info, frames = open_video(args.guide)
    if (guide_info.frames, guide_info.shape) != (info.frames, info.shape):
        raise UsageError(f"the guide {args.guide} is {guide_info.frames} frames of "
                         f"{_layout(guide_info.shape)}, the input {info.frames} frames of "
                         f"{_layout(info.shape)}: they must match")
    _same_units(guide_info.bit_depth, info.bit_depth, args.guide)
    kwargs = _keywords(args, None)
    del kwargs["guide"]
    return kwargs, frames


def guide_line(args: argparse.Namespace) -> str | None:
    """The summary's 'guide:' line (None without --guide)."""
    if args.guide is None:
        return None
    name = Path(args.guide).name
    if args.method == "nlmeans":
        sigma = "sigma" if args.guide_sigma is None else f"{args.guide_sigma:g}"
        return f"{name}: patches matched and weighted on it (guide sigma {sigma})"
    return f"{name}: role {args.guide_role or 'match'}, {_ROLES[args.guide_role or 'match']}"


def _layout(shape: tuple[int, ...]) -> str:
    size = "x".join(str(s) for s in shape[:2])
    return size if len(shape) == 2 else f"{size}x{shape[2]}"
