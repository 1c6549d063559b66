// A research prototype, not part of the addon: a float16 product of a decode step's few rows (up to 64)
// against a weight matrix, written to stream the weights at the memory's rate, timed against the
// addon's tuned cuBLASLt product (src/native/linear.cu, as CHORUS_LT_TUNE picks it).
//
// Why: at 64 rows Llama-2-7B's projections run in cuBLASLt at 2.2-2.8 TB/s (5.0 ms of an 8.4 ms decode
// step, docs/lab/2026-11-27-prefill-passes.md), and QuantLinear's tiles at 64 rows are bound by
// latency (docs/lab/2026-11-27-quant-tile-stages.md). If a plain kernel of this shape reaches ~3 TB/s
// with float16 weights, the same pipeline with the weights dequantized between shared memory and the
// tensor cores is the many-row QuantLinear to try next.
//
// The kernel: y [rows][N] = x [rows][K] . W^T, W [N][K] (the addon's weight layout), float32 sums.
// A block takes 128 weight rows and all 64 rows of x over a run of K (split-K where N alone makes too
// few blocks); 4 warps of 32 weight rows x 64 rows each, mma.m16n8k16 from ldmatrix fragments; x's
// and W's tiles of 64 values of K copied by cp.async through a ring of 4 stages (96 KiB, 2 blocks a
// multiprocessor), rows XOR-swizzled by 16-byte chunk so that ldmatrix reads no bank twice. Split-K
// parts write float32 sums to a workspace; the last part of each block column to finish (a counter)
// adds them and writes y.
//
// The same kernel with int8 weights (Int8: symmetric, a float16 scale a weight row, as QuantLinear's
// int8 has them): 8 KiB of weights a stage in 6 stages, each row's 64 values laid out so that a lane
// reads its fragments' 16 bytes at once (PermutedK), widened to float16 pairs by two byte permutes and
// a subtraction, the scales applied to the sums. Timed beside, against cuBLASLt on the float16 they
// stand for.
//
// Build here (nvcc): bash lab/skinny-gemm/build.sh; run on the GPU host with cuBLAS 13 on the library
// path: ./build/skinny-gemm [out.json]. SKINNY_SPLITS=n forces n parts of K for every shape.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../bench/gpu/cuda-bench.cuh"
#include "../../src/native/linear.h"

namespace {

using bench::Check;
using bench::Difference;
using bench::TimeLaunches;

constexpr int kM = 64;    // rows of x a block takes (a decode step's, at most)
constexpr int kBN = 128;  // weight rows a block takes
constexpr int kBK = 64;   // values of K a stage
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kABytes = kM * kBK * 2;
// Int8: the weights as int8 with a float16 scale per weight row (symmetric), each row's 64 values of a
// stage laid out for the fragments (PermutedK): 8 KiB a stage where float16 takes 16, so 6 stages.
template <bool Int8>
constexpr int kStages = Int8 ? 6 : 4;
template <bool Int8>
constexpr int kBBytes = kBN * kBK * (Int8 ? 1 : 2);
template <bool Int8>
constexpr int kStageBytes = kABytes + kBBytes<Int8>;
template <bool Int8>
constexpr size_t kSharedBytes = static_cast<size_t>(kStages<Int8>) * kStageBytes<Int8>;
constexpr int kMaxTiles = 4096;  // counters in the workspace (block columns)
constexpr size_t kRotationBytes = 256u << 20;  // weights read per graph: five times the H100's L2
constexpr double kPeakBytesPerSecond = 3.35e12;

// Where value k of a row's 64-value block goes in the int8 layout: lane t of a fragment's 4 reads 16
// bytes at 16 t, a word for each 16 values kk, whose bytes are values 2t, 2t + 1, 2t + 8 and 2t + 9
// of them (the B fragment's two pairs).
__host__ __device__ inline int PermutedK(int k) {
  const int kk = k / 16;
  const int r = k % 16;
  return 16 * ((r & 7) >> 1) + 4 * kk + (r & 1) + (r >= 8 ? 2 : 0);
}

// Four int8 values (a word) as two float16 pairs: x + 128 as the low byte of 1024's mantissa, less 1152.
__device__ inline void WidenInt8(uint32_t word, uint32_t& first, uint32_t& second) {
  const uint32_t u = word ^ 0x80808080u;
  const uint32_t bias = 0x64806480u;  // 1152, 1152
  uint32_t lo = __byte_perm(u, 0x64646464u, 0x5140);
  uint32_t hi = __byte_perm(u, 0x64646464u, 0x7362);
  const __half2 l = __hsub2(*reinterpret_cast<__half2*>(&lo), *reinterpret_cast<const __half2*>(&bias));
  const __half2 h = __hsub2(*reinterpret_cast<__half2*>(&hi), *reinterpret_cast<const __half2*>(&bias));
  first = *reinterpret_cast<const uint32_t*>(&l);
  second = *reinterpret_cast<const uint32_t*>(&h);
}

// The offset in halves of chunk `chunk` (8 halves) of row `row` of a [rows][kBK] tile, swizzled.
__device__ inline int Swizzled(int row, int chunk) { return row * kBK + ((chunk ^ (row & 7)) << 3); }

__device__ inline void CopyAsync16(void* shared, const void* global, bool full) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(global), "r"(full ? 16 : 0));
}
__device__ inline void Commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void WaitGroups() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ inline void LoadMatrices(uint32_t (&r)[4], const __half* at) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(at));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ inline void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// K tile `kt` of x (rows past `rows` zeros) and of weight rows n0 .. n0 + 127 into `stage` (float16
// weights swizzled as x; int8 rows of 64 bytes as they are).
template <bool Int8>
__device__ inline void LoadStage(unsigned char* stage, const __half* x, const void* w, int rows, int K, int n0, int kt) {
  const int k0 = kt * kBK;
  __half* a = reinterpret_cast<__half*>(stage);
  for (int c = threadIdx.x; c < kM * 8; c += kThreads) {
    const int row = c >> 3;
    const int chunk = c & 7;
    const bool inside = row < rows;
    CopyAsync16(a + Swizzled(row, chunk), x + static_cast<size_t>(inside ? row : 0) * K + k0 + chunk * 8, inside);
  }
  if constexpr (Int8) {
    unsigned char* b = stage + kABytes;
    const unsigned char* q = static_cast<const unsigned char*>(w);
    for (int c = threadIdx.x; c < kBN * 4; c += kThreads) {
      const int row = c >> 2;
      const int chunk = c & 3;
      CopyAsync16(b + row * kBK + chunk * 16, q + static_cast<size_t>(n0 + row) * K + k0 + chunk * 16, true);
    }
  } else {
    __half* b = reinterpret_cast<__half*>(stage + kABytes);
    const __half* h = static_cast<const __half*>(w);
    for (int c = threadIdx.x; c < kBN * 8; c += kThreads) {
      const int row = c >> 3;
      const int chunk = c & 7;
      CopyAsync16(b + Swizzled(row, chunk), h + static_cast<size_t>(n0 + row) * K + k0 + chunk * 8, true);
    }
  }
}

// Block (column of 128 weight rows, part of K). `workspace`: [splits][kM][N] float sums, then kMaxTiles
// counters (zeros, left at zero). `scales`: int8's, one a weight row.
template <bool Int8>
__global__ void __launch_bounds__(kThreads) SkinnyKernel(const __half* x, const void* w, const __half* scales, __half* y, int rows, int K, int N, int splits, float* workspace) {
  constexpr int S = kStages<Int8>;
  extern __shared__ float4 sharedWords[];
  unsigned char* stages = reinterpret_cast<unsigned char*>(sharedWords);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int n0 = blockIdx.x * kBN;
  const int tilesK = K / kBK;
  const int split = blockIdx.y;
  const int firstK = static_cast<int>(static_cast<long>(tilesK) * split / splits);
  const int endK = static_cast<int>(static_cast<long>(tilesK) * (split + 1) / splits);
  const int count = endK - firstK;

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < S - 1; s++) {
    if (s < count) LoadStage<Int8>(stages + s * kStageBytes<Int8>, x, w, rows, K, n0, firstK + s);
    Commit();
  }
  for (int i = 0; i < count; i++) {
    WaitGroups<S - 2>();
    __syncthreads();  // stage i is in; every warp is done with the stage the next copy overwrites
    const int ahead = i + S - 1;
    if (ahead < count) LoadStage<Int8>(stages + (ahead % S) * kStageBytes<Int8>, x, w, rows, K, n0, firstK + ahead);
    Commit();
    const unsigned char* stage = stages + (i % S) * kStageBytes<Int8>;
    const __half* a = reinterpret_cast<const __half*>(stage);
    // int8: the lane's 16 bytes of each of its 4 fragments' rows (a word for each 16 values of K).
    uint4 words[4];
    if constexpr (Int8) {
#pragma unroll
      for (int j = 0; j < 4; j++) words[j] = *reinterpret_cast<const uint4*>(stage + kABytes + (32 * warp + 8 * j + g) * kBK + 16 * t);
    }
#pragma unroll
    for (int kk = 0; kk < kBK / 16; kk++) {
      uint32_t af[4][4];
#pragma unroll
      for (int m = 0; m < 4; m++) LoadMatrices(af[m], a + Swizzled(16 * m + (lane & 15), 2 * kk + (lane >> 4)));
      uint32_t bf[4][2];
      if constexpr (Int8) {
#pragma unroll
        for (int j = 0; j < 4; j++) WidenInt8(kk == 0 ? words[j].x : kk == 1 ? words[j].y : kk == 2 ? words[j].z : words[j].w, bf[j][0], bf[j][1]);
      } else {
        const __half* b = reinterpret_cast<const __half*>(stage + kABytes);
#pragma unroll
        for (int jj = 0; jj < 2; jj++) {
          uint32_t r[4];
          LoadMatrices(r, b + Swizzled(32 * warp + 16 * jj + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
          bf[2 * jj][0] = r[0];
          bf[2 * jj][1] = r[1];
          bf[2 * jj + 1][0] = r[2];
          bf[2 * jj + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int m = 0; m < 4; m++)
#pragma unroll
        for (int j = 0; j < 4; j++) Mma(acc[m][j], af[m], bf[j][0], bf[j][1]);
    }
  }
  WaitGroups<0>();

  // Outputs col and col + 1 of a row from their sums (int8: times their rows' scales).
  const auto out = [&](int row, int col, float first, float second) {
    if constexpr (Int8) {
      first *= __half2float(scales[col]);
      second *= __half2float(scales[col + 1]);
    }
    *reinterpret_cast<__half2*>(y + static_cast<size_t>(row) * N + col) = __floats2half2_rn(first, second);
  };
  if (splits == 1) {
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int row = 16 * m + g;
        const int col = n0 + 32 * warp + 8 * j + 2 * t;
        if (row < rows) out(row, col, acc[m][j][0], acc[m][j][1]);
        if (row + 8 < rows) out(row + 8, col, acc[m][j][2], acc[m][j][3]);
      }
    return;
  }
  float* mine = workspace + static_cast<size_t>(split) * kM * N;
#pragma unroll
  for (int m = 0; m < 4; m++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int row = 16 * m + g;
      const int col = n0 + 32 * warp + 8 * j + 2 * t;
      if (row < rows) *reinterpret_cast<float2*>(mine + static_cast<size_t>(row) * N + col) = make_float2(acc[m][j][0], acc[m][j][1]);
      if (row + 8 < rows) *reinterpret_cast<float2*>(mine + static_cast<size_t>(row + 8) * N + col) = make_float2(acc[m][j][2], acc[m][j][3]);
    }
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  int* counter = reinterpret_cast<int*>(workspace + static_cast<size_t>(splits) * kM * N) + blockIdx.x;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int e = threadIdx.x; e < rows * (kBN / 2); e += kThreads) {
    const int row = e / (kBN / 2);
    const int col = n0 + 2 * (e % (kBN / 2));
    float2 sum = make_float2(0.0f, 0.0f);
    for (int s = 0; s < splits; s++) {
      const float2 part = __ldcg(reinterpret_cast<const float2*>(workspace + (static_cast<size_t>(s) * kM + row) * N + col));
      sum.x += part.x;
      sum.y += part.y;
    }
    out(row, col, sum.x, sum.y);
  }
  if (threadIdx.x == 0) *counter = 0;
}

// Parts of K for N's block columns: enough blocks for two a multiprocessor where N alone makes fewer.
int SplitsFor(int N, int K, int multiprocessors) {
  const char* forced = std::getenv("SKINNY_SPLITS");
  const int tiles = N / kBN;
  int splits = forced != nullptr ? std::atoi(forced) : std::max(1, 2 * multiprocessors / tiles);
  return std::max(1, std::min(splits, K / kBK));
}

template <bool Int8>
void Launch(const __half* x, const void* w, const __half* scales, __half* y, int rows, int K, int N, int splits, float* workspace, cudaStream_t stream) {
  SkinnyKernel<Int8><<<dim3(N / kBN, splits), kThreads, kSharedBytes<Int8>, stream>>>(x, w, scales, y, rows, K, N, splits, workspace);
}

// Weight rows [N][K] of float16 as int8 (symmetric, a float16 scale a row, max |w| / 127) in the
// kernel's layout (PermutedK within each 64 values), and the float16 they stand for: a block a row.
__global__ void QuantizeRows(const __half* w, int K, unsigned char* q, __half* scales, __half* dequantized) {
  const size_t row = blockIdx.x;
  __shared__ float most[256];
  float m = 0;
  for (int k = threadIdx.x; k < K; k += blockDim.x) m = fmaxf(m, fabsf(__half2float(w[row * K + k])));
  most[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) most[threadIdx.x] = fmaxf(most[threadIdx.x], most[threadIdx.x + s]);
    __syncthreads();
  }
  const __half scale = __float2half(most[0] > 0 ? most[0] / 127.0f : 1.0f);
  if (threadIdx.x == 0) scales[row] = scale;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const int v = max(-127, min(127, __float2int_rn(__half2float(w[row * K + k]) / __half2float(scale))));
    q[row * K + k / kBK * kBK + PermutedK(k % kBK)] = static_cast<unsigned char>(static_cast<signed char>(v));
    dequantized[row * K + k] = __float2half(static_cast<float>(v) * __half2float(scale));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string jsonPath = argc > 1 ? argv[1] : "skinny-gemm.json";
  struct Shape {
    const char* model;
    const char* product;
    int N, K;
  };
  const Shape shapes[] = {
      {"llama-2-7b", "qkv", 12288, 4096}, {"llama-2-7b", "o", 4096, 4096}, {"llama-2-7b", "gate+up", 22016, 4096}, {"llama-2-7b", "down", 4096, 11008},
      {"tinyllama-1.1b", "gate+up", 11264, 2048}, {"tinyllama-1.1b", "down", 2048, 5632},
  };
  const int rowCounts[] = {16, 32, 64};
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Check(cudaFuncSetAttribute(SkinnyKernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes<false>)), "cudaFuncSetAttribute");
  Check(cudaFuncSetAttribute(SkinnyKernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes<true>)), "cudaFuncSetAttribute");
  cudaDeviceProp props;
  Check(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties");
  const size_t ltBytes = 4u << 20;
  void* ltWorkspace = nullptr;
  Check(cudaMalloc(&ltWorkspace, ltBytes), "cudaMalloc");
  FILE* json = std::fopen(jsonPath.c_str(), "w");
  if (json == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", jsonPath.c_str());
    return 2;
  }
  std::fprintf(json, "{\n \"gpu\": \"%s\",\n \"sms\": %d,\n \"rows\": [\n", props.name, props.multiProcessorCount);
  std::printf("%s, %d SMs; float16 activations, us a launch (%% of 3.35 TB/s for its own weight bytes), weights rotated over >= %zu MiB\n", props.name,
              props.multiProcessorCount, kRotationBytes >> 20);
  std::printf("%-15s %-8s %6s %6s %4s %6s | %-16s | %-16s | %-16s | %9s | %9s\n", "model", "product", "N", "K", "rows", "splits", "cuBLASLt tuned", "skinny fp16", "skinny int8",
              "diff fp16", "diff int8");
  bool first = true;
  for (const Shape& s : shapes) {
    const size_t weightBytes = static_cast<size_t>(s.N) * s.K * sizeof(__half);
    const int copies = static_cast<int>(std::max<size_t>(2, (kRotationBytes + weightBytes - 1) / weightBytes));
    std::vector<__half*> weights(copies);
    // The int8 copies, their scales, and copy 0's dequantized float16 (the reference's weights).
    std::vector<unsigned char*> quantized(copies);
    std::vector<__half*> scales(copies);
    __half* dequantized = nullptr;
    Check(cudaMalloc(&dequantized, weightBytes), "cudaMalloc");
    for (int c = 0; c < copies; c++) {
      Check(cudaMalloc(&weights[c], weightBytes), "cudaMalloc");
      Check(cudaMalloc(&quantized[c], weightBytes / 2), "cudaMalloc");
      Check(cudaMalloc(&scales[c], s.N * sizeof(__half)), "cudaMalloc");
      bench::FillKernel<__half><<<1024, 256, 0, stream>>>(weights[c], weightBytes / sizeof(__half), 17u + c, 2.0f / std::sqrt(static_cast<float>(s.K)));
      QuantizeRows<<<s.N, 256, 0, stream>>>(weights[c], s.K, quantized[c], scales[c], dequantized);
    }
    QuantizeRows<<<s.N, 256, 0, stream>>>(weights[0], s.K, quantized[0], scales[0], dequantized);
    for (int rows : rowCounts) {
      std::vector<void*> owned;
      __half* x = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.K * sizeof(__half), owned));
      __half* yLt = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.N * sizeof(__half), owned));
      __half* y = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.N * sizeof(__half), owned));
      __half* yRef = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.N * sizeof(__half), owned));
      const int splits = SplitsFor(s.N, s.K, props.multiProcessorCount);
      float* workspace = static_cast<float*>(bench::Zeros((static_cast<size_t>(splits) * kM * s.N + kMaxTiles) * sizeof(float), owned));
      bench::FillKernel<__half><<<256, 256, 0, stream>>>(x, static_cast<size_t>(rows) * s.K, 99u, 2.0f);
      Check(cudaStreamSynchronize(stream), "the fills");
      chorus::SetLinearLtTune(1 << 30);
      auto product = [&](const __half* weight, __half* out) {
        chorus::LinearArgs a{};
        a.x = x;
        a.weight = weight;
        a.y = out;
        a.rows = rows;
        a.in = s.K;
        a.out = s.N;
        a.activation = chorus::Activation::kNone;
        a.type = chorus::FloatType::kFloat16;
        chorus::LinearLtDevice(a, 0, s.N, out, s.N, false, ltWorkspace, ltBytes, stream);
      };
      product(weights[0], yLt);  // outside a capture: the candidates timed
      product(dequantized, yRef);
      Launch<false>(x, weights[0], nullptr, y, rows, s.K, s.N, splits, workspace, stream);
      Check(cudaStreamSynchronize(stream), "the first products");
      const double diff = Difference(y, yLt, static_cast<size_t>(rows) * s.N);
      Launch<true>(x, quantized[0], scales[0], y, rows, s.K, s.N, splits, workspace, stream);
      Check(cudaStreamSynchronize(stream), "the first int8 product");
      const double diff8 = Difference(y, yRef, static_cast<size_t>(rows) * s.N);
      const double ltUs = TimeLaunches(stream, copies, [&](int c) { product(weights[c], yLt); });
      const double us = TimeLaunches(stream, copies, [&](int c) { Launch<false>(x, weights[c], nullptr, y, rows, s.K, s.N, splits, workspace, stream); });
      const double us8 = TimeLaunches(stream, copies, [&](int c) { Launch<true>(x, quantized[c], scales[c], y, rows, s.K, s.N, splits, workspace, stream); });
      const double activations = static_cast<double>(rows) * (s.K + s.N) * sizeof(__half);
      const auto share = [&](double t, double weightShare) { return (static_cast<double>(weightBytes) * weightShare + activations) / (t * 1e-6) / kPeakBytesPerSecond; };
      std::printf("%-15s %-8s %6d %6d %4d %6d | %7.2f (%3.0f%%)   | %7.2f (%3.0f%%)   | %7.2f (%3.0f%%)   | %9.2e | %9.2e\n", s.model, s.product, s.N, s.K, rows, splits, ltUs,
                  100 * share(ltUs, 1), us, 100 * share(us, 1), us8, 100 * share(us8, 0.5), diff, diff8);
      std::fflush(stdout);
      std::fprintf(json,
                   "%s  {\"model\": \"%s\", \"product\": \"%s\", \"N\": %d, \"K\": %d, \"rows\": %d, \"splits\": %d, \"lt_tuned_us\": %.3f, \"skinny_us\": %.3f, "
                   "\"skinny_int8_us\": %.3f, \"relative_difference\": %.3e, \"int8_relative_difference\": %.3e}",
                   first ? "" : ",\n", s.model, s.product, s.N, s.K, rows, splits, ltUs, us, us8, diff, diff8);
      first = false;
      for (void* p : owned) cudaFree(p);
    }
    for (__half* w : weights) cudaFree(w);
    for (unsigned char* q : quantized) cudaFree(q);
    for (__half* h : scales) cudaFree(h);
    cudaFree(dequantized);
  }
  std::fprintf(json, "\n ]\n}\n");
  std::fclose(json);
  return 0;
}
