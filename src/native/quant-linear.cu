#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
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

void QuantRowsDevice(const QuantLinearArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (a.type) {
    case FloatType::kFloat16: LaunchRowsOf<__half>(a, s); break;
    case FloatType::kBFloat16: LaunchRowsOf<__nv_bfloat16>(a, s); break;
    default: LaunchRowsOf<float>(a, s); break;
  }
}

}  // namespace chorus
