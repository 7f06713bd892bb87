#!/bin/bash
# Every GPU test and benchmark of the CUDA backend in one run, for a machine with an NVIDIA GPU and a CUDA build in
# build-gpu (cmake -B build-gpu -DNYSTROM_CUDA_ARCHITECTURES=90 ...). Writes its logs and the bench's HDF5 file to
# OUTPUT (default: gpu-figures/) and prints a summary last.
#
#     bench/gpu_figures.sh [OUTPUT] [--tests-only | --bench-only]
#
# 1. test_cuda, one doctest case per process (as ctest runs them), so that a crash names its case and the
#    others still run; with compute-sanitizer's memcheck on the batched cases when it is on the PATH.
# 2. nystrom bench --device cuda, float32: single heads N = 1024 … 65,536 with host matrices in and out (copies
#    included), the batches of docs/formats.md §2.3 and single heads as 1×1 batches device-resident (copies in
#    their own column), the matrix-free matvec at N = 65,536 against the GEMM rate.
# 3. bench/torch_attention.py on the same batch shapes (torch SDPA and the authors' PnP-Nystra formulation).
set -uo pipefail
output=${1:-gpu-figures}
mode=${2:-all}
build=${NYSTROM_GPU_BUILD:-build-gpu}
mkdir -p "$output"
summary=()

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$output/gpu.txt"

if [ "$mode" != --bench-only ]; then
  passed=0 failed=0
  : >"$output/test_cuda.log"
  while IFS= read -r name; do
    status=0
    timeout 120 "$build/bin/test_cuda" "--test-case=${name//,/\\,}" >>"$output/test_cuda.log" 2>&1 || status=$?
    if [ $status = 0 ]; then passed=$((passed + 1)); else
      failed=$((failed + 1)); echo "FAILED ($status): $name" | tee -a "$output/test_cuda.log"
    fi
  done < <("$build/bin/test_cuda" --list-test-cases --no-version | grep -v '^\[doctest\]\|^=\+$\|^$')
  summary+=("test_cuda: $passed cases passed, $failed failed (one process each)")
  if command -v compute-sanitizer >/dev/null; then
    status=0
    timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/bin/test_cuda" \
      "--test-case=*batched*" >"$output/memcheck.log" 2>&1 || status=$?
    summary+=("compute-sanitizer memcheck on the batched cases: exit $status ($(grep -c 'Invalid\|ERROR SUMMARY: [1-9]' "$output/memcheck.log") error lines)")
  fi
fi

if [ "$mode" != --tests-only ]; then
  batches=64x6x1024x64,16x8x4096x64,1x1x1024x64,1x1x4096x64,1x1x16384x64,1x1x65536x64
  timeout 300 "$build/bin/nystrom" bench --device cuda --precision float --n 1024,4096,16384,65536 \
    --batch "$batches" --matvec-n 65536 --gemm-n 8192 --min-seconds 0.5 -o "$output/bench_cuda.h5" \
    2>&1 | tee "$output/bench_cuda.log"
  summary+=("nystrom bench --device cuda: exit $?")
  # The authors' pseudoinverse (Razavi, 6 iterations): the setting their models run.
  timeout 200 "$build/bin/nystrom" bench --device cuda --precision float --n 4096,16384 --batch "$batches" \
    --pinv razavi --iterations 6 --gemm-n 0 --min-seconds 0.5 -o "$output/bench_cuda_razavi.h5" \
    2>&1 | tee "$output/bench_cuda_razavi.log"
  summary+=("nystrom bench --device cuda --pinv razavi: exit $?")
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_attention.py --batch "$batches" --repeat 20 \
    2>&1 | tee "$output/torch_attention.log"
  summary+=("bench/torch_attention.py: exit $?")
fi
printf '%s\n' "${summary[@]}"
