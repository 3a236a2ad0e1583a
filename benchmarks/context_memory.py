"""Device memory left behind by runtimes: for each kind of call, six fresh runtimes each make
one call and are dropped; nvidia-smi's memory.used after a garbage collection, and how many
of their contexts Python still holds. (H100 results: benchmarks/results/h100_session6.md.)

    python benchmarks/context_memory.py          # on a machine with nvidia-smi, device 0:0
"""
import gc, subprocess, weakref, numpy as np, clpatch, pyopencl as cl, pyopencl.array as cla
def mem():
    gc.collect()
    return int(subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.split()[0])
img = np.random.default_rng(0).random((64, 64)).astype(np.float32)
print("start", mem(), flush=True)
def trial(name, fn, n=6):
    refs = []
    for i in range(n):
        rt = clpatch.Runtime("0:0")
        fn(rt)
        rt.queue.finish()
        refs.append(weakref.ref(rt.context))
        del rt
    gc.collect()
    print(f"{name:24s} mem {mem():6d} MiB, contexts alive {sum(r() is not None for r in refs)}/{n}", flush=True)
trial("empty", lambda rt: None)
trial("search", lambda rt: clpatch.search_patches(img, 4, 2, 7, 4, runtime=rt))
trial("nlmeans", lambda rt: clpatch.nlmeans(img, 10, runtime=rt))
trial("device nlmeans", lambda rt: clpatch.nlmeans(cla.to_device(rt.queue, img), 10, runtime=rt).get())
trial("bm3d", lambda rt: clpatch.bm3d(img, 10, runtime=rt))
trial("sigma", lambda rt: clpatch.estimate_sigma(img, runtime=rt))
trial("knn", lambda rt: clpatch.knn(img, patch_size=4, k=2, runtime=rt))
trial("memlimit knn", lambda rt: clpatch.knn(img, patch_size=4, k=2, runtime=clpatch.Runtime("0:0", memory_limit=20000)))
rt = clpatch.Runtime("0:0")
for s in range(40, 200, 8):
    clpatch.nlmeans(np.random.default_rng(s).random((s, s + 3)).astype(np.float32), 10, runtime=rt)
    clpatch.bm3d(np.random.default_rng(s).random((s, s + 3)).astype(np.float32), 10, runtime=rt)
print("one runtime, 20 shapes", mem(), flush=True)
del rt
print("after del", mem(), flush=True)
