#!/bin/bash
# Issue 38, device call 5 on the H200: NL-means averaging, final form (vf, this tree) against
# the tree before issue 38 (old) and the variant that computes all weights first (vb), the
# same Python code, alternated twice; then the whole suite on this tree on NVIDIA (8 pytest
# workers sharing the GPU; the slow sweeps not run) and vb's NL-means tests.
set -u
. .gpu/env.sh || exit 1
for r in 1 2; do
  for v in old vb vf; do
    echo "== $v"
    (cd .gpu/var/$v && PYTHONPATH=$PWD:$PYTHONPATH python3 ../../../benchmarks/bench_vendor_fixes.py \
        --device nvidia --label $v --only nlmeans --json $OUT/nlm_${v}_$r.json)
  done
done 2>&1 | grep -v -i warning | grep -v "lambda: self" | grep -v "^clpatch" | tee $OUT/bench_final.txt
export PYTHONPATH=$PWD:$PYTHONPATH
CLPATCH_TEST_DEVICES=nvidia timeout 400 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
    tests 2>&1 > $OUT/pytest_h200_full.log
tail -3 $OUT/pytest_h200_full.log; grep -E "^(FAILED|ERROR)" $OUT/pytest_h200_full.log | head
