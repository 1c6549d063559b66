#!/usr/bin/env bash
# QuantLinear's kernels against ONNX Runtime's MatMulNBits and fp16 MatMul / the addon's Linear, on the
# GPU host (see bench/gpu/quant/kernels.ts), in well under 3 minutes:
#   source /root/gpu-env/env.sh && npm run build:native && OUT=/tmp/quant bash bench/gpu/quant/kernels.sh
# Writes $OUT/quant-kernels.json and $OUT/quant-kernels.log.
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
export OUT
ORT_LOGGING_LEVEL=3 timeout 175 node --import tsx bench/gpu/quant/kernels.ts 2>&1 | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee "$OUT/quant-kernels.log"
