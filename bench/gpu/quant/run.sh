#!/usr/bin/env bash
# Weight-only quantization on the GPU: one Llama shape (random weights, bench/gpu/llama/make.py) built
# fp16, then int8 and int4 (fp16 activations), each decoded through the native engine (cuda graphs,
# slot cache then paged cache) at batch 1 and 64 by bench/gpu/llama/speed.ts, in one run so the ratios
# compare like with like; summary.ts prints tokens/s and the ratios to fp16 and writes them as JSON.
#   source /root/gpu-env/env.sh && bash bench/gpu/quant/run.sh <shape> [variants]
# Shapes: tinyllama-1.1b, llama-2-7b. Variants: any of checkpoint (fp16), int8, int4, comma-separated
# (default all three). Results: $OUT/quant-<shape>.json and the logs beside it; the summary covers every
# variant run so far in $QUANT_DIR (default /tmp/quant), so a 7B shape can be split over two commands
# on one machine (`llama-2-7b checkpoint,int8`, then `llama-2-7b int4`). Each variant (build and runs)
# has its own limit (QUANT_STEP_TIMEOUT seconds, default 120) and making the checkpoint 150 s, so a
# command of three variants stays under 9 minutes; a variant that fails or times out says so.
# QUANT_CACHES=slots,paged (default both: the paged cache's load line shows the tokens it holds);
# LLAMA_CUDA_GRAPH=0 runs without CUDA graphs. Within 9 minutes a command:
#   bash bench/gpu/quant/run.sh tinyllama-1.1b
#   QUANT_STEP_TIMEOUT=300 bash bench/gpu/quant/run.sh llama-2-7b checkpoint
#   QUANT_STEP_TIMEOUT=250 bash bench/gpu/quant/run.sh llama-2-7b int8,int4
set -uo pipefail
cd "$(dirname "$0")/../../.."
shape=${1:?usage: run.sh <shape> [checkpoint,int8,int4]}
variants=${2:-checkpoint,int8,int4}
WORK=${QUANT_DIR:-/tmp/quant}
OUT=${OUT:-$WORK/out}
limit=${QUANT_STEP_TIMEOUT:-120}
mkdir -p "$WORK" "$OUT"
ckpt=$WORK/$shape-float16
timeout 150 python3 bench/gpu/llama/make.py "$shape" "$ckpt" --dtype float16 2>&1 | tail -1
for weights in ${variants//,/ }; do
  LLAMA_WEIGHTS=$weights LLAMA_CACHES=${QUANT_CACHES:-slots,paged} ORT_LOGGING_LEVEL=3 \
    timeout "$limit" node --import tsx bench/gpu/llama/speed.ts "$ckpt" "$WORK" "$shape" fp16 2>&1 \
    | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee -a "$OUT/quant-$shape-$weights.log"
  echo "$shape $weights: exit ${PIPESTATUS[0]}" | tee -a "$OUT/quant-$shape-$weights.log"
  rm -rf "$WORK/$shape-fp16"*-built
done
node --import tsx bench/gpu/quant/summary.ts "$WORK" "$shape" "$OUT/quant-$shape.json"
