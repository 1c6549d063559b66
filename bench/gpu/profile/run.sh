#!/usr/bin/env bash
# Where a decode step's time goes on the GPU host: each case of steps.ts runs once under the kernel
# tracer (build/profile/, from build.sh), then summary.ts splits its measured window into kernel time
# inside the captured graphs, kernel time outside them, copies and idle gaps, and lists the kernels.
#   source /root/gpu-env/env.sh && bash bench/gpu/profile/run.sh '<case>' ['<case>' ...]
#   a case: '<model> <batch> [greedy|beam4] [engine flag...]' as steps.ts takes it
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK=${PROFILE_DIR:-/tmp/profile}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
for spec in "$@"; do
  tag=$(echo "$spec" | tr ' /' '--')
  CUDA_INJECTION64_PATH=$PWD/build/profile/kernel-trace.so LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/build/profile CHORUS_KERNEL_TRACE=$WORK/$tag.csv \
    ORT_LOGGING_LEVEL=3 node --import tsx bench/gpu/profile/steps.ts "$WORK" $spec "$WORK/$tag.json" 2>&1 | grep -v '\[[VIW]:onnxruntime'
  node --import tsx bench/gpu/profile/summary.ts "$WORK/$tag.csv" "$WORK/$tag.json" "$OUT/profile-$tag.json"
done
