"""The filter-strength arguments of one denoising call, checked once.

A public function (`nlmeans`, `bm3d`, `vbm3d`) checks sigma, h, flat_beta, data_range,
peak and guide_sigma at its entry, before any plan is built, and hands the checked `Strength` to the plan's
`apply`; a plan's `run(image, sigma, ...)`, the entry for users who keep plans, checks
them itself and calls the same `apply`. Either way each argument is checked exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.validate import check_float

__all__ = ["Strength"]


@dataclass(frozen=True)
class Strength:
    """sigma (> 0), h (NL-means' filtering parameter, None: sigma), flat_beta (NL-means'
    flat-patch factor), data_range (BM3D/VBM3D's nominal range, None: from the input) and
    peak (the largest |value| the fixed-point aggregation is scaled for, None: the input's
    own; pieces of one large image pass the whole image's so that they all round alike) and
    guide_sigma (NL-means: the noise level of the guide image, ≥ 0, None: sigma), all
    finite. Build it with `Strength.check`."""

    sigma: float
    h: float | None = None
    flat_beta: float = 1.05
    data_range: float | None = None
    peak: float | None = None
    guide_sigma: float | None = None

    @classmethod
    def check(cls, sigma: Any, *, h: Any = None, flat_beta: Any = 1.05,
              data_range: Any = None, peak: Any = None, guide_sigma: Any = None) -> Strength:
        """The checked arguments: TypeError for a non-number, ValueError for a value that
        is not finite and > 0 (peak and guide_sigma may be 0), each naming the argument."""
        if np.ndim(sigma) > 0 and np.size(sigma) > 1:
            raise TypeError(f"sigma must be one number, got {np.size(sigma)} (one per channel, "
                            "as estimate_sigma gives for colour?): pass "
                            "estimate_sigma(image, average_sigmas=True)")
        return cls(check_float("sigma", sigma),
                   None if h is None else check_float("h", h),
                   check_float("flat_beta", flat_beta),
                   None if data_range is None else check_float("data_range", data_range),
                   None if peak is None else check_float("peak", peak, positive=False),
                   None if guide_sigma is None
                   else check_float("guide_sigma", guide_sigma, positive=False))

    @property
    def nlm_h(self) -> float:
        """NL-means' h (sigma when not given)."""
        return self.sigma if self.h is None else self.h

    @property
    def nlm_guide_sigma(self) -> float:
        """NL-means' noise level of the searched image, the guide's when one is given
        (sigma when not given)."""
        return self.sigma if self.guide_sigma is None else self.guide_sigma
