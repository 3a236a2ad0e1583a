"""BM3D speed and quality on the GPU, with the CUDA peers bm3d-triton and bm3d-cupy in the same run.

    python benchmarks/bench_bm3d.py [--device SPEC] [--json FILE] [--markdown FILE]
                                    [--repeats 15] [--quick] [--no-peers]

Every image of tests/data (grayscale; colour photos converted with ITU-R 601 luma) gets
σ = 20 Gaussian noise (seed 0, 0–255 units). Per image: PSNR (outputs clipped to [0, 255])
and kernel time of clpatch's "fast" and "reference" presets, bm3d-triton (Triton, NCHW
tensor in [0, 1], its defaults) and bm3d-cupy (its defaults, camera.png and the large image
only: it takes seconds). On camera.png and on a 4608×3456 photo mosaic (the size of
Davy–Ehret's CMLA image, their Table 10) clpatch's time is split by stage (search and
filtering of each pass) and both aggregation strategies are timed.

clpatch is timed with OpenCL profiling events (warm-up, median of repeats, inputs rotating
between 2 noisy versions kept on the device, transfers excluded); the peers with CUDA
events around their call on a device tensor (median of repeats after warm-up; bm3d-cupy:
median of 3, 1 on the large image). --quick shrinks everything (a smoke test on PoCL).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl.array as cla
from PIL import Image

import clpatch
from clpatch.denoise.bm3d import BM3DPlan
from clpatch.denoise.bm3d_params import stage_params
from clpatch.tune.timing import photo_mosaic, time_events

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "tests" / "data"
SIGMA = 20.0
LARGE = (3456, 4608)


def load_gray(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("L"), np.float32)


def psnr(out: np.ndarray, clean: np.ndarray) -> float:
    err = np.clip(np.asarray(out, np.float64), 0, 255) - clean
    return float(10 * math.log10(255.0 ** 2 / np.mean(err * err)))


def noisy_versions(clean: np.ndarray, count: int = 2) -> list[np.ndarray]:
    return [(clean + np.random.default_rng(seed).normal(0, SIGMA, clean.shape)).astype(np.float32)
            for seed in range(count)]


# ---- clpatch -------------------------------------------------------------------------------

def clpatch_case(rt: clpatch.Runtime, inputs: list[np.ndarray], preset: str, repeats: int,
                 aggregation: str | None = None) -> dict[str, Any]:
    rows, cols = inputs[0].shape
    p1, p2, stages = stage_params(preset)
    plan = BM3DPlan(rt, rows, cols, 1, (p1, p2), stages, aggregation=aggregation,
                    device_output=True)
    device = [cla.to_device(rt.queue, im) for im in inputs]

    def run(i: int):
        plan.run(device[i % len(device)], SIGMA, data_range=255.0)
        return plan.last_events

    timing = time_events(run, repeats=repeats)
    out = plan.run(device[0], SIGMA, data_range=255.0).get()
    stages_ms = {k: timing.median(k) for k in timing.samples}
    return {"ms": timing.median(), "quartiles_ms": timing.spread(), "stages_ms": stages_ms,
            "aggregation": plan.aggregation, "search": [s.search.config.variant for s in plan.stages],
            "output": out}


# ---- peers ---------------------------------------------------------------------------------

def triton_peer() -> Any:
    try:
        import bm3d_triton
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        return f"unavailable: {exc}"
    if not torch.cuda.is_available():
        return "unavailable: no CUDA device"

    def run(image: np.ndarray, repeats: int) -> tuple[np.ndarray, float]:
        x = torch.from_numpy(image / 255.0).float().cuda()[None, None]
        out = bm3d_triton.denoise(x, SIGMA / 255.0)  # warm-up (JIT)
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = bm3d_triton.denoise(x, SIGMA / 255.0)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return out[0, 0].cpu().numpy() * 255.0, statistics.median(times)

    return run


def cupy_peer() -> Any:
    try:
        import bm3d_cupy
        import cupy as cp
    except Exception as exc:  # noqa: BLE001
        return f"unavailable: {exc}"

    def run(image: np.ndarray, repeats: int) -> tuple[np.ndarray, float]:
        x = cp.asarray(image / 255.0, dtype=cp.float32)
        out = bm3d_cupy.bm3d_gpu(x, SIGMA / 255.0)  # warm-up
        cp.cuda.runtime.deviceSynchronize()
        times = []
        for _ in range(repeats):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            out = bm3d_cupy.bm3d_gpu(x, SIGMA / 255.0)
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
        return cp.asnumpy(out) * 255.0, statistics.median(times)

    return run


# ---- report --------------------------------------------------------------------------------

def markdown(result: dict[str, Any]) -> str:
    lines = [f"# BM3D on {result['device']}", "",
             f"σ = {SIGMA:g}, seed 0; PSNR of outputs clipped to [0, 255]; times are medians "
             "(clpatch: OpenCL profiling events, all kernels, transfers excluded; peers: CUDA "
             "events around the call on a device tensor).", "",
             "| image | clpatch fast | clpatch reference | bm3d-triton | bm3d-cupy |",
             "|---|---|---|---|---|"]
    for row in result["images"]:
        cells = []
        for key in ("fast", "reference", "bm3d-triton", "bm3d-cupy"):
            entry = row.get(key)
            cells.append("–" if entry is None else f"{entry['psnr']:.2f} dB, {entry['ms']:.2f} ms")
        lines.append(f"| {row['image']} ({row['shape'][1]}×{row['shape'][0]}) | " + " | ".join(cells) + " |")
    lines += ["", "## Stage split (clpatch, ms)", "",
              "| input | preset | aggregation | search 1 | filter 1 | search 2 | filter 2 | other | total |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in result["splits"]:
        st = row["stages_ms"]
        main = [st.get(k, 0.0) for k in ("search1", "filter1", "search2", "filter2")]
        other = sum(v for k, v in st.items() if k not in ("search1", "filter1", "search2", "filter2"))
        lines.append(f"| {row['input']} | {row['preset']} | {row['aggregation']} | "
                     + " | ".join(f"{v:.3f}" for v in main) + f" | {other:.3f} | {row['ms']:.3f} |")
    if result.get("notes"):
        lines += [""] + [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args(argv)

    rt = clpatch.Runtime(args.device, profiling=True)
    repeats = 3 if args.quick else args.repeats
    names = sorted(p.name for p in IMAGES.glob("*.png"))
    if args.quick:
        names = ["camera.png"]
    triton = cupy = "disabled (--no-peers)"
    if not args.no_peers:
        triton, cupy = triton_peer(), cupy_peer()
    notes = [f"bm3d-triton: {triton}" for _ in [0] if isinstance(triton, str)]
    notes += [f"bm3d-cupy: {cupy}" for _ in [0] if isinstance(cupy, str)]

    rows, splits = [], []
    for name in names:
        clean = load_gray(IMAGES / name).astype(np.float64)
        if args.quick:
            clean = clean[:128, :128]
        inputs = noisy_versions(clean)
        row: dict[str, Any] = {"image": name, "shape": list(clean.shape)}
        for preset in ("fast", "reference"):
            case = clpatch_case(rt, inputs, preset, repeats)
            row[preset] = {"psnr": psnr(case.pop("output"), clean), "ms": case["ms"]}
            if name == "camera.png":
                splits.append({"input": name, "preset": preset, **case})
        if name == "camera.png":
            for agg in ("cas",):
                case = clpatch_case(rt, inputs, "fast", repeats, aggregation=agg)
                case.pop("output")
                splits.append({"input": name, "preset": "fast", **case})
        if callable(triton):
            out, ms = triton(inputs[0], repeats)
            row["bm3d-triton"] = {"psnr": psnr(out, clean), "ms": ms}
        if callable(cupy) and name == "camera.png":
            out, ms = cupy(inputs[0], 3)
            row["bm3d-cupy"] = {"psnr": psnr(out, clean), "ms": ms}
        rows.append(row)
        print(json.dumps(row), flush=True)

    shape = (256, 384) if args.quick else LARGE
    photos = [load_gray(IMAGES / n) for n in ("camera.png", "brick.png", "coins.png", "moon.png")]
    clean = photo_mosaic(*shape, sigma=0.0, images=photos).astype(np.float64)
    inputs = noisy_versions(clean)
    large: dict[str, Any] = {"image": "photo mosaic", "shape": list(shape)}
    for preset, aggs in (("fast", ("fixed", "cas")), ("reference", ("fixed",))):
        for agg in aggs:
            case = clpatch_case(rt, inputs, preset, max(3, repeats // 3), aggregation=agg)
            out = case.pop("output")
            splits.append({"input": f"{shape[1]}×{shape[0]}", "preset": preset, **case})
            if agg == "fixed":
                large[preset] = {"psnr": psnr(out, clean), "ms": case["ms"]}
            print(json.dumps(splits[-1]), flush=True)
    if callable(triton):
        out, ms = triton(inputs[0], 3)
        large["bm3d-triton"] = {"psnr": psnr(out, clean), "ms": ms}
    if callable(cupy):
        out, ms = cupy(inputs[0], 1)
        large["bm3d-cupy"] = {"psnr": psnr(out, clean), "ms": ms}
    rows.append(large)
    print(json.dumps(large), flush=True)

    result = {"device": rt.device.name.strip(), "driver": rt.device.driver_version,
              "platform": platform.platform(), "python": sys.version.split()[0],
              "date": time.strftime("%Y-%m-%d"), "sigma": SIGMA, "repeats": repeats,
              "images": rows, "splits": splits, "notes": notes}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    text = markdown(result)
    if args.markdown:
        args.markdown.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
