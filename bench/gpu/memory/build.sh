#!/usr/bin/env bash
# Builds bench/gpu/memory/probe.cu into build/memory-probe for the GPU host (sm_90):
#   bash bench/gpu/memory/build.sh
# Run there: ./build/memory-probe [out.json] (about 10 s; needs only the CUDA runtime).
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p build
nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 bench/gpu/memory/probe.cu -o build/memory-probe
echo "build/memory-probe"
