// CUDA kernels of the native engine.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>

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

// One block per row; with `advance.tokens`, thread 0 also writes the row's next inputs.
template <typename T>
__global__ void ArgmaxRowsKernel(const T* logits, int vocab, int32_t* out, const int32_t* banned, GreedyAdvance advance) {
  const T* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  const int r = blockIdx.x;
  int ban = banned == nullptr ? -1 : banned[r];
  if (advance.minLeft != nullptr && advance.minLeft[r] > 0) ban = advance.endId;
  float value = -FLT_MAX;
  int index = vocab;
  const auto consider = [&](int v, float x) {
    if (v != ban) Better(value, index, x, v);
  };
  // 16 bytes at a time from the row's first 16-byte boundary (a row of an odd vocabulary starts
  // anywhere), the elements before it and after the last whole vector one by one.
  constexpr int kPer = 16 / sizeof(T);
  const int lead = min(vocab, static_cast<int>((16 - reinterpret_cast<uintptr_t>(row) % 16) % 16 / sizeof(T)));
  const int vectors = (vocab - lead) / kPer;
  for (int v = threadIdx.x; v < lead; v += blockDim.x) consider(v, Load(row + v));
  const uint4* body = reinterpret_cast<const uint4*>(row + lead);
  StridedShare<uint4, 4>(vectors, [&](int i) { return body[i]; }, [&](int i, const uint4& bits) {
    const T* e = reinterpret_cast<const T*>(&bits);
#pragma unroll
    for (int k = 0; k < kPer; k++) consider(lead + i * kPer + k, Load(e + k));
  });
  for (int v = lead + vectors * kPer + threadIdx.x; v < vocab; v += blockDim.x) consider(v, Load(row + v));
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
    if (threadIdx.x == 0) {
      const int chosen = index < vocab ? index : 0;
      out[r] = chosen;
      if (advance.tokens != nullptr) {
        advance.tokens[r] = chosen;
        advance.positions[r]++;
        advance.lengths[r]++;
        if (advance.minLeft != nullptr && advance.minLeft[r] > 0) advance.minLeft[r]--;
      }
    }
  }
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

void LaunchArgmax(const void* logits, FloatType type, int rows, int vocab, int32_t* out, const int32_t* banned, const GreedyAdvance& advance, void* stream) {
  if (rows == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case FloatType::kFloat16:
      ArgmaxRowsKernel<__half><<<rows, kThreads, 0, s>>>(static_cast<const __half*>(logits), vocab, out, banned, advance);
      break;
    case FloatType::kBFloat16:
      ArgmaxRowsKernel<__nv_bfloat16><<<rows, kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(logits), vocab, out, banned, advance);
      break;
    default:
      ArgmaxRowsKernel<float><<<rows, kThreads, 0, s>>>(static_cast<const float*>(logits), vocab, out, banned, advance);
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
