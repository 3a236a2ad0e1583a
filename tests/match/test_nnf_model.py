"""A PCA model given to the NNF (`clpatch.nnf_model`, `nnf(..., model=)`): the model the
call fits itself gives the same field bit for bit; another pair's model gives the oracle's
field on that model's projections; a plan with a model waits for nothing, its value checks
deferred; bad models are refused naming `model`."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import clpatch
from clpatch.match.nnf.plan import POLISH, REFINE, VISITS
from clpatch.match.nnf.search import BAND
from tests.helpers import enqueue_behind_gate
from tests.match.test_nnf import check_valid, effort, integers
from tests.reference.nnf import fit_pca, nnf_oracle, patch_matrix, project

PARAMS = dict(patch_size=4, k=2, pca_dims=5, candidates=8, leaf_size=8, seed=3)


def _pair(seed):
    return integers((26, 29, 3), seed=seed), integers((24, 27, 3), seed=seed + 1)


def test_own_model_gives_the_same_field(runtime):
    a, b = _pair(1)
    model = clpatch.nnf_model(a, b, patch_size=4, pca_dims=5, seed=3)
    assert isinstance(model, clpatch.NnfModel)
    mean, basis = fit_pca(a, b, 4, 5, 3)                    # the oracle's fit
    np.testing.assert_array_equal(model.mean, mean)
    np.testing.assert_array_equal(model.basis, basis)
    fitted = clpatch.nnf(a, b, runtime=runtime, **PARAMS)
    given = clpatch.nnf(a, b, model=model, runtime=runtime, **PARAMS)
    np.testing.assert_array_equal(given.positions, fitted.positions)
    np.testing.assert_array_equal(given.distances, fitted.distances)


def test_another_pairs_model_follows_the_oracle(runtime):
    a, b = _pair(1)
    model = clpatch.nnf_model(*_pair(7), patch_size=4, pca_dims=5, seed=0)
    got = clpatch.nnf(a, b, model=model, runtime=runtime, **PARAMS)
    check_valid(got, a, b, patch_size=4, k=2, exact_sums=True)
    projections = (project(patch_matrix(a, 4), *model), project(patch_matrix(b, 4), *model))
    positions, distances = nnf_oracle(a, b, patch_size=4, k=2, pca_dims=5, candidates=8,
                                      leaf_size=8, band=BAND, visits=VISITS, refine=REFINE,
                                      polish_passes=POLISH, projections=projections,
                                      **effort(5))
    np.testing.assert_array_equal(got.positions, positions)
    np.testing.assert_array_equal(got.distances, distances)


def test_plan_with_a_model_waits_for_nothing(runtime):
    a, b = _pair(2)
    model = clpatch.nnf_model(a, b, patch_size=4, pca_dims=5, seed=3)
    plan = clpatch.make_plan("nnf", a.shape, dtype=np.uint8, reference_shape=b.shape,
                             runtime=runtime, model=model, **PARAMS)
    assert not plan.waits_for_sample
    assert clpatch.make_plan("nnf", a.shape, dtype=np.uint8, reference_shape=b.shape,
                             runtime=runtime, **PARAMS).waits_for_sample
    da, db = (cla.to_device(runtime.queue, x) for x in (a, b))
    plan.enqueue(da, db)[1].wait()
    returned, found, event = enqueue_behind_gate(plan, runtime.context, da, db)
    assert returned, "make_plan('nnf', model=...).enqueue waited for the device"
    event.wait()
    plan.check()
    expected = clpatch.nnf(a, b, runtime=runtime, **PARAMS)
    np.testing.assert_array_equal(found.positions.get(), expected.positions)
    np.testing.assert_array_equal(found.distances.get(), expected.distances)


def test_plan_with_a_model_defers_the_checks(runtime):
    a, b = (x.astype(np.float32) for x in _pair(3))
    model = clpatch.nnf_model(a, b, patch_size=4, pca_dims=5, seed=3)
    plan = clpatch.make_plan("nnf", a.shape, reference_shape=b.shape, runtime=runtime,
                             model=model, **PARAMS)
    bad = b.copy()
    bad[3, 4, 1] = np.inf
    da, db, dbad = (cla.to_device(runtime.queue, x) for x in (a, b, bad))
    plan.enqueue(da, dbad)
    with pytest.raises(ValueError, match="b contains NaN or infinite"):
        plan.check()
    found, _ = plan.enqueue(da, db)
    plan.check()
    check_valid(found, a, b, patch_size=4, k=2, exact_sums=True)
    with pytest.raises(ValueError, match="a contains NaN"):
        clpatch.nnf(np.where(a > 100, np.nan, a), b, model=model, runtime=runtime, **PARAMS)
    with pytest.raises(ValueError, match="b contains NaN"):
        clpatch.nnf_model(a, bad, patch_size=4, pca_dims=5)


@pytest.mark.parametrize("model,error,what", [
    ((np.zeros(48), np.zeros((48, 4))), ValueError, r"model basis must have shape \(48, 5\)"),
    ((np.zeros(47), np.zeros((48, 5))), ValueError, r"model mean must have shape \(48,\)"),
    ((np.zeros(48), np.full((48, 5), np.nan)), ValueError, "model basis holds NaN"),
    ((np.zeros(48, complex), np.zeros((48, 5))), TypeError, "model mean must hold real"),
    (np.zeros(48), TypeError, "model must be a clpatch.NnfModel"),
])
def test_bad_models_are_refused(runtime, model, error, what):
    a, b = _pair(4)
    with pytest.raises(error, match=what):
        clpatch.nnf(a, b, model=model, runtime=runtime, **PARAMS)
