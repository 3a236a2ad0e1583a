"""Soak (issue 43): many calls of mixed methods and shapes on one runtime from several
threads; no failure, every result equal to the single-threaded one, no memory growth beyond
the plan cache's bound.

    python benchmarks/soak.py [--device SPEC] [--calls 10000] [--threads 4] [--seed 0]
                              [--lock none|plan|all] [--sample-every 250] [--warmup-calls N]
                              [--host-slack-mib 64] [--markdown FILE] [--json FILE]
                              [--machine TEXT] [--stall-seconds 300] [--max-seconds S]

One `clpatch.Runtime` (`--device`, else `CLPATCH_DEVICE`, else the best GPU, as every
benchmark) is shared by `--threads` threads that take call indices 0 … N−1 from one counter.
Call i runs case `schedule[i]`, drawn once from `--seed` with each case's weight, so the work
of a call depends on its index alone. A case is a method (nlmeans, bm3d fast and, rarely,
reference, vbm3d on 5-frame clips, search_patches, knn, ann_search, nnf, burst_denoise) with
its parameters, a shape (24×24 … 96×80, grey or colour), an input of that shape (noisy photo
crops: 8-bit, or integer-valued float32, and for BM3D also 0–1 floats, whose data range a
device call measures) and the kind of array (NumPy, or a pyopencl array on the runtime's
queue, uploaded once and shared read-only by the threads); 228 cases.

Reference results: every case is called once, single-threaded, before the threads start (this
also compiles every program and makes every plan once). Each threaded call's result (NumPy;
device results read back) must equal its case's reference bit for bit: every array of a
Matches and every other field. The filters are deterministic where the device has 64-bit
atomics (their default aggregation is then fixed-point or "buffers": docs/nlmeans.md,
docs/bm3d.md); on a device without them (`runtime.profile.int64_atomics` False) their default
is "cas", float adds in any order, and their results are held to |difference| ≤ 0.01 (0–255
scale) instead; the matchers are always compared bit for bit.

`--lock`: "none" (the issue's test: calls overlap freely), "plan" (calls of one method on one
input shape, which may share a plan of the runtime's cache, never overlap; others do), "all"
(the calls take turns: the threads share the runtime, one call at a time). A call that raises
is a failure; the soak goes on. Every call is marked when a call of its plan group (method
and shape) ran at the same time, so the report says how many failures and mismatches came
from calls that may have shared a plan with another running call.

Memory, sampled every `--sample-every` calls (after a garbage collection), and at the end:
- host: VmRSS of /proc/self/status (on a CPU device the device's buffers are host memory too);
- plans: the bytes of the OpenCL buffers reachable from the plans in the runtime's plan cache
  (their BufferPools, tables, nested matchers), counted once each; and the plans per engine;
- allocator: `runtime.allocator` (a pyopencl MemoryPool) — the results handed to callers and
  the free blocks it keeps for reuse (`managed_bytes`);
- on an NVIDIA GPU, nvidia-smi's memory.used of the device (the driver's view, all processes).
Bounds (each checked at every sample):
- plans per engine ≤ the engine's `PLANS_KEPT` (the plan cache keeps that many per engine:
  `clpatch.core.plans.PlanCache.plan`); their bytes ≤ the plan bound: per engine the sum of
  the `PLANS_KEPT` largest plans of that engine, each plan's size as measured after its
  reference call. The cache may hold no more than this, whatever the order of the calls;
- allocator ≤ threads × what it held after the reference phase (every case once, one call
  at a time: for each block size, the most blocks one call needs), plus one call's worth
  for the sampling thread;
- RSS at the end ≤ RSS after warm-up (the reference phase and the first `--warmup-calls`
  threaded calls) + `--host-slack-mib`, plus the two device bounds on a CPU device.
Exit status 1 on a failure, a mismatch, a stall (no call finished for `--stall-seconds`), a
bound exceeded or fewer calls than asked (`--max-seconds` reached); the report says which.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import gc
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

import clpatch
from clpatch.core.buffers import BufferPool
from clpatch.core.runtime import Runtime
from clpatch.denoise import bm3d as bm3d_module
from clpatch.denoise import burst as burst_module
from clpatch.denoise import nlmeans as nlmeans_module
from clpatch.denoise import noise_level as noise_module
from clpatch.denoise import vbm3d as vbm3d_module
from clpatch.match.ann import search as ann_module
from clpatch.match.knn import search as knn_module
from clpatch.match.nnf import search as nnf_module
from clpatch.match.window import search as window_module
from clpatch.tune.timing import photo_mosaic

SIGMA = 20.0
#: Plans the cache keeps per engine (the first item of a plan's key): each engine's PLANS_KEPT,
#: and the single-plan entries of bm3d's peak probe and the kNN helpers.
PLANS_KEPT = {"nlmeans": nlmeans_module.PLANS_KEPT, "bm3d": bm3d_module.PLANS_KEPT,
              "bm3d-peak": 1, "vbm3d": vbm3d_module.PLANS_KEPT,
              "noise_level": noise_module.PLANS_KEPT, "burst": burst_module.PLANS_KEPT,
              "knn": knn_module.PLANS_KEPT, "knn-column": 1, "knn-vectors": 1,
              "search": window_module.PLANS_KEPT, "nnf": nnf_module.PLANS_KEPT,
              "ann": ann_module.PLANS_KEPT}
#: Largest |difference| (0–255 scale) allowed for a filter without 64-bit atomics.
CAS_TOLERANCE = 0.01
MIB = 1 << 20


# ---- the cases -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    """One distinct call: method, parameters, input shape (frames, rows, cols, channels; frames
    0 for an image), input (`make_input`'s source), kind of array ("numpy" or "device")."""

    method: str
    params: tuple[tuple[str, Any], ...]
    shape: tuple[int, int, int, int]
    source: int
    kind: str
    weight: float

    @property
    def name(self) -> str:
        f, h, w, c = self.shape
        size = (f"{f}x" if f else "") + f"{h}x{w}" + ("x3" if c == 3 else "")
        extra = ",".join(f"{k}={v}" for k, v in self.params)
        return f"{self.method}[{extra}] {size} in{self.source} {self.kind}"

    @property
    def plan_group(self) -> tuple[Any, ...]:
        """The calls that may share a plan of the runtime's cache: one method on one input
        shape (a plan's key holds more, the parameters and mostly the kind of array, but
        VBM3D's does not hold the kind, and BM3D's holds its stages, not the data range)."""
        return ("knn" if self.method == "knn2" else self.method, self.shape)

    @property
    def sigma(self) -> float:
        """The filters' sigma in the input's units (source 2 is on a 0–1 scale)."""
        return SIGMA / 255.0 if self.source == 2 else SIGMA

    def inputs(self) -> tuple[tuple[int, int, int, int, int], ...]:
        """Keys of its input arrays: (frames, rows, cols, channels, source)."""
        key = self.shape + (self.source,)
        if self.method in ("nnf", "knn2"):
            return (key, self.shape + (self.source + 10,))
        return (key,)


def catalogue() -> list[Case]:
    """Every case: (method, parameters, shapes, sources, weight) × NumPy and device arrays.
    Weights favour the cheap calls so that 10,000 calls take minutes on a 2-core CPU."""
    grey = [(24, 24), (32, 48), (48, 40), (64, 64), (96, 80)]
    small = [(24, 24), (32, 48), (48, 40)]
    both = (0, 1)
    rows: list[tuple[str, dict[str, Any], list[tuple[int, int, int, int]], tuple[int, ...],
                     float]] = [
        ("nlmeans", {}, [(0, h, w, c) for h, w in grey for c in (1, 3)], both, 1.0),
        ("bm3d", {"preset": "fast"}, [(0, h, w, c) for h, w in grey for c in (1, 3)], both,
         0.6),
        # 0–1 floats: bm3d measures a device image's peak to find its data range
        ("bm3d", {"preset": "fast"}, [(0, 32, 48, 1), (0, 64, 64, 3)], (2,), 0.4),
        ("bm3d", {"preset": "reference"}, [(0, 48, 40, 1)], both, 0.1),
        ("vbm3d", {}, [(5, 32, 48, 1), (5, 24, 24, 3)], both, 0.25),
        ("search", {"patch_size": 8, "step": 4, "window": 21, "k": 16},
         [(0, h, w, c) for h, w in grey for c in (1, 3)], both, 1.0),
        ("search", {"patch_size": 5, "step": 2, "window": 11, "k": 8, "metric": "l1"},
         [(0, 48, 40, 1), (0, 64, 64, 3)], both, 1.0),
        ("knn", {"patch_size": 5, "k": 8, "step": 2},
         [(0, h, w, c) for h, w in small for c in (1, 3)], both, 0.6),
        ("knn2", {"patch_size": 4, "k": 4, "step": 3, "metric": "l1"},
         [(0, 32, 48, 1), (0, 48, 40, 3)], both, 0.5),
        ("ann", {"patch_size": 8, "k": 16}, [(0, h, w, c) for h, w in grey[1:] for c in (1, 3)],
         both, 0.8),
        ("nnf", {"patch_size": 6, "k": 2, "pca_dims": 8}, [(0, 48, 40, 1), (0, 64, 64, 3)],
         both, 0.4),
        ("burst", {"method": "nlmeans"}, [(4, 32, 48, 1), (4, 48, 40, 3)], both, 0.25),
        ("burst", {"method": "bm3d"}, [(4, 48, 40, 1)], both, 0.2),
    ]
    cases = []
    for method, params, shapes, sources, weight in rows:
        for shape in shapes:
            for source in sources:
                for kind in ("numpy", "device"):
                    cases.append(Case(method, tuple(sorted(params.items())), shape, source,
                                      kind, weight))
    return cases


def make_input(key: tuple[int, int, int, int, int]) -> np.ndarray:
    """A noisy photo crop, clipped and rounded to 0–255 (frames: shifted crops, a camera
    shake). Source 0 (and 10): uint8; 1 (and 11): float32 of integer values; 2: source 0's
    values / 255 as float32 (a 0–1 image)."""
    frames, rows, cols, channels, source = key
    seed = 0 if source == 2 else source
    count = max(frames, 1)
    base = np.stack([photo_mosaic(rows + count, cols + count, seed=100 * seed + c)
                     for c in range(channels)], -1)
    views = [base[t:t + rows, (2 * t) % count:(2 * t) % count + cols] for t in range(count)]
    array = np.clip(np.rint(np.stack(views) if frames else views[0]), 0, 255)
    if channels == 1:
        array = array[..., 0]
    if source == 2:
        return np.ascontiguousarray(array.astype(np.float32) / np.float32(255.0))
    return np.ascontiguousarray(array.astype(np.uint8 if seed % 2 == 0 else np.float32))


def run_case(case: Case, data: tuple[Any, ...], rt: Runtime) -> Any:
    """The case's call on its inputs `data` (NumPy or device arrays)."""
    p = dict(case.params)
    x = data[0]
    if case.method == "nlmeans":
        return clpatch.nlmeans(x, case.sigma, runtime=rt)
    if case.method == "bm3d":
        return clpatch.bm3d(x, case.sigma, runtime=rt, **p)
    if case.method == "vbm3d":
        return clpatch.vbm3d(x, case.sigma, runtime=rt)
    if case.method == "search":
        return clpatch.search_patches(x, runtime=rt, **p)
    if case.method == "knn":
        return clpatch.knn(x, runtime=rt, **p)
    if case.method == "knn2":
        return clpatch.knn(x, data[1], runtime=rt, **p)
    if case.method == "ann":
        return clpatch.ann_search(x, runtime=rt, **p)
    if case.method == "nnf":
        return clpatch.nnf(x, data[1], runtime=rt, **p)
    if case.method == "burst":
        return clpatch.burst_denoise(x, case.sigma, runtime=rt, **p)
    raise ValueError(f"unknown method {case.method!r}")


def to_host(result: Any) -> dict[str, Any]:
    """A result as {field: NumPy array or plain value}: an array, or a Matches' fields (its
    kernel configuration by its repr)."""
    def host(a: Any) -> Any:
        return a.get() if isinstance(a, cla.Array) else a

    if dataclasses.is_dataclass(result):
        return {f.name: (host(getattr(result, f.name)) if f.name != "config"
                         else repr(getattr(result, f.name)))
                for f in dataclasses.fields(result)}
    return {"image": host(result)}


def difference(found: dict[str, Any], expected: dict[str, Any], tolerance: float) -> str | None:
    """None when `found` equals `expected` (arrays bit for bit, or within `tolerance` when it
    is not 0), else what differs."""
    for name, want in expected.items():
        got = found.get(name)
        if isinstance(want, np.ndarray):
            if not isinstance(got, np.ndarray) or got.shape != want.shape \
                    or got.dtype != want.dtype:
                return f"{name}: {getattr(got, 'shape', type(got))} vs {want.shape}"
            if np.array_equal(got, want, equal_nan=True):
                continue
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            worst = float(np.nanmax(diff)) if np.isfinite(diff).any() else float("nan")
            if tolerance and worst <= tolerance:
                continue
            return (f"{name}: {int(np.count_nonzero(diff))} of {want.size} differ, "
                    f"largest |difference| {worst:.4g}")
        elif got != want:
            return f"{name}: {got!r} vs {want!r}"
    return None


# ---- memory ----------------------------------------------------------------------------------

def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def gpu_used_mib() -> int | None:
    """nvidia-smi's memory.used of the first GPU (None without nvidia-smi)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20)
        return int(out.stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def buffers_of(root: Any) -> dict[int, int]:
    """{int_ptr: bytes} of the OpenCL memory objects reachable from `root` through clpatch
    objects and containers (a runtime is not entered; the allocator's pooled buffers are
    counted with the allocator, not here)."""
    found: dict[int, int] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, np.ndarray,
                                                              Runtime, cl.Context,
                                                              cl.CommandQueue)):
            continue
        seen.add(id(obj))
        if isinstance(obj, cl.MemoryObject):
            found[obj.int_ptr] = int(obj.get_info(cl.mem_info.SIZE))
        elif isinstance(obj, cla.Array):
            stack.append(obj.base_data)
        elif isinstance(obj, BufferPool):
            stack.extend(list(obj._buffers.values()))
        elif isinstance(obj, dict):
            stack.extend(list(obj.values()))
        elif isinstance(obj, (list, tuple, set, frozenset, deque)):
            stack.extend(list(obj))
        elif type(obj).__module__.startswith("clpatch") and hasattr(obj, "__dict__"):
            stack.extend(list(vars(obj).values()))
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            stack.extend(getattr(obj, f.name) for f in dataclasses.fields(obj))
    return found


def plan_bytes(plan: Any) -> int:
    for _ in range(5):
        try:
            return sum(buffers_of(plan).values())
        except RuntimeError:        # a thread changed a plan's dict while it was read
            continue
    return sum(buffers_of(plan).values())


def held(rt: Runtime) -> dict[str, Any]:
    """What the runtime holds now: plans per engine, their buffers' bytes (each buffer once)."""
    cache = rt.plan_cache()
    with cache.lock:
        items = list(cache.items())
    per_engine: Counter[str] = Counter(str(key[0]) for key, _ in items)
    everything: dict[int, int] = {}
    for _, plan in items:
        for _ in range(5):
            try:
                everything.update(buffers_of(plan))
                break
            except RuntimeError:
                continue
    pool = rt.allocator
    return {"plans": dict(per_engine), "plan_count": len(items),
            "plan_bytes": sum(everything.values()), "plan_buffers": len(everything),
            "allocator_bytes": int(pool.managed_bytes), "allocator_active": int(pool.active_bytes),
            "allocator_blocks": int(pool.held_blocks + pool.active_blocks)}


def sample(rt: Runtime, done: int, start: float) -> dict[str, Any]:
    gc.collect()
    row = {"calls": done, "seconds": round(time.perf_counter() - start, 2), "rss": rss_bytes()}
    row.update(held(rt))
    gpu = gpu_used_mib()
    if gpu is not None:
        row["gpu_used_mib"] = gpu
    return row


def plan_bound(sizes: dict[tuple[Any, ...], int]) -> tuple[int, dict[str, int]]:
    """The most bytes the plan cache can hold: per engine, the sum of its PLANS_KEPT largest
    plans (engines not in PLANS_KEPT: all their plans)."""
    by_engine: dict[str, list[int]] = {}
    for key, size in sizes.items():
        by_engine.setdefault(str(key[0]), []).append(size)
    bounds = {e: sum(sorted(v, reverse=True)[:PLANS_KEPT.get(e, len(v))])
              for e, v in by_engine.items()}
    return sum(bounds.values()), bounds


# ---- the run ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Soak:
    rt: Runtime
    cases: list[Case]
    data: dict[Case, tuple[Any, ...]]
    references: dict[Case, dict[str, Any]]
    tolerance: dict[Case, float]
    schedule: np.ndarray
    lock: str
    counter: Any = dataclasses.field(default_factory=itertools.count)
    done: int = 0
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    mismatches: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    per_method: Counter = dataclasses.field(default_factory=Counter)
    seconds: Counter = dataclasses.field(default_factory=Counter)
    state: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    turn: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    groups: dict[Any, threading.Lock] = dataclasses.field(default_factory=dict)
    running: dict[Any, set[int]] = dataclasses.field(default_factory=dict)
    overlapped: set[int] = dataclasses.field(default_factory=set)
    deadline: float = float("inf")

    @contextlib.contextmanager
    def track(self, case: Case, i: int) -> Iterator[None]:
        """Call i runs: marked (with the others) when another call of its plan group runs."""
        with self.state:
            others = self.running.setdefault(case.plan_group, set())
            if others:
                self.overlapped.update(others | {i})
            others.add(i)
        try:
            yield
        finally:
            with self.state:
                self.running[case.plan_group].discard(i)

    def guard(self, case: Case) -> Any:
        if self.lock == "all":
            return self.turn
        if self.lock == "plan":
            with self.state:
                return self.groups.setdefault(case.plan_group, threading.Lock())
        return _NoLock()

    def worker(self) -> None:
        n = len(self.schedule)
        while True:
            with self.state:
                i = next(self.counter)
            if i >= n or time.perf_counter() > self.deadline:
                return
            case = self.cases[int(self.schedule[i])]
            start = time.perf_counter()
            try:
                with self.guard(case), self.track(case, i):
                    found = to_host(run_case(case, self.data[case], self.rt))
                why = difference(found, self.references[case], self.tolerance[case])
                del found
                error = None
            except Exception as exc:  # noqa: BLE001 - every exception is a failure to report
                why, error = None, exc
            elapsed = time.perf_counter() - start
            with self.state:
                self.done += 1
                self.per_method[case.method] += 1
                self.seconds[case.method] += elapsed
                if error is not None:
                    self.failures.append({
                        "call": i, "case": case.name, "thread": threading.current_thread().name,
                        "same_plan_overlap": i in self.overlapped,
                        "error": f"{type(error).__name__}: {error}",
                        "traceback": "".join(traceback.format_exception(error))[-1500:]})
                elif why is not None:
                    self.mismatches.append({"call": i, "case": case.name, "what": why,
                                            "same_plan_overlap": i in self.overlapped})


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def references(rt: Runtime, cases: list[Case], data: dict[Case, tuple[Any, ...]],
               ) -> tuple[dict[Case, dict[str, Any]], dict[tuple[Any, ...], int], dict[Case, float],
                          list[dict[str, Any]]]:
    """Every case once, single-threaded: its result, the size of every plan the cache holds
    after it (largest seen per key), its wall clock (first call: builds and plans included)."""
    results: dict[Case, dict[str, Any]] = {}
    sizes: dict[tuple[Any, ...], int] = {}
    ms: dict[Case, float] = {}
    failed = []
    for case in cases:
        start = time.perf_counter()
        try:
            results[case] = to_host(run_case(case, data[case], rt))
        except Exception as exc:  # noqa: BLE001 - reported, the case is left out
            failed.append({"case": case.name, "error": f"{type(exc).__name__}: {exc}",
                           "traceback": "".join(traceback.format_exception(exc))[-1500:]})
            continue
        ms[case] = (time.perf_counter() - start) * 1e3
        cache = rt.plan_cache()
        with cache.lock:
            items = list(cache.items())
        for key, plan in items:
            sizes[key] = max(sizes.get(key, 0), plan_bytes(plan))
    return results, sizes, ms, failed


def dump_threads() -> str:
    frames = sys._current_frames()
    out = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident)
        if frame is not None:
            out.append(f"--- {thread.name}\n" + "".join(traceback.format_stack(frame)[-8:]))
    return "\n".join(out)


def run(args: argparse.Namespace) -> dict[str, Any]:
    rt = Runtime(args.device)
    exact = bool(rt.profile.int64_atomics)
    cases = catalogue()
    keys = {k for c in cases for k in c.inputs()}
    host_inputs = {k: make_input(k) for k in sorted(keys)}
    device_inputs = {k: cla.to_device(rt.queue, a) for k, a in host_inputs.items()}
    data = {c: tuple((device_inputs if c.kind == "device" else host_inputs)[k]
                     for k in c.inputs()) for c in cases}
    rt.queue.finish()
    filters = {"nlmeans", "bm3d", "vbm3d", "burst"}
    tolerance = {c: (0.0 if exact or c.method not in filters else CAS_TOLERANCE * c.sigma / SIGMA)
                 for c in cases}
    print(f"# soak on {rt.device.name.strip()} ({rt.device.platform.name.strip()}): "
          f"{len(cases)} cases, {args.calls} calls, {args.threads} threads, lock {args.lock}",
          flush=True)
    start = time.perf_counter()
    rss_start = rss_bytes()
    refs, sizes, ref_ms, ref_failed = references(rt, cases, data)
    ref_seconds = time.perf_counter() - start
    print(f"reference phase: {len(refs)} of {len(cases)} cases in {ref_seconds:.1f} s "
          f"({len(ref_failed)} failed)", flush=True)
    alive = [c for c in cases if c in refs]
    weights = np.array([c.weight for c in alive])
    schedule = np.random.default_rng(args.seed).choice(len(alive), size=args.calls,
                                                       p=weights / weights.sum())
    gc.collect()
    after_refs = sample(rt, 0, start)
    bound_plans, bound_engines = plan_bound(sizes)
    one_call = after_refs["allocator_bytes"]
    bound_alloc = (args.threads + 1) * one_call

    soak = Soak(rt, alive, data, refs, tolerance, schedule, args.lock)
    threads = [threading.Thread(target=soak.worker, name=f"soak-{t}", daemon=True)
               for t in range(args.threads)]
    samples = [after_refs]
    warm: dict[str, Any] | None = None
    warmup = args.warmup_calls if args.warmup_calls is not None else args.calls // 10
    t0 = time.perf_counter()
    if args.max_seconds:
        soak.deadline = t0 + args.max_seconds
    for thread in threads:
        thread.start()
    next_sample, last_done, last_change, stalled = args.sample_every, 0, time.perf_counter(), None
    while any(t.is_alive() for t in threads):
        time.sleep(0.05)
        done = soak.done
        now = time.perf_counter()
        if done != last_done:
            last_done, last_change = done, now
        elif now - last_change > args.stall_seconds:
            stalled = dump_threads()
            break
        if warm is None and done >= warmup:
            warm = sample(rt, done, start)
            samples.append(warm)
            next_sample = done + args.sample_every
        elif done >= next_sample:
            samples.append(sample(rt, done, start))
            next_sample = done + args.sample_every
            last = samples[-1]
            print(f"{done:6d} calls {now - t0:7.1f} s  RSS {last['rss'] / MIB:7.1f} MiB  plans "
                  f"{last['plan_count']:3d} {last['plan_bytes'] / MIB:7.2f} MiB  allocator "
                  f"{last['allocator_bytes'] / MIB:6.2f} MiB  failures {len(soak.failures)}  "
                  f"mismatches {len(soak.mismatches)}", flush=True)
    wall = time.perf_counter() - t0
    end = sample(rt, soak.done, start)
    samples.append(end)
    warm = warm or end

    checks = []
    peak_plans = max(s["plan_bytes"] for s in samples)
    peak_alloc = max(s["allocator_bytes"] for s in samples)
    over_keep = sorted({(e, n) for s in samples for e, n in s["plans"].items()
                        if n > PLANS_KEPT.get(e, n)})
    host_bound = args.host_slack_mib * MIB
    if rt.device.type & cl.device_type.CPU:
        host_bound += bound_plans + bound_alloc
    rss_growth = end["rss"] - warm["rss"]
    checks.append(("failures", not soak.failures and not ref_failed,
                   f"{len(soak.failures)} in the threaded calls, {len(ref_failed)} in the "
                   "reference phase"))
    checks.append(("mismatches", not soak.mismatches, f"{len(soak.mismatches)}"))
    checks.append(("finished", stalled is None and soak.done == args.calls,
                   f"{soak.done} of {args.calls} calls" + (" (stalled)" if stalled else (
                       " (--max-seconds reached)" if soak.done < args.calls else ""))))
    checks.append(("plans per engine ≤ PLANS_KEPT", not over_keep,
                   ", ".join(f"{e}: {n}" for e, n in over_keep) or "yes"))
    checks.append(("plan bytes ≤ plan bound", peak_plans <= bound_plans,
                   f"peak {peak_plans / MIB:.2f} MiB, bound {bound_plans / MIB:.2f} MiB"))
    checks.append(("allocator ≤ its bound", peak_alloc <= bound_alloc,
                   f"peak {peak_alloc / MIB:.2f} MiB, bound {bound_alloc / MIB:.2f} MiB"))
    checks.append(("RSS growth after warm-up ≤ bound", rss_growth <= host_bound,
                   f"{rss_growth / MIB:+.1f} MiB, bound {host_bound / MIB:.1f} MiB"))
    post = [s for s in samples if s["calls"] >= warm["calls"]]
    slope = 0.0
    if len(post) >= 3:
        x = np.array([s["calls"] for s in post], float)
        y = np.array([s["rss"] for s in post], float)
        if np.ptp(x) > 0:
            slope = float(np.polyfit(x, y, 1)[0])
    return {
        "device": rt.device.name.strip(), "platform": rt.device.platform.name.strip(),
        "driver": rt.device.driver_version, "host": platform.node(), "machine": args.machine,
        "cpu_count": os.cpu_count(), "int64_atomics": exact, "python": platform.python_version(),
        "calls": args.calls, "done": soak.done, "threads": args.threads, "lock": args.lock,
        "seed": args.seed, "cases": len(cases), "reference_cases": len(refs),
        "reference_seconds": ref_seconds, "wall_seconds": wall,
        "calls_per_second": soak.done / wall if wall else 0.0,
        "per_method": dict(soak.per_method),
        "ms_per_call": {m: 1e3 * soak.seconds[m] / soak.per_method[m] for m in soak.per_method},
        "reference_ms": {c.name: round(v, 2) for c, v in ref_ms.items()},
        "failures": len(soak.failures), "mismatches": len(soak.mismatches),
        "overlapped_calls": len(soak.overlapped),
        "overlapped_failures": sum(f["same_plan_overlap"] for f in soak.failures),
        "overlapped_mismatches": sum(m["same_plan_overlap"] for m in soak.mismatches),
        "failure_examples": soak.failures[:10], "reference_failures": ref_failed,
        "mismatch_examples": soak.mismatches[:20],
        "mismatch_cases": dict(Counter(m["case"] for m in soak.mismatches).most_common(40)),
        "mismatch_methods": dict(Counter(m["case"].split("[")[0] for m in soak.mismatches)),
        "failure_kinds": dict(Counter(f["error"][:120] for f in soak.failures).most_common(10)),
        "rss_start": rss_start, "rss_warm": warm["rss"], "rss_end": end["rss"],
        "rss_peak": max(s["rss"] for s in samples), "rss_slope_bytes_per_call": slope,
        "warm_calls": warm["calls"], "samples": samples,
        "plan_bound": bound_plans, "plan_bound_engines": bound_engines,
        "plan_sizes": {repr(k): v for k, v in sizes.items()},
        "allocator_after_references": one_call, "allocator_bound": bound_alloc,
        "host_bound": host_bound, "plans_kept": PLANS_KEPT,
        "checks": [{"name": n, "ok": bool(ok), "detail": d} for n, ok, d in checks],
        "stall": stalled,
    }


# ---- the report ------------------------------------------------------------------------------

def mib(x: float) -> str:
    return f"{x / MIB:.1f} MiB"


def markdown(r: dict[str, Any]) -> str:
    ok = all(c["ok"] for c in r["checks"])
    end, warm = r["samples"][-1], next(s for s in r["samples"] if s["calls"] == r["warm_calls"])
    lines = [
        f"# Soak: {r['done']} calls from {r['threads']} threads on one runtime "
        f"({r['device']})", "",
        f"`python benchmarks/soak.py --calls {r['calls']} --threads {r['threads']} "
        f"--lock {r['lock']} --seed {r['seed']}`; {r['machine'] or r['host']}; "
        f"{r['platform']}, driver {r['driver']}; Python {r['python']}; "
        f"64-bit atomics: {'yes (filters compared bit for bit)' if r['int64_atomics'] else 'no'}.",
        "", f"**Result: {'pass' if ok else 'FAIL'}.**", "",
        "| check | ok | detail |", "|---|---|---|"]
    lines += [f"| {c['name']} | {'yes' if c['ok'] else 'NO'} | {c['detail']} |"
              for c in r["checks"]]
    lines += [
        "", "## Figures", "",
        "| figure | value |", "|---|---|",
        f"| calls (done / asked) | {r['done']} / {r['calls']} |",
        f"| threads, lock | {r['threads']}, {r['lock']} |",
        f"| distinct cases (references) | {r['reference_cases']} of {r['cases']} |",
        f"| reference phase (single-threaded, builds included) | {r['reference_seconds']:.1f} s |",
        f"| threaded wall time | {r['wall_seconds']:.1f} s |",
        f"| calls/s | {r['calls_per_second']:.1f} |",
        f"| failures | {r['failures']} |",
        f"| mismatches | {r['mismatches']} |",
        f"| calls that overlapped a call of their plan group (same method and input shape) | "
        f"{r['overlapped_calls']}, among them {r['overlapped_failures']} "
        f"failures and {r['overlapped_mismatches']} mismatches |",
        f"| RSS: start / after references / warm-up ({r['warm_calls']} calls) / end / peak | "
        f"{mib(r['rss_start'])} / {mib(r['samples'][0]['rss'])} / {mib(r['rss_warm'])} / "
        f"{mib(r['rss_end'])} / {mib(r['rss_peak'])} |",
        f"| RSS trend after warm-up (least squares) | {r['rss_slope_bytes_per_call']:.0f} "
        "bytes per call |",
        f"| plans held: warm-up / end / bound | {warm['plan_count']} ({mib(warm['plan_bytes'])}) "
        f"/ {end['plan_count']} ({mib(end['plan_bytes'])}) / {mib(r['plan_bound'])} |",
        f"| allocator: warm-up / end / bound | {mib(warm['allocator_bytes'])} / "
        f"{mib(end['allocator_bytes'])} / {mib(r['allocator_bound'])} |",
    ]
    if "gpu_used_mib" in end:
        lines.append(f"| nvidia-smi memory.used: after references / warm-up / end | "
                     f"{r['samples'][0].get('gpu_used_mib')} / {warm.get('gpu_used_mib')} / "
                     f"{end['gpu_used_mib']} MiB |")
    lines += ["", "Plans held at the end, per engine (bound: PLANS_KEPT): " + ", ".join(
        f"{e} {n}/{r['plans_kept'].get(e, '?')}" for e, n in sorted(end["plans"].items())) + ".",
        "Plan bound per engine (sum of its PLANS_KEPT largest plans): " + ", ".join(
            f"{e} {mib(b)}" for e, b in sorted(r["plan_bound_engines"].items())) + ".",
        "", "Calls per method (mean wall clock of a threaded call, ms): " + ", ".join(
            f"{m} {n} ({r['ms_per_call'][m]:.0f})" for m, n in sorted(r["per_method"].items()))
        + "."]
    if r["mismatches"]:
        lines += ["", "## Mismatches", "", "Per method: " + ", ".join(
            f"{m} {n}" for m, n in sorted(r["mismatch_methods"].items())) + ".", "",
            "First ones:", ""]
        lines += [f"- call {m['call']}: {m['case']}: {m['what']}"
                  + ("" if m["same_plan_overlap"] else " (no call of its plan group overlapped it)")
                  for m in r["mismatch_examples"]]
    if r["failures"] or r["reference_failures"]:
        lines += ["", "## Failures", ""]
        lines += [f"- reference {f['case']}: {f['error']}" for f in r["reference_failures"]]
        lines += [f"- {n}× {e}" for e, n in r["failure_kinds"].items()]
        if r["failure_examples"]:
            lines += ["", "First traceback:", "", "```", r["failure_examples"][0]["traceback"],
                      "```"]
    if r["stall"]:
        lines += ["", "## Stall", "", "```", r["stall"], "```"]
    lines += ["", "## Samples", "", "| calls | s | RSS | plans | plan bytes | allocator |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {s['calls']} | {s['seconds']} | {mib(s['rss'])} | {s['plan_count']} | "
              f"{mib(s['plan_bytes'])} | {mib(s['allocator_bytes'])} |" for s in r["samples"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lock", choices=("none", "plan", "all"), default="none")
    ap.add_argument("--sample-every", type=int, default=250)
    ap.add_argument("--warmup-calls", type=int, default=None,
                    help="threaded calls before the warm-up sample (default: a tenth)")
    ap.add_argument("--host-slack-mib", type=float, default=64.0)
    ap.add_argument("--stall-seconds", type=float, default=300.0)
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="take no new call after this many seconds of threaded calls")
    ap.add_argument("--machine", default="", help="a line saying where it ran")
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    # A crash (a race corrupting memory: SIGSEGV, glibc's abort) prints every thread's stack.
    faulthandler.enable(all_threads=True)
    result = run(args)
    text = markdown(result)
    print(text, flush=True)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    ok = all(c["ok"] for c in result["checks"])
    if result["stall"]:
        sys.stdout.flush()
        os._exit(1)              # the stalled threads cannot be joined
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
