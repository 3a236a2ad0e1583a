#!/bin/bash
# Written in session 22, not run there (its device time went to the VapourSynth and soak
# runs): the burst ANN's compile-time sizes (70f5d61: one program for every frame size)
# before and after, then the whole suite with the slow sweeps.
# "Before" is this tree with clpatch/match/ann/plan.py as of e9c94ba, written to the
# untracked file benchmarks/gpu/before_ann_plan.py by
#   git show 70f5d61~1:clpatch/match/ann/plan.py > benchmarks/gpu/before_ann_plan.py
# and installed beside the tree's own build in /tmp/site_before.
set -u
. .gpu/env.sh || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
rm -rf /tmp/before && mkdir -p /tmp/before && cp -r clpatch cl_src device_profiles tests pyproject.toml setup.cfg README.md /tmp/before/ 2>/dev/null
cp benchmarks/gpu/before_ann_plan.py /tmp/before/clpatch/match/ann/plan.py
python3 -m pip install -q --no-deps --no-build-isolation --no-index --no-compile --target /tmp/site_before /tmp/before || exit 1
for side in after before after; do
  if [ $side = before ]; then pp=/tmp/site_before:$PYTHONPATH; else pp=$PYTHONPATH; fi
  PYTHONPATH=$pp:$PWD timeout 150 python3 benchmarks/bench_ann.py --device nvidia --repeats 9 \
      --skip 512 large --json $OUT/burst_$side.json --markdown $OUT/burst_$side.md > $OUT/burst_$side.log 2>&1
  echo "== burst $side: rc $?"; grep -i "burst" $OUT/burst_$side.md | head -4
done
CLPATCH_SLOW=1 CLPATCH_TEST_DEVICES=nvidia timeout 360 python3 -m pytest -q -n 8 \
    -p no:cacheprovider -rfE tests > $OUT/pytest_full.log 2>&1
echo "pytest rc $?"
tail -3 $OUT/pytest_full.log; grep -E "^(FAILED|ERROR)" $OUT/pytest_full.log | head -30
