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


// The wide kernel (QuantWideRowsDevice): as Linear's decode kernel, a block of 256 threads takes
// kWideOutputs consecutive outputs (8 for one row, else 4) and all of K, its threads striding over the
// weight rows 16 bytes at a time (16 values of 8 bits, 32 of 4; kWideAhead reads a row in flight), so
// each 16 bytes of x, read through L1, serves all the block's outputs; each 16 bytes' sums are scaled
// once by their block's scale, then summed across the warp (shuffles) and the warps (shared memory).
// Goes out as a dependent launch where Linear's does: the first weights pulled into L2 before x is
// read. One row keeps 3 blocks a multiprocessor (at most 80 registers, none spilled).
constexpr int kWideThreads = 256;
constexpr int kWideWarps = kWideThreads / 32;
// Single rows take 8 outputs a block and one read of each row in flight (the bytes in flight of 4 and
// 2, and each block's x, scales and sums once for 8 rows rather than 4); CHORUS_QUANT_WIDE_OUTPUTS=4:
// 4 and 2, as more rows take them.
const bool wideOutputs4 = [] {
  const char* value = std::getenv("CHORUS_QUANT_WIDE_OUTPUTS");
  return value != nullptr && std::string(value) == "4";
}();

template <typename T, int Bits, int R, int kWideOutputs, int kWideAhead>
__global__ void __launch_bounds__(kWideThreads, R == 1 ? 3 : 2) QuantWideRowsKernel(QuantLinearArgs a) {
  constexpr int kPerChunk = 128 / Bits;    // values in 16 bytes
  constexpr int kWordsPer8 = Bits / 4;     // words holding 8 values
  const int first = blockIdx.x * kWideOutputs;
  const int perBlock = a.blobBytes / 16;
  const int chunks = a.in / kPerChunk;     // whole chunks (QuantWideRowsDevice's condition); the rest is the last block's padding
  const size_t rowBytes = static_cast<size_t>(a.blocks) * a.blobBytes;
  // Outputs past the end read the last row again (in bounds) and are not written.
  int rowOf[kWideOutputs];
  const uint4* wv[kWideOutputs];
#pragma unroll
  for (int j = 0; j < kWideOutputs; j++) {
    rowOf[j] = min(first + j, a.out - 1);
    wv[j] = reinterpret_cast<const uint4*>(a.weight + static_cast<size_t>(rowOf[j]) * rowBytes);
  }
  float acc[kWideOutputs][R] = {};
#pragma unroll
  for (int u = 0; u < kWideAhead; u++) {
    const int c = threadIdx.x + u * kWideThreads;
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
        for (int w = 0; w < kWordsPer8; w++) Unpack<Bits>(words[s * kWordsPer8 + w], offset, q + w * (8 / kWordsPer8));
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
  int c = threadIdx.x;
  for (; c + (kWideAhead - 1) * kWideThreads < chunks; c += kWideAhead * kWideThreads) {
    uint4 ahead[kWideAhead][kWideOutputs];
#pragma unroll
    for (int u = 0; u < kWideAhead; u++) {
#pragma unroll
      for (int j = 0; j < kWideOutputs; j++) ahead[u][j] = __ldcs(wv[j] + c + u * kWideThreads);
    }
#pragma unroll
    for (int u = 0; u < kWideAhead; u++) use(c + u * kWideThreads, ahead[u]);
  }
  for (; c < chunks; c += kWideThreads) {
    uint4 one[kWideOutputs];
#pragma unroll
    for (int j = 0; j < kWideOutputs; j++) one[j] = __ldcs(wv[j] + c);
    use(c, one);
  }
  LetDependentsStart();
  __shared__ float partial[kWideWarps][kWideOutputs * R];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int j = 0; j < kWideOutputs; j++) {
#pragma unroll
    for (int r = 0; r < R; r++) {
      float v = acc[j][r];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) partial[warp][j * R + r] = v;
    }
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < kWideOutputs * R) {
    const int j = t / R;
    const int r = t % R;
    if (first + j < a.out) {
      float sum = 0;
#pragma unroll
      for (int w = 0; w < kWideWarps; w++) sum += partial[w][t];
      static_cast<T*>(a.y)[static_cast<size_t>(r) * a.out + first + j] = Finish<T>(sum, static_cast<const T*>(a.bias), first + j, a.activation);
    }
  }
}

template <typename T, int Bits>
void LaunchWide(const QuantLinearArgs& a, cudaStream_t stream) {
  const dim3 block(kWideThreads);
  std::atomic<bool>& dependent = LinearDependentLaunchFlag();
  if (a.rows == 1 && !wideOutputs4) {
    LaunchMaybeDependent(dependent, QuantWideRowsKernel<T, Bits, 1, 8, 1>, dim3((a.out + 7) / 8), block, stream, a);
    return;
  }
  const dim3 grid((a.out + 3) / 4);
  switch (a.rows) {
    case 1: LaunchMaybeDependent(dependent, QuantWideRowsKernel<T, Bits, 1, 4, 2>, grid, block, stream, a); break;
    case 2: LaunchMaybeDependent(dependent, QuantWideRowsKernel<T, Bits, 2, 4, 2>, grid, block, stream, a); break;
    case 3: LaunchMaybeDependent(dependent, QuantWideRowsKernel<T, Bits, 3, 4, 2>, grid, block, stream, a); break;
    default: LaunchMaybeDependent(dependent, QuantWideRowsKernel<T, Bits, 4, 4, 2>, grid, block, stream, a); break;
  }
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

bool QuantWideRowsDevice(const QuantLinearArgs& a, void* stream) {
  const int perChunk = 128 / a.bits;
  // Measured on an H100 against the tensor-core GEMV: faster for 8-bit weights of K 4096 and more
  // (Llama-2-7B's down projection 19.8 us against 23.5), slower for K 2048 (TinyLlama's gate 8.5
  // against 7.2) and at 4 bits.
  const bool fits = a.bits == 8 && a.in >= 4096 && a.type != FloatType::kFloat32 && a.rows <= kQuantWideRows && a.blobBytes % 16 == 0 && a.in % perChunk == 0 &&
                    reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.weight) % 16 == 0;
  if (!fits) return false;
  auto s = static_cast<cudaStream_t>(stream);
  const bool half = a.type == FloatType::kFloat16;
  if (a.bits == 4) {
    half ? LaunchWide<__half, 4>(a, s) : LaunchWide<__nv_bfloat16, 4>(a, s);
  } else {
    half ? LaunchWide<__half, 8>(a, s) : LaunchWide<__nv_bfloat16, 8>(a, s);
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
