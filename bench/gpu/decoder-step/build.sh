#!/usr/bin/env bash
# Builds bench/gpu/decoder-step/step.cu into build/decoder-step, for the GPU host (sm_90a: bulk copies,
# multicast copies within clusters, mbarriers with transaction counts): bash bench/gpu/decoder-step/build.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p build
rm -f build/decoder-step
nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v bench/gpu/decoder-step/step.cu -o build/decoder-step 2>&1 | grep -E "error|warning|registers|spill" || true
test -x build/decoder-step && echo "build/decoder-step"
