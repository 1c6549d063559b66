// QuantLinear's float16 (and 4-bit bfloat16) decode step on tensor cores: each block takes 16
// outputs, its 8 warps split K, and each warp's products run as mma.m16n8k16 with the 16 outputs as
// its rows and up to 8 rows of x as its columns (float32 sums), so that every x row after the first
// costs almost nothing. A lane takes 32 consecutive values of K (one 16-byte read of 4 bits, two of
// 8) for two outputs and one row of x; the weights become halves by their bits (0x6400 | q is 1024 +
// q; in bfloat16 0x4300 | q is 128 + q, exact for 4 bits only), less that base + the zero point
// (exact), times the scale (rounded to the float type, as a dequantized weight is). The order of K
// inside an mma is free as long as the weights and x agree: 4-bit pairs are taken as (q_j, q_j+4), x
// is permuted to match.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "device.cuh"
#include "quant-device.cuh"
#include "quant-linear.h"

namespace chorus {

namespace {

constexpr int kMmaWarps = 8;
constexpr int kMmaThreads = kMmaWarps * 32;
// K a warp takes at a time: 4 lanes of 32 values.
constexpr int kGroupK = 128;
// Groups a warp reads before it computes any.
constexpr int kAheadGroups = 2;

// A lane's share of one group: its two outputs' weights, its x row, their scales and zero points.
template <typename T, int Bits>
struct Share {
  using T2 = typename Pair<T>::Type;
  uint4 w[2][Bits / 4];
  uint4 x[4];
  T2 zero[2];
  T2 scale[2];
};

template <typename T, int Bits>
__device__ inline void Read(Share<T, Bits>& s, const QuantLinearArgs& a, int group, int g, int t, int o0, int shift) {
  const int k = group * kGroupK + 32 * t;
  const bool valid = k < a.in;  // K is a multiple of 32: a lane's values are all in or all out
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int o = o0 + g + 8 * h;
    if (valid && o < a.out) {
      const int b = k >> shift;
      const uint4* src = reinterpret_cast<const uint4*>(a.weight + (static_cast<size_t>(o) * a.blocks + b) * a.blobBytes + (k & (a.blockSize - 1)) * Bits / 8);
#pragma unroll
      for (int v = 0; v < Bits / 4; v++) s.w[h][v] = __ldcs(src + v);
      using T2 = typename Pair<T>::Type;
      s.scale[h] = Both<T2>(Load(static_cast<const T*>(a.scales) + static_cast<size_t>(o) * a.blocks + b));
      s.zero[h] = Both<T2>(Pair<T>::kBase + static_cast<float>(QuantZeroPoint(a, o, b)));
    } else {
#pragma unroll
      for (int v = 0; v < Bits / 4; v++) s.w[h][v] = make_uint4(0, 0, 0, 0);
      s.scale[h] = Both<typename Pair<T>::Type>(0.0f);
      s.zero[h] = Both<typename Pair<T>::Type>(Pair<T>::kBase);
    }
  }
  if (valid && g < a.rows) {
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + static_cast<size_t>(g) * a.in + k);
#pragma unroll
    for (int v = 0; v < 4; v++) s.x[v] = __ldg(src + v);
  } else {
#pragma unroll
    for (int v = 0; v < 4; v++) s.x[v] = make_uint4(0, 0, 0, 0);
  }
}

template <typename T, int Bits>
__device__ inline void Multiply(const Share<T, Bits>& s, float* c) {
  constexpr uint32_t kMagic = Pair<T>::kMagic;
  const uint32_t* w0 = reinterpret_cast<const uint32_t*>(s.w[0]);
  const uint32_t* w1 = reinterpret_cast<const uint32_t*>(s.w[1]);
  const uint32_t* x = reinterpret_cast<const uint32_t*>(s.x);
  if constexpr (Bits == 4) {
    // Word i: values 8i..8i+7; pair j is (q_j, q_j+4), and x's pair (x_j, x_j+4) to match.
#pragma unroll
    for (int i = 0; i < 4; i++) {
      uint32_t xp[4];
      xp[0] = __byte_perm(x[4 * i], x[4 * i + 2], 0x5410);
      xp[1] = __byte_perm(x[4 * i], x[4 * i + 2], 0x7632);
      xp[2] = __byte_perm(x[4 * i + 1], x[4 * i + 3], 0x5410);
      xp[3] = __byte_perm(x[4 * i + 1], x[4 * i + 3], 0x7632);
      uint32_t p0[4];
      uint32_t p1[4];
#pragma unroll
      for (int j = 0; j < 4; j++) {
        p0[j] = Dequant(((w0[i] >> (4 * j)) & 0x000F000Fu) | kMagic, s.zero[0], s.scale[0]);
        p1[j] = Dequant(((w1[i] >> (4 * j)) & 0x000F000Fu) | kMagic, s.zero[1], s.scale[1]);
      }
      Mma<T>(c, p0[0], p1[0], p0[1], p1[1], xp[0], xp[1]);
      Mma<T>(c, p0[2], p1[2], p0[3], p1[3], xp[2], xp[3]);
    }
  } else {
    static_assert(std::is_same<T, __half>::value, "8 bits above 128 are not exact in bfloat16's bits");
    // Word i: values 4i..4i+3, pairs (q_4i, q_4i+1) and (q_4i+2, q_4i+3), as x's halves come.
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const uint32_t a0 = Dequant(__byte_perm(w0[i], 0x64646464u, 0x4140), s.zero[0], s.scale[0]);
      const uint32_t a2 = Dequant(__byte_perm(w0[i], 0x64646464u, 0x4342), s.zero[0], s.scale[0]);
      const uint32_t a1 = Dequant(__byte_perm(w1[i], 0x64646464u, 0x4140), s.zero[1], s.scale[1]);
      const uint32_t a3 = Dequant(__byte_perm(w1[i], 0x64646464u, 0x4342), s.zero[1], s.scale[1]);
      Mma<T>(c, a0, a1, a2, a3, x[2 * i], x[2 * i + 1]);
    }
  }
}

template <typename T, int Bits>
__global__ void __launch_bounds__(kMmaThreads) QuantMmaKernel(QuantLinearArgs a) {
  __shared__ float partial[kMmaWarps][32][4];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int o0 = blockIdx.x * 16;
  const int shift = __ffs(a.blockSize) - 1;
  const int groups = (a.in + kGroupK - 1) / kGroupK;
  float c[4] = {0, 0, 0, 0};
  for (int first = warp; first < groups; first += kMmaWarps * kAheadGroups) {
    Share<T, Bits> share[kAheadGroups];
#pragma unroll
    for (int u = 0; u < kAheadGroups; u++) Read<T, Bits>(share[u], a, first + u * kMmaWarps, g, t, o0, shift);
#pragma unroll
    for (int u = 0; u < kAheadGroups; u++) Multiply<T, Bits>(share[u], c);
  }
#pragma unroll
  for (int i = 0; i < 4; i++) partial[warp][lane][i] = c[i];
  __syncthreads();
  if (warp != 0) return;
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  // c0, c1: output g, x rows 2t and 2t + 1; c2, c3: output g + 8.
#pragma unroll
  for (int i = 0; i < 4; i++) {
    float sum = 0;
#pragma unroll
    for (int w = 0; w < kMmaWarps; w++) sum += partial[w][lane][i];
    const int o = o0 + g + (i >= 2 ? 8 : 0);
    const int r = 2 * t + (i & 1);
    if (o < a.out && r < a.rows) y[static_cast<size_t>(r) * a.out + o] = Finish<T>(sum, bias, o, a.activation);
  }
}

}  // namespace

bool QuantMmaRowsDevice(const QuantLinearArgs& a, void* stream) {
  const bool type = a.type == FloatType::kFloat16 || (a.type == FloatType::kBFloat16 && a.bits == 4);
  const bool fits = type && a.rows >= 1 && a.rows <= 8 && a.in % 32 == 0 && a.blockSize % 32 == 0 &&
                    reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.weight) % 16 == 0;
  if (!fits) return false;
  const dim3 grid((a.out + 15) / 16);
  auto s = static_cast<cudaStream_t>(stream);
  if (a.type == FloatType::kBFloat16) {
    QuantMmaKernel<__nv_bfloat16, 4><<<grid, kMmaThreads, 0, s>>>(a);
  } else if (a.bits == 4) {
    QuantMmaKernel<__half, 4><<<grid, kMmaThreads, 0, s>>>(a);
  } else {
    QuantMmaKernel<__half, 8><<<grid, kMmaThreads, 0, s>>>(a);
  }
  return true;
}

}  // namespace chorus
