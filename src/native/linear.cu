#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <library_types.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "device.cuh"
#include "linear.h"

namespace chorus {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
// 16-byte reads a lane keeps in flight along a weight row.
constexpr int kAhead = 4;

// 16 bytes of T widened to float32: 8 halves or 4 floats.
template <typename T>
struct Wide {
  static constexpr int kCount = 16 / sizeof(T);
  float v[kCount];
};

template <typename T>
__device__ inline Wide<T> Widen16(const uint4& a);
template <>
__device__ inline Wide<__half> Widen16<__half>(const uint4& a) {
  const __half2* x = reinterpret_cast<const __half2*>(&a);
  Wide<__half> out;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 f = __half22float2(x[i]);
    out.v[2 * i] = f.x;
    out.v[2 * i + 1] = f.y;
  }
  return out;
}
template <>
__device__ inline Wide<float> Widen16<float>(const uint4& a) {
  Wide<float> out;
  const float* x = reinterpret_cast<const float*>(&a);
#pragma unroll
  for (int i = 0; i < 4; i++) out.v[i] = x[i];
  return out;
}

// The sum of the products of widened weights and 16 bytes of x, in float32.
template <typename T>
__device__ inline float Dot16(const Wide<T>& w, const uint4& x) {
  const Wide<T> u = Widen16<T>(x);
  float sum = 0;
#pragma unroll
  for (int i = 0; i < Wide<T>::kCount; i++) sum += w.v[i] * u.v[i];
  return sum;
}

template <typename T>
__device__ inline float RoundTo(float v);
template <>
__device__ inline float RoundTo<float>(float v) { return v; }
template <>
__device__ inline float RoundTo<__half>(float v) { return __half2float(__float2half_rn(v)); }

template <typename T>
__device__ inline T Narrow(float v);
template <>
__device__ inline float Narrow<float>(float v) { return v; }
template <>
__device__ inline __half Narrow<__half>(float v) { return __float2half_rn(v); }

// The epilogue: the sum and its bias rounded once, then the activation rounded.
template <typename T>
__device__ inline T Finish(float sum, const T* bias, int o, Activation activation) {
  float v = RoundTo<T>(bias == nullptr ? sum : sum + Load(bias + o));
  if (activation != Activation::kNone) v = Activate(v, activation);
  return Narrow<T>(v);
}

// One warp per output o: its weight row read once (16 bytes a lane, kAhead reads in flight) against
// each of the R rows of x (from the cache: every warp reads them), summed across the warp.
template <typename T, int R>
__global__ void __launch_bounds__(kThreads) LinearRowsKernel(LinearArgs a) {
  const int lane = threadIdx.x & 31;
  const int o = blockIdx.x * kWarps + threadIdx.x / 32;
  if (o >= a.out) return;
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight) + static_cast<size_t>(o) * a.in;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r] = 0;
  constexpr int kPer = 16 / sizeof(T);
  const bool vectors = a.in % kPer == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.weight) % 16 == 0;
  if (vectors) {
    const int n = a.in / kPer;
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    // Each weight vector is widened once for all the rows.
    auto use = [&](int c, const uint4& weights) {
      const Wide<T> wide = Widen16<T>(weights);
#pragma unroll
      for (int r = 0; r < R; r++) acc[r] += Dot16<T>(wide, __ldg(xv + static_cast<size_t>(r) * n + c));
    };
    int c = lane;
    for (; c + (kAhead - 1) * 32 < n; c += kAhead * 32) {
      uint4 ahead[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; u++) ahead[u] = __ldcs(wv + c + u * 32);
#pragma unroll
      for (int u = 0; u < kAhead; u++) use(c + u * 32, ahead[u]);
    }
    for (; c < n; c += 32) use(c, __ldcs(wv + c));
  } else {
    for (int k = lane; k < a.in; k += 32) {
      const float wk = Load(w + k);
#pragma unroll
      for (int r = 0; r < R; r++) acc[r] += wk * Load(x + static_cast<size_t>(r) * a.in + k);
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

template <typename T>
__global__ void BiasActivateKernel(LinearArgs a) {
  T* y = static_cast<T*>(a.y);
  const T* bias = static_cast<const T*>(a.bias);
  const size_t total = static_cast<size_t>(a.rows) * a.out;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] = Finish<T>(Load(y + i), bias, static_cast<int>(i % a.out), a.activation);
  }
}

template <typename T>
void LaunchRows(const LinearArgs& a, cudaStream_t stream) {
  const dim3 grid((a.out + kWarps - 1) / kWarps);
  switch (a.rows) {
    case 1: LinearRowsKernel<T, 1><<<grid, kThreads, 0, stream>>>(a); break;
    case 2: LinearRowsKernel<T, 2><<<grid, kThreads, 0, stream>>>(a); break;
    case 3: LinearRowsKernel<T, 3><<<grid, kThreads, 0, stream>>>(a); break;
    case 4: LinearRowsKernel<T, 4><<<grid, kThreads, 0, stream>>>(a); break;
    default: throw std::invalid_argument("the Linear kernel takes 1.." + std::to_string(kLinearKernelRows) + " rows, not " + std::to_string(a.rows));
  }
}

// cublasGemmEx, with cuBLAS's enums as the ints they are (cublas_api.h).
using GemmEx = int (*)(void* handle, int transa, int transb, int m, int n, int k, const void* alpha, const void* A, int Atype, int lda, const void* B, int Btype,
                       int ldb, const void* beta, void* C, int Ctype, int ldc, int computeType, int algo);
constexpr int kOpN = 0;
constexpr int kOpT = 1;
constexpr int kComputeFloat32 = 68;  // CUBLAS_COMPUTE_32F
constexpr int kGemmDefault = -1;     // CUBLAS_GEMM_DEFAULT

// The cuBLAS that ONNX Runtime's CUDA provider loaded (its handle is that library's), else one loaded here.
GemmEx FindGemmEx() {
  static const GemmEx found = [] {
    const char* names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    void* library = nullptr;
    for (const char* name : names) {
      if ((library = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) != nullptr) break;
    }
    for (const char* name : names) {
      if (library == nullptr) library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    }
    return library == nullptr ? nullptr : reinterpret_cast<GemmEx>(dlsym(library, "cublasGemmEx"));
  }();
  if (found == nullptr) throw std::runtime_error("cuBLAS (libcublas.so.13 or .12, as ONNX Runtime's CUDA provider loads it) was not found or has no cublasGemmEx");
  return found;
}

}  // namespace

void LinearRowsDevice(const LinearArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (a.type == FloatType::kFloat16) {
    LaunchRows<__half>(a, s);
  } else {
    LaunchRows<float>(a, s);
  }
}

void BiasActivateDevice(const LinearArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const size_t total = static_cast<size_t>(a.rows) * a.out;
  const int blocks = static_cast<int>(std::min<size_t>((total + 255) / 256, 4096));
  if (a.type == FloatType::kFloat16) {
    BiasActivateKernel<__half><<<blocks, 256, 0, s>>>(a);
  } else {
    BiasActivateKernel<float><<<blocks, 256, 0, s>>>(a);
  }
}

void LinearGemmDevice(const LinearArgs& a, void* handle) {
  // Column-major, as cuBLAS sees it: y^T [out x rows] = weight^T^T [out x in] . x^T [in x rows], where
  // the row-major weight [out, in] is the column-major [in x out] matrix (taken transposed) and the
  // row-major x [rows, in] is the column-major [in x rows] one.
  const float one = 1;
  const float zero = 0;
  const int type = a.type == FloatType::kFloat16 ? CUDA_R_16F : CUDA_R_32F;
  const int status = FindGemmEx()(handle, kOpT, kOpN, a.out, a.rows, a.in, &one, a.weight, type, a.in, a.x, type, a.in, &zero, a.y, type, a.out, kComputeFloat32,
                                  kGemmDefault);
  if (status != 0) throw std::runtime_error("cublasGemmEx failed with status " + std::to_string(status));
}

}  // namespace chorus
