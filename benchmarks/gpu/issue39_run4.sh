#!/bin/bash
# Issue 39, device call 4 on the H200 (session 20): filters on given matches against their
# own search and the NNF in bands against one pass (benchmarks/bench_given_matches.py),
# after the fix of the given matches' BM3D scales, then the whole suite with the slow sweeps (kernels changed:
# cl_src/match/given.cl.mako) on 8 pytest workers.
set -u
. .gpu/env.sh || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
(cd benchmarks && timeout 200 python3 bench_given_matches.py --json $OUT/given_matches.json) \
    2>&1 | grep -v -i warning | tee $OUT/given_matches.txt
CLPATCH_SLOW=1 CLPATCH_TEST_DEVICES=nvidia timeout 330 python3 -m pytest -q -n 8 \
    -p no:cacheprovider -rfE tests > $OUT/pytest_full.log 2>&1
echo "pytest rc $?"
tail -3 $OUT/pytest_full.log; grep -E "^(FAILED|ERROR)" $OUT/pytest_full.log | head -30
