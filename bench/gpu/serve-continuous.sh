#!/usr/bin/env bash
# Served throughput against the in-process harness on the GPU, in one run (serve-continuous.ts): GPT-2
# 124M and the TinyLlama 1.1B shape (seeded random weights), fp16 on the native engine with CUDA graphs,
# 64 sampled streams (temperature 0.7, top_p 0.9, a seed each) of news prompts cut to about 100 tokens
# with 128 new tokens, on the continuous core and on the step loop. About 5 minutes; every step has its
# own time limit, and each model's JSON keeps what was measured when one is reached.
#   source /root/gpu-env/env.sh && OUT=<dir> bash bench/gpu/serve-continuous.sh
# Knobs: SHARED=../shared (data, tokenizers)  SERVE_WORK=/tmp/serve-continuous-work  SERVE_MODELS="gpt2 tinyllama"
#   SERVE_LIMIT_GPT2=200 (seconds), and serve-continuous.ts's (SERVE_REQUESTS, SERVE_BASELINE, SERVE_HTTP_THREADS).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/serve-continuous}
SHARED=${SHARED:-../shared}
WORK=${SERVE_WORK:-/tmp/serve-continuous-work}
mkdir -p "$OUT" "$WORK"
prompts=$(realpath "$SHARED/data/cnndm/summeval_cnndm_test100.jsonl")
export ORT_LOGGING_LEVEL=3
run() { # name checkpoint tokenizer-yaml limit-seconds
  SERVE_LIMIT_S=$4 timeout $(($4 + 15)) node --import tsx bench/gpu/serve-continuous.ts "$1" "$2" "$3" "$prompts" "$OUT" 2>&1 \
    | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee "$OUT/serve-continuous-$1.log"
}
for model in ${SERVE_MODELS:-gpt2 tinyllama}; do
  case $model in
    gpt2)
      [ -f "$WORK/gpt2/config.json" ] || timeout 60 node bin/chorus.js make-checkpoint --arch gpt2 --size real --seed 1 --out "$WORK/gpt2"
      run gpt2 "$WORK/gpt2" tokenizers/gpt2.yaml "${SERVE_LIMIT_GPT2:-200}" ;;
    tinyllama)
      timeout 90 python3 bench/gpu/llama/make.py tinyllama-1.1b "$WORK/tinyllama" --dtype float16 2>&1 | tail -1
      printf 'type: sentencepiece\nsource: %s\nadd_bos: true\n' "$(realpath "$SHARED/tokenizers/llama2-32k/tokenizer.model")" > "$WORK/llama-tokenizer.yaml"
      run tinyllama "$WORK/tinyllama" "$WORK/llama-tokenizer.yaml" 170 ;;
    *) echo "unknown model $model (gpt2, tinyllama)" >&2 ;;
  esac
done
ls -l "$OUT"/serve-continuous-*.json
