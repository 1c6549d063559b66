#!/usr/bin/env bash
# Mistral-7B-v0.1 (fp16) and Gemma-2-2B (bf16) shapes on the GPU host, Chorus and transformers in one
# run: make each checkpoint (random weights, transformers' save_pretrained), build it with Chorus for
# the native engine, decode at batch 1 and 64 on both caches (bench/gpu/llama/speed.ts), then
# transformers eager beside it with the HBM floor at batch 1 (bench/gpu/llama/hf.py).
#   source /root/gpu-env/env.sh && bash bench/gpu/window/run.sh [shape[:dtype]...]
# Shapes: mistral-7b gemma-2-2b (default: mistral-7b:fp16 gemma-2-2b:bf16). Results under $OUT.
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK=${WINDOW_DIR:-/tmp/window}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
for spec in "${@:-mistral-7b:fp16 gemma-2-2b:bf16}"; do
  for one in $spec; do
    shape=${one%%:*}; dtype=fp16; [ "$one" != "$shape" ] && dtype=${one#*:}
    torch_dtype=$([ "$dtype" = bf16 ] && echo bfloat16 || echo float16)
    ckpt=$WORK/$shape-$torch_dtype
    python3 bench/gpu/window/make.py "$shape" "$ckpt" --dtype "$torch_dtype" 2>&1 | tail -1
    ORT_LOGGING_LEVEL=3 node --import tsx bench/gpu/llama/speed.ts "$ckpt" "$WORK" "$shape" "$dtype" 2>&1 | grep --line-buffered -v onnxruntime | tee -a "$OUT/chorus-$shape-$dtype.log"
    python3 bench/gpu/llama/hf.py "$WORK/$shape-$dtype.json" "$OUT" 2>&1 | grep -v Warning | tee -a "$OUT/hf-$shape-$dtype.log"
    rm -rf "$WORK/$shape-$dtype-built"
  done
done
