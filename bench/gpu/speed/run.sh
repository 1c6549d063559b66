#!/usr/bin/env bash
# GPT-2 124M fp16 generation speed on the GPU host, Chorus and Hugging Face in the same run:
#   source /root/gpu-env/env.sh && bash bench/gpu/speed/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK=${SPEED_DIR:-/tmp/speed}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
ORT_LOGGING_LEVEL=3 node --import tsx bench/gpu/speed/chorus.ts "$WORK" 2>&1 | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee "$OUT/chorus.log"
python3 bench/gpu/speed/hf.py "$WORK" "$OUT" 2>&1 | grep -v Warning | tee "$OUT/hf.log"
