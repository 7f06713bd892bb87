#!/usr/bin/env bash
# A sweep over 2 MPI ranks (oversubscribed on 2 cores is fine) writes the same /sweep rows, in the same order,
# as a 1-process sweep; so does a 2-rank sweep that is interrupted and resumed. Wall-time columns (*seconds*) differ
# by nature and are not compared; every other column must match exactly.
# Usage: test_mpi_sweep.sh NYSTROM_BINARY [MPIEXEC]
set -euo pipefail

nystrom=${1:?usage: test_mpi_sweep.sh NYSTROM_BINARY [MPIEXEC]}
mpiexec=${2:-mpirun}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

"$nystrom" synth --output "$work/dump.h5" --kind low-rank --layers 2 --heads 2 --tokens 96 --dim 16 --seed 3
# 2 layers x 2 heads x 2 kernels x 3 m x 2 strategies x 3 pseudoinverses = 144 points of very different cost.
sweep=(sweep --input "$work/dump.h5" --kernel exp,laplacian --landmarks 4,8,16 --strategy segment-means,step
       --pinv exact,razavi --iterations 2,6 --threads 1 --quiet)

"$nystrom" "${sweep[@]}" --output "$work/one.h5"
"$mpiexec" -n 2 --oversubscribe "$nystrom" "${sweep[@]}" --output "$work/two.h5"
# Interrupted after 20 new points (exit status of an interrupted run is not 0), then resumed to the end.
"$mpiexec" -n 2 --oversubscribe "$nystrom" "${sweep[@]}" --output "$work/resumed.h5" --stop-after 20 || true
"$mpiexec" -n 2 --oversubscribe "$nystrom" "${sweep[@]}" --output "$work/resumed.h5"

# Bad input under the launcher: every rank reports it (ranks other than 0 naming themselves), the run fails,
# and nothing is written.
bad=(sweep --input "$work/dump.h5" --landmarks 0 --quiet --output "$work/bad.h5")
if "$mpiexec" -n 2 --oversubscribe "$nystrom" "${bad[@]}" > /dev/null 2> "$work/bad.err"; then
  echo "FAIL: a 2-rank sweep with --landmarks 0 succeeded"
  exit 1
fi
for prefix in "nystrom sweep" "nystrom sweep (rank 1 of 2)"; do
  grep -qF "$prefix: option --landmarks: 0 in '0' must be >= 1" "$work/bad.err" ||
    { echo "FAIL: no message '$prefix: option --landmarks ...' in:"; cat "$work/bad.err"; exit 1; }
done
[ ! -e "$work/bad.h5" ] || { echo "FAIL: the failed 2-rank sweep wrote $work/bad.h5"; exit 1; }

# An input only some ranks can read (a file one node lacks; here each rank is given its own path): the ranks
# that fail report it, the others stop too instead of waiting for them, and nothing is written.
for missing_rank in 0 1; do
  inputs=("$work/dump.h5" "$work/dump.h5")
  inputs[missing_rank]="$work/missing.h5"
  one=(sweep --landmarks 4 --quiet --output "$work/partly.h5" --input)
  if timeout 120 "$mpiexec" -n 1 --oversubscribe "$nystrom" "${one[@]}" "${inputs[0]}" : \
      -n 1 --oversubscribe "$nystrom" "${one[@]}" "${inputs[1]}" > /dev/null 2> "$work/partly.err"; then
    echo "FAIL: a 2-rank sweep whose rank $missing_rank lacks its input succeeded"
    exit 1
  fi
  grep -qF "$work/missing.h5: no such file" "$work/partly.err" &&
    grep -qF "another rank failed" "$work/partly.err" ||
    { echo "FAIL: rank $missing_rank's missing input not reported as expected (or the run hung):"; cat "$work/partly.err"; exit 1; }
  for left in "$work/partly.h5" "$work/partly.h5.partial"; do
    [ ! -e "$left" ] || { echo "FAIL: the failed 2-rank sweep left $left"; exit 1; }
  done
done

# Writes every /sweep column except wall times as text, one file per column, into directory $2.
dump_columns() {
  local file=$1 into=$2
  mkdir -p "$into"
  for column in $(h5ls "$file/sweep" | awk '{print $1}'); do
    case $column in *seconds*) continue ;; esac
    h5dump -y -w 0 -d "/sweep/$column" -o "$into/$column" "$file" > /dev/null
  done
}
dump_columns "$work/one.h5" "$work/one"
rows=$(h5ls "$work/one.h5/sweep" | awk 'NR == 1 {gsub(/[{}\/,]/, " "); print $3}')
[ "${rows:-0}" -ge 40 ] || { echo "expected at least 40 rows in the 1-process sweep, got '${rows}'"; exit 1; }
for run in two resumed; do
  dump_columns "$work/$run.h5" "$work/$run"
  if ! diff -r -q "$work/one" "$work/$run"; then
    echo "FAIL: /sweep of the 2-rank run '$run' differs from the 1-process run"
    exit 1
  fi
done
echo "OK: ${rows} rows, 2-rank and resumed 2-rank sweeps equal the 1-process sweep column by column"
