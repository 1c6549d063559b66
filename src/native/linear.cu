#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <library_types.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda-check.h"
#include "device.cuh"
#include "linear.h"

namespace chorus {

namespace {

constexpr int kThreads = 256;
// 16-byte reads a thread keeps in flight along each weight row.
constexpr int kAhead = 2;

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
__device__ inline Wide<__nv_bfloat16> Widen16<__nv_bfloat16>(const uint4& a) {
  const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(&a);
  Wide<__nv_bfloat16> out;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 f = __bfloat1622float2(x[i]);
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

// The decode steps' products (1..kLinearKernelRows rows of x): a block of kThreads (single rows: as
// RowThreads chooses) takes kOutputs consecutive outputs (gated: half as many, their gate rows and up
// rows) and all of K. Its threads stride over the weight rows together, 16 bytes a thread and kAhead
// reads a row in flight, so each of the block's rows is read once, coalesced, and each 16 bytes of x
// (read through L1, shared by the block's rows) serves kOutputs weights. The block splits K across its
// warps (an in-block split-K: enough blocks for a 2048-wide layer on 132 SMs, and no pass or workspace
// after), sums each thread's partials in float32 across its warp (shuffles), then
// across the warps in shared memory, and one thread per output and row rounds the sum with its bias and
// applies the activation.
constexpr int kOutputs = 4;

// Output o of a plain (not gated) product: the bias and activation (Finish), then the soft cap where
// args ask for one.
template <typename T>
__device__ inline T Output(float sum, const T* bias, int o, const LinearArgs& a) {
  const T v = Finish<T>(sum, bias, o, a.activation);
  return a.softcap > 0 ? Capped<T>(v, a.softcap) : v;
}

// Blocks a multiprocessor holds of the kernel at N threads a block (the registers' bound): 3 of 256
// pre-normed single rows, else 2.
constexpr int RowsKernelBlocks(int threads, bool normedRow) { return normedRow && threads <= 256 ? 3 : 2; }

// With a pre-norm (Norm), each 16 bytes of x is first x + residual (rounded, as the stream keeps it; block
// 0 writes it to a.sum), whose squares the block sums along with its products, then scaled by the
// norm's weights; each sum is scaled by its row's inverse root in the epilogue, before the bias.
// Pre-normed single rows keep the plain kernel's 3 blocks a multiprocessor (at most 80 registers):
// with 2, TinyLlama's gated MLP (2,816 blocks) took half as many waves again.
// With a post-norm too (Post), each block first sums the squares of its rows of x on their own, and
// each 16 bytes of x is normed by them (rounded) before the residual joins it.
// O outputs a block (gated: O / 2, their gate and up rows), A reads of each row in flight.
template <typename T, int R, bool Norm, int O = kOutputs, int A = kAhead, bool Post = false, int N = kThreads>
__global__ void __launch_bounds__(N, RowsKernelBlocks(N, Norm && R == 1)) LinearRowsKernel(LinearArgs a) {
  constexpr int kWarps = N / 32;
  const bool gated = a.gated;
  const int first = blockIdx.x * (gated ? O / 2 : O);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  float acc[O][R];
#pragma unroll
  for (int j = 0; j < O; j++) {
#pragma unroll
    for (int r = 0; r < R; r++) acc[j][r] = 0;
  }
  float squares[R];
#pragma unroll
  for (int r = 0; r < R; r++) squares[r] = 0;
  // The weight row each of the block's O sums reads (gated: the gate's rows of outputs first ..
  // first + O / 2 - 1, then their up rows, a.out rows on). Outputs past the end read row `first` again
  // (in bounds) and are not written.
  int rowOf[O];
#pragma unroll
  for (int j = 0; j < O; j++) {
    const int o = gated ? first + j % (O / 2) : first + j;
    rowOf[j] = o >= a.out ? first : gated && j >= O / 2 ? a.out + o : o;
  }
  constexpr int kPer = 16 / sizeof(T);
  const bool vectors = a.in % kPer == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.weight) % 16 == 0;
  const uint4* wv[O];
#pragma unroll
  for (int j = 0; j < O; j++) wv[j] = reinterpret_cast<const uint4*>(w + static_cast<size_t>(rowOf[j]) * a.in);
  // Launched as a dependent launch, this block may start while the kernel before it (x's producer, or a
  // reader of the memory y takes) still runs: the weights, which no kernel writes, are pulled into L2
  // first, and x is read and y written only after the wait.
  if (vectors) {
#pragma unroll
    for (int u = 0; u < A; u++) {
      const int c = threadIdx.x + u * N;
#pragma unroll
      for (int j = 0; j < O; j++) {
        if (c < a.in / kPer) PrefetchL2(wv[j] + c);
      }
    }
  }
  WaitForPrevious();
  // The post-norm's inverse root of each row of x (the host launches Post with 16-byte rows alone).
  float postInverse[R];
  if constexpr (Post) {
    const int n = a.in / kPer;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    float own[R];
#pragma unroll
    for (int r = 0; r < R; r++) own[r] = 0;
    for (int c = threadIdx.x; c < n; c += N) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        const Wide<T> u = Widen16<T>(__ldg(xv + static_cast<size_t>(r) * n + c));
#pragma unroll
        for (int i = 0; i < Wide<T>::kCount; i++) own[r] += u.v[i] * u.v[i];
      }
    }
    __shared__ float postPartial[kWarps][R];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) own[r] += __shfl_xor_sync(0xffffffffu, own[r], offset);
      if ((threadIdx.x & 31) == 0) postPartial[threadIdx.x / 32][r] = own[r];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; r++) {
      float total = 0;
#pragma unroll
      for (int q = 0; q < kWarps; q++) total += postPartial[q][r];
      postInverse[r] = rsqrtf(total / a.in + a.postEpsilon);
    }
  }
  if (vectors) {
    const int n = a.in / kPer;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    // One 16-byte column c of the block's weight rows against the same column of each row of x.
    auto use = [&](int c, const uint4 (&weights)[O]) {
      if constexpr (Norm) {
        // Each row's x + residual, rounded, its squares summed, scaled by the norm's weights; the weights
        // widened per row (one row: once), so that few registers hold them (occupancy).
        const Wide<T> scale = Widen16<T>(__ldg(static_cast<const uint4*>(a.norm) + c));
        Wide<T> post;
        if constexpr (Post) post = Widen16<T>(__ldg(static_cast<const uint4*>(a.postNorm) + c));
#pragma unroll
        for (int r = 0; r < R; r++) {
          Wide<T> u = Widen16<T>(__ldg(xv + static_cast<size_t>(r) * n + c));
          if constexpr (Post) {
#pragma unroll
            for (int i = 0; i < Wide<T>::kCount; i++) u.v[i] = Rounded<T>(u.v[i] * postInverse[r] * post.v[i]);
          }
          if (a.residual != nullptr) {
            const Wide<T> skip = Widen16<T>(__ldg(static_cast<const uint4*>(a.residual) + static_cast<size_t>(r) * n + c));
            uint4 out;
            T* e = reinterpret_cast<T*>(&out);
#pragma unroll
            for (int i = 0; i < Wide<T>::kCount; i++) {
              e[i] = Narrowed<T>(u.v[i] + skip.v[i]);
              u.v[i] = Load(e + i);
            }
            if (a.sum != nullptr && blockIdx.x == 0) static_cast<uint4*>(a.sum)[static_cast<size_t>(r) * n + c] = out;
          }
#pragma unroll
          for (int i = 0; i < Wide<T>::kCount; i++) {
            squares[r] += u.v[i] * u.v[i];
            u.v[i] *= scale.v[i];
          }
#pragma unroll
          for (int j = 0; j < O; j++) {
            const Wide<T> w = Widen16<T>(weights[j]);
#pragma unroll
            for (int i = 0; i < Wide<T>::kCount; i++) acc[j][r] += w.v[i] * u.v[i];
          }
        }
      } else {
        Wide<T> wide[O];
#pragma unroll
        for (int j = 0; j < O; j++) wide[j] = Widen16<T>(weights[j]);
#pragma unroll
        for (int r = 0; r < R; r++) {
          const Wide<T> u = Widen16<T>(__ldg(xv + static_cast<size_t>(r) * n + c));
#pragma unroll
          for (int j = 0; j < O; j++) {
#pragma unroll
            for (int i = 0; i < Wide<T>::kCount; i++) acc[j][r] += wide[j].v[i] * u.v[i];
          }
        }
      }
    };
    int c = threadIdx.x;
    for (; c + (A - 1) * N < n; c += A * N) {
      uint4 ahead[A][O];
#pragma unroll
      for (int u = 0; u < A; u++) {
#pragma unroll
        for (int j = 0; j < O; j++) ahead[u][j] = __ldcs(wv[j] + c + u * N);
      }
#pragma unroll
      for (int u = 0; u < A; u++) use(c + u * N, ahead[u]);
    }
    for (; c < n; c += N) {
      uint4 one[O];
#pragma unroll
      for (int j = 0; j < O; j++) one[j] = __ldcs(wv[j] + c);
      use(c, one);
    }
  } else {
    for (int k = threadIdx.x; k < a.in; k += N) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        const float xk = Load(x + static_cast<size_t>(r) * a.in + k);
#pragma unroll
        for (int j = 0; j < O; j++) acc[j][r] += Load(w + static_cast<size_t>(rowOf[j]) * a.in + k) * xk;
      }
    }
  }
  // A dependent launch after this one may start pulling its own weights now.
  LetDependentsStart();
  // The products' partials, then (Norm) the rows' sums of squares.
  __shared__ float partial[kWarps][(O + (Norm ? 1 : 0)) * R];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int j = 0; j < O + (Norm ? 1 : 0); j++) {
#pragma unroll
    for (int r = 0; r < R; r++) {
      float v = j < O ? acc[j][r] : squares[r];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) partial[warp][j * R + r] = v;
    }
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < (gated ? O / 2 : O) * R) {
    const int j = t / R;
    const int r = t % R;
    if (first + j < a.out) {
      float sum = 0;
#pragma unroll
      for (int q = 0; q < kWarps; q++) sum += partial[q][t];
      float inverse = 1;
      if constexpr (Norm) {
        float squares = 0;
#pragma unroll
        for (int q = 0; q < kWarps; q++) squares += partial[q][O * R + r];
        inverse = rsqrtf(squares / a.in + a.epsilon);
      }
      sum *= inverse;
      T* y = static_cast<T*>(a.y) + static_cast<size_t>(r) * a.out + first + j;
      const T* bias = static_cast<const T*>(a.bias);
      if (gated) {
        float up = 0;
#pragma unroll
        for (int q = 0; q < kWarps; q++) up += partial[q][t + O / 2 * R];
        up *= inverse;
        *y = Gate<T>(sum, up, bias, first + j, a.out, a.activation);
      } else {
        *y = Output<T>(sum, bias, first + j, a);
      }
    }
  }
}

// A gated Linear's y from both products (rows of 2 * out, each rounded with its bias already).
template <typename T>
__global__ void GatedKernel(LinearArgs a, const T* products) {
  T* y = static_cast<T*>(a.y);
  const size_t total = static_cast<size_t>(a.rows) * a.out;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / a.out;
    const int o = static_cast<int>(i % a.out);
    const T* row = products + r * 2 * a.out;
    y[i] = Gate<T>(Load(row + o), Load(row + a.out + o), nullptr, o, a.out, a.activation);
  }
}

// GatedKernel 16 bytes at a time (out a whole number of vectors, both pointers 16-byte aligned): a
// thread takes a vector of each row's gate products and the up products' vector that matches it. In
// Llama-2-7B's prefill of 64 rows of 128 tokens on an H100 the element kernel read and wrote at 1.4
// TB/s (394 us a layer).
template <typename T>
__global__ void GatedVectorKernel(LinearArgs a, const T* products) {
  constexpr int kPer = 16 / sizeof(T);
  const int perRow = a.out / kPer;
  const size_t total = static_cast<size_t>(a.rows) * perRow;
  const uint4* from = reinterpret_cast<const uint4*>(products);
  uint4* y = static_cast<uint4*>(a.y);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / perRow;
    const int c = static_cast<int>(i - r * perRow);
    const Wide<T> gate = Widen16<T>(from[r * 2 * perRow + c]);
    const Wide<T> up = Widen16<T>(from[r * 2 * perRow + perRow + c]);
    uint4 out;
    T* e = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int j = 0; j < kPer; j++) e[j] = Gate<T>(gate.v[j], up.v[j], nullptr, c * kPer + j, a.out, a.activation);
    y[i] = out;
  }
}

// Row r of `rows` from row r * positions + index[r] of `from` (no index: each row's last position), one
// block a row, in units of U.
template <typename U>
__global__ void GatherRowsKernel(const U* from, U* rows, size_t units, int64_t positions, const int32_t* index) {
  const int r = blockIdx.x;
  const int64_t given = index == nullptr ? positions - 1 : index[r];
  const int64_t at = given < 0 ? 0 : given >= positions ? positions - 1 : given;
  const U* source = from + (static_cast<int64_t>(r) * positions + at) * units;
  U* target = rows + static_cast<size_t>(r) * units;
  for (size_t i = threadIdx.x; i < units; i += blockDim.x) target[i] = source[i];
}

template <typename T>
__global__ void BiasActivateKernel(LinearArgs a) {
  T* y = static_cast<T*>(a.y);
  const T* bias = static_cast<const T*>(a.bias);
  const size_t total = static_cast<size_t>(a.rows) * a.out;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] = Output<T>(Load(y + i), bias, static_cast<int>(i % a.out), a);
  }
}

// BiasActivateKernel 16 bytes at a time (rows of a multiple of 16 bytes, 16-byte aligned).
template <typename T>
__global__ void BiasActivateVectorKernel(LinearArgs a) {
  constexpr int kPer = 16 / sizeof(T);
  uint4* y = static_cast<uint4*>(a.y);
  const T* bias = static_cast<const T*>(a.bias);
  const size_t perRow = static_cast<size_t>(a.out) / kPer;
  const size_t total = static_cast<size_t>(a.rows) * perRow;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint4 vector = y[i];
    T* e = reinterpret_cast<T*>(&vector);
    const int o = static_cast<int>(i % perRow) * kPer;
#pragma unroll
    for (int k = 0; k < kPer; k++) e[k] = Output<T>(Load(e + k), bias, o + k, a);
    y[i] = vector;
  }
}

template <typename T>
void BiasActivate(const LinearArgs& a, bool vectors, int blocks, cudaStream_t stream) {
  if (vectors) {
    BiasActivateVectorKernel<T><<<blocks, 256, 0, stream>>>(a);
  } else {
    BiasActivateKernel<T><<<blocks, 256, 0, stream>>>(a);
  }
}

template <typename T>
void Gated(const LinearArgs& a, const void* products, bool vectors, int blocks, cudaStream_t stream) {
  const T* from = static_cast<const T*>(products);
  if (vectors) {
    GatedVectorKernel<T><<<blocks, 256, 0, stream>>>(a, from);
  } else {
    GatedKernel<T><<<blocks, 256, 0, stream>>>(a, from);
  }
}

// cuBLAS's data type of a float type (library_types.h).
int CudaTypeOf(FloatType type) {
  switch (type) {
    case FloatType::kFloat16: return CUDA_R_16F;
    case FloatType::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// Whether the decode kernel goes out as a programmatic dependent launch (CHORUS_LINEAR_PDL=0: not):
// on sm_90 it then starts while the kernel before it finishes, its weights' first reads under way.
// Turned off for good where the driver refuses such a launch.
std::atomic<bool> dependentLaunch{[] {
  const char* value = std::getenv("CHORUS_LINEAR_PDL");
  return value == nullptr || std::string(value) != "0";
}()};

// Pre-normed single rows take 8 outputs a block, one read of each row in flight: the x side of the
// product (x, residual and norm weight, three reads and the sum of squares) is then done once for 8
// weight rows rather than 4, in half as many blocks, with as many bytes in flight.
constexpr int kNormOutputs = 8;

// CHORUS_LINEAR_NORM_OUTPUTS=4: pre-normed single rows as 4 outputs a block too (to compare).
const bool normOutputs4 = [] {
  const char* value = std::getenv("CHORUS_LINEAR_NORM_OUTPUTS");
  return value != nullptr && std::string(value) == "4";
}();

// CHORUS_LINEAR_THREADS=256: single rows in blocks of 256 threads whatever their width (to compare).
const bool rowsThreads256 = [] {
  const char* value = std::getenv("CHORUS_LINEAR_THREADS");
  return value != nullptr && std::string(value) == "256";
}();

// Threads a block of single-row products takes: as many as the row's 16-byte vectors where 256 leave a
// round of reads to a few of them (Gemma 2's 2,304 and 9,216 wide rows, 288 and 1,152 vectors: 288
// threads; Phi-3's 3,072, 384 vectors: 384), else 256.
int RowThreads(const LinearArgs& a, int per) {
  if (rowsThreads256 || a.in % per != 0) return kThreads;
  const int vectors = a.in / per;
  if (vectors % kThreads == 0) return kThreads;
  if (vectors % 288 == 0) return 288;
  if (vectors % 384 == 0) return 384;
  return kThreads;
}

template <typename T, int R, bool Norm, int O, int A, bool Post = false>
void LaunchRowsOf(const LinearArgs& a, cudaStream_t stream) {
  const int perBlock = a.gated ? O / 2 : O;
  const dim3 grid((a.out + perBlock - 1) / perBlock);
  if constexpr (R == 1) {
    switch (RowThreads(a, 16 / sizeof(T))) {
      case 288: return LaunchMaybeDependent(dependentLaunch, LinearRowsKernel<T, R, Norm, O, A, Post, 288>, grid, dim3(288), stream, a);
      case 384: return LaunchMaybeDependent(dependentLaunch, LinearRowsKernel<T, R, Norm, O, A, Post, 384>, grid, dim3(384), stream, a);
      default: break;
    }
  }
  LaunchMaybeDependent(dependentLaunch, LinearRowsKernel<T, R, Norm, O, A, Post>, grid, dim3(kThreads), stream, a);
}

template <typename T, int R, bool Norm>
void LaunchRowsKernel(const LinearArgs& a, cudaStream_t stream) {
  if constexpr (Norm) {
    if (a.postNorm != nullptr) {
      if constexpr (R == 1) return LaunchRowsOf<T, R, Norm, kNormOutputs, 1, true>(a, stream);
      return LaunchRowsOf<T, R, Norm, kOutputs, kAhead, true>(a, stream);
    }
  }
  if constexpr (Norm && R == 1) {
    if (!normOutputs4) return LaunchRowsOf<T, R, Norm, kNormOutputs, 1>(a, stream);
  }
  LaunchRowsOf<T, R, Norm, kOutputs, kAhead>(a, stream);
}

template <typename T, bool Norm>
void LaunchRows(const LinearArgs& a, cudaStream_t stream) {
  if constexpr (Norm) {
    switch (a.rows) {
      case 1: LaunchRowsKernel<T, 1, true>(a, stream); return;
      case 2: LaunchRowsKernel<T, 2, true>(a, stream); return;
      case 3: LaunchRowsKernel<T, 3, true>(a, stream); return;
      case 4: LaunchRowsKernel<T, 4, true>(a, stream); return;
      default: throw std::invalid_argument("the pre-normed Linear kernel takes 1.." + std::to_string(kLinearNormRows) + " rows, not " + std::to_string(a.rows));
    }
  }
  switch (a.rows) {
    case 1: LaunchRowsKernel<T, 1, false>(a, stream); break;
    case 2: LaunchRowsKernel<T, 2, false>(a, stream); break;
    case 3: LaunchRowsKernel<T, 3, false>(a, stream); break;
    case 4: LaunchRowsKernel<T, 4, false>(a, stream); break;
    case 5: LaunchRowsKernel<T, 5, false>(a, stream); break;
    case 6: LaunchRowsKernel<T, 6, false>(a, stream); break;
    case 7: LaunchRowsKernel<T, 7, false>(a, stream); break;
    case 8: LaunchRowsKernel<T, 8, false>(a, stream); break;
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

// The first of `names` that is loaded already (ONNX Runtime's CUDA provider's), else the first that loads.
void* OpenLibrary(const char* const* names, size_t count) {
  for (size_t i = 0; i < count; i++) {
    if (void* library = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD)) return library;
  }
  for (size_t i = 0; i < count; i++) {
    if (void* library = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) return library;
  }
  return nullptr;
}

// The cuBLAS that ONNX Runtime's CUDA provider loaded (its handle is that library's), else one loaded here.
GemmEx FindGemmEx() {
  static const GemmEx found = [] {
    const char* names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    void* library = OpenLibrary(names, 3);
    return library == nullptr ? nullptr : reinterpret_cast<GemmEx>(dlsym(library, "cublasGemmEx"));
  }();
  if (found == nullptr) throw std::runtime_error("cuBLAS (libcublas.so.13 or .12, as ONNX Runtime's CUDA provider loads it) was not found or has no cublasGemmEx");
  return found;
}

// cuBLASLt (cublasLt.h), for GEMMs that add the bias in their epilogue: its entry points, and its
// enums and structs as they are declared there.
struct LtAlgo {
  uint64_t data[8];
};
struct LtHeuristic {
  LtAlgo algo;
  size_t workspaceSize;
  int state;
  float wavesCount;
  int reserved[4];
};
constexpr int kLtTransA = 3;             // CUBLASLT_MATMUL_DESC_TRANSA
constexpr int kLtTransB = 4;             // CUBLASLT_MATMUL_DESC_TRANSB
constexpr int kLtEpilogue = 7;           // CUBLASLT_MATMUL_DESC_EPILOGUE
constexpr int kLtBiasPointer = 8;        // CUBLASLT_MATMUL_DESC_BIAS_POINTER
constexpr int kLtEpilogueDefault = 1;    // CUBLASLT_EPILOGUE_DEFAULT
constexpr int kLtEpilogueRelu = 2;       // CUBLASLT_EPILOGUE_RELU
constexpr int kLtEpilogueBias = 4;       // CUBLASLT_EPILOGUE_BIAS
constexpr int kLtEpilogueReluBias = 6;   // CUBLASLT_EPILOGUE_RELU_BIAS
constexpr int kLtMaxWorkspace = 1;       // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
constexpr int kCublasNotSupported = 15;  // CUBLAS_STATUS_NOT_SUPPORTED

struct Lt {
  int (*create)(void** handle);
  int (*descCreate)(void** desc, int computeType, int scaleType);
  int (*descDestroy)(void* desc);
  int (*descSet)(void* desc, int attribute, const void* value, size_t bytes);
  int (*layoutCreate)(void** layout, int type, uint64_t rows, uint64_t cols, int64_t ld);
  int (*layoutDestroy)(void* layout);
  int (*preferenceCreate)(void** preference);
  int (*preferenceDestroy)(void* preference);
  int (*preferenceSet)(void* preference, int attribute, const void* value, size_t bytes);
  int (*heuristic)(void* handle, void* desc, void* a, void* b, void* c, void* d, void* preference, int requested, LtHeuristic* results, int* returned);
  int (*matmul)(void* handle, void* desc, const void* alpha, const void* a, void* aLayout, const void* b, void* bLayout, const void* beta, const void* c, void* cLayout, void* d,
                void* dLayout, const LtAlgo* algo, void* workspace, size_t workspaceBytes, cudaStream_t stream);
};

// cuBLASLt, or null where it does not load (then GEMMs go through cublasGemmEx and a bias pass).
const Lt* FindLt() {
  static const Lt* found = []() -> const Lt* {
    const char* names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
    void* library = OpenLibrary(names, 3);
    if (library == nullptr) return nullptr;
    static Lt lt;
    bool all = true;
    auto bind = [&](auto& entry, const char* name) {
      entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(dlsym(library, name));
      all = all && entry != nullptr;
    };
    bind(lt.create, "cublasLtCreate");
    bind(lt.descCreate, "cublasLtMatmulDescCreate");
    bind(lt.descDestroy, "cublasLtMatmulDescDestroy");
    bind(lt.descSet, "cublasLtMatmulDescSetAttribute");
    bind(lt.layoutCreate, "cublasLtMatrixLayoutCreate");
    bind(lt.layoutDestroy, "cublasLtMatrixLayoutDestroy");
    bind(lt.preferenceCreate, "cublasLtMatmulPreferenceCreate");
    bind(lt.preferenceDestroy, "cublasLtMatmulPreferenceDestroy");
    bind(lt.preferenceSet, "cublasLtMatmulPreferenceSetAttribute");
    bind(lt.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    bind(lt.matmul, "cublasLtMatmul");
    return all ? &lt : nullptr;
  }();
  return found;
}

void LtCheck(int status, const char* what) {
  if (status != 0) throw std::runtime_error(std::string(what) + " failed with cuBLAS status " + std::to_string(status));
}

// A cuBLASLt handle per device, made on first use.
void* LtHandle(const Lt& lt) {
  static std::mutex lock;
  static std::map<int, void*> handles;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) throw std::runtime_error("cudaGetDevice failed");
  std::lock_guard<std::mutex> held(lock);
  void*& handle = handles[device];
  if (handle == nullptr) LtCheck(lt.create(&handle), "cublasLtCreate");
  return handle;
}

// The algorithm cuBLASLt's heuristic picks for a product's shape, type and epilogue, asked once per device.
struct LtKey {
  int device, type, epilogue, rows, in, count, ldy, align;
  bool operator<(const LtKey& o) const {
    return std::tie(device, type, epilogue, rows, in, count, ldy, align) < std::tie(o.device, o.type, o.epilogue, o.rows, o.in, o.count, o.ldy, o.align);
  }
};

// The descriptors of one product, destroyed with it.
struct LtProduct {
  const Lt& lt;
  void* desc = nullptr;
  void* layouts[3] = {nullptr, nullptr, nullptr};
  ~LtProduct() {
    for (void* layout : layouts) {
      if (layout != nullptr) lt.layoutDestroy(layout);
    }
    if (desc != nullptr) lt.descDestroy(desc);
  }
};

// CHORUS_LT_TUNE: which products' algorithm is chosen by timing cuBLASLt's candidates on the product's
// own operands, once per shape, at its first run outside a graph capture (the heuristic's first pick
// otherwise): by default those of up to kLtTuneRows rows (decode steps of many rows, short prefills);
// `all` every product, `0` none. SetLinearLtTune sets it for the benchmarks. The choice rests on
// timings, so two processes may choose differently for a shape, and their float16 sums may round
// differently: runs that must repeat bit for bit across processes set CHORUS_LT_TUNE=0 (any value
// other than 0 and `all` is the default). Measured on an H100, one product alone (bench/gpu/gemv,
// GEMV_PARTS=tune): Llama-2-7B's gate and up projections at 64 rows 68.4 us against the heuristic's
// 72.2, its LM head at 128 rows 97.8 against 105.7, most others within 1%; in the model
// (bench/gpu/llama/ab.sh) TinyLlama's batch 64 ran at 33,937 tokens/s against 33,197 (decode step
// 1.59 ms against 1.64) and its 128-token prompt's first token came 3.05 ms after submission against
// 4.12.
constexpr int kLtTuneRows = 256;
std::atomic<int> ltTune{[] {
  const char* value = std::getenv("CHORUS_LT_TUNE");
  if (value == nullptr) return kLtTuneRows;
  if (std::string(value) == "all") return INT32_MAX;
  return std::string(value) == "0" ? 0 : kLtTuneRows;
}()};

bool LtTunes(int rows) { return rows <= ltTune.load(std::memory_order_relaxed); }

// The candidates cuBLASLt's heuristic offers for a product (at most kLtCandidates), each run once to
// warm, then kLtTimings times with L2 emptied before each (a scratch of twice its size written over:
// a decode step meets its weights in memory, and a product small enough to stay in L2 would otherwise
// time the candidates that favour it), the fastest in sum kept for the key. Where the stream is being
// captured the heuristic's pick is used for this run, and the timing waits for a run outside one.
constexpr int kLtCandidates = 8;
constexpr int kLtTimings = 3;

template <typename Run>
LtAlgo TunedLtAlgo(const Lt& lt, void* handle, void* desc, void* const (&layouts)[3], const LtKey& key, const LtAlgo& heuristic, size_t workspaceBytes, cudaStream_t stream, const Run& run) {
  static std::mutex lock;
  static std::map<std::pair<LtKey, int>, LtAlgo> tuned;
  const std::pair<LtKey, int> at{key, ltTune.load(std::memory_order_relaxed)};
  {
    std::lock_guard<std::mutex> held(lock);
    auto found = tuned.find(at);
    if (found != tuned.end()) return found->second;
  }
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
    cudaGetLastError();  // not left for the kernel checks after the product
    return heuristic;
  }
  if (capturing != cudaStreamCaptureStatusNone) return heuristic;
  void* preference = nullptr;
  LtCheck(lt.preferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  const uint64_t most = workspaceBytes;
  LtHeuristic candidates[kLtCandidates];
  int returned = 0;
  int status = lt.preferenceSet(preference, kLtMaxWorkspace, &most, sizeof(most));
  if (status == 0) status = lt.heuristic(handle, desc, layouts[0], layouts[1], layouts[2], layouts[2], preference, kLtCandidates, candidates, &returned);
  lt.preferenceDestroy(preference);
  LtAlgo best = heuristic;
  if (status == 0 && returned > 1) {
    int device = 0;
    int l2 = 0;
    CheckCuda(cudaGetDevice(&device), "cudaGetDevice");
    CheckCuda(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "cudaDeviceGetAttribute");
    // The scratch and the events, released however the timing ends. The scratch is stream-ordered
    // memory: taking and giving it back does not wait for the whole device, as cudaMalloc and cudaFree
    // would (other sessions' work, another thread's capture).
    struct Timing {
      cudaStream_t stream;
      void* scratch = nullptr;
      cudaEvent_t start = nullptr;
      cudaEvent_t stop = nullptr;
      ~Timing() {
        if (start != nullptr) cudaEventDestroy(start);
        if (stop != nullptr) cudaEventDestroy(stop);
        if (scratch != nullptr) cudaFreeAsync(scratch, stream);
      }
    } timing{stream};
    const size_t scratchBytes = 2 * static_cast<size_t>(std::max(l2, 1 << 20));
    if (cudaMallocAsync(&timing.scratch, scratchBytes, stream) != cudaSuccess) {
      // No room for the scratch (a cache planned to the last bytes), or no stream-ordered memory on
      // this device: the heuristic's pick, for good.
      timing.scratch = nullptr;
      cudaGetLastError();
      std::lock_guard<std::mutex> held(lock);
      tuned.emplace(at, heuristic);
      return heuristic;
    }
    CheckCuda(cudaEventCreate(&timing.start), "cudaEventCreate");
    CheckCuda(cudaEventCreate(&timing.stop), "cudaEventCreate");
    float fastest = 0;
    bool any = false;
    for (int i = 0; i < returned; i++) {
      if (candidates[i].state != 0 || candidates[i].workspaceSize > workspaceBytes) continue;
      if (run(candidates[i].algo) != 0) continue;  // an algorithm that refuses these operands is passed over
      float total = 0;
      for (int t = 0; t < kLtTimings; t++) {
        CheckCuda(cudaMemsetAsync(timing.scratch, t, scratchBytes, stream), "cudaMemsetAsync");
        CheckCuda(cudaEventRecord(timing.start, stream), "cudaEventRecord");
        LtCheck(run(candidates[i].algo), "cublasLtMatmul");
        CheckCuda(cudaEventRecord(timing.stop, stream), "cudaEventRecord");
        CheckCuda(cudaEventSynchronize(timing.stop), "cudaEventSynchronize");
        float ms = 0;
        CheckCuda(cudaEventElapsedTime(&ms, timing.start, timing.stop), "cudaEventElapsedTime");
        total += ms;
      }
      if (!any || total < fastest) {
        fastest = total;
        best = candidates[i].algo;
        any = true;
      }
    }
  }
  std::lock_guard<std::mutex> held(lock);
  tuned.emplace(at, best);
  return best;
}

}  // namespace

void SetLinearLtTune(int rows) { ltTune.store(rows); }

bool LinearLtDevice(const LinearArgs& a, int first, int count, void* y, int ldy, bool withBias, void* workspace, size_t workspaceBytes, void* stream) {
  const Lt* lt = FindLt();
  if (lt == nullptr) return false;
  const int type = CudaTypeOf(a.type);
  const size_t element = ElementBytes(a.type);
  const bool relu = a.activation == Activation::kRelu;
  const int epilogue = withBias ? (relu ? kLtEpilogueReluBias : kLtEpilogueBias) : (relu ? kLtEpilogueRelu : kLtEpilogueDefault);
  const void* weight = static_cast<const char*>(a.weight) + static_cast<size_t>(first) * a.in * element;
  const void* bias = withBias ? static_cast<const char*>(a.bias) + static_cast<size_t>(first) * element : nullptr;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) throw std::runtime_error("cudaGetDevice failed");
  // The heuristic reads the pointers' alignment (up to 256 bytes): an algorithm is reused where it is the same.
  const uintptr_t addresses = reinterpret_cast<uintptr_t>(weight) | reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(bias) | 256;
  const LtKey key{device, type, epilogue, a.rows, a.in, count, ldy, static_cast<int>(addresses & (~addresses + 1))};
  // Column-major, as in LinearGemmDevice: D [count x rows] = W^T^T [count x in] . x^T [in x rows].
  // The descriptors are made only when the heuristic is asked or the product runs.
  LtProduct product{*lt};
  auto describe = [&] {
    LtCheck(lt->descCreate(&product.desc, kComputeFloat32, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const int32_t transA = kOpT;
    const int32_t transB = kOpN;
    LtCheck(lt->descSet(product.desc, kLtTransA, &transA, sizeof(transA)), "cublasLtMatmulDescSetAttribute");
    LtCheck(lt->descSet(product.desc, kLtTransB, &transB, sizeof(transB)), "cublasLtMatmulDescSetAttribute");
    LtCheck(lt->descSet(product.desc, kLtEpilogue, &epilogue, sizeof(epilogue)), "cublasLtMatmulDescSetAttribute");
    if (withBias) LtCheck(lt->descSet(product.desc, kLtBiasPointer, &bias, sizeof(bias)), "cublasLtMatmulDescSetAttribute");
    LtCheck(lt->layoutCreate(&product.layouts[0], type, a.in, count, a.in), "cublasLtMatrixLayoutCreate");
    LtCheck(lt->layoutCreate(&product.layouts[1], type, a.in, a.rows, a.in), "cublasLtMatrixLayoutCreate");
    LtCheck(lt->layoutCreate(&product.layouts[2], type, count, a.rows, ldy), "cublasLtMatrixLayoutCreate");
  };
  void* handle = LtHandle(*lt);
  static std::mutex lock;
  static std::map<LtKey, std::optional<LtHeuristic>> chosen;  // none: cuBLASLt has no algorithm for it
  LtHeuristic pick{};
  {
    std::lock_guard<std::mutex> held(lock);
    auto found = chosen.find(key);
    if (found == chosen.end()) {
      describe();
      void* preference = nullptr;
      LtCheck(lt->preferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
      const uint64_t most = workspaceBytes;
      int returned = 0;
      int status = lt->preferenceSet(preference, kLtMaxWorkspace, &most, sizeof(most));
      if (status == 0) status = lt->heuristic(handle, product.desc, product.layouts[0], product.layouts[1], product.layouts[2], product.layouts[2], preference, 1, &pick, &returned);
      lt->preferenceDestroy(preference);
      // A product the heuristic turns down (CUBLAS_STATUS_NOT_SUPPORTED, or no algorithm) goes to cuBLAS.
      if (status != 0 && status != kCublasNotSupported) LtCheck(status, "cublasLtMatmulAlgoGetHeuristic");
      found = chosen.emplace(key, status == 0 && returned > 0 ? std::optional<LtHeuristic>(pick) : std::nullopt).first;
    }
    if (!found->second.has_value()) return false;
    pick = *found->second;
  }
  if (workspace == nullptr && workspaceBytes > 0) return true;
  if (product.desc == nullptr) describe();
  const float one = 1;
  const float zero = 0;
  const auto run = [&](const LtAlgo& algo) {
    return lt->matmul(handle, product.desc, &one, weight, product.layouts[0], a.x, product.layouts[1], &zero, y, product.layouts[2], y, product.layouts[2], &algo, workspace,
                      workspaceBytes, static_cast<cudaStream_t>(stream));
  };
  if (LtTunes(a.rows)) pick.algo = TunedLtAlgo(*lt, handle, product.desc, product.layouts, key, pick.algo, workspaceBytes, static_cast<cudaStream_t>(stream), run);
  LtCheck(run(pick.algo), "cublasLtMatmul");
  return true;
}

void SetLinearDependentLaunch(bool on) { dependentLaunch.store(on); }
std::atomic<bool>& LinearDependentLaunchFlag() { return dependentLaunch; }
bool LinearDependentLaunch() { return dependentLaunch.load(); }

bool LinearRowsFusesNorm(const LinearArgs& a) {
  const size_t element = ElementBytes(a.type);
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.rows <= kLinearNormRows && a.in * element % 16 == 0 && aligned(a.x) && aligned(a.weight) && aligned(a.norm) && aligned(a.residual) && aligned(a.sum) &&
         aligned(a.postNorm);
}

void LinearRowsDevice(const LinearArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (a.norm != nullptr) {
    if (!LinearRowsFusesNorm(a)) throw std::invalid_argument("a pre-normed Linear kernel takes rows of a multiple of 16 bytes, 16-byte aligned");
    switch (a.type) {
      case FloatType::kFloat16: LaunchRows<__half, true>(a, s); break;
      case FloatType::kBFloat16: LaunchRows<__nv_bfloat16, true>(a, s); break;
      default: LaunchRows<float, true>(a, s); break;
    }
    return;
  }
  switch (a.type) {
    case FloatType::kFloat16: LaunchRows<__half, false>(a, s); break;
    case FloatType::kBFloat16: LaunchRows<__nv_bfloat16, false>(a, s); break;
    default: LaunchRows<float, false>(a, s); break;
  }
}

namespace {

// The RMSNorm's inverse root of a row from each thread's sum of squares of its share: summed across the
// block (every thread takes part), then 1 / sqrt(mean + epsilon). The block may call it again after.
__device__ inline float InverseRoot(float squares, int in, float epsilon) {
  __shared__ float warps[32];
  for (int offset = 16; offset > 0; offset /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x / 32] = squares;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); w++) total += warps[w];
  __syncthreads();
  return rsqrtf(total / in + epsilon);
}
__device__ inline float InverseRoot(float squares, const LinearArgs& a) { return InverseRoot(squares, a.in, a.epsilon); }

// The post-norm's inverse root of a block's row x (1 where there is no post-norm).
template <typename T>
__device__ inline float PostInverse(const LinearArgs& a, const T* x) {
  if (a.postNorm == nullptr) return 1.0f;
  float squares = 0;
  for (int k = threadIdx.x; k < a.in; k += blockDim.x) {
    const float v = Load(x + k);
    squares += v * v;
  }
  return InverseRoot(squares, a.in, a.postEpsilon);
}

// PreNormDevice: a block per row; the row's sum kept in y's place first (normed), then normed in place.
template <typename T>
__global__ void PreNormKernel(LinearArgs a, T* normed) {
  const size_t row = blockIdx.x;
  const T* x = static_cast<const T*>(a.x) + row * a.in;
  const T* skip = a.residual == nullptr ? nullptr : static_cast<const T*>(a.residual) + row * a.in;
  T* out = normed + row * a.in;
  T* sum = a.sum == nullptr ? nullptr : static_cast<T*>(a.sum) + row * a.in;
  const float postInverse = PostInverse<T>(a, x);
  const T* post = static_cast<const T*>(a.postNorm);
  float squares = 0;
  for (int k = threadIdx.x; k < a.in; k += blockDim.x) {
    const float own = post == nullptr ? Load(x + k) : Rounded<T>(Load(x + k) * postInverse * Load(post + k));
    const float v = skip == nullptr ? own : Rounded<T>(own + Load(skip + k));
    squares += v * v;
    out[k] = Narrowed<T>(v);
    if (sum != nullptr) sum[k] = Narrowed<T>(v);
  }
  const float inverse = InverseRoot(squares, a);
  const T* scale = static_cast<const T*>(a.norm);
  for (int k = threadIdx.x; k < a.in; k += blockDim.x) out[k] = Narrowed<T>(Load(scale + k) * Rounded<T>(Load(out + k) * inverse));
}

// PreNormKernel 16 bytes at a time, a row's vectors held in registers (up to kPreNormVectors a thread).
constexpr int kPreNormVectors = 4;

template <typename T>
__global__ void PreNormVectorKernel(LinearArgs a, T* normed) {
  constexpr int kPer = 16 / sizeof(T);
  const int n = a.in / kPer;
  const size_t row = blockIdx.x;
  const uint4* x = static_cast<const uint4*>(a.x) + row * n;
  const uint4* skip = a.residual == nullptr ? nullptr : static_cast<const uint4*>(a.residual) + row * n;
  float v[kPreNormVectors][kPer];
  // The post-norm's inverse root first (1 without one).
  float postInverse = 1;
  if (a.postNorm != nullptr) {
    float squares = 0;
#pragma unroll
    for (int u = 0; u < kPreNormVectors; u++) {
      const int c = threadIdx.x + u * blockDim.x;
      if (c >= n) continue;
      const Wide<T> own = Widen16<T>(x[c]);
#pragma unroll
      for (int i = 0; i < kPer; i++) squares += own.v[i] * own.v[i];
    }
    postInverse = InverseRoot(squares, a.in, a.postEpsilon);
  }
  float squares = 0;
#pragma unroll
  for (int u = 0; u < kPreNormVectors; u++) {
    const int c = threadIdx.x + u * blockDim.x;
    if (c >= n) continue;
    Wide<T> own = Widen16<T>(x[c]);
    if (a.postNorm != nullptr) {
      const Wide<T> post = Widen16<T>(static_cast<const uint4*>(a.postNorm)[c]);
#pragma unroll
      for (int i = 0; i < kPer; i++) own.v[i] = Rounded<T>(own.v[i] * postInverse * post.v[i]);
    }
    Wide<T> other;
    if (skip != nullptr) other = Widen16<T>(skip[c]);
    uint4 bits;
    T* e = reinterpret_cast<T*>(&bits);
#pragma unroll
    for (int i = 0; i < kPer; i++) {
      e[i] = Narrowed<T>(skip == nullptr ? own.v[i] : own.v[i] + other.v[i]);
      v[u][i] = Load(e + i);
      squares += v[u][i] * v[u][i];
    }
    if (a.sum != nullptr) static_cast<uint4*>(a.sum)[row * n + c] = bits;
  }
  const float inverse = InverseRoot(squares, a);
  const uint4* scale = static_cast<const uint4*>(a.norm);
#pragma unroll
  for (int u = 0; u < kPreNormVectors; u++) {
    const int c = threadIdx.x + u * blockDim.x;
    if (c >= n) continue;
    const Wide<T> g = Widen16<T>(scale[c]);
    uint4 bits;
    T* e = reinterpret_cast<T*>(&bits);
#pragma unroll
    for (int i = 0; i < kPer; i++) e[i] = Narrowed<T>(g.v[i] * Rounded<T>(v[u][i] * inverse));
    reinterpret_cast<uint4*>(normed)[row * n + c] = bits;
  }
}

}  // namespace

void PreNormDevice(const LinearArgs& a, void* normed, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const size_t element = ElementBytes(a.type);
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int vectors = static_cast<int>(a.in * element / 16);
  if (a.in * element % 16 == 0 && aligned(a.x) && aligned(a.residual) && aligned(a.norm) && aligned(a.sum) && aligned(a.postNorm) && aligned(normed) &&
      vectors <= 256 * kPreNormVectors) {
    // A vector a thread up to 256 threads (whole warps), then up to kPreNormVectors each.
    const int blockThreads = std::min(256, (vectors + 31) / 32 * 32);
    switch (a.type) {
      case FloatType::kFloat16: PreNormVectorKernel<__half><<<a.rows, blockThreads, 0, s>>>(a, static_cast<__half*>(normed)); break;
      case FloatType::kBFloat16: PreNormVectorKernel<__nv_bfloat16><<<a.rows, blockThreads, 0, s>>>(a, static_cast<__nv_bfloat16*>(normed)); break;
      default: PreNormVectorKernel<float><<<a.rows, blockThreads, 0, s>>>(a, static_cast<float*>(normed)); break;
    }
    return;
  }
  switch (a.type) {
    case FloatType::kFloat16: PreNormKernel<__half><<<a.rows, 256, 0, s>>>(a, static_cast<__half*>(normed)); break;
    case FloatType::kBFloat16: PreNormKernel<__nv_bfloat16><<<a.rows, 256, 0, s>>>(a, static_cast<__nv_bfloat16*>(normed)); break;
    default: PreNormKernel<float><<<a.rows, 256, 0, s>>>(a, static_cast<float*>(normed)); break;
  }
}

void GatherRowsDevice(const void* from, void* rows, size_t rowBytes, int count, int64_t positions, const int32_t* index, void* stream) {
  if (count <= 0 || rowBytes == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  // 16 bytes a thread where the rows allow it, else 4 or 2.
  const auto aligned = [&](size_t unit) { return rowBytes % unit == 0 && reinterpret_cast<uintptr_t>(from) % unit == 0 && reinterpret_cast<uintptr_t>(rows) % unit == 0; };
  const auto launch = [&](auto unit) {
    using U = decltype(unit);
    const size_t units = rowBytes / sizeof(U);
    const int threads = static_cast<int>(std::min<size_t>(256, (units + 31) / 32 * 32));
    GatherRowsKernel<U><<<count, threads, 0, s>>>(static_cast<const U*>(from), static_cast<U*>(rows), units, positions, index);
  };
  if (aligned(16)) {
    launch(uint4{});
  } else if (aligned(4)) {
    launch(uint32_t{});
  } else {
    launch(uint16_t{});
  }
}

void BiasActivateDevice(const LinearArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const size_t element = ElementBytes(a.type);
  const bool vectors = a.out * element % 16 == 0 && reinterpret_cast<uintptr_t>(a.y) % 16 == 0;
  const size_t total = static_cast<size_t>(a.rows) * a.out / (vectors ? 16 / element : 1);
  const int blocks = static_cast<int>(std::min<size_t>((total + 255) / 256, 8192));
  switch (a.type) {
    case FloatType::kFloat16: BiasActivate<__half>(a, vectors, blocks, s); break;
    case FloatType::kBFloat16: BiasActivate<__nv_bfloat16>(a, vectors, blocks, s); break;
    default: BiasActivate<float>(a, vectors, blocks, s); break;
  }
}

void GatedDevice(const LinearArgs& a, const void* products, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  // 16 bytes a thread where the rows are whole vectors, as BiasActivateDevice takes them
  // (CHORUS_GATED_VECTORS=0, read at each launch to compare: an element a thread).
  const char* setting = std::getenv("CHORUS_GATED_VECTORS");
  const size_t element = ElementBytes(a.type);
  const bool vectors = (setting == nullptr || std::strcmp(setting, "0") != 0) && a.out * element % 16 == 0 && reinterpret_cast<uintptr_t>(products) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(a.y) % 16 == 0;
  const size_t total = static_cast<size_t>(a.rows) * a.out / (vectors ? 16 / element : 1);
  const int blocks = static_cast<int>(std::min<size_t>((total + 255) / 256, 8192));
  switch (a.type) {
    case FloatType::kFloat16: Gated<__half>(a, products, vectors, blocks, s); break;
    case FloatType::kBFloat16: Gated<__nv_bfloat16>(a, products, vectors, blocks, s); break;
    default: Gated<float>(a, products, vectors, blocks, s); break;
  }
}

void LinearGemmDevice(const LinearArgs& a, void* handle, int first, int count, void* y, int ldy) {
  // Column-major, as cuBLAS sees it: y^T [out x rows] = weight^T^T [out x in] . x^T [in x rows], where
  // the row-major weight [out, in] is the column-major [in x out] matrix (taken transposed) and the
  // row-major x [rows, in] is the column-major [in x rows] one. Outputs first..first + count - 1 only:
  // weight rows from `first`, written from y on with rows ldy elements apart.
  const float one = 1;
  const float zero = 0;
  const int type = CudaTypeOf(a.type);
  const size_t element = ElementBytes(a.type);
  const void* weight = static_cast<const char*>(a.weight) + static_cast<size_t>(first) * a.in * element;
  const int status = FindGemmEx()(handle, kOpT, kOpN, count, a.rows, a.in, &one, weight, type, a.in, a.x, type, a.in, &zero, y, type, ldy, kComputeFloat32, kGemmDefault);
  if (status != 0) throw std::runtime_error("cublasGemmEx failed with status " + std::to_string(status));
}

}  // namespace chorus
