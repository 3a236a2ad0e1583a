"""clpatch's VapourSynth filters against BM3DCUDA and KNLMeansCL in one VapourSynth process
(issue 41): frames per second from a NumPy clip to NumPy frames, and PSNR.

The clip: --frames (24) 8-bit grayscale frames of --size (1080p, 4k) cut from a mosaic of
the sample photographs along a smooth sub-pixel camera path (tests/reference/video.py, as
benchmarks/bench_vbm3d.py), plus Gaussian noise of σ 20, rounded and clipped to 8 bits.
Every method reads it from `clpatch.vapoursynth.clip_from_array` (a ModifyFrame that copies
each NumPy frame into a VapourSynth frame) and its output frames are copied into a NumPy
array; fps = frames / wall time of that loop, the frames requested `core.num_threads` (16)
ahead in order (`clpatch.vapoursynth.frames`: what `VideoNode.frames()` does, without its
hang on Python-made frames in R79). Each method runs once on the whole clip to warm up
(kernel builds, CUDA/OpenCL set-up), then --repeats times on a fresh filter node (the
median is reported; a node's own frame cache would otherwise serve the repeats).

clpatch runs at the true noise level (sigma 20, 8-bit units). The peers' strengths are not
σ (BM3DCUDA's `sigma` and KNLMeansCL's `h` are their own scales; docs/vapoursynth.md):
each peer configuration gets its best strength, chosen by PSNR over the first
--tune-frames (8) frames of the first --size among a grid (BM3DCUDA sigma 10…50,
KNLMeansCL h 4…20), written in the table and kept for the other sizes (same noise).
The peers: BM3DCUDA (`BM3Dv2`, basic then final step with `ref=basic`, on GRAYS clips
in [0, 1] made and read back with std.Expr, as its users must) with block_step 4 and
bm_range 9 (its default range), block_step 3 and bm_range 19 (the reference-class
setting, clpatch's reference preset: step 3, window 39), and radius 2 (temporal);
KNLMeansCL spatial (d 0) and temporal (d 4), with a 21×21 window (a 10) and 9×9 patches
(s 4), and with its default window (a 2). A peer whose plug-in is missing is skipped,
and the table says so.

Run from the repository root, e.g. on the GPU machine (after `. .gpu/env.sh`):
    python3 benchmarks/bench_vapoursynth.py --size 1080p 4k --out results.md
and here on PoCL, without peers:  python benchmarks/bench_vapoursynth.py --tiny
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import vapoursynth as vs  # noqa: E402

import clpatch  # noqa: E402
import clpatch.vapoursynth as cvs  # noqa: E402
from clpatch.tune.timing import photo_mosaic  # noqa: E402
from tests.reference.video import add_noise, motion_video, psnr  # noqa: E402

SIGMA = 20.0
SIZES = {"1080p": (1080, 1920), "4k": (2160, 3840), "tiny": (48, 64)}
PLUGINS = Path("/tmp/vsplug/vapoursynth/plugins")
PEER_LIBRARIES = {"bm3dcuda": PLUGINS / "bm3dcuda" / "libbm3dcuda.so",
                  "knlm": PLUGINS / "libKNLMeansCL.so"}
BM3DCUDA_SIGMAS = [10, 15, 20, 25, 30, 35, 40, 50]
KNLM_H = [4, 6, 8, 10, 11, 12, 14, 16, 20]
IMAGES = ["camera", "astronaut", "brick", "moon", "coins", "motorcycle_left"]

Build = Callable[[Any, float], Any]      # (source clip, strength) -> output clip


def make_video(frames: int, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(clean float64 (T, H, W), noisy uint8): the benchmark clip (module doc)."""
    photos = [np.asarray(Image.open(ROOT / "tests" / "data" / f"{n}.png").convert("L"),
                         np.float64) for n in IMAGES]
    mosaic = photo_mosaic(rows + 200, cols + 200, sigma=0.0, images=photos)
    clean, _ = motion_video(mosaic.astype(np.float64), frames=frames, size=(rows, cols), seed=3)
    noisy = np.clip(np.rint(add_noise(clean, SIGMA, seed=4)), 0, 255).astype(np.uint8)
    return clean, noisy


def run(build: Build, strength: float, noisy: np.ndarray, threads: int) -> tuple[float, Any]:
    """(seconds, output uint8 frames) of one pass over a fresh node of `build`."""
    node = build(cvs.clip_from_array(noisy), strength)
    out = np.empty_like(noisy)
    start = time.perf_counter()
    for i, frame in enumerate(cvs.frames(node, prefetch=threads)):
        out[i] = np.asarray(frame[0])
    return time.perf_counter() - start, out


def measure(build: Build, strength: float, noisy: np.ndarray, clean: np.ndarray,
            threads: int, repeats: int) -> dict[str, Any]:
    run(build, strength, noisy, threads)                       # warm-up
    times, out = [], None
    for _ in range(repeats):
        seconds, out = run(build, strength, noisy, threads)
        times.append(seconds)
    seconds = statistics.median(times)
    return {"fps": len(noisy) / seconds, "seconds": seconds, "psnr": psnr(out, clean)}


def best_strength(build: Build, grid: list[float], noisy: np.ndarray, clean: np.ndarray,
                  threads: int) -> tuple[float, float]:
    """(strength, PSNR) of the grid's best on these frames."""
    scores = [(psnr(run(build, s, noisy, threads)[1], clean), s) for s in grid]
    top, strength = max(scores)
    return strength, top


# ---- the methods ------------------------------------------------------------------------


def clpatch_methods(device: Any) -> list[tuple[str, str, Build]]:
    return [
        ("BM3D", "clpatch bm3d fast", lambda c, s: cvs.bm3d(c, s, device=device)),
        ("BM3D", "clpatch bm3d reference",
         lambda c, s: cvs.bm3d(c, s, preset="reference", device=device)),
        ("VBM3D", "clpatch vbm3d radius 4", lambda c, s: cvs.vbm3d(c, s, device=device)),
        ("VBM3D", "clpatch vbm3d radius 2",
         lambda c, s: cvs.vbm3d(c, s, radius=2, device=device)),
        ("NL-means", "clpatch nlmeans", lambda c, s: cvs.nlmeans(c, s, device=device)),
        ("NL-means temporal", "clpatch nlmeans temporal_radius 4",
         lambda c, s: cvs.nlmeans(c, s, temporal_radius=4, device=device)),
    ]


def bm3dcuda(block_step: int, bm_range: int, radius: int) -> Build:
    def build(clip: Any, sigma: float) -> Any:
        core = vs.core
        f = core.std.Expr(clip, "x 255 /", format=vs.GRAYS)
        args = {"sigma": sigma, "block_step": block_step, "bm_range": bm_range,
                "radius": radius}
        basic = core.bm3dcuda.BM3Dv2(f, **args)
        final = core.bm3dcuda.BM3Dv2(f, ref=basic, **args)
        return core.std.Expr(final, "x 255 *", format=vs.GRAY8)
    return build


def knlm(d: int, a: int, s: int = 4) -> Build:
    def build(clip: Any, h: float) -> Any:
        return vs.core.knlm.KNLMeansCL(clip, d=d, a=a, s=s, h=h, device_type="gpu")
    return build


PEERS = [
    ("BM3D", "BM3DCUDA block_step 4, bm_range 9", "bm3dcuda", bm3dcuda(4, 9, 0), BM3DCUDA_SIGMAS),
    ("BM3D", "BM3DCUDA block_step 3, bm_range 19", "bm3dcuda", bm3dcuda(3, 19, 0),
     BM3DCUDA_SIGMAS),
    ("VBM3D", "BM3DCUDA radius 2, block_step 4, bm_range 9", "bm3dcuda", bm3dcuda(4, 9, 2),
     BM3DCUDA_SIGMAS),
    ("NL-means", "KNLMeansCL d 0, a 10, s 4", "knlm", knlm(0, 10), KNLM_H),
    ("NL-means", "KNLMeansCL d 0, a 2, s 4", "knlm", knlm(0, 2), KNLM_H),
    ("NL-means temporal", "KNLMeansCL d 4, a 10, s 4", "knlm", knlm(4, 10), KNLM_H),
]


def load_peers() -> dict[str, str]:
    """Plug-in namespace -> "" when loaded, else why not."""
    status = {}
    for name, path in PEER_LIBRARIES.items():
        if hasattr(vs.core, name):
            status[name] = ""
        elif not path.is_file():
            status[name] = f"plug-in {path} missing"
        else:
            try:
                vs.core.std.LoadPlugin(str(path))
                status[name] = ""
            except vs.Error as exc:
                status[name] = f"{path.name} did not load: {exc}"
    return status


# ---- one size ----------------------------------------------------------------------------


def bench_size(size: str, args: argparse.Namespace,
               tuned: dict[str, float]) -> list[dict[str, Any]]:
    """The rows of one size; `tuned`: the peers' strengths chosen so far (at the first
    size), filled here when empty."""
    rows, cols = SIZES[size]
    clean, noisy = make_video(args.frames, rows, cols)
    rows_out: list[dict[str, Any]] = []
    for family, name, build in clpatch_methods(args.device):
        result = measure(build, SIGMA, noisy, clean, args.threads, args.repeats)
        rows_out.append({"family": family, "method": name, "strength": f"sigma {SIGMA:g}",
                         **result})
        print(f"{size} {name}: {result['fps']:.1f} fps, {result['psnr']:.2f} dB", flush=True)
    status = load_peers() if not args.tiny else {n: "--tiny: no peers" for n in PEER_LIBRARIES}
    tune = min(args.tune_frames, args.frames)
    for family, name, plugin, build, grid in PEERS:
        if status[plugin]:
            rows_out.append({"family": family, "method": name, "skipped": status[plugin]})
            print(f"{size} {name}: skipped ({status[plugin]})", flush=True)
            continue
        if name not in tuned:
            tuned[name] = best_strength(build, grid, noisy[:tune], clean[:tune], args.threads)[0]
        strength = tuned[name]
        label = "sigma" if plugin == "bm3dcuda" else "h"
        result = measure(build, strength, noisy, clean, args.threads, args.repeats)
        rows_out.append({"family": family, "method": name, "strength": f"{label} {strength:g}",
                         **result})
        print(f"{size} {name} ({label} {strength:g}): {result['fps']:.1f} fps, "
              f"{result['psnr']:.2f} dB", flush=True)
    return rows_out


#: The issue's targets: clpatch's fps over the peer's, at equal or better PSNR, per family.
TARGETS = {"BM3D": 1.5, "VBM3D": 3.0, "NL-means": 2.5, "NL-means temporal": 2.5}


def markdown(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    device = clpatch.select_device(args.device)
    lines = [f"# clpatch's VapourSynth filters against BM3DCUDA and KNLMeansCL ({time.strftime('%Y-%m-%d')})",
             "",
             f"`benchmarks/bench_vapoursynth.py {' '.join(sys.argv[1:])}`: one VapourSynth "
             f"process (R{vs.core.core_version.release_major}), core.num_threads "
             f"{args.threads}; clpatch on {device.name.strip()} ({device.platform.name.strip()}); "
             f"{args.frames} frames of 8-bit gray, σ {SIGMA:g} noise; fps from the NumPy clip "
             f"to NumPy frames (median of {args.repeats} after a warm-up); peers at their best "
             f"strength by PSNR on the first {min(args.tune_frames, args.frames)} frames "
             f"of the first size. "
             f"Python {platform.python_version()}, clpatch {clpatch.__version__}.", ""]
    for size, rows in results.items():
        lines += [f"## {size}", "", "| family | method | strength | fps | PSNR |",
                  "|---|---|---|---|---|"]
        for r in rows:
            if "skipped" in r:
                lines.append(f"| {r['family']} | {r['method']} | skipped: {r['skipped']} | | |")
            else:
                lines.append(f"| {r['family']} | {r['method']} | {r['strength']} | "
                             f"{r['fps']:.1f} | {r['psnr']:.2f} dB |")
        done = [r for r in rows if "skipped" not in r]
        lines += ["", "Every clpatch method against every peer of its family (the target holds "
                  "where clpatch's PSNR is at least the peer's and its fps the target's "
                  "multiple):", "",
                  "| clpatch | peer | fps ratio | PSNR difference | target |",
                  "|---|---|---|---|---|"]
        for a in (r for r in done if r["method"].startswith("clpatch")):
            for b in (r for r in done if r["family"] == a["family"]
                      and not r["method"].startswith("clpatch")):
                target = TARGETS[a["family"]]
                ratio, gain = a["fps"] / b["fps"], a["psnr"] - b["psnr"]
                verdict = ("met" if ratio >= target else "not met") if gain >= 0 else \
                    "peer's PSNR higher"
                lines.append(f"| {a['method']} | {b['method']} | {ratio:.2f}× | "
                             f"{gain:+.2f} dB | ≥ {target:g}×: {verdict} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", nargs="+", choices=["1080p", "4k"], default=["1080p"])
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--threads", type=int, default=16, help="core.num_threads")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tune-frames", type=int, default=8)
    parser.add_argument("--device", default=None, help="clpatch's device spec")
    parser.add_argument("--tiny", action="store_true",
                        help="a smoke test: 6 frames of 48x64, 2 threads, one repeat, no peers")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown here")
    args = parser.parse_args(argv)
    if args.tiny:
        args.size, args.frames, args.threads, args.repeats = ["tiny"], 6, 2, 1
    vs.core.num_threads = args.threads
    tuned: dict[str, float] = {}
    results = {size: bench_size(size, args, tuned) for size in args.size}
    text = markdown(results, args)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
