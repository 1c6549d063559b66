#!/usr/bin/env bash
# Parity of Chorus-built models with Hugging Face transformers, run on the GPU host:
#   source /root/gpu-env/env.sh && bash bench/gpu/parity/run.sh [name-regexp]
# Random GPT-2 124M and Qwen2-0.5B-shaped checkpoints (fp32 and fp16) and three tiny ones; results in
# $OUT/parity.json, golden fixtures for the tiny ones in $OUT/<name>.json (-> test/fixtures/golden/).
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK=${PARITY_DIR:-/tmp/parity}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
node --import tsx bench/gpu/parity/chorus.ts "$WORK" "${1:-}" 2>&1 | tee "$OUT/chorus.log"
PYTHON=$(command -v python3 || command -v python)
"$PYTHON" bench/gpu/parity/hf.py "$WORK" "$OUT" 2>&1 | grep -v Warning | tee "$OUT/hf.log"
