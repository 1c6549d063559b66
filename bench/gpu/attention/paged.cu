// PagedAttention's CUDA kernels on their own, on the GPU host: the time of a decode step's attention
// launch, the general kernel (CHORUS_PAGED_DECODE=0), the decode kernel for every step
// (CHORUS_PAGED_DECODE=2) and the engine's choice (the decode kernel where positions are split, the
// tensor-core kernel where they are not),
// in the shapes of seven models (their heads, key heads, head size, layers, float type, Qwen3's norms,
// Gemma 2's softcap and window), at 1 and 64 rows, each over 192 positions (the new token at 191; or
// PAGED_LENGTH) of a cache of 64 positions more (rounded up to 64), kept as slots (one block a row) and
// as a pool of 16-position blocks in a shuffled block table. PAGED_MODELS (names, comma-separated) and
// PAGED_ROWS (1 or 64) take those cases alone. A case's layers go in one CUDA graph, each with caches
// and workspace of its own (so that every launch reads from memory, as a decode step does); the graph
// is replayed 20 times, then 200 timed. Prints a table with the largest difference between the general kernel's output and each
// other's; exits 1 when an output holds a NaN or an infinity.
//   bash bench/gpu/attention/build.sh (here), then on the GPU host:
//   ./build/paged-attention-time [out.json]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../../../src/native/device.cuh"
#include "../../../src/native/paged-attention.h"
#include "../cuda-bench.cuh"

using bench::Check;
using bench::Zeros;
using chorus::FloatType;
using chorus::PagedAttentionArgs;

namespace {

// Positions each row attends over (PAGED_LENGTH, default 192), and the cache's positions a row: 64
// past them, rounded up to 64.
const int kLength = [] {
  const char* value = std::getenv("PAGED_LENGTH");
  const int length = value == nullptr ? 192 : std::atoi(value);
  if (length < 2 || length > 32768) {
    std::fprintf(stderr, "PAGED_LENGTH takes 2 to 32768 positions, not '%s'\n", value);
    std::exit(2);
  }
  return length;
}();
const int kCapacity = (kLength + 127) / 64 * 64;
constexpr int kPagedBlockSize = 16;
constexpr int kWarmups = 20;
constexpr int kReplays = 200;

// Device memory holding `host`, kept in `owned`.
template <typename T>
void* Upload(const std::vector<T>& host, std::vector<void*>& owned) {
  void* p = Zeros(host.size() * sizeof(T), owned);
  Check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return p;
}

// `value` as the bits of the float type (float16 or bfloat16), rounded to nearest even.
uint16_t Bits(float value, FloatType type) {
  if (type == FloatType::kBFloat16) return static_cast<__nv_bfloat16_raw>(__float2bfloat16(value)).x;
  return static_cast<__half_raw>(__float2half(value)).x;
}

// Bits of the float type, widened.
float Widened(uint16_t bits, FloatType type) {
  if (type == FloatType::kBFloat16) {
    __nv_bfloat16_raw b;
    b.x = bits;
    return __bfloat162float(__nv_bfloat16(b));
  }
  __half_raw h;
  h.x = bits;
  return __half2float(__half(h));
}

// n elements of the float type at p, uniform in [-scale, scale).
void Fill(void* p, FloatType type, size_t n, uint64_t seed, float scale) {
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 65536));
  if (type == FloatType::kBFloat16) {
    bench::FillKernel<<<blocks, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale);
  } else {
    bench::FillKernel<<<blocks, 256>>>(static_cast<__half*>(p), n, seed, scale);
  }
  Check(cudaGetLastError(), "FillKernel");
}

struct Model {
  const char* name;
  int heads, kvHeads, dim, layers;
  FloatType type;
  bool norms;  // Qwen3's q_norm and k_norm
  float softcap;
  int window;
};

struct Row {
  std::string model;
  int rows;
  const char* layout;
  int splits;
  double generalUs, decodeUs, chosenUs, decodeDiff, chosenDiff;
};

// One variant's graph of every layer's launch: microseconds a launch over kReplays replays, then the
// output of one more replay (as floats).
// `decode`: CHORUS_PAGED_DECODE's value (null: unset, the engine's choice).
double TimeVariant(const char* decode, const std::vector<PagedAttentionArgs>& launches, const std::vector<float*>& workspaces, int splits,
                   cudaStream_t stream, std::vector<float>& out) {
  // The launcher reads the variable at each launch, so it picks the kernel that the capture records.
  if (decode == nullptr) {
    unsetenv("CHORUS_PAGED_DECODE");
  } else {
    setenv("CHORUS_PAGED_DECODE", decode, 1);
  }
  cudaGraph_t graph = nullptr;
  Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  for (size_t i = 0; i < launches.size(); i++) chorus::PagedAttentionDevice(launches[i], splits, workspaces[i], stream);
  Check(cudaGetLastError(), "PagedAttentionDevice");
  Check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  const double ms = bench::ReplayMs(graph, stream, kWarmups, kReplays);
  cudaGraphDestroy(graph);

  // Every replay writes the same new keys and values at position kLength - 1: the last one's output is
  // the timed ones'.
  const PagedAttentionArgs& a = launches.back();
  std::vector<uint16_t> bits(static_cast<size_t>(a.rows) * a.heads * a.dim);
  Check(cudaMemcpy(bits.data(), a.output, bits.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
  out.resize(bits.size());
  for (size_t i = 0; i < bits.size(); i++) out[i] = Widened(bits[i], a.type);

  return 1000.0 * ms / static_cast<double>(launches.size());
}

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// A model's decode step at `rows`, its cache as slots or as shuffled blocks: both kernels' times.
// Sets `finite` false where an output holds a NaN or an infinity.
Row Run(const Model& m, int rows, bool paged, int multiprocessors, uint64_t seed, bool& finite) {
  std::vector<void*> owned;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const size_t width = static_cast<size_t>(m.heads + 2 * m.kvHeads) * m.dim;
  const int blockSize = paged ? kPagedBlockSize : kCapacity;
  const int maxBlocks = kCapacity / blockSize;
  const int blocks = rows * maxBlocks;
  const size_t cacheElements = static_cast<size_t>(blocks) * m.kvHeads * blockSize * m.dim;

  void* qkv = Zeros(rows * width * 2, owned);
  Fill(qkv, m.type, rows * width, seed, 1.0f);
  void* output = Zeros(static_cast<size_t>(rows) * m.heads * m.dim * 2, owned);
  const auto* seqlens = static_cast<const int32_t*>(Upload(std::vector<int32_t>(rows, kLength - 1), owned));
  const int32_t* blockTable = nullptr;
  if (paged) {
    // Every row's blocks scattered over the pool, as a pool that has served many requests leaves them.
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    blockTable = static_cast<const int32_t*>(Upload(table, owned));
  }
  // Rotary tables of theta 10000 (rotate-half), one row a cache position.
  const int half = m.dim / 2;
  std::vector<uint16_t> cosBits(static_cast<size_t>(kCapacity) * half), sinBits(cosBits.size());
  for (int p = 0; p < kCapacity; p++) {
    for (int i = 0; i < half; i++) {
      const double angle = p * std::pow(10000.0, -2.0 * i / m.dim);
      cosBits[static_cast<size_t>(p) * half + i] = Bits(static_cast<float>(std::cos(angle)), m.type);
      sinBits[static_cast<size_t>(p) * half + i] = Bits(static_cast<float>(std::sin(angle)), m.type);
    }
  }
  const void* cosTable = Upload(cosBits, owned);
  const void* sinTable = Upload(sinBits, owned);
  const void* qNorm = nullptr;
  const void* kNorm = nullptr;
  if (m.norms) {
    std::uniform_real_distribution<float> u(0.9f, 1.1f);
    std::vector<uint16_t> q(m.dim), k(m.dim);
    for (auto& x : q) x = Bits(u(rng), m.type);
    for (auto& x : k) x = Bits(u(rng), m.type);
    qNorm = Upload(q, owned);
    kNorm = Upload(k, owned);
  }

  PagedAttentionArgs base{};
  base.qkv = qkv;
  base.cos = cosTable;
  base.sin = sinTable;
  base.rotaryPositions = kCapacity;
  base.qNorm = qNorm;
  base.kNorm = kNorm;
  base.epsilon = 1e-6f;
  base.seqlens = seqlens;
  base.blockTable = blockTable;
  base.maxBlocks = maxBlocks;
  base.blockSize = blockSize;
  base.blocks = blocks;
  base.output = output;
  base.rows = rows;
  base.tokens = 1;
  base.heads = m.heads;
  base.kvHeads = m.kvHeads;
  base.dim = m.dim;
  base.scale = 1.0f / std::sqrt(static_cast<float>(m.dim));
  base.window = m.window;
  base.softcap = m.softcap;
  base.type = m.type;
  // PAGED_SPLITS=N: every launch in N splits (the engine's choice otherwise), to compare.
  const char* forced = std::getenv("PAGED_SPLITS");
  const int splits = forced != nullptr ? std::atoi(forced) : chorus::PagedAttentionSplits(base, multiprocessors);
  const size_t workspaceFloats = chorus::PagedAttentionWorkspaceFloats(base, splits);

  // Every buffer allocated before the captures: a capture may not allocate.
  std::vector<PagedAttentionArgs> launches;
  std::vector<float*> workspaces;
  for (int layer = 0; layer < m.layers; layer++) {
    PagedAttentionArgs a = base;
    a.keyCache = Zeros(cacheElements * 2, owned);
    a.valueCache = Zeros(cacheElements * 2, owned);
    Fill(a.keyCache, m.type, cacheElements, seed + 2 * layer + 1, 1.0f);
    Fill(a.valueCache, m.type, cacheElements, seed + 2 * layer + 2, 1.0f);
    launches.push_back(a);
    // The kernels take it zeroed and leave it zeroed.
    workspaces.push_back(static_cast<float*>(Zeros(workspaceFloats * sizeof(float), owned)));
  }
  Check(cudaDeviceSynchronize(), "the fills");

  cudaStream_t stream = nullptr;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  std::vector<float> general, decode, chosen;
  Row row{m.name, rows, paged ? "paged" : "slots", splits, 0, 0, 0, 0, 0};
  row.generalUs = TimeVariant("0", launches, workspaces, splits, stream, general);
  row.decodeUs = TimeVariant("2", launches, workspaces, splits, stream, decode);
  row.chosenUs = TimeVariant(nullptr, launches, workspaces, splits, stream, chosen);
  cudaStreamDestroy(stream);
  for (void* p : owned) cudaFree(p);

  if (!AllFinite(general) || !AllFinite(decode) || !AllFinite(chosen)) finite = false;
  for (size_t i = 0; i < general.size(); i++) {
    row.decodeDiff = std::max(row.decodeDiff, static_cast<double>(std::fabs(general[i] - decode[i])));
    row.chosenDiff = std::max(row.chosenDiff, static_cast<double>(std::fabs(general[i] - chosen[i])));
  }
  return row;
}

// `s` inside a JSON string.
std::string Escaped(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Model> models = {
      {"tinyllama", 32, 4, 64, 22, FloatType::kFloat16, false, 0, 0},
      {"llama-3.2-1b", 32, 8, 64, 16, FloatType::kFloat16, false, 0, 0},
      {"llama-3-8b", 32, 8, 128, 32, FloatType::kFloat16, false, 0, 0},
      {"llama-2-7b", 32, 32, 128, 32, FloatType::kFloat16, false, 0, 0},
      {"phi-3-mini", 32, 32, 96, 32, FloatType::kFloat16, false, 0, 0},
      {"qwen3-1.7b", 16, 8, 128, 28, FloatType::kFloat16, true, 0, 0},
      // The window reaches past the 192 positions: it changes nothing but takes the window's path.
      {"gemma-2-2b", 8, 4, 256, 26, FloatType::kBFloat16, false, 50, 4096},
  };
  int device = 0;
  Check(cudaGetDevice(&device), "cudaGetDevice");
  int multiprocessors = 0;
  Check(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  cudaDeviceProp properties{};
  Check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");

  std::printf("%s, %d multiprocessors; a decode step over %d positions, us a launch in a graph of the model's layers\n\n", properties.name, multiprocessors, kLength);
  std::printf("| model | rows | layout | splits | general us | decode us | chosen us | general / chosen | max abs diff: decode, chosen |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::vector<Row> results;
  bool finite = true;
  uint64_t seed = 7;
  try {
    // PAGED_MODELS=llama-2-7b,qwen3-1.7b: those shapes alone; PAGED_ROWS=64: that many rows alone.
    const char* only = std::getenv("PAGED_MODELS");
    const char* onlyRows = std::getenv("PAGED_ROWS");
    for (const Model& m : models) {
      if (only != nullptr && ("," + std::string(only) + ",").find("," + std::string(m.name) + ",") == std::string::npos) continue;
      for (const int rows : {1, 64}) {
        if (onlyRows != nullptr && std::atoi(onlyRows) != rows) continue;
        for (const bool paged : {false, true}) {
          const Row r = Run(m, rows, paged, multiprocessors, seed++ * 1000, finite);
          std::printf("| %s | %d | %s | %d | %.2f | %.2f | %.2f | %.2f | %.3g, %.3g |\n", r.model.c_str(), r.rows, r.layout, r.splits, r.generalUs, r.decodeUs, r.chosenUs, r.generalUs / r.chosenUs,
                      r.decodeDiff, r.chosenDiff);
          std::fflush(stdout);
          results.push_back(r);
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (!finite) std::fprintf(stderr, "an output holds a NaN or an infinity\n");

  if (argc > 1) {
    char date[16];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y-%m-%d", std::localtime(&now));
    std::string command = argv[0];
    for (int i = 1; i < argc; i++) command += std::string(" ") + argv[i];
    std::string json = "{\n \"gpu\": \"" + Escaped(properties.name) + "\",\n \"date\": \"" + date + "\",\n \"command\": \"" + Escaped(command) + "\",\n \"rows\": [";
    for (size_t i = 0; i < results.size(); i++) {
      const Row& r = results[i];
      char line[400];
      std::snprintf(line, sizeof(line),
                    "%s\n  {\"case\": \"%s\", \"rows\": %d, \"layout\": \"%s\", \"splits\": %d, \"general_us\": %.3f, \"decode_us\": %.3f, \"chosen_us\": %.3f, "
                    "\"decode_max_abs_diff\": %.6g, \"chosen_max_abs_diff\": %.6g}",
                    i == 0 ? "" : ",", r.model.c_str(), r.rows, r.layout, r.splits, r.generalUs, r.decodeUs, r.chosenUs, r.decodeDiff, r.chosenDiff);
      json += line;
    }
    json += "\n ]\n}\n";
    FILE* f = std::fopen(argv[1], "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", argv[1]);
      return 2;
    }
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
  return finite ? 0 : 1;
}
