"""clpatch.dask on every GPU of one host against one GPU: wall time, scaling, bit-identity.

    python benchmarks/bench_dask_gpus.py [--size 16384] [--chunks 2048]
        [--video 64 2160 3840] [--video-chunks 64 540 960] [--workers N]
        [--threads 1] [--clusters WxT ...] [--repeats 1] [--methods bm3d nlmeans vbm3d]
        [--no-stealing] [--no-fuse] [--json FILE] [--markdown FILE]

Inputs: a size x size grayscale mosaic of the test photographs (tests/data) and a
T-frame H x W pan over such a mosaic (frame t shifted by (2t, 3t) pixels), both with
sigma 20 Gaussian noise (float32, not clipped). BM3D (fast preset) and NL-means
("fixed" aggregation) run on the image, VBM3D on the video, through `clpatch.dask`, on a
`distributed.LocalCluster` of one worker process and of N (default: one per GPU of the
host; on a one-GPU host 2, sharing it, which checks each worker's device choice and that
the result does not depend on the number of workers, not the scaling), each worker with
--threads threads, or on the clusters --clusters lists (workers x threads). Each worker
opens its own runtime (`clpatch.dask.worker`: LocalCluster numbers its workers and worker i
takes GPU i mod the number of GPUs; a worker of T threads runs up to T calls at once on
it, on lanes of one context) and reports its device and PCI bus id.

The video's default chunks keep its 64 frames in one chunk and cut its frames into 4 x 4:
VBM3D reads 16 frames and 60 pixels beyond a chunk, so 16-frame chunks of 1080 x 1920 made
pieces of 3.0 times the clip's voxels, these 1.4 times.

Times are wall clock from the lazy result to its chunks persisted on the workers (the
input is persisted there first), median of the repeats after a warm-up run that builds
the programs and plans on every worker; the time to build the lazy result (for BM3D of a
float image, its peak decides the halo and is reduced then) is reported apart. The tasks'
own time comes from Dask's task stream (compute durations of the clpatch piece tasks,
summed over the workers; the peak's and the halo cuts' tasks are reported apart); wall x
workers x threads minus it is the time the workers' threads spent outside the piece tasks
(the build, the peak, scheduling, halos from other workers, idling at the end). Results
are gathered after the timing and compared bit for bit with the first cluster's.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import distributed
import numpy as np
from bench_dask import SIGMA, mosaic

import clpatch.dask as cdask
from clpatch.core.devices import is_simulator, list_devices
from clpatch.dask.placement import chunk_holders


def gpu_count() -> int:
    import pyopencl as cl
    return sum(1 for e in list_devices()
               if e.device.type & cl.device_type.GPU and not is_simulator(e.device))


def pan(frames: int, rows: int, cols: int, seed: int = 1) -> np.ndarray:
    """frames x rows x cols: a noisy mosaic seen through a window moving (2, 3) px a frame."""
    side = max(rows + 2 * frames, cols + 3 * frames)
    clean = mosaic(side, seed=seed, noisy=False)
    rng = np.random.default_rng(seed + 1)
    out = np.empty((frames, rows, cols), np.float32)
    for t in range(frames):
        out[t] = clean[2 * t:2 * t + rows, 3 * t:3 * t + cols]
        out[t] += rng.normal(0, SIGMA, (rows, cols)).astype(np.float32)
    return out


def worker_device() -> dict[str, Any]:
    """Run as a task on one worker: the device its clpatch runtime opened."""
    from clpatch.dask.worker import device_spec, worker_runtime
    device = worker_runtime().device
    info = {"spec": device_spec(), "device": device.name.strip()}
    for attr in ("pci_domain_id_nv", "pci_bus_id_nv", "pci_slot_id_nv"):
        try:
            info[attr] = int(getattr(device, attr))
        except Exception:  # noqa: BLE001 - not an NVIDIA device
            pass
    if "pci_bus_id_nv" in info:
        info["pci"] = (f"{info.get('pci_domain_id_nv', 0):04x}:{info['pci_bus_id_nv']:02x}:"
                       f"{info.get('pci_slot_id_nv', 0):02x}")
    return info


def devices(client: distributed.Client) -> dict[str, Any]:
    workers = sorted(client.scheduler_info()["workers"])
    futures = {w: client.submit(worker_device, workers=[w], pure=False, allow_other_workers=False)
               for w in workers}
    return {w: f.result() for w, f in futures.items()}


def kind(key: Any) -> str:
    """The clpatch task kind of a task-stream key (`clpatch.dask.graph`'s names): the
    peak's, the halos' cuts, the pieces (the method on a sub-window), or Dask's own."""
    name = str(key[0] if isinstance(key, tuple) else key)
    if name.startswith("clpatch-peak"):
        return "peak"
    if name.startswith("clpatch-"):
        return "cut" if "-cut" in name else "piece"
    return "dask"


def stream_stats(records: list[dict[str, Any]], start: float,
                 holders: dict[Any, list[str]], input_name: str) -> dict[str, Any]:
    """Compute seconds and counts per task kind, transfer seconds, each worker's
    first start and last stop, every compute and transfer interval (start, stop, kind,
    action, worker), times in seconds after `start` (the wall clock's origin), and how many
    pieces ran on a worker holding their own chunk (`holders`: the input's chunk key ->
    workers; a piece's own chunk is the input's chunk of its index)."""
    compute: dict[str, float] = {}
    count: dict[str, int] = {}
    transfer_s, workers, local = 0.0, {}, 0
    for task in records:
        k = kind(task["key"])
        if k == "piece" and any(s["action"] == "compute" for s in task["startstops"]):
            local += task["worker"] in holders.get((input_name, *task["key"][1:]), ())
        for s in task["startstops"]:
            if s["action"] == "compute":
                compute[k] = compute.get(k, 0.0) + s["stop"] - s["start"]
                count[k] = count.get(k, 0) + 1
                w = workers.setdefault(task["worker"], [s["start"], s["stop"], 0.0])
                w[0], w[1] = min(w[0], s["start"]), max(w[1], s["stop"])
                w[2] += s["stop"] - s["start"]
            elif s["action"] == "transfer":
                transfer_s += s["stop"] - s["start"]
    timeline = sorted((round(s["start"] - start, 4), round(s["stop"] - start, 4), kind(task["key"]),
                       s["action"], task["worker"]) for task in records for s in task["startstops"])
    return dict(compute={k: round(v, 4) for k, v in compute.items()}, count=count,
                timeline=timeline, local_pieces=local,
                transfer_s=round(transfer_s, 4),
                workers={w: dict(first=round(v[0] - start, 4), last=round(v[1] - start, 4),
                                 busy=round(v[2], 4)) for w, v in sorted(workers.items())})


def incoming(client: distributed.Client) -> list[tuple[float, dict[Any, int]]]:
    """Every worker's log of data fetched from other workers: (start, {key: bytes})."""
    logs = client.run(lambda dask_worker: [(e["start"], dict(e["keys"]))
                                           for e in dask_worker.transfer_incoming_log])
    return [entry for entries in logs.values() for entry in entries]


def moved_mb(entries: list[tuple[float, dict[Any, int]]], since: float) -> dict[str, float]:
    """MB moved between workers since `since` (time.time()), by kind of the data: the
    input's chunks ("input"), the halo cuts, the peak, the pieces."""
    out: dict[str, float] = {}
    for start, keys in entries:
        if start >= since:
            for key, nbytes in keys.items():
                k = kind(key)
                k = "input" if k == "dask" else k
                out[k] = round(out.get(k, 0.0) + nbytes / 1e6, 1)
    return out


def run(client: distributed.Client, x: da.Array, chunked: Any,
        repeats: int) -> tuple[float, float, np.ndarray, dict[str, Any]]:
    """(median seconds to persisted, median summed piece-task seconds, the result, the
    median run's phases: the client's graph build, the task stream's statistics)."""
    times, busy, phases, out = [], [], [], None
    resident = len(client.who_has())         # the persisted inputs
    holders = chunk_holders(x)
    for k in range(repeats + 1):
        if out is not None:
            client.cancel(out)
            del out
            while len(client.who_has()) > resident:
                time.sleep(0.01)
        with distributed.get_task_stream(client) as stream:
            start, wall = time.perf_counter(), time.time()
            lazy = chunked(x)                # (BM3D may reduce the peak here: it sets the halo)
            built = time.perf_counter()
            out = client.persist(lazy)
            distributed.wait(out)
            seconds = time.perf_counter() - start
        if k:
            stats = stream_stats(stream.data, wall, holders, x.name)
            stats["moved_mb"] = moved_mb(incoming(client), wall)
            times.append(seconds)
            busy.append(stats["compute"].get("piece", 0.0))
            phases.append(dict(seconds=round(seconds, 4), build_s=round(built - start, 4), **stats))
    middle = sorted(phases, key=lambda p: p["seconds"])[len(phases) // 2]
    return statistics.median(times), statistics.median(busy), np.asarray(out.compute()), middle


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--chunks", type=int, default=2048)
    ap.add_argument("--video", type=int, nargs=3, default=[64, 2160, 3840])
    ap.add_argument("--video-chunks", type=int, nargs=3, default=[64, 540, 960])
    ap.add_argument("--workers", type=int, default=None,
                    help="workers of the second cluster (default: one per GPU, at least 2; "
                         "1: only the one-worker cluster)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per worker: calls each worker runs on its GPU at once "
                         "(clpatch.dask.worker's lanes)")
    ap.add_argument("--clusters", nargs="*", default=None, metavar="WxT",
                    help="the clusters to run, workers x threads each, the first the baseline "
                         "(default: 1xT and NxT, T = --threads, N = --workers)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--methods", nargs="*", default=["bm3d", "nlmeans", "vbm3d"])
    ap.add_argument("--no-stealing", action="store_true",
                    help="turn Dask's work stealing off (distributed.scheduler.work-stealing)")
    ap.add_argument("--no-fuse", action="store_true",
                    help="turn Dask's low-level fusion off (optimization.fuse.active), which "
                         "keeps clpatch.dask's annotations: pieces run where their chunk is")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    gpus = gpu_count()
    many = args.workers or max(gpus, 2)
    image = mosaic(args.size) if {"bm3d", "nlmeans"} & set(args.methods) else None
    video = pan(*args.video) if "vbm3d" in args.methods else None
    cases = {
        "bm3d": (image, args.chunks, lambda x: cdask.bm3d(x, SIGMA)),
        "nlmeans": (image, args.chunks, lambda x: cdask.nlmeans(x, SIGMA, aggregation="fixed")),
        "vbm3d": (video, tuple(args.video_chunks), lambda x: cdask.vbm3d(x, SIGMA)),
    }
    rows: list[dict[str, Any]] = []
    clusters: list[dict[str, Any]] = []
    seen: dict[str, Any] = {}
    shapes = [tuple(int(v) for v in c.lower().split("x")) for c in args.clusters] \
        if args.clusters else list(dict.fromkeys([(1, args.threads), (many, args.threads)]))
    for workers, threads in shapes:
        with dask.config.set({"distributed.scheduler.work-stealing": not args.no_stealing,
                              "optimization.fuse.active": False if args.no_fuse else None}), \
                distributed.LocalCluster(n_workers=workers, threads_per_worker=threads,
                                         processes=True, dashboard_address=None,
                                         silence_logs=50) as cluster, \
                distributed.Client(cluster) as client:
            where = devices(client)
            clusters.append({"workers": workers, "threads": threads, "devices": where})
            print(json.dumps({"workers": workers, "threads": threads, "devices": where}),
                  flush=True)
            inputs: dict[int, da.Array] = {}      # each input persisted once per cluster
            for name in args.methods:
                data, chunks, chunked = cases[name]
                if id(data) not in inputs:
                    inputs[id(data)] = client.persist(da.from_array(data, chunks=chunks))
                    distributed.wait(inputs[id(data)])
                x = inputs[id(data)]
                seconds, busy, out, phases = run(client, x, chunked, args.repeats)
                megapixels = data.size / 1e6
                row = dict(method=name, workers=workers, threads=threads, seconds=seconds,
                           mp_per_s=megapixels / seconds, task_seconds=busy,
                           outside_seconds=max(0.0, seconds * workers * threads - busy),
                           phases=phases,
                           devices=sorted({d["device"] + (f" ({d['pci']})" if "pci" in d else "")
                                           for d in where.values()}))
                if name in seen:
                    row["identical_to_1"] = bool(np.array_equal(out, seen[name]))
                    first = next(r for r in rows if r["method"] == name)
                    row["scaling"] = first["seconds"] / seconds
                else:
                    seen[name] = out
                rows.append(row)
                print(json.dumps(row), flush=True)
                del out
    info = dict(host=platform.node(), gpus=gpus, size=args.size, chunks=args.chunks,
                work_stealing=not args.no_stealing, pinned=args.no_fuse,
                video=args.video, video_chunks=args.video_chunks, repeats=args.repeats,
                clusters=clusters, rows=rows)
    if args.json:
        args.json.write_text(json.dumps(info, indent=1))
    placed = ("pinned to their own chunk (fusion off keeps the annotations)" if args.no_fuse
              else "placed by Dask (fusion on drops the annotations)")
    lines = [f"# clpatch.dask on {gpus} GPU(s) of one host",
             "", f"Image {args.size}x{args.size} in {args.chunks}² chunks; video "
             f"{'x'.join(map(str, args.video))} (frames x rows x cols) in "
             f"{'x'.join(map(str, args.video_chunks))} chunks; each worker runs as many calls "
             f"at once on its GPU as it has threads; Dask's work stealing "
             f"{'off' if args.no_stealing else 'on (its default)'}; pieces "
             f"{placed}. Wall clock from the lazy result "
             f"to its chunks persisted on the workers, median of {args.repeats} after a "
             "warm-up; scaling and bit-identity against the first cluster; task time: the "
             "clpatch tasks' compute time summed over the workers; outside: wall x workers x "
             "threads - task time.", "",
             "| method | workers x threads | devices | s | MP/s | scaling | task s | outside s | "
             "bit-identical to the first |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['workers']}x{r['threads']} | {'; '.join(r['devices'])} | "
                     f"{r['seconds']:.3f} | {r['mp_per_s']:.1f} | "
                     f"{r.get('scaling', 1.0):.2f} | {r['task_seconds']:.3f} | "
                     f"{r['outside_seconds']:.3f} | "
                     f"{'–' if 'identical_to_1' not in r else ('yes' if r['identical_to_1'] else 'NO')} |")
    lines += ["", "Where the time goes (the run of median wall time): the client's graph build "
              "(BM3D: with the peak's reduction), compute seconds of the peak's tasks, the halo "
              "cuts and the pieces summed over the workers, Dask's transfers between workers "
              "(their seconds in the task stream; the MB the workers' logs show fetched, by "
              "kind: the input's chunks, the halo cuts, the peak), the pieces that ran on a "
              "worker holding their own chunk, and each worker's first task start and last "
              "task stop after the run's start.", "",
              "| method | workers x threads | s | build s | peak s | cut s | piece s | transfers s (MB) | "
              "pieces on their chunk's worker | workers' first start / last stop s |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ph = r["phases"]
        c = ph["compute"]
        spans = "; ".join(f"{w['first']:.3f} / {w['last']:.3f}" for w in ph["workers"].values())
        moved = ", ".join(f"{k} {mb:.0f}" for k, mb in sorted(ph["moved_mb"].items())) or "none"
        lines.append(f"| {r['method']} | {r['workers']}x{r['threads']} | {ph['seconds']:.3f} | "
                     f"{ph['build_s']:.3f} | "
                     f"{c.get('peak', 0.0):.3f} | {c.get('cut', 0.0):.3f} | {c.get('piece', 0.0):.3f} | "
                     f"{ph['transfer_s']:.3f} ({moved}) | "
                     f"{ph['local_pieces']} / {ph['count'].get('piece', 0)} | {spans} |")
    lines += ["", "Each worker's runtime (opened by a task on that worker):", ""]
    for c in clusters:
        for i, (address, d) in enumerate(sorted(c["devices"].items())):
            lines.append(f"- {c['workers']}x{c['threads']}, worker {i} ({address}): {d['device']}"
                         + (f", PCI {d['pci']}" if "pci" in d else "")
                         + (f", device spec {d['spec']}" if d.get("spec") else ""))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
