"""clpatch on Dask arrays: images and videos larger than one device, on one host or a cluster.

Install with the extra: ``pip install "clpatch[dask]"`` (dask.array and dask.distributed).

- `nlmeans(x, sigma, **kw)`, `bm3d(x, sigma, **kw)`: a Dask array (H, W[, C]) chunked in
  space in, a lazy float32 Dask array with the same chunks out;
- `nlmeans_video(x, sigma, **kw)`, `vbm3d(x, sigma, **kw)`: (T, H, W[, C]) chunked in time
  and space;
- `search_patches(x, **kw)`: `Matches` whose positions and distances are Dask arrays.

Every output chunk is computed from the input around it (its halo, see
`clpatch.dask.pieces`), on the worker's own device (`clpatch.dask.worker`: opened lazily in
each process, never pickled), and the result equals one in-memory call on the same device
bit for bit, whatever the chunks (deterministic aggregation: "fixed", or NL-means'
"buffers"). Run it with any Dask scheduler: the default threads, or a
``distributed.Client`` with one worker process per GPU, of a few threads each (a worker runs
as many calls at once on its GPU as it has threads, up to 4: `clpatch.dask.worker`).
"""

from __future__ import annotations

try:
    import dask.array  # noqa: F401
except ImportError as error:        # pragma: no cover - depends on the environment
    raise ImportError('clpatch.dask needs Dask: pip install "clpatch[dask]"') from error

from .filters import bm3d, nlmeans, nlmeans_video, vbm3d
from .search import search_patches
from .worker import device_spec, use_runtime, worker_runtime

__all__ = ["bm3d", "device_spec", "nlmeans", "nlmeans_video", "search_patches", "use_runtime",
           "vbm3d", "worker_runtime"]
