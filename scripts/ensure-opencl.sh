#!/bin/sh
# Make sure clpatch has a working OpenCL device (a real one, not the Oclgrind simulator).
#
#   scripts/ensure-opencl.sh [PYTHON]      (default PYTHON: .venv/bin/python)
#
# Runs `clpatch devices --check`. When no device works and apt-get is usable (as root, or
# through passwordless sudo), installs PoCL, the portable CPU OpenCL driver
# (pocl-opencl-icd), and checks again. Otherwise it stops and says how to get a driver.
set -u

PYTHON=${1:-.venv/bin/python}

say() { printf 'ensure-opencl: %s\n' "$*" >&2; }

check() { "$PYTHON" -m clpatch devices --check; }

give_up() {
    say "$1"
    cat >&2 <<'HELP'
ensure-opencl: clpatch needs an OpenCL driver. Install one, then run make again:
  - any machine (runs on the CPU):  sudo apt-get install pocl-opencl-icd   (Debian/Ubuntu;
                                    the package is called 'pocl' on Fedora, Arch, conda-forge)
  - NVIDIA GPU:  the NVIDIA driver (it ships libnvidia-opencl.so.1)
  - AMD GPU:     ROCm's rocm-opencl-runtime
  - Intel GPU:   intel-opencl-icd
Check with:  .venv/bin/clpatch devices --check
HELP
    exit 1
}

if [ ! -x "$PYTHON" ]; then
    say "no Python at $PYTHON; run 'make install' first"
    exit 1
fi

if check; then
    exit 0
fi

say "no working OpenCL device; trying to install PoCL (pocl-opencl-icd) with apt-get"
command -v apt-get >/dev/null 2>&1 || give_up "apt-get is not available on this machine"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    give_up "installing packages needs root (or passwordless sudo), which this user does not have"
fi

$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update \
    || give_up "apt-get update failed"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y pocl-opencl-icd \
    || give_up "apt-get install pocl-opencl-icd failed"

say "PoCL installed; checking again"
check || give_up "still no working OpenCL device after installing PoCL"
