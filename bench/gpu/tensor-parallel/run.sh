#!/usr/bin/env bash
# Tensor parallelism on a two-GPU host, in one run: the NCCL collectives' check, then a Llama-2-13B
# shape (random fp16 weights written by transformers) at TP=1 and TP=2 (speed at batch 1 and 64,
# greedy parity over 512 tokens, the memory refusal at TP=1 and the load at TP=2), transformers'
# device_map="auto" beside it, and the fp32 parity on a small shape (Qwen2-0.5B's, made by Chorus).
#   source /root/gpu-env/env.sh && bash bench/gpu/tensor-parallel/run.sh
# Results under $OUT (default $WORK/out); TP_SHAPE=llama-2-7b for a smaller run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK=${TP_DIR:-/tmp/tp}
OUT=${OUT:-$WORK/out}
SHAPE=${TP_SHAPE:-llama-2-13b}
mkdir -p "$WORK" "$OUT"
# pip's NCCL (torch's) where the loader does not find libnccl.so.2 itself.
if [ -z "${CHORUS_NCCL_LIBRARY:-}" ] && ! ldconfig -p | grep -q libnccl.so.2; then
  lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib", "libnccl.so.2"))' 2>/dev/null || true)
  [ -n "$lib" ] && [ -f "$lib" ] && export CHORUS_NCCL_LIBRARY=$lib
fi
echo "NCCL: ${CHORUS_NCCL_LIBRARY:-libnccl.so.2 from the loader's paths}"
node --import tsx bench/gpu/tensor-parallel/collectives.ts "$OUT" 2>&1 | grep -v onnxruntime | tee "$OUT/collectives.log"
ckpt=$WORK/$SHAPE-float16
python3 bench/gpu/llama/make.py "$SHAPE" "$ckpt" --dtype float16 2>&1 | tail -1
ORT_LOGGING_LEVEL=3 node --import tsx bench/gpu/tensor-parallel/speed.ts "$ckpt" "$WORK" "$SHAPE" fp16 2>&1 | grep --line-buffered -v onnxruntime | tee "$OUT/chorus-$SHAPE-fp16.log"
python3 bench/gpu/tensor-parallel/hf.py "$WORK/$SHAPE-fp16-tp.json" "$OUT" 2>&1 | grep -v Warning | tee "$OUT/hf-$SHAPE-fp16.log"
rm -rf "$WORK/$SHAPE-fp16-tp1" "$WORK/$SHAPE-fp16-tp2"
# fp32 on a small shape: the ids must be equal throughout.
node --import tsx -e "import('./src/modelbuild/index.ts').then((m) => m.makeCheckpoint({ arch: 'llama', size: 'real', seed: 3, out: '$WORK/small-ckpt' }))"
TP_PARTS=parity,memory ORT_LOGGING_LEVEL=3 node --import tsx bench/gpu/tensor-parallel/speed.ts "$WORK/small-ckpt" "$WORK" small fp32 2>&1 | grep --line-buffered -v onnxruntime | tee "$OUT/chorus-small-fp32.log"
cp "$WORK"/*-tp.json "$OUT"/ 2>/dev/null || true
