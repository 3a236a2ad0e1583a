"""Where a chunked computation's pieces run on a distributed cluster: on a worker that
holds their own chunk, when the input already lies in the cluster's memory.

Dask's scheduler sends a task whose inputs are ready to the worker where it expects it to
start first: the work queued there plus the bytes that worker lacks, over the bandwidth it
has measured between workers. All of a chunked BM3D's pieces become ready together (after
the whole image's peak), and a 16 MB chunk over localhost's ~1 GB/s weighs less than one
piece's ~20 ms: as soon as the holder of a piece's own chunk has one piece more queued than
another worker, the piece goes there with its chunk. With two workers on one H200, 6-22 of
BM3D's and NL-means' 64 pieces of a 16384² image ran away from their chunk.

`pin_pieces` annotates each piece with the workers that hold its own chunk (the input's
chunks persisted by a `distributed.Client`, asked of the scheduler once per graph), with
loose restrictions: the scheduler runs the piece there while such a worker lives, its work
stealing may still move a piece to an idle worker, and a piece whose workers all died runs
anywhere. Nothing is annotated when the input is not persisted (its chunks are computed
with the graph: the scheduler places them), without a distributed client, with an
asynchronous one, or when the caller's own `dask.annotate` gives workers.

Dask keeps a layer's annotations only while it does not rewrite the graph: its array
optimisation fuses tasks into a plain graph unless ``optimization.fuse.active`` is False
(``dask.config.set({"optimization.fuse.active": False})``) or the graph is sent unoptimised
(``client.persist(x, optimize_graph=False)``). Nothing in these graphs can be fused, so
either costs nothing; with fusion on, the annotations are dropped and Dask places the
pieces itself (the results are the same either way).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dask
from dask.highlevelgraph import MaterializedLayer

__all__ = ["chunk_holders", "pin_pieces"]


def chunk_holders(array: Any) -> dict[Any, list[str]]:
    """The addresses of the workers holding each chunk of `array` whose data a running,
    synchronous `distributed.Client` holds in the cluster's memory ({} otherwise)."""
    try:
        from distributed import futures_of
    except ImportError:                       # pragma: no cover - distributed not installed
        return {}
    futures = futures_of(array)
    if not futures:
        return {}
    client = futures[0].client
    if getattr(client, "asynchronous", True) or getattr(client, "status", None) != "running":
        return {}
    who = client.who_has(futures)
    return {key: sorted(addresses) for key, addresses in who.items() if addresses}


def pin_pieces(layer: Mapping[Any, Any], own: Mapping[Any, Any],
               holders: Mapping[Any, list[str]]) -> Any:
    """`layer` (a graph layer) with each task of `own` (task key -> key of its own chunk)
    annotated to run on `holders[chunk]`, loosely (see the module doc); `layer` as it is
    when no own chunk has holders or the caller's annotations already give workers."""
    where = {task: holders[chunk] for task, chunk in own.items() if chunk in holders}
    annotations = dask.get_annotations()
    if not where or "workers" in annotations:
        return layer
    return MaterializedLayer(layer, annotations={
        **annotations, "workers": where.get,
        "allow_other_workers": lambda key: True if key in where else None})
