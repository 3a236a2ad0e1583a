"""VBM3D benchmark (issue: VBM3D): milliseconds per frame on 960×540 frames, split by stage
(Davy–Ehret Table 12), for each search variant, next to BM3D ("fast" preset) run frame by
frame on the same frames; and, with --quality, the PSNR and temporal flicker of VBM3D against
per-frame BM3D on camera-motion videos made from the sample images.

The 960×540 video: a 24-frame (--frames) crop of a mosaic of the sample photographs following
a smooth random sub-pixel path (tests/reference/video.py), plus Gaussian noise of σ 20.
Times are OpenCL profiling events: every kernel of a whole video (the frames go from host
memory to the device as they stream in; the uploads are reported apart), after one warm-up
video, median of --repeats videos, divided by the frame count.

Run from the repository root: PYTHONPATH=. python benchmarks/bench_vbm3d.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

import clpatch
from clpatch.denoise.bm3d import BM3DPlan
from clpatch.denoise.bm3d_params import stage_params
from clpatch.denoise.vbm3d import VBM3DPlan
from clpatch.denoise.vbm3d_params import video_stage_params
from clpatch.tune.timing import event_ms, photo_mosaic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.reference.video import add_noise, motion_video, psnr, temporal_flicker  # noqa: E402

IMAGES = ROOT / "tests" / "data"
SIGMA = 20.0
# Grayscale videos from every image large enough for 256x256 crops; --images points at the
# full-size set (the project's shared/data/images; tests/data holds reduced colour copies).
QUALITY_IMAGES = ["camera", "astronaut", "brick", "grass", "moon", "cell", "coins",
                  "motorcycle_left"]
COLOUR_IMAGES = ["astronaut", "motorcycle_left"]


def image(name: str, gray: bool = True, folder: Path = IMAGES) -> np.ndarray:
    im = Image.open(folder / f"{name}.png")
    return np.asarray(im.convert("L" if gray else "RGB"), np.float64)


def bench_video(frames: int, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    names = ["camera", "astronaut", "brick", "moon", "coins", "motorcycle_left"]
    mosaic = photo_mosaic(rows + 200, cols + 200, sigma=0.0,
                          images=[image(n) for n in names]).astype(np.float64)
    clean, _ = motion_video(mosaic, frames=frames, size=(rows, cols), seed=3)
    return clean, add_noise(clean, SIGMA, seed=4).astype(np.float32)


def per_frame(events: list[tuple[str, Any]], frames: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, event in events:
        out[name] = out.get(name, 0.0) + event_ms(event) / frames
    return out


def time_vbm3d(rt: clpatch.Runtime, noisy: np.ndarray, variant: str, repeats: int,
               **params: Any) -> dict[str, Any]:
    frames, rows, cols = noisy.shape[:3]
    p1, p2, stages, radius = video_stage_params(**params)
    plan = VBM3DPlan(rt, rows, cols, 1, (p1, p2), stages, radius, variant=variant)
    plan.keep_events = True
    out = plan.run(noisy, SIGMA, data_range=255.0)            # warm-up (and the result)
    runs = []
    for _ in range(repeats):
        plan.run(noisy, SIGMA, data_range=255.0)
        rt.queue.finish()
        runs.append(per_frame(plan.last_events, frames))
    stages_ms = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}
    kernels = [sum(v for k, v in r.items() if k != "upload") for r in runs]
    return {"variant": plan.variant, "ms_per_frame": statistics.median(kernels),
            "runs_ms_per_frame": kernels, "stages_ms_per_frame": stages_ms,
            "aggregation": plan.aggregation, "output": out}


def time_bm3d(rt: clpatch.Runtime, noisy: np.ndarray, repeats: int) -> dict[str, Any]:
    frames, rows, cols = noisy.shape[:3]
    p1, p2, stages = stage_params("fast")
    plan = BM3DPlan(rt, rows, cols, 1, (p1, p2), stages)
    out = np.stack([plan.run(f, SIGMA, data_range=255.0) for f in noisy])
    runs = []
    for _ in range(repeats):
        events: list[tuple[str, Any]] = []
        for f in noisy:
            plan.run(f, SIGMA, data_range=255.0)
            events.extend((k, e) for k, e in plan.last_events if k != "upload")
        runs.append(per_frame(events, frames))
    totals = [sum(r.values()) for r in runs]
    return {"ms_per_frame": statistics.median(totals),
            "stages_ms_per_frame": {k: statistics.median(r.get(k, 0.0) for r in runs)
                                    for k in runs[0]}, "output": out}


def quality(rt: clpatch.Runtime, frames: int, folder: Path) -> list[dict[str, Any]]:
    rows = []
    for name in QUALITY_IMAGES + [f"{n} (colour)" for n in COLOUR_IMAGES]:
        colour = name.endswith("(colour)")
        if not (folder / f"{name.split()[0]}.png").exists():
            print(f"{name}: not in {folder}, skipped")
            continue
        base = image(name.split()[0], gray=not colour, folder=folder)
        try:
            clean, _ = motion_video(base, frames=frames, size=(256, 256), seed=0)
        except ValueError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        noisy = add_noise(clean, SIGMA, seed=1).astype(np.float32)
        v = np.clip(clpatch.vbm3d(noisy, SIGMA, runtime=rt), 0, 255)
        b = np.clip(np.stack([clpatch.bm3d(f, SIGMA, runtime=rt) for f in noisy]), 0, 255)
        rows.append({"video": name, "noisy_db": psnr(noisy, clean),
                     "vbm3d_db": psnr(v, clean), "bm3d_fast_db": psnr(b, clean),
                     "vbm3d_flicker": temporal_flicker(v, clean),
                     "bm3d_fast_flicker": temporal_flicker(b, clean)})
        r = rows[-1]
        print(f"{name:24s} noisy {r['noisy_db']:.2f}  VBM3D {r['vbm3d_db']:.2f} dB "
              f"(flicker {r['vbm3d_flicker']:.2f})  BM3D fast {r['bm3d_fast_db']:.2f} dB "
              f"(flicker {r['bm3d_fast_flicker']:.2f})", flush=True)
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# VBM3D on {result['device']}", "",
             f"{result['frames']} frames of {result['size']}, σ {SIGMA:g}; ms per frame, median "
             f"of {result['repeats']} videos after a warm-up (OpenCL profiling events; uploads "
             "apart). Search/filter split per stage as in Davy–Ehret Table 12.", "",
             "| method | search 1 | filter 1 | search 2 | filter 2 | other | total ms/frame | "
             "PSNR dB |", "|---|---|---|---|---|---|---|---|"]
    for row in result["timing"]:
        st = row["stages_ms_per_frame"]
        main = sum(st.get(k, 0.0) for k in ("search1", "filter1", "search2", "filter2"))
        other = sum(v for k, v in st.items() if k != "upload") - main
        lines.append(f"| {row['method']} | {st.get('search1', 0):.3f} | {st.get('filter1', 0):.3f} "
                     f"| {st.get('search2', 0):.3f} | {st.get('filter2', 0):.3f} | {other:.3f} | "
                     f"**{row['ms_per_frame']:.3f}** | {row['psnr_db']:.2f} |")
    if result.get("quality"):
        lines += ["", "## Quality: 24 frames of 256×256 camera-motion crops, σ 20", "",
                  "| video | noisy | VBM3D | BM3D fast per frame | gain | flicker VBM3D | "
                  "flicker BM3D |", "|---|---|---|---|---|---|---|"]
        for r in result["quality"]:
            lines.append(f"| {r['video']} | {r['noisy_db']:.2f} | {r['vbm3d_db']:.2f} | "
                         f"{r['bm3d_fast_db']:.2f} | {r['vbm3d_db'] - r['bm3d_fast_db']:+.2f} | "
                         f"{r['vbm3d_flicker']:.2f} | {r['bm3d_fast_flicker']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--size", default="960x540", help="WIDTHxHEIGHT of the timed frames")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variants", default="naive,window,patch")
    ap.add_argument("--quality", action="store_true", help="also the PSNR/flicker table")
    ap.add_argument("--device", default=None)
    ap.add_argument("--images", type=Path, default=IMAGES,
                    help="directory of the sample images (default tests/data)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args(argv)
    cols, rows = (int(v) for v in args.size.lower().split("x"))
    rt = clpatch.Runtime(args.device, profiling=True)
    clean, noisy = bench_video(args.frames, rows, cols)
    timing = []
    for variant in args.variants.split(","):
        t0 = time.time()
        r = time_vbm3d(rt, noisy, variant, args.repeats)
        r["method"] = f"VBM3D, {variant} search"
        r["psnr_db"] = psnr(np.clip(r.pop("output"), 0, 255), clean)
        timing.append(r)
        print(f"{r['method']}: {r['ms_per_frame']:.3f} ms/frame {r['psnr_db']:.2f} dB "
              f"{ {k: round(v, 4) for k, v in r['stages_ms_per_frame'].items()} } "
              f"({time.time() - t0:.0f} s)", flush=True)
    b = time_bm3d(rt, noisy, args.repeats)
    b["method"] = "BM3D fast, frame by frame"
    b["psnr_db"] = psnr(np.clip(b.pop("output"), 0, 255), clean)
    timing.append(b)
    print(f"{b['method']}: {b['ms_per_frame']:.3f} ms/frame {b['psnr_db']:.2f} dB", flush=True)
    result = {"device": rt.device.name.strip(), "driver": rt.device.driver_version,
              "platform": platform.platform(), "frames": args.frames, "size": args.size,
              "repeats": args.repeats, "sigma": SIGMA, "timing": timing,
              "date": time.strftime("%Y-%m-%d")}
    if args.quality:
        result["quality"] = quality(rt, 24, args.images)
    text = markdown(result)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.md:
        args.md.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
