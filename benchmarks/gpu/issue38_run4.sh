#!/bin/bash
# Issue 38, device call 4 on the H200: NL-means averaging variants that keep exp() values
# out of registers across the barrier, against the tree before issue 38 (same Python code,
# only denoise/nlmeans.cl.mako differs; .gpu/var/NAME), alternated twice; then the test
# folders other than match and denoise on NVIDIA.
set -u
. .gpu/env.sh || exit 1
for r in 1 2; do
  for v in old v1 v2 vb ve; do
    echo "== $v"
    (cd .gpu/var/$v && PYTHONPATH=$PWD:$PYTHONPATH python3 ../../../benchmarks/bench_vendor_fixes.py \
        --device nvidia --label $v --only nlmeans --json $OUT/nlm_${v}_$r.json)
  done
done 2>&1 | grep -v -i warning | grep -v "lambda: self" | grep -v "^clpatch" | tee $OUT/bench_variants.txt
export PYTHONPATH=$PWD:$PYTHONPATH
CLPATCH_TEST_DEVICES=nvidia timeout 330 python3 -m pytest -q -n 8 -p no:cacheprovider --durations=15 \
    tests --ignore=tests/match --ignore=tests/denoise 2>&1 | tee $OUT/pytest_rest.log | tail -25
