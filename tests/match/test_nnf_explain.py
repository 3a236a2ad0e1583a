"""`clpatch.explain("nnf", ...)` and `clpatch explain nnf`: the checked request, the leaf
size rule and the steps of a run; a request `clpatch.nnf` refuses is refused with the same
error."""

from __future__ import annotations

import numpy as np
import pytest

import clpatch
from clpatch.core.registry import operation, tuned_templates
from clpatch.match.nnf.pca import SAMPLES
from clpatch.match.nnf.plan import BAND, REFINE, VISITS
from tests.cli.test_cli import assert_one_error_line, run, spec_of


def test_defaults_and_steps(runtime):
    text = str(clpatch.explain("nnf", runtime=runtime))
    lines = text.splitlines()
    assert lines[0] == (f"nnf on {runtime.device.name.strip()}: patch 8, k 1, 1 channel(s) "
                        "(64 values per patch), pca_dims 10, candidates 8, leaf size 32 "
                        "(default: 32, or the smallest power of two >= candidates)")
    assert "kdtree" in lines[1]
    assert f"at most {SAMPLES} patches" in text
    # a 256x256 b with patch 8: 249 * 249 = 62001 points, 32 * 2^11 = 65536 slots
    assert "e.g. a 256x256 b: 11 levels" in text
    assert f"rows 0, {BAND}, {2 * BAND}, ...: backtracking through the tree, at most {VISITS} " \
           "leaves" in text
    assert f"t = 1 ... {BAND - 1}" in text and f"refinement, {REFINE} passes" in text
    assert lines[-1].endswith("the 1 nearest returned, by (distance, index in b)")
    assert ("where the 1-th full distance exceeds the 8-th reduced one: the 16 nearest other "
            "points of the leaves of the first 4 candidates re-ranked too") in text
    # more than 10 reduced dimensions: a scaled test and a traversal (hard_effort)
    text = str(clpatch.explain("nnf", channels=3, pca_dims=20, runtime=runtime))
    assert ("exceeds 0.707 x the 8-th reduced one: the 32 nearest other points of the leaves "
            "of the first 8 candidates and of a traversal of 8 leaves re-ranked too") in text


def test_parameters_and_leaf_rule(runtime):
    text = str(clpatch.explain("nnf", patch_size=5, k=4, channels=3, pca_dims=6, candidates=40,
                               runtime=runtime))
    assert ("patch 5, k 4, 3 channel(s) (75 values per patch), pca_dims 6, candidates 40, leaf "
            "size 64 (default:") in text                    # 40 candidates: leaf 64
    assert "the 40 nearest (reduced distance)" in text and "the 4 nearest returned" in text
    text = str(clpatch.explain("nnf", candidates=16, leaf_size=128, variant="kdtree",
                               step=1, runtime=runtime))
    assert "leaf size 128 (given)" in text and "e.g. a 256x256 b: 9 levels" in text


# (keyword arguments of clpatch.nnf, which explain takes alike)
REFUSED = [
    dict(patch_size=0), dict(patch_size=33), dict(patch_size=2.5), dict(k=0), dict(k=33),
    dict(k=9), dict(candidates=0), dict(candidates=65), dict(pca_dims=0), dict(pca_dims=65),
    dict(patch_size=3, pca_dims=10), dict(pca_dims=4.0), dict(leaf_size=12),
    dict(leaf_size=4), dict(leaf_size=1), dict(leaf_size=8192), dict(leaf_size="8"),
]


@pytest.mark.parametrize("kwargs", REFUSED, ids=lambda kw: repr(kw)[1:-1])
def test_refused_as_nnf_refuses(runtime, kwargs):
    image = np.zeros((40, 40), np.float32)
    with pytest.raises((ValueError, TypeError)) as from_nnf:
        clpatch.nnf(image, image, runtime=runtime, **kwargs)
    with pytest.raises(from_nnf.type) as from_explain:
        clpatch.explain("nnf", runtime=runtime, **kwargs)
    assert str(from_explain.value) == str(from_nnf.value)


@pytest.mark.parametrize("kwargs,match", [
    (dict(step=4), "step does not apply to nnf"),
    (dict(window=21), "window does not apply to nnf"),
    (dict(metric="l1"), "metric must be one of"),
    (dict(video=True), "video does not apply to nnf"),
    (dict(variant="gemm"), "variant must be one of"),
    (dict(channels=0), "channels must be"),
])
def test_what_does_not_apply(runtime, kwargs, match):
    with pytest.raises(ValueError, match=match):
        clpatch.explain("nnf", runtime=runtime, **kwargs)


def test_registered_without_tuned_templates():
    """One variant; no template in the tuning file's source hash (nothing of nnf is tuned, so
    editing its kernels must not make every tuning file stale)."""
    found = operation("nnf")
    assert found.variants == ("kdtree",) and found.tuned_templates == ()
    assert not any("nnf" in name for name in tuned_templates())


def test_command_line(capsys, runtime):
    code, out, err = run(capsys, "explain", "nnf", "-p", 5, "-n", 2, "-c", 3, "--pca-dims", 6,
                         "--candidates", 16, "--device", spec_of(runtime))
    assert code == 0, err
    assert "patch 5, k 2, 3 channel(s)" in out and "candidates 16, leaf size 32" in out
    code, out, err = run(capsys, "explain", "nnf", "--leaf-size", 12, "--device",
                         spec_of(runtime))
    assert code == 2 and out == ""
    assert_one_error_line(err, "leaf_size must be a power of two, got 12")
    code, out, _ = run(capsys, "explain", "--help")
    assert code == 0 and "nnf" in out and "--pca-dims" in out and "kdtree" in out
