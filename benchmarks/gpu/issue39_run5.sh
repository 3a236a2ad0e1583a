#!/bin/bash
# Issues 39 and 43, session 21 on the GPU machine: the plans that no longer wait in `enqueue` (kNN;
# NNF given model=) and the banded kNN merged on the device (benchmarks/bench_plan_waits.py),
# then the whole suite with the slow sweeps (kernels changed: lib/convert.cl.mako stores
# refused values as 0; new match/knn_merge.cl.mako) on 8 pytest workers.
set -u
. .gpu/env.sh || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
(cd benchmarks && timeout 240 python3 bench_plan_waits.py --json $OUT/plan_waits.json) \
    2>&1 | grep -v -i warning | tee $OUT/plan_waits.txt
# clpatch bench's new methods (vbm3d, knn, nnf) at its default size, once on a GPU
timeout 150 python3 -m clpatch bench --method all --repeats 5 --json $OUT/bench_all.json \
    2>&1 | grep -v -i warning | tee $OUT/bench_all.txt
CLPATCH_SLOW=1 CLPATCH_TEST_DEVICES=nvidia timeout 330 python3 -m pytest -q -n 8 \
    -p no:cacheprovider -rfE tests > $OUT/pytest_full.log 2>&1
echo "pytest rc $?"
tail -3 $OUT/pytest_full.log; grep -E "^(FAILED|ERROR)" $OUT/pytest_full.log | head -30
