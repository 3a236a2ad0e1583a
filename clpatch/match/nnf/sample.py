"""The NNF PCA model's sample rows, read where the images live: a host image's sampled
patches on the host, a device image's gathered on the device (`nnf_sample`) so that only
they are downloaded (clpatch/match/nnf/pca.py states the rule)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl

from .pca import patch_vectors, sample_picks

__all__ = ["host_image", "sample_rows"]


def sample_rows(plan: Any, gather: Any, va: Any, abuf: Any, vb: Any, bbuf: Any,
                events: list) -> np.ndarray:
    """The PCA model's sample rows (float64, in draw order; nnf_pca.py's rule): a host
    image's patches are read on the host, a device image's gathered on the device from
    its converted copy (the same float32 values) so that only they are downloaded; a
    device `a` searched in bands (`abuf` None: no converted copy of it all) is read
    whole and rounded to float32 on the host as the conversion rounds it."""
    p, d, queue = plan.p, plan.p * plan.p * plan.channels, plan.runtime.queue
    picks = sample_picks(plan.na, plan.nb, plan.seed)
    rows = np.empty((picks.size, d), np.float64)
    in_a = picks < plan.na
    parts = ((va, abuf, plan.ha, plan.wa, in_a, picks[in_a]),
             (vb, bbuf, plan.hb, plan.wb, ~in_a, picks[~in_a] - plan.na))
    on_device = [part for part in parts
                 if part[0].on_device and part[1] is not None and part[5].size]
    for volume, buf, _, _, where, index in parts:
        if not volume.on_device:
            rows[where] = patch_vectors(host_image(volume), p, index)
        elif buf is None and index.size:
            rows[where] = patch_vectors(host_image(volume).astype(np.float32), p, index)
    if on_device:
        count = sum(part[5].size for part in on_device)
        out = plan.pool.get("sample", 4 * count * d)
        last, first, held = [events[-1][1]], 0, []     # after the conversions
        for _, buf, h, w, _, index in on_device:
            chosen = np.ascontiguousarray(index, np.int32)
            held.append(chosen)         # alive until the blocking download below
            pbuf = plan.pool.get(f"picks{first}", max(4, chosen.nbytes))
            copy = cl.enqueue_copy(queue, pbuf, chosen, is_blocking=False)
            n = chosen.size * d
            last = [gather(queue, (-(-n // 128) * 128,), (128,), buf,
                                          np.int32(h), np.int32(w), pbuf,
                                          np.int32(chosen.size), np.int32(first), out,
                                          wait_for=[copy, *last])]
            events.append(("sample", last[0]))
            first += chosen.size
        gathered = np.empty((count, d), np.float32)
        cl.enqueue_copy(queue, gathered, out, wait_for=last)
        first = 0
        for _, _, _, _, where, index in on_device:
            rows[where] = gathered[first:first + index.size]
            first += index.size
    return rows


def host_image(volume: Any) -> np.ndarray:
    """(H, W, C) host view (or copy, for a device array) of a checked 2-D or 3-D image
    volume, in its own dtype (the PCA sample converts what it takes)."""
    array = volume.array.get() if volume.on_device else np.asarray(volume.array)
    return array.reshape(volume.rows, volume.cols, volume.channels)
