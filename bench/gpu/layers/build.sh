#!/usr/bin/env bash
# Builds bench/gpu/layers/chain.cu with the addon's Linear and PagedAttention kernels into
# build/layer-chain, for the GPU host (sm_90): bash bench/gpu/layers/build.sh
# Run there: ./build/layer-chain [out.json] (needs nothing else: no ONNX Runtime, no cuBLAS).
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p build
nvcc -std=c++17 -O3 -DCHORUS_WITH_CUDA -gencode arch=compute_90,code=sm_90 -Isrc/native/ort-include \
  bench/gpu/layers/chain.cu src/native/linear.cu src/native/paged-attention.cu src/native/slot-attention.cu -o build/layer-chain -ldl
echo "build/layer-chain"
