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

constexpr int kM = 64;    // rows of x a block takes (a decode step's, at most)
constexpr int kBN = 128;  // weight rows a block takes
constexpr int kBK = 64;   // values of K a stage
constexpr int kStages = 4;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kAHalves = kM * kBK;
constexpr int kBHalves = kBN * kBK;
constexpr int kStageHalves = kAHalves + kBHalves;
constexpr size_t kSharedBytes = static_cast<size_t>(kStages) * kStageHalves * sizeof(__half);
constexpr int kMaxTiles = 4096;  // counters in the workspace (block columns)

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

// K tile `kt` of x (rows past `rows` zeros) and of weight rows n0 .. n0 + 127 into `stage`.
__device__ inline void LoadStage(__half* stage, const __half* x, const __half* w, int rows, int K, int n0, int kt) {
  const int k0 = kt * kBK;
  __half* a = stage;
  __half* b = stage + kAHalves;
  for (int c = threadIdx.x; c < kM * 8; c += kThreads) {
    const int row = c >> 3;
    const int chunk = c & 7;
    const bool inside = row < rows;
    CopyAsync16(a + Swizzled(row, chunk), x + static_cast<size_t>(inside ? row : 0) * K + k0 + chunk * 8, inside);
  }
  for (int c = threadIdx.x; c < kBN * 8; c += kThreads) {
    const int row = c >> 3;
    const int chunk = c & 7;
    CopyAsync16(b + Swizzled(row, chunk), w + static_cast<size_t>(n0 + row) * K + k0 + chunk * 8, true);
  }
}

// Block (column of 128 weight rows, part of K). `workspace`: [splits][kM][N] float sums, then kMaxTiles
// counters (zeros, left at zero).
__global__ void __launch_bounds__(kThreads) SkinnyKernel(const __half* x, const __half* w, __half* y, int rows, int K, int N, int splits, float* workspace) {
  extern __shared__ float4 sharedWords[];
  __half* stages = reinterpret_cast<__half*>(sharedWords);
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
  for (int s = 0; s < kStages - 1; s++) {
    if (s < count) LoadStage(stages + s * kStageHalves, x, w, rows, K, n0, firstK + s);
    Commit();
  }
  for (int i = 0; i < count; i++) {
    WaitGroups<kStages - 2>();
    __syncthreads();  // stage i is in; every warp is done with the stage the next copy overwrites
    const int ahead = i + kStages - 1;
    if (ahead < count) LoadStage(stages + (ahead % kStages) * kStageHalves, x, w, rows, K, n0, firstK + ahead);
    Commit();
    const __half* a = stages + (i % kStages) * kStageHalves;
    const __half* b = a + kAHalves;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; kk++) {
      uint32_t af[4][4];
#pragma unroll
      for (int m = 0; m < 4; m++) LoadMatrices(af[m], a + Swizzled(16 * m + (lane & 15), 2 * kk + (lane >> 4)));
      uint32_t bf[4][2];
#pragma unroll
      for (int jj = 0; jj < 2; jj++) {
        uint32_t r[4];
        LoadMatrices(r, b + Swizzled(32 * warp + 16 * jj + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
        bf[2 * jj][0] = r[0];
        bf[2 * jj][1] = r[1];
        bf[2 * jj + 1][0] = r[2];
        bf[2 * jj + 1][1] = r[3];
      }
#pragma unroll
      for (int m = 0; m < 4; m++)
#pragma unroll
        for (int j = 0; j < 4; j++) Mma(acc[m][j], af[m], bf[j][0], bf[j][1]);
    }
  }
  WaitGroups<0>();

  if (splits == 1) {
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int row = 16 * m + g;
        const int col = n0 + 32 * warp + 8 * j + 2 * t;
        if (row < rows) *reinterpret_cast<__half2*>(y + static_cast<size_t>(row) * N + col) = __floats2half2_rn(acc[m][j][0], acc[m][j][1]);
        if (row + 8 < rows) *reinterpret_cast<__half2*>(y + static_cast<size_t>(row + 8) * N + col) = __floats2half2_rn(acc[m][j][2], acc[m][j][3]);
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
    *reinterpret_cast<__half2*>(y + static_cast<size_t>(row) * N + col) = __floats2half2_rn(sum.x, sum.y);
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

void Launch(const __half* x, const __half* w, __half* y, int rows, int K, int N, int splits, float* workspace, cudaStream_t stream) {
  SkinnyKernel<<<dim3(N / kBN, splits), kThreads, kSharedBytes, stream>>>(x, w, y, rows, K, N, splits, workspace);
}

constexpr size_t kRotationBytes = 256u << 20;  // weights read per graph: five times the H100's L2
constexpr int kLaunches = 32;
constexpr int kRepeats = 5;
constexpr double kPeakBytesPerSecond = 3.35e12;

template <class Run>
double TimeLaunches(cudaStream_t stream, int copies, Run run) {
  cudaGraph_t graph;
  Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < kLaunches; i++) run(i % copies);
  Check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  Check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  double best = 1e30;
  for (int r = 0; r < kRepeats; r++) {
    Check(cudaEventRecord(start, stream), "cudaEventRecord");
    Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    Check(cudaEventRecord(stop, stream), "cudaEventRecord");
    Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    best = std::min(best, 1000.0 * ms / kLaunches);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return best;
}

// The largest |a - b| over the largest |b|.
double Difference(const __half* a, const __half* b, size_t n) {
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
  Check(cudaFuncSetAttribute(SkinnyKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes)), "cudaFuncSetAttribute");
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
  std::printf("%s, %d SMs; float16, us a launch (%% of 3.35 TB/s), weights rotated over %zu MiB\n", props.name, props.multiProcessorCount, kRotationBytes >> 20);
  std::printf("%-15s %-8s %6s %6s %4s %6s | %-16s | %-16s | %9s\n", "model", "product", "N", "K", "rows", "splits", "cuBLASLt tuned", "skinny", "diff");
  bool first = true;
  for (const Shape& s : shapes) {
    const size_t weightBytes = static_cast<size_t>(s.N) * s.K * sizeof(__half);
    const int copies = static_cast<int>(std::max<size_t>(2, (kRotationBytes + weightBytes - 1) / weightBytes));
    std::vector<__half*> weights(copies);
    for (int c = 0; c < copies; c++) {
      Check(cudaMalloc(&weights[c], weightBytes), "cudaMalloc");
      bench::FillKernel<__half><<<1024, 256, 0, stream>>>(weights[c], weightBytes / sizeof(__half), 17u + c, 2.0f / std::sqrt(static_cast<float>(s.K)));
    }
    for (int rows : rowCounts) {
      std::vector<void*> owned;
      __half* x = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.K * sizeof(__half), owned));
      __half* yLt = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.N * sizeof(__half), owned));
      __half* y = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.N * sizeof(__half), owned));
      const int splits = SplitsFor(s.N, s.K, props.multiProcessorCount);
      float* workspace = static_cast<float*>(bench::Zeros((static_cast<size_t>(splits) * kM * s.N + kMaxTiles) * sizeof(float), owned));
      bench::FillKernel<__half><<<256, 256, 0, stream>>>(x, static_cast<size_t>(rows) * s.K, 99u, 2.0f);
      Check(cudaStreamSynchronize(stream), "the fills");
      chorus::SetLinearLtTune(1 << 30);
      auto lt = [&](int c) {
        chorus::LinearArgs a{};
        a.x = x;
        a.weight = weights[c];
        a.y = yLt;
        a.rows = rows;
        a.in = s.K;
        a.out = s.N;
        a.activation = chorus::Activation::kNone;
        a.type = chorus::FloatType::kFloat16;
        chorus::LinearLtDevice(a, 0, s.N, yLt, s.N, false, ltWorkspace, ltBytes, stream);
      };
      lt(0);  // outside a capture: the candidates timed
      Launch(x, weights[0], y, rows, s.K, s.N, splits, workspace, stream);
      Check(cudaStreamSynchronize(stream), "the first products");
      const double diff = Difference(y, yLt, static_cast<size_t>(rows) * s.N);
      const double ltUs = TimeLaunches(stream, copies, lt);
      const double us = TimeLaunches(stream, copies, [&](int c) { Launch(x, weights[c], y, rows, s.K, s.N, splits, workspace, stream); });
      const double bytes = static_cast<double>(weightBytes) + static_cast<double>(rows) * (s.K + s.N) * sizeof(__half);
      const auto share = [&](double t) { return bytes / (t * 1e-6) / kPeakBytesPerSecond; };
      std::printf("%-15s %-8s %6d %6d %4d %6d | %7.2f (%3.0f%%)   | %7.2f (%3.0f%%)   | %9.2e\n", s.model, s.product, s.N, s.K, rows, splits, ltUs, 100 * share(ltUs), us, 100 * share(us), diff);
      std::fflush(stdout);
      std::fprintf(json, "%s  {\"model\": \"%s\", \"product\": \"%s\", \"N\": %d, \"K\": %d, \"rows\": %d, \"splits\": %d, \"lt_tuned_us\": %.3f, \"skinny_us\": %.3f, \"relative_difference\": %.3e}",
                   first ? "" : ",\n", s.model, s.product, s.N, s.K, rows, splits, ltUs, us, diff);
      first = false;
      for (void* p : owned) cudaFree(p);
    }
    for (__half* w : weights) cudaFree(w);
  }
  std::fprintf(json, "\n ]\n}\n");
  std::fclose(json);
  return 0;
}
