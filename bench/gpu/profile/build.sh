#!/usr/bin/env bash
# Builds the kernel tracer (kernel-trace.cc) on a machine with the CUDA toolkit's CUPTI headers, into
# build/profile/ with the libcupti it links, for the GPU host: bash bench/gpu/profile/build.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
CUDA=${CUDA_HOME:-/usr/local/cuda-13.0}
mkdir -p build/profile
g++ -std=c++17 -O2 -shared -fPIC -I"$CUDA/include" bench/gpu/profile/kernel-trace.cc -o build/profile/kernel-trace.so -L"$CUDA/lib" -lcupti
cp "$CUDA/lib/libcupti.so.13" build/profile/
echo "build/profile/kernel-trace.so"
