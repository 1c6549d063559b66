#!/usr/bin/env bash
# 512-token greedy parity with transformers at real Llama shapes, on the GPU host (TinyLlama: about 2
# minutes; each step has its own time limit):
#   source /root/gpu-env/env.sh && bash bench/gpu/llama/parity.sh [shape...]
# Shapes as make.py takes them (default tinyllama-1.1b; llama-2-7b adds about 3 minutes). For each: the
# fp16 checkpoint (make.py), transformers' greedy ids in fp16 and fp32 (parity.py), then Chorus's
# builds in both against them (parity.ts). Results: $OUT/llama-parity-<shape>.json and .log.
# PARITY_PROMPTS=4 PARITY_PROMPT_LEN=64 PARITY_NEW=512 PARITY_DTYPES=fp16,fp32 set the workload;
# PARITY_TIMEOUT=240 is each of the two steps' limit in seconds (the 7B: PARITY_DTYPES=fp16 PARITY_TIMEOUT=420).
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK=${LLAMA_DIR:-/tmp/llama}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
for shape in "${@:-tinyllama-1.1b}"; do
  ckpt=$WORK/$shape-float16
  timeout 300 python3 bench/gpu/llama/make.py "$shape" "$ckpt" --dtype float16 2>&1 | tail -1
  timeout "${PARITY_TIMEOUT:-240}" python3 bench/gpu/llama/parity.py "$ckpt" "$WORK/parity-reference-$shape.json" --dtypes "${PARITY_DTYPES:-fp16,fp32}" \
    --prompts "${PARITY_PROMPTS:-4}" --prompt-len "${PARITY_PROMPT_LEN:-64}" --new "${PARITY_NEW:-512}" 2>&1 | grep -v Warning | tee "$OUT/llama-parity-$shape.log"
  ORT_LOGGING_LEVEL=3 timeout "${PARITY_TIMEOUT:-240}" node --import tsx bench/gpu/llama/parity.ts "$ckpt" "$WORK" "$shape" "$WORK/parity-reference-$shape.json" "$OUT/llama-parity-$shape.json" 2>&1 \
    | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee -a "$OUT/llama-parity-$shape.log" || true
  rm -rf "$WORK/$shape"-fp*-parity
done
