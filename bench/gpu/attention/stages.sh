#!/usr/bin/env bash
# PagedAttention's tensor-core decode steps at 64 rows with heads of 128 in 3 stages a warp where the
# blocks are few (the default) against 2 (CHORUS_PAGED_MMA_STAGES=2), over several row lengths, on the
# GPU host (about 20 seconds a length and setting):
#   bash bench/gpu/attention/build.sh (here), then there: bash bench/gpu/attention/stages.sh
# STAGES_LENGTHS (default 192,1024,2048), STAGES_MODELS (default llama-3-8b,qwen3-1.7b,llama-2-7b) and
# STAGES_ROWS (default 64) choose the cases; writes $OUT/paged-stages-<length>-<setting>.json (OUT
# defaults to bench/results) and prints each run's table.
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
[ -x build/paged-attention-time ] || { echo "build/paged-attention-time is missing: bash bench/gpu/attention/build.sh" >&2; exit 2; }
lengths=${STAGES_LENGTHS:-192,1024,2048}
for length in ${lengths//,/ }; do
  for setting in default 2; do
    knobs=()
    [ "$setting" = 2 ] && knobs=(CHORUS_PAGED_MMA_STAGES=2)
    echo "== $length positions, stages: $setting"
    env "${knobs[@]}" PAGED_LENGTH="$length" PAGED_ROWS="${STAGES_ROWS:-64}" \
      PAGED_MODELS="${STAGES_MODELS:-llama-3-8b,qwen3-1.7b,llama-2-7b}" timeout 300 ./build/paged-attention-time "$OUT/paged-stages-$length-$setting.json" | grep '^| [a-z]' || true
  done
done
