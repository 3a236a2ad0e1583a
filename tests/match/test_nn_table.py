"""The unordered neighbour table's final sort (lib/nn_table.mako, finish): Batcher's odd-even
merge sort network, trimmed to n entries, sorts every input. By the 0-1 principle a
comparator network that sorts every sequence of 0s and 1s sorts everything: checked
exhaustively up to n = 16 (the default n of the filters), on random values beyond."""

import itertools

import numpy as np
import pytest
from mako.lookup import TemplateLookup

from clpatch.core.resources import cl_src_dir


def network(n: int) -> list[tuple[int, int]]:
    lookup = TemplateLookup(directories=[str(cl_src_dir())])
    return lookup.get_template("lib/nn_table.mako").module.merge_sort_network(n)


def apply(pairs, values: np.ndarray) -> np.ndarray:
    out = values.copy()
    for i, j in pairs:
        low, high = np.minimum(out[..., i], out[..., j]), np.maximum(out[..., i], out[..., j])
        out[..., i], out[..., j] = low, high
    return out


@pytest.mark.parametrize("n", range(1, 17))
def test_sorts_every_zero_one_sequence(n):
    pairs = network(n)
    assert all(0 <= i < j < n for i, j in pairs)
    inputs = np.array(list(itertools.product([0, 1], repeat=n)), np.int8).reshape(-1, n)
    np.testing.assert_array_equal(apply(pairs, inputs), np.sort(inputs, axis=1))


@pytest.mark.parametrize("n", [17, 24, 31, 32, 33, 48, 64])
def test_sorts_random_values(n):
    values = np.random.default_rng(n).integers(0, 5, (2000, n))
    np.testing.assert_array_equal(apply(network(n), values), np.sort(values, axis=1))


def test_fewer_comparators_than_transposition():
    assert len(network(16)) == 63 and len(network(8)) == 19      # against n (n - 1) / 2
