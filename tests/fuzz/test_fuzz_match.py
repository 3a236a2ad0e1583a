"""Fuzzing the search engines: search_patches, knn, knn_vectors, ann_search, nnf,
reconstruct, grid_positions (see this package's docstring for the rule)."""

from __future__ import annotations

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

import clpatch
from clpatch.match.matches import lattice_count, min_candidates

from .harness import call, check_matches, host
from .strategies import HOSTILE, LONG, ints, start

METRIC_HOSTILE = ["l3", "", None, 2, "chamfer", b"l2"]


def _sides(drawn, video: bool = False):
    """(frames, rows, cols, channels) of a drawn image, None when its ndim is not one."""
    shape = drawn.shape
    if video and len(shape) in (3, 4):
        return shape[0], shape[1], shape[2], shape[3] if len(shape) == 4 else 1
    if not video and len(shape) in (2, 3):
        return 1, shape[0], shape[1], shape[2] if len(shape) == 3 else 1
    return None


def _outcome(name: str, pick, error) -> None:
    """Record how the example ended (see --hypothesis-show-statistics)."""
    kind = "hostile" if pick.hostile else "valid"
    event(f"{name}: {kind} example {'refused' if error is not None else 'ran'}")


@given(data=st.data())
def test_search_patches(runtime, data):
    pick = start(data)
    video = data.draw(st.booleans())
    img = pick.array(frames=video, queue=runtime.queue, max_frames=4)
    # (patch, window, k) together: each distinct triple builds programs.
    if LONG:
        base = (data.draw(ints([], 1, 32)), data.draw(ints([], 1, 127)), data.draw(ints([], 1, 32)))
    else:
        base = data.draw(st.sampled_from([(8, 21, 16), (4, 7, 4)]))
    p, w, k = (pick(st.just(v)) for v in base)
    step = pick(ints([1, 4], 1, 64))
    metric = pick(st.sampled_from(["l2", "L2", "l1"] if LONG else ["l2", "L2"]), METRIC_HOSTILE)
    tw = pick(ints([0, 1], 0, 63) if video else st.just(0), [*HOSTILE, 64])
    variant = pick(st.sampled_from([None] if not LONG else
                                   [None, "naive", "convolution", "square", "column"]),
                   ["nonsense", 3, ""])
    found, error = call(clpatch.search_patches, img.value, patch_size=p, step=step, window=w,
                        k=k, metric=metric, variant=variant, temporal_window=tw,
                        runtime=runtime, video=video)
    _outcome("search_patches", pick, error)
    sides = _sides(img, video)
    if error is None:
        frames, rows, cols, _ = sides
        check_matches(found, frames=frames if video else None, rows=rows, cols=cols, patch=p,
                      k=k, step=step, on_device=img.on_device)
        assert img.valid
    elif not pick.hostile and sides and min(sides) > 0:
        frames, rows, cols, channels = sides
        fits = (p <= min(rows, cols) and channels <= 64 and variant is None
                and k <= min_candidates(rows, cols, frames, p, w, tw))
        assert not fits, f"a valid call was refused: {error!r}"


@given(data=st.data())
def test_knn(runtime, data):
    pick = start(data)
    q = pick.array(queue=runtime.queue, channels=(None, 1, 3))
    r = None if data.draw(st.booleans()) else pick.array(
        queue=runtime.queue, channels=(None, 1, 3))
    p = pick(ints([4, 8], 1, 64))
    k = pick(ints([1, 4], 1, 64))
    metric = pick(st.sampled_from(["l2", "l1", "chamfer", "chamfer_sym"] if LONG
                                  else ["l2", "l1"]), METRIC_HOSTILE[:4])
    step = pick(ints([1, 3], 1, 70))
    method = pick(st.sampled_from([None, "direct", "gemm", "offsets"] if LONG else [None]),
                  ["bogus", 7])
    found, error = call(clpatch.knn, q.value, None if r is None else r.value, patch_size=p,
                        k=k, metric=metric, step=step, method=method, runtime=runtime)
    _outcome("knn", pick, error)
    if error is None:
        ref = q if r is None else r
        _, rows, cols, _ = _sides(q)
        _, rr, rc, _ = _sides(ref)
        check_matches(found, frames=None, rows=rows, cols=cols, patch=p, k=k, step=step,
                      on_device=q.on_device, candidate_rows=rr, candidate_cols=rc)
        assert q.valid and ref.valid


@given(data=st.data())
def test_knn_vectors(runtime, data):
    pick = start(data)
    sides = st.one_of(st.integers(0, 3), st.integers(0, 40))
    qs = pick.array(channels=(None,), sides=sides, queue=runtime.queue)
    rs = pick.array(channels=(None,), sides=sides, queue=runtime.queue)
    k = pick(ints([1, 3], 1, 40))
    metric = pick(st.sampled_from(["l2", "l1"]), ["chamfer", "x", None])
    out, error = call(clpatch.knn_vectors, qs.value, rs.value, k, metric, runtime=runtime)
    _outcome("knn_vectors", pick, error)
    if error is None:
        d, i = (host(a) for a in out)
        n, m = qs.shape[0], rs.shape[0]
        assert i.shape == (n, k) and d.shape == (n, k)
        assert i.dtype == np.int32 and d.dtype == np.float32
        assert np.isfinite(d).all() and (d >= 0).all() and (np.diff(d, axis=1) >= 0).all()
        assert i.min() >= 0 and i.max() < m
        assert qs.valid and rs.valid


# Every example builds programs of its own (patch, k, tile): 6 in CI (12 cost 87 s on PoCL).
@settings(max_examples=300 if LONG else 6)
@given(data=st.data())
def test_ann_search(runtime, data):
    pick = start(data)
    img = pick.array(queue=runtime.queue)
    p = pick(ints([4], 1, 32))
    k = pick(ints([4, 1], 1, 32))
    tile = pick(ints([15], 1, 64))
    step = pick(ints([1, 5], 1, 64))
    nc = pick(ints([0], 0, 2), [*HOSTILE, 3])
    found, error = call(clpatch.ann_search, img.value, patch_size=p, k=k, tile=tile,
                        step=step, neighbour_clusters=nc, runtime=runtime)
    _outcome("ann_search", pick, error)
    if error is None:
        _, rows, cols, _ = _sides(img)
        check_matches(found, frames=None, rows=rows, cols=cols, patch=p, k=k, step=step,
                      on_device=img.on_device)
        assert img.valid


@given(data=st.data())
def test_nnf_and_reconstruct(runtime, data):
    pick = start(data)
    a = pick.array(queue=runtime.queue, channels=(None, 1))
    b = pick.array(queue=runtime.queue, channels=(None, 1))
    p = pick(ints([4], 1, 32))
    k = pick(ints([1], 1, 32))
    dims = pick(ints([10], 1, 64))
    cands = pick(ints([8], 1, 64))
    leaf = pick(st.sampled_from([None, 32] if not LONG else [None, 2, 8, 32, 64, 4096]),
                [3, 0, 2**20, 8.0, "32"])
    seed = pick(ints([0, 2**63 - 1], 0, 2**63 - 1), [-1, 2**63, 1.5, "0", None])
    # Drawn before the call so that what is drawn never depends on how the call went.
    target = data.draw(st.sampled_from(["b", "b", "a", "junk"]))
    found, error = call(clpatch.nnf, a.value, b.value, patch_size=p, k=k, pca_dims=dims,
                        candidates=cands, leaf_size=leaf, seed=seed, runtime=runtime)
    _outcome("nnf", pick, error)
    if error is None:
        _, rows, cols, _ = _sides(a)
        _, br, bc, _ = _sides(b)
        check_matches(found, frames=None, rows=rows, cols=cols, patch=p, k=k, step=1,
                      on_device=a.on_device, candidate_rows=br, candidate_cols=bc)
        assert a.valid and b.valid
        other = {"b": b.value, "a": a.value, "junk": "junk"}[target]
        out, error = call(clpatch.reconstruct, found, other, runtime=runtime)
        if error is None:
            values = host(out)
            assert values.dtype == np.float32 and np.isfinite(values).all()
            assert values.shape[:2] == (rows, cols)
        else:
            assert target != "b", f"reconstruct refused its own field's b: {error!r}"


@given(data=st.data())
def test_grid_positions(data):
    pick = start(data)
    size = pick(st.integers(1, 70), [0, -1, 2**31, 2**63, 10**30, 2.0, "8", None, True])
    patch = pick(st.integers(1, 70), [0, -1, 2**31, 1.0, None])
    step = pick(st.integers(1, 70), [0, -1, 2**63, 1.5, None])
    out, error = call(clpatch.grid_positions, size, patch, step)
    if error is None:
        assert out.dtype == np.int32 and out.ndim == 1 and len(out) >= 1
        assert out[0] == 0 and out[-1] == size - patch
        assert (np.diff(out) > 0).all() and (np.diff(out) <= step).all()
        lattice, border = lattice_count(size, patch, step)    # the plans' count of the grid
        assert lattice + border == len(out) and (out[:lattice] % step == 0).all()
        assert border == (out[-1] % step != 0)
    else:
        assert pick.hostile or patch > size
