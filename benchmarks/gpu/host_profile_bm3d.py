"""Wall clock and host profile of clpatch.bm3d on a 512x512 device image (peak given), for
an A/B of two trees on the GPU machine: prints the median wall of 60 calls (after warm-up)
and cProfile's top entries by internal time."""

import cProfile
import io
import pstats
import statistics
import time

import numpy as np
import pyopencl.array as cla

import clpatch

rt = clpatch.Runtime("nvidia")
image = np.random.default_rng(0).normal(128, 20, (512, 512)).astype(np.float32)
d = cla.to_device(rt.queue, image)
for _ in range(5):
    clpatch.bm3d(d, 20, runtime=rt, peak=255.0)
    rt.queue.finish()
walls = []
for _ in range(60):
    start = time.perf_counter()
    clpatch.bm3d(d, 20, runtime=rt, peak=255.0)
    rt.queue.finish()
    walls.append((time.perf_counter() - start) * 1e3)
print(f"{clpatch.__file__}: bm3d 512x512 wall median {statistics.median(walls):.3f} ms")
profile = cProfile.Profile()
profile.enable()
for _ in range(30):
    clpatch.bm3d(d, 20, runtime=rt, peak=255.0)
    rt.queue.finish()
profile.disable()
out = io.StringIO()
pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(14)
print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:3500])
