#!/usr/bin/env bash
# Installs every dependency of nystrom on a bare Debian 12 machine: Debian packages (apt) for the C++ stack,
# and a Python virtual environment inside the clone (.venv) from PyPI for the notebooks and the model-dump tool,
# with the Python module nystrom built into it (python3-dev: the headers it compiles against).
# Safe to run twice: it installs only what is missing.
#   scripts/setup.sh           C++ stack and Python environment
#   scripts/setup.sh --cpp     C++ stack only
set -euo pipefail
cd "$(dirname "$0")/.."

want_python=1
[[ "${1:-}" == "--cpp" ]] && want_python=0

apt_packages=(
  build-essential cmake ninja-build pkg-config git clang-format
  libeigen3-dev libspectra-dev libboost-program-options-dev
  libhdf5-dev hdf5-tools doctest-dev
  libopenblas-dev liblapacke-dev libomp-dev
  libopenmpi-dev openmpi-bin
  python3-dev python3-venv
)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages present"
fi

if ((want_python)); then
  scripts/setup-python.sh
fi
