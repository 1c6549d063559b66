// PagedAttention's CUDA kernels (paged-attention.h). A prefill's first launch writes every new token's
// key and value into its block (a decode step's are written by the block whose split holds the
// position); then one block of threads per (token row, key head, split) takes the query heads
// that read that key head (up to 4 at a time) over its share of the row's positions: groups of lanes
// read one position's key and value as 16-byte vectors (each read once for all the heads) and keep an
// online softmax per head; the groups' partial sums are joined in shared memory, and with several
// splits a last launch joins the splits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <stdexcept>
#include <string>

#include "device.cuh"
#include "paged-attention.h"
#include "slot-attention.h"

namespace chorus {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxSplits = 16;
// Positions whose keys and values a lane reads before it uses any.
constexpr int kAhead = 2;

// Row r's position of token s (kept inside its blocks), and where position j of key head k is.
__device__ inline int PositionOf(const PagedAttentionArgs& a, int r, int s) {
  return min(max(a.seqlens[r] + 1 - a.tokens + s, 0), a.maxBlocks * a.blockSize - 1);
}

__device__ inline size_t CacheAt(const PagedAttentionArgs& a, int r, int k, int j) {
  const int block = a.blockTable == nullptr ? r : min(max(a.blockTable[static_cast<size_t>(r) * a.maxBlocks + j / a.blockSize], 0), a.blocks - 1);
  return ((static_cast<size_t>(block) * a.kvHeads + k) * a.blockSize + j % a.blockSize) * a.dim;
}

// The norm weights of head `head` (counted over q, k and v): q_norm's, k_norm's, or none.
template <typename T>
__device__ inline const T* NormOf(const PagedAttentionArgs& a, int head) {
  if (a.qNorm == nullptr || head >= a.heads + a.kvHeads) return nullptr;
  return static_cast<const T*>(head < a.heads ? a.qNorm : a.kNorm);
}

// Element e of head `head` of token row y, biased (rounded to T).
template <typename T>
__device__ inline float BiasedElement(const PagedAttentionArgs& a, size_t y, int head, int e) {
  const T* qkv = static_cast<const T*>(a.qkv) + y * static_cast<size_t>(a.heads + 2 * a.kvHeads) * a.dim + static_cast<size_t>(head) * a.dim;
  if (a.bias == nullptr) return Load(qkv + e);
  return Rounded<T>(Load(qkv + e) + Load(static_cast<const T*>(a.bias) + static_cast<size_t>(head) * a.dim + e));
}

// The inverse root mean square of head `head` of token row y (biased) where the head is normed, else 1.
template <typename T>
__device__ inline float InverseRms(const PagedAttentionArgs& a, size_t y, int head) {
  if (NormOf<T>(a, head) == nullptr) return 1.0f;
  float squares = 0;
  for (int e = 0; e < a.dim; e++) {
    const float x = BiasedElement<T>(a, y, head, e);
    squares += x * x;
  }
  return rsqrtf(squares / a.dim + a.epsilon);
}

// Element d of head `head` (counted over q, k and v) of token row y, biased, normed (inverse rms
// `inverse`, from InverseRms) and rotated at `position` when rotate, each step rounded to T (as the
// host's HeadOf).
template <typename T>
__device__ inline float HeadElement(const PagedAttentionArgs& a, size_t y, int head, int d, int position, bool rotate, float inverse) {
  const T* norm = NormOf<T>(a, head);
  const auto at = [&](int e) {
    const float x = BiasedElement<T>(a, y, head, e);
    return norm == nullptr ? x : Rounded<T>(x * inverse * Load(norm + e));
  };
  const float x = at(d);
  if (!rotate || a.cos == nullptr) return x;
  const int half = a.dim / 2;
  const int i = d % half;
  const float c = Load(static_cast<const T*>(a.cos) + static_cast<size_t>(position) * half + i);
  const float s = Load(static_cast<const T*>(a.sin) + static_cast<size_t>(position) * half + i);
  return Rounded<T>(d < half ? x * c - at(d + half) * s : x * c + at(d - half) * s);
}

// Element d of token row y's key head k (normed with `inverse`, rotated) and of its value, written at
// `to` in the caches; returns them as floats (key, value).
template <typename T>
__device__ inline float2 AppendElement(const PagedAttentionArgs& a, size_t y, int k, int d, int position, size_t to, float inverse) {
  const float2 kv = make_float2(HeadElement<T>(a, y, a.heads + k, d, position, true, inverse), HeadElement<T>(a, y, a.heads + a.kvHeads + k, d, position, false, 1.0f));
  static_cast<T*>(a.keyCache)[to + d] = Narrowed<T>(kv.x);
  static_cast<T*>(a.valueCache)[to + d] = Narrowed<T>(kv.y);
  return kv;
}

// Block (token row, key head): the token's key (rotated) and value into the row's block.
template <typename T>
__global__ void PagedAppendKernel(PagedAttentionArgs a) {
  const int y = blockIdx.x;
  const int r = y / a.tokens;
  const int k = blockIdx.y;
  const int position = PositionOf(a, r, y % a.tokens);
  const size_t to = CacheAt(a, r, k, position);
  const float inverse = InverseRms<T>(a, y, a.heads + k);
  for (int d = threadIdx.x; d < a.dim; d += blockDim.x) AppendElement<T>(a, y, k, d, position, to, inverse);
}

// The widest head the kernels take (16-byte vectors of 2-byte floats, 32 lanes).
constexpr int kMaxDim = 256;

// The 16 bytes at p (16-byte aligned) as floats.
template <typename T>
__device__ inline void LoadVector(const T* p, float (&out)[16 / sizeof(T)]) {
  const uint4 bits = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&bits);
#pragma unroll
  for (int i = 0; i < 16 / static_cast<int>(sizeof(T)); i++) out[i] = Load(e + i);
}

// HeadElement 16 bytes at a time: vector `lane` (elements lane * kPer on) of head `head` of token row
// y, biased, normed and rotated at `position` when rotate, each step rounded to T. The `span` lanes
// of a group call it together (a norm's sum of squares is shuffled among them); lanes at or past
// `vectors` take part with zeros. For heads of an even number of vectors, 16-byte aligned (the
// rotation's partner of vector v is vector v +- vectors / 2).
template <typename T>
__device__ inline void HeadVector(const PagedAttentionArgs& a, size_t y, int head, int lane, int vectors, int span, int position, bool rotate, float (&out)[16 / sizeof(T)]) {
  constexpr int kPer = 16 / sizeof(T);
  const bool holds = lane < vectors;
  const int half = vectors / 2;
  const int partner = lane < half ? lane + half : lane - half;
  const T* x = static_cast<const T*>(a.qkv) + y * static_cast<size_t>(a.heads + 2 * a.kvHeads) * a.dim + static_cast<size_t>(head) * a.dim;
  const T* bias = a.bias == nullptr ? nullptr : static_cast<const T*>(a.bias) + static_cast<size_t>(head) * a.dim;
  const T* norm = NormOf<T>(a, head);
  const bool rotated = rotate && a.cos != nullptr;
  const auto biased = [&](int v, float (&o)[kPer]) {
    LoadVector(x + v * kPer, o);
    if (bias != nullptr) {
      float b[kPer];
      LoadVector(bias + v * kPer, b);
#pragma unroll
      for (int i = 0; i < kPer; i++) o[i] = Rounded<T>(o[i] + b[i]);
    }
  };
  float own[kPer];
  float other[kPer];
#pragma unroll
  for (int i = 0; i < kPer; i++) own[i] = other[i] = 0;
  if (holds) {
    biased(lane, own);
    if (rotated) biased(partner, other);
  }
  if (norm != nullptr) {
    float squares = 0;
#pragma unroll
    for (int i = 0; i < kPer; i++) squares += own[i] * own[i];
    for (int offset = span / 2; offset > 0; offset >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    const float inverse = rsqrtf(squares / a.dim + a.epsilon);
    if (holds) {
      float w[kPer];
      LoadVector(norm + lane * kPer, w);
#pragma unroll
      for (int i = 0; i < kPer; i++) own[i] = Rounded<T>(own[i] * inverse * w[i]);
      if (rotated) {
        LoadVector(norm + partner * kPer, w);
#pragma unroll
        for (int i = 0; i < kPer; i++) other[i] = Rounded<T>(other[i] * inverse * w[i]);
      }
    }
  }
  if (!rotated || !holds) {
#pragma unroll
    for (int i = 0; i < kPer; i++) out[i] = own[i];
    return;
  }
  float c[kPer];
  float s[kPer];
  const size_t table = static_cast<size_t>(position) * (a.dim / 2) + static_cast<size_t>(lane % half) * kPer;
  LoadVector(static_cast<const T*>(a.cos) + table, c);
  LoadVector(static_cast<const T*>(a.sin) + table, s);
#pragma unroll
  for (int i = 0; i < kPer; i++) out[i] = Rounded<T>(lane < half ? own[i] * c[i] - other[i] * s[i] : own[i] * c[i] + other[i] * s[i]);
}

// Block (token row, key head x chunk of G query heads, split). See the file's comment.
template <typename T, int G>
__global__ void __launch_bounds__(kThreads) PagedAttentionKernel(PagedAttentionArgs a, int splits, float* workspace, bool vectorized) {
  constexpr int kPer = 16 / sizeof(T);
  extern __shared__ float shared[];
  const int y = blockIdx.x;
  const int r = y / a.tokens;
  const int group = a.heads / a.kvHeads;
  const int chunks = (group + G - 1) / G;
  const int k = blockIdx.y / chunks;
  const int first = k * group + (blockIdx.y % chunks) * G;
  const int count = min(G, k * group + group - first);
  const int split = blockIdx.z;
  const int position = PositionOf(a, r, y % a.tokens);
  // The keys oldest..position (the window's, with one) in `splits` shares, read where they are: a
  // captured step takes each row's length from the device.
  const int oldest = FirstKey(position, a.window);
  const int n = position + 1;
  const int per = (n - oldest + splits - 1) / splits;
  const int start = oldest + split * per;
  const int end = min(n, start + per);

  const int vectors = a.dim / kPer;
  int span = 1;
  while (span < vectors) span <<= 1;
  const int groups = kThreads / span;
  const int lane = threadIdx.x % span;
  const int mine = threadIdx.x / span;
  const bool holds = lane < vectors;

  float q[G][kPer];
#pragma unroll
  for (int g = 0; g < G; g++) {
    if (vectorized) {
      float v[kPer];
      HeadVector<T>(a, y, g < count ? first + g : first, lane, vectors, span, position, true, v);
#pragma unroll
      for (int i = 0; i < kPer; i++) q[g][i] = holds && g < count ? v[i] : 0.0f;
    } else {
      const float inverse = holds && g < count ? InverseRms<T>(a, y, first + g) : 1.0f;
#pragma unroll
      for (int i = 0; i < kPer; i++) q[g][i] = holds && g < count ? HeadElement<T>(a, y, first + g, lane * kPer + i, position, true, inverse) : 0.0f;
    }
  }
  // A decode step's new key and value: written by the blocks of the split that holds the position (the
  // same values from each chunk of query heads), and taken from here rather than read back.
  __shared__ float freshKey[kMaxDim];
  __shared__ float freshValue[kMaxDim];
  const bool fresh = a.tokens == 1 && position >= start && position < end;
  if (fresh) {
    const size_t to = CacheAt(a, r, k, position);
    if (vectorized) {
      float key[kPer];
      float value[kPer];
      HeadVector<T>(a, y, a.heads + k, lane, vectors, span, position, true, key);
      HeadVector<T>(a, y, a.heads + a.kvHeads + k, lane, vectors, span, position, false, value);
      if (mine == 0 && holds) {
        T keyOut[kPer];
        T valueOut[kPer];
#pragma unroll
        for (int i = 0; i < kPer; i++) {
          freshKey[lane * kPer + i] = key[i];
          freshValue[lane * kPer + i] = value[i];
          keyOut[i] = Narrowed<T>(key[i]);
          valueOut[i] = Narrowed<T>(value[i]);
        }
        reinterpret_cast<uint4*>(static_cast<T*>(a.keyCache) + to)[lane] = *reinterpret_cast<const uint4*>(keyOut);
        reinterpret_cast<uint4*>(static_cast<T*>(a.valueCache) + to)[lane] = *reinterpret_cast<const uint4*>(valueOut);
      }
    } else {
      const float inverse = InverseRms<T>(a, y, a.heads + k);
      for (int d = threadIdx.x; d < a.dim; d += blockDim.x) {
        const float2 kv = AppendElement<T>(a, y, k, d, position, to, inverse);
        freshKey[d] = kv.x;
        freshValue[d] = kv.y;
      }
    }
    __syncthreads();
  }
  float highest[G];
  float total[G];
  float acc[G][kPer];
#pragma unroll
  for (int g = 0; g < G; g++) {
    highest[g] = -INFINITY;
    total[g] = 0;
#pragma unroll
    for (int i = 0; i < kPer; i++) acc[g][i] = 0;
  }
  const T* keys = static_cast<const T*>(a.keyCache);
  const T* values = static_cast<const T*>(a.valueCache);
  // Every lane of a group goes through each pass (the shuffles take the whole warp); each pass reads
  // kAhead positions' keys and values before it uses any, so that their loads are in flight together.
  for (int base = start; base < end; base += kAhead * groups) {
    uint4 kv[kAhead];
    uint4 vv[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; u++) {
      const int j = base + u * groups + mine;
      kv[u] = make_uint4(0, 0, 0, 0);
      vv[u] = make_uint4(0, 0, 0, 0);
      if (j < end && holds) {
        const size_t at = CacheAt(a, r, k, j);
        kv[u] = reinterpret_cast<const uint4*>(keys + at)[lane];
        vv[u] = reinterpret_cast<const uint4*>(values + at)[lane];
      }
    }
#pragma unroll
    for (int u = 0; u < kAhead; u++) {
      const int j = base + u * groups + mine;
      const bool valid = j < end;
      const bool own = fresh && j == position;
      const T* ke = reinterpret_cast<const T*>(&kv[u]);
      const T* ve = reinterpret_cast<const T*>(&vv[u]);
      float kf[kPer];
      float vf[kPer];
#pragma unroll
      for (int i = 0; i < kPer; i++) {
        kf[i] = own && holds ? freshKey[lane * kPer + i] : Load(ke + i);
        vf[i] = own && holds ? freshValue[lane * kPer + i] : Load(ve + i);
      }
#pragma unroll
      for (int g = 0; g < G; g++) {
        float dot = 0;
#pragma unroll
        for (int i = 0; i < kPer; i++) dot += q[g][i] * kf[i];
        for (int offset = span / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        if (valid && g < count) {
          const float score = SoftCapped(dot * a.scale, a.softcap);
          const float next = fmaxf(highest[g], score);
          const float keep = __expf(highest[g] - next);
          const float p = __expf(score - next);
          total[g] = total[g] * keep + p;
#pragma unroll
          for (int i = 0; i < kPer; i++) acc[g][i] = acc[g][i] * keep + p * vf[i];
          highest[g] = next;
        }
      }
    }
  }
  // The groups' partial sums: [groups][G] maxima and totals, then [groups][G][dim] sums.
  float* maxima = shared;
  float* totals = maxima + groups * G;
  float* sums = totals + groups * G;
#pragma unroll
  for (int g = 0; g < G; g++) {
    if (lane == 0) {
      maxima[mine * G + g] = highest[g];
      totals[mine * G + g] = total[g];
    }
    if (holds) {
#pragma unroll
      for (int i = 0; i < kPer; i++) sums[(mine * G + g) * a.dim + lane * kPer + i] = acc[g][i];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < count * a.dim; e += blockDim.x) {
    const int g = e / a.dim;
    const int d = e % a.dim;
    float m = -INFINITY;
    for (int w = 0; w < groups; w++) m = fmaxf(m, maxima[w * G + g]);
    float l = 0;
    float s = 0;
    if (m != -INFINITY) {
      for (int w = 0; w < groups; w++) {
        const float scale = __expf(maxima[w * G + g] - m);
        l += totals[w * G + g] * scale;
        s += sums[(w * G + g) * a.dim + d] * scale;
      }
    }
    const int h = first + g;
    if (splits == 1) {
      static_cast<T*>(a.output)[(static_cast<size_t>(y) * a.heads + h) * a.dim + d] = Narrowed<T>(s / l);
    } else {
      float* part = workspace + ((static_cast<size_t>(y) * a.heads + h) * splits + split) * (a.dim + 2);
      if (d == 0) {
        part[0] = m;
        part[1] = l;
      }
      part[2 + d] = s;
    }
  }
}

// Block (token row, query head): the splits' partial sums joined.
template <typename T>
__global__ void PagedJoinKernel(PagedAttentionArgs a, int splits, const float* workspace) {
  const int y = blockIdx.x;
  const int h = blockIdx.y;
  const float* parts = workspace + (static_cast<size_t>(y) * a.heads + h) * splits * (a.dim + 2);
  float m = -INFINITY;
  for (int s = 0; s < splits; s++) {
    if (parts[s * (a.dim + 2) + 1] > 0) m = fmaxf(m, parts[s * (a.dim + 2)]);
  }
  for (int d = threadIdx.x; d < a.dim; d += blockDim.x) {
    float l = 0;
    float sum = 0;
    for (int s = 0; s < splits; s++) {
      const float* part = parts + s * (a.dim + 2);
      if (part[1] <= 0) continue;
      const float scale = __expf(part[0] - m);
      l += part[1] * scale;
      sum += part[2 + d] * scale;
    }
    static_cast<T*>(a.output)[(static_cast<size_t>(y) * a.heads + h) * a.dim + d] = Narrowed<T>(sum / l);
  }
}

// Query heads per block: the group's size rounded up to a power of two, at most 4 (each head keeps
// its query and sums in registers).
int HeadsPerBlock(const PagedAttentionArgs& a) {
  const int group = a.heads / a.kvHeads;
  int g = 1;
  while (g < group && g < 4) g <<= 1;
  return g;
}

template <typename T, int G>
void Launch(const PagedAttentionArgs& a, int splits, float* workspace, cudaStream_t stream) {
  constexpr int kPer = 16 / sizeof(T);
  const int vectors = a.dim / kPer;
  int span = 1;
  while (span < vectors) span <<= 1;
  const int groups = kThreads / span;
  const int chunks = (a.heads / a.kvHeads + G - 1) / G;
  const size_t sharedBytes = sizeof(float) * groups * G * (a.dim + 2);
  const dim3 grid(a.rows * a.tokens, a.kvHeads * chunks, splits);
  // The heads 16 bytes at a time where each one is an even number of aligned 16-byte vectors.
  uintptr_t bits = reinterpret_cast<uintptr_t>(a.qkv) | reinterpret_cast<uintptr_t>(a.bias) | reinterpret_cast<uintptr_t>(a.cos) | reinterpret_cast<uintptr_t>(a.sin) |
                   reinterpret_cast<uintptr_t>(a.qNorm) | reinterpret_cast<uintptr_t>(a.kNorm) | reinterpret_cast<uintptr_t>(a.keyCache) | reinterpret_cast<uintptr_t>(a.valueCache);
  const bool vectorized = vectors % 2 == 0 && bits % 16 == 0;
  PagedAttentionKernel<T, G><<<grid, kThreads, sharedBytes, stream>>>(a, splits, workspace, vectorized);
  if (splits > 1) PagedJoinKernel<T><<<dim3(a.rows * a.tokens, a.heads), std::min(a.dim, 256), 0, stream>>>(a, splits, workspace);
}

template <typename T>
void LaunchAll(const PagedAttentionArgs& a, int splits, float* workspace, cudaStream_t stream) {
  constexpr int kPer = 16 / sizeof(T);
  if (a.dim % kPer != 0 || a.dim / kPer > 32) {
    throw std::invalid_argument("PagedAttention on CUDA takes head_dim a multiple of " + std::to_string(kPer) + " up to " + std::to_string(32 * kPer) + ", not " + std::to_string(a.dim));
  }
  // A prefill's tokens attend over each other's keys: all are written first. A decode step's blocks
  // write their own.
  if (a.tokens > 1) PagedAppendKernel<T><<<dim3(a.rows * a.tokens, a.kvHeads), std::min(a.dim, 256), 0, stream>>>(a);
  switch (HeadsPerBlock(a)) {
    case 1: Launch<T, 1>(a, splits, workspace, stream); break;
    case 2: Launch<T, 2>(a, splits, workspace, stream); break;
    default: Launch<T, 4>(a, splits, workspace, stream); break;
  }
}

}  // namespace

int PagedAttentionSplits(const PagedAttentionArgs& a, int multiprocessors) {
  // Prefills have blocks enough in their tokens; a decode step splits its rows' positions until the
  // GPU has about two blocks per multiprocessor.
  if (a.tokens > 1) return 1;
  const int group = a.heads / a.kvHeads;
  const int g = HeadsPerBlock(a);
  const long blocks = static_cast<long>(a.rows) * a.kvHeads * ((group + g - 1) / g);
  const long wanted = (2L * std::max(multiprocessors, 1) + blocks - 1) / blocks;
  return static_cast<int>(std::min<long>(std::max<long>(wanted, 1), kMaxSplits));
}

size_t PagedAttentionWorkspaceFloats(const PagedAttentionArgs& a, int splits) {
  return splits <= 1 ? 0 : static_cast<size_t>(a.rows) * a.tokens * a.heads * splits * (a.dim + 2);
}

void PagedAttentionDevice(const PagedAttentionArgs& a, int splits, float* workspace, void* stream) {
  if (a.rows == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (a.type) {
    case FloatType::kFloat16: LaunchAll<__half>(a, splits, workspace, s); break;
    case FloatType::kBFloat16: LaunchAll<__nv_bfloat16>(a, splits, workspace, s); break;
    default: LaunchAll<float>(a, splits, workspace, s); break;
  }
}

}  // namespace chorus
