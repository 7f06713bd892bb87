#!/usr/bin/env bash
# Fails when a C++ or CUDA source differs from .clang-format's layout (run by ctest as `clang_format`).
# Fix with: scripts/check-format.sh --fix
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.hpp' '*.cpp' '*.cu' '*.cuh' | sort)
((${#files[@]})) || { echo "check-format: no sources found"; exit 1; }
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
else
  clang-format --dry-run --Werror "${files[@]}"
  echo "check-format: ${#files[@]} files formatted"
fi
