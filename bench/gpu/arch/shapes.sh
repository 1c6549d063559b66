#!/usr/bin/env bash
# Real shapes of the newer decoder families on the GPU host: random weights made by transformers from
# the hub's configs (bench/gpu/llama/make.py), built with Chorus (fp16; bf16 for Gemma 2), greedy on the
# native engine at batch 1 and 64 (128-token prompts, 128 new tokens; contiguous slots with CUDA graphs,
# the paged cache where the slots fail), transformers eager beside it in the same run
# (bench/gpu/llama/hf.py), and each model's HBM floor (weight bytes / 3.35 TB/s) with the share of it
# reached at batch 1. Two commands of under 9 minutes each on an H100:
#   source /root/gpu-env/env.sh && bash bench/gpu/arch/shapes.sh llama-3.2-1b qwen3-1.7b phi-3-mini-4k
#   source /root/gpu-env/env.sh && bash bench/gpu/arch/shapes.sh mistral-7b-v0.1 gemma-2-2b
# Each step runs under `timeout`, inside ARCH_BUDGET seconds for the whole command (default 500); a
# model that cannot start with 90 s left is skipped, and said so. Checkpoints and builds are removed
# after each model (ARCH_KEEP=1 keeps the checkpoints). ARCH_CACHES=slots,paged measures both caches.
# Results: $OUT/<model>-<dtype>.json (hf.py's), $OUT/arch-shapes.log, and a table at the end.
set -uo pipefail
cd "$(dirname "$0")/../../.."
WORK=${ARCH_DIR:-/tmp/arch-shapes}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
LOG=$OUT/arch-shapes.log
BUDGET=${ARCH_BUDGET:-500}
START=$SECONDS
[ $# -gt 0 ] || set -- llama-3.2-1b qwen3-1.7b phi-3-mini-4k mistral-7b-v0.1 gemma-2-2b

# Seconds step $1 may take: at most $2, and never past the budget (less 10 s for the table).
cap() { local left=$((BUDGET - (SECONDS - START) - 10)); [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }
say() { echo "$*" | tee -a "$LOG"; }

ran=()
for model in "$@"; do
  dtype=fp16; torch_dtype=float16
  case $model in gemma-2-2b) dtype=bf16; torch_dtype=bfloat16 ;; esac
  if [ $((BUDGET - (SECONDS - START))) -lt 90 ]; then say "$model: skipped, $((SECONDS - START)) s of the ${BUDGET} s budget spent"; continue; fi
  ckpt=$WORK/$model-$torch_dtype
  say "== $model $dtype ($((SECONDS - START)) s)"
  timeout -k 10 "$(cap 240)" python3 bench/gpu/llama/make.py "$model" "$ckpt" --dtype "$torch_dtype" 2>&1 | grep -v Warning | tail -2 | tee -a "$LOG"
  if [ ! -f "$ckpt/config.json" ]; then say "$model: make.py failed or ran out of time"; rm -rf "$ckpt"; continue; fi
  rm -f "$WORK/$model-$dtype.json"
  LLAMA_CACHES=${ARCH_CACHES:-slots} LLAMA_FALLBACK=paged LLAMA_MAX_SEQUENCE=${ARCH_MAX_SEQUENCE:-2048} ORT_LOGGING_LEVEL=3 \
    timeout -k 10 "$(cap 330)" node --import tsx bench/gpu/llama/speed.ts "$ckpt" "$WORK" "$model" "$dtype" 2>&1 | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee -a "$LOG"
  status=${PIPESTATUS[0]}
  if [ -f "$WORK/$model-$dtype.json" ]; then
    PYTHONUNBUFFERED=1 timeout -k 10 "$(cap 240)" python3 bench/gpu/llama/hf.py "$WORK/$model-$dtype.json" "$OUT" 2>&1 | grep -v Warning | tee -a "$LOG"
    ran+=("$model-$dtype")
  else
    say "$model: the Chorus build or run failed (exit $status; 124: out of time), its output above"
  fi
  rm -rf "$WORK/$model-$dtype-built"
  [ "${ARCH_KEEP:-0}" = 1 ] || rm -rf "$ckpt"
done
say "== done in $((SECONDS - START)) s"
[ ${#ran[@]} -eq 0 ] || python3 bench/gpu/arch/summary.py "$OUT" "${ran[@]}" | tee -a "$LOG"
