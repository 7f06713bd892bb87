#!/usr/bin/env bash
# Creates .venv inside the clone and installs the Python packages (PyPI) that notebooks, the dump tool and the
# cross-check tests use. Safe to run twice: pip skips what is already satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r notebooks/requirements.txt
