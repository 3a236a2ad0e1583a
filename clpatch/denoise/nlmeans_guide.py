"""NL-means guided by another image (KNLMeansCL's `rclip`): `guide=` and `guide_sigma=`.

The patch search runs on the guide: the neighbours of every reference patch, and their
distances ``d``, are the guide's, converted exactly like the image (dtype conversion,
opponent colour transform for 3 channels, luminance or all channels per
`search_channels`). The weights ``w = exp(-max(d / (p² · Cs) − 2 · guide_sigma², 0) / h²)``
use the guide's distances and the guide's noise level `guide_sigma` (None: `sigma`; 0 for
a clean or pre-filtered guide). What is averaged, and the flat-patch test's variance
(eq. 5, against ``flat_beta · sigma²``), are the noisy image's. So the guide replaces the
image in the search and the weights, nothing else; ``guide=image`` gives the unguided
result bit for bit.

The guide has the image's shape, any real dtype, NumPy array, array-like or pyopencl array
(of either kind, whatever the image's kind). Its values are checked by its own conversion
(`clpatch.core.upload.Uploader`, a check word of its own), so errors name the guide and its
values never change the image's peak (the "fixed" aggregation's scale).

Every plan takes a guide or none (`NLMeansPlan.run(..., guide=, guide_sigma=)`), the burst
plan (`reference=`) included: a guided run converts the guide block by block beside the
image, through the same tiles and bands, so it plans its tiles with the guide's buffers
counted (`clpatch.denoise.nlmeans_tiles`); tiled and untiled guided runs agree bit for bit.
"""

from __future__ import annotations

from typing import Any

from ..core.buffers import BufferPool
from ..core.upload import Uploader
from ..core.volumes import Volume
from .guide import guide_volume
from .strength import Strength

__all__ = ["GuideUpload", "check_guide_sigma_use"]


def check_guide_sigma_use(guide: Any, strength: Strength) -> None:
    """ValueError when `guide_sigma` was given without a guide."""
    if guide is None and strength.guide_sigma is not None:
        raise ValueError("guide_sigma is the noise level of a guide image: pass guide= "
                         "with it (or leave guide_sigma None)")


class GuideUpload:
    """A plan's guide: checks it for a run and converts its blocks to planar float32 in
    `pool`, through a conversion of its own (so its values are checked apart from the
    image's)."""

    def __init__(self, runtime: Any, pool: BufferPool) -> None:
        self.runtime = runtime
        self.pool = pool
        self.uploader = Uploader(runtime, pool)

    def check(self, guide: Any, volume: Volume) -> Volume:
        """`guide` as a Volume for a run on the input `volume` (channels last), checked by
        `clpatch.denoise.guide.guide_volume`."""
        return guide_volume(guide, volume, self.runtime,
                            "frames" if volume.video else "image")

    def begin(self) -> None:
        """Start a run's check of the guide's values (before its first block)."""
        self.uploader.begin()

    def upload(self, volume: Volume, chunk: Any, *, slot: int = 0,
               transfers: Any = None) -> tuple[Any, list[tuple[str, Any]]]:
        """The chunk's frames and rows of the guide as planar float32 (buffer "guide" of
        the pool), with the (stage, event) pairs of the upload; a host guide goes through
        staging buffer "guide_staging<slot>" (on `transfers`' queue when given)."""
        frames, rows = chunk.f_hi - chunk.f_lo, chunk.y_hi - chunk.y_lo
        planar = self.pool.get("guide", frames * volume.channels * rows * volume.cols * 4)
        events = self.uploader.convert(volume, chunk.f_lo, chunk.f_hi, chunk.y_lo, chunk.y_hi,
                                       planar, staging=f"guide_staging{slot}",
                                       transfers=transfers)
        return planar, [(f"guide {stage}", event) for stage, event in events]

    def peak(self) -> float:
        """The largest |value| of the guide converted since `begin()` (NaN or inf when it
        held any value that is not finite)."""
        return self.uploader.peak()
