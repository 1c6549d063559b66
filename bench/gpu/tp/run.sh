#!/usr/bin/env bash
# Tensor parallelism on a two-GPU host: a Llama-2-13B shape (random fp16 weights made by transformers)
# built whole and split in 2, served as model definitions with tensor_parallel 1 and 2 on the native
# engine; greedy tokens/s at batch 1 and 64 (128 new tokens), greedy ids of TP=2 against TP=1 (512
# tokens, fp16; and fp32 on a small random shape and on stories260K, a small trained Llama), TP=2 over
# its default paged cache and over slots (paged_cache: false), transformers' device_map="auto" beside
# it, and the memory check: with gpu_memory_utilization lowered below the weights, TP=1 is refused and
# TP=2 serves. TP=2's ids are counted against TP=1's step by step from TP=1's prefix (speed.ts,
# TP_REFERENCE), so one near-tie does not decide the rest of a row.
#   source /root/gpu-env/env.sh && OUT=<dir> bash bench/gpu/tp/run.sh [prepare|measure|all]
# prepare: checkpoints and builds (about 5 minutes); measure: the rest (about 6); all (the default):
# both. Each phase has its own time limit and is skipped once it succeeded (markers in $TP_WORK/done),
# so a run cut short picks up where it stopped when run again on the same host. Everything measured
# is kept under $TP_WORK/results and copied to $OUT at the end; the table is printed last, and
# tp-llama-2-13b.json written there and, dated, under bench/results/. Phase timings: tp-phases.tsv.
# Knobs: TP_WORK=/tmp/tp-bench  TP_FRESH=1 (redo every phase)  TP_SERVE=auto (chorus serve + chorus
#   bench over the TP=2 definition when less than 8 minutes went by; 1: always, 0: never)  SHARED=../shared
set -uo pipefail
cd "$(dirname "$0")/../../.."
WORK=${TP_WORK:-/tmp/tp-bench}
RESULTS=$WORK/results
SHARED=${SHARED:-../shared}
STAGE=${1:-all}
[ -n "${TP_FRESH:-}" ] && rm -rf "$WORK/done"
mkdir -p "$WORK/done" "$RESULTS"
export ORT_LOGGING_LEVEL=3
PHASES=$RESULTS/tp-phases.tsv
STARTED=$(date +%s)
[ -f "$PHASES" ] || printf 'phase\tseconds\texit\n' > "$PHASES"
CKPT=$WORK/llama-2-13b
SMALL=$WORK/llama-small
STORIES=$SHARED/models/stories260K/hf
copy_out() { [ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp -r "$RESULTS/." "$OUT/"; }
trap copy_out EXIT

# phase <name> <limit-seconds> <command...>: runs the command unless it succeeded before; logs and times it.
phase() {
  local name=$1 limit=$2
  shift 2
  if [ -e "$WORK/done/$name" ]; then echo "== $name: done before"; return 0; fi
  echo "== $name (limit ${limit} s)"
  local t0 rc
  t0=$(date +%s.%N)
  timeout "$limit" "$@" 2>&1 | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee -a "$RESULTS/tp-$name.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] && touch "$WORK/done/$name"
  printf '%s\t%s\t%s\n' "$name" "$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }")" "$rc" | tee -a "$PHASES"
}

# build <checkpoint> <out> <dtype> <tensor-parallel>: the slot (and paged) decoders the native engine runs on CUDA.
build() {
  rm -rf "$2" && node bin/chorus.js build "$1" -o "$2" --dtype "$3" --flavor cuda --slot-decoder --tensor-parallel "$4"
}

# chorus <built-dir> <tensor-parallel> <name> [VAR=value...]: speed.ts on a definition of the build.
chorus() {
  local dir=$1 tp=$2 name=$3
  shift 3
  env "$@" node --import tsx bench/gpu/tp/speed.ts "$dir" "$tp" "$name" "$RESULTS"
}
export -f build chorus
export WORK RESULTS

if [ "$STAGE" = prepare ] || [ "$STAGE" = all ]; then
  phase checkpoint 300 bash -c "rm -rf $CKPT && python3 bench/gpu/llama/make.py llama-2-13b $CKPT --dtype float16 --shard-gb 5"
  phase checkpoint-small 120 bash -c "rm -rf $SMALL && python3 bench/gpu/llama/make.py llama-small $SMALL --dtype float32"
  # The two 13B builds side by side (one CPU core each, memory bounded by the largest weight).
  phase build 560 bash -c "
    build $CKPT $WORK/tp1 fp16 1 > $RESULTS/tp-build-tp1.log 2>&1 & a=\$!
    build $CKPT $WORK/tp2 fp16 2 > $RESULTS/tp-build-tp2.log 2>&1 & b=\$!
    wait \$a; ra=\$?; wait \$b; rb=\$?
    grep -h -E '^built|weights in' $RESULTS/tp-build-tp1.log $RESULTS/tp-build-tp2.log; exit \$((ra + rb))"
  phase build-small 120 bash -c "build $SMALL $WORK/small-tp1 fp32 1 && build $SMALL $WORK/small-tp2 fp32 2 &&
    build $STORIES $WORK/stories-tp1 fp32 1 && build $STORIES $WORK/stories-tp2 fp32 2"
fi

if [ "$STAGE" = measure ] || [ "$STAGE" = all ]; then
  phase chorus-tp1 400 bash -c "chorus $WORK/tp1 1 tp1"
  phase chorus-tp2 400 bash -c "chorus $WORK/tp2 2 tp2 TP_REFERENCE=$RESULTS/tp1.json"
  phase chorus-tp2-slots 400 bash -c "chorus $WORK/tp2 2 tp2-slots TP_PAGED=false TP_REFERENCE=$RESULTS/tp1.json"
  # fp32: TP=1 over the paged cache too, so that only the split differs (TP=1's slot decoder runs fp32
  # attention on the CPU); stories260K's context is 512: prompts of 16, 480 ids.
  small="TP_DTYPE=fp32 TP_BATCHES=1 TP_NEW=64 TP_PAGED=true"
  phase small-fp32 300 bash -c "chorus $WORK/small-tp1 1 small-tp1 $small && chorus $WORK/small-tp2 2 small-tp2 $small TP_REFERENCE=$RESULTS/small-tp1.json &&
    chorus $WORK/stories-tp1 1 stories-tp1 $small TP_PROMPT=16 TP_IDS=480 && chorus $WORK/stories-tp2 2 stories-tp2 $small TP_PROMPT=16 TP_IDS=480 TP_REFERENCE=$RESULTS/stories-tp1.json"
  phase transformers 420 python3 bench/gpu/tp/hf.py "$CKPT" "$RESULTS/hf.json"
  # The memory check: each GPU's share set to 80% of the weights' bytes, one short request.
  util=$(python3 -c "
import os, subprocess
weights = sum(os.path.getsize(os.path.join('$CKPT', f)) for f in os.listdir('$CKPT') if f.endswith('.safetensors'))
total = min(int(x) for x in subprocess.check_output(['nvidia-smi', '--query-gpu=memory.total', '--format=csv,noheader,nounits'], text=True).split()) * 2**20
print(f'{0.8 * weights / total:.3f}')")
  echo "memory check: gpu_memory_utilization $util"
  memory="TP_UTIL=$util TP_MEASURE=0 TP_BATCHES=1 TP_NEW=16 TP_IDS=0 TP_ID_ROWS=1"
  phase memory-tp1 300 bash -c "chorus $WORK/tp1 1 memory-tp1 $memory"
  phase memory-tp2 300 bash -c "chorus $WORK/tp2 2 memory-tp2 $memory"
  serve=${TP_SERVE:-auto}
  if [ "$serve" = 1 ] || { [ "$serve" = auto ] && [ $(($(date +%s) - STARTED)) -lt 480 ]; }; then
    phase served 300 env OUT="$RESULTS" SERVE_DEFINITION="tensor_parallel: 2" SERVE_REQUESTS=128 SERVE_MAX_SEQUENCE=512 \
      bash bench/gpu/llama/serve.sh "$WORK/tp2" tp2 "$(realpath "$SHARED/tokenizers/llama2-32k/tokenizer.model")" "$(realpath "$SHARED/data/lambada/lambada_test.jsonl")"
  fi
  python3 bench/gpu/tp/report.py "$RESULTS" "$CKPT"
fi
