#!/usr/bin/env bash
# Test: executes every figure notebook headless on a results folder (scripts/make-figures.sh --strict) and checks
# that each expected PNG appears, freshly written and non-empty.
#   tests/python/run_notebooks.sh RESULTS_DIR           run on an existing results folder (e.g. results/)
#   tests/python/run_notebooks.sh --fake [ARGS...]      run on a fake results folder made by make_fake_results.py
#                                                       (ARGS go to it, e.g. --minimal or --methods a,b)
set -euo pipefail
repository=$(cd "$(dirname "$0")/../.." && pwd)
python="$repository/.venv/bin/python"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if [[ "${1:-}" == "--fake" ]]; then
  shift
  results="$scratch/results"
  "$python" "$repository/tests/python/make_fake_results.py" "$results" "$@"
  export NYSTROM_VISION=0  # no real vision runs on a fake folder
else
  results=${1:?usage: run_notebooks.sh RESULTS_DIR | --fake [ARGS...]}
fi
export NYSTROM_FIGURES="$scratch/figures"

"$repository/scripts/make-figures.sh" --strict "$results"

expected=(spectrum_decay spectrum_decay_mean error_vs_landmarks error_vs_pinv_iterations bounds_vs_error
          bounds_applicability bounds_tightness methods_comparison bench_time_vs_n bench_speedup bench_steps
          bench_accuracy_vs_cost bench_gemm vision_psnr_drop vision_time_vs_psnr vision_floor_vs_error)
# The figures of the /sweep columns of format version 4 and of several precisions, where sweep.h5 has them.
sweep_has() {  # sweep_has PYTHON_CONDITION: whether it holds of the /sweep group `s` of sweep.h5
  "$python" -c 'import h5py, sys; s = h5py.File(sys.argv[1], "r")["sweep"]; sys.exit(not eval(sys.argv[2]))' \
    "$results/sweep.h5" "$1"
}
if sweep_has '"optimality_ratio" in s and "optimality_ratio_upper" in s'; then expected+=(optimality); fi
if sweep_has '"spectral_error_lower" in s and "spectral_error_upper" in s'; then expected+=(bounds_certificates); fi
if sweep_has '"precision" in s and len(set(s["precision"].asstr()[...])) > 1'; then expected+=(methods_precision); fi
# The batches of heads, where bench.h5 has them (`nystrom bench --batch`).
if "$python" -c 'import h5py, sys; sys.exit("bench_batch" not in h5py.File(sys.argv[1], "r"))' "$results/bench.h5"; then
  expected+=(bench_batch)
fi
# The vision dump's sweep and spectrum, where the folder has them, drawn by the same notebooks.
if [[ -f "$results/vision-sweep.h5" && -f "$results/vision-spectrum.h5" ]]; then
  expected+=(vision/spectrum_decay vision/spectrum_decay_mean vision/error_vs_landmarks vision/error_vs_pinv_iterations)
fi
passed=0 failed=0
for figure in "${expected[@]}"; do
  if [[ -s "$NYSTROM_FIGURES/$figure.png" ]] && head -c 8 "$NYSTROM_FIGURES/$figure.png" | grep -q PNG; then
    passed=$((passed + 1))
  else
    echo "run_notebooks: missing or empty figure $figure.png" >&2
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
((failed == 0))
