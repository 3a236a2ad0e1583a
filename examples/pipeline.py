"""A pipeline on one OpenCL queue: clpatch's BM3D between two kernels of the pipeline's own.

    python examples/pipeline.py [--device SPEC] [--size H W] [--frames N] [--sigma S]
                                [--repeats R]

Each frame of a noisy RGB video (8-bit) is copied to the device, turned into luminance by
a small kernel of this script, denoised by `clpatch.make_plan("bm3d", ...)`, scaled back
to 8 bits by a second kernel of its own, and copied back: one queue, events only (every
frame's copy back waits for its own kernels through `wait_for`). Frames move through two
page-locked host slots: the host waits only for frame t - 2's copy back before reusing its
slot for frame t. The plan is given `peak=`, so its `enqueue` waits for nothing.

It prints, per frame, the wall clock of the whole run divided by the frame count, the sum of
the OpenCL profiling times of its kernels and copies (the device's busy time; the target
is a wall clock within 1.1 x of it), and the same steps with NumPy round trips (the
luminance and the 8-bit conversion in NumPy, `clpatch.bm3d` on a NumPy frame). The outputs
of the two must be equal.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

import clpatch

KERNELS = r"""
// No fused multiply-adds: the luminance rounds as NumPy's float32 arithmetic does.
#pragma OPENCL FP_CONTRACT OFF

// One work-item per pixel: luminance of an interleaved 8-bit RGB frame (BT.601 weights).
__kernel void luminance(__global const uchar *rgb, __global float *gray, const int pixels)
{
    const int i = get_global_id(0);
    if (i < pixels)
        gray[i] = 0.299f * rgb[3 * i] + 0.587f * rgb[3 * i + 1] + 0.114f * rgb[3 * i + 2];
}

// One work-item per pixel: a float frame rounded and clipped to 8 bits.
__kernel void to_u8(__global const float *x, __global uchar *out, const int pixels)
{
    const int i = get_global_id(0);
    if (i < pixels)
        out[i] = convert_uchar_sat_rte(x[i]);
}
"""

#: BT.601 luminance weights, as the kernel uses them (the NumPy round trip's own).
WEIGHTS = np.array([0.299, 0.587, 0.114], np.float32)


def noisy_video(frames: int, rows: int, cols: int, sigma: float, seed: int = 0) -> np.ndarray:
    """A moving gradient with noise, 8-bit RGB (frames, rows, cols, 3)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:rows, :cols].astype(np.float32)
    video = np.empty((frames, rows, cols, 3), np.uint8)
    for t in range(frames):
        base = 128 + 60 * np.sin((x + 4 * t) / 37.0) * np.cos(y / 23.0)
        rgb = np.stack([base, base * 0.8 + 20, 255 - base], axis=-1)
        video[t] = np.clip(rgb + rng.normal(0, sigma, rgb.shape), 0, 255).round()
    return video


def pinned(runtime: clpatch.Runtime, shape: tuple[int, ...],
           dtype: type) -> tuple[np.ndarray, cl.Buffer]:
    """A host array in page-locked memory the device copies from and to without the host
    (a copy from pageable NumPy memory is staged through the host by the driver), and the
    buffer behind it (keep both)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR,
                    nbytes)
    array, _ = cl.enqueue_map_buffer(runtime.queue, buf,
                                     cl.map_flags.READ | cl.map_flags.WRITE, 0, shape, dtype)
    return array, buf


class Pipeline:
    """The device side: buffers, the script's kernels and the BM3D plan, on `runtime`; two
    page-locked host slots for frames in and out, so that frame k + 1 is copied in while
    frame k runs."""

    def __init__(self, runtime: clpatch.Runtime, rows: int, cols: int, sigma: float) -> None:
        self.runtime, self.queue = runtime, runtime.queue
        self.pixels = rows * cols
        program = cl.Program(runtime.context, KERNELS).build()
        self.luminance = cl.Kernel(program, "luminance")
        self.to_u8 = cl.Kernel(program, "to_u8")
        self.rgb = cla.empty(self.queue, (rows, cols, 3), np.uint8)
        self.gray = cla.empty(self.queue, (rows, cols), np.float32)
        self.denoised = cla.empty(self.queue, (rows, cols), np.float32)
        self.u8 = cla.empty(self.queue, (rows, cols), np.uint8)
        slots_in = [pinned(runtime, (rows, cols, 3), np.uint8) for _ in range(2)]
        slots_out = [pinned(runtime, (rows, cols), np.uint8) for _ in range(2)]
        self.slots_in = [array for array, _ in slots_in]
        self.slots_out = [array for array, _ in slots_out]
        self.pinned_buffers = [buf for _, buf in slots_in + slots_out]
        # peak: luminance of 8-bit data stays within 255, so nothing waits for the data.
        self.plan = clpatch.make_plan("bm3d", (rows, cols), runtime=runtime, sigma=sigma,
                                      peak=255.0)
        self.events: list[tuple[str, cl.Event]] = []

    def enqueue(self, frame: np.ndarray, out: np.ndarray,
                after: list[cl.Event] | None) -> cl.Event:
        """Enqueue one frame: copy in from host array `frame` (after `after`), luminance,
        BM3D, 8 bits, copy back into host array `out`; returns the copy back's event.
        Waits for nothing."""
        n, queue, g = self.pixels, self.queue, 256
        size = (-(-n // g) * g,)
        up = cl.enqueue_copy(queue, self.rgb.data, frame, is_blocking=False, wait_for=after)
        lum = self.luminance(queue, size, (g,), self.rgb.data, self.gray.data, np.int32(n),
                             wait_for=[up])
        _, denoised = self.plan.enqueue(self.gray, out=self.denoised, wait_for=[lum])
        u8 = self.to_u8(queue, size, (g,), self.denoised.data, self.u8.data, np.int32(n),
                        wait_for=[denoised])
        down = cl.enqueue_copy(queue, out, self.u8.data, is_blocking=False, wait_for=[u8])
        self.events += [("upload", up), ("luminance", lum),
                        *self.plan.last_events, ("to_u8", u8), ("download", down)]
        return down

    def run(self, video: np.ndarray) -> np.ndarray:
        """Every frame through the pipeline: frame t goes through page-locked slot t % 2,
        whose previous frame (t - 2) is waited for and handed out first."""
        out = np.empty(video.shape[:3], np.uint8)
        pending: list[tuple[cl.Event, int]] = []
        last = None
        self.events = []
        for t in range(len(video)):
            slot = t % 2
            if len(pending) == 2:
                self._hand_out(out, *pending.pop(0))
            self.slots_in[slot][...] = video[t]
            last = [self.enqueue(self.slots_in[slot], self.slots_out[slot], last)]
            pending.append((last[0], t))
        for event, t in pending:
            self._hand_out(out, event, t)
        self.plan.check()           # the deferred value checks of every frame
        return out

    def _hand_out(self, out: np.ndarray, event: cl.Event, t: int) -> None:
        event.wait()
        out[t] = self.slots_out[t % 2]

    def busy_ms(self) -> float:
        """Sum of the last run's profiled kernel and copy times, in milliseconds."""
        return sum((e.profile.end - e.profile.start) * 1e-6 for _, e in self.events)


def round_trips(video: np.ndarray, sigma: float, runtime: clpatch.Runtime) -> np.ndarray:
    """The same steps with NumPy between them."""
    out = np.empty(video.shape[:3], np.uint8)
    for t, frame in enumerate(video):
        # The kernel's order of operations, so that both give the same float image.
        gray = (np.float32(WEIGHTS[0]) * frame[..., 0] + np.float32(WEIGHTS[1]) * frame[..., 1]
                + np.float32(WEIGHTS[2]) * frame[..., 2]).astype(np.float32)
        denoised = clpatch.bm3d(gray, sigma, peak=255.0, runtime=runtime)
        out[t] = np.clip(np.rint(denoised), 0, 255).astype(np.uint8)
    return out


def main(argv: list[str] | None = None, device: object = None) -> dict[str, float]:
    """Run the comparison (`device`: a pyopencl.Device, in place of --device)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", help="as clpatch.Runtime takes it (default: the best GPU)")
    ap.add_argument("--size", type=int, nargs=2, default=(1080, 1920), metavar=("H", "W"))
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--sigma", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs (after a warm-up)")
    args = ap.parse_args(argv)
    rows, cols = args.size
    runtime = clpatch.Runtime(device or args.device, profiling=True)
    video = noisy_video(args.frames, rows, cols, args.sigma)
    pipeline = Pipeline(runtime, rows, cols, args.sigma)
    pipeline.run(video[:1])                             # builds, sizes every buffer
    walls, busy = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        out = pipeline.run(video)
        walls.append((time.perf_counter() - start) * 1e3 / args.frames)
        busy.append(pipeline.busy_ms() / args.frames)
    round_trips(video[:1], args.sigma, runtime)         # warm-up
    start = time.perf_counter()
    expected = round_trips(video, args.sigma, runtime)
    numpy_ms = (time.perf_counter() - start) * 1e3 / args.frames
    same = bool(np.array_equal(out, expected))
    result = dict(wall_ms=statistics.median(walls), busy_ms=statistics.median(busy),
                  numpy_ms=numpy_ms, same=same)
    print(f"{runtime.device.name.strip()}: {args.frames} frames of {rows}x{cols}, sigma "
          f"{args.sigma:g}\n"
          f"  pipeline on one queue   {result['wall_ms']:9.3f} ms/frame wall clock\n"
          f"  its kernels and copies  {result['busy_ms']:9.3f} ms/frame (profiling; wall / "
          f"busy = {result['wall_ms'] / result['busy_ms']:.3f})\n"
          f"  NumPy round trips       {numpy_ms:9.3f} ms/frame wall clock\n"
          f"  outputs equal: {same}")
    if not same:
        sys.exit("the pipeline and the NumPy round trips differ")
    return result


if __name__ == "__main__":
    main()
