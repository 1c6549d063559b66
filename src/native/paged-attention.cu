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
#include <atomic>
#include <cfloat>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "cuda-check.h"
#include "device.cuh"
#include "linear.h"
#include "paged-attention.h"
#include "slot-attention.h"

namespace chorus {
namespace {

constexpr int kThreads = 128;
// Floats of the splits' partial sums in the workspace: per (token row, query head, split) its maximum,
// total and dim sums.
size_t PagedAttentionPartFloats(const PagedAttentionArgs& a, int splits) { return static_cast<size_t>(a.rows) * a.tokens * a.heads * splits * (a.dim + 2); }
constexpr int kMaxSplits = 16;
// The widest heads a clustered decode step joins (its partials in shared memory).
constexpr int kClusterDim = 256;
// The workspace of a launch in splits: the decode kernel's counters first (one per row and block
// column, at most one per row and query head, each left at zero by the launch that used it), then the
// splits' partial sums. The counters sit at the same place for every shape: launches of several shapes
// share an operator's workspace (a captured graph keeps the one it was captured with), and counters
// placed after one shape's partials lay inside a larger shape's, whose partial sums then left them
// nonzero (a later launch of the smaller shape then joined its splits wrongly or not at all).
constexpr size_t kCounterFloats = 4096;
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

// The rotary tables' 16 bytes for vector `lane` of a head of `vectors` vectors at `position` (each
// half of the head takes the same cos and sin).
template <typename T>
__device__ inline void RotaryVectors(const PagedAttentionArgs& a, int lane, int vectors, int position, float (&c)[16 / sizeof(T)], float (&s)[16 / sizeof(T)]) {
  constexpr int kPer = 16 / sizeof(T);
  const size_t table = static_cast<size_t>(position) * (a.dim / 2) + static_cast<size_t>(lane % (vectors / 2)) * kPer;
  LoadVector(static_cast<const T*>(a.cos) + table, c);
  LoadVector(static_cast<const T*>(a.sin) + table, s);
}

// The 16-byte vectors of head `head` of token row y that vector `lane` of it needs: its own and,
// rotated, its rotation partner's (vector lane +- vectors / 2); for the qkv input (`from` a.qkv, row
// y) or the bias (`from` a.bias, y 0). Lanes at or past `vectors` read vector 0 (and drop it), so
// that every load is unconditional and a block can have all of its heads' loads in flight at once.
struct HeadBits {
  uint4 own;
  uint4 other;
};

template <typename T>
__device__ inline HeadBits LoadHead(const PagedAttentionArgs& a, const void* from, size_t y, int head, int lane, int vectors, bool rotated) {
  const int l = lane < vectors ? lane : 0;
  const int half = vectors / 2;
  const int partner = l < half ? l + half : l - half;
  const uint4* x = reinterpret_cast<const uint4*>(static_cast<const T*>(from) + (y * static_cast<size_t>(a.heads + 2 * a.kvHeads) + head) * a.dim);
  HeadBits bits;
  bits.own = x[l];
  bits.other = rotated ? x[partner] : make_uint4(0, 0, 0, 0);
  return bits;
}

// HeadElement 16 bytes at a time: vector `lane` (elements lane * kPer on) of head `head`, from its
// loaded vectors (LoadHead: `raw` of the input, `bias` of a.bias where there is one), biased, normed
// and rotated with the tables' vectors c and s (RotaryVectors) when rotate, each step rounded to T.
// The `span` lanes of a group call it together (a norm's sum of squares is shuffled among them);
// lanes at or past `vectors` take part with zeros. For heads of an even number of vectors, 16-byte
// aligned.
template <typename T>
__device__ inline void FinishHead(const PagedAttentionArgs& a, int head, int lane, int vectors, int span, bool rotate, const HeadBits& raw, const HeadBits& bias,
                                  const float (&c)[16 / sizeof(T)], const float (&s)[16 / sizeof(T)], float (&out)[16 / sizeof(T)]) {
  constexpr int kPer = 16 / sizeof(T);
  const bool holds = lane < vectors;
  const int half = vectors / 2;
  const int partner = lane < half ? lane + half : lane - half;
  const T* norm = NormOf<T>(a, head);
  const bool rotated = rotate && a.cos != nullptr;
  const auto biased = [&](const uint4& x, const uint4& b, float (&o)[kPer]) {
    const T* xe = reinterpret_cast<const T*>(&x);
    const T* be = reinterpret_cast<const T*>(&b);
#pragma unroll
    for (int i = 0; i < kPer; i++) o[i] = a.bias == nullptr ? Load(xe + i) : Rounded<T>(Load(xe + i) + Load(be + i));
  };
  float own[kPer];
  float other[kPer];
#pragma unroll
  for (int i = 0; i < kPer; i++) own[i] = other[i] = 0;
  if (holds) {
    biased(raw.own, bias.own, own);
    if (rotated) biased(raw.other, bias.other, other);
  }
  // Where the heads are normed, every lane group takes the shuffles, whether its own head is normed or
  // not (the lane groups of a warp may hold different heads: a query's and the value's).
  if (a.qNorm != nullptr) {
    float squares = 0;
#pragma unroll
    for (int i = 0; i < kPer; i++) squares += own[i] * own[i];
    for (int offset = span / 2; offset > 0; offset >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    const float inverse = rsqrtf(squares / a.dim + a.epsilon);
    if (norm != nullptr && holds) {
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
#pragma unroll
  for (int i = 0; i < kPer; i++) out[i] = Rounded<T>(lane < half ? own[i] * c[i] - other[i] * s[i] : own[i] * c[i] + other[i] * s[i]);
}

// LoadHead and FinishHead in one, the rotary vectors at `position` read here.
template <typename T>
__device__ inline void HeadVector(const PagedAttentionArgs& a, size_t y, int head, int lane, int vectors, int span, int position, bool rotate, float (&out)[16 / sizeof(T)]) {
  constexpr int kPer = 16 / sizeof(T);
  const bool rotated = rotate && a.cos != nullptr;
  float c[kPer] = {};
  float s[kPer] = {};
  if (rotated && lane < vectors) RotaryVectors<T>(a, lane, vectors, position, c, s);
  const HeadBits raw = LoadHead<T>(a, a.qkv, y, head, lane, vectors, rotated);
  HeadBits bias{};
  // The bias is [(heads + 2 * kv_heads) * dim]: row 0 of the same layout.
  if (a.bias != nullptr) bias = LoadHead<T>(a, a.bias, 0, head, lane, vectors, rotated);
  FinishHead<T>(a, head, lane, vectors, span, rotate, raw, bias, c, s, out);
}

// Vector `lane` of the cache row at `to`: the floats narrowed to T, 16 bytes at once.
template <typename T>
__device__ inline void WriteVector(void* cache, size_t to, int lane, const float (&v)[16 / sizeof(T)]) {
  T out[16 / sizeof(T)];
#pragma unroll
  for (int i = 0; i < 16 / static_cast<int>(sizeof(T)); i++) out[i] = Narrowed<T>(v[i]);
  reinterpret_cast<uint4*>(static_cast<T*>(cache) + to)[lane] = *reinterpret_cast<const uint4*>(out);
}

// PagedAppendKernel 16 bytes at a time (heads that HeadVectorsFit): each lane group of `span` lanes
// takes one (token row, key head) pair, a lane its vector of the key (biased, normed, rotated) and of
// the value, as a decode step's blocks write theirs. The block's pairs are consecutive, so that a
// warp's loads of q/k/v rows and its cache writes are contiguous runs.
template <typename T>
__global__ void __launch_bounds__(kThreads) PagedAppendVectorKernel(PagedAttentionArgs a, int span) {
  constexpr int kPer = 16 / sizeof(T);
  const int vectors = a.dim / kPer;
  const long pairs = static_cast<long>(a.rows) * a.tokens * a.kvHeads;
  const long pair = static_cast<long>(blockIdx.x) * (kThreads / span) + threadIdx.x / span;
  const int lane = threadIdx.x % span;
  // Past the last pair a group takes the last one again (its lanes still join the norm's shuffles),
  // and writes nothing.
  const long mine = pair < pairs ? pair : pairs - 1;
  const size_t y = static_cast<size_t>(mine / a.kvHeads);
  const int k = static_cast<int>(mine % a.kvHeads);
  const int r = static_cast<int>(y / a.tokens);
  const int position = PositionOf(a, r, static_cast<int>(y % a.tokens));
  float key[kPer];
  float value[kPer];
  HeadVector<T>(a, y, a.heads + k, lane, vectors, span, position, true, key);
  HeadVector<T>(a, y, a.heads + a.kvHeads + k, lane, vectors, span, position, false, value);
  if (pair >= pairs || lane >= vectors) return;
  const size_t to = CacheAt(a, r, k, position);
  WriteVector<T>(a.keyCache, to, lane, key);
  WriteVector<T>(a.valueCache, to, lane, value);
}

// Each of G heads' running softmax over the positions a lane group has read: its maximum score, its
// total and its weighted sums of the values (kPer dimensions a lane).
template <int G, int kPer>
struct RunningSoftmax {
  float highest[G];
  float total[G];
  float acc[G][kPer];
  __device__ RunningSoftmax() {
#pragma unroll
    for (int g = 0; g < G; g++) {
      highest[g] = -INFINITY;
      total[g] = 0;
#pragma unroll
      for (int i = 0; i < kPer; i++) acc[g][i] = 0;
    }
  }
};

// The keys and values of positions base + u * groups + mine (u < Ahead) of key head k of row r, as
// 16-byte vectors `lane` (zeros at or past `end`, or where the lane holds none): every load issued
// before any is used.
template <typename T, int Ahead>
__device__ inline void ReadPositions(const PagedAttentionArgs& a, int r, int k, int base, int groups, int mine, int end, bool holds, int lane, uint4 (&kv)[Ahead],
                                     uint4 (&vv)[Ahead]) {
#pragma unroll
  for (int u = 0; u < Ahead; u++) {
    const int j = base + u * groups + mine;
    kv[u] = make_uint4(0, 0, 0, 0);
    vv[u] = make_uint4(0, 0, 0, 0);
    if (j < end && holds) {
      const size_t at = CacheAt(a, r, k, j);
      kv[u] = reinterpret_cast<const uint4*>(static_cast<const T*>(a.keyCache) + at)[lane];
      vv[u] = reinterpret_cast<const uint4*>(static_cast<const T*>(a.valueCache) + at)[lane];
    }
  }
}

// A lane group's running softmax of each of the G heads into shared memory at `slot`: [slot][G] maxima
// and totals (by its lane 0), [slot][G][dim] sums (by each lane holding a vector).
template <int G, int kPer>
__device__ inline void StorePart(float* maxima, float* totals, float* sums, int dim, int slot, int lane, bool holds, const float (&highest)[G], const float (&total)[G],
                                 const float (&acc)[G][kPer]) {
#pragma unroll
  for (int g = 0; g < G; g++) {
    if (lane == 0) {
      maxima[slot * G + g] = highest[g];
      totals[slot * G + g] = total[g];
    }
    if (holds) {
#pragma unroll
      for (int i = 0; i < kPer; i++) sums[(slot * G + g) * dim + lane * kPer + i] = acc[g][i];
    }
  }
}

// Element e (head e / dim, dimension e % dim) of the chunk's heads with `parts` partial softmaxes in
// shared memory ([parts][G] maxima and totals, [parts][G][dim] sums) joined: the row's output with one
// split, else the split's partial (maximum, total, sums) in the workspace.
// With `local` (a clustered decode step), the split's partial goes there instead: [G][dim + 2].
template <typename T, int G>
__device__ inline void JoinParts(const PagedAttentionArgs& a, const float* maxima, const float* totals, const float* sums, int parts, int e, size_t y, int first, int split,
                                 int splits, float* workspace, float* local = nullptr) {
  const int g = e / a.dim;
  const int d = e % a.dim;
  float m = -INFINITY;
  for (int w = 0; w < parts; w++) m = fmaxf(m, maxima[w * G + g]);
  float l = 0;
  float s = 0;
  if (m != -INFINITY) {
    for (int w = 0; w < parts; w++) {
      const float scale = maxima[w * G + g] == -INFINITY ? 0.0f : __expf(maxima[w * G + g] - m);
      l += totals[w * G + g] * scale;
      s += sums[(w * G + g) * a.dim + d] * scale;
    }
  }
  const int h = first + g;
  if (splits == 1) {
    static_cast<T*>(a.output)[(y * a.heads + h) * a.dim + d] = Narrowed<T>(s / l);
  } else {
    float* part = local != nullptr ? local + g * (a.dim + 2) : workspace + ((y * a.heads + h) * splits + split) * (a.dim + 2);
    if (d == 0) {
      part[0] = m;
      part[1] = l;
    }
    part[2 + d] = s;
  }
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
#pragma unroll
        for (int i = 0; i < kPer; i++) {
          freshKey[lane * kPer + i] = key[i];
          freshValue[lane * kPer + i] = value[i];
        }
        WriteVector<T>(a.keyCache, to, lane, key);
        WriteVector<T>(a.valueCache, to, lane, value);
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
  RunningSoftmax<G, kPer> state;
  float (&highest)[G] = state.highest;
  float (&total)[G] = state.total;
  float (&acc)[G][kPer] = state.acc;
  // Every lane of a group goes through each pass (the shuffles take the whole warp); each pass reads
  // kAhead positions' keys and values before it uses any, so that their loads are in flight together.
  for (int base = start; base < end; base += kAhead * groups) {
    uint4 kv[kAhead];
    uint4 vv[kAhead];
    ReadPositions<T, kAhead>(a, r, k, base, groups, mine, end, holds, lane, kv, vv);
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
  StorePart<G, kPer>(maxima, totals, sums, a.dim, mine, lane, holds, highest, total, acc);
  __syncthreads();
  for (int e = threadIdx.x; e < count * a.dim; e += blockDim.x) JoinParts<T, G>(a, maxima, totals, sums, groups, e, y, first, split, splits, workspace);
}

// Element d of head h of token row y: the splits' partial softmaxes (each split's maximum, total and
// sums, as read(p, m, l, sum) gives split p's) joined into the output. The splits are taken kMaxSplits
// at a time, every value of a chunk read before any is used (one round trip for the engine's splits); a
// chunk past the first rescales what the ones before it summed.
template <typename T, class Read>
__device__ inline void JoinSplitsOf(const PagedAttentionArgs& a, int splits, Read read, size_t y, int h, int d) {
  float most = -INFINITY;
  float total = 0;
  float out = 0;
  for (int first = 0; first < splits; first += kMaxSplits) {
    float m[kMaxSplits];
    float l[kMaxSplits];
    float sum[kMaxSplits];
#pragma unroll
    for (int p = 0; p < kMaxSplits; p++) {
      m[p] = -INFINITY;
      l[p] = 0.0f;
      sum[p] = 0.0f;
      if (first + p < splits) read(first + p, m[p], l[p], sum[p]);
    }
    float next = most;
#pragma unroll
    for (int p = 0; p < kMaxSplits; p++) next = l[p] > 0 ? fmaxf(next, m[p]) : next;
    if (next == -INFINITY) continue;
    const float keep = most == -INFINITY ? 0.0f : __expf(most - next);
    total *= keep;
    out *= keep;
#pragma unroll
    for (int p = 0; p < kMaxSplits; p++) {
      const float scale = l[p] > 0 ? __expf(m[p] - next) : 0.0f;
      total += l[p] * scale;
      out += sum[p] * scale;
    }
    most = next;
  }
  static_cast<T*>(a.output)[(y * a.heads + h) * a.dim + d] = Narrowed<T>(out / total);
}

// The same, the partials in the workspace (read past L1: another block wrote them).
template <typename T>
__device__ inline void JoinSplits(const PagedAttentionArgs& a, int splits, const float* workspace, size_t y, int h, int d) {
  const float* parts = workspace + (y * a.heads + h) * splits * (a.dim + 2);
  JoinSplitsOf<T>(
      a, splits,
      [&](int p, float& m, float& l, float& sum) {
        const float* part = parts + p * (a.dim + 2);
        m = __ldcg(part);
        l = __ldcg(part + 1);
        sum = __ldcg(part + 2 + d);
      },
      y, h, d);
}

// Block (token row, query head): the splits' partial sums joined.
template <typename T>
__global__ void PagedJoinKernel(PagedAttentionArgs a, int splits, const float* workspace) {
  for (int d = threadIdx.x; d < a.dim; d += blockDim.x) JoinSplits<T>(a, splits, workspace, blockIdx.x, blockIdx.y, d);
}

// A decode step (one token a row, heads of an even number of aligned 16-byte vectors): block (row,
// key head x chunk of G query heads, split), its lane groups over the split's positions as the general
// kernel's, but with nothing waiting on a load that could have been in flight already:
// - the first round's keys and values (A positions a lane group) and the rotary vectors are
//   read before the wait for the kernel before (a dependent launch), which wrote the queries alone;
// - the queries of the chunk's heads and the new key and value are read together after it;
// - each round takes one softmax update per head for its positions (not one a position);
// - with several splits, they go out as one thread block cluster (Clustered, on sm_90 unless
//   CHORUS_PAGED_CLUSTER=0): each split's partial stays in its shared memory and the ranks join them
//   there, read across the cluster; otherwise the split that finishes last joins them (a counter per
//   block column in the workspace, left at zero), rather than a launch after.
// Positions a lane group reads at once (A): 2 for 4 heads a block (their queries and sums take
// registers too) and for lane groups of up to 8 lanes (16 groups a block: 32 positions a round, as many
// as a split of a short row holds), else 4. Measured alone at batch 1 (192 positions, one head a
// block): heads of 64 halves 5.6 against 5.8 us with 4; heads of 128 halves 5.9 against 6.4 with 2.

template <typename T, int G, int A, bool Clustered>
__global__ void __launch_bounds__(kThreads) PagedDecodeKernel(PagedAttentionArgs a, int splits, float* workspace, int* counters, bool early) {
  constexpr int kPer = 16 / sizeof(T);
  constexpr int kAheadDecode = A;
  __shared__ float sums[G * (kThreads / 32) * 32 * kPer];  // [warps][G][dim]
  __shared__ float maxima[G * (kThreads / 32)];             // [warps][G]
  __shared__ float totals[G * (kThreads / 32)];
  __shared__ bool joins;
  const int r = blockIdx.x;
  const int group = a.heads / a.kvHeads;
  const int chunks = (group + G - 1) / G;
  const int k = blockIdx.y / chunks;
  const int first = k * group + (blockIdx.y % chunks) * G;
  const int count = min(G, k * group + group - first);
  const int split = blockIdx.z;
  const int position = PositionOf(a, r, 0);
  const int oldest = FirstKey(position, a.window);
  const int n = position + 1;
  const int per = (n - oldest + splits - 1) / splits;
  const int start = oldest + split * per;
  const int end = min(n, start + per);
  const bool fresh = position >= start && position < end;
  // The projection after may start pulling its weights now (its blocks wait for this one's end).
  if (early) LetDependentsStart();

  const int vectors = a.dim / kPer;
  int span = 1;
  while (span < vectors) span <<= 1;
  const int groups = kThreads / span;
  const int lane = threadIdx.x % span;
  const int mine = threadIdx.x / span;
  const bool holds = lane < vectors;
  uint4 kv[kAheadDecode];
  uint4 vv[kAheadDecode];
  const auto read = [&](int base) { ReadPositions<T, kAheadDecode>(a, r, k, base, groups, mine, end, holds, lane, kv, vv); };
  read(start);
  float c[kPer] = {};
  float s[kPer] = {};
  const bool rotated = a.cos != nullptr;
  if (rotated && holds) RotaryVectors<T>(a, lane, vectors, position, c, s);
  WaitForPrevious();

  // The chunk's queries and the new key and value (read by every block, written by the split that
  // holds the position): every load first, then the bias, norms and rotation.
  // Heads 0..G-1: the chunk's queries; G: the key; G + 1: the value (rotated all but the value).
  int heads[G + 2];
#pragma unroll
  for (int g = 0; g < G; g++) heads[g] = first + min(g, count - 1);
  heads[G] = a.heads + k;
  heads[G + 1] = a.heads + a.kvHeads + k;
  HeadBits raw[G + 2];
  HeadBits bias[G + 2];
#pragma unroll
  for (int g = 0; g < G + 2; g++) raw[g] = LoadHead<T>(a, a.qkv, r, heads[g], lane, vectors, rotated && g <= G);
  if (a.bias != nullptr) {
#pragma unroll
    for (int g = 0; g < G + 2; g++) bias[g] = LoadHead<T>(a, a.bias, 0, heads[g], lane, vectors, rotated && g <= G);
  }
  float q[G][kPer];
#pragma unroll
  for (int g = 0; g < G; g++) {
    float v[kPer];
    FinishHead<T>(a, heads[g], lane, vectors, span, true, raw[g], bias[g], c, s, v);
#pragma unroll
    for (int i = 0; i < kPer; i++) q[g][i] = holds && g < count ? v[i] : 0.0f;
  }
  float key[kPer];
  float value[kPer];
  FinishHead<T>(a, heads[G], lane, vectors, span, true, raw[G], bias[G], c, s, key);
  FinishHead<T>(a, heads[G + 1], lane, vectors, span, false, raw[G + 1], bias[G + 1], c, s, value);
  // Every lane holds its part of them: the lane group that scores the position takes them from here.
  if (fresh && mine == 0 && holds) {
    const size_t to = CacheAt(a, r, k, position);
    WriteVector<T>(a.keyCache, to, lane, key);
    WriteVector<T>(a.valueCache, to, lane, value);
  }

  RunningSoftmax<G, kPer> state;
  float (&highest)[G] = state.highest;
  float (&total)[G] = state.total;
  float (&acc)[G][kPer] = state.acc;
  for (int base = start; base < end; base += kAheadDecode * groups) {
    // This round's keys and values aside, the next round's loads go out before this one is used.
    uint4 kr[kAheadDecode];
    uint4 vr[kAheadDecode];
#pragma unroll
    for (int u = 0; u < kAheadDecode; u++) {
      kr[u] = kv[u];
      vr[u] = vv[u];
    }
    if (base + kAheadDecode * groups < end) read(base + kAheadDecode * groups);
    float score[kAheadDecode][G];
    float vf[kAheadDecode][kPer];
#pragma unroll
    for (int u = 0; u < kAheadDecode; u++) {
      const int j = base + u * groups + mine;
      const bool own = fresh && j == position && holds;
      const T* ke = reinterpret_cast<const T*>(&kr[u]);
      const T* ve = reinterpret_cast<const T*>(&vr[u]);
      float kf[kPer];
#pragma unroll
      for (int i = 0; i < kPer; i++) {
        kf[i] = own ? key[i] : Load(ke + i);
        vf[u][i] = own ? value[i] : Load(ve + i);
      }
#pragma unroll
      for (int g = 0; g < G; g++) {
        float dot = 0;
#pragma unroll
        for (int i = 0; i < kPer; i++) dot += q[g][i] * kf[i];
        for (int offset = span / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        score[u][g] = j < end && g < count ? SoftCapped(dot * a.scale, a.softcap) : -INFINITY;
      }
    }
    // One update of each head's running softmax for the round's positions (the same in every lane
    // of a group: the scores were summed across them).
#pragma unroll
    for (int g = 0; g < G; g++) {
      float next = highest[g];
#pragma unroll
      for (int u = 0; u < kAheadDecode; u++) next = fmaxf(next, score[u][g]);
      if (next == -INFINITY) continue;
      const float keep = __expf(highest[g] - next);
      total[g] *= keep;
#pragma unroll
      for (int i = 0; i < kPer; i++) acc[g][i] *= keep;
#pragma unroll
      for (int u = 0; u < kAheadDecode; u++) {
        const float p = __expf(score[u][g] - next);
        total[g] += p;
#pragma unroll
        for (int i = 0; i < kPer; i++) acc[g][i] += p * vf[u][i];
      }
      highest[g] = next;
    }
  }
  // The projection after may start pulling its weights.
  if (!early) LetDependentsStart();
  // The lane groups of a warp joined by shuffles (each pair's sums scaled to the larger maximum).
#pragma unroll
  for (int g = 0; g < G; g++) {
    for (int offset = span; offset < 32; offset *= 2) {
      const float theirs = __shfl_xor_sync(0xffffffffu, highest[g], offset);
      const float theirTotal = __shfl_xor_sync(0xffffffffu, total[g], offset);
      const float m = fmaxf(highest[g], theirs);
      const float mineScale = highest[g] == -INFINITY ? 0.0f : __expf(highest[g] - m);
      const float theirScale = theirs == -INFINITY ? 0.0f : __expf(theirs - m);
      total[g] = total[g] * mineScale + theirTotal * theirScale;
#pragma unroll
      for (int i = 0; i < kPer; i++) acc[g][i] = acc[g][i] * mineScale + __shfl_xor_sync(0xffffffffu, acc[g][i], offset) * theirScale;
      highest[g] = m;
    }
  }
  // Then the warps' in shared memory: [warps][G] maxima and totals, [warps][G][dim] sums.
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 < span) StorePart<G, kPer>(maxima, totals, sums, a.dim, warp, lane, holds, highest, total, acc);
  __syncthreads();
  if constexpr (Clustered) {
    // The splits are one cluster: each one's partial in its own shared memory, then the chunk's
    // elements joined across the ranks (spread over them), read where they are.
    __shared__ float part[G * (kClusterDim + 2)];
    for (int e = threadIdx.x; e < count * a.dim; e += kThreads) JoinParts<T, G>(a, maxima, totals, sums, kThreads / 32, e, r, first, split, splits, workspace, part);
    ClusterBarrier();
    for (int e = split * kThreads + threadIdx.x; e < count * a.dim; e += splits * kThreads) {
      const int g = e / a.dim;
      const int d = e % a.dim;
      JoinSplitsOf<T>(
          a, splits,
          [&](int p, float& m, float& l, float& sum) {
            const float* theirs = RankShared(part, p) + g * (a.dim + 2);
            m = theirs[0];
            l = theirs[1];
            sum = theirs[2 + d];
          },
          r, first + g, d);
    }
    // No rank leaves while another may still read its shared memory.
    ClusterBarrier();
    return;
  }
  for (int e = threadIdx.x; e < count * a.dim; e += kThreads) JoinParts<T, G>(a, maxima, totals, sums, kThreads / 32, e, r, first, split, splits, workspace);
  if (splits == 1) return;
  // The last split of this (row, chunk) to finish joins them all.
  __threadfence();
  __syncthreads();
  int* counter = counters + static_cast<size_t>(r) * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0) joins = atomicAdd(counter, 1) == splits - 1;
  __syncthreads();
  if (!joins) return;
  __threadfence();
  for (int e = threadIdx.x; e < count * a.dim; e += kThreads) JoinSplits<T>(a, splits, workspace, r, first + e / a.dim, e % a.dim);
  if (threadIdx.x == 0) *counter = 0;
}

// Decode steps of many rows (one split: blocks enough without splitting positions) and prefills of few
// blocks (CHORUS_PAGED_MMA_PREFILL=0: none; PagedMmaPrefillKernel takes the others) on tensor cores:
// block (row, key head, chunk of tokens) takes
// the query heads of the key head's group for as many of the row's tokens as make at most 16 query rows
// (the rows of an m16n8k16 product, padded with zeros: 2 tokens for groups of 8, 16 for one head a key
// head), over the positions up to its last token's; each query row's scores are masked to its own
// token's keys. Its warps take tiles of 16 positions in turn (warp w tiles w, w + kMmaWarps, ...), each
// tile's keys and values copied into shared memory S - 1 tiles ahead (cp.async; a decode step's first
// before the wait for the projection before, a dependent launch); a tile's scores are Q K^T (16 query
// rows by 16 positions, float32 sums), each row's online softmax runs in registers, and P V is added in
// float32 with P as its rounding to the float type plus what that leaves out (two products). The warps'
// partial softmaxes are joined in shared memory at the end. A decode step writes its new key and value
// itself (the block of its row and key head); a prefill's are written by the launch before. Heads of
// 64, 96, 128 or 256 dimensions, 16-bit float types. The general kernel read a position's key and
// value in a lane group and summed each head's dot product across it (shuffles), a chain of round trips
// per position that left 64-row steps latency-bound.
constexpr int kMmaWarps = 4;
constexpr int kMmaTile = 16;
constexpr int kMmaHeads = 16;

// Halves of a staged key or value row: the head and 16 bytes of skew (rows 16 bytes off the banks of
// the one before, so that a tile's 8-row reads fall in distinct banks).
template <int D>
__host__ __device__ constexpr int MmaRowHalves() { return D + 8; }

// Stages of each warp's tiles: all of a 192-position row's tiles in flight at once for heads of 64.
// Decode steps with heads of 128 take kMmaDeepStages where their blocks are few (MmaDeepStages).
template <int D>
__host__ __device__ constexpr int MmaStages() { return D <= 64 ? 3 : 2; }
constexpr int kMmaDeepStages = 3;

// The kernel's dynamic shared memory: the warps' staged tiles in S stages (later the warps' sums,
// joined), the queries [16][row halves] and the new key and value [2][D].
template <int D, int S = MmaStages<D>()>
__host__ __device__ constexpr size_t MmaTileBytes() { return static_cast<size_t>(kMmaWarps) * S * 2 * kMmaTile * MmaRowHalves<D>() * 2; }
template <int D>
__host__ __device__ constexpr size_t MmaJoinBytes() { return static_cast<size_t>(kMmaWarps) * kMmaHeads * (D + 2) * sizeof(float); }
template <int D, int S = MmaStages<D>()>
__host__ __device__ constexpr size_t MmaStagedBytes() { return MmaTileBytes<D, S>() > MmaJoinBytes<D>() ? MmaTileBytes<D, S>() : MmaJoinBytes<D>(); }
template <int D, int S = MmaStages<D>()>
__host__ __device__ constexpr size_t MmaSharedBytes() { return MmaStagedBytes<D, S>() + static_cast<size_t>(kMmaHeads) * MmaRowHalves<D>() * 2 + 2 * D * 2; }

// Two floats as a pair of the 16-bit type, the first in the low half.
template <typename T>
__device__ inline uint32_t PackPair(float lo, float hi);
template <>
__device__ inline uint32_t PackPair<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <>
__device__ inline uint32_t PackPair<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Two floats as a pair of the 16-bit type (`high`, the first in the low half) and the pair of what that
// rounding left out (`low`).
template <typename T>
__device__ inline void SplitPair(float first, float second, uint32_t& high, uint32_t& low) {
  high = PackPair<T>(first, second);
  float kept[2];
  WidenWord<T>(high, kept);
  low = PackPair<T>(first - kept[0], second - kept[1]);
}

// Whether a warp keeps its 16 query rows' A fragments in registers (heads of up to 128) or reads them
// from shared memory at each tile (wider heads, whose sums alone take 128 registers a lane).
template <int D>
constexpr bool kMmaQueriesHeld = D <= 128;

// The lane's A fragment of values 16 kk .. 16 kk + 15 of the 16 query rows staged at `queries` ([16][row
// halves]).
template <typename T, int D>
__device__ inline void MmaQueryFragment(const T* queries, int kk, int lane, uint32_t (&f)[4]) {
  constexpr int kRow = MmaRowHalves<D>();
  const int g = lane / 4;
  const int t = lane % 4;
  f[0] = *reinterpret_cast<const uint32_t*>(queries + g * kRow + 16 * kk + 2 * t);
  f[1] = *reinterpret_cast<const uint32_t*>(queries + (g + 8) * kRow + 16 * kk + 2 * t);
  f[2] = *reinterpret_cast<const uint32_t*>(queries + g * kRow + 16 * kk + 8 + 2 * t);
  f[3] = *reinterpret_cast<const uint32_t*>(queries + (g + 8) * kRow + 16 * kk + 8 + 2 * t);
}

// The held fragments of every 16 values of the staged queries (none for wider heads).
template <typename T, int D>
__device__ inline void MmaHoldQueries(const T* queries, int lane, uint32_t (&qf)[kMmaQueriesHeld<D> ? D / 16 : 1][4]) {
  if constexpr (kMmaQueriesHeld<D>) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) MmaQueryFragment<T, D>(queries, kk, lane, qf[kk]);
  }
}

// Query rows g and g + 8 of a warp's 16 (row i: token firstToken + i / group of row r): the newest key
// each reads (its token's; -1 for a row past the queryRows, or where `reads` is false) and the oldest
// (back to its window's).
__device__ inline void MmaRowKeys(const PagedAttentionArgs& a, int r, int firstToken, int queryRows, int group, int g, bool reads, int (&newest)[2], int (&oldest)[2]) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int i = g + 8 * h;
    const int at = PositionOf(a, r, firstToken + min(i, queryRows - 1) / group);
    newest[h] = reads && i < queryRows ? at : -1;
    oldest[h] = FirstKey(at, a.window);
  }
}

// A lane's running softmax of its query rows g and g + 8 (as RunningSoftmax is the other kernels'):
// their maxima, this lane's share of their totals, and their weighted sums of the values in the
// products' fragments (o[nn][0..1] row g, dimensions 8 nn + 2 t on; o[nn][2..3] row g + 8).
template <int D>
struct MmaSoftmax {
  float highest[2] = {-INFINITY, -INFINITY};
  float total[2] = {0, 0};
  float o[D / 8][4];
  __device__ MmaSoftmax() {
#pragma unroll
    for (int nn = 0; nn < D / 8; nn++) o[nn][0] = o[nn][1] = o[nn][2] = o[nn][3] = 0;
  }
  // Each row's whole total, summed over the 4 lanes that share the row.
  __device__ void SumTotals() {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      total[h] += __shfl_xor_sync(0xffffffffu, total[h], 1);
      total[h] += __shfl_xor_sync(0xffffffffu, total[h], 2);
    }
  }
};

// The keys and values of positions base .. base + 15 of row r's key head k into a stage (`to`: keys,
// then values kTileHalves after), asynchronously, 16 bytes a copy: thread `first` of `stride` threads
// takes copies first, first + stride, ...; positions at or past n are zeros (position `start` read for
// them, nothing copied).
template <typename T, int D, int Stride>
__device__ inline void StageTile(const PagedAttentionArgs& a, const T* keys, const T* values, int r, int k, int base, int start, int n, T* to, int first) {
  constexpr int kPer = 8;
  constexpr int kRow = MmaRowHalves<D>();
  constexpr int kChunks = D / kPer;
  constexpr int kTileHalves = kMmaTile * kRow;
#pragma unroll
  for (int c = first; c < kMmaTile * kChunks; c += Stride) {
    const int row = c / kChunks;
    const int column = c % kChunks;
    const int j = base + row;
    const size_t at = CacheAt(a, r, k, j < n ? j : start) + column * kPer;
    CopyAsync16(to + row * kRow + column * kPer, keys + at, j < n);
    CopyAsync16(to + kTileHalves + row * kRow + column * kPer, values + at, j < n);
  }
}

// One staged tile of 16 positions (keys at `tile`, values kTileHalves after, from position `base`)
// against a warp's 16 query rows: the scores Q K^T, each row's online softmax (rows g and g + 8 of the
// lane: `newest` and `oldest` the keys each reads, -1 newest for none) and P V added to `state`. The
// queries' A fragments are `qf` for heads of up to 128, else read from `queries` ([16][row halves]).
template <typename T, int D>
__device__ inline void MmaTileStep(const PagedAttentionArgs& a, const T* tile, int base, const T* queries, const uint32_t (&qf)[kMmaQueriesHeld<D> ? D / 16 : 1][4],
                                   const int (&newest)[2], const int (&oldest)[2], MmaSoftmax<D>& state, int lane) {
  float (&highest)[2] = state.highest;
  float (&total)[2] = state.total;
  float (&o)[D / 8][4] = state.o;
  constexpr int kRow = MmaRowHalves<D>();
  constexpr int kTileHalves = kMmaTile * kRow;
  constexpr bool kQueriesHeld = kMmaQueriesHeld<D>;
  const int g = lane / 4;
  const int t = lane % 4;
  float sc[2][4] = {};
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    uint32_t q[4];
    if constexpr (kQueriesHeld) {
#pragma unroll
      for (int e = 0; e < 4; e++) q[e] = qf[kk][e];
    } else {
      MmaQueryFragment<T, D>(queries, kk, lane, q);
    }
#pragma unroll
    for (int nt = 0; nt < 2; nt++) {
      const T* key = tile + (nt * 8 + g) * kRow + 16 * kk + 2 * t;
      Mma<T>(sc[nt], q[0], q[1], q[2], q[3], *reinterpret_cast<const uint32_t*>(key), *reinterpret_cast<const uint32_t*>(key + 8));
    }
  }
  // Scores (scaled, capped; -inf where the row does not read the key), each row's new maximum across
  // the 4 lanes that share it, then the probabilities as the next product's A fragment.
  float p[2][4];
#pragma unroll
  for (int nt = 0; nt < 2; nt++) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int j = base + nt * 8 + 2 * t + (e & 1);
      const bool reads = j >= oldest[e / 2] && j <= newest[e / 2];
      p[nt][e] = reads ? SoftCapped(sc[nt][e] * a.scale, a.softcap) : -INFINITY;
    }
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float next = fmaxf(fmaxf(p[0][2 * h], p[0][2 * h + 1]), fmaxf(p[1][2 * h], p[1][2 * h + 1]));
    next = fmaxf(next, __shfl_xor_sync(0xffffffffu, next, 1));
    next = fmaxf(next, __shfl_xor_sync(0xffffffffu, next, 2));
    next = fmaxf(next, highest[h]);
    // A row that has read no key yet keeps nothing (all its probabilities 0).
    const float floor = next == -INFINITY ? 0.0f : next;
    const float keep = __expf(highest[h] - floor);
    float sum = 0;
#pragma unroll
    for (int nt = 0; nt < 2; nt++) {
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; e++) {
        p[nt][e] = __expf(p[nt][e] - floor);
        sum += p[nt][e];
      }
    }
    total[h] = total[h] * keep + sum;
    highest[h] = next;
#pragma unroll
    for (int nn = 0; nn < D / 8; nn++) {
      o[nn][2 * h] *= keep;
      o[nn][2 * h + 1] *= keep;
    }
  }
  // P as the float type's pairs and what they leave out (each p = high + low to about 22 bits): the
  // weighted sum takes both, as near float32 P as the general kernel's.
  uint32_t pa[4];
  uint32_t pl[4];
#pragma unroll
  for (int q = 0; q < 4; q++) SplitPair<T>(p[q / 2][2 * (q % 2)], p[q / 2][2 * (q % 2) + 1], pa[q], pl[q]);
  // The values transposed by ldmatrix: lanes 8 m .. 8 m + 7 address matrix m's rows (positions 8 (m %
  // 2) on, dimensions 8 (nn + m / 2) on).
  const T* value = tile + kTileHalves + ((lane / 8) % 2 * 8 + lane % 8) * kRow + (lane / 16) * 8;
#pragma unroll
  for (int nn = 0; nn < D / 8; nn += 2) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(value + nn * 8));
    uint32_t b0, b1, b2, b3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3) : "r"(address));
    Mma<T>(o[nn], pa[0], pa[1], pa[2], pa[3], b0, b1);
    Mma<T>(o[nn], pl[0], pl[1], pl[2], pl[3], b0, b1);
    Mma<T>(o[nn + 1], pa[0], pa[1], pa[2], pa[3], b2, b3);
    Mma<T>(o[nn + 1], pl[0], pl[1], pl[2], pl[3], b2, b3);
  }
}

template <typename T, int D, int S = MmaStages<D>()>
__global__ void __launch_bounds__(kMmaWarps * 32) PagedMmaKernel(PagedAttentionArgs a) {
  constexpr int kPer = 8;  // 16-bit types: 8 a 16-byte vector
  constexpr int kRow = MmaRowHalves<D>();
  constexpr int kChunks = D / kPer;  // 16-byte chunks of a row
  constexpr int kTileHalves = kMmaTile * kRow;
  extern __shared__ float4 mmaShared[];
  unsigned char* shared = reinterpret_cast<unsigned char*>(mmaShared);
  T* staged = reinterpret_cast<T*>(shared);  // [warps][S][keys, values][16][kRow]
  T* queries = reinterpret_cast<T*>(shared + MmaStagedBytes<D, S>());  // [16][kRow]
  T* fresh = queries + kMmaHeads * kRow;  // [key, value][D]

  const int group = a.heads / a.kvHeads;
  const int perChunk = kMmaHeads / group;  // tokens a block takes
  const int chunks = (a.tokens + perChunk - 1) / perChunk;
  const int r = blockIdx.x / chunks;
  const int firstToken = blockIdx.x % chunks * perChunk;
  // Query row i: token firstToken + i / group, head first + i % group.
  const int queryRows = min(perChunk, a.tokens - firstToken) * group;
  const int k = blockIdx.y;
  const int first = k * group;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool decode = a.tokens == 1;
  // The chunk's last token's position (a decode step's one), and the oldest key any of its tokens reads.
  const int position = PositionOf(a, r, firstToken + queryRows / group - 1);
  const int start = FirstKey(PositionOf(a, r, firstToken), a.window);
  const int n = position + 1;
  const int tiles = (n - start + kMmaTile - 1) / kMmaTile;
  const int mine = tiles > warp ? (tiles - warp + kMmaWarps - 1) / kMmaWarps : 0;
  const T* keys = static_cast<const T*>(a.keyCache);
  const T* values = static_cast<const T*>(a.valueCache);
  const auto stage = [&](int s) { return staged + (static_cast<size_t>(warp) * S + s) * 2 * kTileHalves; };
  // This warp's i-th tile into stage s (rows past the last position zeros), one commit group either way.
  const auto load = [&](int i, int s) {
    if (i < mine) StageTile<T, D, 32>(a, keys, values, r, k, start + (warp + i * kMmaWarps) * kMmaTile, start, n, stage(s), lane);
    CommitAsync();
  };
#pragma unroll
  for (int i = 0; i < S - 1; i++) load(i, i);
  const int vectors = D / kPer;
  int span = 1;
  while (span < vectors) span <<= 1;
  const int slots = kMmaWarps * 32 / span;
  const int part = static_cast<int>(threadIdx.x) % span;
  WaitForPrevious();

  // The query rows, then a decode step's new key and value (written into the cache and kept here), each
  // biased, normed and rotated by a lane group; every lane group takes the same number of passes (the
  // norms' shuffles take the whole warp). Rows past the query rows are zeros.
  for (int e = threadIdx.x; e < (kMmaHeads - queryRows) * kRow; e += kMmaWarps * 32) queries[queryRows * kRow + e] = Narrowed<T>(0.0f);
  const int heads = queryRows + (decode ? 2 : 0);
  const int passes = (heads + slots - 1) / slots;
  for (int pass = 0; pass < passes; pass++) {
    const int h = pass * slots + static_cast<int>(threadIdx.x) / span;
    const int which = min(h, heads - 1);
    const int token = which < queryRows ? firstToken + which / group : 0;
    const int head = which < queryRows ? first + which % group : which == queryRows ? a.heads + k : a.heads + a.kvHeads + k;
    float v[kPer];
    HeadVector<T>(a, static_cast<size_t>(r) * a.tokens + token, head, part, vectors, span, PositionOf(a, r, token), which <= queryRows, v);
    if (h < heads && part < vectors) {
      WriteVector<T>(which < queryRows ? queries + which * kRow : fresh + (which - queryRows) * D, 0, part, v);
      if (which >= queryRows) WriteVector<T>(which == queryRows ? a.keyCache : a.valueCache, CacheAt(a, r, k, position), part, v);
    }
  }
  __syncthreads();

  const int g = lane / 4;
  const int t = lane % 4;
  // The queries' A fragments (kMmaQueriesHeld).
  uint32_t qf[kMmaQueriesHeld<D> ? D / 16 : 1][4];
  MmaHoldQueries<T, D>(queries, lane, qf);
  // Query rows g and g + 8: the keys each reads (its token's, back to its window's oldest; none past
  // the query rows), and their running softmax.
  int newest[2];
  int oldest[2];
  MmaRowKeys(a, r, firstToken, queryRows, group, g, true, newest, oldest);
  MmaSoftmax<D> state;
  for (int i = 0; i < mine; i++) {
    load(i + S - 1, (i + S - 1) % S);
    WaitAsync<S - 1>();
    __syncwarp();
    T* tile = stage(i % S);
    const int base = start + (warp + i * kMmaWarps) * kMmaTile;
    // The new key and value, copied before the cache had them: taken from here.
    if (decode && position >= base && position < base + kMmaTile) {
      const int row = position - base;
      for (int c = lane; c < 2 * kChunks; c += 32) {
        const int value = c / kChunks;
        const int column = c % kChunks;
        *reinterpret_cast<uint4*>(tile + value * kTileHalves + row * kRow + column * kPer) = *reinterpret_cast<const uint4*>(fresh + value * D + column * kPer);
      }
    }
    __syncwarp();
    MmaTileStep<T, D>(a, tile, base, queries, qf, newest, oldest, state, lane);
    __syncwarp();
  }
  // The projection after may start pulling its weights.
  LetDependentsStart();
  state.SumTotals();
  // The warps' partial softmaxes: [warps][16] maxima and totals, [warps][16][D] sums, over the tiles.
  WaitAsync<0>();
  __syncthreads();
  float* sums = reinterpret_cast<float*>(shared);
  float* maxima = sums + kMmaWarps * kMmaHeads * D;
  float* totals = maxima + kMmaWarps * kMmaHeads;
#pragma unroll
  for (int nn = 0; nn < D / 8; nn++) {
#pragma unroll
    for (int e = 0; e < 4; e++) sums[(warp * kMmaHeads + g + (e / 2) * 8) * D + nn * 8 + 2 * t + (e & 1)] = state.o[nn][e];
  }
  if (t == 0) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      maxima[warp * kMmaHeads + g + 8 * h] = state.highest[h];
      totals[warp * kMmaHeads + g + 8 * h] = state.total[h];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < queryRows * D; e += kMmaWarps * 32) {
    const int h = e / D;
    const int d = e % D;
    const size_t y = static_cast<size_t>(r) * a.tokens + firstToken + h / group;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kMmaWarps; w++) m = fmaxf(m, maxima[w * kMmaHeads + h]);
    float l = 0;
    float sum = 0;
#pragma unroll
    for (int w = 0; w < kMmaWarps; w++) {
      const float mw = maxima[w * kMmaHeads + h];
      const float scale = mw == -INFINITY ? 0.0f : __expf(mw - m);
      l += totals[w * kMmaHeads + h] * scale;
      sum += sums[(w * kMmaHeads + h) * D + d] * scale;
    }
    static_cast<T*>(a.output)[(y * a.heads + first + h % group) * D + d] = Narrowed<T>(sum / l);
  }
}

// Prefills on tensor cores, the tiles shared: block (row, kMmaWarps chunks of tokens, key head), warp w
// the chunk's w-th (as many tokens as make 16 query rows, as PagedMmaKernel's block takes), each warp its
// own 16 query rows over every tile of the block's keys. The block copies each tile of 16 positions into
// shared memory once (cp.async, S - 1 tiles ahead) for all its warps, which skip the tiles outside their
// own tokens' keys; each warp's softmax is whole at the end, so it writes its rows itself (no join).
// PagedMmaKernel's blocks took 16 query rows each and split the positions among their warps: each
// block read the keys and values up to its last token again (604 MB a layer from L2 for Llama-2-7B's
// prefill of 64 x 128 tokens, whose keys and values are 134 MB) and joined its warps' partial sums.
template <int D>
__host__ __device__ constexpr size_t MmaPrefillSharedBytes() {
  return static_cast<size_t>(MmaStages<D>()) * 2 * kMmaTile * MmaRowHalves<D>() * 2 + static_cast<size_t>(kMmaWarps) * kMmaHeads * MmaRowHalves<D>() * 2;
}

template <typename T, int D>
__global__ void __launch_bounds__(kMmaWarps * 32) PagedMmaPrefillKernel(PagedAttentionArgs a) {
  constexpr int kPer = 8;  // 16-bit types: 8 a 16-byte vector
  constexpr int kRow = MmaRowHalves<D>();
  constexpr int kTileHalves = kMmaTile * kRow;
  constexpr int S = MmaStages<D>();
  extern __shared__ float4 mmaShared[];
  T* staged = reinterpret_cast<T*>(mmaShared);     // [S][keys, values][16][kRow]
  T* queries = staged + S * 2 * kTileHalves;       // [warps][16][kRow]

  const int group = a.heads / a.kvHeads;
  const int perChunk = kMmaHeads / group;
  const int chunks = (a.tokens + perChunk - 1) / perChunk;
  const int blockChunks = (chunks + kMmaWarps - 1) / kMmaWarps;
  const int r = blockIdx.x / blockChunks;
  const int k = blockIdx.y;
  const int first = k * group;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // This warp's chunk (a warp past the last chunk takes the last one's rows and writes nothing).
  const int chunk = blockIdx.x % blockChunks * kMmaWarps + warp;
  const bool live = chunk < chunks;
  const int firstToken = min(chunk, chunks - 1) * perChunk;
  const int queryRows = min(perChunk, a.tokens - firstToken) * group;
  // The block's keys: from the oldest its first token reads to its last token's position.
  const int blockFirst = blockIdx.x % blockChunks * kMmaWarps * perChunk;
  const int blockLast = min(a.tokens, blockFirst + kMmaWarps * perChunk) - 1;
  const int start = FirstKey(PositionOf(a, r, blockFirst), a.window);
  const int n = PositionOf(a, r, blockLast) + 1;
  const int tiles = (n - start + kMmaTile - 1) / kMmaTile;
  const T* keys = static_cast<const T*>(a.keyCache);
  const T* values = static_cast<const T*>(a.valueCache);
  // Tile i into stage s by the whole block (rows past the last position zeros), one commit group either way.
  const auto load = [&](int i, int s) {
    if (i < tiles) StageTile<T, D, kMmaWarps * 32>(a, keys, values, r, k, start + i * kMmaTile, start, n, staged + s * 2 * kTileHalves, threadIdx.x);
    CommitAsync();
  };
#pragma unroll
  for (int i = 0; i < S - 1; i++) load(i, i);

  // The warp's query rows, biased, normed and rotated by its lane groups (every group the same passes:
  // the norms' shuffles take the whole warp); rows past them zeros.
  T* mine = queries + warp * kMmaHeads * kRow;
  const int vectors = D / kPer;
  int span = 1;
  while (span < vectors) span <<= 1;
  const int slots = 32 / span;
  const int part = lane % span;
  for (int e = lane; e < (kMmaHeads - queryRows) * kRow; e += 32) mine[queryRows * kRow + e] = Narrowed<T>(0.0f);
  const int passes = (queryRows + slots - 1) / slots;
  for (int pass = 0; pass < passes; pass++) {
    const int h = pass * slots + lane / span;
    const int which = min(h, queryRows - 1);
    const int token = firstToken + which / group;
    float v[kPer];
    HeadVector<T>(a, static_cast<size_t>(r) * a.tokens + token, first + which % group, part, vectors, span, PositionOf(a, r, token), true, v);
    if (h < queryRows && part < vectors) WriteVector<T>(mine + which * kRow, 0, part, v);
  }
  __syncwarp();

  const int g = lane / 4;
  const int t = lane % 4;
  uint32_t qf[kMmaQueriesHeld<D> ? D / 16 : 1][4];
  MmaHoldQueries<T, D>(mine, lane, qf);
  int newest[2];
  int oldest[2];
  MmaRowKeys(a, r, firstToken, queryRows, group, g, live, newest, oldest);
  // The warp's keys, for skipping the tiles it has no use for.
  const int warpNewest = live ? PositionOf(a, r, firstToken + queryRows / group - 1) : -1;
  const int warpOldest = FirstKey(PositionOf(a, r, firstToken), a.window);
  MmaSoftmax<D> state;
  for (int i = 0; i < tiles; i++) {
    load(i + S - 1, (i + S - 1) % S);
    WaitAsync<S - 1>();
    __syncthreads();
    const int base = start + i * kMmaTile;
    if (base <= warpNewest && base + kMmaTile > warpOldest) MmaTileStep<T, D>(a, staged + i % S * 2 * kTileHalves, base, mine, qf, newest, oldest, state, lane);
    // Every warp done with the stage before it is loaded again.
    __syncthreads();
  }
  WaitAsync<0>();
  state.SumTotals();
  if (!live) return;
  T* output = static_cast<T*>(a.output);
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = g + 8 * h;
    if (row >= queryRows) continue;
    const size_t y = static_cast<size_t>(r) * a.tokens + firstToken + row / group;
    T* to = output + (y * a.heads + first + row % group) * D + 2 * t;
#pragma unroll
    for (int nn = 0; nn < D / 8; nn++) {
      to[nn * 8] = Narrowed<T>(state.o[nn][2 * h] / state.total[h]);
      to[nn * 8 + 1] = Narrowed<T>(state.o[nn][2 * h + 1] / state.total[h]);
    }
  }
}

// Rows x key heads under which a decode step takes one query head a block: few blocks, whose
// positions are split, and whose time is each block's chain of dependent steps (shorter for one head).
constexpr long kFewDecodeBlocks = 64;

// Query heads per block: the group's size rounded up to a power of two, at most 4 (each head keeps
// its query and sums in registers); one for a decode step of few rows and key heads.
int HeadsPerBlock(const PagedAttentionArgs& a) {
  if (a.tokens == 1 && static_cast<long>(a.rows) * a.kvHeads < kFewDecodeBlocks) return 1;
  const int group = a.heads / a.kvHeads;
  int g = 1;
  while (g < group && g < 4) g <<= 1;
  return g;
}

// Whether the heads of `a` are an even number of 16-byte vectors and every pointer 16-byte aligned: the
// kernels' 16-byte reads of heads, their rotation partners and cache rows.
template <typename T>
bool HeadVectorsFit(const PagedAttentionArgs& a) {
  constexpr int kPer = 16 / sizeof(T);
  const uintptr_t bits = reinterpret_cast<uintptr_t>(a.qkv) | reinterpret_cast<uintptr_t>(a.bias) | reinterpret_cast<uintptr_t>(a.cos) | reinterpret_cast<uintptr_t>(a.sin) |
                         reinterpret_cast<uintptr_t>(a.qNorm) | reinterpret_cast<uintptr_t>(a.kNorm) | reinterpret_cast<uintptr_t>(a.keyCache) |
                         reinterpret_cast<uintptr_t>(a.valueCache);
  return (a.dim / kPer) % 2 == 0 && bits % 16 == 0;
}

// Which steps the decode kernel takes, from CHORUS_PAGED_DECODE (read at each launch, to compare the
// kernels in one process): the decode steps whose positions are split (unset), none (0: the general
// kernel for every step) or every decode step (2).
enum class DecodeSteps { kSplit, kNone, kEvery };
DecodeSteps DecodeStepsSetting() {
  const char* setting = std::getenv("CHORUS_PAGED_DECODE");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) return DecodeSteps::kNone;
  if (setting != nullptr && std::strcmp(setting, "2") == 0) return DecodeSteps::kEvery;
  return DecodeSteps::kSplit;
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
  const bool vectorized = HeadVectorsFit<T>(a);
  float* partials = splits > 1 ? workspace + kCounterFloats : workspace;
  PagedAttentionKernel<T, G><<<grid, kThreads, sharedBytes, stream>>>(a, splits, partials, vectorized);
  if (splits > 1) PagedJoinKernel<T><<<dim3(a.rows * a.tokens, a.heads), std::min(a.dim, 256), 0, stream>>>(a, splits, partials);
}

// Whether a decode step's splits go out as one thread block cluster (CHORUS_PAGED_CLUSTER=0: not), which
// joins them through distributed shared memory instead of a counter and the workspace; and whether
// clusters past the portable 8 blocks are taken. Each is turned off for good where such a launch is
// refused (with and without its dependent launch): 16 splits then go out as 8.
std::atomic<bool> decodeClusters{[] {
  const char* value = std::getenv("CHORUS_PAGED_CLUSTER");
  return value == nullptr || std::strcmp(value, "0") != 0;
}()};
std::atomic<bool> wideClusters{true};

// Whether a decode step's kernel lets the projection after it start (a dependent launch, whose blocks
// pull their first weights and then wait for this kernel's end) at its own start, or once its
// positions are read. At batch 1 on an H100 the start paid for heads of 256, whose attention runs
// longest (Gemma-2-2B's step 2.224 against 2.228-2.231 ms), and cost Qwen3-1.7B's heads of 128 4-6 us a
// step; Llama-3.2-1B's heads of 64 did not move. CHORUS_PAGED_TRIGGER=early or late: one or the other.
enum class DecodeTrigger { kByHead, kEarly, kLate };
const DecodeTrigger decodeTrigger = [] {
  const char* value = std::getenv("CHORUS_PAGED_TRIGGER");
  if (value != nullptr && std::strcmp(value, "early") == 0) return DecodeTrigger::kEarly;
  if (value != nullptr && std::strcmp(value, "late") == 0) return DecodeTrigger::kLate;
  return DecodeTrigger::kByHead;
}();
constexpr int kEarlyTriggerDim = 256;
bool DecodeTriggersEarly(const PagedAttentionArgs& a) {
  return decodeTrigger == DecodeTrigger::kEarly || (decodeTrigger == DecodeTrigger::kByHead && a.dim >= kEarlyTriggerDim);
}

// Whether `kernel` may take clusters past the portable size on `device`, asked of CUDA once per kernel
// and device (a kernel's attributes are set for the current device).
bool AllowsWideClusters(const void* kernel, int device) {
  static std::mutex lock;
  static std::map<std::pair<const void*, int>, bool> allowed;
  std::lock_guard<std::mutex> held(lock);
  const auto key = std::make_pair(kernel, device);
  auto found = allowed.find(key);
  if (found != allowed.end()) return found->second;
  const bool yes = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
  if (!yes) cudaGetLastError();
  allowed.emplace(key, yes);
  return yes;
}

// kernel over `grid` with its splits (grid.z) along z as one cluster, a dependent launch where Linear's
// are; false, launching nothing, where the launch is refused.
template <typename... Params, typename... Args>
bool LaunchDecodeCluster(void (*kernel)(Params...), dim3 grid, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  cudaLaunchAttribute attributes[2];
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = 1;
  attributes[0].val.clusterDim.y = 1;
  attributes[0].val.clusterDim.z = grid.z;
  attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attributes;
  for (int count = LinearDependentLaunchFlag().load(std::memory_order_relaxed) ? 2 : 1; count >= 1; count--) {
    config.numAttrs = count;
    if (cudaLaunchKernelEx(&config, kernel, args...) == cudaSuccess) return true;
    cudaGetLastError();
  }
  return false;
}

template <typename T, int G>
void LaunchDecode(const PagedAttentionArgs& a, int splits, float* workspace, cudaStream_t stream) {
  const int chunks = (a.heads / a.kvHeads + G - 1) / G;
  const dim3 grid(a.rows, a.kvHeads * chunks, splits);
  int* counters = reinterpret_cast<int*>(workspace);
  float* partials = splits > 1 ? workspace + kCounterFloats : workspace;
  constexpr int kPer = 16 / sizeof(T);
  int span = 1;
  while (span < a.dim / kPer) span <<= 1;
  // 4 heads a block always read 2 ahead (no kernel of 4 heads and 4 ahead is built).
  constexpr int kWideAhead = G >= 4 ? 2 : 4;
  const bool early = DecodeTriggersEarly(a);
  // Clustered: the splits need no workspace, so where 16 blocks a cluster are refused, 8 splits go.
  int device = 0;
  if (splits > 1 && splits <= kMaxSplits && a.dim <= kClusterDim && decodeClusters.load(std::memory_order_relaxed) && cudaGetDevice(&device) == cudaSuccess && TakesClusters(device)) {
    auto clustered = span <= 8 ? PagedDecodeKernel<T, G, 2, true> : PagedDecodeKernel<T, G, kWideAhead, true>;
    const bool wide = splits > 8 && wideClusters.load(std::memory_order_relaxed) && AllowsWideClusters(reinterpret_cast<const void*>(clustered), device);
    const int taken = splits > 8 && !wide ? 8 : splits;
    if (LaunchDecodeCluster(clustered, dim3(grid.x, grid.y, taken), stream, a, taken, partials, counters, early)) return;
    (taken > 8 ? wideClusters : decodeClusters).store(false);
  }
  auto kernel = span <= 8 ? PagedDecodeKernel<T, G, 2, false> : PagedDecodeKernel<T, G, kWideAhead, false>;
  LaunchMaybeDependent(LinearDependentLaunchFlag(), kernel, grid, dim3(kThreads), stream, a, splits, partials, counters, early);
}

// The decode kernel where a decode step's positions are split (few rows); the general kernel, as fast
// there, takes the steps of many rows.
template <typename T>
bool DecodeKernelTakes(const PagedAttentionArgs& a, int splits) {
  const DecodeSteps decode = DecodeStepsSetting();
  const bool decodeStep = a.tokens == 1 && (decode == DecodeSteps::kEvery || (decode == DecodeSteps::kSplit && splits > 1));
  return decodeStep && HeadVectorsFit<T>(a);
}

// Whether the tensor-core kernel takes a launch (16-bit float types): a decode step in one split (many
// rows), for heads of 64, 96, 128 or 256 (Llama's, Phi-3's, Qwen's, Mistral's, Gemma 2's: the kernels
// built) and groups of up to 16 query heads; not with CHORUS_PAGED_MMA=0 (read at each launch, to compare the kernels in
// one process) or where CHORUS_PAGED_DECODE asks for one kernel for every step. CHORUS_PAGED_MMA=2
// gives it the decode steps of few rows too (to check it against a reference at any batch).
// Prefills too, unless CHORUS_PAGED_MMA_PREFILL=0 (to compare). They were opt-in while a 512-token
// parity run (bench/gpu/llama/parity.sh, decode steps of few rows in the decode kernel) had NaN logits
// after a request prefilled anew at about 240 tokens: the split decode steps' counters then lay under a
// larger shape's partials in the shared workspace. With the counters at one place (kCounterFloats) the
// same run was NaN-free and at 99.41% of transformers' fp16 ids on TinyLlama.
// Whether the tensor-core kernel's shared memory for heads of `dim` fits a block on the current device
// (heads of 256 take 141 KiB: an A100 or H100 gives a block up to 163 or 227 KiB, the sm_86 and sm_89
// parts 99 KiB, where the other kernels take those heads).
bool MmaFitsDevice(int dim) {
  int device = 0;
  int most = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const size_t needed = dim == 64 ? MmaSharedBytes<64>() : dim == 96 ? MmaSharedBytes<96>() : dim == 128 ? MmaSharedBytes<128>() : MmaSharedBytes<256>();
  return needed <= static_cast<size_t>(most);
}

template <typename T>
bool MmaKernelTakes(const PagedAttentionArgs& a, int splits) {
  const char* setting = std::getenv("CHORUS_PAGED_MMA");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) return false;
  // 2: every step its heads fit, its positions split or not (the kernel reads them all in one block).
  const bool every = setting != nullptr && std::strcmp(setting, "2") == 0;
  const char* prefills = std::getenv("CHORUS_PAGED_MMA_PREFILL");
  if (a.tokens > 1 && prefills != nullptr && std::strcmp(prefills, "0") == 0) return false;
  const bool dims = a.dim == 64 || a.dim == 96 || a.dim == 128 || a.dim == 256;
  return (splits == 1 || every) && dims && a.heads / a.kvHeads <= kMmaHeads && DecodeStepsSetting() == DecodeSteps::kSplit && HeadVectorsFit<T>(a) && MmaFitsDevice(a.dim);
}

// Whether a decode step with heads of 128 stages kMmaDeepStages tiles a warp, not 2: where its blocks
// (a row and key head each) fill the GPU at most twice over, 3 a multiprocessor (167-168 registers a
// thread in either). Fewer blocks each read more positions, and more reads in flight keep the memory
// busy; many blocks keep it busy already, and there the third stage only crowds the multiprocessor.
// At 64 rows on an H100 (bench/gpu/attention/stages.sh): Llama-3-8B's 512 blocks over 1,024 positions
// took 107.0 us against 118.0, over 2,048 205.9 against 227.5 (paged: 204.2 against 252.4), over 192
// 29.3 against 30.9; Llama-2-7B's 2,048 blocks took 94.5 us in 3 stages against 83.1 in 2 over 192.
// CHORUS_PAGED_MMA_STAGES=2 or 3 forces one (read at each launch).
bool MmaDeepStages(const PagedAttentionArgs& a) {
  const char* forced = std::getenv("CHORUS_PAGED_MMA_STAGES");
  if (forced != nullptr && (std::strcmp(forced, "2") == 0 || std::strcmp(forced, "3") == 0)) return std::strcmp(forced, "3") == 0;
  return static_cast<long>(a.rows) * a.kvHeads <= 2L * 3 * CurrentMultiprocessors();
}

// PagedMmaKernel<T, D, S>'s dynamic shared memory, allowed on this device where past 48 KiB.
template <typename T, int D, int S>
size_t MmaKernelBytes() {
  constexpr size_t bytes = MmaSharedBytes<D, S>();
  if constexpr (bytes > 48 * 1024) {
    static std::atomic<unsigned long long> asked{0};
    AllowSharedBytes(asked, PagedMmaKernel<T, D, S>, bytes);
  }
  return bytes;
}

// A decode step on tensor cores, S stages a warp, as a dependent launch (its first tiles read before the
// wait).
template <typename T, int D, int S>
void LaunchMmaDecode(const PagedAttentionArgs& a, cudaStream_t stream) {
  LaunchMaybeDependentShared(LinearDependentLaunchFlag(), PagedMmaKernel<T, D, S>, dim3(a.rows, a.kvHeads), dim3(kMmaWarps * 32), MmaKernelBytes<T, D, S>(), stream, a);
}

// A decode step goes out as a dependent launch (LaunchMmaDecode); a prefill as a plain one, after the
// launch that wrote its keys and values.
template <typename T, int D>
void LaunchMma(const PagedAttentionArgs& a, cudaStream_t stream) {
  const int perChunk = kMmaHeads / (a.heads / a.kvHeads);
  const int chunks = (a.tokens + perChunk - 1) / perChunk;
  // Prefills with blocks enough for two a multiprocessor share each tile among a block's warps; fewer
  // (a lone prompt) keep the decode steps' kernel, whose 4x the blocks spread wider. CHORUS_PAGED_MMA_PREFILL
  // (read at each launch, to compare and to test): `warps` keeps that kernel for every prefill, `shared`
  // takes the shared tiles for every one.
  const char* prefills = std::getenv("CHORUS_PAGED_MMA_PREFILL");
  const bool warps = prefills != nullptr && std::strcmp(prefills, "warps") == 0;
  const bool shared = prefills != nullptr && std::strcmp(prefills, "shared") == 0;
  const long prefillBlocks = static_cast<long>(a.rows) * ((chunks + kMmaWarps - 1) / kMmaWarps) * a.kvHeads;
  if (a.tokens > 1 && !warps && (shared || prefillBlocks >= 2L * CurrentMultiprocessors())) {
    constexpr size_t prefillBytes = MmaPrefillSharedBytes<D>();
    if constexpr (prefillBytes > 48 * 1024) {
      static std::atomic<unsigned long long> askedPrefill{0};
      AllowSharedBytes(askedPrefill, PagedMmaPrefillKernel<T, D>, prefillBytes);
    }
    PagedMmaPrefillKernel<T, D><<<dim3(a.rows * ((chunks + kMmaWarps - 1) / kMmaWarps), a.kvHeads), kMmaWarps * 32, prefillBytes, stream>>>(a);
    return;
  }
  if (a.tokens == 1) {
    if constexpr (D == 128) {
      if (MmaDeepStages(a)) {
        LaunchMmaDecode<T, D, kMmaDeepStages>(a, stream);
        return;
      }
    }
    LaunchMmaDecode<T, D, MmaStages<D>()>(a, stream);
  } else {
    PagedMmaKernel<T, D><<<dim3(a.rows * chunks, a.kvHeads), kMmaWarps * 32, MmaKernelBytes<T, D, MmaStages<D>()>(), stream>>>(a);
  }
}

// A prefill's keys and values into the cache: 16 bytes a lane where the heads fit (CHORUS_PAGED_APPEND=0,
// read at each launch to compare: a block per token row and key head, an element a thread). Measured in
// Llama-2-7B's prefill of 64 rows of 128 tokens on an H100, the element kernel took 461 us a layer.
template <typename T>
void LaunchAppend(const PagedAttentionArgs& a, cudaStream_t stream) {
  const char* setting = std::getenv("CHORUS_PAGED_APPEND");
  if (HeadVectorsFit<T>(a) && (setting == nullptr || std::strcmp(setting, "0") != 0)) {
    constexpr int kPer = 16 / sizeof(T);
    int span = 1;
    while (span < a.dim / kPer) span <<= 1;
    const long pairs = static_cast<long>(a.rows) * a.tokens * a.kvHeads;
    const long perBlock = kThreads / span;
    PagedAppendVectorKernel<T><<<static_cast<unsigned>((pairs + perBlock - 1) / perBlock), kThreads, 0, stream>>>(a, span);
    return;
  }
  PagedAppendKernel<T><<<dim3(a.rows * a.tokens, a.kvHeads), std::min(a.dim, 256), 0, stream>>>(a);
}

template <typename T>
void LaunchAll(const PagedAttentionArgs& a, int splits, float* workspace, cudaStream_t stream) {
  constexpr int kPer = 16 / sizeof(T);
  if (a.dim % kPer != 0 || a.dim / kPer > 32) {
    throw std::invalid_argument("PagedAttention on CUDA takes head_dim a multiple of " + std::to_string(kPer) + " up to " + std::to_string(32 * kPer) + ", not " + std::to_string(a.dim));
  }
  if (splits > 1 && static_cast<size_t>(a.rows) * a.tokens * a.heads > kCounterFloats) {
    throw std::invalid_argument("PagedAttention takes splits for at most " + std::to_string(kCounterFloats) + " token rows x heads, not " + std::to_string(static_cast<size_t>(a.rows) * a.tokens * a.heads));
  }
  bool mma = false;
  if constexpr (!std::is_same<T, float>::value) mma = MmaKernelTakes<T>(a, splits);
  const auto launchMma = [&] {
    if constexpr (!std::is_same<T, float>::value) {
      switch (a.dim) {
        case 64: LaunchMma<T, 64>(a, stream); break;
        case 96: LaunchMma<T, 96>(a, stream); break;
        case 128: LaunchMma<T, 128>(a, stream); break;
        default: LaunchMma<T, 256>(a, stream); break;
      }
    }
  };
  if (mma && a.tokens == 1) {
    launchMma();
    return;
  }
  if (DecodeKernelTakes<T>(a, splits)) {
    switch (HeadsPerBlock(a)) {
      case 1: LaunchDecode<T, 1>(a, splits, workspace, stream); break;
      case 2: LaunchDecode<T, 2>(a, splits, workspace, stream); break;
      default: LaunchDecode<T, 4>(a, splits, workspace, stream); break;
    }
    return;
  }
  // A prefill's tokens attend over each other's keys: all are written first. A decode step's blocks
  // write their own.
  if (a.tokens > 1) LaunchAppend<T>(a, stream);
  if (mma) {
    launchMma();
    return;
  }
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
  // Splits take a counter per row and query head at most.
  if (static_cast<size_t>(a.rows) * a.heads > kCounterFloats) return 1;
  return static_cast<int>(std::min<long>(std::max<long>(wanted, 1), kMaxSplits));
}

size_t PagedAttentionWorkspaceFloats(const PagedAttentionArgs& a, int splits) {
  if (splits <= 1) return 0;
  return kCounterFloats + PagedAttentionPartFloats(a, splits);
}

bool PagedDecodeKernelTakes(const PagedAttentionArgs& a, int splits) {
  constexpr int kPer = 8;  // 16 bytes of a 16-bit type
  if (a.type == FloatType::kFloat32 || a.dim % kPer != 0 || a.dim / kPer > 32) return false;
  return a.type == FloatType::kFloat16 ? DecodeKernelTakes<__half>(a, splits) : DecodeKernelTakes<__nv_bfloat16>(a, splits);
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
