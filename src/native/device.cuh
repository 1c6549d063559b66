// Device helpers the native engine's CUDA files share.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "linear.h"

namespace chorus {

// A logit as float: float32 as it is, float16 widened.
template <typename T>
__device__ inline float Load(const T* p);
template <>
__device__ inline float Load<float>(const float* p) { return *p; }
template <>
__device__ inline float Load<__half>(const __half* p) { return __half2float(*p); }
template <>
__device__ inline float Load<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// A float narrowed to T (rounded to nearest even), and widened back.
template <typename T>
__device__ inline T Narrowed(float v);
template <>
__device__ inline float Narrowed<float>(float v) { return v; }
template <>
__device__ inline __half Narrowed<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ inline __nv_bfloat16 Narrowed<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <typename T>
__device__ inline float Rounded(float v) {
  const T x = Narrowed<T>(v);
  return Load(&x);
}

// A projection's epilogue (Linear's and QuantLinear's): the sum and its bias rounded once, then the
// activation rounded.
template <typename T>
__device__ inline T Finish(float sum, const T* bias, int o, Activation activation) {
  float v = Rounded<T>(bias == nullptr ? sum : sum + Load(bias + o));
  if (activation != Activation::kNone) v = Activate(v, activation);
  return Narrowed<T>(v);
}

// 16 bytes from global memory into shared memory, asynchronously (zeros where !valid, nothing read).
__device__ inline void CopyAsync16(void* to, const void* from, bool valid) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(from), "r"(valid ? 16 : 0));
}
__device__ inline void CommitAsync() { asm volatile("cp.async.commit_group;\n" ::); }
// Until at most N of this thread's commit groups are still in flight.
template <int N>
__device__ inline void WaitAsync() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Soft-capping of a projection's output (Gemma 2's final logits): cap * tanh(v / cap), rounded after the
// division, the tanh and the product, as the three operators transformers runs in the float type.
template <typename T>
__device__ inline T Capped(T v, float cap) {
  return Narrowed<T>(Rounded<T>(tanhf(Rounded<T>(Load(&v) / cap))) * cap);
}

// A gated projection's output: the gate's sum and the up projection's (output o's up row is out + o),
// each rounded with its bias, the gate's activation rounded, then their product rounded.
template <typename T>
__device__ inline T Gate(float gate, float up, const T* bias, int o, int out, Activation activation) {
  float g = Rounded<T>(bias == nullptr ? gate : gate + Load(bias + o));
  if (activation != Activation::kNone) g = Rounded<T>(Activate(g, activation));
  return Narrowed<T>(g * Rounded<T>(bias == nullptr ? up : up + Load(bias + out + o)));
}

// The 8 halves of a 16-byte vector as floats.
__device__ inline void Widen8(uint4 bits, float* out) {
  const __half2* h = reinterpret_cast<const __half2*>(&bits);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// A thread block cluster's barrier, and a rank's shared memory (sm_90 on; older GPUs never launch
// clusters: one block, where these are the block's own).
__device__ inline void ClusterBarrier() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#else
  __syncthreads();
#endif
}
template <class T>
__device__ inline T* RankShared(T* local, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().map_shared_rank(local, rank);
#else
  (void)rank;
  return local;
#endif
}

// Whether CUDA device `device` launches thread block clusters (compute capability 9 on), asked once
// per device.
inline bool TakesClusters(int device) {
  static std::atomic<unsigned long long> hopper{0};
  static std::atomic<unsigned long long> checked{0};
  const unsigned long long bit = 1ull << (device & 63);
  if ((checked.load() & bit) == 0) {
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (major >= 9) hopper.fetch_or(bit);
    checked.fetch_or(bit);
  }
  return (hopper.load() & bit) != 0;
}

// kernel<<<grid, threads, sharedBytes, stream>>>(args) in thread block clusters of `ranks` blocks along
// x; false, its error cleared, where the launch is refused (no room for such a cluster).
template <typename... Params, typename... Args>
inline bool LaunchClusters(void (*kernel)(Params...), dim3 grid, int threads, size_t sharedBytes, int ranks, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = sharedBytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = ranks;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  if (cudaLaunchKernelEx(&config, kernel, args...) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

// Elements a thread reads ahead in a pass over a row.
constexpr int kUnroll = 8;

// This thread's strided share of n elements (threadIdx.x, + blockDim.x, ...) in index order:
// use(i, read(i)) for each, the reads of Ahead elements taken before any is used, so that their loads
// are in flight together.
template <class T, int Ahead, class Read, class Use>
__device__ inline void StridedShare(int n, Read read, Use use) {
  const int stride = blockDim.x;
  int v = threadIdx.x;
  for (; v + (Ahead - 1) * stride < n; v += Ahead * stride) {
    T x[Ahead];
#pragma unroll
    for (int u = 0; u < Ahead; u++) x[u] = read(v + u * stride);
#pragma unroll
    for (int u = 0; u < Ahead; u++) use(v + u * stride, x[u]);
  }
  for (; v < n; v += stride) use(v, read(v));
}

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

// c += a (16 x 16) times b (16 x 8) on tensor cores (mma.m16n8k16, sm_80 on): 16-bit float
// pairs in, float32 sums; fragments in PTX's layout (a0: row lane / 4, columns 2 (lane % 4) and on;
// a1: row + 8; a2: columns + 8; a3: both; b0: rows 2 (lane % 4) and on of column lane / 4; b1: rows + 8).
template <typename T>
__device__ inline void Mma(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same<T, __half>::value) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Programmatic dependent launch (sm_90 on): the wait for the kernel before this one in the stream (its
// writes visible), and the signal that the kernel after this one may start. No-ops on older GPUs and
// in plain launches.
__device__ inline void WaitForPrevious() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ inline void LetDependentsStart() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ inline void PrefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Lets `kernel` take `bytes` of dynamic shared memory (past 48 KiB a kernel must ask), once on each
// device: `asked` is the kernel's own record of the devices it was granted on (a refusal is asked again
// at the next launch, which then fails on its own).
template <typename Kernel>
inline void AllowSharedBytes(std::atomic<unsigned long long>& asked, Kernel kernel, size_t bytes) {
  int device = 0;
  cudaGetDevice(&device);
  const unsigned long long bit = 1ull << (device & 63);
  if ((asked.load() & bit) == 0 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) == cudaSuccess) asked.fetch_or(bit);
}

// kernel<<<grid, block, shared, stream>>>(args) as a programmatic dependent launch while `dependent`
// holds (it may then start while the kernel before it finishes; turned off for good where the driver
// refuses such a launch), else a plain one.
template <typename... Params, typename... Args>
inline void LaunchMaybeDependentShared(std::atomic<bool>& dependent, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream, Args... args) {
  if (dependent.load(std::memory_order_relaxed)) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    if (cudaLaunchKernelEx(&config, kernel, args...) == cudaSuccess) return;
    cudaGetLastError();
    dependent.store(false);
  }
  kernel<<<grid, block, shared, stream>>>(args...);
}

// The same without dynamic shared memory.
template <typename... Params, typename... Args>
inline void LaunchMaybeDependent(std::atomic<bool>& dependent, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  LaunchMaybeDependentShared(dependent, kernel, grid, block, 0, stream, args...);
}

}  // namespace chorus
