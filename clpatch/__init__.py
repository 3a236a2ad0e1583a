"""clpatch: portable OpenCL patch search and patch-based image/video denoising.

Nothing touches OpenCL at import time; the first call picks a device (see `Runtime`).
"""

from .denoise.bm3d import BM3DPlan, bm3d
from .core.errors import (
    ClpatchError,
    DeviceNotFoundError,
    DeviceResourceError,
    KernelBuildError,
    NoOpenCLError,
)
from .denoise.nlmeans import NLMeansPlan, nlmeans, nlmeans_video
from .core.profiles import DeviceProfile, family_profile
from .core.runtime import Runtime, default_runtime, list_devices, select_device
from .match.window_config import SearchConfig
from .match.window import SearchPlan, SearchResult, grid_positions, search_patches
from .denoise.vbm3d import VBM3DPlan, vbm3d

from .version import __version__

__all__ = [
    "BM3DPlan",
    "ClpatchError",
    "DeviceNotFoundError",
    "DeviceProfile",
    "DeviceResourceError",
    "KernelBuildError",
    "NLMeansPlan",
    "NoOpenCLError",
    "Runtime",
    "SearchConfig",
    "SearchPlan",
    "SearchResult",
    "VBM3DPlan",
    "bm3d",
    "default_runtime",
    "family_profile",
    "grid_positions",
    "list_devices",
    "nlmeans",
    "nlmeans_video",
    "search_patches",
    "select_device",
    "vbm3d",
]
