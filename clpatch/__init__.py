"""clpatch: portable OpenCL patch search and patch-based image/video denoising.

Nothing touches OpenCL at import time; the first call picks a device (see `Runtime`).
Importing the package registers every engine in the one registry
(`clpatch.core.registry`) from the one table of them (`clpatch.engines`), for the filters'
`search=`, `explain`, the scheduler, autotune and the command line.

Layers (each imports only those before it): `core` (runtime, profiles, kernels, plans),
`match` (the Matches contract and the search engines), `denoise` (the filters), `tune`
(explain, autotune, bench), then `io` and `cli` at the edge.
"""

from .core.devices import list_devices, select_device
from .core.errors import (
    Cancelled,
    ClpatchError,
    DeviceNotFoundError,
    DeviceResourceError,
    KernelBuildError,
    NoOpenCLError,
)
from .core.profiles import DeviceProfile, family_profile
from .core.runtime import Runtime, default_runtime
from .denoise.bm3d import BM3DPlan, bm3d
from .denoise.burst import burst_denoise
from .denoise.nlmeans import NLMeansPlan, nlmeans, nlmeans_video
from .denoise.noise_level import estimate_sigma
from .denoise.vbm3d import VBM3DPlan, vbm3d
from .engines import register_all
from .match.ann.search import ann_search
from .match.knn.search import KnnVectors, knn, knn_vectors
from .match.matches import Matches, SearchResult, grid_positions
from .match.nnf.search import NnfModel, nnf, nnf_model, reconstruct
from .match.window.config import SearchConfig
from .match.window.plan import SearchPlan
from .match.window.search import search_patches
from .pipeline import make_plan
from .tune.explain import explain
from .tune.warmup import WarmupReport, warmup
from .version import __version__

register_all()

__all__ = [
    "BM3DPlan",
    "Cancelled",
    "ClpatchError",
    "DeviceNotFoundError",
    "DeviceProfile",
    "DeviceResourceError",
    "KernelBuildError",
    "KnnVectors",
    "Matches",
    "NLMeansPlan",
    "NnfModel",
    "NoOpenCLError",
    "Runtime",
    "SearchConfig",
    "SearchPlan",
    "SearchResult",
    "VBM3DPlan",
    "WarmupReport",
    "__version__",
    "ann_search",
    "bm3d",
    "burst_denoise",
    "default_runtime",
    "estimate_sigma",
    "explain",
    "family_profile",
    "grid_positions",
    "knn",
    "knn_vectors",
    "list_devices",
    "make_plan",
    "nlmeans",
    "nlmeans_video",
    "nnf",
    "nnf_model",
    "reconstruct",
    "search_patches",
    "select_device",
    "vbm3d",
    "warmup",
]
