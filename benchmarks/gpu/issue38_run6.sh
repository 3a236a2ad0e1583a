#!/bin/bash
# Issue 38, device call 6 on the H200: the windowed search with its squared differences
# added by an explicit fma() (this tree) against the tree before (b99e5f2, .gpu/var/vf),
# the same script, alternated twice; the outputs must hash the same.
set -u
. .gpu/env.sh || exit 1
for r in 1 2; do
  for v in old new; do
    echo "== $v"
    if [ $v = old ]; then
      (cd .gpu/var/vf && PYTHONPATH=$PWD:$PYTHONPATH python3 ../../../benchmarks/bench_vendor_fixes.py \
          --device nvidia --label old --only search "search step 1" --json $OUT/search_old_$r.json)
    else
      PYTHONPATH=$PWD:$PYTHONPATH python3 benchmarks/bench_vendor_fixes.py \
          --device nvidia --label new --only search "search step 1" --json $OUT/search_new_$r.json
    fi
  done
done 2>&1 | grep -v -i warning | grep -v "lambda: self" | grep -v "^clpatch" | tee $OUT/bench_search.txt
