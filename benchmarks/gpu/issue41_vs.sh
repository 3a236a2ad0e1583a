#!/bin/bash
# Issue 41: clpatch.vapoursynth on the GPU machine (Python 3.12): its tests, then the benchmark
# against BM3DCUDA and KNLMeansCL in one VapourSynth process (benchmarks/bench_vapoursynth.py).
# Needs .gpu/ from `bash ../shared/device/prepare.sh vapoursynth-peers` (VapourSynth R79 and the
# peers' plug-ins); carry [".gpu"]. One part per call keeps each within a call's 10 minutes:
#   bash benchmarks/gpu/issue41_vs.sh tests|1080p|4k|all   (default all)
set -u
part=${1:-all}
. .gpu/env.sh || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "import vapoursynth as vs; print('VapourSynth', vs.core.core_version)"
if [ "$part" = tests ] || [ "$part" = all ]; then
  CLPATCH_TEST_DEVICES=nvidia timeout 300 python3 -m pytest -q -p no:cacheprovider -rfEs \
      tests/vapoursynth > $OUT/pytest_vapoursynth.log 2>&1
  echo "pytest rc $?"
  tail -3 $OUT/pytest_vapoursynth.log; grep -E "^(FAILED|ERROR|SKIPPED)" $OUT/pytest_vapoursynth.log | head -20
fi
# (on a fresh machine the first part also builds clpatch's kernels: the 1080p part took 300 s
# cold, 75-125 s warm on an H100; 4K tunes the peers on 4 frames and times 2 repeats to fit)
for size in 1080p 4k; do
  if [ "$part" = $size ] || [ "$part" = all ]; then
    extra=""; [ $size = 4k ] && extra="--tune-frames 4 --repeats 2"
    timeout 480 python3 benchmarks/bench_vapoursynth.py --size $size $extra \
        --out $OUT/vapoursynth_$size.md > $OUT/bench_vapoursynth_$size.log 2>&1
    echo "bench $size rc $?"
    tail -40 $OUT/bench_vapoursynth_$size.log
  fi
done
