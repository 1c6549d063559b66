#!/usr/bin/env bash
# Builds bench/gpu/gemv/gemv.cu with the addon's src/native/linear.cu into build/gemv-bench, for the GPU
# host (sm_90; cuBLAS is loaded at run time, as the addon loads it): bash bench/gpu/gemv/build.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p build
rm -f build/gemv-bench
nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -DCHORUS_WITH_CUDA -Xptxas -v -Isrc/native/ort-include bench/gpu/gemv/gemv.cu src/native/linear.cu -o build/gemv-bench -ldl 2>&1 \
  | grep -E "error|warning|spill" | grep -v " 0 bytes spill" || true
test -x build/gemv-bench && echo "build/gemv-bench"
