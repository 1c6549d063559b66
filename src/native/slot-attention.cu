// SlotAttention's CUDA kernel (slot-attention.h): one block per (head, row). The block writes the row's
// new key and value (self-attention), then each warp scores positions (lanes split the head's
// dimensions), the block takes the softmax, and groups of head_dim threads sum the values of every
// group-th position.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>

#include "device.cuh"
#include "slot-attention.h"

namespace chorus {
namespace {

constexpr int kThreads = 1024;

template <typename T>
__device__ inline void Store(T* p, float value);
template <>
__device__ inline void Store<float>(float* p, float value) { *p = value; }
template <>
__device__ inline void Store<__half>(__half* p, float value) { *p = __float2half_rn(value); }

// The block's maximum (sum with `sum`) of each thread's `value`; every thread gets it.
template <bool Sum>
__device__ float BlockReduce(float value, float* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = Sum ? value + other : fmaxf(value, other);
  }
  const int warp = threadIdx.x / 32;
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[warp] = value;
  __syncthreads();
  value = Sum ? 0.0f : -FLT_MAX;
  for (int w = 0; w < blockDim.x / 32; w++) value = Sum ? value + scratch[w] : fmaxf(value, scratch[w]);
  return value;
}

// Where block (head blockIdx.x, row blockIdx.y) works: the keys already in the row's slot (`past`), the
// head's first position in the slot and its place in the row's inputs and output.
struct SlotPlace {
  int past;
  size_t slot;
  size_t in;
};

__device__ inline SlotPlace PlaceOf(const int32_t* lengths, bool self, size_t width, int dim, int capacity) {
  const int r = blockIdx.y;
  const size_t head = static_cast<size_t>(blockIdx.x) * dim;
  return SlotPlace{min(max(lengths[r], 0), capacity - (self ? 1 : 0)), static_cast<size_t>(r) * capacity * width + head, static_cast<size_t>(r) * width + head};
}

// The softmax's numerators in place of the n scores (each exp(score - max)); returns their sum. Its
// block reductions' syncs also publish the numerators.
__device__ inline float Exponentiate(float* scores, int n, float* scratch) {
  float highest = -FLT_MAX;
  for (int j = threadIdx.x; j < n; j += blockDim.x) highest = fmaxf(highest, scores[j]);
  highest = BlockReduce<false>(highest, scratch);
  float total = 0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = __expf(scores[j] - highest);
    scores[j] = e;
    total += e;
  }
  return BlockReduce<true>(total, scratch);
}

template <typename T>
__global__ void SlotAttentionKernel(const T* query, const T* key, const T* value, T* cacheKey, T* cacheValue, const int32_t* lengths, const float* bias,
                                    int biasSpan, T* output, int heads, int dim, int capacity, float scale) {
  extern __shared__ float shared[];
  float* q = shared;           // dim
  float* scores = shared + dim;  // capacity
  __shared__ float scratch[kThreads / 32];
  const int h = blockIdx.x;
  const bool self = key != nullptr;
  const size_t width = static_cast<size_t>(heads) * dim;
  const SlotPlace at = PlaceOf(lengths, self, width, dim, capacity);
  const int past = at.past;
  const size_t slot = at.slot;
  const size_t in = at.in;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    q[d] = Load(query + in + d);
    if (self) {
      cacheKey[slot + past * width + d] = key[in + d];
      cacheValue[slot + past * width + d] = value[in + d];
    }
  }
  __syncthreads();
  const int n = past + (self ? 1 : 0);
  const int lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  for (int j = threadIdx.x / 32; j < n; j += warps) {
    const T* k = cacheKey + slot + j * width;
    float dot = 0;
    for (int d = lane; d < dim; d += 32) dot += q[d] * Load(k + d);
    for (int offset = 16; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane == 0) scores[j] = dot * scale + (bias != nullptr ? bias[static_cast<size_t>(h) * biasSpan + min(past - j, biasSpan - 1)] : 0.0f);
  }
  __syncthreads();
  const float total = Exponentiate(scores, n, scratch);
  // Groups of `dim` threads each sum every groups-th position, then one sum over the groups; a head
  // wider than the block is summed by each thread over all positions.
  if (dim <= blockDim.x) {
    const int groups = blockDim.x / dim;
    float* partial = scores + capacity;  // groups x dim
    const int group = threadIdx.x / dim;
    if (group < groups) {
      const int d = threadIdx.x % dim;
      float acc = 0;
      for (int j = group; j < n; j += groups) acc += scores[j] * Load(cacheValue + slot + j * width + d);
      partial[group * dim + d] = acc;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
      float acc = 0;
      for (int g = 0; g < groups; g++) acc += partial[g * dim + d];
      Store(output + in + d, acc / total);
    }
  } else {
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
      float acc = 0;
      for (int j = 0; j < n; j++) acc += scores[j] * Load(cacheValue + slot + j * width + d);
      Store(output + in + d, acc / total);
    }
  }
}

// The float16 kernel for heads of a multiple of 8 dimensions (up to kWideThreads): 16-byte loads of 8
// halves. Scoring: kVector lanes per position (dim / 8), a warp scoring 32 / kVector positions at a
// time; the weighted sum: each thread sums 8 dimensions over every groups-th position, the groups'
// partial sums then added per dimension.
constexpr int kWideThreads = 256;

__device__ inline void Widen8(const uint4& bits, float* out) {
  const __half2* h = reinterpret_cast<const __half2*>(&bits);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__global__ void __launch_bounds__(kWideThreads) SlotAttentionWideKernel(const __half* query, const __half* key, const __half* value, __half* cacheKey,
                                                                         __half* cacheValue, const int32_t* lengths, const float* bias, int biasSpan, __half* output,
                                                                         int heads, int dim, int capacity, float scale) {
  extern __shared__ float shared[];
  float* q = shared;             // dim
  float* scores = shared + dim;  // capacity
  __shared__ float scratch[kWideThreads / 32];
  const int h = blockIdx.x;
  const bool self = key != nullptr;
  const size_t width = static_cast<size_t>(heads) * dim;
  const SlotPlace at = PlaceOf(lengths, self, width, dim, capacity);
  const int past = at.past;
  const size_t slot = at.slot;
  const size_t in = at.in;
  const int vectors = dim / 8;  // 16-byte vectors per position
  for (int v = threadIdx.x; v < vectors; v += blockDim.x) {
    float x[8];
    Widen8(reinterpret_cast<const uint4*>(query + in)[v], x);
    for (int i = 0; i < 8; i++) q[8 * v + i] = x[i];
    if (self) {
      reinterpret_cast<uint4*>(cacheKey + slot + past * width)[v] = reinterpret_cast<const uint4*>(key + in)[v];
      reinterpret_cast<uint4*>(cacheValue + slot + past * width)[v] = reinterpret_cast<const uint4*>(value + in)[v];
    }
  }
  __syncthreads();
  const int n = past + (self ? 1 : 0);
  // Scores: lanes of `span` (a power of two >= vectors, up to 32) per position.
  int span = 1;
  while (span < vectors) span <<= 1;
  const int perPass = blockDim.x / span;
  const int lane = threadIdx.x % span;
  for (int j = threadIdx.x / span; j - static_cast<int>(threadIdx.x / span) < n; j += perPass) {
    float dot = 0;
    if (j < n) {
      for (int v = lane; v < vectors; v += span) {
        float k[8];
        Widen8(reinterpret_cast<const uint4*>(cacheKey + slot + static_cast<size_t>(j) * width)[v], k);
#pragma unroll
        for (int i = 0; i < 8; i++) dot += q[8 * v + i] * k[i];
      }
    }
    for (int offset = span / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (j < n && lane == 0) scores[j] = dot * scale + (bias != nullptr ? bias[static_cast<size_t>(h) * biasSpan + min(past - j, biasSpan - 1)] : 0.0f);
  }
  __syncthreads();
  const float total = Exponentiate(scores, n, scratch);
  // The weighted sum: thread t takes vector t % vectors of every groups-th position from t / vectors.
  const int groups = blockDim.x / vectors;
  float* partial = scores + capacity;  // groups x dim
  const int group = threadIdx.x / vectors;
  if (group < groups) {
    const int v = threadIdx.x % vectors;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = group; j < n; j += groups) {
      float x[8];
      Widen8(reinterpret_cast<const uint4*>(cacheValue + slot + static_cast<size_t>(j) * width)[v], x);
      const float p = scores[j];
#pragma unroll
      for (int i = 0; i < 8; i++) acc[i] += p * x[i];
    }
#pragma unroll
    for (int i = 0; i < 8; i++) partial[group * dim + 8 * v + i] = acc[i];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0;
    for (int g = 0; g < groups; g++) acc += partial[g * dim + d];
    Store(output + in + d, acc / total);
  }
}

}  // namespace

void SlotAttentionDevice(const SlotAttentionArgs& a, void* stream) {
  if (a.rows == 0) return;
  const bool aligned = (reinterpret_cast<uintptr_t>(a.query) | reinterpret_cast<uintptr_t>(a.key) | reinterpret_cast<uintptr_t>(a.value) |
                        reinterpret_cast<uintptr_t>(a.cacheKey) | reinterpret_cast<uintptr_t>(a.cacheValue)) % 16 == 0;
  if (a.type == FloatType::kFloat16 && a.dim % 8 == 0 && a.dim / 8 <= 32 && aligned) {
    const int vectors = a.dim / 8;
    const size_t partialFloats = static_cast<size_t>(kWideThreads / vectors) * a.dim;
    const size_t sharedBytes = sizeof(float) * (a.dim + a.capacity + partialFloats);
    SlotAttentionWideKernel<<<dim3(a.heads, a.rows), kWideThreads, sharedBytes, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const __half*>(a.query), static_cast<const __half*>(a.key), static_cast<const __half*>(a.value), static_cast<__half*>(a.cacheKey),
        static_cast<__half*>(a.cacheValue), a.lengths, a.bias, a.biasSpan, static_cast<__half*>(a.output), a.heads, a.dim, a.capacity, a.scale);
    return;
  }
  const size_t partialFloats = a.dim <= kThreads ? kThreads / a.dim * a.dim : 0;
  const size_t sharedBytes = sizeof(float) * (a.dim + a.capacity + partialFloats);
  const dim3 grid(a.heads, a.rows);
  auto s = static_cast<cudaStream_t>(stream);
  if (a.type == FloatType::kFloat16) {
    SlotAttentionKernel<__half><<<grid, kThreads, sharedBytes, s>>>(
        static_cast<const __half*>(a.query), static_cast<const __half*>(a.key), static_cast<const __half*>(a.value), static_cast<__half*>(a.cacheKey),
        static_cast<__half*>(a.cacheValue), a.lengths, a.bias, a.biasSpan, static_cast<__half*>(a.output), a.heads, a.dim, a.capacity, a.scale);
  } else {
    SlotAttentionKernel<float><<<grid, kThreads, sharedBytes, s>>>(static_cast<const float*>(a.query), static_cast<const float*>(a.key),
                                                                   static_cast<const float*>(a.value), static_cast<float*>(a.cacheKey),
                                                                   static_cast<float*>(a.cacheValue), a.lengths, a.bias, a.biasSpan,
                                                                   static_cast<float*>(a.output), a.heads, a.dim, a.capacity, a.scale);
  }
}

}  // namespace chorus
