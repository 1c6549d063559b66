#!/usr/bin/env bash
# Builds and runs ends.cu (what a decode step's ends cost apart from the model) on the GPU host.
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p build
nvcc -std=c++17 -O3 -DCHORUS_WITH_CUDA -gencode arch=compute_90,code=sm_90 -Isrc/native/ort-include bench/gpu/step-ends/ends.cu -o build/step-ends
./build/step-ends "$@"
