#!/usr/bin/env bash
# Builds bench/gpu/attention/check.cu with the addon's SlotAttention kernels into build/attention-check,
# for the GPU host (sm_80 and sm_90): bash bench/gpu/attention/build.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p build
nvcc -std=c++17 -O2 -DCHORUS_WITH_CUDA -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -Ibuild/native/ort-include \
  bench/gpu/attention/check.cu src/native/slot-attention.cu -o build/attention-check
echo "build/attention-check"
