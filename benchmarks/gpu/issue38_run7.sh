#!/bin/bash
# Issue 38, device call 7 on the H200 (session 19): the unordered neighbour table sorted at
# its end by Batcher's odd-even merge sort network (this tree) against the odd-even
# transposition sort before it (f71cdce, .gpu/var/pre_nn), both forced onto the H200 with
# --table unordered (NVIDIA's profile orders its table), alternated twice; the outputs must
# hash the same. Then the whole suite on this tree, slow sweeps included (8 pytest workers).
set -u
. .gpu/env.sh || exit 1
for r in 1 2; do
  for v in old new; do
    echo "== $v"
    if [ $v = old ]; then
      (cd .gpu/var/pre_nn && PYTHONPATH=$PWD:$PYTHONPATH python3 ../../../benchmarks/bench_vendor_fixes.py \
          --device nvidia --label old --table unordered --only search "search step 1" "bm3d fast" \
          --json $OUT/table_old_$r.json)
    else
      PYTHONPATH=$PWD:$PYTHONPATH python3 benchmarks/bench_vendor_fixes.py \
          --device nvidia --label new --table unordered --only search "search step 1" "bm3d fast" \
          --json $OUT/table_new_$r.json
    fi
  done
done 2>&1 | grep -v -i warning | grep -v "lambda: self" | grep -v "^clpatch/" | tee $OUT/bench_table.txt
export PYTHONPATH=$PWD:$PYTHONPATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
CLPATCH_SLOW=1 CLPATCH_TEST_DEVICES=nvidia timeout 420 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
    tests > $OUT/pytest_h200_full.log 2>&1
echo "pytest rc $?"
tail -3 $OUT/pytest_h200_full.log; grep -E "^(FAILED|ERROR)" $OUT/pytest_h200_full.log | head -20
