// The slot attention's CUDA kernels (slot-attention.h): one block per (token row, query head). The block
// writes the token's new key and value (when given), then each warp scores positions (lanes split the
// head's dimensions), the block takes the softmax, and groups of head_dim threads sum the values of
// every group-th position. Prefills of several tokens a row go by tiles of queries instead.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <string>

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
template <>
__device__ inline void Store<__nv_bfloat16>(__nv_bfloat16* p, float value) { *p = __float2bfloat16_rn(value); }

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

// Where block (token row blockIdx.x, query head blockIdx.y) works: the query's position and the keys
// it attends over (oldest..n-1; the block's scores hold them from 0), the key head's first position in
// the slot, the query's place in the query and output, and the new token's key in `key` (write mode).
struct SlotPlace {
  int head;
  int position;
  int oldest;
  int n;
  size_t slot;
  size_t query;
  size_t output;
  size_t fresh;
  size_t kvHead;  // the key head's offset in keyBias and valueBias
};

__device__ inline SlotPlace PlaceOf(const SlotAttentionArgs& a) {
  const int h = blockIdx.y;
  const int y = blockIdx.x;
  const int r = y / a.tokens;
  const int s = y % a.tokens;
  const int kv = h / (a.heads / a.kvHeads);
  SlotPlace at;
  at.head = h;
  if (a.causal) {
    at.position = min(max(a.lengths[r] + a.lengthsOffset, 0), a.capacity - a.tokens) + s;
    at.n = at.position + 1;
    at.oldest = FirstKey(at.position, a.window);
  } else {
    at.n = min(max(a.lengths[r], 0), a.capacity);
    at.position = at.n;
    at.oldest = 0;
  }
  at.slot = static_cast<size_t>(r) * a.rowStride + static_cast<size_t>(kv) * a.headStride;
  at.query = static_cast<size_t>(y) * a.queryStride + static_cast<size_t>(h) * a.dim;
  at.output = (static_cast<size_t>(y) * a.heads + h) * a.dim;
  at.kvHead = static_cast<size_t>(kv) * a.dim;
  at.fresh = static_cast<size_t>(y) * a.newStride + at.kvHead;
  return at;
}

// x[i] + bias[j] (bias null: x[i]) in the float type, rounded as an Add of the two rounds.
template <typename T>
__device__ inline T Biased(const T* x, const T* bias, size_t i, size_t j);
template <>
__device__ inline float Biased<float>(const float* x, const float* bias, size_t i, size_t j) { return bias == nullptr ? x[i] : x[i] + bias[j]; }
template <>
__device__ inline __half Biased<__half>(const __half* x, const __half* bias, size_t i, size_t j) { return bias == nullptr ? x[i] : __hadd(x[i], bias[j]); }
template <>
__device__ inline __nv_bfloat16 Biased<__nv_bfloat16>(const __nv_bfloat16* x, const __nv_bfloat16* bias, size_t i, size_t j) {
  return bias == nullptr ? x[i] : __float2bfloat16_rn(__bfloat162float(x[i]) + __bfloat162float(bias[j]));
}

// The score of key j for the query at `position` of head `head`: scaled, soft-capped, biased.
__device__ inline float ScoreOf(const SlotAttentionArgs& a, float dot, int head, int position, int j) {
  const float score = SoftCapped(dot * a.scale, a.softcap);
  return a.bias != nullptr ? score + a.bias[static_cast<size_t>(head) * a.biasSpan + min(position - j, a.biasSpan - 1)] : score;
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
__global__ void SlotAttentionKernel(SlotAttentionArgs a) {
  extern __shared__ float shared[];
  const int dim = a.dim;
  float* q = shared;             // dim
  float* scores = shared + dim;  // SlotScoreSpan: key j's at j - oldest
  __shared__ float scratch[kThreads / 32];
  const T* query = static_cast<const T*>(a.query);
  const T* queryBias = static_cast<const T*>(a.queryBias);
  T* cacheKey = static_cast<T*>(a.cacheKey);
  T* cacheValue = static_cast<T*>(a.cacheValue);
  const SlotPlace at = PlaceOf(a);
  const int oldest = at.oldest;
  const int n = at.n;
  const size_t slot = at.slot;
  const size_t step = a.positionStride;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    const T x = Biased(query, queryBias, at.query + d, static_cast<size_t>(at.head) * dim + d);
    q[d] = Load(&x);
    if (a.key != nullptr) {
      cacheKey[slot + at.position * step + d] = Biased(static_cast<const T*>(a.key), static_cast<const T*>(a.keyBias), at.fresh + d, at.kvHead + d);
      cacheValue[slot + at.position * step + d] = Biased(static_cast<const T*>(a.value), static_cast<const T*>(a.valueBias), at.fresh + d, at.kvHead + d);
    }
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  for (int j = oldest + threadIdx.x / 32; j < n; j += warps) {
    const T* k = cacheKey + slot + j * step;
    float dot = 0;
    for (int d = lane; d < dim; d += 32) dot += q[d] * Load(k + d);
    for (int offset = 16; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane == 0) scores[j - oldest] = ScoreOf(a, dot, at.head, at.position, j);
  }
  __syncthreads();
  const float total = Exponentiate(scores, n - oldest, scratch);
  T* output = static_cast<T*>(a.output) + at.output;
  // Groups of `dim` threads each sum every groups-th position, then one sum over the groups; a head
  // wider than the block is summed by each thread over all positions.
  if (dim <= blockDim.x) {
    const int groups = blockDim.x / dim;
    float* partial = scores + SlotScoreSpan(a);  // groups x dim
    const int group = threadIdx.x / dim;
    if (group < groups) {
      const int d = threadIdx.x % dim;
      float acc = 0;
      for (int j = oldest + group; j < n; j += groups) acc += scores[j - oldest] * Load(cacheValue + slot + j * step + d);
      partial[group * dim + d] = acc;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
      float acc = 0;
      for (int g = 0; g < groups; g++) acc += partial[g * dim + d];
      Store(output + d, acc / total);
    }
  } else {
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
      float acc = 0;
      for (int j = oldest; j < n; j++) acc += scores[j - oldest] * Load(cacheValue + slot + j * step + d);
      Store(output + d, acc / total);
    }
  }
}

// The float16 kernel for heads of a multiple of 8 dimensions (up to 256): 16-byte loads of 8 halves.
// Scoring: dim / 8 lanes per position, a warp scoring several positions at a time; the weighted sum:
// each thread sums 8 dimensions over every groups-th position, the groups' partial sums then added
// per dimension.
constexpr int kWideThreads = 256;
// Positions whose keys (values) a thread reads before it uses any.
constexpr int kAhead = 4;

// Vector v (8 halves) of x, plus vector v of bias when there is one (rounded as half additions).
__device__ inline uint4 BiasedVector(const __half* x, const __half* bias, int v) {
  uint4 bits = reinterpret_cast<const uint4*>(x)[v];
  if (bias != nullptr) {
    const uint4 add = reinterpret_cast<const uint4*>(bias)[v];
    __half2* h = reinterpret_cast<__half2*>(&bits);
    const __half2* b = reinterpret_cast<const __half2*>(&add);
#pragma unroll
    for (int i = 0; i < 4; i++) h[i] = __hadd2(h[i], b[i]);
  }
  return bits;
}

__global__ void __launch_bounds__(kWideThreads) SlotAttentionWideKernel(SlotAttentionArgs a) {
  extern __shared__ float shared[];
  const int dim = a.dim;
  float* q = shared;             // dim
  float* scores = shared + dim;  // SlotScoreSpan: key j's at j - oldest
  __shared__ float scratch[kWideThreads / 32];
  __shared__ uint4 fresh[2 * 32];  // the new token's key and value vectors (write mode)
  __half* cacheKey = static_cast<__half*>(a.cacheKey);
  __half* cacheValue = static_cast<__half*>(a.cacheValue);
  const SlotPlace at = PlaceOf(a);
  const int oldest = at.oldest;
  const int n = at.n;
  const size_t slot = at.slot;
  const size_t step = a.positionStride;
  const int vectors = dim / 8;  // 16-byte vectors per position
  const bool writes = a.key != nullptr;
  // Scoring: lanes of `span` (a power of two >= vectors, up to 32) per position, lane l holding the
  // query's vector l. The weighted sum: thread t takes vector t % vectors of every groups-th position
  // from t / vectors. Each reads kAhead positions before it uses any, so that their loads are in
  // flight together.
  int span = 1;
  while (span < vectors) span <<= 1;
  const int perPass = blockDim.x / span;
  const int lane = threadIdx.x % span;
  const int first = threadIdx.x / span;
  const bool holds = lane < vectors;
  const int groups = blockDim.x / vectors;
  const int group = threadIdx.x / vectors;
  const int v = threadIdx.x % vectors;
  const bool sums = group < groups;
  const auto keyAt = [&](int j) { return holds && j < n ? reinterpret_cast<const uint4*>(cacheKey + slot + static_cast<size_t>(j) * step)[lane] : make_uint4(0, 0, 0, 0); };
  const auto valueAt = [&](int j) { return sums && j < n ? reinterpret_cast<const uint4*>(cacheValue + slot + static_cast<size_t>(j) * step)[v] : make_uint4(0, 0, 0, 0); };
  // The query, and the new key and value (written to the slot, and kept here for this block, whose
  // reads of the slot at that position may not see the write).
  const __half* queryBias = a.queryBias == nullptr ? nullptr : static_cast<const __half*>(a.queryBias) + static_cast<size_t>(at.head) * dim;
  for (int i = threadIdx.x; i < vectors; i += blockDim.x) {
    float x[8];
    Widen8(BiasedVector(static_cast<const __half*>(a.query) + at.query, queryBias, i), x);
    for (int e = 0; e < 8; e++) q[8 * i + e] = x[e];
    if (writes) {
      const __half* keyBias = a.keyBias == nullptr ? nullptr : static_cast<const __half*>(a.keyBias) + at.kvHead;
      const __half* valueBias = a.valueBias == nullptr ? nullptr : static_cast<const __half*>(a.valueBias) + at.kvHead;
      fresh[i] = BiasedVector(static_cast<const __half*>(a.key) + at.fresh, keyBias, i);
      fresh[32 + i] = BiasedVector(static_cast<const __half*>(a.value) + at.fresh, valueBias, i);
      reinterpret_cast<uint4*>(cacheKey + slot + at.position * step)[i] = fresh[i];
      reinterpret_cast<uint4*>(cacheValue + slot + at.position * step)[i] = fresh[32 + i];
    }
  }
  __syncthreads();
  float query[8];
#pragma unroll
  for (int i = 0; i < 8; i++) query[i] = holds ? q[8 * lane + i] : 0.0f;
  for (int base = oldest; base < n; base += kAhead * perPass) {
    uint4 keys[kAhead];
#pragma unroll
    for (int b = 0; b < kAhead; b++) keys[b] = keyAt(base + b * perPass + first);
#pragma unroll
    for (int b = 0; b < kAhead; b++) {
      const int j = base + b * perPass + first;
      float k[8];
      Widen8(writes && holds && j == at.position ? fresh[lane] : keys[b], k);
      float dot = 0;
#pragma unroll
      for (int i = 0; i < 8; i++) dot += query[i] * k[i];
      for (int offset = span / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      if (j < n && lane == 0) scores[j - oldest] = ScoreOf(a, dot, at.head, at.position, j);
    }
  }
  __syncthreads();
  const float total = Exponentiate(scores, n - oldest, scratch);
  float* partial = scores + SlotScoreSpan(a);  // groups x dim
  if (sums) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int base = oldest + group; base < n; base += kAhead * groups) {
      uint4 values[kAhead];
#pragma unroll
      for (int b = 0; b < kAhead; b++) values[b] = valueAt(base + b * groups);
#pragma unroll
      for (int b = 0; b < kAhead; b++) {
        const int j = base + b * groups;
        float x[8];
        Widen8(writes && j == at.position ? fresh[32 + v] : values[b], x);
        const float p = j < n ? scores[j - oldest] : 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] += p * x[i];
      }
    }
#pragma unroll
    for (int i = 0; i < 8; i++) partial[group * dim + 8 * v + i] = acc[i];
  }
  __syncthreads();
  __half* output = static_cast<__half*>(a.output) + at.output;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0;
    for (int g = 0; g < groups; g++) acc += partial[g * dim + d];
    Store(output + d, acc / total);
  }
}

// Every new token's key and value into its row's slot: block (token row, key head), threads over dim.
template <typename T>
__global__ void SlotAppendKernel(SlotAttentionArgs a) {
  const int y = blockIdx.x;
  const int r = y / a.tokens;
  const int kv = blockIdx.y;
  const int position = min(max(a.lengths[r] + a.lengthsOffset, 0), a.capacity - a.tokens) + y % a.tokens;
  const size_t to = static_cast<size_t>(r) * a.rowStride + static_cast<size_t>(kv) * a.headStride + static_cast<size_t>(position) * a.positionStride;
  const size_t from = static_cast<size_t>(y) * a.newStride + static_cast<size_t>(kv) * a.dim;
  for (int d = threadIdx.x; d < a.dim; d += blockDim.x) {
    const size_t b = static_cast<size_t>(kv) * a.dim + d;
    static_cast<T*>(a.cacheKey)[to + d] = Biased(static_cast<const T*>(a.key), static_cast<const T*>(a.keyBias), from + d, b);
    static_cast<T*>(a.cacheValue)[to + d] = Biased(static_cast<const T*>(a.value), static_cast<const T*>(a.valueBias), from + d, b);
  }
}

// Prefills (causal, several new tokens a row, their keys and values in the cache already): a block per
// (row, tile of kPrefillQueries tokens, query head) walks the keys in tiles of kPrefillKeys positions
// with an online softmax (a running maximum and total per query), the tiles staged in shared memory
// as float32, so that each key is read once per tile of queries rather than once per query. Thread t
// takes query t / 8 of the tile: its scores of keys t % 8 + 8i, and the weighted sum's dimensions
// t % 8 + 8i (heads of at most kPrefillMaxDim).
constexpr int kPrefillQueries = 32;
constexpr int kPrefillKeys = 32;
constexpr int kPrefillThreads = 256;
constexpr int kPrefillLanes = kPrefillThreads / kPrefillQueries;  // 8: a query's threads, in one warp
constexpr int kPrefillMaxDim = 128;

size_t PrefillSharedBytes(int dim) {
  const size_t pitch = static_cast<size_t>(dim) + 1;
  return sizeof(float) * ((kPrefillQueries + 2 * kPrefillKeys) * pitch + kPrefillQueries * (kPrefillKeys + 1));
}

template <typename T>
__global__ void __launch_bounds__(kPrefillThreads) PrefillAttentionKernel(SlotAttentionArgs a) {
  extern __shared__ float shared[];
  const int dim = a.dim;
  const int pitch = dim + 1;
  float* qs = shared;                          // [queries][pitch]
  float* ks = qs + kPrefillQueries * pitch;    // [keys][pitch]
  float* vs = ks + kPrefillKeys * pitch;       // [keys][pitch]
  float* ps = vs + kPrefillKeys * pitch;       // [queries][keys + 1]: the tile's softmax numerators
  const int r = blockIdx.y;
  const int h = blockIdx.z;
  const int s0 = blockIdx.x * kPrefillQueries;
  const int count = min(kPrefillQueries, a.tokens - s0);
  const int kv = h / (a.heads / a.kvHeads);
  const int base = min(max(a.lengths[r] + a.lengthsOffset, 0), a.capacity - a.tokens);
  const size_t slot = static_cast<size_t>(r) * a.rowStride + static_cast<size_t>(kv) * a.headStride;
  const T* query = static_cast<const T*>(a.query);
  const T* queryBias = static_cast<const T*>(a.queryBias);
  const T* cacheKey = static_cast<const T*>(a.cacheKey);
  const T* cacheValue = static_cast<const T*>(a.cacheValue);
  for (int i = threadIdx.x; i < kPrefillQueries * dim; i += kPrefillThreads) {
    const int q = i / dim;
    const int d = i % dim;
    float v = 0;
    if (q < count) {
      const size_t y = static_cast<size_t>(r) * a.tokens + s0 + q;
      const T x = Biased(query, queryBias, y * a.queryStride + static_cast<size_t>(h) * dim + d, static_cast<size_t>(h) * dim + d);
      v = Load(&x);
    }
    qs[q * pitch + d] = v;
  }
  const int q = threadIdx.x / kPrefillLanes;
  const int sub = threadIdx.x % kPrefillLanes;
  const bool live = q < count;
  const int position = base + s0 + q;
  const int oldest = FirstKey(position, a.window);
  // The keys some query of the tile reads: from its first query's oldest to its last query's position.
  const int first = FirstKey(base + s0, a.window);
  const int end = base + s0 + count;
  constexpr int kScores = kPrefillKeys / kPrefillLanes;
  constexpr int kSums = kPrefillMaxDim / kPrefillLanes;
  float highest = -INFINITY;
  float total = 0;
  float sums[kSums];
#pragma unroll
  for (int i = 0; i < kSums; i++) sums[i] = 0;
  for (int k0 = first; k0 < end; k0 += kPrefillKeys) {
    __syncthreads();
    for (int i = threadIdx.x; i < kPrefillKeys * dim; i += kPrefillThreads) {
      const int k = i / dim;
      const int d = i % dim;
      const int j = k0 + k;
      float key = 0;
      float value = 0;
      if (j < end) {
        const size_t at = slot + static_cast<size_t>(j) * a.positionStride + d;
        key = Load(cacheKey + at);
        value = Load(cacheValue + at);
      }
      ks[k * pitch + d] = key;
      vs[k * pitch + d] = value;
    }
    __syncthreads();
    float scores[kScores];
    float tileHighest = -INFINITY;
#pragma unroll
    for (int i = 0; i < kScores; i++) {
      const int k = sub + kPrefillLanes * i;
      const int j = k0 + k;
      float score = -INFINITY;
      if (live && j < end && j >= oldest && j <= position) {
        float dot = 0;
        for (int d = 0; d < dim; d++) dot += qs[q * pitch + d] * ks[k * pitch + d];
        score = ScoreOf(a, dot, h, position, j);
      }
      scores[i] = score;
      tileHighest = fmaxf(tileHighest, score);
    }
    // A query's 8 threads are 8 aligned lanes of one warp.
#pragma unroll
    for (int offset = kPrefillLanes / 2; offset > 0; offset >>= 1) tileHighest = fmaxf(tileHighest, __shfl_xor_sync(0xffffffffu, tileHighest, offset));
    const float next = fmaxf(highest, tileHighest);
    const float carry = next == -INFINITY ? 1.0f : __expf(highest - next);
    float added = 0;
#pragma unroll
    for (int i = 0; i < kScores; i++) {
      const float e = scores[i] == -INFINITY ? 0.0f : __expf(scores[i] - next);
      ps[q * (kPrefillKeys + 1) + sub + kPrefillLanes * i] = e;
      added += e;
    }
#pragma unroll
    for (int offset = kPrefillLanes / 2; offset > 0; offset >>= 1) added += __shfl_xor_sync(0xffffffffu, added, offset);
    total = total * carry + added;
    highest = next;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kSums; i++) {
      const int d = sub + kPrefillLanes * i;
      if (d < dim) {
        float acc = sums[i] * carry;
        for (int k = 0; k < kPrefillKeys; k++) acc += ps[q * (kPrefillKeys + 1) + k] * vs[k * pitch + d];
        sums[i] = acc;
      }
    }
  }
  if (!live) return;
  T* output = static_cast<T*>(a.output) + ((static_cast<size_t>(r) * a.tokens + s0 + q) * a.heads + h) * dim;
#pragma unroll
  for (int i = 0; i < kSums; i++) {
    const int d = sub + kPrefillLanes * i;
    if (d < dim) Store(output + d, sums[i] / total);
  }
}

}  // namespace

void SlotAttentionDevice(const SlotAttentionArgs& a, void* stream) {
  if (a.rows == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(a.rows * a.tokens, a.heads);
  uintptr_t bits = reinterpret_cast<uintptr_t>(a.query) | reinterpret_cast<uintptr_t>(a.queryBias) | reinterpret_cast<uintptr_t>(a.key) |
                   reinterpret_cast<uintptr_t>(a.value) | reinterpret_cast<uintptr_t>(a.keyBias) | reinterpret_cast<uintptr_t>(a.valueBias) |
                   reinterpret_cast<uintptr_t>(a.cacheKey) | reinterpret_cast<uintptr_t>(a.cacheValue) | reinterpret_cast<uintptr_t>(a.output);
  // Several new tokens a row (their keys written already): the tiled kernel (CHORUS_PREFILL_TILES=0: the
  // per-query kernel, to compare).
  static const bool tiles = [] {
    const char* value = std::getenv("CHORUS_PREFILL_TILES");
    return value == nullptr || std::string(value) != "0";
  }();
  if (tiles && a.causal && a.tokens > 1 && a.key == nullptr && a.bias == nullptr && a.dim <= kPrefillMaxDim && PrefillSharedBytes(a.dim) <= 48 * 1024) {
    const dim3 tiles((a.tokens + kPrefillQueries - 1) / kPrefillQueries, a.rows, a.heads);
    const size_t bytes = PrefillSharedBytes(a.dim);
    switch (a.type) {
      case FloatType::kFloat16: PrefillAttentionKernel<__half><<<tiles, kPrefillThreads, bytes, s>>>(a); break;
      case FloatType::kBFloat16: PrefillAttentionKernel<__nv_bfloat16><<<tiles, kPrefillThreads, bytes, s>>>(a); break;
      default: PrefillAttentionKernel<float><<<tiles, kPrefillThreads, bytes, s>>>(a); break;
    }
    return;
  }
  // In halves: every stride a whole number of 16-byte vectors.
  bits |= 2 * (a.queryStride | a.newStride | a.rowStride | a.headStride | a.positionStride);
  if (a.type == FloatType::kFloat16 && a.dim % 8 == 0 && a.dim / 8 <= 32 && bits % 16 == 0) {
    const size_t partialFloats = static_cast<size_t>(kWideThreads / (a.dim / 8)) * a.dim;
    const size_t sharedBytes = sizeof(float) * (a.dim + SlotScoreSpan(a) + partialFloats);
    SlotAttentionWideKernel<<<grid, kWideThreads, sharedBytes, s>>>(a);
    return;
  }
  const size_t partialFloats = a.dim <= kThreads ? kThreads / a.dim * a.dim : 0;
  const size_t sharedBytes = sizeof(float) * (a.dim + SlotScoreSpan(a) + partialFloats);
  switch (a.type) {
    case FloatType::kFloat16: SlotAttentionKernel<__half><<<grid, kThreads, sharedBytes, s>>>(a); break;
    case FloatType::kBFloat16: SlotAttentionKernel<__nv_bfloat16><<<grid, kThreads, sharedBytes, s>>>(a); break;
    default: SlotAttentionKernel<float><<<grid, kThreads, sharedBytes, s>>>(a); break;
  }
}

void SlotAppendDevice(const SlotAttentionArgs& a, void* stream) {
  if (a.rows == 0) return;
  const dim3 grid(a.rows * a.tokens, a.kvHeads);
  const int threads = std::min(a.dim, 256);
  auto s = static_cast<cudaStream_t>(stream);
  switch (a.type) {
    case FloatType::kFloat16: SlotAppendKernel<__half><<<grid, threads, 0, s>>>(a); break;
    case FloatType::kBFloat16: SlotAppendKernel<__nv_bfloat16><<<grid, threads, 0, s>>>(a); break;
    default: SlotAppendKernel<float><<<grid, threads, 0, s>>>(a); break;
  }
}

}  // namespace chorus
