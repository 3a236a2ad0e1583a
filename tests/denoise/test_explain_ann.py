"""`clpatch.explain("nlmeans" | "bm3d", search=...)` and `clpatch explain --search`: which
search engine a filter runs; with "ann", the clustering ANN's configuration, and the window
and the search variant said not to apply."""

from __future__ import annotations

import re

import pytest

import clpatch
from clpatch.core.registry import operations
from clpatch.match.ann.layout import ann_config
from clpatch.match.ann.params import check_ann_request
from clpatch.match.ann.search import FILTER_NEIGHBOUR_CLUSTERS, FILTER_TILE
from clpatch.match.matcher import description
from tests.cli.test_cli import assert_one_error_line, run, spec_of


def ann_lines(runtime, *, patch_size=8, step=4, k=16) -> tuple[str, str]:
    """The configuration and the reason the ANN of these parameters has on `runtime`."""
    request = check_ann_request(patch_size=patch_size, step=step, k=k, tile=FILTER_TILE,
                                neighbour_clusters=FILTER_NEIGHBOUR_CLUSTERS, channels=1,
                                rows=4096, cols=4096)
    config = ann_config(request, runtime.profile)
    return config.describe(), config.reason


def test_nlmeans_ann_says_which_engine_and_its_configuration(runtime):
    out = clpatch.explain("nlmeans", search="ann", runtime=runtime)
    text = str(out)
    describe, reason = ann_lines(runtime)
    assert f"search engine: ann — {description('ann')}" in text
    assert "search engine: window" not in text
    assert f"runs: {describe}" in text and reason in text
    assert "the window (21) and the search variant" in text
    assert "patch 8, step 4, k 16" in text
    assert "then: columns averaging" in text     # the filter's own choices follow
    assert out.source == "rule"


def test_nlmeans_ann_takes_the_parameters(runtime):
    text = str(clpatch.explain("nlmeans", search="ann", patch_size=5, step=2, k=8, window=9,
                               channels=3, variant="naive", runtime=runtime))
    describe, reason = ann_lines(runtime, patch_size=5, step=2, k=8)
    assert f"runs: {describe}" in text and reason in text
    assert "patch 5, step 2, k 8, 1 channel(s) searched" in text   # colour: the luminance
    assert "the window (9)" in text and "naive, is ignored" in text


def test_bm3d_ann_explains_both_stages(runtime):
    text = str(clpatch.explain("bm3d", search="ann", runtime=runtime))
    assert f"search engine: ann — {description('ann')}" in text
    assert "search engine: window" not in text
    assert text.startswith("bm3d (fast) stage-1 search on ")
    describe, _ = ann_lines(runtime, step=6, k=16)
    assert f"runs: {describe}" in text
    assert "stage 2 search: patch 8" in text and "[rule]" in text
    assert "stage 1 filter:" in text and "stage 2 filter:" in text
    assert "the window (35/21) and the search variant" in text
    assert "aggregation '" in text
    reference = str(clpatch.explain("bm3d", search="ann", preset="reference", channels=3,
                                    runtime=runtime))
    assert "the window (39/39)" in reference and "k 32" in reference
    assert "colour: CBM3D" in reference


@pytest.mark.parametrize("operation", ["nlmeans", "bm3d"])
def test_window_is_the_default_and_unchanged(runtime, operation):
    default = str(clpatch.explain(operation, runtime=runtime))
    assert default == str(clpatch.explain(operation, search="window", runtime=runtime))
    assert f"search engine: window — {description('window')}" in default
    assert "search engine: ann" not in default


def test_every_operation_accepts_search_window(runtime):
    for operation in operations():
        assert str(clpatch.explain(operation, search="window", runtime=runtime))


@pytest.mark.parametrize("kwargs, fragment", [
    ({"operation": "nlmeans", "search": "kdtree"}, "search must be one of"),
    ({"operation": "vbm3d", "search": "ann"}, "vbm3d has no choice of search engine"),
    ({"operation": "search", "search": "ann"}, "search= applies to nlmeans, bm3d"),
    ({"operation": "nlmeans", "search": "ann", "k": 33}, "[1, 32]"),
    ({"operation": "nlmeans", "search": "ann", "video": True}, "burst_denoise"),
    ({"operation": "nlmeans", "search": "ann", "metric": "l1"}, "L2 distances only"),
    ({"operation": "bm3d", "search": "ann", "k": 64}, "64"),
])
def test_ann_requests_are_checked(runtime, kwargs, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        clpatch.explain(runtime=runtime, **kwargs)


# ---- the command line -----------------------------------------------------------------

def test_cli_explain_search_ann(capsys, runtime):
    code, out, err = run(capsys, "explain", "nlmeans", "--search", "ann", "-d", spec_of(runtime))
    assert code == 0, err
    describe, _ = ann_lines(runtime)
    assert f"search engine: ann — {description('ann')}" in out and f"runs: {describe}" in out
    code, out, err = run(capsys, "explain", "bm3d", "--search", "ann", "-d", spec_of(runtime))
    assert code == 0, err
    assert "search engine: ann" in out and "stage 2 search" in out
    code, out, err = run(capsys, "explain", "nlmeans", "-d", spec_of(runtime))
    assert code == 0, err
    assert "search engine: window" in out


def test_cli_explain_search_errors(capsys, runtime):
    code, _, err = run(capsys, "explain", "vbm3d", "--search", "ann", "-d", spec_of(runtime))
    assert code == 2
    assert_one_error_line(err, "--search ann does not apply to vbm3d", "nlmeans, bm3d")
    code, _, err = run(capsys, "explain", "nlmeans", "--search", "kdtree")
    assert code == 2
    assert_one_error_line(err, "--search", "kdtree")
