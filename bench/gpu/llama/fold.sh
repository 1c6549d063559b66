#!/usr/bin/env bash
# The slot decoders' RMSNorms folded into the Linear after them (the default) against kept as their own
# kernels (CHORUS_FOLD_NORMS=0), on the same checkpoints in one run: greedy, prompts of 128 tokens, 128
# new tokens, batch 1 and 64, each cache of LLAMA_CACHES (speed.ts's knobs apply).
#   source /root/gpu-env/env.sh && bash bench/gpu/llama/fold.sh [shape...]
# Shapes as run.sh takes them (default tinyllama-1.1b). Writes <work>/<shape>-fold{0,1}-fp16.json and
# the log under $OUT.
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK=${LLAMA_DIR:-/tmp/llama}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
for shape in "${@:-tinyllama-1.1b}"; do
  ckpt=$WORK/$shape-float16
  python3 bench/gpu/llama/make.py "$shape" "$ckpt" --dtype float16 2>&1 | tail -1
  for fold in 0 1; do
    CHORUS_FOLD_NORMS=$fold ORT_LOGGING_LEVEL=3 node --import tsx bench/gpu/llama/speed.ts "$ckpt" "$WORK" "$shape-fold$fold" fp16 2>&1 | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee -a "$OUT/fold-$shape.log"
    rm -rf "$WORK/$shape-fold$fold-fp16-built"
  done
done
