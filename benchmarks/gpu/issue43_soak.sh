#!/bin/bash
# Issue 43: the soak (benchmarks/soak.py) on the GPU: 10,000 calls of mixed methods and
# shapes (nlmeans, bm3d fast/reference, vbm3d, search_patches, knn, ann_search, nnf,
# burst_denoise; NumPy and device arrays, grey and colour, 24x24 to 96x80) on one runtime
# from 4 threads, each result compared bit for bit with the single-threaded one; host RSS,
# the plan cache's buffers, the result allocator and nvidia-smi's memory.used sampled every
# 250 calls. Then 10,000 calls with the calls of one method and shape serialised
# (--lock plan) and 10,000 taking turns (--lock all), which tell races between calls
# sharing a plan from any other cause. The soak exits 1 on a failure, a mismatch or memory
# beyond its bounds: each rc is printed and the script goes on. Reports: $OUT/soak_gpu_*.md
# and .json, the runs' output in $OUT/soak_gpu.log (PoCL's: benchmarks/results/soak_pocl.md).
set -u
. .gpu/env.sh || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
machine="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) CPU cores"
# The first run compiles every program (the reference phase); --max-seconds bounds the
# threaded calls so that each run writes its report inside the command's 10 minutes.
for lock in none plan all; do
  if [ $lock = none ]; then limit=180; cap=320; else limit=60; cap=120; fi
  timeout $cap python3 benchmarks/soak.py --device nvidia --calls 10000 --threads 4 \
      --lock $lock --max-seconds $limit --machine "$machine" --markdown $OUT/soak_gpu_$lock.md \
      --json $OUT/soak_gpu_$lock.json > /tmp/soak_$lock.log 2>&1
  echo "== soak --lock $lock: rc $?"
  sed -n '/^| check/,/^## Samples/p' $OUT/soak_gpu_$lock.md | head -45
  { echo "== --lock $lock"; grep -v -i warning /tmp/soak_$lock.log | tail -80; } >> $OUT/soak_gpu.log
done
