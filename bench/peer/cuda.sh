#!/usr/bin/env bash
# The CUDA side-by-side: Chorus (native engine, fp16, CUDA graphs) and node-llama-cpp 3.21.1 (llama.cpp
# built on the host for sm_90, every layer on the GPU, GGUF f16 written by `chorus export gguf`) on
# TinyLlama-1.1B- and Llama-2-7B-shaped random weights: 96-token prompts, greedy, 128 new tokens, batch 1
# and 16 concurrent requests. Prints the table; JSON and logs under $OUT (default /tmp/peer/out).
# Before, on the CPU machine: ../shared/gpu/stage and bash bench/peer/stage.sh; send the .device/pK parts,
# then the .device/peer-pK parts (bash .device/peer-pK/recv.sh). Then, on the host:
#   [ -d /root/gpu-env ] || exit 3; source /root/gpu-env/env.sh && bash bench/peer/cuda.sh
# Knobs: PEER_MODELS=tinyllama-1.1b (leaves out the 7B), PEER_WORK (/tmp/peer), OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${PEER_WORK:-/tmp/peer}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK/checkpoints" "$OUT"
[ -d /root/peer-modules/node_modules/node-llama-cpp ] || { echo "cuda.sh: no /root/peer-modules; send the .device/peer-pK parts first (bench/peer/stage.sh)" >&2; exit 2; }
[ -e bench/peer/node_modules ] || ln -s /root/peer-modules/node_modules bench/peer/node_modules
t0=$SECONDS
stamp() { echo "[$((SECONDS - t0)) s] $*"; }
# The prebuilt CUDA binary's PTX is newer than the host's CUDA 13.0 driver takes: build from the sources
# the package ships (offline), once per host; getLlama('lastBuild') then loads this build.
if ! ls -d bench/peer/node_modules/node-llama-cpp/llama/localBuilds/*cuda* >/dev/null 2>&1; then
  stamp "building llama.cpp with CUDA for sm_90 (about 6 minutes on 16 cores)"
  export PATH=/usr/local/cuda/bin:$PATH NODE_LLAMA_CPP_CMAKE_OPTION_CMAKE_CUDA_ARCHITECTURES=90
  (cd bench/peer && node node_modules/node-llama-cpp/dist/cli/cli.js source download --gpu cuda --noUsageExample) > "$OUT/llama-build.log" 2>&1 ||
    { tail -40 "$OUT/llama-build.log"; exit 1; }
fi
stamp "random fp16 checkpoints"
python3 bench/peer/make_checkpoints.py "$WORK/checkpoints" "${PEER_MODELS:-tinyllama-1.1b,llama-2-7b}" 2>&1 | grep -v Warning || true
stamp "side by side (each model: chorus build, chorus export gguf, then the runs)"
PEER_DEVICE=cuda PEER_CHECKPOINTS="$WORK/checkpoints" PEER_WORK="$WORK" OUT="$OUT" ORT_LOGGING_LEVEL=3 \
  node --import tsx bench/peer/side-by-side.ts 2>&1 | grep --line-buffered -v '\[[VIW]:onnxruntime' | tee "$OUT/side-by-side.log"
stamp "done"
