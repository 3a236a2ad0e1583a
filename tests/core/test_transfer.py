"""Pinned, piecewise, threaded host <-> device copies on the transfer queue
(`clpatch.core.transfer.Transfers`) and the straight download into a caller's array."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

from clpatch.core import transfer
from clpatch.core.staging import download
from clpatch.core.transfer import Transfers


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of 64 KiB, so a few hundred KiB make many pieces and threaded copies."""
    monkeypatch.setattr(transfer, "PIECE_BYTES", 1 << 16)


@pytest.mark.parametrize("count", [1, 1000, 300_007])
def test_round_trip_through_pinned_slots(runtime, small_pieces, count):
    moves = Transfers(runtime)
    data = np.random.default_rng(count).random(count).astype(np.float32)
    device = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE, data.nbytes)
    uploaded = moves.upload(device, data, "in")
    started = moves.start_download(device, data.nbytes, "out", wait_for=[uploaded])
    assert isinstance(started, cl.Event)
    back = np.empty_like(data)
    moves.finish_download("out", back)
    np.testing.assert_array_equal(back, data)


def test_slots_are_reused_and_grown(runtime, small_pieces):
    moves = Transfers(runtime)
    for n in (5000, 200_000, 3000):          # grows once, then reuses the larger slot
        data = np.arange(n, dtype=np.int32)
        device = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE, data.nbytes)
        moves.upload(device, data, "in")
        moves.start_download(device, data.nbytes, "out")
        back = np.zeros(n, np.int32)
        moves.finish_download("out", back)
        np.testing.assert_array_equal(back, data)


def test_download_into_a_strided_view(runtime, small_pieces):
    moves = Transfers(runtime)
    data = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
    device = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                       hostbuf=data)
    target = np.zeros((40, 60), np.float32)
    moves.start_download(device, data.nbytes, "out")
    moves.finish_download("out", target[:, ::2])
    np.testing.assert_array_equal(target[:, ::2], data)
    assert not target[:, 1::2].any()


@pytest.mark.parametrize("contiguous", [True, False])
def test_staging_download(runtime, contiguous):
    data = np.arange(12 * 7, dtype=np.float32).reshape(12, 7)
    device = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                       hostbuf=data)
    target = np.zeros((12, 7) if contiguous else (12, 14), np.float32)
    view = target if contiguous else target[:, :7]
    download(runtime.queue, view, device, shape=(12, 7))
    np.testing.assert_array_equal(view, data)
