#!/bin/bash
# Issue 39, device call 1 on the H200 (session 19): examples/pipeline.py on 1080p frames (its
# wall clock per frame against the sum of its kernels and copies, and against NumPy round
# trips); the calls the plan refactor touched, this tree against the tree before it
# (4d4aca3, .gpu/var/pre39), alternated twice (same bits, wall clock); the whole suite on
# this tree (8 pytest workers, the slow sweeps not run).
set -u
. .gpu/env.sh || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
python3 examples/pipeline.py --device nvidia --size 1080 1920 --frames 8 --repeats 5 \
    2>&1 | grep -v -i warning | tee $OUT/pipeline_1080p.txt
for r in 1 2; do
  for v in old new; do
    echo "== $v"
    if [ $v = old ]; then
      (cd .gpu/var/pre39 && PYTHONPATH=$PWD:$PYTHONPATH python3 ../../../benchmarks/bench_vendor_fixes.py \
          --device nvidia --label old --only ann search "bm3d fast" nlmeans \
          --json $OUT/calls_old_$r.json)
    else
      python3 benchmarks/bench_vendor_fixes.py --device nvidia --label new \
          --only ann search "bm3d fast" nlmeans --json $OUT/calls_new_$r.json
    fi
  done
done 2>&1 | grep -v -i warning | grep -v "lambda: self" | grep -v "^clpatch/" | tee $OUT/bench_calls.txt
CLPATCH_TEST_DEVICES=nvidia timeout 330 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
    tests > $OUT/pytest_h200_full.log 2>&1
echo "pytest rc $?"
tail -3 $OUT/pytest_h200_full.log; grep -E "^(FAILED|ERROR)" $OUT/pytest_h200_full.log | head -20
