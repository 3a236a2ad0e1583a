#!/bin/sh
# Install Intel's OpenCL CPU runtime into .opencl/intel/ (ignored by git), for the tests'
# second OpenCL implementation: Intel's own compiler (the front end of its GPU driver) on
# this machine's CPU, with cl_intel_subgroups.
#
#   scripts/intel-opencl.sh [PYTHON]      (default PYTHON: python3; needs venv and pip)
#
# Nothing outside the folder changes (no root, nothing in /etc): the runtime comes from PyPI
# (intel-opencl-rt, intel-cmplr-lib-rt: about 800 MB) into its own virtual environment,
# and .opencl/intel/env.sh points the OpenCL loader at it alone:
#
#   . .opencl/intel/env.sh && .venv/bin/clpatch devices
#
# The wheels' own ICD file names a placeholder path, so the folder gets an ICD file of its
# own holding the absolute path of the installed libintelocl.so. A second run reuses the
# installation (the stamp names the versions). Exit status 0 when the runtime is installed
# and its library loads, else 1 with the reason.
set -u

PYTHON=${1:-python3}
# The versions the project is tested with (OpenCL 3.1, driver 2026.22.10).
PACKAGES="intel-opencl-rt==2026.2.0 intel-cmplr-lib-rt==2026.2.0"

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.opencl/intel"
venv="$dir/venv"
stamp="$dir/installed"

say() { printf 'intel-opencl: %s\n' "$*" >&2; }

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$PACKAGES" ] && [ -f "$venv/lib/libintelocl.so" ]; then
    exit 0
fi
rm -rf "$dir"
mkdir -p "$dir/icd"
say "installing Intel's OpenCL CPU runtime ($PACKAGES) into .opencl/intel (about 800 MB)"
"$PYTHON" -m venv "$venv" || { say "'$PYTHON -m venv' failed"; exit 1; }
"$venv/bin/python" -m pip install -q --disable-pip-version-check $PACKAGES \
    || { say "pip could not install $PACKAGES (offline? run 'make test INTEL=0' to skip)"; exit 1; }
lib="$venv/lib/libintelocl.so"
[ -f "$lib" ] || { say "the wheels installed no $lib"; exit 1; }
echo "$lib" > "$dir/icd/intel.icd"
cat > "$dir/env.sh" <<EOF
# Source to make Intel's OpenCL CPU runtime the only OpenCL implementation of a shell.
export OCL_ICD_VENDORS="$dir/icd"
export LD_LIBRARY_PATH="$venv/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOF
echo "$PACKAGES" > "$stamp"
say "installed: . .opencl/intel/env.sh to use it"
