// What a decode step's ends cost on the GPU, apart from the model: a captured graph of small kernels
// stands for the step, then the ends the native engine queues after it (an argmax kernel, the ids'
// copy to pinned host memory, events), one step queued ahead of the host as in DecodeGreedyOnDevice.
// Each variant changes one thing; the table is ms a step (wall, 4,000 steps) against graphs launched
// back to back with nothing between them.
// Build and run: bash bench/gpu/step-ends/run.sh [out.json]
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "../cuda-bench.cuh"

namespace {

// A kernel of the graph: each block spins `cycles` clock ticks (a layer's small kernel).
__global__ void SpinKernel(long long cycles, int* sink) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(sink, 1);
}

// The step's argmax stand-in: writes the step's id to the device (the next step's input) and, where
// `host` is set, to pinned host memory directly.
__global__ void ChooseKernel(int* device, int* host, int step) {
  if (threadIdx.x == 0) {
    device[0] = step;
    if (host != nullptr) *reinterpret_cast<volatile int*>(host) = step;
  }
}

struct Variant {
  const char* name;
  bool copy;        // the ids copied D2H by cudaMemcpyAsync on the step's stream
  bool mapped;      // the kernel writes the ids to pinned host memory
  bool timing;      // timing events around the graph, and the step's event with timing
  bool sideCopy;    // the copy on a second stream, after an event
  bool hostWait;    // the host waits each step's event (one step queued ahead)
};

}  // namespace

int main(int argc, char** argv) {
  const int kernels = 92, blocks = 132, steps = 4000;
  const long long cycles = 4000;  // about 2.3 us at 1.755 GHz
  cudaStream_t stream, side;
  bench::Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  bench::Check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "stream");
  int* sink = nullptr;
  int* ids = nullptr;
  int* hostIds = nullptr;
  bench::Check(cudaMalloc(&sink, sizeof(int)), "malloc");
  bench::Check(cudaMalloc(&ids, 2 * sizeof(int)), "malloc");
  bench::Check(cudaMallocHost(&hostIds, 2 * sizeof(int)), "mallocHost");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  bench::Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "capture");
  for (int k = 0; k < kernels; k++) SpinKernel<<<blocks, 128, 0, stream>>>(cycles, sink);
  bench::Check(cudaStreamEndCapture(stream, &graph), "end capture");
  bench::Check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");

  const Variant variants[] = {
      {"graphs back to back, nothing between", false, false, false, false, false},
      {"as the engine: argmax, cudaMemcpyAsync D2H, timing events, host waits", true, false, true, false, true},
      {"ids written to pinned memory by the kernel (no copy)", false, true, true, false, true},
      {"events without timing", true, false, false, false, true},
      {"no copy, events without timing", false, true, false, false, true},
      {"copy on a second stream", false, false, true, true, true},
  };
  std::string json = "{\"rows\":[";
  for (const Variant& v : variants) {
    cudaEvent_t events[2][3], copied[2];
    for (auto& e : events)
      for (auto& x : e) bench::Check(cudaEventCreateWithFlags(&x, v.timing ? cudaEventDefault : cudaEventDisableTiming), "event");
    for (auto& e : copied) bench::Check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
    auto queue = [&](int step) {
      cudaEvent_t* e = events[step % 2];
      if (v.timing) cudaEventRecord(e[0], stream);
      cudaGraphLaunch(exec, stream);
      if (v.timing) cudaEventRecord(e[1], stream);
      if (!v.hostWait && !v.copy && !v.mapped) return;
      ChooseKernel<<<1, 32, 0, stream>>>(ids + step % 2, v.mapped ? hostIds + step % 2 : nullptr, step);
      if (v.copy) cudaMemcpyAsync(hostIds + step % 2, ids + step % 2, sizeof(int), cudaMemcpyDeviceToHost, stream);
      cudaEventRecord(e[2], stream);
      if (v.sideCopy) {
        cudaStreamWaitEvent(side, e[2]);
        cudaMemcpyAsync(hostIds + step % 2, ids + step % 2, sizeof(int), cudaMemcpyDeviceToHost, side);
        cudaEventRecord(copied[step % 2], side);
      }
    };
    double best = 1e30;
    int wrong = 0;
    for (int round = 0; round < 3; round++) {
      cudaDeviceSynchronize();
      const auto t0 = std::chrono::steady_clock::now();
      if (!v.hostWait) {
        for (int s = 0; s < steps; s++) queue(s);
        cudaStreamSynchronize(stream);
      } else {
        queue(0);
        for (int s = 0; s < steps; s++) {
          if (s + 1 < steps) queue(s + 1);
          cudaEventSynchronize(v.sideCopy ? copied[s % 2] : events[s % 2][2]);
          if (hostIds[s % 2] != s) wrong++;
        }
      }
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
      if (ms < best) best = ms;
    }
    bench::Check(cudaGetLastError(), v.name);
    std::printf("| %-72s | %.4f ms | %s\n", v.name, best, wrong == 0 ? "ids read right" : "IDS WRONG");
    json += std::string(json.back() == '[' ? "" : ",") + "{\"variant\":\"" + v.name + "\",\"ms_per_step\":" + std::to_string(best) + ",\"ids_wrong\":" + std::to_string(wrong) + "}";
    for (auto& e : events)
      for (auto& x : e) cudaEventDestroy(x);
    for (auto& e : copied) cudaEventDestroy(e);
  }
  json += "]}";
  if (argc > 1) {
    FILE* f = std::fopen(argv[1], "w");
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
  return 0;
}
