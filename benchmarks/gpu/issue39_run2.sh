#!/bin/bash
# Issue 39, device call 2 on the H200 (session 19): BM3D's wall clock on a 512x512 device
# image, this tree against 4d4aca3 (.gpu/var/pre39), with a host profile of each (run 1
# measured 0.2 ms more per call); then the whole suite on this tree (8 pytest workers, the
# slow sweeps not run) after run 1's failures were fixed.
set -u
. .gpu/env.sh || exit 1
for r in 1 2; do
  (cd .gpu/var/pre39 && PYTHONPATH=$PWD:$PYTHONPATH python3 ../../../benchmarks/gpu/host_profile_bm3d.py) 2>&1 | grep -v -i warning
  PYTHONPATH=$PWD:$PYTHONPATH python3 benchmarks/gpu/host_profile_bm3d.py 2>&1 | grep -v -i warning
done | tee $OUT/bm3d_host_profile.txt
export PYTHONPATH=$PWD:$PYTHONPATH
CLPATCH_TEST_DEVICES=nvidia timeout 330 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
    tests > $OUT/pytest_h200_full.log 2>&1
echo "pytest rc $?"
tail -3 $OUT/pytest_h200_full.log; grep -E "^(FAILED|ERROR)" $OUT/pytest_h200_full.log | head -30
