"""clpatch.dask: chunked results equal one in-memory call bit for bit (threads and a
LocalCluster of 2 worker processes, a worker dying mid-run), the halo is needed, errors."""

from __future__ import annotations

import os

import numpy as np
import pytest

import clpatch
from tests.helpers import tiered

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
cdask = pytest.importorskip("clpatch.dask")
from clpatch.dask import filters as dask_filters  # noqa: E402
from clpatch.dask import pieces as dask_pieces  # noqa: E402
from clpatch.dask import worker as dask_worker  # noqa: E402

SIGMA = 20.0


def noisy(shape, seed):
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 160, shape[1])[None, :, None][..., :1 if len(shape) == 2 else None]
    clean = rng.random(shape) * 60 + ramp.reshape((1, shape[1]) + (1,) * (len(shape) - 2))
    return (clean + rng.normal(0, SIGMA, shape)).astype(np.float32)


def chunked(image, chunks):
    return da.from_array(image, chunks=chunks + (-1,) * (image.ndim - len(chunks)))


# ---- threads (the default scheduler) ---------------------------------------------------------

NLM = dict(patch_size=5, step=2, window=9, k=8)


@pytest.mark.parametrize("aggregation", ["fixed", "buffers"])
@pytest.mark.parametrize("chunks", [(13, 29), (6, 4), (47, 38)])
def test_nlmeans_any_chunks_bit_identical(on_device, aggregation, chunks):
    if aggregation == "fixed" and not on_device.profile.int64_atomics:
        pytest.skip("no 64-bit atomics")
    image = noisy((47, 38), seed=1)
    kw = dict(NLM, step=3, aggregation=aggregation)
    expected = clpatch.nlmeans(image, SIGMA, runtime=on_device, **kw)
    out = cdask.nlmeans(chunked(image, chunks), SIGMA, **kw)
    assert out.chunks[:2] == chunked(image, chunks).chunks[:2]
    np.testing.assert_array_equal(out.compute(), expected)


def test_nlmeans_colour_and_channel_axis(on_device):
    image = noisy((33, 30, 3), seed=2)
    expected = clpatch.nlmeans(image, SIGMA, runtime=on_device, **NLM)
    np.testing.assert_array_equal(cdask.nlmeans(chunked(image, (10, 17)), SIGMA, **NLM).compute(),
                                  expected)
    first = np.ascontiguousarray(np.moveaxis(image, -1, 0))
    x = da.from_array(first, chunks=(3, 11, 16))
    out = cdask.nlmeans(x, SIGMA, channel_axis=0, **NLM).compute()
    np.testing.assert_array_equal(np.moveaxis(out, 0, -1), expected)


# CI: gray fast and colour; make test-slow: the reference preset too.
@pytest.mark.parametrize("shape,preset,chunks", tiered([
    ((45, 41), "fast", (17, 9)),
    ((45, 41, 3), "fast", (30, 22)),
    ((40, 37), "reference", (11, 20)),
], keep=lambda shape, preset, chunks: preset == "fast"))
def test_bm3d_bit_identical(on_device, shape, preset, chunks):
    if not on_device.profile.int64_atomics:
        pytest.skip("no 64-bit atomics: BM3D's deterministic aggregation needs them")
    image = noisy(shape, seed=3)
    kw = dict(preset=preset, window=(9, 7), k=(8, 4))
    expected = clpatch.bm3d(image, SIGMA, runtime=on_device, **kw)
    np.testing.assert_array_equal(cdask.bm3d(chunked(image, chunks), SIGMA, **kw).compute(),
                                  expected)


@pytest.mark.parametrize("scale", [1.0, 1.0 / 255.0])
def test_bm3d_high_noise_settings_follow_the_whole_image(on_device, scale):
    """Above sigma 40 (0-255 units) the preset switches settings (its thresholds): every
    piece follows the whole image's noise level, also for a float image in [0, 1] whose
    data range comes from its peak."""
    image = noisy((70, 64), seed=18) * scale
    if scale != 1.0:
        image = np.clip(image, 0.0, 1.0)
    sigma = 60.0 * scale
    kw = dict(window=(9, 9))
    expected = clpatch.bm3d(image, sigma, runtime=on_device, **kw)
    got = cdask.bm3d(chunked(image, (24, 20)), sigma, **kw).compute()
    np.testing.assert_array_equal(got, expected)


def test_bm3d_reduces_the_peak_first_only_where_it_moves_the_halo(on_device, monkeypatch):
    """A float image's data range (1 or 255: its peak decides) sets the fast preset's
    thresholds, not its halo: the peak is then reduced by the graph's own tasks. Where the
    two readings would cut other pieces, it is reduced before the graph is built, and the
    pieces follow the whole image's reading."""
    image = np.clip(noisy((70, 64), seed=19) / 255.0, 0.0, 1.0)
    kw = dict(window=(9, 9))
    lazy = cdask.bm3d(chunked(image, (24, 20)), 0.2, **kw)
    assert any(str(k[0] if isinstance(k, tuple) else k).startswith("clpatch-peak")
               for k in dict(lazy.__dask_graph__()))
    layout = dask_filters._bm3d_layout
    seen = []

    def moved(preset, noise, params, rows, cols):
        seen.append(noise)
        count, halo, capped = layout(preset, noise, params, rows, cols)
        return count, dask_pieces.Halo(halo.pixels + (noise > 1.0), halo.align), capped
    monkeypatch.setattr(dask_filters, "_bm3d_layout", moved)
    eager = cdask.bm3d(chunked(image, (24, 20)), 0.2, **kw)
    assert not any(str(k[0] if isinstance(k, tuple) else k).startswith("clpatch-peak")
                   for k in dict(eager.__dask_graph__()))
    assert seen[-1] == pytest.approx(0.2 * 255.0)
    expected = clpatch.bm3d(image, 0.2, runtime=on_device, **kw)
    np.testing.assert_array_equal(eager.compute(), expected)
    np.testing.assert_array_equal(lazy.compute(), expected)


def test_nlmeans_video_in_time_and_space(on_device):
    video = noisy((6, 21, 19), seed=4)
    kw = dict(temporal_window=1, patch_size=4, step=2, window=7, k=6)
    expected = clpatch.nlmeans_video(video, SIGMA, runtime=on_device, **kw)
    x = da.from_array(video, chunks=(2, 8, 19))
    np.testing.assert_array_equal(cdask.nlmeans_video(x, SIGMA, **kw).compute(), expected)


@pytest.mark.parametrize("stages", [2, 1])
def test_vbm3d_in_time_and_space(on_device, stages):
    if not on_device.profile.int64_atomics:
        pytest.skip("no 64-bit atomics: VBM3D's deterministic aggregation needs them")
    video = noisy((7, 70, 64), seed=11)
    kw = dict(temporal_radius=1, patch_size=4, step=(3, 2), window_ref=3, window_pred=3, k=4,
              stages=stages)
    expected = clpatch.vbm3d(video, SIGMA, runtime=on_device, **kw)
    x = da.from_array(video, chunks=(3, 17, 40))
    np.testing.assert_array_equal(cdask.vbm3d(x, SIGMA, **kw).compute(), expected)


@pytest.mark.parametrize("shape", [(47, 41), (40, 44, 3)])
def test_nlmeans_guide_in_pieces(on_device, shape):
    image, guide = noisy(shape, seed=16), noisy(shape, seed=17)
    kw = dict(NLM, aggregation="fixed", guide_sigma=5.0)
    expected = clpatch.nlmeans(image, SIGMA, runtime=on_device, guide=guide, **kw)
    assert not np.array_equal(expected, clpatch.nlmeans(image, SIGMA, runtime=on_device, **NLM,
                                                        aggregation="fixed"))
    g = da.from_array(guide, chunks=(20, 41, 3)[:len(shape)])
    got = cdask.nlmeans(chunked(image, (12, 17)), SIGMA, guide=g, **kw).compute()
    np.testing.assert_array_equal(got, expected)
    video = np.stack([image, guide])
    vkw = dict(temporal_window=1, patch_size=4, step=2, window=7, k=6, aggregation="fixed")
    expected = clpatch.nlmeans_video(video, SIGMA, runtime=on_device, guide=video[::-1], **vkw)
    got = cdask.nlmeans_video(da.from_array(video, chunks=(1, 20, 30) + (3,) * (len(shape) - 2)),
                              SIGMA, guide=video[::-1], **vkw).compute()
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="guide_sigma is the noise level of a guide image"):
        cdask.nlmeans(chunked(image, (12, 17)), SIGMA, guide_sigma=1.0)


@pytest.mark.parametrize("role", ["match", "oracle"])
@pytest.mark.parametrize("shape", [(47, 41), (40, 44, 3)])
def test_bm3d_guide_in_pieces(on_device, role, shape):
    """The guide is cut into the image's pieces: bit-identical to one guided call."""
    image, guide = noisy(shape, seed=14), noisy(shape, seed=15)
    expected = clpatch.bm3d(image, SIGMA, runtime=on_device, guide=guide, guide_role=role)
    assert not np.array_equal(expected, clpatch.bm3d(image, SIGMA, runtime=on_device))
    g = da.from_array(guide, chunks=(20, 41, 3)[:len(shape)])
    got = cdask.bm3d(chunked(image, (16, 13)), SIGMA, guide=g, guide_role=role).compute()
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="guide_role='oracle' needs a guide image"):
        cdask.bm3d(chunked(image, (16, 13)), SIGMA, guide_role="oracle")


@pytest.mark.parametrize("role", ["match", "oracle"])
def test_vbm3d_guide_in_pieces(on_device, role):
    """The guide is cut into the frames' pieces: bit-identical to one guided call."""
    if not on_device.profile.int64_atomics:
        pytest.skip("no 64-bit atomics: VBM3D's deterministic aggregation needs them")
    video = noisy((5, 52, 44), seed=12)
    guide = noisy((5, 52, 44), seed=13)
    kw = dict(temporal_radius=1, patch_size=4, step=(3, 2), window_ref=3, window_pred=3, k=4)
    expected = clpatch.vbm3d(video, SIGMA, runtime=on_device, guide=guide, guide_role=role, **kw)
    assert not np.array_equal(expected, clpatch.vbm3d(video, SIGMA, runtime=on_device, **kw))
    x = da.from_array(video, chunks=(2, 20, 30))
    g = da.from_array(guide, chunks=(5, 13, 44))     # its own chunks: cut like the frames
    got = cdask.vbm3d(x, SIGMA, guide=g, guide_role=role, **kw).compute()
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="guide must have the input's shape"):
        cdask.vbm3d(x, SIGMA, guide=guide[:, :50], **kw)
    with pytest.raises(ValueError, match="guide_role='oracle' needs a guide"):
        cdask.vbm3d(x, SIGMA, guide_role="oracle", **kw)


def test_search_matches_the_whole_image(on_device):
    image = noisy((41, 36), seed=5)
    expected = clpatch.search_patches(image, patch_size=5, step=3, window=9, k=6, runtime=on_device)
    got = cdask.search_patches(chunked(image, (10, 7)), patch_size=5, step=3, window=9, k=6)
    np.testing.assert_array_equal(got.grid_y, expected.grid_y)
    np.testing.assert_array_equal(got.grid_x, expected.grid_x)
    np.testing.assert_array_equal(got.positions.compute(), expected.positions)
    np.testing.assert_array_equal(got.distances.compute(), expected.distances)


def test_graph_has_one_task_per_piece_over_the_input_chunks():
    """Each piece is one task reading the input's chunks directly (no sliced copy of the
    input per piece, no reduction per piece): 16 pieces of a 4 x 4-chunk image make 16
    input chunks + at most 16 halo cuts + 16 pieces + 17 of the peak, where slicing the Dask
    array per piece made ten times more."""
    x = da.zeros((64, 64), chunks=16, dtype=np.float32)
    out = cdask.nlmeans(x, SIGMA, **NLM)
    tasks = len(dict(out.__dask_graph__()))
    assert out.chunks == x.chunks
    assert tasks <= 4 * 16 + 1, tasks


def test_pieces_read_their_neighbours_halos_not_their_chunks():
    """A piece depends on its own chunk whole and on its neighbours only through the cut
    tasks (one per chunk), which hand it copies of the halo: on several workers only those
    travel. Chunks smaller than the halo are read whole."""
    x = da.zeros((96, 96), chunks=32, dtype=np.float32)
    out = cdask.nlmeans(x, SIGMA, peak=1.0, **NLM)
    graph = dict(out.__dask_graph__())
    inputs = {k for k in graph if k[0] == x.name}
    cuts = {k for k in graph if "cut" in k[0]}
    assert len(cuts) == 9
    for key in out.__dask_keys__()[1]:
        needs = graph[key].dependencies
        assert needs & inputs == {(x.name, 1, key[2])} and needs - inputs <= cuts
        assert len(needs) >= 4
    # the cuts of the centre chunk: its 8 neighbours' halos (an edge piece's sub-window
    # reaches further inwards), each less than the chunk
    centre = graph[next(k for k in cuts if k[2:] == (1, 1))]
    parts = centre({k: np.zeros((32, 32), np.float32) for k in centre.dependencies})
    assert len(parts) == 8 and all(min(p.shape) < 32 for p in parts)
    tiny = cdask.nlmeans(da.zeros((96, 96), chunks=4, dtype=np.float32), SIGMA, peak=1.0, **NLM)
    assert tiny.chunks == ((4,) * 24,) * 2


def test_the_halo_is_needed(on_device, monkeypatch):
    """A halo one patch short changes the result: the test above can fail."""
    image = noisy((47, 38), seed=6)
    expected = clpatch.nlmeans(image, SIGMA, runtime=on_device, **NLM)
    small = dask_pieces.Halo(NLM["window"] // 2 - 1, 2)
    monkeypatch.setattr(dask_filters, "nlmeans_halo", lambda *args: small)
    out = cdask.nlmeans(chunked(image, (12, 12)), SIGMA, **NLM).compute()
    assert not np.array_equal(out, expected)


def test_peak_is_the_whole_images(on_device):
    """Pieces are scaled by the whole image's peak: a piece's own peak would round
    differently, and a peak below the values is refused."""
    image = noisy((30, 30), seed=7)
    bright = image.copy()
    bright[0, 0] = 4000.0
    kw = dict(NLM, aggregation="fixed")
    if not on_device.profile.int64_atomics:
        pytest.skip("no 64-bit atomics")
    expected = clpatch.nlmeans(bright, SIGMA, runtime=on_device, **kw)
    np.testing.assert_array_equal(cdask.nlmeans(chunked(bright, (15, 15)), SIGMA, **kw).compute(),
                                  expected)
    with pytest.raises(ValueError, match="above the peak"):
        clpatch.nlmeans(bright, SIGMA, peak=100.0, runtime=on_device, **kw)
    with pytest.raises(ValueError, match="above the peak"):
        clpatch.bm3d(bright, SIGMA, peak=100.0, runtime=on_device)


# ---- arguments ---------------------------------------------------------------------------

def test_bad_arguments_are_named():
    x = da.zeros((20, 20), chunks=10)
    with pytest.raises(TypeError, match="image"):
        cdask.nlmeans([[1.0]], SIGMA)
    with pytest.raises(ValueError, match="dimensions"):
        cdask.bm3d(da.zeros((2, 20, 20, 3, 1), chunks=10), SIGMA)
    with pytest.raises(ValueError, match="sigma"):
        cdask.nlmeans(x, -1.0)
    with pytest.raises(ValueError, match="patch_size"):
        cdask.nlmeans(x, SIGMA, patch_size=0)
    with pytest.raises(ValueError, match="peak"):
        cdask.bm3d(x, SIGMA, peak=-1)
    with pytest.raises(ValueError, match="k=20"):
        cdask.search_patches(x, k=20, window=5)
    with pytest.raises(ValueError, match=r"\(H, W\), \(H, W, 1\) or \(H, W, 3\)"):
        cdask.bm3d(da.zeros((20, 20, 2), chunks=10), SIGMA)


def test_nan_is_refused_by_the_pieces(on_device):
    image = noisy((20, 20), seed=8)
    image[3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cdask.nlmeans(chunked(image, (10, 10)), SIGMA, **NLM).compute()


def test_halo_sizes():
    assert dask_pieces.nlmeans_halo(8, 4, 21) == dask_pieces.Halo(18, 8)
    assert dask_pieces.bm3d_halo([(8, 4, 21, 1), (8, 4, 21, 1)]).pixels == 56
    assert dask_pieces.bm3d_halo([(8, 3, 39, 3)] * 2) == dask_pieces.Halo(92, 9)



def test_sub_windows_cover_their_halo_on_the_grid():
    """Every sub-window starts on the alignment and covers its core and halo (clipped to the
    image), for random chunkings; a regular chunking has at most two sizes per axis."""
    rng = np.random.default_rng(0)
    for _ in range(3000):
        size = int(rng.integers(1, 300))
        halo = dask_pieces.Halo(int(rng.integers(0, 40)), int(rng.integers(1, 12)))
        cuts = np.unique(np.r_[0, rng.integers(1, max(2, size), int(rng.integers(0, 6))), size])
        chunks = tuple(int(c) for c in np.diff(cuts))
        for p in dask_pieces.pieces(size, 3, chunks, (3,), halo):
            assert p.ya % halo.align == 0 and 0 <= p.ya <= max(0, p.a - halo.pixels)
            assert min(size, p.b + halo.pixels) <= p.yb <= size
    regular = dask_pieces.pieces(4096, 4000, (1024,) * 4, (1000,) * 4, dask_pieces.Halo(18, 8))
    assert len({p.yb - p.ya for p in regular}) <= 2 and len({p.xb - p.xa for p in regular}) <= 2


# ---- which device a worker uses ----------------------------------------------------------------

class FakeWorker:
    def __init__(self, name, resources=None):
        self.name = name
        self.state = type("State", (), {"total_resources": resources or {}})()


def test_device_spec_per_worker(monkeypatch):
    gpu = type("Dev", (), {"type": dask_worker.cl.device_type.GPU})()
    cpu = type("Dev", (), {"type": dask_worker.cl.device_type.CPU})()
    simulator = type("Dev", (), {"type": dask_worker.cl.device_type.GPU})()
    entries = [type("E", (), {"index": i, "device": d})() for i, d in
               [("0:0", cpu), ("1:0", gpu), ("1:1", gpu), ("2:0", simulator)]]
    monkeypatch.setattr(dask_worker, "list_devices", lambda: entries)
    monkeypatch.setattr(dask_worker, "is_simulator", lambda device: device is simulator)
    monkeypatch.delenv("CLPATCH_DEVICE", raising=False)
    assert dask_worker.device_spec(FakeWorker(0)) == "1:0"
    assert dask_worker.device_spec(FakeWorker("3")) == "1:1"
    assert dask_worker.device_spec(FakeWorker("tcp://a:1", {"clpatch-device": 1})) == "1:1"
    assert dask_worker.device_spec(FakeWorker("gpu-box")) is None
    with pytest.raises(ValueError, match="clpatch-device=5"):
        dask_worker.device_spec(FakeWorker(0, {"clpatch-device": 5}))
    monkeypatch.setenv("CLPATCH_DEVICE", "1:1")
    assert dask_worker.device_spec(FakeWorker(0)) is None     # Runtime() reads it


# ---- a LocalCluster of two worker processes -----------------------------------------------------

def load_or_die(block, marker):
    """An input task that kills its worker process the first time it runs."""
    if not os.path.exists(marker):
        with open(marker, "w"):
            pass
        os._exit(1)
    return block


@pytest.fixture
def client(on_device):
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=50) as cluster, \
            distributed.Client(cluster) as c:
        yield c


def test_local_cluster_bit_identical_and_survives_a_dead_worker(client, on_device, tmp_path):
    image = noisy((44, 39, 3), seed=9)
    gray = np.ascontiguousarray(image[..., 1])
    x = chunked(image, (15, 20))
    out = cdask.nlmeans(x, SIGMA, **NLM)
    np.testing.assert_array_equal(out.compute(),
                                  clpatch.nlmeans(image, SIGMA, runtime=on_device, **NLM))
    if on_device.profile.int64_atomics:
        kw = dict(window=(9, 7), k=(8, 4))
        np.testing.assert_array_equal(cdask.bm3d(chunked(gray, (20, 13)), SIGMA, **kw).compute(),
                                      clpatch.bm3d(gray, SIGMA, runtime=on_device, **kw))
    # Every chunk's loader kills its worker once (the first to run): Dask reruns the task
    # on a live worker and the result is still the same.
    marker = str(tmp_path / "died")
    dying = chunked(gray, (22, 20)).map_blocks(load_or_die, marker=marker,
                                               meta=np.empty((0, 0), gray.dtype))
    got = cdask.nlmeans(dying, SIGMA, **NLM).compute()
    assert os.path.exists(marker)
    np.testing.assert_array_equal(got, clpatch.nlmeans(gray, SIGMA, runtime=on_device, **NLM))
