#!/usr/bin/env bash
# Real Llama shapes on the GPU host, Chorus and transformers in one run: make each checkpoint (random
# weights, transformers' save_pretrained), build it with Chorus, decode at batch 1 and 64, then
# transformers eager beside it.
#   source /root/gpu-env/env.sh && bash bench/gpu/llama/run.sh [shape[:dtype]...]
# Shapes: tinyllama-1.1b llama-2-7b llama-3-8b (default: tinyllama-1.1b). Results under $OUT.
# LLAMA_SHARD_GB=N writes the checkpoints in shards; LLAMA_SERVE: see below.
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK=${LLAMA_DIR:-/tmp/llama}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
for spec in "${@:-tinyllama-1.1b}"; do
  shape=${spec%%:*}; dtype=fp16; [ "$spec" != "$shape" ] && dtype=${spec#*:}
  # One fp16 checkpoint per shape: a bf16 run builds it in bf16 (transformers loads it so too).
  torch_dtype=float16
  ckpt=$WORK/$shape-$torch_dtype
  python3 bench/gpu/llama/make.py "$shape" "$ckpt" --dtype "$torch_dtype" ${LLAMA_SHARD_GB:+--shard-gb $LLAMA_SHARD_GB} 2>&1 | tail -1
  ORT_LOGGING_LEVEL=3 node --import tsx bench/gpu/llama/speed.ts "$ckpt" "$WORK" "$shape" "$dtype" 2>&1 | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee -a "$OUT/chorus-$shape-$dtype.log"
  python3 bench/gpu/llama/hf.py "$WORK/$shape-$dtype.json" "$OUT" 2>&1 | grep -v Warning | tee -a "$OUT/hf-$shape-$dtype.log"
  # LLAMA_SERVE=<tokenizer.model>:<prompts.jsonl>: also serve the build and load it over HTTP.
  if [ -n "${LLAMA_SERVE:-}" ]; then
    SERVE_DTYPE=$dtype SERVE_MAX_SEQUENCE=$(python3 -c "import json; print(min(4096, json.load(open('$ckpt/config.json'))['max_position_embeddings']))") bash bench/gpu/llama/serve.sh "$WORK/$shape-$dtype-built" "$shape-$dtype" "${LLAMA_SERVE%%:*}" "${LLAMA_SERVE#*:}" || true
  fi
  rm -rf "$WORK/$shape-$dtype-built"
done
