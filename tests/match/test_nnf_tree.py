"""The NNF's k-d tree on the device (the bitonic segment sort of every level and the
medians) against the oracle's tree (tests/reference/nnf.py build_tree): the same order of
points, leaf by leaf. A small sort block (monkeypatched) makes small trees take every
path of the sort: the block sort, the global flip step, the fused two-stride step, the
single-stride step and the local merge."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

import clpatch
from clpatch.match.nnf import plan as nnf_plan
from tests.reference.nnf import build_tree


def device_tree(runtime, a, b, **kw):
    found = clpatch.nnf(a, b, runtime=runtime, **kw)
    plan = next(reversed(runtime.plan_cache().values()))
    leaf_pid = np.empty(plan.n_pad, np.int32)
    cl.enqueue_copy(runtime.queue, leaf_pid, plan.pool.get("leaf_pid", leaf_pid.nbytes))
    return found, plan, leaf_pid


@pytest.mark.parametrize("sort_block,shape_b,leaf", [
    (16, (30, 41), 4),      # 1 064 points, 512 leaves: many global phases per level
    (64, (50, 37), 8),
    (None, (100, 100), 2),  # the default block: 9 604 points in 8 192 leaves of 2
])
def test_tree_order_equals_the_oracle(runtime, monkeypatch, sort_block, shape_b, leaf):
    if sort_block is not None:
        monkeypatch.setattr(nnf_plan, "SORT_BLOCK", sort_block)
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (12, 13)).astype(np.uint8)
    b = rng.integers(0, 256, shape_b).astype(np.uint8)
    _, plan, leaf_pid = device_tree(runtime, a, b, patch_size=3, pca_dims=3, candidates=2,
                                    leaf_size=leaf)
    if sort_block is not None:
        assert plan.sort_block == sort_block
    assert plan.n_pad >= 8 * plan.sort_block      # the fused two-stride step runs
    _, rb = plan.projections()
    tree = build_tree(rb, leaf)
    assert tree.levels == plan.levels
    expected = np.where(tree.order < plan.nb, tree.order, np.iinfo(np.int32).max)
    np.testing.assert_array_equal(leaf_pid, expected)
