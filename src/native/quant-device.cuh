// Device helpers of QuantLinear's kernels (quant-linear.cu, quant-tiles.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "device.cuh"
#include "linear.h"
#include "quant-linear.h"

namespace chorus {

// a / b rounded up (host; the tiles' grids and splits).
inline int Ceil(int a, int b) { return (a + b - 1) / b; }

// 2^23 as float: 0x4B000000 | q (q < 2^23) is the float 2^23 + q, exactly.
constexpr float kMagic = 8388608.0f;

// N contiguous elements at p (aligned to their size, up to 16 bytes) as floats, in vector loads.
template <typename T, int N>
__device__ inline void LoadFloats(const T* p, float* out) {
  if constexpr (std::is_same<T, float>::value) {
#pragma unroll
    for (int i = 0; i < N / 4; i++) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(p) + i);
      out[4 * i] = v.x;
      out[4 * i + 1] = v.y;
      out[4 * i + 2] = v.z;
      out[4 * i + 3] = v.w;
    }
  } else if constexpr (N % 8 == 0) {
#pragma unroll
    for (int i = 0; i < N / 8; i++) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      WidenWord<T>(v.x, out + 8 * i);
      WidenWord<T>(v.y, out + 8 * i + 2);
      WidenWord<T>(v.z, out + 8 * i + 4);
      WidenWord<T>(v.w, out + 8 * i + 6);
    }
  } else {
    static_assert(N == 4, "4 or a multiple of 8 elements");
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    WidenWord<T>(v.x, out);
    WidenWord<T>(v.y, out + 2);
  }
}

// The values of a word of weights (4 bits: 8 of them, the low nibble first; 8 bits: 4) less their zero
// point, as floats: `offset` is 2^23 + the zero point, and each value becomes 2^23 + q by its bits, so
// that one subtraction gives q - zero exactly.
template <int Bits>
__device__ inline void Unpack(uint32_t w, float offset, float* out) {
  if constexpr (Bits == 4) {
#pragma unroll
    for (int i = 0; i < 8; i++) out[i] = __int_as_float(0x4B000000 | ((w >> (4 * i)) & 15)) - offset;
  } else {
#pragma unroll
    for (int i = 0; i < 4; i++) out[i] = __int_as_float(static_cast<int>(__byte_perm(w, 0x4B000000u, 0x7440 | i))) - offset;
  }
}

// N sums each summed across the warp, written by lane 0 to out[0..N).
template <int N>
__device__ inline void WarpSumsTo(const float* values, float* out) {
#pragma unroll
  for (int i = 0; i < N; i++) {
    float v = values[i];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0) out[i] = v;
  }
}

// Weight row j of a wide kernel's block of `rows` rows starting at output `first`: not gated, output
// first + j (the last again past the end); gated, the first half the gates' rows of outputs first..,
// the second half their up rows.
template <bool Gated, int kRows>
__device__ inline int WideRowOf(const QuantLinearArgs& a, int first, int j) {
  if constexpr (Gated) {
    constexpr int kHalf = kRows / 2;
    return j < kHalf ? min(first + j, a.out - 1) : a.out + min(first + j - kHalf, a.out - 1);
  } else {
    return min(first + j, a.out - 1);
  }
}

// The wide kernels' end: each weight row's float32 sums over the block's warps (`partial` [warps][kRows *
// R]), finished and written: one output a row, or gated, one from each gate row and its up row.
// `rowScale`, where given, scales row r's sums (a pre-norm's inverse root).
// Thread t of the block's first kOutputs * R finishes one (WideFinishAt: `t` given, for blocks of several
// groups of rows, each group's first threads its own).
template <typename T, bool Gated, int kRows, int R>
__device__ inline void WideFinishAt(const QuantLinearArgs& a, int first, const float (*partial)[kRows * R], int warps, int t, const float* rowScale = nullptr) {
  constexpr int kOutputs = Gated ? kRows / 2 : kRows;
  if (t >= kOutputs * R) return;
  const int j = t / R;
  const int r = t % R;
  if (first + j >= a.out) return;
  float sum = 0;
  float up = 0;
  for (int w = 0; w < warps; w++) {
    sum += partial[w][t];
    if constexpr (Gated) up += partial[w][(j + kOutputs) * R + r];
  }
  if (rowScale != nullptr) {
    sum *= rowScale[r];
    up *= rowScale[r];
  }
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y) + static_cast<size_t>(r) * a.out + first + j;
  *y = Gated ? Gate<T>(sum, up, bias, first + j, a.out, a.activation) : Finish<T>(sum, bias, first + j, a.activation);
}

template <typename T, bool Gated, int kRows, int R>
__device__ inline void WideFinish(const QuantLinearArgs& a, int first, const float (*partial)[kRows * R], int warps, const float* rowScale = nullptr) {
  WideFinishAt<T, Gated, kRows, R>(a, first, partial, warps, static_cast<int>(threadIdx.x), rowScale);
}

// The tensor-core kernels' helpers (quant-mma.cu, quant-mma-tiles.cu).
// The float type's pair, its bits of the base (1024 or 128) in both halves, and the base.
template <typename T>
struct Pair;
template <>
struct Pair<__half> {
  using Type = __half2;
  static constexpr uint32_t kMagic = 0x64006400u;
  static constexpr float kBase = 1024.0f;
};
template <>
struct Pair<__nv_bfloat16> {
  using Type = __nv_bfloat162;
  static constexpr uint32_t kMagic = 0x43004300u;
  static constexpr float kBase = 128.0f;
};

template <typename T2>
__device__ inline uint32_t Bits32(T2 h) { return *reinterpret_cast<uint32_t*>(&h); }

template <typename T2>
__device__ inline T2 Both(float v);
template <>
__device__ inline __half2 Both<__half2>(float v) { return __float2half2_rn(v); }
template <>
__device__ inline __nv_bfloat162 Both<__nv_bfloat162>(float v) { return __float2bfloat162_rn(v); }

// Values base + q (in their bits) less `zero`, times `scale`.
template <typename T2>
__device__ inline uint32_t Dequant(uint32_t h, T2 zero, T2 scale) { return Bits32(__hmul2(__hsub2(*reinterpret_cast<T2*>(&h), zero), scale)); }

// The sums a cluster's `splits` ranks (at most MaxSplits) staged in shared memory `partial` at `at`
// (and, gated, the up projection's at `upAt`), added up in rank order: every rank's value read at once
// (their latencies overlap), a rank past the splits adding 0. One rank: its own memory.
template <int MaxSplits, bool Gated>
__device__ inline void RankSums(float* partial, int at, int upAt, int splits, float& sum, float& up) {
  float sums[MaxSplits];
  float ups[MaxSplits];
#pragma unroll
  for (int r = 0; r < MaxSplits; r++) {
    const float* from = splits > 1 ? RankShared(partial, r < splits ? r : 0) : partial;
    sums[r] = r < splits ? from[at] : 0.0f;
    ups[r] = Gated && r < splits ? from[upAt] : 0.0f;
  }
  sum = 0;
  up = 0;
#pragma unroll
  for (int r = 0; r < MaxSplits; r++) {
    sum += sums[r];
    up += ups[r];
  }
}

}  // namespace chorus
