#!/usr/bin/env bash
# A built Llama-shaped model served over HTTP and loaded by `chorus bench`: 64 concurrent sampled
# streams (temperature 0.7, a seed each), prompts from LAMBADA cut to about 100 tokens, 128 new
# tokens; the in-process figure comes from speed.ts's results beside it.
#   source /root/gpu-env/env.sh && bash bench/gpu/llama/serve.sh <built-dir> <name> <tokenizer.model> <prompts.jsonl>
# Knobs: SERVE_CONCURRENCY=64  SERVE_REQUESTS=256  SERVE_PORT=8123  SERVE_DTYPE=fp16  SERVE_EXTRA (more bench flags)
#   SERVE_MAX_SEQUENCE=2048 (max_sequence_length: 64 rows of 4096 on a 7B take the paged cache)
#   SERVE_DEFINITION (more lines of the model definition, such as tensor_parallel: 2)
set -euo pipefail
cd "$(dirname "$0")/../../.."
built=$1 name=$2 tokenizer=$3 prompts=$4
OUT=${OUT:-/tmp/llama/out}
port=${SERVE_PORT:-8123}
repo=$(mktemp -d)
mkdir -p "$repo/models" "$repo/tokenizers" "$repo/pipelines"
cat > "$repo/tokenizers/llama.yaml" <<YAML
description: Llama 2 SentencePiece tokenizer
type: sentencepiece
source: $tokenizer
add_bos: true
YAML
cat > "$repo/models/$name.yaml" <<YAML
description: $name (random weights of the real shape)
engine: generate
source: $built
tokenizer: llama
device: cuda
dtype: ${SERVE_DTYPE:-fp16}
max_batch_size: ${SERVE_CONCURRENCY:-64}
max_sequence_length: ${SERVE_MAX_SEQUENCE:-2048}
${SERVE_DEFINITION:-}
YAML
cat > "$repo/pipelines/$name.yaml" <<YAML
description: $name completion
model: $name
defaults: { max_tokens: 128 }
YAML
ORT_LOGGING_LEVEL=3 node bin/chorus.js serve --repository "$repo" --port "$port" --quiet > "$OUT/serve-$name.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  curl -sf "localhost:$port/v2/health/ready" > /dev/null && break
  kill -0 $server 2>/dev/null || { echo "serve: the server exited; its log:" >&2; tail -20 "$OUT/serve-$name.log" >&2; exit 1; }
  sleep 1
done
node bin/chorus.js bench --url "http://127.0.0.1:$port" --pipeline "$name" --protocol openai --stream \
  --concurrency "${SERVE_CONCURRENCY:-64}" --requests "${SERVE_REQUESTS:-256}" --warmup "${SERVE_CONCURRENCY:-64}" \
  --dataset "$prompts" --prompt-tokens 100 --output-tokens 128 --temperature 0.7 ${SERVE_EXTRA:-} \
  --quiet --out "$OUT/served-$name.json" 2>&1 | tee "$OUT/served-$name.log"
