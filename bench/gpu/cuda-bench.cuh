// What the standalone CUDA benchmarks (bench/gpu/*/*.cu, lab/*/*.cu) share: failing on a CUDA error,
// zeroed device memory freed together, device memory filled on the device from a seeded stream, the
// time of a captured graph's replays and of a launch among many, and the difference of two float16
// outputs.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../../src/native/device.cuh"

namespace bench {

// Exits 2, naming `what`, on a CUDA error.
inline void Check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
  std::exit(2);
}

// Element i of a stream of uniform values in [-1, 1) (a 64-bit mix of seed and index): weights and
// caches are gigabytes, filled on the device rather than copied from the host.
__device__ inline float Uniform(uint64_t seed, size_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + i;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// out[0..n) = Uniform(seed, i) * scale, in T.
template <typename T>
__global__ void FillKernel(T* out, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = chorus::Narrowed<T>(Uniform(seed, i) * scale);
  }
}

// Device memory of `bytes` (at least 16), zeroed; kept in `owned` to be freed together.
inline void* Zeros(size_t bytes, std::vector<void*>& owned) {
  const size_t size = bytes < 16 ? 16 : bytes;
  void* p = nullptr;
  Check(cudaMalloc(&p, size), "cudaMalloc");
  Check(cudaMemset(p, 0, size), "cudaMemset");
  owned.push_back(p);
  return p;
}

// Milliseconds a replay of `graph` on `stream`: instantiated, replayed `warmups` times, then `replays`
// times between two events.
inline double ReplayMs(cudaGraph_t graph, cudaStream_t stream, int warmups, int replays) {
  cudaGraphExec_t exec = nullptr;
  Check(cudaGraphInstantiate(&exec, graph, 0ULL), "cudaGraphInstantiate");
  for (int i = 0; i < warmups; i++) Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  cudaEvent_t start = nullptr, end = nullptr;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&end), "cudaEventCreate");
  Check(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int i = 0; i < replays; i++) Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  Check(cudaEventRecord(end, stream), "cudaEventRecord");
  Check(cudaEventSynchronize(end), "the timed replays");
  float ms = 0;
  Check(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaGraphExecDestroy(exec);
  return static_cast<double>(ms) / replays;
}

// Microseconds a launch of `launch(copy)` over `launches` launches in one graph (rotating over `copies`
// weight copies, so that each launch meets its weights in memory rather than in L2), the best of
// `repeats` replays after a warm one.
template <class Launch>
double TimeLaunches(cudaStream_t stream, int copies, Launch launch, int launches = 32, int repeats = 5) {
  cudaGraph_t graph;
  Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < launches; i++) launch(i % copies);
  Check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  Check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");  // warm
  double best = 1e30;
  for (int r = 0; r < repeats; r++) {
    Check(cudaEventRecord(start, stream), "cudaEventRecord");
    Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    Check(cudaEventRecord(stop, stream), "cudaEventRecord");
    Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    best = std::min(best, 1000.0 * ms / launches);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return best;
}

// The largest |a - b| over the largest |b|, of n float16 values on the device.
inline double Difference(const __half* a, const __half* b, size_t n) {
  std::vector<__half> ha(n), hb(n);
  Check(cudaMemcpy(ha.data(), a, n * sizeof(__half), cudaMemcpyDeviceToHost), "cudaMemcpy");
  Check(cudaMemcpy(hb.data(), b, n * sizeof(__half), cudaMemcpyDeviceToHost), "cudaMemcpy");
  double most = 0, scale = 0;
  for (size_t i = 0; i < n; i++) {
    most = std::max(most, std::fabs(static_cast<double>(__half2float(ha[i])) - __half2float(hb[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(__half2float(hb[i]))));
  }
  return scale > 0 ? most / scale : most;
}

}  // namespace bench
