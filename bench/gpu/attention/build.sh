#!/usr/bin/env bash
# Builds the attention benchmarks for the GPU host (sm_80 and sm_90), each with the addon's kernels it
# measures: bench/gpu/attention/check.cu with SlotAttention's into build/attention-check, and
# bench/gpu/attention/paged.cu with PagedAttention's (which take helpers from SlotAttention's, and from
# linear.cu the switch for dependent launches) into build/paged-attention-time. ONNX Runtime's headers
# (which slot-attention.h includes) come from src/native/ort-include, kept in the repository.
# Run: bash bench/gpu/attention/build.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p build
flags=(-std=c++17 -O2 -DCHORUS_WITH_CUDA -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -Isrc/native/ort-include)
nvcc "${flags[@]}" bench/gpu/attention/check.cu src/native/slot-attention.cu -o build/attention-check
echo "build/attention-check"
nvcc "${flags[@]}" bench/gpu/attention/paged.cu src/native/paged-attention.cu src/native/slot-attention.cu src/native/linear.cu -o build/paged-attention-time
echo "build/paged-attention-time"
