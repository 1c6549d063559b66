// Device helpers of QuantLinear's kernels (quant-linear.cu, quant-tiles.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "device.cuh"
#include "linear.h"

namespace chorus {

// 2^23 as float: 0x4B000000 | q (q < 2^23) is the float 2^23 + q, exactly.
constexpr float kMagic = 8388608.0f;

// Two 16-bit floats of a word as floats.
template <typename T>
__device__ inline void WidenWord(uint32_t bits, float* out);
template <>
__device__ inline void WidenWord<__half>(uint32_t bits, float* out) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&bits));
  out[0] = f.x;
  out[1] = f.y;
}
template <>
__device__ inline void WidenWord<__nv_bfloat16>(uint32_t bits, float* out) {
  const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
  out[0] = f.x;
  out[1] = f.y;
}

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

// The epilogue: the sum and its bias rounded once, then the activation rounded (as Linear's).
template <typename T>
__device__ inline T Finish(float sum, const T* bias, int o, Activation activation) {
  float v = Rounded<T>(bias == nullptr ? sum : sum + Load(bias + o));
  if (activation != Activation::kNone) v = Activate(v, activation);
  return Narrowed<T>(v);
}

}  // namespace chorus
