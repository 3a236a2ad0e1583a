"""Quality of the clustering ANN's algorithm and the filters' use of it.

- Tsai's measures (issue 15's targets, recall ≥ 40 % and D_ann / D_knn ≤ 1.30 against the
  exact in-tile kNN) on crops of the test photographs with σ = 20 noise, computed on the
  NumPy oracle (which the kernels equal exactly: tests/match/test_ann.py). Crops of 52 × 52
  give 3 × 3 tiles of 15 × 15 positions, the tiles of a full image's interior.
- The filters' matcher (`search="ann"`) searches tiles of FILTER_TILE and
  FILTER_NEIGHBOUR_CLUSTERS sibling clusters besides a patch's own on an image (a burst: its
  own tile, none), and returns the oracle's matches for those settings.
"""

from __future__ import annotations

import numpy as np
import pytest

import clpatch
from clpatch.denoise.nlmeans import NLMeansPlan
from clpatch.match.ann.search import (
    DEFAULT_TILE,
    FILTER_NEIGHBOUR_CLUSTERS,
    FILTER_TILE,
    ann_matcher,
    filter_request,
)
from clpatch.match.window.config import SearchRequest
from tests.helpers import load_image
from tests.reference import ann as oracle

PHOTOS = ("astronaut", "brick", "camera", "coins", "moon", "motorcycle_left", "text")


def noisy_crop(name: str, size: int, seed: int, sigma: float = 20.0) -> np.ndarray:
    """The centre size × size crop of a test photograph (luminance for colour) plus rounded
    Gaussian noise."""
    img = load_image(name)
    if img.ndim == 3:
        img = np.round(img @ np.array([0.299, 0.587, 0.114], np.float32))
    r0, c0 = (img.shape[0] - size) // 2, (img.shape[1] - size) // 2
    crop = img[r0:r0 + size, c0:c0 + size]
    noise = np.random.default_rng(seed).normal(0, sigma, crop.shape)
    return np.round(crop + noise).astype(np.float32)


def test_recall_and_distance_ratio_meet_the_targets():
    recalls, ratios = [], []
    for seed, name in enumerate(PHOTOS):
        noisy = noisy_crop(name, 52, seed)
        exact_pos, exact_dist = oracle.exact_in_tile_image(noisy, patch_size=8, k=16, tile=15)
        pos, dist = oracle.ann_image(noisy, patch_size=8, k=16, tile=15)
        recall, ratio = oracle.quality(dist, exact_dist, pos, exact_pos)
        print(f"{name}: recall {100 * recall:.1f} %, D_ann/D_knn {ratio:.3f}")
        recalls.append(recall)
        ratios.append(ratio)
    print(f"mean: recall {100 * np.mean(recalls):.1f} %, D_ann/D_knn {np.mean(ratios):.3f}")
    assert np.mean(recalls) >= 0.40
    assert np.mean(ratios) <= 1.30


def test_neighbour_clusters_raise_recall():
    """The filters' setting finds more of the exact neighbours than the cluster alone."""
    noisy = noisy_crop("camera", 52, 11)
    exact_pos, exact_dist = oracle.exact_in_tile_image(noisy, patch_size=8, k=16, tile=15)
    found = []
    for nc in (0, FILTER_NEIGHBOUR_CLUSTERS):
        pos, dist = oracle.ann_image(noisy, patch_size=8, k=16, tile=15, neighbour_clusters=nc)
        found.append(oracle.quality(dist, exact_dist, pos, exact_pos))
    (recall0, ratio0), (recall2, ratio2) = found
    assert recall2 > recall0 + 0.1 and ratio2 < ratio0


def test_filter_request_defaults_to_the_filters_neighbour_clusters():
    request = filter_request(patch_size=8, step=4, n=16, channels=1, rows=64, cols=64)
    assert request.neighbour_clusters == FILTER_NEIGHBOUR_CLUSTERS == 2
    assert request.tile == FILTER_TILE
    assert filter_request(patch_size=8, step=4, n=16, channels=1, rows=64, cols=64,
                          neighbour_clusters=0).neighbour_clusters == 0


@pytest.mark.parametrize("options", [{}, {"neighbour_clusters": 1, "tile": 15}])
def test_filters_matcher_equals_the_oracle(runtime, options):
    image = noisy_crop("brick", 71, 12)
    request = SearchRequest(8, 4, 16, 21, 1, "l2", False)
    plan = ann_matcher(runtime, 1, 71, 71, 1, request, **options)
    nc = options.get("neighbour_clusters", FILTER_NEIGHBOUR_CLUSTERS)
    tile = options.get("tile", FILTER_TILE)
    assert plan.request.neighbour_clusters == nc and plan.request.tile == tile
    found = plan.run(image)
    pos, dist = oracle.ann_pair_image(image, patch_size=8, k=16, tile=tile, step=4,
                                      neighbour_clusters=nc)
    assert np.array_equal(found.positions, pos) and np.array_equal(found.distances, dist)


def test_nlmeans_and_burst_settings(runtime):
    """NL-means on an image asks its ANN for the filters' count; a burst for none."""
    plan = NLMeansPlan(runtime, 1, 40, 40, 1, patch_size=8, step=4, window=21, n=16,
                       search="ann")
    assert plan.search.request.neighbour_clusters == FILTER_NEIGHBOUR_CLUSTERS
    assert plan.search.request.tile == FILTER_TILE
    request = SearchRequest(5, 2, 8, 15, 1, "l2", True)
    burst = ann_matcher(runtime, 3, 30, 30, 1, request, video=True, reference=1)
    assert burst.request.neighbour_clusters == 0 and burst.request.tile == DEFAULT_TILE
    description = clpatch.match.matcher.description("ann")
    assert f"2 nearest sibling clusters in tiles of {FILTER_TILE}" in description
