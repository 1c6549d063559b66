#!/usr/bin/env bash
# Builds the skinny-GEMM prototype (lab/skinny-gemm/skinny.cu) with the addon's linear.cu, for which it
# times cuBLASLt, into build/skinny-gemm (sm_90a, for its warpgroup kernel; cuBLAS is loaded at run time, as
# the addon loads it). Prints compile errors and any kernel that spills registers.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build
rm -f build/skinny-gemm
nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -DCHORUS_WITH_CUDA -Xptxas -v -Isrc/native/ort-include lab/skinny-gemm/skinny.cu src/native/linear.cu src/native/quant-wgmma.cu -o build/skinny-gemm -ldl 2>&1 \
  | grep -E "error|spill stores" | grep -v " 0 bytes spill stores" || true
test -x build/skinny-gemm && echo "build/skinny-gemm"
