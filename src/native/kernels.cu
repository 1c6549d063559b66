// CUDA kernels of the native engine.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdlib>
#include <string>

#include "device.cuh"
#include "kernels.h"

namespace chorus {
namespace {

// Larger value wins; among equal values the lower index, as the host's first-maximum scan.
__device__ inline void Better(float& value, int& index, float otherValue, int otherIndex) {
  if (otherValue > value || (otherValue == value && otherIndex < index)) {
    value = otherValue;
    index = otherIndex;
  }
}

constexpr int kThreads = 1024;

// The id a row's argmax passes over: banned[r], or under min_length the end id (-1: none).
__device__ inline int BannedId(int r, const int32_t* banned, const GreedyAdvance& advance) {
  int ban = banned == nullptr ? -1 : banned[r];
  if (advance.minLeft != nullptr && advance.minLeft[r] > 0) ban = advance.endId;
  return ban;
}

// This thread's best of part `part` of `parts` of a row (the row's 16-byte vectors split evenly, the
// elements before the first and after the last going to the first part and the last).
template <typename T>
__device__ inline void ScanPart(const T* row, int vocab, int ban, int part, int parts, float& value, int& index) {
  value = -FLT_MAX;
  index = vocab;
  const auto consider = [&](int v, float x) {
    if (v != ban) Better(value, index, x, v);
  };
  // 16 bytes at a time from the row's first 16-byte boundary (a row of an odd vocabulary starts
  // anywhere), the elements before it and after the last whole vector one by one.
  constexpr int kPer = 16 / sizeof(T);
  const int lead = min(vocab, static_cast<int>((16 - reinterpret_cast<uintptr_t>(row) % 16) % 16 / sizeof(T)));
  const int vectors = (vocab - lead) / kPer;
  if (part == 0) {
    for (int v = threadIdx.x; v < lead; v += blockDim.x) consider(v, Load(row + v));
  }
  const int share = (vectors + parts - 1) / parts;
  const int first = min(vectors, part * share);
  const int count = min(vectors, first + share) - first;
  const uint4* body = reinterpret_cast<const uint4*>(row + lead) + first;
  StridedShare<uint4, 4>(count, [&](int i) { return body[i]; }, [&](int i, const uint4& bits) {
    const T* e = reinterpret_cast<const T*>(&bits);
#pragma unroll
    for (int k = 0; k < kPer; k++) consider(lead + (first + i) * kPer + k, Load(e + k));
  });
  if (part == parts - 1) {
    for (int v = lead + vectors * kPer + threadIdx.x; v < vocab; v += blockDim.x) consider(v, Load(row + v));
  }
}

// The block's best into thread 0's value and index (every thread takes part).
__device__ inline void BlockBest(float& value, int& index, int vocab) {
  // Within a warp, then across warps.
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float otherValue = __shfl_down_sync(0xffffffffu, value, offset);
    const int otherIndex = __shfl_down_sync(0xffffffffu, index, offset);
    Better(value, index, otherValue, otherIndex);
  }
  __shared__ float values[kThreads / 32];
  __shared__ int indices[kThreads / 32];
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    values[warp] = value;
    indices[warp] = index;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    value = threadIdx.x < warps ? values[threadIdx.x] : -FLT_MAX;
    index = threadIdx.x < warps ? indices[threadIdx.x] : vocab;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float otherValue = __shfl_down_sync(0xffffffffu, value, offset);
      const int otherIndex = __shfl_down_sync(0xffffffffu, index, offset);
      Better(value, index, otherValue, otherIndex);
    }
  }
}

// Row r's argmax written (0 where every id was passed over), and with `advance.tokens` its next inputs.
__device__ inline void Choose(int r, int index, int vocab, int32_t* out, const GreedyAdvance& advance) {
  const int chosen = index < vocab ? index : 0;
  out[r] = chosen;
  if (advance.hostOut != nullptr) advance.hostOut[r] = chosen;
  if (advance.tokens != nullptr) {
    advance.tokens[r] = chosen;
    advance.positions[r]++;
    advance.lengths[r]++;
    if (advance.minLeft != nullptr && advance.minLeft[r] > 0) advance.minLeft[r]--;
  }
}

// One block per row; with `advance.tokens`, thread 0 also writes the row's next inputs.
template <typename T>
__global__ void ArgmaxRowsKernel(const T* logits, int vocab, int32_t* out, const int32_t* banned, GreedyAdvance advance) {
  const int r = blockIdx.x;
  float value;
  int index;
  ScanPart(logits + static_cast<size_t>(r) * vocab, vocab, BannedId(r, banned, advance), 0, 1, value, index);
  BlockBest(value, index, vocab);
  if (threadIdx.x == 0) Choose(r, index, vocab, out, advance);
}

// Few rows of a large vocabulary (sm_90): a cluster of `ranks` blocks a row, each scanning a part of
// it; rank 0 takes the parts' bests over distributed shared memory, in part order, and chooses.
template <typename T>
__global__ void ArgmaxClusterKernel(const T* logits, int vocab, int32_t* out, const int32_t* banned, GreedyAdvance advance, int ranks) {
  const int r = blockIdx.x / ranks;
  const int rank = blockIdx.x % ranks;
  __shared__ float bestValue;
  __shared__ int bestIndex;
  float value;
  int index;
  // Every rank reads the row's ban before rank 0 may count min_length down (after the barrier).
  ScanPart(logits + static_cast<size_t>(r) * vocab, vocab, BannedId(r, banned, advance), rank, ranks, value, index);
  BlockBest(value, index, vocab);
  if (threadIdx.x == 0) {
    bestValue = value;
    bestIndex = index;
  }
  ClusterBarrier();
  if (rank == 0 && threadIdx.x == 0) {
    for (int k = 1; k < ranks; k++) Better(value, index, *RankShared(&bestValue, k), *RankShared(&bestIndex, k));
    Choose(r, index, vocab, out, advance);
  }
  // No rank leaves while rank 0 may still read its shared memory.
  ClusterBarrier();
}

// One block per (copy, head, buffer); 16-byte words when every offset allows them, else bytes.
__global__ void MoveSlotsKernel(void* const* table, char* scratch, const int32_t* slotIndex, const int32_t* lengths, const int32_t* starts, size_t slotBytes,
                                size_t pitch, size_t rowBytes, size_t stride, bool toScratch, bool wide) {
  const int i = blockIdx.x;
  const int head = blockIdx.y;
  const int b = blockIdx.z;
  const size_t bytes = static_cast<size_t>(lengths[i]) * rowBytes;
  char* slot = static_cast<char*>(table[b]) + static_cast<size_t>(slotIndex[i]) * slotBytes + static_cast<size_t>(head) * pitch;
  char* staged = scratch + b * stride + static_cast<size_t>(starts[i]) * gridDim.y * rowBytes + head * bytes;
  const char* from = toScratch ? slot : staged;
  char* to = toScratch ? staged : slot;
  if (wide) {
    for (size_t at = threadIdx.x * 16; at < bytes; at += blockDim.x * 16) *reinterpret_cast<uint4*>(to + at) = *reinterpret_cast<const uint4*>(from + at);
  } else {
    for (size_t at = threadIdx.x; at < bytes; at += blockDim.x) to[at] = from[at];
  }
}

}  // namespace

void MoveSlotsThroughDevice(void* const* table, int buffers, void* scratch, const int32_t* slotIndex, const int32_t* lengths, const int32_t* starts, int count,
                            int heads, size_t slotBytes, size_t pitch, size_t rowBytes, size_t stride, bool toScratch, void* stream) {
  if (count == 0 || heads == 0 || buffers == 0) return;
  // Cache buffers come from cudaMalloc (256-byte aligned); the scratch too.
  const bool wide = (reinterpret_cast<uintptr_t>(scratch) | slotBytes | pitch | rowBytes | stride) % 16 == 0;
  MoveSlotsKernel<<<dim3(count, heads, buffers), 256, 0, static_cast<cudaStream_t>(stream)>>>(table, static_cast<char*>(scratch), slotIndex, lengths, starts,
                                                                                             slotBytes, pitch, rowBytes, stride, toScratch, wide);
}

namespace {

// Rows of at most kClusterArgmaxRows of a vocabulary of at least kClusterArgmaxVocab take a cluster of
// kClusterArgmaxRanks blocks each: one block a row scanned Gemma 2's 256k ids in 16 us. At batch 1 on
// the H100 the decode step of Llama-3.2-1B (128k ids), Qwen3-1.7B (152k) and Gemma-2-2B (256k) took
// 2.8, 5.4 and 5.8 us less; TinyLlama's 32k ids measured no faster, and keep one block.
constexpr int kClusterArgmaxRanks = 8;
constexpr int kClusterArgmaxRows = 16;
constexpr int kClusterArgmaxVocab = 65536;

// CHORUS_ARGMAX_CLUSTER=0: one block a row always (to compare).
const bool argmaxClusters = [] {
  const char* value = std::getenv("CHORUS_ARGMAX_CLUSTER");
  return value == nullptr || std::string(value) != "0";
}();

// Row r's argmax for every row: in clusters where they pay (and the launch is taken), else one block a row.
template <typename T>
void LaunchArgmaxOf(const T* logits, int rows, int vocab, int32_t* out, const int32_t* banned, const GreedyAdvance& advance, cudaStream_t s) {
  int device = 0;
  const bool clusters = argmaxClusters && rows <= kClusterArgmaxRows && vocab >= kClusterArgmaxVocab && cudaGetDevice(&device) == cudaSuccess && TakesClusters(device);
  if (clusters && LaunchClusters(ArgmaxClusterKernel<T>, rows * kClusterArgmaxRanks, kThreads, 0, kClusterArgmaxRanks, s, logits, vocab, out, banned, advance,
                                 kClusterArgmaxRanks)) {
    return;
  }
  ArgmaxRowsKernel<T><<<rows, kThreads, 0, s>>>(logits, vocab, out, banned, advance);
}

void LaunchArgmax(const void* logits, FloatType type, int rows, int vocab, int32_t* out, const int32_t* banned, const GreedyAdvance& advance, void* stream) {
  if (rows == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case FloatType::kFloat16: LaunchArgmaxOf(static_cast<const __half*>(logits), rows, vocab, out, banned, advance, s); break;
    case FloatType::kBFloat16: LaunchArgmaxOf(static_cast<const __nv_bfloat16*>(logits), rows, vocab, out, banned, advance, s); break;
    default: LaunchArgmaxOf(static_cast<const float*>(logits), rows, vocab, out, banned, advance, s);
  }
}

}  // namespace

void ArgmaxRowsDevice(const void* logits, FloatType type, int rows, int vocab, int32_t* out, void* stream, const int32_t* banned) {
  LaunchArgmax(logits, type, rows, vocab, out, banned, GreedyAdvance{}, stream);
}

void ArgmaxAdvanceDevice(const void* logits, FloatType type, int rows, int vocab, int32_t* out, const GreedyAdvance& advance, void* stream) {
  LaunchArgmax(logits, type, rows, vocab, out, nullptr, advance, stream);
}

}  // namespace chorus
