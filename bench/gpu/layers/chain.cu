// A batch-1 decode step's kernels on their own, on the GPU host: every layer of a model's shape as the
// slot decoder runs it with `--slot-attention PagedAttention` (the pre-normed q/k/v Linear, PagedAttention
// over a slot of 192 positions, the output projection, the pre-normed gated MLP Linear, the down
// projection), then the final norm and the LM head, fp16, each layer with weights and a cache of its
// own, captured in one CUDA graph and replayed. No ONNX Runtime: what the step costs in our kernels alone
// against the weights' floor (their bytes at 3.35 TB/s), beside the model's own step.
// Beside it, the same graph with plain launches (no programmatic dependent launches).
//   bash bench/gpu/layers/build.sh (here), then on the GPU host: ./build/layer-chain [out.json]
// (LAYERS_MODELS=tinyllama-1.1b,llama-2-7b: those shapes only)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../../src/native/linear.h"
#include "../../../src/native/paged-attention.h"
#include "../cuda-bench.cuh"

using bench::Check;
using chorus::FloatType;
using chorus::LinearArgs;
using chorus::PagedAttentionArgs;

namespace {

constexpr int kLength = 192;  // positions the row attends over
constexpr int kCapacity = 256;
constexpr int kWarmups = 10;
constexpr int kReplays = 100;
constexpr double kPeakBytesPerSecond = 3.35e12;

__global__ void ConstantKernel(__half* p, size_t n, float value) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) p[i] = __float2half(value);
}

struct Model {
  const char* name;
  int hidden, ffn, layers, heads, kvHeads, dim, vocab;
  bool norms;  // Qwen3's q_norm and k_norm
};

// Device memory, freed together.
struct Arena {
  std::vector<void*> owned;
  __half* Halves(size_t n) { return static_cast<__half*>(bench::Zeros(n * sizeof(__half), owned)); }
  __half* Random(size_t n, uint32_t seed, float scale) {
    __half* p = Halves(n);
    bench::FillKernel<<<1024, 256>>>(p, n, seed, scale);
    return p;
  }
  __half* Constant(size_t n, float value) {
    __half* p = Halves(n);
    ConstantKernel<<<256, 256>>>(p, n, value);
    return p;
  }
  void* Bytes(size_t n) { return bench::Zeros(n, owned); }
  ~Arena() {
    for (void* p : owned) cudaFree(p);
  }
};

struct Layer {
  __half *qkv, *o, *gateUp, *down, *attentionNorm, *mlpNorm, *keyCache, *valueCache;
  float* workspace;
};

struct Step {
  std::vector<LinearArgs> linears;  // in order; attention after every 4k-th
  std::vector<PagedAttentionArgs> attention;
  std::vector<float*> workspaces;
  int splits = 1;
  double weightBytes = 0;
};

LinearArgs Plain(const void* x, const void* w, void* y, int in, int out) {
  LinearArgs a{};
  a.x = x;
  a.weight = w;
  a.y = y;
  a.rows = 1;
  a.in = in;
  a.out = out;
  a.activation = chorus::Activation::kNone;
  a.type = FloatType::kFloat16;
  return a;
}

// Every launch of the step, in the order the slot decoder makes them.
Step Build(const Model& m, Arena& arena, int multiprocessors) {
  Step step;
  const int width = (m.heads + 2 * m.kvHeads) * m.dim;
  const int attended = m.heads * m.dim;
  __half* streams[2] = {arena.Random(m.hidden, 3, 1.0f), arena.Halves(m.hidden)};
  __half* delta = arena.Random(m.hidden, 5, 0.1f);
  __half* qkvOut = arena.Halves(width);
  __half* attentionOut = arena.Halves(attended);
  __half* oOut = arena.Halves(m.hidden);
  __half* gated = arena.Halves(m.ffn);
  __half* logits = arena.Halves(m.vocab);
  const auto* seqlens = static_cast<const int32_t*>(arena.Bytes(sizeof(int32_t)));
  const int32_t length = kLength - 1;
  Check(cudaMemcpy(const_cast<int32_t*>(seqlens), &length, sizeof length, cudaMemcpyHostToDevice), "cudaMemcpy");
  const int half = m.dim / 2;
  std::vector<__half> cosHost(static_cast<size_t>(kCapacity) * half), sinHost(cosHost.size());
  for (int p = 0; p < kCapacity; p++) {
    for (int i = 0; i < half; i++) {
      const double angle = p * std::pow(10000.0, -2.0 * i / m.dim);
      cosHost[static_cast<size_t>(p) * half + i] = __float2half(static_cast<float>(std::cos(angle)));
      sinHost[static_cast<size_t>(p) * half + i] = __float2half(static_cast<float>(std::sin(angle)));
    }
  }
  __half* cosTable = arena.Halves(cosHost.size());
  __half* sinTable = arena.Halves(sinHost.size());
  Check(cudaMemcpy(cosTable, cosHost.data(), cosHost.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  Check(cudaMemcpy(sinTable, sinHost.data(), sinHost.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  const __half* qNorm = m.norms ? arena.Constant(m.dim, 1.0f) : nullptr;
  const __half* kNorm = m.norms ? arena.Constant(m.dim, 1.0f) : nullptr;

  PagedAttentionArgs base{};
  base.cos = cosTable;
  base.sin = sinTable;
  base.rotaryPositions = kCapacity;
  base.qNorm = qNorm;
  base.kNorm = kNorm;
  base.epsilon = 1e-6f;
  base.seqlens = seqlens;
  base.maxBlocks = 1;
  base.blockSize = kCapacity;
  base.blocks = 1;
  base.qkv = qkvOut;
  base.output = attentionOut;
  base.rows = 1;
  base.tokens = 1;
  base.heads = m.heads;
  base.kvHeads = m.kvHeads;
  base.dim = m.dim;
  base.scale = 1.0f / std::sqrt(static_cast<float>(m.dim));
  base.type = FloatType::kFloat16;
  step.splits = chorus::PagedAttentionSplits(base, multiprocessors);
  const size_t workspaceFloats = chorus::PagedAttentionWorkspaceFloats(base, step.splits);
  const size_t cacheElements = static_cast<size_t>(m.kvHeads) * kCapacity * m.dim;

  for (int l = 0; l < m.layers; l++) {
    const uint32_t seed = 100u + 10u * l;
    Layer layer{};
    layer.qkv = arena.Random(static_cast<size_t>(width) * m.hidden, seed, 2.0f / std::sqrt(static_cast<float>(m.hidden)));
    layer.o = arena.Random(static_cast<size_t>(m.hidden) * attended, seed + 1, 2.0f / std::sqrt(static_cast<float>(attended)));
    layer.gateUp = arena.Random(static_cast<size_t>(2) * m.ffn * m.hidden, seed + 2, 2.0f / std::sqrt(static_cast<float>(m.hidden)));
    layer.down = arena.Random(static_cast<size_t>(m.hidden) * m.ffn, seed + 3, 2.0f / std::sqrt(static_cast<float>(m.ffn)));
    layer.attentionNorm = arena.Constant(m.hidden, 1.0f);
    layer.mlpNorm = arena.Constant(m.hidden, 1.0f);
    layer.keyCache = arena.Random(cacheElements, seed + 4, 1.0f);
    layer.valueCache = arena.Random(cacheElements, seed + 5, 1.0f);
    step.weightBytes += 2.0 * (static_cast<double>(width) * m.hidden + static_cast<double>(m.hidden) * attended + 3.0 * m.ffn * m.hidden);

    // The stream's residual goes from streams[0] to streams[1] at the attention's norm and back at the MLP's.
    LinearArgs qkv = Plain(delta, layer.qkv, qkvOut, m.hidden, width);
    qkv.residual = streams[0];
    qkv.sum = streams[1];
    qkv.norm = layer.attentionNorm;
    qkv.epsilon = 1e-5f;
    step.linears.push_back(qkv);
    PagedAttentionArgs a = base;
    a.keyCache = layer.keyCache;
    a.valueCache = layer.valueCache;
    step.attention.push_back(a);
    step.workspaces.push_back(static_cast<float*>(arena.Bytes(workspaceFloats * sizeof(float))));
    step.linears.push_back(Plain(attentionOut, layer.o, oOut, attended, m.hidden));
    LinearArgs mlp = Plain(oOut, layer.gateUp, gated, m.hidden, m.ffn);
    mlp.gated = true;
    mlp.activation = chorus::Activation::kSilu;
    mlp.residual = streams[1];
    mlp.sum = streams[0];
    mlp.norm = layer.mlpNorm;
    mlp.epsilon = 1e-5f;
    step.linears.push_back(mlp);
    step.linears.push_back(Plain(gated, layer.down, delta, m.ffn, m.hidden));
  }
  __half* head = arena.Random(static_cast<size_t>(m.vocab) * m.hidden, 7, 2.0f / std::sqrt(static_cast<float>(m.hidden)));
  LinearArgs last = Plain(delta, head, logits, m.hidden, m.vocab);
  last.residual = streams[0];
  last.sum = streams[1];
  last.norm = arena.Constant(m.hidden, 1.0f);
  last.epsilon = 1e-5f;
  step.linears.push_back(last);
  step.weightBytes += 2.0 * m.vocab * m.hidden;
  Check(cudaDeviceSynchronize(), "the fills");
  return step;
}

// Microseconds a step: the step's launches in a graph, as dependent launches or not.
double TimeStep(const Step& step, bool dependent, cudaStream_t stream) {
  chorus::SetLinearDependentLaunch(dependent);
  const std::vector<LinearArgs>& linears = step.linears;
  cudaGraph_t graph = nullptr;
  Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (size_t l = 0; l < step.attention.size(); l++) {
    chorus::LinearRowsDevice(linears[4 * l], stream);
    chorus::PagedAttentionDevice(step.attention[l], step.splits, step.workspaces[l], stream);
    for (int k = 1; k < 4; k++) chorus::LinearRowsDevice(linears[4 * l + k], stream);
  }
  chorus::LinearRowsDevice(linears.back(), stream);
  Check(cudaGetLastError(), "the step's launches");
  Check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  const double ms = bench::ReplayMs(graph, stream, kWarmups, kReplays);
  cudaGraphDestroy(graph);
  chorus::SetLinearDependentLaunch(true);
  return 1000.0 * ms;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string jsonPath = argc > 1 ? argv[1] : "layer-chain.json";
  const std::vector<Model> models = {
      {"tinyllama-1.1b", 2048, 5632, 22, 32, 4, 64, 32000, false},
      {"llama-3.2-1b", 2048, 8192, 16, 32, 8, 64, 128256, false},
      {"qwen3-1.7b", 2048, 6144, 28, 16, 8, 128, 151936, true},
      {"llama-2-7b", 4096, 11008, 32, 32, 32, 128, 32000, false},
  };
  int device = 0;
  Check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp properties{};
  Check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::printf("%s: a batch-1 decode step's kernels in one graph, us a step (floor: the weights at 3.35 TB/s)\n\n", properties.name);
  std::printf("| model | floor us | launches | us a step | tokens/s | of floor |\n| --- | ---: | --- | ---: | ---: | ---: |\n");
  FILE* json = std::fopen(jsonPath.c_str(), "w");
  if (json == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", jsonPath.c_str());
    return 2;
  }
  std::fprintf(json, "{\n \"gpu\": \"%s\",\n \"positions\": %d,\n \"cases\": [\n", properties.name, kLength);
  bool first = true;
  // LAYERS_MODELS=name,name: those models only.
  const char* only = std::getenv("LAYERS_MODELS");
  for (const Model& m : models) {
    if (only != nullptr && ("," + std::string(only) + ",").find("," + std::string(m.name) + ",") == std::string::npos) continue;
    Arena arena;
    const Step step = Build(m, arena, properties.multiProcessorCount);
    const double floorUs = step.weightBytes / kPeakBytesPerSecond * 1e6;
    for (const bool dependent : {true, false}) {
      const double us = TimeStep(step, dependent, stream);
      const char* launches = dependent ? "dependent" : "plain";
      std::printf("| %s | %.1f | %s | %.1f | %.0f | %.0f%% |\n", m.name, floorUs, launches, us, 1e6 / us, 100 * floorUs / us);
      std::fflush(stdout);
      std::fprintf(json, "%s  {\"model\": \"%s\", \"floor_us\": %.2f, \"launches\": \"%s\", \"us_per_step\": %.2f, \"tokens_per_s\": %.1f}", first ? "" : ",\n", m.name,
                   floorUs, launches, us, 1e6 / us);
      first = false;
    }
  }
  std::fprintf(json, "\n ]\n}\n");
  std::fclose(json);
  std::printf("wrote %s\n", jsonPath.c_str());
  return 0;
}
