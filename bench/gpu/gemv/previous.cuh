// The addon's Linear kernel before 2026-11-25 (fp16, no bias or activation), for comparison: one warp per
// output, its weight row read 16 bytes a lane with 4 reads in flight, against each row of x from L1,
// summed across the warp. It ran up to 4 rows; here up to 8, to show what 8 rows cost it.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../../../src/native/linear.h"

constexpr int kPreviousRows = 8;

template <int R>
__global__ void __launch_bounds__(128) PreviousKernel(chorus::LinearArgs a) {
  const int lane = threadIdx.x & 31;
  const int o = blockIdx.x * 4 + threadIdx.x / 32;
  if (o >= a.out) return;
  const int n = a.in / 8;
  const uint4* wv = reinterpret_cast<const uint4*>(static_cast<const __half*>(a.weight) + static_cast<size_t>(o) * a.in);
  const uint4* xv = static_cast<const uint4*>(a.x);
  float acc[R] = {};
  auto use = [&](int c, const uint4& weights) {
    const __half2* w2 = reinterpret_cast<const __half2*>(&weights);
#pragma unroll
    for (int r = 0; r < R; r++) {
      const uint4 xr = __ldg(xv + static_cast<size_t>(r) * n + c);
      const __half2* x2 = reinterpret_cast<const __half2*>(&xr);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const float2 wf = __half22float2(w2[i]);
        const float2 xf = __half22float2(x2[i]);
        acc[r] += wf.x * xf.x + wf.y * xf.y;
      }
    }
  };
  int c = lane;
  for (; c + 3 * 32 < n; c += 4 * 32) {
    uint4 ahead[4];
#pragma unroll
    for (int u = 0; u < 4; u++) ahead[u] = __ldcs(wv + c + u * 32);
#pragma unroll
    for (int u = 0; u < 4; u++) use(c + u * 32, ahead[u]);
  }
  for (; c < n; c += 32) use(c, __ldcs(wv + c));
#pragma unroll
  for (int r = 0; r < R; r++) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
    if (lane == r) static_cast<__half*>(a.y)[static_cast<size_t>(r) * a.out + o] = __float2half_rn(acc[r]);
  }
}

inline void LaunchPrevious(const chorus::LinearArgs& a, cudaStream_t stream) {
  const dim3 grid((a.out + 3) / 4);
  switch (a.rows) {
    case 1: PreviousKernel<1><<<grid, 128, 0, stream>>>(a); break;
    case 8: PreviousKernel<8><<<grid, 128, 0, stream>>>(a); break;
    default: break;
  }
}
