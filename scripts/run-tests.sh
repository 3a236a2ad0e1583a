#!/bin/sh
# The test suite on two OpenCL implementations, as `make test` runs it:
#
#   scripts/run-tests.sh [PYTHON]      (default PYTHON: .venv/bin/python)
#
# 1. pytest on the machine's OpenCL devices (PoCL on a CPU-only machine): the CI tier, every
#    test but the slow sweeps (marker `slow`; CLPATCH_SLOW=1 runs them too);
# 2. Intel's OpenCL CPU runtime, installed into .opencl/intel by scripts/intel-opencl.sh:
#    `clpatch selftest` (every kernel family against its oracle), then the tests marked
#    `every_vendor` (the kernel families against their oracles; among them the tests that
#    force every profile family on the device, so the `intel` profile's bank padding,
#    neighbour table, sub-group size and video search run through Intel's own compiler).
#
# INTEL=0 skips part 2 (e.g. offline: the runtime is a download of about 800 MB). Every part
# runs even when an earlier one failed; the exit status is 1 if any failed. The time of each
# part is printed at the end.
set -u

PYTHON=${1:-.venv/bin/python}
INTEL=${INTEL:-1}
# pytest workers (pytest-xdist): one per core, at most 4 (CLPATCH_TEST_WORKERS overrides; 0
# runs in this process). The CPU compilers compile on one thread: two workers on a 2-core
# machine keep both cores busy while the programs of a cold cache build.
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
WORKERS=${CLPATCH_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}
if [ "$WORKERS" -gt 0 ] 2>/dev/null; then XDIST="-n $WORKERS"; else XDIST=""; fi
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

summary=""
failed=0
now() { date +%s; }

# part NAME COMMAND...: run a part, note its time and status
part() {
    name=$1
    shift
    printf '\n==== %s ====\n' "$name"
    start=$(now)
    if "$@"; then status=ok; else status=FAILED; failed=1; fi
    seconds=$(( $(now) - start ))
    summary="$summary$(printf '%-44s %6d s  %s' "$name" "$seconds" "$status")
"
}

intel() {
    # shellcheck disable=SC1091
    ( . .opencl/intel/env.sh && "$@" )
}

# shellcheck disable=SC2086
part "pytest (default devices, CI tier)" "$PYTHON" -m pytest $XDIST
if [ "$INTEL" != 0 ]; then
    part "install Intel's OpenCL CPU runtime" sh scripts/intel-opencl.sh python3
    if [ -f .opencl/intel/env.sh ]; then
        part "clpatch selftest on Intel's runtime" intel "$PYTHON" -m clpatch selftest
        # shellcheck disable=SC2086
        part "pytest -m every_vendor on Intel's runtime" intel "$PYTHON" -m pytest -q $XDIST -m every_vendor
    fi
fi

printf '\n==== time of each part ====\n%s' "$summary"
exit $failed
