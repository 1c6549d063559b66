#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "device.cuh"
#include "quant-device.cuh"
#include "quant-linear.h"

namespace chorus {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
// 16-byte weight reads a lane keeps in flight along a row.
constexpr int kAhead = 4;
// One warp per output o: its weight bytes read once (16 bytes a lane, kAhead reads in flight),
// dequantized in registers against each of the R rows of x (from the cache: every warp reads them),
// each 16 bytes' sums scaled once, summed across the warp.
template <typename T, int Bits, int R>
__global__ void __launch_bounds__(kThreads) QuantRowsKernel(QuantLinearArgs a) {
  const int lane = threadIdx.x & 31;
  const int o = blockIdx.x * kWarps + threadIdx.x / 32;
  if (o >= a.out) return;
  const T* x = static_cast<const T*>(a.x);
  const T* scales = static_cast<const T*>(a.scales) + static_cast<size_t>(o) * a.blocks;
  const uint8_t* w = a.weight + static_cast<size_t>(o) * a.blocks * a.blobBytes;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r] = 0;
  constexpr int kPerChunk = 128 / Bits;  // values in 16 bytes
  constexpr int kPerWord = 32 / Bits;
  const bool vectors = a.blobBytes % 16 == 0 && a.in % 8 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.weight) % 16 == 0;
  if (vectors) {
    const int perBlock = a.blobBytes / 16;
    const int chunks = a.blocks * perBlock;
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    auto use = [&](int c, const uint4& bits) {
      const int b = c / perBlock;
      const int k0 = b * a.blockSize + (c - b * perBlock) * kPerChunk;
      if (k0 >= a.in) return;  // the last block's padding
      const float scale = Load(scales + b);
      const float offset = kMagic + static_cast<float>(QuantZeroPoint(a, o, b));
      const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
      float part[R];
#pragma unroll
      for (int r = 0; r < R; r++) part[r] = 0;
      if (k0 + kPerChunk <= a.in) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
          float q[kPerWord];
          Unpack<Bits>(words[i], offset, q);
#pragma unroll
          for (int r = 0; r < R; r++) {
            float xs[kPerWord];
            LoadFloats<T, kPerWord>(x + static_cast<size_t>(r) * a.in + k0 + i * kPerWord, xs);
#pragma unroll
            for (int j = 0; j < kPerWord; j++) part[r] += xs[j] * q[j];
          }
        }
      } else {
        for (int i = 0; i < 4; i++) {
          float q[kPerWord];
          Unpack<Bits>(words[i], offset, q);
          for (int j = 0; j < kPerWord; j++) {
            const int k = k0 + i * kPerWord + j;
            if (k >= a.in) break;
#pragma unroll
            for (int r = 0; r < R; r++) part[r] += Load(x + static_cast<size_t>(r) * a.in + k) * q[j];
          }
        }
      }
#pragma unroll
      for (int r = 0; r < R; r++) acc[r] += part[r] * scale;
    };
    // kAhead reads issued before any is used (those past the row's end left out).
    for (int c = lane; c < chunks; c += kAhead * 32) {
      uint4 ahead[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; u++) {
        if (c + u * 32 < chunks) ahead[u] = __ldcs(wv + c + u * 32);
      }
#pragma unroll
      for (int u = 0; u < kAhead; u++) {
        if (c + u * 32 < chunks) use(c + u * 32, ahead[u]);
      }
    }
  } else {
    for (int k = lane; k < a.in; k += 32) {
      const int b = k / a.blockSize;
      const float v = static_cast<float>(QuantValue(a, o, k) - QuantZeroPoint(a, o, b)) * Load(scales + b);
#pragma unroll
      for (int r = 0; r < R; r++) acc[r] += v * Load(x + static_cast<size_t>(r) * a.in + k);
    }
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
  }
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
#pragma unroll
  for (int r = 0; r < R; r++) {
    if (lane == r) y[static_cast<size_t>(r) * a.out + o] = Finish<T>(acc[r], bias, o, a.activation);
  }
}


// The 8-bit wide kernel in float32 arithmetic (QuantWideRowsDevice: bfloat16, and float16 where
// CHORUS_QUANT_BYTE_PAIRS=0; float16 otherwise takes QuantBytePairsKernel, below): as Linear's decode
// kernel, a group of threads takes
// kWideOutputs consecutive weight rows (8 for one row of x, else 4; gated, half of them the gates' and
// half the up rows) and all of K, its threads striding over the rows 16 bytes (16 values) at a time
// (kWideAhead reads a row in flight), so each 16 bytes of x, read through L1, serves all the group's
// rows; each 16 bytes' sums are scaled once by their block's scale, then summed across the warp
// (shuffles) and the group's warps (shared memory). A block of 256 threads is one group, or two of 128
// where K has at most 128 16-byte chunks (K 2048: one group of 256 left half its threads without a
// chunk). Goes out as a dependent launch where Linear's does: the first weights pulled into L2 before x
// is read. One row keeps 3 blocks a multiprocessor (at most 80 registers, none spilled).
constexpr int kWideThreads = 256;
constexpr int kWideWarps = kWideThreads / 32;

// Groups a block of the wide kernel takes for K of `chunks` 16-byte chunks: two where K's chunks are
// at most half a block's threads, else one.
inline int WideGroups(int chunks) { return chunks <= kWideThreads / 2 ? 2 : 1; }
// Single rows take 8 outputs a block and one read of each row in flight (the bytes in flight of 4 and
// 2, and each block's x, scales and sums once for 8 rows rather than 4); CHORUS_QUANT_WIDE_OUTPUTS=4:
// 4 and 2, as more rows take them.
const bool wideOutputs4 = [] {
  const char* value = std::getenv("CHORUS_QUANT_WIDE_OUTPUTS");
  return value != nullptr && std::string(value) == "4";
}();

template <typename T, int R, int kWideOutputs, int kWideAhead, bool Gated, int G>
__global__ void __launch_bounds__(kWideThreads, R == 1 ? 3 : 2) QuantWideRowsKernel(QuantLinearArgs a) {
  constexpr int kBits = 8;                  // 4-bit weights take QuantNibbleRowsKernel (float16 only)
  constexpr int kPerChunk = 128 / kBits;    // values in 16 bytes
  constexpr int kWordsPer8 = kBits / 4;     // words holding 8 values
  const int perBlock = a.blobBytes / 16;
  const int chunks = a.in / kPerChunk;     // whole chunks (QuantWideRowsDevice's condition); the rest is the last block's padding
  // This thread's group and place in it; each group kWideOutputs weight rows: as many outputs, or
  // gated, half as many.
  constexpr int groupThreads = kWideThreads / G;
  const int group = G == 1 ? 0 : static_cast<int>(threadIdx.x) / groupThreads;
  const int tid = G == 1 ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x) % groupThreads;
  const int first = (static_cast<int>(blockIdx.x) * G + group) * (Gated ? kWideOutputs / 2 : kWideOutputs);
  const size_t rowBytes = static_cast<size_t>(a.blocks) * a.blobBytes;
  // Outputs past the end read the last row again (in bounds) and are not written.
  int rowOf[kWideOutputs];
  const uint4* wv[kWideOutputs];
#pragma unroll
  for (int j = 0; j < kWideOutputs; j++) {
    rowOf[j] = WideRowOf<Gated, kWideOutputs>(a, first, j);
    wv[j] = reinterpret_cast<const uint4*>(a.weight + static_cast<size_t>(rowOf[j]) * rowBytes);
  }
  float acc[kWideOutputs][R] = {};
#pragma unroll
  for (int u = 0; u < kWideAhead; u++) {
    const int c = tid + u * groupThreads;
#pragma unroll
    for (int j = 0; j < kWideOutputs; j++) {
      if (c < chunks) PrefetchL2(wv[j] + c);
    }
  }
  WaitForPrevious();
  const T* x = static_cast<const T*>(a.x);
  const T* scales = static_cast<const T*>(a.scales);
  auto use = [&](int c, const uint4 (&weights)[kWideOutputs]) {
    // A block's values are whole chunks: chunk c holds values c * kPerChunk on, of block c / perBlock.
    const int b = c / perBlock;
    const int k0 = c * kPerChunk;
    float part[kWideOutputs][R] = {};
#pragma unroll
    for (int s = 0; s < kPerChunk / 8; s++) {
      float xs[R][8];
#pragma unroll
      for (int r = 0; r < R; r++) LoadFloats<T, 8>(x + static_cast<size_t>(r) * a.in + k0 + s * 8, xs[r]);
#pragma unroll
      for (int j = 0; j < kWideOutputs; j++) {
        const uint32_t words[4] = {weights[j].x, weights[j].y, weights[j].z, weights[j].w};
        const float offset = kMagic + static_cast<float>(QuantZeroPoint(a, rowOf[j], b));
        float q[8];
#pragma unroll
        for (int w = 0; w < kWordsPer8; w++) Unpack<kBits>(words[s * kWordsPer8 + w], offset, q + w * (8 / kWordsPer8));
#pragma unroll
        for (int r = 0; r < R; r++) {
#pragma unroll
          for (int e = 0; e < 8; e++) part[j][r] += q[e] * xs[r][e];
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kWideOutputs; j++) {
      const float scale = Load(scales + static_cast<size_t>(rowOf[j]) * a.blocks + b);
#pragma unroll
      for (int r = 0; r < R; r++) acc[j][r] += part[j][r] * scale;
    }
  };
  int c = tid;
  for (; c + (kWideAhead - 1) * groupThreads < chunks; c += kWideAhead * groupThreads) {
    uint4 ahead[kWideAhead][kWideOutputs];
#pragma unroll
    for (int u = 0; u < kWideAhead; u++) {
#pragma unroll
      for (int j = 0; j < kWideOutputs; j++) ahead[u][j] = __ldcs(wv[j] + c + u * groupThreads);
    }
#pragma unroll
    for (int u = 0; u < kWideAhead; u++) use(c + u * groupThreads, ahead[u]);
  }
  for (; c < chunks; c += groupThreads) {
    uint4 one[kWideOutputs];
#pragma unroll
    for (int j = 0; j < kWideOutputs; j++) one[j] = __ldcs(wv[j] + c);
    use(c, one);
  }
  LetDependentsStart();
  __shared__ float partial[kWideWarps][kWideOutputs * R];
  WarpSumsTo<kWideOutputs * R>(&acc[0][0], partial[threadIdx.x / 32]);
  __syncthreads();
  // Each group's sums over its own warps, by the group's first threads.
  constexpr int groupWarps = groupThreads / 32;
  WideFinishAt<T, Gated, kWideOutputs, R>(a, first, partial + group * groupWarps, groupWarps, tid);
}

// The 4-bit kernel (QuantWideRowsDevice, float16): a block takes kNibbleOutputs consecutive outputs
// (8 for one row, else 4) and all of K, a thread 16 bytes (32 values) of each of their weight rows at a
// time. Float dequantization costs 4 instructions a value, which at 2 values a byte keeps the SM's
// issue slots busier than its memory; here a word of 8 values becomes 4 pairs of float16 (q - zero) / 16
// (exact) in 9 instructions, by or-ing each nibble into the mantissa of 1024 and one fused multiply-add
// a pair, and each pair of x takes one float16 multiply-add. A lane's 16 products of a chunk (each at
// most |x|) are summed in float16, then in float32 scaled by 16 times the block's scale. x's pairs are
// regrouped once a chunk ({x0, x4}, {x1, x5}, ... as the nibbles come out of a word) for all the
// block's outputs. A pre-norm goes into the kernel as into Linear's: each chunk's x + residual (rounded)
// times the norm's weights in float16, its squares summed in float32 along the way, and the block's
// sums scaled by the rows' inverse root at the end (block 0 writes the sum). Those products are taken
// before the row is normed, so their float16 range is the stream's: a value of (x + residual) * norm
// past 65504, or 16 of a lane's products summing past it, would overflow where the separate pass would
// not (residual streams stay far below that, bar rare massive activations times a large norm weight).
constexpr int kNibbleMaxThreads = 256;

__device__ inline __half2 HalvesOf(uint32_t w) { return *reinterpret_cast<const __half2*>(&w); }
__device__ inline uint32_t WordOf(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }

// The 8 values of word w less their zero point, divided by 16, as pairs {0, 4}, {1, 5}, {2, 6}, {3, 7}:
// `low` is -(64 + zero / 16) for the low nibble of each byte, `high` -(4 + zero / 16) for the high one.
__device__ inline void UnpackNibblePairs(uint32_t w, __half2 low, __half2 high, __half2 (&q)[4]) {
  const __half2 sixteenth = __float2half2_rn(1.0f / 16);
  const __half2 twoHundredFiftySixth = __float2half2_rn(1.0f / 256);
  const uint32_t shifted = w >> 8;
  q[0] = __hfma2(HalvesOf((w & 0x000F000Fu) | 0x64006400u), sixteenth, low);
  q[1] = __hfma2(HalvesOf((w & 0x00F000F0u) | 0x64006400u), twoHundredFiftySixth, high);
  q[2] = __hfma2(HalvesOf((shifted & 0x000F000Fu) | 0x64006400u), sixteenth, low);
  q[3] = __hfma2(HalvesOf((shifted & 0x00F000F0u) | 0x64006400u), twoHundredFiftySixth, high);
}

// x's 8 values at `at` as the float16 kernels (4 and 8 bits) multiply them: with a pre-norm (Norm),
// x + residual rounded (written to sum by block 0) times the norm's weights, its squares added to
// `squares`.
template <bool Norm>
__device__ inline uint4 NibbleInput(const QuantLinearArgs& a, size_t at, size_t k, float& squares) {
  uint4 v = __ldg(reinterpret_cast<const uint4*>(static_cast<const __half*>(a.x) + at));
  if constexpr (Norm) {
    uint32_t* words = reinterpret_cast<uint32_t*>(&v);
    if (a.residual != nullptr) {
      const uint4 r = __ldg(reinterpret_cast<const uint4*>(static_cast<const __half*>(a.residual) + at));
      const uint32_t* add = reinterpret_cast<const uint32_t*>(&r);
#pragma unroll
      for (int i = 0; i < 4; i++) words[i] = WordOf(__hadd2(HalvesOf(words[i]), HalvesOf(add[i])));
    }
    if (a.sum != nullptr && blockIdx.x == 0) *reinterpret_cast<uint4*>(static_cast<__half*>(a.sum) + at) = v;
    const uint4 n = __ldg(reinterpret_cast<const uint4*>(static_cast<const __half*>(a.norm) + k));
    const uint32_t* scale = reinterpret_cast<const uint32_t*>(&n);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const float2 f = __half22float2(HalvesOf(words[i]));
      squares = fmaf(f.x, f.x, fmaf(f.y, f.y, squares));
      words[i] = WordOf(__hmul2(HalvesOf(words[i]), HalvesOf(scale[i])));
    }
  }
  return v;
}

// The float16 kernels' start: the block's kRows weight rows (WideRowOf) from output `first`, and each
// thread's first 16 bytes of them pulled into L2 before the wait for the kernel before (a dependent
// launch).
template <bool Gated, int kRows>
__device__ inline void PairRows(const QuantLinearArgs& a, int first, int chunks, int (&rowOf)[kRows], const uint4* (&wv)[kRows]) {
  const size_t rowBytes = static_cast<size_t>(a.blocks) * a.blobBytes;
#pragma unroll
  for (int j = 0; j < kRows; j++) {
    rowOf[j] = WideRowOf<Gated, kRows>(a, first, j);
    wv[j] = reinterpret_cast<const uint4*>(a.weight + static_cast<size_t>(rowOf[j]) * rowBytes);
  }
  if (threadIdx.x < chunks) {
#pragma unroll
    for (int j = 0; j < kRows; j++) PrefetchL2(wv[j] + threadIdx.x);
  }
}

// The float16 kernels' end: each thread's sums over the block (and with a pre-norm its rows' squares,
// then their inverse roots), finished and written by WideFinish.
template <bool Gated, int kRows, int R, bool Norm>
__device__ inline void FinishPairs(const QuantLinearArgs& a, int first, int threads, const float (&acc)[kRows][R], const float (&squares)[R]) {
  LetDependentsStart();
  __shared__ float partial[kNibbleMaxThreads / 32][kRows * R];
  __shared__ float squared[kNibbleMaxThreads / 32][R];
  __shared__ float inverseRoot[R];
  const int warps = threads / 32;
  const int warp = threadIdx.x / 32;
  if constexpr (Norm) WarpSumsTo<R>(squares, squared[warp]);
  WarpSumsTo<kRows * R>(&acc[0][0], partial[warp]);
  __syncthreads();
  if constexpr (Norm) {
    if (threadIdx.x < R) {
      float total = 0;
      for (int w = 0; w < warps; w++) total += squared[w][threadIdx.x];
      inverseRoot[threadIdx.x] = rsqrtf(total / a.in + a.epsilon);
    }
    __syncthreads();
  }
  WideFinish<__half, Gated, kRows, R>(a, first, partial, warps, Norm ? inverseRoot : nullptr);
}

template <int R, int kNibbleOutputs, bool Gated, bool Norm>
__global__ void __launch_bounds__(kNibbleMaxThreads, R >= 4 ? 1 : 2) QuantNibbleRowsKernel(QuantLinearArgs a) {
  const int first = blockIdx.x * (Gated ? kNibbleOutputs / 2 : kNibbleOutputs);
  const int perBlock = a.blobBytes / 16;
  const int chunks = a.in / 32;
  int rowOf[kNibbleOutputs];
  const uint4* wv[kNibbleOutputs];
  PairRows<Gated, kNibbleOutputs>(a, first, chunks, rowOf, wv);
  const int threads = blockDim.x;
  WaitForPrevious();
  const __half* scales = static_cast<const __half*>(a.scales);
  float acc[kNibbleOutputs][R] = {};
  float squares[R] = {};
  // Without zero points every block's zero is 8: the offsets once.
  __half2 low = __float2half2_rn(-(64 + 0.5f));
  __half2 high = __float2half2_rn(-(4 + 0.5f));
  for (int c = threadIdx.x; c < chunks; c += threads) {
    uint4 weights[kNibbleOutputs];
#pragma unroll
    for (int j = 0; j < kNibbleOutputs; j++) weights[j] = __ldcs(wv[j] + c);
    const int b = c / perBlock;
    // x's 32 values of this chunk, a row at a time, as the pairs the nibbles come in.
    uint32_t pairs[R][16];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
      for (int s = 0; s < 4; s++) {
        const size_t k = static_cast<size_t>(c) * 32 + 8 * s;
        const uint4 v = NibbleInput<Norm>(a, static_cast<size_t>(r) * a.in + k, k, squares[r]);  // values 8s .. 8s + 7
        pairs[r][4 * s] = __byte_perm(v.x, v.z, 0x5410);
        pairs[r][4 * s + 1] = __byte_perm(v.x, v.z, 0x7632);
        pairs[r][4 * s + 2] = __byte_perm(v.y, v.w, 0x5410);
        pairs[r][4 * s + 3] = __byte_perm(v.y, v.w, 0x7632);
      }
    }
#pragma unroll
    for (int j = 0; j < kNibbleOutputs; j++) {
      if (a.zeroPoints != nullptr) {
        const float zero = static_cast<float>(QuantZeroPoint(a, rowOf[j], b)) / 16;
        low = __float2half2_rn(-(64 + zero));
        high = __float2half2_rn(-(4 + zero));
      }
      const uint32_t words[4] = {weights[j].x, weights[j].y, weights[j].z, weights[j].w};
      __half2 sums[R];
#pragma unroll
      for (int s = 0; s < 4; s++) {
        __half2 q[4];
        UnpackNibblePairs(words[s], low, high, q);
#pragma unroll
        for (int r = 0; r < R; r++) {
          __half2 h = s == 0 ? __hmul2(HalvesOf(pairs[r][0]), q[0]) : __hfma2(HalvesOf(pairs[r][4 * s]), q[0], sums[r]);
          h = __hfma2(HalvesOf(pairs[r][4 * s + 1]), q[1], h);
          h = __hfma2(HalvesOf(pairs[r][4 * s + 2]), q[2], h);
          sums[r] = __hfma2(HalvesOf(pairs[r][4 * s + 3]), q[3], h);
        }
      }
      const float scale = 16 * Load(scales + static_cast<size_t>(rowOf[j]) * a.blocks + b);
#pragma unroll
      for (int r = 0; r < R; r++) {
        const float2 f = __half22float2(sums[r]);
        acc[j][r] += (f.x + f.y) * scale;
      }
    }
  }
  FinishPairs<Gated, kNibbleOutputs, R, Norm>(a, first, threads, acc, squares);
}

// The float16 kernels' threads a block for K of `chunks` 16-byte chunks: a thread for each chunk (at
// least 64, at most 256); at one row of K 4096 or more, a thread for each 2 chunks, so that each thread
// has 2 of each weight row in flight at once. CHORUS_QUANT_PAIR_THREADS=n: a thread for each chunk, at
// most n, at every K. Measured on an H100, one row, us (bench/gpu/quant/kernels.ts), a thread for each
// 2 chunks against one: 8 bits, Llama-2-7B's q/k/v/o 7.0 against 8.8, fused q/k/v 17.4 against 21.8,
// gate/up 15.8 against 19.8 (86% of the bandwidth against 69%), down the same 256 threads; 4 bits,
// q/k/v/o 5.7 against 6.4, fused q/k/v 12.1 against 14.0 (down, at 192 threads, not timed alone). In the
// model (one run each, decode steps), Llama-2-7B int8 3.40 against 3.45 ms, int4 2.87 against 2.98 ms.
// Under K 4096 it was slower in the model: TinyLlama int8's decode step 0.890 against 0.785 ms, its
// gated product with a pre-norm at 64 threads 15.9 us.
inline int PairThreads(const QuantLinearArgs& a, int chunks) {
  const bool halves = a.pairThreads == 0 && a.rows == 1 && a.in >= kWideLeastIn;
  const int most = a.pairThreads == 0 ? kNibbleMaxThreads : a.pairThreads;
  return std::min(most, std::max(64, ((halves ? chunks / 2 : chunks) + 31) / 32 * 32));
}

template <bool Gated, bool Norm>
void LaunchNibbles(const QuantLinearArgs& a, cudaStream_t stream) {
  std::atomic<bool>& dependent = LinearDependentLaunchFlag();
  // Chunks of 32 values (PairThreads: K 2048 2 warps; 4096 4, at one row 2; 11008 8, at one row 6).
  const int chunks = a.in / 32;
  const dim3 block(PairThreads(a, chunks));
  // 8 weight rows a block for one row, else 4 (gated: half as many outputs).
  const int outputs = (a.rows == 1 ? 8 : 4) / (Gated ? 2 : 1);
  const dim3 grid((a.out + outputs - 1) / outputs);
  switch (a.rows) {
    case 1: LaunchMaybeDependent(dependent, QuantNibbleRowsKernel<1, 8, Gated, Norm>, grid, block, stream, a); break;
    case 2: LaunchMaybeDependent(dependent, QuantNibbleRowsKernel<2, 4, Gated, Norm>, grid, block, stream, a); break;
    case 3: LaunchMaybeDependent(dependent, QuantNibbleRowsKernel<3, 4, Gated, Norm>, grid, block, stream, a); break;
    default: LaunchMaybeDependent(dependent, QuantNibbleRowsKernel<4, 4, Gated, Norm>, grid, block, stream, a); break;
  }
}

// The 8-bit kernel for float16 (QuantWideRowsDevice): the 4-bit kernel's layout, pre-norm and epilogue
// at a byte a value. The float32 wide kernel spends a permute and a subtraction on each value and a
// float multiply-add on each product, and stays well short of the memory's bandwidth; here a word of 4
// bytes becomes 2 pairs of float16 (u - zero) / 128 in 4 instructions, and each pair of products takes
// one float16 multiply-add. A byte permute puts each byte under 0x64, the float16 1024 + u exactly, and
// one fused multiply-add by 1/128 with -(8 + zero / 128) leaves (u - zero) / 128, exact (an integer
// below 256 in magnitude over 128: at most 8 significant bits). The bytes come out in x's own pairs
// ({u0, u1} with {x0, x1}), so x is not regrouped. A lane's 16 products of a chunk (each below 2 |x|)
// are summed in float16, then in float32 scaled by 128 times the block's scale; a chunk of 16 values
// lies in one block (blocks are powers of 2 of at least 16). Where K has more chunks than the block's
// threads (K past 4096) a thread loads kAhead chunks of each row before it uses the first. The
// pre-norm's float16 range is the 4-bit kernel's (above).
template <int R, int kOutputs, int kAhead, bool Gated, bool Norm>
__global__ void __launch_bounds__(kNibbleMaxThreads, R >= 4 ? 1 : 2) QuantBytePairsKernel(QuantLinearArgs a) {
  const int first = blockIdx.x * (Gated ? kOutputs / 2 : kOutputs);
  const int perBlock = a.blobBytes / 16;
  const int chunks = a.in / 16;
  int rowOf[kOutputs];
  const uint4* wv[kOutputs];
  PairRows<Gated, kOutputs>(a, first, chunks, rowOf, wv);
  const int threads = blockDim.x;
  WaitForPrevious();
  const __half* scales = static_cast<const __half*>(a.scales);
  const __half2 oneHundredTwentyEighth = __float2half2_rn(1.0f / 128);
  // Without zero points every block's zero is 128: -(8 + 1).
  const __half2 symmetric = __float2half2_rn(-9.0f);
  float acc[kOutputs][R] = {};
  float squares[R] = {};
  auto use = [&](int c, const uint4 (&weights)[kOutputs]) {
    const int b = c / perBlock;
    // x's 16 values of this chunk, a row at a time: words 2i and 2i + 1 are the pairs of weight word i.
    uint32_t pairs[R][8];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
      for (int s = 0; s < 2; s++) {
        const size_t k = static_cast<size_t>(c) * 16 + 8 * s;
        const uint4 v = NibbleInput<Norm>(a, static_cast<size_t>(r) * a.in + k, k, squares[r]);
        pairs[r][4 * s] = v.x;
        pairs[r][4 * s + 1] = v.y;
        pairs[r][4 * s + 2] = v.z;
        pairs[r][4 * s + 3] = v.w;
      }
    }
#pragma unroll
    for (int j = 0; j < kOutputs; j++) {
      // 8-bit zero points are a byte a block (QuantZeroPoint at 8 bits).
      __half2 offset = symmetric;
      if (a.zeroPoints != nullptr) offset = __float2half2_rn(-(8 + static_cast<float>(a.zeroPoints[static_cast<size_t>(rowOf[j]) * a.blocks + b]) / 128));
      const uint32_t words[4] = {weights[j].x, weights[j].y, weights[j].z, weights[j].w};
      __half2 sums[R];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        // Values 4i, 4i + 1 (bytes 0 and 1, each under byte 4: 0x64) and 4i + 2, 4i + 3 (bytes 2 and 3).
        const __half2 low = __hfma2(HalvesOf(__byte_perm(words[i], 0x64646464u, 0x4140)), oneHundredTwentyEighth, offset);
        const __half2 high = __hfma2(HalvesOf(__byte_perm(words[i], 0x64646464u, 0x4342)), oneHundredTwentyEighth, offset);
#pragma unroll
        for (int r = 0; r < R; r++) {
          const __half2 h = i == 0 ? __hmul2(HalvesOf(pairs[r][0]), low) : __hfma2(HalvesOf(pairs[r][2 * i]), low, sums[r]);
          sums[r] = __hfma2(HalvesOf(pairs[r][2 * i + 1]), high, h);
        }
      }
      const float scale = 128 * Load(scales + static_cast<size_t>(rowOf[j]) * a.blocks + b);
#pragma unroll
      for (int r = 0; r < R; r++) {
        const float2 f = __half22float2(sums[r]);
        acc[j][r] += (f.x + f.y) * scale;
      }
    }
  };
  int c = threadIdx.x;
  if constexpr (kAhead > 1) {
    // kAhead chunks of each row loaded before any is used.
    for (; c + (kAhead - 1) * threads < chunks; c += kAhead * threads) {
      uint4 ahead[kAhead][kOutputs];
#pragma unroll
      for (int u = 0; u < kAhead; u++) {
#pragma unroll
        for (int j = 0; j < kOutputs; j++) ahead[u][j] = __ldcs(wv[j] + c + u * threads);
      }
#pragma unroll
      for (int u = 0; u < kAhead; u++) use(c + u * threads, ahead[u]);
    }
  }
  for (; c < chunks; c += threads) {
    uint4 weights[kOutputs];
#pragma unroll
    for (int j = 0; j < kOutputs; j++) weights[j] = __ldcs(wv[j] + c);
    use(c, weights);
  }
  FinishPairs<Gated, kOutputs, R, Norm>(a, first, threads, acc, squares);
}

template <int kAhead, bool Gated, bool Norm>
void LaunchBytePairsAhead(const QuantLinearArgs& a, dim3 block, cudaStream_t stream) {
  std::atomic<bool>& dependent = LinearDependentLaunchFlag();
  // 8 weight rows a block for one row, else 4 (gated: half as many outputs).
  const int outputs = (a.rows == 1 ? 8 : 4) / (Gated ? 2 : 1);
  const dim3 grid((a.out + outputs - 1) / outputs);
  switch (a.rows) {
    case 1: LaunchMaybeDependent(dependent, QuantBytePairsKernel<1, 8, kAhead, Gated, Norm>, grid, block, stream, a); break;
    case 2: LaunchMaybeDependent(dependent, QuantBytePairsKernel<2, 4, kAhead, Gated, Norm>, grid, block, stream, a); break;
    case 3: LaunchMaybeDependent(dependent, QuantBytePairsKernel<3, 4, kAhead, Gated, Norm>, grid, block, stream, a); break;
    default: LaunchMaybeDependent(dependent, QuantBytePairsKernel<4, 4, kAhead, Gated, Norm>, grid, block, stream, a); break;
  }
}

template <bool Gated, bool Norm>
void LaunchBytePairs(const QuantLinearArgs& a, cudaStream_t stream) {
  // Chunks of 16 values (PairThreads: K 2048 4 warps; 4096 8, at one row 4; 11008 8), and 2 chunks of
  // each row in flight a thread where some thread takes more than one.
  const int chunks = a.in / 16;
  const int threads = PairThreads(a, chunks);
  if (chunks > threads) LaunchBytePairsAhead<2, Gated, Norm>(a, dim3(threads), stream);
  else LaunchBytePairsAhead<1, Gated, Norm>(a, dim3(threads), stream);
}

template <typename T, bool Gated, int G>
void LaunchWideGroups(const QuantLinearArgs& a, cudaStream_t stream) {
  const dim3 block(kWideThreads);
  std::atomic<bool>& dependent = LinearDependentLaunchFlag();
  const int per = Gated ? 2 : 1;  // weight rows an output
  if (a.rows == 1 && !wideOutputs4) {
    const int outputs = G * 8 / per;
    LaunchMaybeDependent(dependent, QuantWideRowsKernel<T, 1, 8, 1, Gated, G>, dim3((a.out + outputs - 1) / outputs), block, stream, a);
    return;
  }
  const int outputs = G * 4 / per;
  const dim3 grid((a.out + outputs - 1) / outputs);
  switch (a.rows) {
    case 1: LaunchMaybeDependent(dependent, QuantWideRowsKernel<T, 1, 4, 2, Gated, G>, grid, block, stream, a); break;
    case 2: LaunchMaybeDependent(dependent, QuantWideRowsKernel<T, 2, 4, 2, Gated, G>, grid, block, stream, a); break;
    case 3: LaunchMaybeDependent(dependent, QuantWideRowsKernel<T, 3, 4, 2, Gated, G>, grid, block, stream, a); break;
    default: LaunchMaybeDependent(dependent, QuantWideRowsKernel<T, 4, 4, 2, Gated, G>, grid, block, stream, a); break;
  }
}

template <typename T, bool Gated>
void LaunchWide(const QuantLinearArgs& a, cudaStream_t stream) {
  if (WideGroups(a.in / 16) == 2) LaunchWideGroups<T, Gated, 2>(a, stream);
  else LaunchWideGroups<T, Gated, 1>(a, stream);
}

template <typename T, int Bits>
void LaunchRows(const QuantLinearArgs& a, cudaStream_t stream) {
  const dim3 grid((a.out + kWarps - 1) / kWarps);
  switch (a.rows) {
    case 1: QuantRowsKernel<T, Bits, 1><<<grid, kThreads, 0, stream>>>(a); break;
    case 2: QuantRowsKernel<T, Bits, 2><<<grid, kThreads, 0, stream>>>(a); break;
    case 3: QuantRowsKernel<T, Bits, 3><<<grid, kThreads, 0, stream>>>(a); break;
    case 4: QuantRowsKernel<T, Bits, 4><<<grid, kThreads, 0, stream>>>(a); break;
    case 5: QuantRowsKernel<T, Bits, 5><<<grid, kThreads, 0, stream>>>(a); break;
    case 6: QuantRowsKernel<T, Bits, 6><<<grid, kThreads, 0, stream>>>(a); break;
    case 7: QuantRowsKernel<T, Bits, 7><<<grid, kThreads, 0, stream>>>(a); break;
    case 8: QuantRowsKernel<T, Bits, 8><<<grid, kThreads, 0, stream>>>(a); break;
    default: throw std::invalid_argument("the QuantLinear kernel takes 1.." + std::to_string(kQuantRowsKernelRows) + " rows, not " + std::to_string(a.rows));
  }
}

template <typename T>
void LaunchRowsOf(const QuantLinearArgs& a, cudaStream_t stream) {
  if (a.bits == 4) {
    LaunchRows<T, 4>(a, stream);
  } else {
    LaunchRows<T, 8>(a, stream);
  }
}

}  // namespace

bool QuantWideRowsDevice(const QuantLinearArgs& a, void* stream, bool anyWidth) {
  auto s = static_cast<cudaStream_t>(stream);
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool aligned = aligned16(a.x) && aligned16(a.weight);
  const bool normAligned = a.norm == nullptr || (aligned16(a.norm) && aligned16(a.residual) && aligned16(a.sum));
  if (a.bits == 4) {
    // float16, whole chunks of 32 values within blocks of at least 32.
    const bool fits = a.type == FloatType::kFloat16 && a.rows <= kQuantWideRows && a.blockSize >= 32 && a.in % 32 == 0 && aligned && normAligned;
    if (!fits) return false;
    if (a.norm != nullptr) {
      a.gated ? LaunchNibbles<true, true>(a, s) : LaunchNibbles<false, true>(a, s);
    } else {
      a.gated ? LaunchNibbles<true, false>(a, s) : LaunchNibbles<false, false>(a, s);
    }
    return true;
  }
  // float16 at 8 bits: the byte pairs' kernel, gated or pre-normed, for one row whatever K and for 2 to 4
  // rows of K under kWideLeastIn. Measured on an H100 against the float32 kernels' paths
  // (CHORUS_QUANT_BYTE_PAIRS=0; bench/gpu/quant/kernels.ts), us: one row, Llama-2-7B's q/k/v/o 8.3
  // against 9.4, gate/up 17.7 against 20.1, down 16.2 against 18.7 (84% of the bandwidth); TinyLlama's
  // q/k/v/o at 1, 2 and 4 rows 3.1, 3.1, 3.6 against 4.1, 3.4, 4.1. At 2 to 4 rows of K 4096 or more the
  // tensor-core GEMV stays ahead (Llama-2-7B's down at 4 rows 23.7 against 30.4).
  const bool bytePairs = a.rows == 1 || a.in < kWideLeastIn;
  if (!a.bytesAsFloats && bytePairs && a.type == FloatType::kFloat16 && a.rows <= kQuantWideRows && a.blobBytes % 16 == 0 && a.in % 16 == 0 && aligned && normAligned) {
    if (a.norm != nullptr) {
      a.gated ? LaunchBytePairs<true, true>(a, s) : LaunchBytePairs<false, true>(a, s);
    } else {
      a.gated ? LaunchBytePairs<true, false>(a, s) : LaunchBytePairs<false, false>(a, s);
    }
    return true;
  }
  if (a.norm != nullptr) return false;  // QuantLinear's own pre-norm pass first
  // bfloat16, and float16 where CHORUS_QUANT_BYTE_PAIRS=0, in the float32 wide kernel.
  // Measured on an H100 against the tensor-core GEMV (bench/gpu/quant/kernels.ts), us:
  // - one row: faster for K of 4096 and more (Llama-2-7B's down projection 18.7 against 23.3) and for
  //   K 2048 in two groups a block (TinyLlama's q/k/v/o 4.1 against 5.1; its gate/up 7.4 against 7.3);
  // - 2 to 4 rows: slower for K of 4096 and more (Llama-2-7B's q/k/v/o at 2 rows 11.1 against 10.3,
  //   at 4 rows 13.4 against 10.3; its down at 3 rows 24.9 against 23.8), faster for K 2048 in two
  //   groups (TinyLlama's q/k/v/o at 2 rows 3.4 against 5.2). Gated products keep it from K 4096 (the
  //   other kernels take the two products apart, then the gate).
  const bool twoGroups = a.in >= kWideLeastIn / 2 && WideGroups(a.in / 16) == 2;
  const bool takes = a.rows == 1 ? a.in >= kWideLeastIn / 2 : a.gated ? a.in >= kWideLeastIn : twoGroups;
  const bool fits = (takes || anyWidth) && a.type != FloatType::kFloat32 && a.rows <= kQuantWideRows && a.blobBytes % 16 == 0 && a.in % 16 == 0 && aligned;
  if (!fits) return false;
  if (a.type == FloatType::kFloat16) {
    a.gated ? LaunchWide<__half, true>(a, s) : LaunchWide<__half, false>(a, s);
  } else {
    a.gated ? LaunchWide<__nv_bfloat16, true>(a, s) : LaunchWide<__nv_bfloat16, false>(a, s);
  }
  return true;
}

void QuantRowsDevice(const QuantLinearArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (a.type) {
    case FloatType::kFloat16: LaunchRowsOf<__half>(a, s); break;
    case FloatType::kBFloat16: LaunchRowsOf<__nv_bfloat16>(a, s); break;
    default: LaunchRowsOf<float>(a, s); break;
  }
}

}  // namespace chorus
