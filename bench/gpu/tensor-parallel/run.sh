#!/usr/bin/env bash
# Tensor parallelism on a two-GPU host, in order: the NCCL collectives' check (collectives.ts), the
# tiny models at TP=2 against TP=1 in every setting of the native engine (tiny-check.ts), then the
# Llama-2-13B-shape run (bench/gpu/tp/run.sh: speed, parity, memory, transformers beside it).
#   source /root/gpu-env/env.sh && OUT=<dir> bash bench/gpu/tensor-parallel/run.sh [quick]
# quick: the two checks alone (a few minutes). libnccl.so.2 is taken from the loader's paths, else
# from pip's nvidia-nccl-cu12 (torch's) through CHORUS_NCCL_LIBRARY.
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/tp-out}
mkdir -p "$OUT"
export ORT_LOGGING_LEVEL=3
# NVLink multicast (NVLS) stays off unless asked for: these runs measure the plain NCCL paths.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
if [ -z "${CHORUS_NCCL_LIBRARY:-}" ] && ! ldconfig -p | grep -q 'libnccl.so.2 '; then
  lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
  if [ -n "$lib" ] && [ -f "$lib" ]; then export CHORUS_NCCL_LIBRARY=$lib; fi
fi
echo "NCCL: ${CHORUS_NCCL_LIBRARY:-libnccl.so.2 on the loader path}"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
node --import tsx bench/gpu/tensor-parallel/collectives.ts "$OUT" 2>&1 | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee "$OUT/tp-collectives.log"
node --import tsx bench/gpu/tensor-parallel/tiny-check.ts "$OUT" 2>&1 | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee "$OUT/tp-tiny-check.log"
[ "${1:-}" = quick ] && exit 0
OUT=$OUT bash bench/gpu/tp/run.sh all
