// What a GPU's memory gives a kernel with few bytes in flight: the DRAM latency one dependent load at a
// time sees, and the read bandwidth at each number of 16-byte loads a thread keeps in flight and blocks
// an SM. Two hosts of one GPU model whose quantized decode steps differ while their fp16 steps agree
// (docs/lab/2026-11-27-host-variance.md) can be told apart here: a longer latency lowers the curve's
// left end and leaves its right end where it was.
//   bash bench/gpu/memory/build.sh (here), then on the GPU host: ./build/memory-probe [out.json]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

void Check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

// One thread follows `next` for `steps` loads, each address the value the load before it returned.
__global__ void ChaseKernel(const uint32_t* next, int steps, uint32_t* sink) {
  uint32_t at = 0;
  for (int i = 0; i < steps; i++) at = __ldcg(next + at);
  *sink = at;
}

// Each thread reads A 16-byte vectors (all issued before any is used) per round over its share of the
// buffer, strided by the grid, and folds them into one word so that no load is dropped.
template <int A>
__global__ void ReadKernel(const uint4* data, size_t vectors, uint32_t* sink) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  uint32_t fold = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i + (A - 1) * stride < vectors; i += A * stride) {
    uint4 v[A];
#pragma unroll
    for (int u = 0; u < A; u++) v[u] = __ldcs(data + i + u * stride);
#pragma unroll
    for (int u = 0; u < A; u++) fold ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (fold == 0x12345678u) *sink = fold;
}

// The mean ms of a read of the first `vectors` (a whole number of the grid's rounds).
template <int A>
float ReadMs(const uint4* data, size_t vectors, int blocks, int threads, uint32_t* sink) {
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  ReadKernel<A><<<blocks, threads>>>(data, vectors, sink);  // warm-up
  Check(cudaEventRecord(start), "record");
  constexpr int kRepeats = 5;
  for (int r = 0; r < kRepeats; r++) ReadKernel<A><<<blocks, threads>>>(data, vectors, sink);
  Check(cudaEventRecord(stop), "record");
  Check(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  Check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / kRepeats;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string jsonPath = argc > 1 ? argv[1] : "memory-probe.json";
  cudaDeviceProp properties{};
  Check(cudaGetDeviceProperties(&properties, 0), "properties");
  int smClockKhz = 0;
  int memClockKhz = 0;
  cudaDeviceGetAttribute(&smClockKhz, cudaDevAttrClockRate, 0);
  cudaDeviceGetAttribute(&memClockKhz, cudaDevAttrMemoryClockRate, 0);
  const int sms = properties.multiProcessorCount;

  // Latency: a random cycle over 1 GiB at 256-byte spacing (past L2 and the TLB's reach).
  const size_t chaseBytes = size_t{1} << 30;
  const size_t spacing = 256 / sizeof(uint32_t);
  const size_t nodes = chaseBytes / 256;
  std::vector<uint32_t> order(nodes);
  for (size_t i = 0; i < nodes; i++) order[i] = static_cast<uint32_t>(i);
  std::mt19937 random(7);
  std::shuffle(order.begin() + 1, order.end(), random);
  std::vector<uint32_t> next(chaseBytes / sizeof(uint32_t), 0);
  for (size_t i = 0; i < nodes; i++) next[order[i] * spacing] = static_cast<uint32_t>(order[(i + 1) % nodes] * spacing);
  uint32_t* deviceNext = nullptr;
  uint32_t* sink = nullptr;
  Check(cudaMalloc(&deviceNext, chaseBytes), "malloc");
  Check(cudaMalloc(&sink, sizeof(uint32_t)), "malloc");
  Check(cudaMemcpy(deviceNext, next.data(), chaseBytes, cudaMemcpyHostToDevice), "copy");
  constexpr int kSteps = 200000;
  ChaseKernel<<<1, 1>>>(deviceNext, 1000, sink);
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  Check(cudaEventRecord(start), "record");
  ChaseKernel<<<1, 1>>>(deviceNext, kSteps, sink);
  Check(cudaEventRecord(stop), "record");
  Check(cudaEventSynchronize(stop), "sync");
  float chaseMs = 0;
  Check(cudaEventElapsedTime(&chaseMs, start, stop), "elapsed");
  const double latencyNs = chaseMs * 1e6 / kSteps;
  cudaFree(deviceNext);

  // Bandwidth: 4 GiB read with 256-thread blocks, 1 to 8 blocks an SM, 1, 2 or 4 loads in flight a thread.
  const size_t readBytes = size_t{4} << 30;
  uint4* data = nullptr;
  Check(cudaMalloc(&data, readBytes), "malloc");
  Check(cudaMemset(data, 1, readBytes), "memset");
  const size_t vectors = readBytes / sizeof(uint4);
  FILE* json = std::fopen(jsonPath.c_str(), "w");
  if (json == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", jsonPath.c_str());
    return 1;
  }
  std::fprintf(json, "{\n \"gpu\": \"%s\",\n \"sms\": %d,\n \"sm_clock_mhz\": %d,\n \"memory_clock_mhz\": %d,\n \"latency_ns\": %.1f,\n \"reads\": [\n", properties.name, sms,
               smClockKhz / 1000, memClockKhz / 1000, latencyNs);
  std::printf("%s: dependent-load latency %.1f ns\n| blocks an SM | loads in flight a thread | bytes in flight an SM | GB/s |\n| ---: | ---: | ---: | ---: |\n",
              properties.name, latencyNs);
  bool first = true;
  for (int perSm : {1, 2, 4, 8}) {
    for (int ahead : {1, 2, 4}) {
      const int blocks = perSm * sms;
      const size_t round = static_cast<size_t>(blocks) * 256 * ahead;
      const size_t whole = vectors / round * round;
      const float ms = ahead == 1 ? ReadMs<1>(data, whole, blocks, 256, sink) : ahead == 2 ? ReadMs<2>(data, whole, blocks, 256, sink) : ReadMs<4>(data, whole, blocks, 256, sink);
      const double gbs = whole * sizeof(uint4) / (ms * 1e6);
      const int inFlight = perSm * 256 * ahead * 16;
      std::printf("| %d | %d | %d | %.0f |\n", perSm, ahead, inFlight, gbs);
      std::fprintf(json, "%s  {\"blocks_per_sm\": %d, \"loads_in_flight\": %d, \"bytes_in_flight_per_sm\": %d, \"gb_per_s\": %.1f}", first ? "" : ",\n", perSm, ahead, inFlight, gbs);
      first = false;
    }
  }
  std::fprintf(json, "\n ]\n}\n");
  std::fclose(json);
  Check(cudaGetLastError(), "kernels");
  cudaFree(data);
  cudaFree(sink);
  std::printf("wrote %s\n", jsonPath.c_str());
  return 0;
}
