// SlotAttention's CUDA kernels on their own, on the GPU host. First against a float64 reference on
// random float16 caches (self-attention, which writes the new key and value first, and cross-attention;
// T5's position bias, grouped-query heads, a query bias, head sizes 16 to 256); then the time of
// bart-large's attention launches at batch 32 inside a CUDA graph: 12 layers, each with caches of its
// own (so that every launch reads from memory, as a decode step does), self-attention over 33 positions,
// cross-attention over 256. Prints a table; exits 1 when an output is off by more than 2e-3.
//   bash bench/gpu/attention/build.sh (here, after npm run build:native, which extracts ONNX Runtime's
//   headers), then on the GPU host: ./build/attention-check [out.json]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../../../src/native/slot-attention.h"
#include "../cuda-bench.cuh"

using bench::Check;
using chorus::FloatType;
using chorus::SlotAttentionArgs;

namespace {

// Device memory holding `host`.
template <typename T>
void* Upload(const std::vector<T>& host) {
  void* p = nullptr;
  Check(cudaMalloc(&p, host.size() * sizeof(T)), "cudaMalloc");
  Check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return p;
}

float F(__half h) { return __half2float(h); }

struct Case {
  int rows, heads, kvHeads, dim, capacity;
  bool self, positionBias, queryBias;
};

// The largest |output - float64 reference| of one launch on random data.
double Compare(const Case& c, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int width = c.heads * c.dim;
  const int kvWidth = c.kvHeads * c.dim;
  const size_t rowStride = static_cast<size_t>(c.capacity) * kvWidth;
  const auto randomHalves = [&](size_t n, float scale) {
    std::vector<__half> v(n);
    for (auto& x : v) x = __float2half(u(rng) * scale);
    return v;
  };
  std::vector<__half> key = randomHalves(c.rows * rowStride, 2);
  std::vector<__half> value = randomHalves(c.rows * rowStride, 1);
  const std::vector<__half> query = randomHalves(static_cast<size_t>(c.rows) * width, 2);
  const std::vector<__half> newKey = randomHalves(static_cast<size_t>(c.rows) * kvWidth, 2);
  const std::vector<__half> newValue = randomHalves(static_cast<size_t>(c.rows) * kvWidth, 1);
  const std::vector<__half> queryBias = randomHalves(width, 0.5f);
  const int span = 20;
  std::vector<float> bias(static_cast<size_t>(c.heads) * span);
  for (auto& x : bias) x = u(rng);
  std::vector<int32_t> lengths(c.rows);
  for (auto& n : lengths) n = c.self ? static_cast<int>(rng() % (c.capacity - 1)) : 1 + static_cast<int>(rng() % c.capacity);

  void* output = nullptr;
  Check(cudaMalloc(&output, query.size() * 2), "cudaMalloc");
  SlotAttentionArgs a{};
  a.query = Upload(query);
  a.queryStride = width;
  a.queryBias = c.queryBias ? Upload(queryBias) : nullptr;
  a.key = c.self ? Upload(newKey) : nullptr;
  a.value = c.self ? Upload(newValue) : nullptr;
  a.newStride = kvWidth;
  a.cacheKey = Upload(key);
  a.cacheValue = Upload(value);
  a.rowStride = rowStride;
  a.headStride = c.dim;
  a.positionStride = kvWidth;
  a.lengths = static_cast<const int32_t*>(Upload(lengths));
  a.causal = c.self;
  a.bias = c.positionBias ? static_cast<const float*>(Upload(bias)) : nullptr;
  a.biasSpan = span;
  a.output = output;
  a.rows = c.rows;
  a.tokens = 1;
  a.heads = c.heads;
  a.kvHeads = c.kvHeads;
  a.dim = c.dim;
  a.capacity = c.capacity;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  a.type = FloatType::kFloat16;
  chorus::SlotAttentionDevice(a, nullptr);
  Check(cudaDeviceSynchronize(), "the attention");
  std::vector<__half> out(query.size());
  std::vector<__half> written(key.size());
  Check(cudaMemcpy(out.data(), a.output, out.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
  Check(cudaMemcpy(written.data(), a.cacheKey, written.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
  const std::vector<const void*> owned = {a.query, a.queryBias, a.key, a.value, a.cacheKey, a.cacheValue, a.lengths, a.bias, a.output};
  for (const void* p : owned) {
    if (p != nullptr) cudaFree(const_cast<void*>(p));
  }

  double worst = 0;
  for (int r = 0; r < c.rows; r++) {
    const int n = c.self ? lengths[r] + 1 : lengths[r];
    const int position = c.self ? lengths[r] : n;
    const size_t row = r * rowStride;
    if (c.self) {
      // The new key and value go in at the row's length before it attends.
      for (int d = 0; d < kvWidth; d++) {
        const size_t at = row + static_cast<size_t>(lengths[r]) * kvWidth + d;
        key[at] = newKey[static_cast<size_t>(r) * kvWidth + d];
        value[at] = newValue[static_cast<size_t>(r) * kvWidth + d];
        if (F(written[at]) != F(key[at])) worst = INFINITY;
      }
    }
    for (int h = 0; h < c.heads; h++) {
      const int kv = h / (c.heads / c.kvHeads);
      std::vector<double> p(n);
      double top = -INFINITY;
      for (int j = 0; j < n; j++) {
        double dot = 0;
        for (int d = 0; d < c.dim; d++) {
          const size_t qi = static_cast<size_t>(r) * width + h * c.dim + d;
          const float q = c.queryBias ? F(__hadd(query[qi], queryBias[h * c.dim + d])) : F(query[qi]);
          dot += static_cast<double>(q) * F(key[row + static_cast<size_t>(j) * kvWidth + kv * c.dim + d]);
        }
        p[j] = dot * a.scale + (c.positionBias ? bias[static_cast<size_t>(h) * span + std::min(position - j, span - 1)] : 0.0);
        top = std::max(top, p[j]);
      }
      double total = 0;
      for (double& x : p) total += (x = std::exp(x - top));
      for (int d = 0; d < c.dim; d++) {
        double sum = 0;
        for (int j = 0; j < n; j++) sum += p[j] * F(value[row + static_cast<size_t>(j) * kvWidth + kv * c.dim + d]);
        worst = std::max(worst, std::fabs(sum / total - F(out[(static_cast<size_t>(r) * c.heads + h) * c.dim + d])));
      }
    }
  }
  return worst;
}

// Microseconds a launch of bart-large's attention (batch 32, 16 heads of 64) takes inside a graph of
// 12 layers: self-attention, cross-attention or both in each layer.
double TimeLaunches(bool self, bool cross) {
  const int rows = 32, heads = 16, dim = 64, width = heads * dim, layers = 12, selfCapacity = 128, source = 256;
  const int selfLength = 32;
  std::vector<void*> owned;
  const auto zeros = [&](size_t bytes) { return bench::Zeros(bytes, owned); };
  void* qkv = zeros(static_cast<size_t>(rows) * 3 * width * 2);
  void* output = zeros(static_cast<size_t>(rows) * width * 2);
  void* selfLengths = Upload(std::vector<int32_t>(rows, selfLength));
  void* sourceLengths = Upload(std::vector<int32_t>(rows, source));
  owned.push_back(selfLengths);
  owned.push_back(sourceLengths);
  // Every launch's arguments first (the caches allocated outside the capture), then the graph.
  std::vector<SlotAttentionArgs> launches;
  for (int layer = 0; layer < layers; layer++) {
    for (int part = 0; part < 2; part++) {
      const bool isSelf = part == 0;
      if (isSelf ? !self : !cross) continue;
      const int capacity = isSelf ? selfCapacity : source;
      SlotAttentionArgs a{};
      a.query = qkv;
      a.queryStride = isSelf ? 3 * width : width;
      a.key = isSelf ? static_cast<char*>(qkv) + width * 2 : nullptr;
      a.value = isSelf ? static_cast<char*>(qkv) + width * 4 : nullptr;
      a.newStride = 3 * width;
      a.cacheKey = zeros(static_cast<size_t>(rows) * capacity * width * 2);
      a.cacheValue = zeros(static_cast<size_t>(rows) * capacity * width * 2);
      a.rowStride = static_cast<size_t>(capacity) * width;
      a.headStride = dim;
      a.positionStride = width;
      a.lengths = static_cast<const int32_t*>(isSelf ? selfLengths : sourceLengths);
      a.causal = isSelf;
      a.output = output;
      a.rows = rows;
      a.tokens = 1;
      a.heads = a.kvHeads = heads;
      a.dim = dim;
      a.capacity = capacity;
      a.scale = 0.125f;
      a.type = FloatType::kFloat16;
      launches.push_back(a);
    }
  }
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  cudaGraph_t graph = nullptr;
  Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  for (const SlotAttentionArgs& a : launches) chorus::SlotAttentionDevice(a, stream);
  Check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  const double ms = bench::ReplayMs(graph, stream, 5, 50);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  for (void* p : owned) cudaFree(p);
  return 1000.0 * ms / static_cast<double>(launches.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::mt19937 rng(7);
  const std::vector<Case> cases = {
      {32, 16, 16, 64, 256, false, false, true}, {32, 16, 16, 64, 80, true, false, false}, {7, 8, 8, 64, 300, true, true, false},
      {5, 8, 8, 64, 256, false, false, false},   {6, 14, 2, 64, 100, true, false, false},  {4, 8, 8, 128, 70, true, false, false},
      {4, 8, 8, 32, 90, true, true, false},      {3, 4, 4, 256, 50, false, false, false},  {3, 4, 4, 16, 40, true, false, false},
  };
  std::string json = "{\"cases\": [";
  double worst = 0;
  std::printf("| rows | heads (kv) | head dim | slot | mode | max abs diff |\n| --- | --- | --- | --- | --- | --- |\n");
  for (const Case& c : cases) {
    const double diff = Compare(c, rng);
    worst = std::max(worst, diff);
    const char* mode = c.self ? (c.positionBias ? "self, position bias" : "self") : (c.queryBias ? "cross, query bias" : "cross");
    std::printf("| %d | %d (%d) | %d | %d | %s | %.3g |\n", c.rows, c.heads, c.kvHeads, c.dim, c.capacity, mode, diff);
    char row[256];
    std::snprintf(row, sizeof(row), "%s{\"rows\": %d, \"heads\": %d, \"kvHeads\": %d, \"dim\": %d, \"capacity\": %d, \"mode\": \"%s\", \"maxAbsDiff\": %.6g}", &c == &cases[0] ? "" : ", ",
                  c.rows, c.heads, c.kvHeads, c.dim, c.capacity, mode, diff);
    json += row;
  }
  const double both = TimeLaunches(true, true), self = TimeLaunches(true, false), cross = TimeLaunches(false, true);
  std::printf("\nbart-large batch 32, 12 layers in a graph, us a launch: self-attention %.2f, cross-attention %.2f, both %.2f\n", self, cross, both);
  char times[200];
  std::snprintf(times, sizeof(times), "], \"usPerLaunch\": {\"self\": %.3f, \"cross\": %.3f, \"both\": %.3f}}\n", self, cross, both);
  json += times;
  if (argc > 1) {
    FILE* f = std::fopen(argv[1], "w");
    if (f == nullptr) return 2;
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
  return worst <= 2e-3 ? 0 : 1;
}
