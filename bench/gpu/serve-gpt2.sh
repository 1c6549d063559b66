#!/usr/bin/env bash
# The capacity plan's GPU replica measured over HTTP: `chorus serve` on the GPU overlay's repository
# (deploy/kubernetes/overlays/gpu/repository: GPT-2 124M fp16, native engine, batches of 64), loaded by
# `chorus bench` with streamed requests of 128-token prompts and 256 new tokens at several concurrencies;
# it prints chorus bench's table (p50 / p90 / p99 TTFT among it) and writes its JSON.
#   source /root/gpu-env/env.sh && bash bench/gpu/serve-gpt2.sh
# Knobs: SERVE_CONCURRENCY=16,64,128  SERVE_REQUESTS=512  SERVE_PORT=8124  OUT=/tmp/serve-gpt2
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/serve-gpt2}
port=${SERVE_PORT:-8124}
mkdir -p "$OUT"
[ -d "$OUT/gpt2" ] || node bin/chorus.js make-checkpoint --arch gpt2 --size real --seed 1 --out "$OUT/gpt2"
CHORUS_REPOSITORY=deploy/kubernetes/overlays/gpu/repository CHORUS_LOAD=gpt2 CHORUS_PORT=$port CHORUS_QUIET=1 \
  ORT_LOGGING_LEVEL=3 node bin/chorus.js serve --set-source "gpt2=$OUT/gpt2" > "$OUT/serve.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 900); do curl -sf "localhost:$port/v2/health/ready" > /dev/null && break; sleep 1; done
node bin/chorus.js bench --url "http://127.0.0.1:$port" --pipeline gpt2 --protocol openai --stream \
  --concurrency "${SERVE_CONCURRENCY:-16,64,128}" --requests "${SERVE_REQUESTS:-512}" --warmup 64 \
  --prompt-tokens 128 --output-tokens 256 --quiet \
  --out "$OUT/chorus-bench-gpt2-h100-$(date -u +%F).json" 2>&1 | tee "$OUT/bench.log"
