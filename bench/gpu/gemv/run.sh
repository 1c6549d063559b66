#!/usr/bin/env bash
# The addon's Linear against cuBLAS at TinyLlama's and Llama-2-7B's shapes (about 30 seconds):
#   source /root/gpu-env/env.sh && bash bench/gpu/gemv/run.sh
# Uses build/gemv-bench (bash bench/gpu/gemv/build.sh, where nvcc is); builds it here when missing.
# Prints the table and writes $OUT/gemv-<date>.json (OUT defaults to bench/results).
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
[ -x build/gemv-bench ] || bash bench/gpu/gemv/build.sh
timeout 120 ./build/gemv-bench "$OUT/gemv-$(date -u +%F).json" | tee "$OUT/gemv.log"
