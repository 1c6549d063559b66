// SlotDecoder::DecodeChosen: steps back to back where each row's token is chosen in the step (the
// sampler's or the argmax) and fed to the next one, on the host step by step, or with CUDA graphs
// queued a step ahead of the host.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cuda-check.h"
#include "slot-decoder.h"

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus {

int SlotDecoder::DecodeChosen(std::vector<int64_t> tokens, std::vector<int64_t> positions, int maxSteps, const StepSample& sampleStep, const StepChosen& onStep) {
  if (Fans()) {
    // Rank 0's caller fills each step's batch; the other ranks take it from rank 0.
    return OnRanks([&](SlotDecoder& d) {
      if (d.rank_ == 0) {
        return d.DecodeChosen(tokens, positions, maxSteps, [&](int step, SampleBatch& batch) {
          sampleStep(step, batch);
          StepNote note;
          note.kind = StepNote::kBatch;
          note.batch = batch;
          group_->Publish(note);
        }, onStep);
      }
      return d.DecodeChosen(tokens, positions, maxSteps, [&d](int, SampleBatch& batch) { batch = d.group_->Receive(d.rank_, StepNote::kBatch).batch; },
                            [](int, const int32_t*, const SampleResult*) {});
    });
  }
  if (maxSteps < 1) throw std::out_of_range("decodeChosen takes at least one step");
  if (paged() || seq2seq()) throw std::logic_error("decodeChosen runs decoder-only models with a cache of slots");
  UseDevice();
  CheckRows(tokens, positions, {}, maxSteps);
  if (options_.cuda && options_.cudaGraph) return DecodeChosenOnDevice(tokens, positions, maxSteps, sampleStep, onStep);
  const size_t rows = tokens.size();
  int steps = 0;
  for (int step = 0; step < maxSteps; step++) {
    SampleBatch batch;
    sampleStep(step, batch);
    StepResult result = Decode(tokens, positions, {}, batch);
    onStep(step, result.argmax.data(), result.sampled.data());
    steps++;
    std::vector<int32_t> sampled(rows, -1);
    for (size_t i = 0; i < batch.rows.size(); i++) sampled[batch.rows[i]] = static_cast<int32_t>(i);
    for (size_t r = 0; r < rows; r++) {
      tokens[r] = sampled[r] < 0 ? result.argmax[r] : result.sampled[sampled[r]].token;
      positions[r]++;
    }
    if (AgreedStop()) break;
  }
  return steps;
}

#ifdef CHORUS_WITH_CUDA
int SlotDecoder::DecodeChosenOnDevice(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, int maxSteps, const StepSample& sampleStep,
                                      const StepChosen& onStep) {
  const auto started = std::chrono::steady_clock::now();
  const int rows = static_cast<int>(tokens.size());
  auto stream = static_cast<cudaStream_t>(stream_);
  const int slots = options_.slots;
  // Step k's batch is filled into batches[k % 2] and staged from the pinned hostBatches_[k % 2]: the
  // copy of step k + 2's is queued after the host has read step k, whose copy ran before it.
  SampleBatch batches[2];
  sampleStep(0, batches[0]);
  const size_t sampledRows = batches[0].rows.size();
  std::vector<int32_t> sampleIndex(rows, -1);
  for (size_t i = 0; i < sampledRows; i++) sampleIndex[batches[0].rows[i]] = static_cast<int32_t>(i);
  // The most a step's batch takes: its rows, parameters, no pairs (the penalties need each step's
  // tokens: those rows step one at a time) and a ban per row. The buffers hold at least every slot
  // with two bans, so that runs of more rows than the last do not allocate pinned and device memory
  // anew (a millisecond or more each time).
  SampleBatch widest = batches[0];
  widest.bans.assign(sampledRows + widest.bans.size(), 0);
  SampleBatch slotsWide;
  slotsWide.rows.resize(slots);
  slotsWide.params.resize(slots);
  slotsWide.bans.resize(2 * static_cast<size_t>(slots));
  const size_t batchBytes = std::max(SampleStagingBytes(widest), SampleStagingBytes(slotsWide));
  if (hostSampled_ == nullptr) CheckCuda(cudaHostAlloc(&hostSampled_, sizeof(SampleResult) * 2 * slots, cudaHostAllocMapped), "cudaHostAlloc");
  if (hostBatchBytes_ < batchBytes) {
    for (char*& batch : hostBatches_) {
      if (batch != nullptr) cudaFreeHost(batch);
      batch = nullptr;
      CheckCuda(cudaMallocHost(&batch, batchBytes), "cudaMallocHost");
    }
    hostBatchBytes_ = batchBytes;
  }
  if (sampleWork_ == nullptr) sampleWork_ = static_cast<float*>(Allocate(sizeof(float) * options_.vocab * slots));
  if (sampleMass_ == nullptr) sampleMass_ = static_cast<double*>(Allocate(sizeof(double) * options_.vocab * slots));
  if (sampledDevice_ == nullptr) sampledDevice_ = static_cast<SampleResult*>(Allocate(sizeof(SampleResult) * slots));
  if (sampleIndexDevice_ == nullptr) sampleIndexDevice_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * slots));
  // Two steps' batches on the device, each in a slot of its own (the copy of step k + 1's runs while
  // step k's sampler may still read step k's).
  const size_t slotBytes = (batchBytes + 255) / 256 * 256;
  Reserve(chosenStaging_, chosenStagingBytes_, 2 * slotBytes, 2 * slotBytes);
  if (sideStream_ == nullptr) {
    cudaStream_t side = nullptr;
    CheckCuda(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
    sideStream_ = side;
    for (void*& event : stagedEvents_) {
      cudaEvent_t made = nullptr;
      CheckCuda(cudaEventCreateWithFlags(&made, cudaEventDisableTiming), "cudaEventCreate");
      event = made;
    }
  }
  // The side stream's copies come after whatever is queued on the step stream (a step an earlier run
  // queued and never read may still read the staging slots).
  CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(stagedEvents_[1]), stream), "cudaEventRecord");
  CheckCuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(sideStream_), static_cast<cudaEvent_t>(stagedEvents_[1]), 0), "cudaStreamWaitEvent");
  auto* hostIdsDevice = static_cast<int32_t*>(DeviceAddress(hostIds_));
  auto* hostSampledDevice = static_cast<SampleResult*>(DeviceAddress(hostSampled_));

  std::vector<int32_t> seqlens(positions.begin(), positions.end());
  StageInputs(tokens, positions, seqlens, {});
  CheckCuda(cudaMemcpyAsync(sampleIndexDevice_, sampleIndex.data(), sizeof(int32_t) * rows, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  // Step k: its batch's copy on the side stream, the graph, the argmax (where a row takes it) and the
  // sampler on its logits once the copy is in, the chosen ids written as step k + 1's inputs and into
  // slot k % 2 of the pinned buffers (no copy queued behind the step), and an event.
  const bool argmaxRows = sampledRows < static_cast<size_t>(rows);
  bool timed[2] = {};
  RunTime time;
  auto queue = [&](int step) {
    const SampleBatch& batch = batches[step % 2];
    if (batch.rows.size() != sampledRows) throw std::logic_error("decodeChosen's batches must keep their rows from step to step");
    if (SampleStagingBytes(batch) > batchBytes) throw std::logic_error("decodeChosen's batches may not take penalty pairs or more than a ban per row");
    void* const* events = events_[step % 2];
    char* staged = static_cast<char*>(chosenStaging_) + (step % 2) * slotBytes;
    auto staging = static_cast<cudaEvent_t>(stagedEvents_[step % 2]);
    if (sampledRows > 0) {
      StageSampleBatch(batch, hostBatches_[step % 2], staged, sideStream_);
      CheckCuda(cudaGetLastError(), "the sampler batch's copy");
      CheckCuda(cudaEventRecord(staging, static_cast<cudaStream_t>(sideStream_)), "cudaEventRecord");
    }
    timed[step % 2] = LaunchGraph(rows, events, step % kTimedEvery == 0);
    if (argmaxRows) ArgmaxRowsDevice(logits_, options_.floatType, rows, options_.vocab, argmaxDevice_, stream_);
    if (sampledRows > 0) {
      CheckCuda(cudaStreamWaitEvent(stream, staging, 0), "cudaStreamWaitEvent");
      SampleStagedRowsDevice(logits_, options_.floatType, options_.vocab, batch, staged, sampleWork_, sampleMass_, sampledDevice_, stream_);
    }
    AdvanceChosenDevice(argmaxDevice_, sampledDevice_, sampleIndexDevice_, rows, idsDevice_, positionsDevice_, seqlensDevice_, stream_,
                        argmaxRows ? hostIdsDevice + (step % 2) * slots : nullptr, sampledRows > 0 ? hostSampledDevice + (step % 2) * slots : nullptr);
    CheckCuda(cudaGetLastError(), "decodeChosen's kernels");
    CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(events[2]), stream), "cudaEventRecord");
  };
  int steps = 0;
  bool stopping = false;
  queue(0);
  for (int step = 0; step < maxSteps; step++) {
    const bool more = !stopping && step + 1 < maxSteps;
    if (more) {
      batches[(step + 1) % 2] = SampleBatch{};
      sampleStep(step + 1, batches[(step + 1) % 2]);
      queue(step + 1);
    }
    void* const* events = events_[step % 2];
    CheckCuda(cudaEventSynchronize(static_cast<cudaEvent_t>(events[2])), "cudaEventSynchronize");
    AddStepTime(time, events, timed[step % 2]);
    onStep(step, hostIds_ + (step % 2) * slots, hostSampled_ + (step % 2) * slots);
    steps++;
    if (!more) break;
    if (AgreedStop()) stopping = true;
  }
  AddRunTime(time, steps);
  callMs_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return steps;
}
#else
int SlotDecoder::DecodeChosenOnDevice(const std::vector<int64_t>&, const std::vector<int64_t>&, int, const StepSample&, const StepChosen&) {
  throw std::logic_error("CUDA graphs need a build with CUDA");
}
#endif

}  // namespace chorus
