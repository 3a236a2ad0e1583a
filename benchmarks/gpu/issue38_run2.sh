#!/bin/bash
# Issue 38, device call 2 on the H200: before/after speed again (NL-means' weights now cross
# the barrier in local memory), then the kernel test folders (match, denoise) on NVIDIA.
set -u
. .gpu/env.sh || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH   # this checkout, not a copy installed by an earlier call
for r in 1 2; do
  python3 benchmarks/bench_vendor_fixes.py --device nvidia --label new --json $OUT/new$r.json
  (cd .gpu/old && PYTHONPATH=$PWD:$PYTHONPATH python3 ../../benchmarks/bench_vendor_fixes.py \
      --device nvidia --label old-a936c2e --json $OUT/old$r.json)
done 2>&1 | grep -v -i warning | grep -v "lambda: self" | tee $OUT/bench.txt
CLPATCH_TEST_DEVICES=nvidia timeout 420 python3 -m pytest -q -p no:cacheprovider --durations=25 \
    tests/match tests/denoise 2>&1 | tee $OUT/pytest_match_denoise.log | tail -40
