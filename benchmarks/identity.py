"""The cross-vendor identity table: does every OpenCL implementation give the same results?

DESIGN.md promises the same results on every OpenCL implementation: bit-identical on
integer-valued inputs for the searches (windowed search, kNN, ANN, NNF and the VBM3D
search: positions and distances), and within a documented tolerance for the filters. This
script measures it. `run` computes every method on one device from fixed, seeded,
integer-valued inputs and saves the outputs; `compare` tells, for every method, output and
pair of devices, whether the outputs are bit-identical and how far apart they are.

    python benchmarks/identity.py run --device SPEC --out FILE.npz [--label NAME]
                                      [--methods PATTERN ...] [--inputs-from OTHER.npz]
                                      [--timeout 300] [--list]
    python benchmarks/identity.py compare A.npz B.npz [C.npz ...] [--markdown OUT.md]

e.g. PoCL against Intel's CPU runtime:

    python benchmarks/identity.py run --device Portable --out pocl.npz --label PoCL
    python benchmarks/identity.py run --device "Intel(R) OpenCL" --out intel.npz --label Intel
    python benchmarks/identity.py compare pocl.npz intel.npz --markdown table.md

`run`
    SPEC is anything `clpatch.Runtime` takes (a "P:D" index, a name substring); without
    --device, CLPATCH_DEVICE or clpatch's default device. Each method runs in a child
    process of its own, so that a crash of the OpenCL implementation (a segmentation fault
    in its compiler, say) is recorded for that method as `crash (signal SIGSEGV)` and the
    other methods still run; a Python exception is recorded as `error: ...`, a method
    running past --timeout seconds as `timeout`. --methods keeps the methods whose name
    contains one of the patterns (`--list` lists them). The inputs are made here from
    the test images (tests/data) and seeded noise, rounded to integers, and saved in the
    output; --inputs-from takes them from an earlier run's file instead (so that runs on
    machines whose NumPy draws other noise still compare like with like).
    Inputs: an 8-bit grayscale image (a 61x83 crop of camera.png with N(0, 20) noise), a
    16-bit one (a 59x77 crop times 257 with N(0, 20 * 257) noise), an 8-bit RGB image
    (53x67 of astronaut.png), an 8-bit grayscale and an RGB video of 5 frames (41x53 and
    33x41, a camera path of whole-pixel shifts), a stereo pair (41x57 crops of
    motorcycle_left/right.png, no noise) and two label images (4 grey levels of camera.png
    crops). sigma is 20 on the 0-255 scale, 20 * 257 for the 16-bit image.
    Methods (`--list`): the windowed search with its default variant and each variant
    forced, L1, 16-bit, colour and video; kNN with each engine (offsets, gemm, direct) in
    L2 and L1 between the stereo views, the self-search of the 16-bit image, Chamfer and
    symmetric Chamfer between the label images; the clustering ANN (step 2); the NNF between the
    stereo views; the VBM3D predictive search of every frame with the default and each
    forced variant; NL-means (defaults, patch 5 step 1, 16-bit, colour, video, ANN
    neighbours); BM3D (fast and reference presets, 16-bit, ANN neighbours), CBM3D,
    VBM3D (grayscale and colour); burst denoising; the noise estimate.
    The file holds `input/NAME` and `method/METHOD/OUTPUT` arrays and `meta.json` (a JSON
    string: platform, device, driver and OpenCL versions, the git revision of the checkout
    the imported clpatch comes from (PYTHONPATH=CHECKOUT runs another one) and clpatch's
    version, Python/NumPy/PyOpenCL versions, the command line, the date, the label, and per
    method its status, the rule it is held to, the configuration that ran and its time:
    the child's wall time, imports and program builds or cache loads included).

`compare`
    For every method's output (match positions, distances, denoised pixels) and every pair
    of files: `0 (identical)` when the arrays are equal bit for bit, else the largest
    |difference| and how many elements differ (`3.1e-05 (12 of 5063 differ)`), or what
    kept a side from running (`crash on Intel`). Each row states the rule it is held to and
    whether every pair meets it:
    - "bit-identical": search, kNN, ANN, NNF and the VBM3D search on integer-valued inputs
      (DESIGN.md, "Same results on every OpenCL implementation");
    - "tolerance": the filters, within DEVICE_TOL between two devices: NL-means (and burst
      NL-means) |d| <= 4e-3 + 2e-4 |x| on a 0-255 scale (times 257 for the 16-bit image),
      twice each device's tolerance against the float64 oracle; BM3D, CBM3D, VBM3D 0.01
      (see DEVICE_TOL for why); the noise estimate rtol 2e-4. A filter's row says whether it
      was in fact bit-identical.
    The inputs of the files must be equal (else the comparison says so and stops).
    Prints the markdown table (and writes it with --markdown), with each file's device,
    versions and command line.

Needs only clpatch's dependencies (NumPy, PyOpenCL, Pillow); runs without a display.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "tests" / "data"

SIGMA = 20.0                 # 0-255 scale
SCALE16 = 257.0              # 0-255 -> 0-65535
SIGMA16 = SIGMA * SCALE16

EXACT = "bit-identical"
TOLERANCE = "tolerance"

#: Absolute tolerance (0-255 scale) and relative part by which two devices' outputs of a
#: filter family may differ. NL-means and the noise estimate: twice each device's tolerance
#: against the float64 oracle (clpatch.selftest.denoise_families, the tests'). BM3D, CBM3D
#: and VBM3D: 0.01, not twice 1e-3: their second stage matches on the first stage's float
#: estimate, where one device's rounding (OpenCL leaves division, sqrt and exp a few ulp of
#: freedom, and lets compilers fuse multiply-adds) can reorder two near-equal candidates or
#: move one across the threshold tau of the group size; a patch then gets another group.
#: Measured NVIDIA H200 against PoCL and Intel's runtime: 0.0067 on 40 of 5063 pixels of
#: the reference preset (one such patch), at most 6.1e-5 elsewhere (2026-12-02).
DEVICE_TOL = {"nlmeans": (4e-3, 2e-4), "bm3d": (1e-2, 0.0), "sigma": (0.0, 2e-4)}


# ---- inputs -------------------------------------------------------------------------------


def _load(name: str, mode: str) -> np.ndarray:
    with Image.open(IMAGES / f"{name}.png") as image:
        return np.asarray(image.convert(mode), np.float64)


def _noisy(clean: np.ndarray, sigma: float, seed: int, top: int, dtype: Any) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(0.0, sigma, clean.shape)
    return np.clip(np.rint(clean + noise), 0, top).astype(dtype)


def _video(image: np.ndarray, rows: int, cols: int, y0: int, x0: int, seed: int) -> np.ndarray:
    """5 frames of a camera path of whole-pixel shifts over `image`, with N(0, 20) noise."""
    path = [(0, 0), (1, 2), (3, 3), (4, 5), (5, 8)]
    frames = np.stack([image[y0 + dy:y0 + dy + rows, x0 + dx:x0 + dx + cols] for dy, dx in path])
    return _noisy(frames, SIGMA, seed, 255, np.uint8)


def make_inputs() -> dict[str, np.ndarray]:
    """The fixed inputs, all integer-valued (uint8 or uint16)."""
    camera = _load("camera", "L")
    astronaut = _load("astronaut", "RGB")
    left, right = _load("motorcycle_left", "RGB"), _load("motorcycle_right", "RGB")
    labels = np.clip(camera // 64, 0, 3).astype(np.uint8)
    return {
        "gray8": _noisy(camera[200:261, 150:233], SIGMA, 1, 255, np.uint8),
        "gray16": _noisy(camera[300:359, 300:377] * SCALE16, SIGMA16, 2, 65535, np.uint16),
        "colour8": _noisy(astronaut[40:93, 90:157], SIGMA, 3, 255, np.uint8),
        "video8": _video(camera, 41, 53, 100, 220, 4),
        "video_colour8": _video(astronaut, 33, 41, 120, 60, 5),
        "left": left[60:101, 80:137].astype(np.uint8),
        "right": right[60:101, 80:137].astype(np.uint8),
        "labels_a": labels[50:81, 260:297],
        "labels_b": labels[53:84, 262:299],
    }


# ---- methods ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    name: str
    rule: str                   # EXACT or TOLERANCE
    family: str                 # the tolerance family (DEVICE_TOL key), or the engine
    scale: float                # the data's range / 255 (tolerances scale with it)
    run: Callable[[dict[str, np.ndarray], Any], tuple[dict[str, Any], str]]


def _describe(config: Any) -> str:
    if config is None:
        return ""
    describe = getattr(config, "describe", None)
    text = describe() if callable(describe) else str(config)
    reason = getattr(config, "reason", None)
    return f"{text} - {reason}" if reason else text


def _matches(m: Any) -> tuple[dict[str, Any], str]:
    return {"positions": m.positions, "distances": m.distances}, _describe(m.config)


def _explain(operation: str, runtime: Any, **params: Any) -> str:
    import clpatch

    try:
        return str(clpatch.explain(operation, runtime=runtime, **params)).split("\nnot tuned")[0]
    except Exception as error:  # noqa: BLE001 - the description is informative only
        return f"(explain failed: {error})"


def _search(image: str, **kwargs: Any):
    def run(inputs, rt):
        import clpatch

        return _matches(clpatch.search_patches(inputs[image], runtime=rt, **kwargs))
    return run


def _knn(query: str, reference: str | None, **kwargs: Any):
    def run(inputs, rt):
        import clpatch

        ref = None if reference is None else inputs[reference]
        return _matches(clpatch.knn(inputs[query], ref, runtime=rt, **kwargs))
    return run


def _ann(inputs, rt):
    import clpatch

    return _matches(clpatch.ann_search(inputs["gray8"], patch_size=8, k=16, step=2, runtime=rt))


def _nnf(inputs, rt):
    import clpatch

    return _matches(clpatch.nnf(inputs["left"], inputs["right"], patch_size=8, k=4, runtime=rt))


def _vbm3d_search(variant: str | None):
    def run(inputs, rt):
        from clpatch import VBM3DPlan
        from clpatch.denoise.vbm3d_params import video_stage_params

        video = inputs["video8"]
        p1, p2, stages, radius = video_stage_params()
        plan = VBM3DPlan(rt, video.shape[1], video.shape[2], 1, (p1, p2), stages, radius,
                         variant=variant)
        outputs = {}
        for stage in (1, 2):
            found = [plan.search(video, t, stage=stage) for t in range(len(video))]
            outputs[f"stage{stage}_positions"] = np.stack([f[0] for f in found])
            outputs[f"stage{stage}_distances"] = np.stack([f[1] for f in found])
        return outputs, f"{plan.variant} ({plan.variant_reason})"
    return run


def _nlmeans(image: str, sigma: float, **kwargs: Any):
    def run(inputs, rt):
        import clpatch

        out = clpatch.nlmeans(inputs[image], sigma, runtime=rt, **kwargs)
        channels = inputs[image].shape[2] if inputs[image].ndim == 3 else 1
        explained = {k: v for k, v in kwargs.items() if k in ("patch_size", "step", "search")}
        return {"denoised": out}, _explain("nlmeans", rt, channels=channels, **explained)
    return run


def _nlmeans_video(inputs, rt):
    import clpatch

    out = clpatch.nlmeans_video(inputs["video8"], SIGMA, temporal_window=2, runtime=rt)
    return {"denoised": out}, "temporal_window 2, patch 16, step 8"


def _bm3d(image: str, sigma: float, **kwargs: Any):
    def run(inputs, rt):
        import clpatch

        out = clpatch.bm3d(inputs[image], sigma, runtime=rt, **kwargs)
        channels = inputs[image].shape[2] if inputs[image].ndim == 3 else 1
        explained = {k: v for k, v in kwargs.items() if k in ("preset", "search")}
        return {"denoised": out}, _explain("bm3d", rt, channels=channels, **explained)
    return run


def _vbm3d(video: str):
    def run(inputs, rt):
        import clpatch

        out = clpatch.vbm3d(inputs[video], SIGMA, runtime=rt)
        return {"denoised": out}, _explain("vbm3d", rt).splitlines()[1]
    return run


def _burst(inputs, rt):
    import clpatch

    return {"denoised": clpatch.burst_denoise(inputs["video8"], SIGMA, runtime=rt)}, "nlmeans"


def _sigma(inputs, rt):
    import clpatch

    estimate = clpatch.estimate_sigma(inputs["colour8"], runtime=rt)
    return {"sigma": np.asarray(estimate, np.float64)}, ""


def _methods() -> list[Method]:
    s8 = dict(patch_size=8, step=4, window=21, n=16)
    variants = [Method(f"search/gray8/{v}", EXACT, "search", 1.0, _search("gray8", variant=v, **s8))
                for v in ("naive", "convolution", "square", "column")]
    knn_engines = [Method(f"knn/stereo/{engine}/{metric}", EXACT, "knn", 1.0,
                          _knn("left", "right", patch_size=8, k=8, step=2, metric=metric,
                               method=engine))
                   for engine, metric in (("offsets", "l2"), ("offsets", "l1"), ("gemm", "l2"),
                                          ("direct", "l2"), ("direct", "l1"))]
    vbm3d_searches = [Method(f"vbm3d_search/video8/{v or 'default'}", EXACT, "vbm3d_search", 1.0,
                             _vbm3d_search(v)) for v in (None, "naive", "window", "patch")]
    return [
        Method("search/gray8/default", EXACT, "search", 1.0, _search("gray8", **s8)),
        *variants,
        Method("search/gray8/l1", EXACT, "search", 1.0,
               _search("gray8", patch_size=5, step=3, window=15, n=8, metric="l1")),
        Method("search/gray8/step1", EXACT, "search", 1.0,
               _search("gray8", patch_size=5, step=1, window=11, n=8)),
        Method("search/gray16/default", EXACT, "search", SCALE16, _search("gray16", **s8)),
        Method("search/colour8/default", EXACT, "search", 1.0, _search("colour8", **s8)),
        Method("search/video8/default", EXACT, "search", 1.0,
               _search("video8", patch_size=6, step=3, window=9, n=8, temporal_window=2)),
        Method("knn/stereo/default/l2", EXACT, "knn", 1.0,
               _knn("left", "right", patch_size=8, k=8, step=2)),
        *knn_engines,
        Method("knn/gray16/self", EXACT, "knn", SCALE16,
               _knn("gray16", None, patch_size=6, k=8, step=3)),
        Method("knn/labels/chamfer", EXACT, "knn", 1.0,
               _knn("labels_a", "labels_b", patch_size=5, k=8, step=2, metric="chamfer")),
        Method("knn/labels/chamfer_sym", EXACT, "knn", 1.0,
               _knn("labels_a", "labels_b", patch_size=5, k=8, step=2, metric="chamfer_sym")),
        Method("ann/gray8", EXACT, "ann", 1.0, _ann),
        Method("nnf/stereo", EXACT, "nnf", 1.0, _nnf),
        *vbm3d_searches,
        Method("nlmeans/gray8/default", TOLERANCE, "nlmeans", 1.0, _nlmeans("gray8", SIGMA)),
        Method("nlmeans/gray8/p5_step1", TOLERANCE, "nlmeans", 1.0,
               _nlmeans("gray8", SIGMA, patch_size=5, step=1)),
        Method("nlmeans/gray16/default", TOLERANCE, "nlmeans", SCALE16,
               _nlmeans("gray16", SIGMA16)),
        Method("nlmeans/colour8/default", TOLERANCE, "nlmeans", 1.0, _nlmeans("colour8", SIGMA)),
        Method("nlmeans/gray8/search_ann", TOLERANCE, "nlmeans", 1.0,
               _nlmeans("gray8", SIGMA, search="ann")),
        Method("nlmeans_video/video8", TOLERANCE, "nlmeans", 1.0, _nlmeans_video),
        Method("bm3d/gray8/fast", TOLERANCE, "bm3d", 1.0, _bm3d("gray8", SIGMA)),
        Method("bm3d/gray8/reference", TOLERANCE, "bm3d", 1.0,
               _bm3d("gray8", SIGMA, preset="reference")),
        Method("bm3d/gray16/fast", TOLERANCE, "bm3d", SCALE16, _bm3d("gray16", SIGMA16)),
        Method("bm3d/gray8/search_ann", TOLERANCE, "bm3d", 1.0, _bm3d("gray8", SIGMA, search="ann")),
        Method("cbm3d/colour8/fast", TOLERANCE, "bm3d", 1.0, _bm3d("colour8", SIGMA)),
        Method("cbm3d/colour8/reference", TOLERANCE, "bm3d", 1.0,
               _bm3d("colour8", SIGMA, preset="reference")),
        Method("vbm3d/video8", TOLERANCE, "bm3d", 1.0, _vbm3d("video8")),
        Method("vbm3d/video_colour8", TOLERANCE, "bm3d", 1.0, _vbm3d("video_colour8")),
        Method("burst/video8/nlmeans", TOLERANCE, "nlmeans", 1.0, _burst),
        Method("estimate_sigma/colour8", TOLERANCE, "sigma", 1.0, _sigma),
    ]


METHODS = {m.name: m for m in _methods()}


def select_methods(patterns: list[str] | None) -> list[Method]:
    if not patterns:
        return list(METHODS.values())
    chosen = [m for m in METHODS.values()
              if any(p in m.name or fnmatch.fnmatchcase(m.name, p) for p in patterns)]
    if not chosen:
        raise SystemExit(f"no method matches {patterns}; see --list")
    return chosen


# ---- run ----------------------------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _revision(root: Path) -> str:
    """The git revision of the checkout at `root`, and how many tracked files differ."""
    rev = _git(root, "rev-parse", "HEAD")
    if not rev:
        return "unknown (not a git checkout)"
    changed = [line for line in _git(root, "status", "--porcelain", "--untracked-files=no")
               .splitlines() if line.strip()]
    return rev + (f" (+{len(changed)} uncommitted changes)" if changed else "")


def _short_label(platform_name: str) -> str:
    for known, short in (("Portable", "PoCL"), ("Intel", "Intel"), ("NVIDIA", "NVIDIA"),
                         ("AMD", "AMD"), ("Oclgrind", "Oclgrind")):
        if known.lower() in platform_name.lower():
            return short
    return platform_name


def _device_info(spec: str | None) -> dict[str, Any]:
    """Child: the device, its platform and versions (no kernel is built)."""
    import pyopencl as cl

    import clpatch

    rt = clpatch.Runtime(spec)
    dev = rt.device
    return {
        "platform": dev.platform.name.strip(),
        "platform_version": dev.platform.version.strip(),
        "device": dev.name.strip(),
        "device_version": dev.version.strip(),
        "driver": dev.driver_version.strip(),
        "profile": getattr(rt.profile, "family", str(rt.profile)),
        "clpatch_version": clpatch.__version__,
        "clpatch_path": str(Path(clpatch.__file__).resolve().parent),
        "clpatch_revision": _revision(Path(clpatch.__file__).resolve().parents[1]),
        "pyopencl": cl.VERSION_TEXT,
    }


def _child(args: argparse.Namespace) -> int:
    """One method (or the device's description) in this process; results to args.result."""
    if args.method == "_info":
        Path(args.result).write_text(json.dumps(_device_info(args.device)))
        return 0
    import clpatch

    method = METHODS[args.method]
    with np.load(args.inputs, allow_pickle=False) as data:
        inputs = {key: data[key] for key in data.files}
    rt = clpatch.Runtime(args.device)
    start = time.perf_counter()
    outputs, config = method.run(inputs, rt)
    seconds = time.perf_counter() - start
    config = config.replace(f" on {rt.device.name.strip()}", "")
    arrays = {}
    for key, value in outputs.items():
        arrays[key] = np.asarray(value)
    info = {"config": config, "call_seconds": seconds}
    np.savez(args.result, **arrays, **{"_info": np.array(json.dumps(info))})
    return 0


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if not line.startswith(("File ", "^", "~")) and ("Error" in line or "Exception" in line):
            return line[:300]
    return lines[-1][:300] if lines else "no message"


def _spawn(method: str, device: str | None, inputs: Path, result: Path,
           timeout: float) -> tuple[str, float, str]:
    """Run one method in a child process: (status, wall seconds, stderr tail)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "_child", "--method", method,
           "--inputs", str(inputs), "--result", str(result)]
    if device is not None:
        cmd += ["--device", device]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as expired:
        err = expired.stderr.decode(errors="replace") if isinstance(expired.stderr, bytes) \
            else (expired.stderr or "")
        return f"timeout (> {timeout:g} s)", time.perf_counter() - start, err[-2000:]
    seconds = time.perf_counter() - start
    if done.returncode < 0:
        return f"crash (signal {_signal_name(-done.returncode)})", seconds, done.stderr[-2000:]
    if done.returncode != 0:
        return f"error: {_last_error(done.stderr)}", seconds, done.stderr[-2000:]
    if not result.is_file():
        return "error: the child wrote no result", seconds, done.stderr[-2000:]
    return "ok", seconds, done.stderr[-2000:]


def run(args: argparse.Namespace) -> int:
    methods = select_methods(args.methods)
    if args.list:
        for m in methods:
            print(f"{m.name:32s} {m.rule}")
        return 0
    out = Path(args.out)
    started = datetime.datetime.now(datetime.timezone.utc)
    if args.inputs_from:
        with np.load(args.inputs_from, allow_pickle=False) as data:
            inputs = {k[len("input/"):]: data[k] for k in data.files if k.startswith("input/")}
    else:
        inputs = make_inputs()
    meta: dict[str, Any] = {
        "label": args.label,
        "device_spec": args.device,
        "date": started.isoformat(timespec="seconds"),
        "argv": args.argv,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "host": platform.platform(),
        "methods": {},
    }
    arrays: dict[str, np.ndarray] = {f"input/{k}": v for k, v in inputs.items()}
    total = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="clpatch-identity-") as tmp:
        tmp_dir = Path(tmp)
        inputs_file = tmp_dir / "inputs.npz"
        np.savez(inputs_file, **inputs)
        info_file = tmp_dir / "info.json"
        status, _, err = _spawn("_info", args.device, inputs_file, info_file, args.timeout)
        if status != "ok":
            print(f"cannot open the device: {status}\n{err}", file=sys.stderr)
            return 2
        meta.update(json.loads(info_file.read_text()))
        meta["label"] = args.label or _short_label(meta["platform"])
        print(f"{meta['label']}: {meta['platform']} | {meta['device']} | driver {meta['driver']}",
              flush=True)
        for m in methods:
            result = tmp_dir / f"{len(meta['methods'])}.npz"
            status, seconds, err = _spawn(m.name, args.device, inputs_file, result, args.timeout)
            entry: dict[str, Any] = {"status": status, "rule": m.rule, "family": m.family,
                                     "scale": m.scale, "seconds": round(seconds, 3),
                                     "outputs": []}
            if status == "ok":
                with np.load(result, allow_pickle=False) as data:
                    info = json.loads(str(data["_info"]))
                    for key in data.files:
                        if key != "_info":
                            arrays[f"method/{m.name}/{key}"] = data[key]
                            entry["outputs"].append(key)
                entry["config"] = info["config"]
                entry["call_seconds"] = round(info["call_seconds"], 3)
            else:
                entry["stderr_tail"] = err[-1000:]
            meta["methods"][m.name] = entry
            print(f"  {m.name:32s} {seconds:7.1f} s  {status:.100s}", flush=True)
    meta["total_seconds"] = round(time.perf_counter() - total, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **arrays, **{"meta.json": np.array(json.dumps(meta))})
    print(f"wrote {out} ({meta['total_seconds']} s)")
    return 0


# ---- compare ------------------------------------------------------------------------------


def load(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta.json"]))
        arrays = {key: data[key] for key in data.files if key != "meta.json"}
    return meta, arrays


def difference(a: np.ndarray, b: np.ndarray) -> tuple[bool, float, int]:
    """(bit-identical, max |a - b| where they differ, number of differing elements).
    Equal infinities (missing matches) count as equal; NaN against anything as inf."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False, float("inf"), max(a.size, b.size)
    identical = a.tobytes() == b.tobytes()
    if identical:
        return True, 0.0, 0
    x, y = a.astype(np.float64), b.astype(np.float64)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    with np.errstate(invalid="ignore"):           # inf - inf where both are missing
        diff = np.where(same, 0.0, np.abs(x - y))
    diff[np.isnan(diff)] = np.inf
    differing = int((~same).sum())
    return False, float(diff.max()) if differing else 0.0, differing


def _bound(method: dict[str, Any], reference: np.ndarray) -> np.ndarray | None:
    """The tolerance between two devices, element-wise (None: exact rule)."""
    tol = DEVICE_TOL.get(method["family"])
    if method["rule"] != TOLERANCE or tol is None:
        return None
    atol, rtol = tol
    return atol * method["scale"] + rtol * np.abs(reference.astype(np.float64))


def _fmt(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.2g}"


def _rule_text(method: dict[str, Any]) -> str:
    if method["rule"] == EXACT:
        return "bit-identical"
    atol, rtol = DEVICE_TOL[method["family"]]
    scale = method["scale"]
    parts = []
    if atol:
        parts.append(f"{_fmt(atol * scale)}")
    if rtol:
        parts.append(f"{_fmt(rtol)}·\\|x\\|")
    return "\\|Δ\\| ≤ " + " + ".join(parts)


def compare(files: list[str], markdown: str | None, command: str = "") -> str:
    loaded = [load(f) for f in files]
    labels = [meta["label"] for meta, _ in loaded]
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):           # unique column names
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            labels[i] = f"{label} ({seen[label]})"
    lines = ["# Cross-vendor identity table", ""]
    command = command or " ".join(["identity.py compare", *files])
    lines += [f"Made by `{command}` on {datetime.date.today().isoformat()}.", ""]
    lines += ["| label | platform | device | driver | clpatch | Python, NumPy, PyOpenCL | date | run time |",
              "|---|---|---|---|---|---|---|---|"]
    for label, (meta, _) in zip(labels, loaded, strict=True):
        lines.append(f"| {label} | {meta['platform']} ({meta['platform_version']}) | "
                     f"{meta['device']} | {meta['driver']} | {meta['clpatch_version']}, "
                     f"{meta['clpatch_revision']} | {meta['python']}, {meta['numpy']}, "
                     f"{meta['pyopencl']} | {meta['date']} | {meta['total_seconds']} s |")
    lines += ["", "Command lines:", ""]
    lines += [f"- {label}: `{meta['argv']}`"
              for label, (meta, _) in zip(labels, loaded, strict=True)]
    inputs = [{k: v for k, v in arrays.items() if k.startswith("input/")} for _, arrays in loaded]
    for label, other in zip(labels[1:], inputs[1:], strict=True):
        if other.keys() != inputs[0].keys() or any(not np.array_equal(other[k], inputs[0][k])
                                                   for k in other):
            lines += ["", f"**The inputs of {labels[0]} and {label} differ: no comparison "
                      "(run with --inputs-from to share them).**"]
            return _emit(lines, markdown)
    lines += ["", f"Inputs ({', '.join(f'{k[6:]} {v.dtype}{list(v.shape)}' for k, v in inputs[0].items())})"
              " are equal in every file.", ""]
    pairs = list(combinations(range(len(loaded)), 2))
    header = ["method", "output", "rule", *(f"{labels[i]} vs {labels[j]}" for i, j in pairs),
              "verdict"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    names: list[str] = []
    for meta, _ in loaded:
        names += [n for n in meta["methods"] if n not in names]
    summary: dict[str, list[str]] = {"identical": [], "within": [], "broken": [], "untested": []}
    for name in names:
        entries = [meta["methods"].get(name) for meta, _ in loaded]
        method = next(e for e in entries if e is not None)
        outputs: list[str] = []
        for e in entries:
            if e is not None:
                outputs += [o for o in e["outputs"] if o not in outputs]
        if not outputs:
            outputs = ["(all)"]
        method_state = set()
        for output in outputs:
            cells, states = [], []
            for i, j in pairs:
                cell, state = _cell(name, output, method, (labels[i], entries[i], loaded[i][1]),
                                    (labels[j], entries[j], loaded[j][1]))
                cells.append(cell)
                states.append(state)
            verdict = _verdict(method["rule"], states)
            method_state.update(states)
            lines.append(f"| {name} | {output} | {_rule_text(method)} | " + " | ".join(cells)
                         + f" | {verdict} |")
        if "broken" in method_state:
            summary["broken"].append(name)
        elif "untested" in method_state:
            summary["untested"].append(name)
        elif method_state == {"identical"}:
            summary["identical"].append(name)
        else:
            summary["within"].append(name)
    lines += ["", "Cells: `0 (identical)` = equal bit for bit; else max \\|difference\\| and "
              "the number of differing elements; positions are in pixels (frames for t), "
              "distances in the input's squared units, denoised pixels in the input's units.",
              "Rules: search, kNN, ANN, NNF and the VBM3D search must be bit-identical on "
              "integer-valued inputs (DESIGN.md); the filters within a tolerance between two "
              "devices: NL-means 4e-3 + 2e-4·\\|x\\| (twice the self-test's tolerance "
              "against the float64 oracle), BM3D/CBM3D/VBM3D 0.01 on a 0-255 scale (×257 for "
              "16-bit: stage 2 matches on a float estimate, where a device's rounding can give "
              "a patch another group), noise estimate rtol 2e-4.", ""]
    lines += ["Summary:", ""]
    lines += [f"- bit-identical on every pair: {', '.join(summary['identical']) or 'none'}",
              f"- different but within the rule: {', '.join(summary['within']) or 'none'}",
              f"- breaking the rule: {', '.join(summary['broken']) or 'none'}",
              f"- not compared on every pair (crash, error, missing): "
              f"{', '.join(summary['untested']) or 'none'}", ""]
    lines += ["Methods that did not run to the end:", ""]
    for label, (meta, _) in zip(labels, loaded, strict=True):
        lines += [f"- {label}: {name}: {e['status']}" for name, e in meta["methods"].items()
                  if e["status"] != "ok"]
    if lines[-1] == "":
        lines.append("- none")
    lines += ["", "Configurations that ran, where they differ between devices:", ""]
    for name in names:
        configs = {label: meta["methods"].get(name, {}).get("config")
                   for label, (meta, _) in zip(labels, loaded, strict=True)}
        known = {k: v for k, v in configs.items() if v is not None}
        if len(set(known.values())) > 1:
            lines.append(f"- {name}: " + "; ".join(f"{k}: {' / '.join(v.splitlines())}"
                                                  for k, v in known.items()))
    if lines[-1] == "":
        lines.append("- none")
    lines += ["", "Times (s; a child process per method: imports, program builds or cache loads "
              "and the call):", ""]
    lines += ["| method | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for name in names:
        cells = []
        for meta, _ in loaded:
            e = meta["methods"].get(name)
            cells.append("" if e is None else f"{e['seconds']:.1f}"
                         + ("" if e["status"] == "ok" else f" ({e['status'].split(' ')[0]})"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return _emit(lines, markdown)


def _side_problem(label: str, entry: dict[str, Any] | None) -> str | None:
    if entry is None:
        return f"not run on {label}"
    status = entry["status"]
    if status == "ok":
        return None
    if status.startswith("crash"):
        return f"crash on {label} ({status[7:-1]})"
    if status.startswith("timeout"):
        return f"timeout on {label} ({status[9:-1]})"
    return f"error on {label}"


def _cell(name: str, output: str, method: dict[str, Any], a: tuple, b: tuple) -> tuple[str, str]:
    (la, ea, arrays_a), (lb, eb, arrays_b) = a, b
    problems = [p for p in (_side_problem(la, ea), _side_problem(lb, eb)) if p]
    if problems:
        return ", ".join(problems), "untested"
    key = f"method/{name}/{output}"
    if key not in arrays_a or key not in arrays_b:
        return "output missing", "untested"
    x, y = arrays_a[key], arrays_b[key]
    identical, worst, count = difference(x, y)
    if identical:
        return "0 (identical)", "identical"
    if x.shape != y.shape or x.dtype != y.dtype:
        return f"shapes differ ({x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)})", "broken"
    text = f"{worst:.2g} ({count} of {x.size} differ)"
    bound = _bound(method, x)
    if bound is None:
        return text, "broken"
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    within = bool(np.all((np.abs(xf - yf) <= bound) | (xf == yf)))
    return (text, "within") if within else (text + " **over**", "broken")


def _verdict(rule: str, states: list[str]) -> str:
    tested = [s for s in states if s != "untested"]
    if any(s == "broken" for s in states):
        return "**broken**"
    if not tested:
        return "not compared"
    held = "bit-identical" if all(s == "identical" for s in tested) else "within tolerance"
    if rule == EXACT:
        held = "holds"
    return held + (" where it ran" if len(tested) < len(states) else "")


def _emit(lines: list[str], markdown: str | None) -> str:
    text = "\n".join(lines) + "\n"
    print(text)
    if markdown:
        Path(markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(markdown).write_text(text)
    return text


# ---- command line -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="compute every method on one device and save the outputs")
    p_run.add_argument("--device", default=None, help="P:D index or name substring "
                       "(default: CLPATCH_DEVICE or clpatch's default device)")
    p_run.add_argument("--out", help="the .npz file to write")
    p_run.add_argument("--label", default=None, help="column name in the table "
                       "(default: the platform's name)")
    p_run.add_argument("--methods", nargs="+", default=None, metavar="PATTERN",
                       help="only the methods whose name contains a pattern (or matches a glob)")
    p_run.add_argument("--inputs-from", default=None, metavar="NPZ",
                       help="take the inputs from an earlier run's file")
    p_run.add_argument("--timeout", type=float, default=300.0,
                       help="seconds a method may run (default 300)")
    p_run.add_argument("--list", action="store_true", help="list the methods and exit")
    p_cmp = sub.add_parser("compare", help="the identity table of two or more runs")
    p_cmp.add_argument("files", nargs="+", help="files written by `run`")
    p_cmp.add_argument("--markdown", default=None, help="also write the table here")
    p_child = sub.add_parser("_child")       # internal: one method in a child process
    p_child.add_argument("--method", required=True)
    p_child.add_argument("--device", default=None)
    p_child.add_argument("--inputs", required=True)
    p_child.add_argument("--result", required=True)
    args = parser.parse_args(argv)
    args.argv = "python benchmarks/identity.py " + shlex.join(
        sys.argv[1:] if argv is None else argv)
    if args.command == "run":
        if not args.list and not args.out:
            parser.error("run needs --out FILE.npz")
        return run(args)
    if args.command == "compare":
        if len(args.files) < 2:
            parser.error("compare needs two files or more")
        compare(args.files, args.markdown, args.argv)
        return 0
    try:
        return _child(args)
    except Exception:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
