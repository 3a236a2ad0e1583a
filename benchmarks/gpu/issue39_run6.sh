#!/bin/bash
# Session 21, second GPU call: the whole suite with the slow sweeps again, after the fixes
# of the first call's two failures and the new knn_vectors metrics (pyopencl element-wise
# kernels: cosine and inner product), on 8 pytest workers.
set -u
. .gpu/env.sh || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
CLPATCH_SLOW=1 CLPATCH_TEST_DEVICES=nvidia timeout 400 python3 -m pytest -q -n 8 \
    -p no:cacheprovider -rfE tests > $OUT/pytest_full.log 2>&1
echo "pytest rc $?"
tail -3 $OUT/pytest_full.log; grep -E "^(FAILED|ERROR)" $OUT/pytest_full.log | head -30
