#!/usr/bin/env bash
# One Llama shape decoded by speed.ts under several settings in one run, on the same checkpoint: each
# variant is a tag and the environment it runs with (build and engine knobs alike), e.g.
#   source /root/gpu-env/env.sh && bash bench/gpu/llama/ab.sh tinyllama-1.1b 'gqa' 'paged CHORUS_SLOT_PAGED=1'
# speed.ts's knobs (LLAMA_CACHES, LLAMA_BATCHES, ...) apply to every variant; AB_DTYPE=bf16 builds in
# bf16 from a bfloat16 checkpoint (default fp16). Writes <work>/<shape>-<tag>-<dtype>.json and the log
# under $OUT. Variants that differ in engine knobs alone can share one build: give each
# LLAMA_BUILT=<dir> (the first builds there, the rest run it; the folder is kept), e.g.
#   bash bench/gpu/llama/ab.sh llama-2-7b 'a LLAMA_BUILT=/tmp/b/7b' 'b LLAMA_BUILT=/tmp/b/7b CHORUS_X=1'
set -euo pipefail
cd "$(dirname "$0")/../../.."
shape=${1:?usage: ab.sh <shape> '<tag> [VAR=value...]'...}
shift
WORK=${LLAMA_DIR:-/tmp/llama}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
dtype=${AB_DTYPE:-fp16}
torch_dtype=float16; [ "$dtype" = bf16 ] && torch_dtype=bfloat16
ckpt=$WORK/$shape-$torch_dtype
python3 bench/gpu/llama/make.py "$shape" "$ckpt" --dtype "$torch_dtype" 2>&1 | tail -1
for variant in "$@"; do
  read -r tag settings <<<"$variant"
  echo "== $shape $tag ${settings:-}" | tee -a "$OUT/ab-$shape.log"
  env ${settings:-} ORT_LOGGING_LEVEL=3 node --import tsx bench/gpu/llama/speed.ts "$ckpt" "$WORK" "$shape-$tag" "$dtype" 2>&1 | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee -a "$OUT/ab-$shape.log"
  rm -rf "$WORK/$shape-$tag-$dtype-built"
done
