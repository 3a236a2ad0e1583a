"""The NNF's k-d tree over b's reduced points, built on the device level by level (a
bitonic sort of every node's points on its split dimension, then the medians):
`KdTree.build` (kernels in `cl_src/match/nnf_index.cl.mako`; the algorithm is the module
doc of clpatch/match/nnf/search.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl

from ...core.buffers import int_buffer


class KdTree:
    """The tree's launches for one plan: `build(rb, events, wait)` -> ((dims, med, leaf_pts,
    leaf_pid, leaf_of), last events). `kernels`: the plan's kernels by name (nnf_bounds,
    nnf_root, nnf_keys, nnf_sort_block, nnf_sort_merge, nnf_medians, nnf_leaves); `program`
    the index program (its bitonic step kernels); `pool` the plan's buffers, of which
    "keys_cand_d" (`keys_bytes`) and "order_searched" (`order_bytes`) are shared with the
    search that follows (sized once for both uses)."""

    def __init__(self, runtime: Any, pool: Any, program: Any, kernels: dict[str, Any], *,
                 points: int, levels: int, n_pad: int, sort_block: int, dims: int,
                 keys_bytes: int, order_bytes: int) -> None:
        self.runtime, self.pool, self._program, self.kernels = runtime, pool, program, kernels
        self.nb, self.levels, self.n_pad, self.sort_block = points, levels, n_pad, sort_block
        self.dims, self.keys_bytes, self.order_bytes = dims, keys_bytes, order_bytes
        # One kernel object per bitonic step, so a rerun sets no argument again.
        self._steps: dict[tuple[int, int], Any] = {}
        #: The identity order of a one-leaf tree, on the device (copied from there per
        #: run: a non-blocking copy from a host array would wait for the device when its
        #: event is dropped, and a run must not wait).
        self._identity = None if levels else int_buffer(runtime.context, np.arange(n_pad))

    def _step(self, keys: Any, vals: Any, m_log2: int, s_log2: int) -> Any:
        """The bitonic step kernel of phase 2^m_log2, stride 2^s_log2 (flip: -1), its
        arguments set once: the plan's key and value buffers do not change between runs,
        so a rerun enqueues ~400 steps without touching an argument."""
        found = self._steps.get((m_log2, s_log2))
        if found is None or found[1] is not keys or found[2] is not vals:
            if m_log2 < 0:      # two strides, 2^s_log2 and half that, in one pass
                raw = cl.Kernel(self._program, "nnf_sort_step2")
                raw.set_args(keys, vals, np.int32(s_log2))
            else:
                raw = cl.Kernel(self._program, "nnf_sort_step")
                raw.set_args(keys, vals, np.int32(m_log2), np.int32(s_log2))
            found = self._steps[(m_log2, s_log2)] = (raw, keys, vals)
        return found[0]

    def _sort(self, keys: Any, vals: Any, seg_log2: int, events: list, wait: list) -> list:
        """Sort (keys, vals) within aligned segments of 2^seg_log2 pairs."""
        queue, sb = self.runtime.queue, self.sort_block
        half = (self.n_pad // 2,)
        sb_log2 = sb.bit_length() - 1
        block_log2 = min(seg_log2, sb_log2)
        last = [self.kernels["nnf_sort_block"](queue, half, (sb // 2,), keys, vals,
                                          np.int32(block_log2), wait_for=wait)]
        events.append(("tree", last[0]))
        quarter = (self.n_pad // 4,)
        for m_log2 in range(sb_log2 + 1, seg_log2 + 1):
            last = [cl.enqueue_nd_range_kernel(queue, self._step(keys, vals, m_log2, -1),
                                               half, None, wait_for=last)]
            events.append(("tree", last[0]))
            s_log2 = m_log2 - 2
            while s_log2 >= sb_log2:        # the global strides, two per pass where possible
                if s_log2 - 1 >= sb_log2:
                    step, size, s_next = self._step(keys, vals, -1, s_log2), quarter, s_log2 - 2
                else:
                    step, size, s_next = self._step(keys, vals, m_log2, s_log2), half, s_log2 - 1
                last = [cl.enqueue_nd_range_kernel(queue, step, size, None, wait_for=last)]
                events.append(("tree", last[0]))
                s_log2 = s_next
            last = [self.kernels["nnf_sort_merge"](queue, half, (sb // 2,), keys, vals,
                                              wait_for=last)]
            events.append(("tree", last[0]))
        return last

    def build(self, rb: Any, events: list, wait: list) -> tuple[Any, ...]:
        """The k-d tree over b's reduced points: (dims, med, leaf_pts, leaf_pid, leaf_of)."""
        queue, i32, dr = self.runtime.queue, np.int32, self.dims
        nodes = max(2, 1 << self.levels)
        dims = self.pool.get("dims", 4 * nodes)
        med = self.pool.get("med", 4 * nodes)
        lo = self.pool.get("lo", 4 * nodes * dr)
        hi = self.pool.get("hi", 4 * nodes * dr)
        keys = self.pool.get("keys_cand_d", self.keys_bytes)
        order = self.pool.get("order_searched", self.order_bytes)
        last = wait
        if not self.levels:     # one leaf: the identity order (nnf_keys writes it otherwise)
            last = [cl.enqueue_copy(queue, order, self._identity, byte_count=4 * self.n_pad,
                                    wait_for=wait)]
        else:
            last = [self.kernels["nnf_bounds"](queue, (256, dr), (256, 1), rb, i32(self.nb), lo,
                                          hi, wait_for=last)]
            last = [self.kernels["nnf_root"](queue, (1,), None, lo, hi, dims, wait_for=last)]
            events += [("tree", e) for e in last]
        total_log2 = self.n_pad.bit_length() - 1
        for level in range(self.levels):
            seg_log2 = total_log2 - level
            last = [self.kernels["nnf_keys"](queue, (self.n_pad,), None, rb, i32(self.nb), dims,
                                        i32(level), i32(seg_log2), order, keys,
                                        wait_for=last)]
            events.append(("tree", last[0]))
            last = self._sort(keys, order, seg_log2, events, last)
            count = 1 << level
            last = [self.kernels["nnf_medians"](
                queue, (-(-count // 64) * 64,), (64,), rb, i32(self.nb), order, i32(level),
                i32(seg_log2), i32(level + 1 < self.levels), dims, med, lo, hi,
                wait_for=last)]
            events.append(("tree", last[0]))
        leaf_pts = self.pool.get("leaf_pts", 4 * self.n_pad * dr)
        leaf_pid = self.pool.get("leaf_pid", 4 * self.n_pad)
        leaf_of = self.pool.get("leaf_of", 4 * self.nb)
        last = [self.kernels["nnf_leaves"](queue, (self.n_pad,), None, rb, i32(self.nb), order,
                                      leaf_pts, leaf_pid, leaf_of, wait_for=last)]
        events.append(("tree", last[0]))
        return (dims, med, leaf_pts, leaf_pid, leaf_of), last
