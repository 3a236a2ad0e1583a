#!/bin/bash
# Issue 38, device call 3 on the H200: NL-means before/after with its stages, then the
# kernel test folders (match, denoise) on NVIDIA (8 pytest workers sharing the GPU).
set -u
. .gpu/env.sh || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH   # this checkout, not a copy installed by an earlier call
python3 -c "import clpatch; print(clpatch.__file__)"
for r in 1 2; do
  python3 benchmarks/bench_vendor_fixes.py --device nvidia --label new --only nlmeans --json $OUT/nlm_new$r.json
  (cd .gpu/old && PYTHONPATH=$PWD:$PYTHONPATH python3 ../../benchmarks/bench_vendor_fixes.py \
      --device nvidia --label old-a936c2e --only nlmeans --json $OUT/nlm_old$r.json)
done 2>&1 | grep -v -i warning | grep -v "lambda: self" | tee $OUT/bench_nlm.txt
CLPATCH_TEST_DEVICES=nvidia timeout 400 python3 -m pytest -q -n 8 -p no:cacheprovider --durations=25 \
    tests/match tests/denoise 2>&1 | tee $OUT/pytest_match_denoise.log | tail -30
