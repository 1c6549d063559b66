// QuantLinear's kernels for more rows than the GEMV takes: tensor-core tiles over weights dequantized
// in shared memory (float16 and bfloat16), and the dequantization of whole weights for a GEMM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "device.cuh"
#include "quant-device.cuh"
#include "quant-linear.h"

namespace chorus {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 128;
// A block's tile: 64 rows by 64 outputs, over 64 of K at a time; each of its 4 warps takes 16 rows.
constexpr int kTileM = 64;
constexpr int kTileN = 64;
constexpr int kTileK = 64;
// Elements of skew at the end of a shared row (16 bytes), against bank conflicts.
constexpr int kSkew = 8;
// Blocks a multiprocessor should have to keep its loads in flight.
constexpr int kBlocksPerMultiprocessor = 4;

// K values a split takes (a multiple of kTileK).
int SplitLength(const QuantLinearArgs& a, int splits) { return Ceil(Ceil(a.in, kTileK), splits) * kTileK; }

// Groups of 8 values a thread moves per step: of x, and of the weights.
constexpr int kXGroups = kTileM * kTileK / 8 / kThreads;
constexpr int kWGroups = kTileN * kTileK / 8 / kThreads;

// A thread's share of one step, read from global memory into registers: 8 values of x per group
// (zeros past the rows and the split's end), and per weight group its word(s), scale and 2^23 + zero.
template <int Bits>
struct Staged {
  uint4 x[kXGroups];
  uint32_t w[kWGroups][Bits / 4];
  float scale[kWGroups];
  float offset[kWGroups];
};

template <typename T, int Bits>
__device__ inline void Fetch(Staged<Bits>& s, const QuantLinearArgs& a, int k0, int kEnd, int m0, int n0, bool xVectors) {
  const T* x = static_cast<const T*>(a.x);
#pragma unroll
  for (int u = 0; u < kXGroups; u++) {
    const int i = threadIdx.x + u * kThreads;
    const int m = m0 + i / (kTileK / 8);
    const int k = k0 + (i % (kTileK / 8)) * 8;
    if (m < a.rows && xVectors && k + 8 <= kEnd) {
      s.x[u] = __ldg(reinterpret_cast<const uint4*>(x + static_cast<size_t>(m) * a.in + k));
    } else {
      T* to = reinterpret_cast<T*>(&s.x[u]);
      for (int j = 0; j < 8; j++) to[j] = m < a.rows && k + j < kEnd ? x[static_cast<size_t>(m) * a.in + k + j] : Narrowed<T>(0.0f);
    }
  }
#pragma unroll
  for (int u = 0; u < kWGroups; u++) {
    const int i = threadIdx.x + u * kThreads;
    const int n = n0 + i / (kTileK / 8);
    const int k = k0 + (i % (kTileK / 8)) * 8;
    if (n < a.out && k < kEnd) {
      // 8 values of an output are one word of 4 bits, two of 8, always in one block.
      const int b = k / a.blockSize;
      const uint32_t* src = reinterpret_cast<const uint32_t*>(a.weight + (static_cast<size_t>(n) * a.blocks + b) * a.blobBytes + (k % a.blockSize) * Bits / 8);
#pragma unroll
      for (int v = 0; v < Bits / 4; v++) s.w[u][v] = src[v];
      s.scale[u] = Load(static_cast<const T*>(a.scales) + static_cast<size_t>(n) * a.blocks + b);
      s.offset[u] = kMagic + static_cast<float>(QuantZeroPoint(a, n, b));
    } else {
#pragma unroll
      for (int v = 0; v < Bits / 4; v++) s.w[u][v] = 0;
      s.scale[u] = 0;
      s.offset[u] = kMagic;
    }
  }
}

// The step's registers into shared memory, the weights dequantized on the way.
template <typename T, int Bits>
__device__ inline void Stage(const Staged<Bits>& s, T (*xs)[kTileK + kSkew], T (*ws)[kTileK + kSkew], int k0, int kEnd) {
#pragma unroll
  for (int u = 0; u < kXGroups; u++) {
    const int i = threadIdx.x + u * kThreads;
    *reinterpret_cast<uint4*>(&xs[i / (kTileK / 8)][(i % (kTileK / 8)) * 8]) = s.x[u];
  }
#pragma unroll
  for (int u = 0; u < kWGroups; u++) {
    const int i = threadIdx.x + u * kThreads;
    const int k = k0 + (i % (kTileK / 8)) * 8;
    float v[8];
    if constexpr (Bits == 4) {
      Unpack<4>(s.w[u][0], s.offset[u], v);
    } else {
      Unpack<8>(s.w[u][0], s.offset[u], v);
      Unpack<8>(s.w[u][1], s.offset[u], v + 4);
    }
    T* to = &ws[i / (kTileK / 8)][(i % (kTileK / 8)) * 8];
#pragma unroll
    for (int j = 0; j < 8; j++) to[j] = Narrowed<T>(k + j < kEnd ? v[j] * s.scale[u] : 0.0f);
  }
}

// A tile of x [rows m0.., values k0..k0 + 64) and of the dequantized weights [outputs n0.., same
// values] in shared memory, then their product on tensor cores, for each step of the split's share of
// K, the next step's reads in flight during the products; the float32 sums go to partial[split]
// (rows x N), which QuantJoinKernel adds up.
template <typename T, int Bits>
__global__ void __launch_bounds__(kThreads) QuantTileKernel(QuantLinearArgs a, int splitLength, float* partial) {
  __shared__ __align__(32) T xs[kTileM][kTileK + kSkew];
  __shared__ __align__(32) T ws[kTileN][kTileK + kSkew];
  __shared__ __align__(32) float sums[kTileM][kTileN + 4];
  const int m0 = blockIdx.y * kTileM;
  const int n0 = blockIdx.x * kTileN;
  const int split = blockIdx.z;
  const int kBegin = split * splitLength;
  const int kEnd = min(a.in, kBegin + splitLength);
  const int warp = threadIdx.x / 32;
  const bool xVectors = a.in % 8 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kTileN / 16];
#pragma unroll
  for (int j = 0; j < kTileN / 16; j++) wmma::fill_fragment(acc[j], 0.0f);
  Staged<Bits> staged;
  if (kBegin < kEnd) Fetch<T, Bits>(staged, a, kBegin, kEnd, m0, n0, xVectors);
  for (int k0 = kBegin; k0 < kEnd; k0 += kTileK) {
    Stage<T, Bits>(staged, xs, ws, k0, kEnd);
    __syncthreads();
    if (k0 + kTileK < kEnd) Fetch<T, Bits>(staged, a, k0 + kTileK, kEnd, m0, n0, xVectors);
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::load_matrix_sync(fa, &xs[warp * 16][kk], kTileK + kSkew);
#pragma unroll
      for (int j = 0; j < kTileN / 16; j++) {
        // The weights [n][k] are the column-major K x N matrix the product takes.
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fb, &ws[j * 16][kk], kTileK + kSkew);
        wmma::mma_sync(acc[j], fa, fb, acc[j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < kTileN / 16; j++) wmma::store_matrix_sync(&sums[warp * 16][j * 16], acc[j], kTileN + 4, wmma::mem_row_major);
  __syncthreads();
  float* out = partial + static_cast<size_t>(split) * a.rows * a.out;
  for (int i = threadIdx.x; i < kTileM * kTileN; i += kThreads) {
    const int m = m0 + i / kTileN;
    const int n = n0 + i % kTileN;
    if (m < a.rows && n < a.out) out[static_cast<size_t>(m) * a.out + n] = sums[i / kTileN][i % kTileN];
  }
}

// y = the splits' partial sums added in order, with the bias and activation.
template <typename T>
__global__ void QuantJoinKernel(QuantLinearArgs a, int splits, const float* partial) {
  const size_t total = static_cast<size_t>(a.rows) * a.out;
  const T* bias = static_cast<const T*>(a.bias);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float sum = 0;
    for (int s = 0; s < splits; s++) sum += partial[s * total + i];
    static_cast<T*>(a.y)[i] = Finish<T>(sum, bias, static_cast<int>(i % a.out), a.activation);
  }
}

template <typename T, int Bits>
void LaunchTiles(const QuantLinearArgs& a, int splits, float* partial, cudaStream_t stream) {
  const dim3 grid(Ceil(a.out, kTileN), Ceil(a.rows, kTileM), splits);
  QuantTileKernel<T, Bits><<<grid, kThreads, 0, stream>>>(a, SplitLength(a, splits), partial);
  const size_t total = static_cast<size_t>(a.rows) * a.out;
  const int blocks = static_cast<int>(std::min<size_t>((total + 255) / 256, 4096));
  QuantJoinKernel<T><<<blocks, 256, 0, stream>>>(a, splits, partial);
}

// The weights [N, K] dequantized, each thread 8 values of an output at a time (one word of 4 bits, two
// of 8; always in one block).
template <typename T, int Bits>
__global__ void DequantizeKernel(QuantLinearArgs a, T* weights) {
  const int groups = (a.in + 7) / 8;
  const size_t total = static_cast<size_t>(a.out) * groups;
  const int shift = __ffs(a.blockSize) - 1;
  const T* scales = static_cast<const T*>(a.scales);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int n = static_cast<int>(i / groups);
    const int k = static_cast<int>(i - static_cast<size_t>(n) * groups) * 8;
    const int b = k >> shift;
    const uint8_t* src = a.weight + (static_cast<size_t>(n) * a.blocks + b) * a.blobBytes + (k & (a.blockSize - 1)) * Bits / 8;
    const float scale = Load(scales + static_cast<size_t>(n) * a.blocks + b);
    const float offset = kMagic + static_cast<float>(QuantZeroPoint(a, n, b));
    float v[8];
    if constexpr (Bits == 4) {
      Unpack<4>(*reinterpret_cast<const uint32_t*>(src), offset, v);
    } else {
      const uint2 words = *reinterpret_cast<const uint2*>(src);
      Unpack<8>(words.x, offset, v);
      Unpack<8>(words.y, offset, v + 4);
    }
    T* to = weights + static_cast<size_t>(n) * a.in + k;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      if (k + j < a.in) to[j] = Narrowed<T>(v[j] * scale);
    }
  }
}

template <typename T>
void Dequantize(const QuantLinearArgs& a, void* weights, int blocks, cudaStream_t stream) {
  if (a.bits == 4) {
    DequantizeKernel<T, 4><<<blocks, 256, 0, stream>>>(a, static_cast<T*>(weights));
  } else {
    DequantizeKernel<T, 8><<<blocks, 256, 0, stream>>>(a, static_cast<T*>(weights));
  }
}

}  // namespace

int QuantTileSplits(const QuantLinearArgs& a, int multiprocessors) {
  const int tiles = Ceil(a.out, kTileN) * Ceil(a.rows, kTileM);
  const int steps = Ceil(a.in, kTileK);
  const int wanted = std::max(1, std::min(steps, Ceil(kBlocksPerMultiprocessor * multiprocessors, tiles)));
  // No split is left empty: as many as the split length makes.
  return Ceil(steps, Ceil(steps, wanted));
}

size_t QuantTileScratchBytes(const QuantLinearArgs& a, int splits) { return sizeof(float) * splits * static_cast<size_t>(a.rows) * a.out; }

void QuantTilesDevice(const QuantLinearArgs& a, int splits, void* scratch, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  auto* partial = static_cast<float*>(scratch);
  const bool half = a.type == FloatType::kFloat16;
  if (a.type == FloatType::kFloat32) throw std::invalid_argument("the QuantLinear tiles take float16 or bfloat16");
  if (a.bits == 4) {
    half ? LaunchTiles<__half, 4>(a, splits, partial, s) : LaunchTiles<__nv_bfloat16, 4>(a, splits, partial, s);
  } else {
    half ? LaunchTiles<__half, 8>(a, splits, partial, s) : LaunchTiles<__nv_bfloat16, 8>(a, splits, partial, s);
  }
}

void DequantizeDevice(const QuantLinearArgs& a, void* weights, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const size_t total = static_cast<size_t>(a.out) * ((a.in + 7) / 8);
  const int blocks = static_cast<int>(std::min<size_t>((total + 255) / 256, 65536));
  switch (a.type) {
    case FloatType::kFloat16: Dequantize<__half>(a, weights, blocks, s); break;
    case FloatType::kBFloat16: Dequantize<__nv_bfloat16>(a, weights, blocks, s); break;
    default: Dequantize<float>(a, weights, blocks, s); break;
  }
}

}  // namespace chorus
