// The addon's Linear at the decode steps' shapes, against cuBLAS (cublasGemmEx, what ONNX Runtime's
// MatMul calls) and the kernel it replaced: TinyLlama-1.1B's and Llama-2-7B's projections in fp16 at
// 1, 8 and 64 rows of x, and the gated MLP's gate and up projections as one gated Linear (SiLU; its
// cuBLAS columns: the GEMM of both, then the gating pass). Each case launches its product back to back inside a CUDA graph, over copies
// of the weights that together exceed L2 (so each launch reads its weights from HBM), and reports the
// time a launch, the bytes it moves (weights, x and y) per second and their share of the H100's
// 3.35 TB/s ("addon, no PDL": the same kernel in plain launches, so consecutive launches do not
// overlap). Each product is checked against cuBLAS (largest difference, in units of the output's
// magnitude). Prints a table and writes JSON.
//   bash bench/gpu/gemv/build.sh, then on the GPU host: bash bench/gpu/gemv/run.sh
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../../src/native/linear.h"
#include "../cuda-bench.cuh"
#include "previous.cuh"

namespace {

constexpr double kPeakBytesPerSecond = 3.35e12;
constexpr size_t kRotationBytes = 256u << 20;  // weights read per graph: five times the H100's L2
using bench::Check;
using bench::Difference;
using bench::TimeLaunches;

// A cuBLAS handle on `stream`, from the libcublas that ONNX Runtime's CUDA provider loads (no headers
// needed: the addon calls cuBLAS the same way).
void* BlasHandle(cudaStream_t stream) {
  void* library = dlopen("libcublas.so.13", RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) library = dlopen("libcublas.so.12", RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) {
    std::fprintf(stderr, "libcublas.so.13 (or .12) does not load: put ONNX Runtime's CUDA libraries on LD_LIBRARY_PATH\n");
    std::exit(2);
  }
  auto create = reinterpret_cast<int (*)(void**)>(dlsym(library, "cublasCreate_v2"));
  auto setStream = reinterpret_cast<int (*)(void*, cudaStream_t)>(dlsym(library, "cublasSetStream_v2"));
  void* handle = nullptr;
  if (create == nullptr || setStream == nullptr || create(&handle) != 0 || setStream(handle, stream) != 0) {
    std::fprintf(stderr, "cublasCreate failed\n");
    std::exit(2);
  }
  return handle;
}

__global__ void Fill(__half* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2half((static_cast<float>(h & 0xffff) / 65535.0f - 0.5f) * scale);
  }
}

struct Shape {
  const char* model;
  const char* product;
  int out, in;
  bool gated = false;  // a gated Linear: 2 * out weight rows, out outputs
};

struct Timing {
  double us = -1;
  double gbs = -1;
};

// A float16 product of `rows` rows of x against `weight` into y, as the addon's Linear takes it (gated:
// SiLU of the gate rows' products times the up rows').
chorus::LinearArgs ProductArgs(const __half* x, const __half* weight, __half* y, int rows, int in, int out, bool gated) {
  chorus::LinearArgs a{};
  a.x = x;
  a.weight = weight;
  a.y = y;
  a.rows = rows;
  a.in = in;
  a.out = out;
  a.activation = gated ? chorus::Activation::kSilu : chorus::Activation::kNone;
  a.type = chorus::FloatType::kFloat16;
  a.gated = gated;
  return a;
}

// `count` halves of zeroed device memory, kept in `owned` (bench::Zeros) to be freed together.
__half* Halves(size_t count, std::vector<void*>& owned) { return static_cast<__half*>(bench::Zeros(count * sizeof(__half), owned)); }

// Weights of `bytes` filled on the device, copied until the copies together exceed kRotationBytes.
std::vector<__half*> WeightCopies(size_t bytes, int in, cudaStream_t stream) {
  const int copies = static_cast<int>(std::max<size_t>(2, (kRotationBytes + bytes - 1) / bytes));
  std::vector<__half*> weights(copies);
  for (int c = 0; c < copies; c++) {
    Check(cudaMalloc(&weights[c], bytes), "cudaMalloc");
    Fill<<<1024, 256, 0, stream>>>(weights[c], bytes / sizeof(__half), 17u + c, 2.0f / std::sqrt(static_cast<float>(in)));
  }
  return weights;
}

// cuBLASLt at the decode steps of many rows: the heuristic's first pick against the fastest of its
// candidates timed on the product (chorus::SetLinearLtTune, what CHORUS_LT_TUNE sets in the engine).
void RunTuning(cudaStream_t stream, void* workspace, size_t workspaceBytes, FILE* json, bool& firstRow) {
  struct TuneShape {
    const char* model;
    const char* product;
    int out, in;
  };
  const TuneShape shapes[] = {
      {"llama-2-7b", "qkv", 12288, 4096},  {"llama-2-7b", "o", 4096, 4096},        {"llama-2-7b", "gate+up", 22016, 4096}, {"llama-2-7b", "down", 4096, 11008},
      {"llama-2-7b", "lm_head", 32000, 4096}, {"tinyllama-1.1b", "qkv", 2560, 2048}, {"tinyllama-1.1b", "o", 2048, 2048},   {"tinyllama-1.1b", "gate+up", 11264, 2048},
      {"tinyllama-1.1b", "down", 2048, 5632},
  };
  const int rowCounts[] = {16, 32, 64, 128};
  std::printf("\ncuBLASLt, float16: the heuristic's pick against the fastest of its candidates, us a launch (%% of 3.35 TB/s)\n%-15s %-9s %6s %6s %4s | %-16s | %-16s | %9s\n", "model",
              "product", "out", "in", "rows", "heuristic", "tuned", "diff");
  for (const TuneShape& shape : shapes) {
    const size_t weightBytes = static_cast<size_t>(shape.out) * shape.in * sizeof(__half);
    std::vector<__half*> weights = WeightCopies(weightBytes, shape.in, stream);
    const int copies = static_cast<int>(weights.size());
    for (int rows : rowCounts) {
      std::vector<void*> owned;
      __half* x = Halves(static_cast<size_t>(rows) * shape.in, owned);
      __half* y = Halves(static_cast<size_t>(rows) * shape.out, owned);
      __half* first = Halves(static_cast<size_t>(rows) * shape.out, owned);
      Check(cudaDeviceSynchronize(), "zeroing");  // the zeros in place before the fill on `stream`
      Fill<<<256, 256, 0, stream>>>(x, static_cast<size_t>(rows) * shape.in, 99u, 2.0f);
      auto product = [&](int copy) {
        const chorus::LinearArgs a = ProductArgs(x, weights[copy], y, rows, shape.in, shape.out, false);
        return chorus::LinearLtDevice(a, 0, shape.out, y, shape.out, false, workspace, workspaceBytes, stream);
      };
      const double bytes = static_cast<double>(weightBytes) + static_cast<double>(rows) * (shape.in + shape.out) * sizeof(__half);
      double us[2] = {-1, -1};
      double diff = -1;
      for (int tuned = 0; tuned < 2; tuned++) {
        chorus::SetLinearLtTune(tuned == 0 ? 0 : 1 << 30);
        if (!product(0)) break;  // the first run outside a capture: where tuned, the timing of the candidates
        Check(cudaStreamSynchronize(stream), "cuBLASLt");
        if (tuned == 0) {
          Check(cudaMemcpy(first, y, static_cast<size_t>(rows) * shape.out * sizeof(__half), cudaMemcpyDeviceToDevice), "cudaMemcpy");
        } else {
          diff = Difference(y, first, static_cast<size_t>(rows) * shape.out);
        }
        us[tuned] = TimeLaunches(stream, copies, [&](int c) { product(c); });
      }
      chorus::SetLinearLtTune(256);
      auto share = [&](double t) { return t < 0 ? 0.0 : bytes / (t * 1e-6) / kPeakBytesPerSecond; };
      std::printf("%-15s %-9s %6d %6d %4d | %7.2f (%3.0f%%)   | %7.2f (%3.0f%%)   | %9.2e\n", shape.model, shape.product, shape.out, shape.in, rows, us[0], 100 * share(us[0]), us[1],
                  100 * share(us[1]), diff);
      std::fflush(stdout);
      std::fprintf(json, "%s  {\"part\": \"lt-tune\", \"model\": \"%s\", \"product\": \"%s\", \"out\": %d, \"in\": %d, \"rows\": %d, \"heuristic_us\": %.3f, \"tuned_us\": %.3f, \"heuristic_of_peak\": %.3f, \"tuned_of_peak\": %.3f, \"relative_difference\": %.3e}",
                   firstRow ? "" : ",\n", shape.model, shape.product, shape.out, shape.in, rows, us[0], us[1], share(us[0]), share(us[1]), diff);
      firstRow = false;
      for (void* p : owned) cudaFree(p);
    }
    for (__half* w : weights) cudaFree(w);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string jsonPath = argc > 1 ? argv[1] : "gemv.json";
  const Shape shapes[] = {
      {"tinyllama-1.1b", "qkv", 2560, 2048},      {"tinyllama-1.1b", "o", 2048, 2048},      {"tinyllama-1.1b", "gate / up", 5632, 2048},
      {"tinyllama-1.1b", "down", 2048, 5632},     {"tinyllama-1.1b", "lm_head", 32000, 2048}, {"llama-2-7b", "qkv", 12288, 4096},
      {"llama-2-7b", "o", 4096, 4096},            {"llama-2-7b", "gate / up", 11008, 4096}, {"llama-2-7b", "down", 4096, 11008},
      {"llama-2-7b", "lm_head", 32000, 4096},         {"tinyllama-1.1b", "gate+up gated", 5632, 2048, true},
      {"llama-2-7b", "gate+up gated", 11008, 4096, true},
  };
  const int rowCounts[] = {1, 8, 64};
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  void* blas = BlasHandle(stream);
  void* ltWorkspace = nullptr;
  const size_t ltWorkspaceBytes = 4u << 20;
  Check(cudaMalloc(&ltWorkspace, ltWorkspaceBytes), "cudaMalloc");
  cudaDeviceProp props;
  Check(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties");
  std::printf("%s, %d SMs; fp16, weights rotated over >= %zu MiB; us a launch, GB/s (%% of 3.35 TB/s)\n", props.name, props.multiProcessorCount, kRotationBytes >> 20);
  std::printf("%-15s %-13s %5s %4s | %-22s | %-22s | %-22s | %-22s | %-22s | %9s\n", "model", "product", "out", "rows", "addon Linear", "addon, no PDL", "cuBLAS GemmEx",
              "previous kernel", "cuBLASLt (addon >8)", "diff");
  FILE* json = std::fopen(jsonPath.c_str(), "w");
  if (json == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", jsonPath.c_str());
    return 2;
  }
  std::fprintf(json, "{\n \"gpu\": \"%s\",\n \"sms\": %d,\n \"dtype\": \"fp16\",\n \"peak_bytes_per_s\": %.3e,\n \"rows\": [\n", props.name, props.multiProcessorCount, kPeakBytesPerSecond);
  bool firstRow = true;
  // GEMV_PARTS (comma-separated; default both): main (the table above), tune.
  const char* partsSetting = std::getenv("GEMV_PARTS");
  const std::string parts = partsSetting == nullptr ? "main,tune" : partsSetting;
  for (const Shape& shape : parts.find("main") == std::string::npos ? std::vector<Shape>{} : std::vector<Shape>(std::begin(shapes), std::end(shapes))) {
    const int weightRows = shape.gated ? 2 * shape.out : shape.out;
    const size_t weightBytes = static_cast<size_t>(weightRows) * shape.in * sizeof(__half);
    std::vector<__half*> weights = WeightCopies(weightBytes, shape.in, stream);
    const int copies = static_cast<int>(weights.size());
    for (int rows : rowCounts) {
      __half *x, *y, *reference, *products;
      Check(cudaMalloc(&x, static_cast<size_t>(rows) * shape.in * sizeof(__half)), "cudaMalloc");
      Check(cudaMalloc(&y, static_cast<size_t>(rows) * shape.out * sizeof(__half)), "cudaMalloc");
      Check(cudaMalloc(&reference, static_cast<size_t>(rows) * shape.out * sizeof(__half)), "cudaMalloc");
      Check(cudaMalloc(&products, static_cast<size_t>(rows) * weightRows * sizeof(__half)), "cudaMalloc");
      Fill<<<256, 256, 0, stream>>>(x, static_cast<size_t>(rows) * shape.in, 99u, 2.0f);
      const double bytes = static_cast<double>(weightBytes) + static_cast<double>(rows) * (shape.in + shape.out) * sizeof(__half);
      auto args = [&](int copy) { return ProductArgs(x, weights[copy], y, rows, shape.in, shape.out, shape.gated); };
      // Both products of a gated shape as one plain product (what a GEMM computes before the gating pass).
      auto plain = [&](int copy) {
        chorus::LinearArgs a = args(copy);
        a.gated = false;
        a.out = weightRows;
        a.activation = chorus::Activation::kNone;
        return a;
      };
      // cublasGemmEx as ONNX Runtime's MatMul calls it (float32 sums), through the addon's own call.
      // Gated shapes: the GEMM of both products, then the gating pass (the addon's path past 8 rows).
      auto gemmEx = [&](int copy, __half* into) {
        if (!shape.gated) {
          chorus::LinearGemmDevice(args(copy), blas, 0, shape.out, into, shape.out);
          return;
        }
        chorus::LinearGemmDevice(plain(copy), blas, 0, weightRows, products, weightRows);
        chorus::LinearArgs a = args(copy);
        a.y = into;
        chorus::GatedDevice(a, products, stream);
      };
      gemmEx(0, reference);
      auto timing = [&](double us) {
        Timing t;
        t.us = us;
        t.gbs = bytes / (us * 1e-6) / 1e9;
        return t;
      };
      Timing addon, addonPlain, blasTime, previous, lt;
      double diff = -1;
      const bool kernelRows = rows <= chorus::kLinearKernelRows;
      if (kernelRows) {
        chorus::LinearRowsDevice(args(0), stream);
        Check(cudaStreamSynchronize(stream), "addon Linear");
        diff = Difference(y, reference, static_cast<size_t>(rows) * shape.out);
        addon = timing(TimeLaunches(stream, copies, [&](int c) { chorus::LinearRowsDevice(args(c), stream); }));
        chorus::SetLinearDependentLaunch(false);
        addonPlain = timing(TimeLaunches(stream, copies, [&](int c) { chorus::LinearRowsDevice(args(c), stream); }));
        chorus::SetLinearDependentLaunch(true);
      }
      if (rows <= kPreviousRows && !shape.gated) previous = timing(TimeLaunches(stream, copies, [&](int c) { LaunchPrevious(args(c), stream); }));
      blasTime = timing(TimeLaunches(stream, copies, [&](int c) { gemmEx(c, y); }));
      auto ltProduct = [&](int c, void* workspace) {
        const chorus::LinearArgs a = plain(c);
        const bool ran = chorus::LinearLtDevice(a, 0, weightRows, shape.gated ? products : y, weightRows, false, workspace, ltWorkspaceBytes, stream);
        if (ran && shape.gated && workspace != nullptr) chorus::GatedDevice(args(c), products, stream);
        return ran;
      };
      if (ltProduct(0, nullptr)) {
        lt = timing(TimeLaunches(stream, copies, [&](int c) { ltProduct(c, ltWorkspace); }));
        if (!kernelRows) {
          ltProduct(0, ltWorkspace);
          Check(cudaStreamSynchronize(stream), "cuBLASLt");
          diff = Difference(y, reference, static_cast<size_t>(rows) * shape.out);
          addon = lt;
        }
      } else if (!kernelRows) {
        addon = blasTime;  // the addon falls back to cublasGemmEx
      }
      auto cell = [](const Timing& t) {
        char text[32];
        if (t.us < 0) return std::string("-");
        std::snprintf(text, sizeof text, "%7.2f %6.0f (%3.0f%%)", t.us, t.gbs, 100 * t.gbs * 1e9 / kPeakBytesPerSecond);
        return std::string(text);
      };
      std::printf("%-15s %-13s %5d %4d | %-22s | %-22s | %-22s | %-22s | %-22s | %9.2e\n", shape.model, shape.product, shape.out, rows, cell(addon).c_str(), cell(addonPlain).c_str(),
                  cell(blasTime).c_str(), cell(previous).c_str(), cell(lt).c_str(), diff);
      std::fflush(stdout);
      auto field = [](const Timing& t, const char* name) {
        char text[128];
        if (t.us < 0) {
          std::snprintf(text, sizeof text, "\"%s\": null", name);
        } else {
          std::snprintf(text, sizeof text, "\"%s\": {\"us\": %.3f, \"gb_per_s\": %.1f, \"of_peak\": %.3f}", name, t.us, t.gbs, t.gbs * 1e9 / kPeakBytesPerSecond);
        }
        return std::string(text);
      };
      std::fprintf(json, "%s  {\"model\": \"%s\", \"product\": \"%s\", \"out\": %d, \"in\": %d, \"rows\": %d, \"addon_path\": \"%s\", %s, %s, %s, %s, %s, \"relative_difference\": %.3e}",
                   firstRow ? "" : ",\n", shape.model, shape.product, shape.out, shape.in, rows, kernelRows ? "kernel" : "cuBLASLt", field(addon, "addon").c_str(),
                   field(addonPlain, "addon_no_pdl").c_str(), field(blasTime, "cublas_gemm_ex").c_str(), field(previous, "previous_kernel").c_str(), field(lt, "cublas_lt").c_str(), diff);
      firstRow = false;
      cudaFree(x);
      cudaFree(y);
      cudaFree(reference);
      cudaFree(products);
    }
    for (__half* w : weights) cudaFree(w);
  }
  if (parts.find("tune") != std::string::npos) RunTuning(stream, ltWorkspace, ltWorkspaceBytes, json, firstRow);
  std::fprintf(json, "\n ]\n}\n");
  std::fclose(json);
  std::printf("wrote %s\n", jsonPath.c_str());
  return 0;
}
