// SlotDecoder::DecodeChosen: steps back to back where each row's token is chosen in the step (the
// sampler's or the argmax) and fed to the next one, on the host step by step, or with CUDA graphs
// queued a step ahead of the host; requests join the run as it goes (StepJoin), their prompts
// prefilled behind the steps already queued.
#include <onnxruntime_run_options_config_keys.h>

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

namespace {

// Joining rows' prefills go in widths of a multiple of this (as the continuous core's admissions,
// whose shapes its warm-up has run) and in groups of a power of two rows: contiguous slots where they
// run in their own slots, any where they run in the staging slots.
constexpr int kJoinWidthStep = 32;

// A prefill of joins[first, first + count), `width` tokens a row, in a run of `rows` rows (a power of
// two: rows past `count` repeat the last one's prompt, and are dropped).
struct JoinRun {
  size_t first = 0;
  size_t count = 0;
  int width = 0;
  size_t rows = 0;
};

// A prompt's prefill width (all but its last token) as the buckets round it.
int JoinWidth(size_t prompt, int maxLength) {
  return std::min(static_cast<int>((prompt - 1 + kJoinWidthStep - 1) / kJoinWidthStep * kJoinWidthStep), maxLength - 1);
}

// The prefills of `joins`, at most `most` rows each (a power of two). Sorted by slot, runs of
// contiguous slots of their own size; with `anySlots`, sorted longest first, runs of any slots padded
// up to a power of two rows, as many as keep the padded tokens within twice the prompts' own. A group
// whose prompts are all one token needs none.
std::vector<JoinRun> JoinRuns(const std::vector<JoinRow>& joins, int maxLength, size_t most, bool anySlots) {
  std::vector<JoinRun> runs;
  size_t i = 0;
  while (i < joins.size()) {
    size_t count = 1;
    size_t rows = 1;
    if (anySlots) {
      const size_t width = static_cast<size_t>(JoinWidth(std::max<size_t>(joins[i].prompt.size(), 2), maxLength));
      size_t tokens = joins[i].prompt.size() - 1;
      while (i + count < joins.size() && count < most) {
        size_t padded = rows;
        while (padded < count + 1) padded *= 2;
        if (padded * width > 2 * (tokens + joins[i + count].prompt.size() - 1)) break;
        tokens += joins[i + count].prompt.size() - 1;
        rows = padded;
        count++;
      }
    } else {
      size_t contiguous = 1;
      while (i + contiguous < joins.size() && joins[i + contiguous].slot == joins[i].slot + static_cast<int>(contiguous)) contiguous++;
      while (count * 2 <= std::min(contiguous, most)) count *= 2;
      rows = count;
    }
    size_t longest = 0;
    for (size_t r = i; r < i + count; r++) longest = std::max(longest, joins[r].prompt.size());
    if (longest > 1) runs.push_back(JoinRun{i, count, JoinWidth(longest, maxLength), rows});
    i += count;
  }
  return runs;
}

// A run's ids and positions (as PrefillRagged's first run: each prompt, then its last token again as
// padding, which the row's own steps write over before reading there).
void FillJoinRun(const std::vector<JoinRow>& joins, const JoinRun& run, int64_t* ids, int64_t* positions) {
  for (size_t r = 0; r < run.rows; r++) {
    const std::vector<int64_t>& prompt = joins[run.first + std::min(r, run.count - 1)].prompt;
    for (int i = 0; i < run.width; i++) {
      ids[r * run.width + i] = prompt[std::min<size_t>(static_cast<size_t>(i), prompt.size() - 1)];
      positions[r * run.width + i] = i;
    }
  }
}

// Each row's index in the step's sampler batch (-1: the argmax).
std::vector<int32_t> BatchIndex(const SampleBatch& batch, int rows) {
  std::vector<int32_t> index(static_cast<size_t>(rows), -1);
  for (size_t i = 0; i < batch.rows.size(); i++) index[batch.rows[i]] = static_cast<int32_t>(i);
  return index;
}

}  // namespace

int SlotDecoder::CheckJoins(std::vector<JoinRow>& joins, int rows, int step, int& maxSteps) const {
  std::sort(joins.begin(), joins.end(), [](const JoinRow& a, const JoinRow& b) { return a.slot < b.slot; });
  int grown = rows;
  for (size_t i = 0; i < joins.size(); i++) {
    const JoinRow& row = joins[i];
    if (i > 0 && joins[i - 1].slot == row.slot) throw std::invalid_argument("two rows join slot " + std::to_string(row.slot));
    if (row.slot < 0 || row.slot > grown || row.slot >= options_.slots) {
      throw std::out_of_range("a row joins slot " + std::to_string(row.slot) + ": a run of " + std::to_string(grown) + " rows takes one of 0.." +
                              std::to_string(std::min(grown, options_.slots - 1)));
    }
    if (row.prompt.empty() || row.prompt.size() > static_cast<size_t>(options_.maxLength)) {
      throw std::out_of_range("a joining prompt of " + std::to_string(row.prompt.size()) + " tokens does not fit a slot of " + std::to_string(options_.maxLength));
    }
    for (int64_t id : row.prompt) {
      if (id < 0 || id >= options_.vocab) throw std::out_of_range("joining prompt id " + std::to_string(id) + " is outside the vocabulary");
    }
    if (row.slot == grown) grown++;
    // Its last prompt token is at position size - 1 in step `step`: the steps its slot holds from there.
    maxSteps = std::min(maxSteps, step + options_.maxLength - static_cast<int>(row.prompt.size() - 1));
  }
  return grown;
}

void SlotDecoder::PrefillJoins(const std::vector<JoinRow>& joins, int parity) {
  // With staging slots, as many rows at a time as they hold: prefilled there as a captured graph, then
  // moved to their own slots.
  const bool staging = options_.cuda && options_.cudaGraph && options_.stagingSlots > 0;
  std::vector<JoinRow> longestFirst;
  if (staging) {
    longestFirst = joins;
    std::stable_sort(longestFirst.begin(), longestFirst.end(), [](const JoinRow& a, const JoinRow& b) { return a.prompt.size() > b.prompt.size(); });
  }
  const std::vector<JoinRow>& ordered = staging ? longestFirst : joins;
  const std::vector<JoinRun> runs = JoinRuns(ordered, options_.maxLength, staging ? static_cast<size_t>(options_.stagingSlots) : static_cast<size_t>(options_.slots), staging);
  if (runs.empty()) return;
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda && options_.cudaGraph) {
    // Staged after the joins' step inputs (StageJoinInputs' part of joinHost_[parity]): each run's ids,
    // positions, seqlens and slot copy's index arrays. A run goes as the staging slot's captured graph
    // and a move into its slot, else (no staging slot, or a prompt past the graphs' tokens) its inputs
    // are copied to joinDevice_ and it runs there op by op. Either way nothing waits: the work is
    // queued on the step stream behind the step under way.
    auto stream = static_cast<cudaStream_t>(stream_);
    const size_t inputsBytes = JoinInputsBytes();
    const auto runBytesOf = [](const JoinRun& run) { return (run.rows * run.width * 2 * sizeof(int64_t) + run.rows * 7 * sizeof(int32_t) + 255) / 256 * 256; };
    size_t bytes = 0;
    for (const JoinRun& run : runs) bytes += runBytesOf(run);
    ReserveJoinStaging(inputsBytes + bytes, bytes);
    char* host = joinHost_[parity] + inputsBytes;
    char* device = static_cast<char*>(joinDevice_);
    Ort::RunOptions queued;
    queued.AddConfigEntry(kOrtRunOptionsConfigDisableSynchronizeExecutionProviders, "1");
    for (const JoinRun& run : runs) {
      const size_t tokens = run.rows * run.width;
      auto* ids = reinterpret_cast<int64_t*>(host);
      auto* positions = ids + tokens;
      auto* seqlens = reinterpret_cast<int32_t*>(positions + tokens);
      int32_t* copyIndex = seqlens + run.rows;
      FillJoinRun(ordered, run, ids, positions);
      std::fill(seqlens, seqlens + run.rows, run.width - 1);
      const size_t runBytes = runBytesOf(run);
      const int slot = ordered[run.first].slot;
      if (staging && PrefillGraph(options_.slots, static_cast<int>(run.rows), run.width, ids, positions, seqlens)) {
        std::vector<int32_t> from(run.count);
        std::vector<int32_t> to(run.count);
        for (size_t r = 0; r < run.count; r++) {
          from[r] = options_.slots + static_cast<int32_t>(r);
          to[r] = ordered[run.first + r].slot;
        }
        QueueCopies(from, to, std::vector<int32_t>(run.count, run.width), {}, copyIndex);
        host += runBytes;
        continue;
      }
      CheckCuda(cudaMemcpyAsync(device, host, runBytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
      const int32_t total = run.width;
      auto* deviceIds = reinterpret_cast<int64_t*>(device);
      auto* deviceSeqlens = reinterpret_cast<int32_t*>(deviceIds + 2 * tokens);
      // Contiguous slots in one run; rows of any slots (the staging path's, too long for its graphs) one by one.
      const bool contiguous = ordered[run.first + run.count - 1].slot == slot + static_cast<int>(run.count) - 1;
      for (size_t r = 0; r < (contiguous ? 1 : run.count); r++) {
        const size_t at = r * static_cast<size_t>(run.width);
        const StepInputs inputs{deviceIds + at, deviceIds + tokens + at, deviceSeqlens + r, nullptr, &total, true, nullptr};
        std::vector<Ort::Value> values;
        Ort::IoBinding io(*session_);
        BindStep(io, values, ordered[run.first + r].slot, contiguous ? static_cast<int>(run.count) : 1, run.width, inputs);
        session_->Run(queued, io);
      }
      host += runBytes;
      device += runBytes;
    }
    return;
  }
#endif
  for (const JoinRun& run : runs) {
    std::vector<int64_t> ids(run.rows * run.width);
    std::vector<int64_t> positions(ids.size());
    FillJoinRun(ordered, run, ids.data(), positions.data());
    Run(ordered[run.first].slot, static_cast<int>(run.count), run.width, ids, positions, std::vector<int32_t>(run.count, run.width - 1), run.width, {}, SampleBatch{}, false, {}, {},
        false);
  }
}

int SlotDecoder::DecodeChosen(std::vector<int64_t> tokens, std::vector<int64_t> positions, int maxSteps, const StepSample& sampleStep, const StepChosen& onStep,
                              const StepJoin& join) {
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
  const StepJoin joining = joins() ? join : nullptr;
  if (options_.cuda && options_.cudaGraph) return DecodeChosenOnDevice(tokens, positions, maxSteps, sampleStep, onStep, joining);
  size_t rows = tokens.size();
  int steps = 0;
  for (int step = 0; step < maxSteps; step++) {
    if (step > 0 && joining) {
      StepJoins joins;
      joining(step, joins);
      if (joins.stop) break;
      if (!joins.rows.empty()) {
        rows = static_cast<size_t>(CheckJoins(joins.rows, static_cast<int>(rows), step, maxSteps));
        PrefillJoins(joins.rows, 0);
        tokens.resize(rows);
        positions.resize(rows);
        for (const JoinRow& row : joins.rows) {
          tokens[row.slot] = row.prompt.back();
          positions[row.slot] = static_cast<int64_t>(row.prompt.size()) - 1;
        }
      }
    }
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
size_t SlotDecoder::JoinInputsBytes() const { return (static_cast<size_t>(options_.slots) * (2 * sizeof(int64_t) + 2 * sizeof(int32_t)) + 255) / 256 * 256; }

void SlotDecoder::ReserveJoinStaging(size_t hostBytes, size_t deviceBytes) {
  if (joinHostBytes_ < hostBytes) {
    // Copies from the other step's staging may still be queued.
    CheckCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
    const size_t grow = std::max<size_t>(hostBytes, 64 << 10);
    for (char*& staging : joinHost_) {
      if (staging != nullptr) cudaFreeHost(staging);
      staging = nullptr;
      CheckCuda(cudaMallocHost(&staging, grow), "cudaMallocHost");
    }
    joinHostBytes_ = grow;
  }
  if (deviceBytes > 0) Reserve(joinDevice_, joinDeviceBytes_, deviceBytes, std::max<size_t>(deviceBytes, 64 << 10));
}

void SlotDecoder::StageJoinInputs(const std::vector<JoinRow>& joins, const std::vector<int32_t>* sampleIndex, int parity) {
  auto stream = static_cast<cudaStream_t>(stream_);
  const size_t slots = static_cast<size_t>(options_.slots);
  ReserveJoinStaging(JoinInputsBytes(), 0);
  auto* ids = reinterpret_cast<int64_t*>(joinHost_[parity]);
  int64_t* positions = ids + slots;
  auto* seqlens = reinterpret_cast<int32_t*>(positions + slots);
  int32_t* index = seqlens + slots;
  // Each run of contiguous slots in one copy per input (the joins are sorted by slot).
  for (size_t i = 0; i < joins.size();) {
    size_t count = 1;
    while (i + count < joins.size() && joins[i + count].slot == joins[i].slot + static_cast<int>(count)) count++;
    const size_t at = static_cast<size_t>(joins[i].slot);
    for (size_t r = 0; r < count; r++) {
      const std::vector<int64_t>& prompt = joins[i + r].prompt;
      ids[at + r] = prompt.back();
      positions[at + r] = static_cast<int64_t>(prompt.size()) - 1;
      seqlens[at + r] = static_cast<int32_t>(prompt.size()) - 1;
    }
    CheckCuda(cudaMemcpyAsync(idsDevice_ + at, ids + at, sizeof(int64_t) * count, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    CheckCuda(cudaMemcpyAsync(positionsDevice_ + at, positions + at, sizeof(int64_t) * count, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    CheckCuda(cudaMemcpyAsync(seqlensDevice_ + at, seqlens + at, sizeof(int32_t) * count, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    i += count;
  }
  if (sampleIndex != nullptr) {
    std::copy(sampleIndex->begin(), sampleIndex->end(), index);
    CheckCuda(cudaMemcpyAsync(sampleIndexDevice_, index, sizeof(int32_t) * sampleIndex->size(), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  }
}

int SlotDecoder::DecodeChosenOnDevice(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, int maxSteps, const StepSample& sampleStep,
                                      const StepChosen& onStep, const StepJoin& join) {
  const auto started = std::chrono::steady_clock::now();
  int rows = static_cast<int>(tokens.size());
  auto stream = static_cast<cudaStream_t>(stream_);
  const int slots = options_.slots;
  // Step k's batch is filled into batches[k % 2] and staged from the pinned hostBatches_[k % 2]: the
  // copy of step k + 2's is queued after the host has read step k, whose copy ran before it.
  SampleBatch batches[2];
  sampleStep(0, batches[0]);
  std::vector<int32_t> sampleIndex = BatchIndex(batches[0], rows);
  // The most a step's batch takes: its rows, parameters, no pairs (the penalties need each step's
  // tokens: those rows step one at a time) and a ban per row. The buffers hold at least every slot
  // with the first batch's bans and kJoinBans more a slot (what rows that join may bring), so that
  // runs of more rows than the last do not allocate pinned and device memory anew (a millisecond or
  // more each time).
  SampleBatch widest = batches[0];
  widest.bans.assign(widest.rows.size() + widest.bans.size(), 0);
  SampleBatch slotsWide;
  slotsWide.rows.resize(slots);
  slotsWide.params.resize(slots);
  slotsWide.bans.resize(kJoinBans * static_cast<size_t>(slots) + batches[0].bans.size());
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
  bool timed[2] = {};
  RunTime time;
  auto queue = [&](int step) {
    const SampleBatch& batch = batches[step % 2];
    const size_t sampledRows = batch.rows.size();
    if (SampleStagingBytes(batch) > batchBytes) throw std::logic_error("decodeChosen's batches may not take penalty pairs, nor more bans than its first batch's and kJoinBans a slot");
    const bool argmaxRows = sampledRows < static_cast<size_t>(rows);
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
    bool more = !stopping && step + 1 < maxSteps;
    StepJoins joins;
    if (more && join) {
      // Rows that join step + 1: their prompts prefilled behind step `step` (queued), their first
      // inputs written over what its choices wrote there.
      join(step + 1, joins);
      if (joins.stop) {
        stopping = true;
        more = false;
      } else if (!joins.rows.empty()) {
        rows = CheckJoins(joins.rows, rows, step + 1, maxSteps);
        PrefillJoins(joins.rows, (step + 1) % 2);
      }
    }
    if (more) {
      SampleBatch& batch = batches[(step + 1) % 2];
      batch = SampleBatch{};
      sampleStep(step + 1, batch);
      std::vector<int32_t> index = BatchIndex(batch, rows);
      const bool indexChanged = index != sampleIndex;
      if (indexChanged) sampleIndex.swap(index);
      if (!joins.rows.empty() || indexChanged) StageJoinInputs(joins.rows, indexChanged ? &sampleIndex : nullptr, (step + 1) % 2);
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
size_t SlotDecoder::JoinInputsBytes() const { return 0; }
void SlotDecoder::ReserveJoinStaging(size_t, size_t) {}
void SlotDecoder::StageJoinInputs(const std::vector<JoinRow>&, const std::vector<int32_t>*, int) {}
int SlotDecoder::DecodeChosenOnDevice(const std::vector<int64_t>&, const std::vector<int64_t>&, int, const StepSample&, const StepChosen&, const StepJoin&) {
  throw std::logic_error("CUDA graphs need a build with CUDA");
}
#endif

}  // namespace chorus
