#!/bin/bash
# Issue 38, device call 1 on the H200: before/after speed of the three kernels changed for
# Intel's compiler (old tree a936c2e carried in .gpu/old, alternated with this tree), the
# cross-vendor identity run on NVIDIA, and the self-test. Results under $OUT.
set -u
. .gpu/env.sh || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
python3 -m clpatch devices | tee -a $OUT/gpu.txt
for r in 1 2; do
  python3 benchmarks/bench_vendor_fixes.py --device nvidia --label new --json $OUT/new$r.json
  (cd .gpu/old && PYTHONPATH=$PWD:$PYTHONPATH python3 ../../benchmarks/bench_vendor_fixes.py \
      --device nvidia --label old-a936c2e --json $OUT/old$r.json)
done 2>&1 | grep -v Warning | tee $OUT/bench.txt
python3 -m clpatch selftest --device nvidia > $OUT/selftest_h200.txt 2>&1
tail -3 $OUT/selftest_h200.txt
python3 benchmarks/identity.py run --device nvidia --label NVIDIA \
    --inputs-from benchmarks/results/identity/pocl.npz --out $OUT/nvidia.npz 2>&1 | tail -5
