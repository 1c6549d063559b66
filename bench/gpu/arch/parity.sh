#!/usr/bin/env bash
# The newer decoder families (test/fixtures/arch: llama3, qwen3, mistral, phi3, gemma2) against
# transformers' goldens on CUDA, fp32 and fp16, through the runtime, the native engine (slots and paged)
# and the TypeScript engine (see parity.ts); fp16 rows against transformers' own fp16 ids (hf16.py). On the GPU host, with the native addon built:
#   source /root/gpu-env/env.sh && bash bench/gpu/arch/parity.sh [family-regexp]
# Results: $OUT/arch-parity.json and $OUT/arch-parity.log. At most ARCH_PARITY_TIMEOUT seconds (default 480).
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK=${ARCH_DIR:-/tmp/arch-parity}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
# transformers' own fp16/bf16 greedy ids on CUDA: the reference for the fp16 rows.
timeout -k 10 120 python3 bench/gpu/arch/hf16.py "$WORK/hf16.json" 2>&1 | grep -v Warning | tee "$OUT/arch-hf16.log" || true
[ -f "$WORK/hf16.json" ] && export HF_GREEDY="$WORK/hf16.json"
ORT_LOGGING_LEVEL=3 timeout -k 10 "${ARCH_PARITY_TIMEOUT:-480}" node --import tsx bench/gpu/arch/parity.ts "$WORK" "$OUT" "${1:-}" "${ARCH_DEVICE:-cuda}" 2>&1 | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee "$OUT/arch-parity.log"
