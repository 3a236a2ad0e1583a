"""A .vpy script with clpatch's filters runs under vspipe, VapourSynth's command-line host
(its own process, an embedded Python): the raw frames it writes are clpatch.vbm3d's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import clpatch
from tests.vapoursynth.common import gray_video, require_vapoursynth, to_uint8, vs

require_vapoursynth()

SCRIPT = """
import numpy as np
import vapoursynth as vs
import clpatch.vapoursynth as cvs

vs.core.num_threads = 4
clip = cvs.clip_from_array(np.load({frames!r}))
cvs.vbm3d(clip, sigma=20, radius=1, chunk_frames=3).set_output()
"""


def vspipe_env(tmp_path: Path) -> dict[str, str]:
    """The environment vspipe runs in: VapourSynth's runtime configuration (which Python
    library vspipe embeds) written for this interpreter into a folder of the test's own."""
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run([sys.executable, "-m", "vapoursynth", "config"], env=env,
                          capture_output=True, text=True, timeout=60)
    if "successfully" not in done.stdout:
        pytest.skip(f"vapoursynth config cannot set up vspipe for {sys.executable} "
                    f"(a Python without a shared library?): {done.stdout.strip()}")
    return env


def test_vpy_script_under_vspipe(tmp_path):
    vspipe = Path(vs.__file__).with_name("vspipe")
    if not vspipe.is_file():
        pytest.skip(f"no vspipe beside {vs.__file__}")
    noisy = gray_video(frames=7)
    np.save(tmp_path / "frames.npy", noisy)
    script = tmp_path / "denoise.vpy"
    script.write_text(SCRIPT.format(frames=str(tmp_path / "frames.npy")))
    env = vspipe_env(tmp_path)
    done = subprocess.run([str(vspipe), str(script), str(tmp_path / "out.raw")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    raw = np.fromfile(tmp_path / "out.raw", np.uint8).reshape(noisy.shape)
    device = clpatch.Runtime()          # the script's device: CLPATCH_DEVICE or the best GPU
    expected = clpatch.vbm3d(noisy, 20, temporal_radius=1, data_range=255, peak=255,
                             runtime=device)
    np.testing.assert_array_equal(raw, to_uint8(expected))
