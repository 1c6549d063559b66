// The native engine's model runner: the slot decoder (onnx/decoder_model_slots.onnx) on ONNX Runtime,
// with every layer's key and value cache preallocated as [slots, kv_heads, max_length, head_dim]
// buffers where the session runs (GPU memory with CUDA), bound through IoBinding as both past and
// present so that GroupQueryAttention writes each row's new keys in place. A step sends token ids and
// lengths in and brings back only the chosen ids (the argmax of each row's logits, taken where the
// logits are) and the logits of the rows the caller asks for.
//
// Paged (blockSize > 0, a decoder built with PagedAttention, paged-attention.h): every layer's cache is
// a pool of blocks [blocks, kv_heads, block_size, head_dim] instead, and each step row reads and writes
// the blocks its row of the block table names (setBlockTable; the caller allocates them). On CUDA with
// blocks 0 the pool is sized at load from the GPU's memory: what is left after the weights and
// `reserveBytes` (activations), up to `memoryUtilization` of the device.
//
// Encoder-decoders (an encoder model given): the encoder (onnx/encoder_model_slots.onnx) runs once per
// request and its cross-attention keys and values go into a second cache of slots, [slots,
// source_length, heads * head_dim] per layer; the decoder's own cache is [slots, max_length, heads *
// head_dim] (position-major, as SlotAttention reads it, slot-attention.h), and every step is one token
// per row.
#pragma once

#include <onnxruntime_cxx_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "beam-run.h"
#include "kernels.h"
#include "rank-group.h"
#include "sampling.h"

namespace chorus {

struct SlotDecoderOptions {
  std::string model;
  bool cuda = false;
  int deviceId = 0;
  int slots = 8;
  int maxLength = 1024;
  int layers = 0;
  int kvHeads = 0;
  int headDim = 0;
  int vocab = 0;
  FloatType floatType = FloatType::kFloat32;
  int intraOpThreads = 0;
  // CPU: whether ONNX Runtime's intra-op threads spin between a run's parallel sections (its default).
  bool intraOpSpinning = true;
  // CUDA: capture each batch size's decode step (the session's run) as a CUDA graph on first use and
  // launch it after (inputs in fixed device buffers; the step's length limit is the slot's length).
  // Greedy runs then go on without the host: each step's argmax writes the next step's inputs on the
  // device, and the next step is queued before the host reads this one's ids.
  bool cudaGraph = false;
  // CUDA provider options as ONNX Runtime names them (gpu_mem_limit, arena_extend_strategy, ...).
  std::map<std::string, std::string> cudaOptions;
  // Encoder-decoders: the encoder's model, and the most source tokens a slot holds.
  std::string encoderModel;
  int sourceLength = 0;
  // Paged: tokens a block holds (0: slots), blocks in the pool (0 on CUDA: planned from the GPU's
  // memory; on the CPU: slots x the blocks of maxLength), the fraction of the device's memory the
  // process may take, and the activations' reserve left out of the cache.
  int blockSize = 0;
  int blocks = 0;
  // A cache of slots on CUDA with graphs: slots past `slots` that only the decoder's own prefills use
  // (a run's joining rows prefill there as a captured graph, then move to their own slots).
  int stagingSlots = 0;
  double memoryUtilization = 0.9;
  double reserveBytes = 0;
  // Tensor parallelism: ranks 1..N-1's models (rank r's at rankModels[r - 1]) and, on CUDA, their
  // devices; this decoder's model is rank 0's. The most milliseconds a rank waits for the others (in a
  // collective, or for rank 0's step) before the group is aborted and the call fails.
  std::vector<std::string> rankModels;
  std::vector<int> rankDevices;
  double rankTimeoutMs = 120000;
};

// The device's memory as cudaMemGetInfo gives it, in bytes.
struct DeviceMemory {
  double free = 0;
  double total = 0;
};
// The memory of CUDA device `device` (zeros without CUDA).
DeviceMemory DeviceMemoryOf(int device);

// What a step gives back: each row's argmax, the requested rows' logits widened to float32, and the
// choices of the rows it sampled (in the order of the sample batch's rows).
struct StepResult {
  std::vector<int32_t> argmax;
  std::vector<float> logits;
  std::vector<SampleResult> sampled;
};

// A greedy run's step as it ends: its index and each row's id.
using StepIds = std::function<void(int step, const int32_t* ids, int rows)>;
// A beam run's step as it is chosen: each row's continuations and the row it continues (rows of each).
using StepBeams = std::function<void(int step, const SampleResult* continuations, const int32_t* parents, int rows)>;

// A run's sampler batch for its step `step` (the same rows every step; draws taken in step order).
using StepSample = std::function<void(int step, SampleBatch& batch)>;
// A run's step as the host has it: each row's argmax, and the sampler rows' choices in batch order.
using StepChosen = std::function<void(int step, const int32_t* argmax, const SampleResult* sampled)>;

// A request that joins a DecodeChosen run under way: every token of its prompt but the last is
// prefilled into `slot` behind the steps already queued, and the last is its input in the run's next
// step. The slot is a row's the caller no longer reads (one that ended) or the next past the run's rows.
struct JoinRow {
  int slot = 0;
  std::vector<int64_t> prompt;
};
// What a DecodeChosen run takes in before its step `step` is queued (StepJoin): rows that join, or
// `stop` (the run ends with the steps already queued; nothing joins).
struct StepJoins {
  std::vector<JoinRow> rows;
  bool stop = false;
};
using StepJoin = std::function<void(int step, StepJoins& joins)>;

// Greedy steps run back to back: tokens[k * rows + r] is row r's token of step k.
struct GreedyRun {
  std::vector<int32_t> tokens;
  int steps = 0;
};

// Beam searches stepped back to back: for each step k and row r, continuations[k * rows + r] (the
// row's beam continuations; empty for rows outside every group) and parents[k * rows + r] (the row it
// continues: its slot was copied from there after the step).
struct BeamRun {
  std::vector<SampleResult> continuations;
  std::vector<int32_t> parents;
  int steps = 0;
};

class SlotDecoder {
 public:
  explicit SlotDecoder(const SlotDecoderOptions& options);
  ~SlotDecoder();
  SlotDecoder(const SlotDecoder&) = delete;
  SlotDecoder& operator=(const SlotDecoder&) = delete;

  // Runs `ids` (`prompts` prompts of one length, one after another) into slots slot, slot + 1, ...
  // from position 0; the result has a row per prompt.
  StepResult Prefill(int slot, const std::vector<int64_t>& ids, const std::vector<int32_t>& logitRows, const SampleBatch& sample, int prompts = 1);
  // Runs prompts of different lengths into slots slot, slot + 1, ... Each row is its prompt
  // right-padded with its last token (the padding is written past the prompt, where the row's later
  // steps write over it before reading there). Where the model's head takes each row's own last
  // position (OneRunPrefill()), in one run: every prompt whole, padded to the longest, the logits taken
  // at each row's last token. Otherwise in two: every prompt but its last token, padded to the longest
  // of those, then each prompt's last token at its own position (from slot 0 with CUDA graphs, the
  // captured decode step of its batch size). The result has a row per prompt. `width`: the (first)
  // run's least width (a caller's shape bucket: ONNX Runtime meets fewer new shapes), at most the
  // slot's length (less 1 for two runs).
  StepResult PrefillRagged(int slot, const std::vector<std::vector<int64_t>>& prompts, const std::vector<int32_t>& logitRows, const SampleBatch& sample, int width = 0);
  // Whether PrefillRagged runs once: the model takes `last_index` (its head reads each row's logits at
  // a position of its own), on a cache of slots, unless CHORUS_PREFILL_ONE_RUN=0 (to compare).
  bool OneRunPrefill() const;
  // Encoder-decoders: encodes rows (sources right-padded to `width`, ids row after row, each of
  // lengths[r] tokens) into the cross-attention slots firstSlot, firstSlot + 1, ...
  void Encode(int firstSlot, const std::vector<int64_t>& ids, int width, const std::vector<int32_t>& lengths);
  // One token for each of rows 0..n-1: `tokens[r]` at position `positions[r]` (the row's length so far).
  // The rows of `sample` are processed and chosen where the logits are (sampling.h). Encoder-decoders
  // give each row's source length.
  // With `banned`, row r's argmax passes over id banned[r] (-1: none).
  StepResult Decode(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, const std::vector<int32_t>& logitRows,
                    const SampleBatch& sample, const std::vector<int32_t>& sourceLengths = {}, const std::vector<int32_t>& banned = {});
  // Greedy steps back to back without returning: each row's argmax is its next input, until every row
  // has stopped (any of `endIds`, or `remaining[r]` tokens; rows of 0 run along unread), `maxSteps`, or an
  // Interrupt() (from any thread; the run stops after the step under way, or with CUDA graphs after the
  // one queued behind it). Rows keep their places.
  // `minLeft[r]` (empty: none): the steps for which row r may not take the end id (its min_length; with
  // minLeft, at most one end id: the argmax passes over one id).
  // `onStep` (when given) gets each step's ids (a row each) as soon as the host has them, while the
  // run goes on; the result still holds every step's.
  GreedyRun DecodeGreedy(std::vector<int64_t> tokens, std::vector<int64_t> positions, const std::vector<int32_t>& remaining,
                         const std::vector<int32_t>& endIds, int maxSteps, const std::vector<int32_t>& sourceLengths = {}, const std::vector<int32_t>& minLeft = {}, const StepIds& onStep = nullptr);
  // Beam searches (each group `width` consecutive rows, generated >= 1) stepped back to back without
  // returning: each step samples every beam's 2 x width best continuations where the logits are,
  // chooses the next beams here (beam-run.h), moves the slots of beams that continue another and feeds
  // the chosen tokens. Rows outside every group run along unread. Stops after the step in which a group
  // finishes, at `maxSteps`, or at an Interrupt(). `onStep` (when given) gets each step's continuations
  // and parents as soon as they are chosen, while the run goes on; the result still holds every step's.
  BeamRun DecodeBeams(std::vector<int64_t> tokens, std::vector<int64_t> positions, std::vector<BeamGroup> groups, int maxSteps,
                      const std::vector<int32_t>& sourceLengths = {}, const StepBeams& onStep = nullptr);
  // Steps back to back where every row's token is chosen in the step and is its next input: the
  // sampler's for the rows of each step's batch (`sampleStep` fills it, the same rows every step, its
  // draws in step order), the argmax for the others. With CUDA graphs each step is queued, its batch
  // staged from pinned memory, before the host reads the one before it. Stops at maxSteps or an
  // Interrupt() (after the step under way, or with CUDA graphs the one queued behind it, which is read
  // and handed on too). onStep gets each step's results as the host has them; returns the steps run.
  // `join` (where given and joins() holds) is asked before each step after the first is queued: rows
  // that join take part from that step on (the step's batch from sampleStep then has them), and the
  // run's rows grow by those past its last; without it, or where it says stop, the run goes on or ends
  // as above. The run also ends before any row's slot would overflow.
  int DecodeChosen(std::vector<int64_t> tokens, std::vector<int64_t> positions, int maxSteps, const StepSample& sampleStep, const StepChosen& onStep,
                   const StepJoin& join = nullptr);
  // Whether DecodeChosen takes rows in as it runs (one rank, a cache of slots, decoder-only).
  bool joins() const { return ranks_ == nullptr && group_ == nullptr && !paged() && !seq2seq(); }
  // How many joining rows prefill as one (the staging slots; 1 without).
  int joinGroup() const { return std::max(1, options_.stagingSlots); }
  // The end-id bans a joining row may bring to a DecodeChosen run's sampler batches (its min_length's).
  static constexpr size_t kJoinBans = 2;
  // Asks a DecodeGreedy, DecodeChosen or DecodeBeams under way (or the next one) to stop after its current step.
  void Interrupt() { interrupt_.store(true); }
  // Takes back an Interrupt() no run has met yet (its cause already seen to).
  void ClearInterrupt() { interrupt_.store(false); }
  // Copies slot caches: dst[i] <- src[i], the first lengths[i] positions, reading every source before
  // writing any destination (so a permutation of rows is safe); encoder-decoders' cross-attention slots
  // too, their first sourceLengths[i] positions (0: left as they are).
  void CopySlots(const std::vector<int32_t>& src, const std::vector<int32_t>& dst, const std::vector<int32_t>& lengths,
                 const std::vector<int32_t>& sourceLengths = {});
  bool seq2seq() const { return !options_.encoderModel.empty(); }
  // Paged: the block table, slots x blocksPerRow() block ids (row r's position j in block
  // table[r * blocksPerRow() + j / blockSize]); read by the next step.
  void SetBlockTable(const std::vector<int32_t>& table);
  // Paged: copies whole blocks, dst[i] <- src[i], in every layer's keys and values; no destination may
  // be a source.
  void CopyBlocks(const std::vector<int32_t>& src, const std::vector<int32_t>& dst);
  bool paged() const { return options_.blockSize > 0; }
  int blocksPerRow() const { return paged() ? (options_.maxLength + options_.blockSize - 1) / options_.blockSize : 0; }
  // Paged: the pool's blocks, and the device's memory when it was planned.
  int cacheBlocks() const { return options_.blocks; }
  const DeviceMemory& plannedMemory() const { return planned_; }

  const SlotDecoderOptions& options() const { return options_; }
  // Milliseconds spent so far inside ONNX Runtime's runs (with CUDA graphs, the graphs' time on the
  // GPU), and inside this class's calls in all.
  double sessionMs() const { return sessionMs_; }
  double callMs() const { return callMs_; }
  // Why CUDA graphs were turned off for this decoder (a capture that failed); empty while they are on.
  const std::string& graphFailure() const { return graphFailure_; }
  size_t cacheBytes() const { return cacheBytes_; }
  // Tensor parallelism: the ranks (1 without), and each rank's cache bytes (rank 0's first).
  int world() const { return ranks_ ? ranks_->group->world() : 1; }
  std::vector<size_t> rankCacheBytes() const;

 private:
  // Rank 0's group and the other ranks' decoders.
  struct Ranks {
    std::unique_ptr<RankGroup> group;
    std::vector<std::unique_ptr<SlotDecoder>> followers;
  };
  // Makes the session, the cache and the buffers (the constructor's work, on the rank's own thread).
  void Load();
  // Tensor parallelism (slot-decoder-ranks.cc): the group, every rank loaded at once (this one too),
  // and at the end every other rank closed on its own thread.
  void LoadRanks();
  void CloseRanks();
  // Gives back the session, the cache, the buffers and the stream (the destructor's work, and a failed
  // load's).
  void Release();
  // Destroys the captured steps. NCCL's communicators are not destroyed while a graph that captured
  // their collectives lives (ncclCommDestroy waits for every one), so a split decoder's go first.
  void DropGraphs();
  // Rank 0 at the start of a public call: whether the call is to run on every rank (OnRanks).
  bool Fans() const { return ranks_ != nullptr && !fanned_; }
  // Runs call(d) for every rank's decoder d at once (rank 0's on this thread), each with its own
  // rank's context; rank 0's result.
  template <typename Call>
  auto OnRanks(Call&& call) -> decltype(call(std::declval<SlotDecoder&>()));
  // Whether a run stops after this step: Interrupt() asked rank 0, as every rank learns from it.
  bool AgreedStop();
  // A step of `rows` rows from `firstSlot`: a session run bound at the host's inputs, or with `graph`
  // (a decode step, from slot 0) the inputs staged and the captured graph launched, sized to the whole
  // slot (`total` unused); then each row's argmax (unless `argmax` is false), the logits asked for and
  // the sampled rows' choices.
  // `lastIndex` (models that take it; empty: zeros): each row's position its logits are taken at.
  StepResult Run(int firstSlot, int rows, int sequence, const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                 const std::vector<int32_t>& seqlens, int total, const std::vector<int32_t>& logitRows, const SampleBatch& sample, bool graph,
                 const std::vector<int32_t>& sourceLengths = {}, const std::vector<int32_t>& banned = {}, bool argmax = true,
                 const std::vector<int32_t>& lastIndex = {});
  // Checks that the logits and the sampled rows asked of a step of `rows` rows are among them.
  static void CheckStepRows(int rows, const std::vector<int32_t>& logitRows, const SampleBatch& sample);
  // What a run of `rows` rows gives back once its logits are written (or queued): each row's argmax
  // (unless `argmax` is false; passing over banned[r]), the sampled rows' choices and the logits asked
  // for; with `timed`, the graph time between events_[0][0] and events_[0][1] added to sessionMs_.
  StepResult Collect(int rows, const std::vector<int32_t>& logitRows, const SampleBatch& sample, bool timed, const std::vector<int32_t>& banned, bool argmax);
  // A checked decode step of one token per row (Decode's, and each of DecodeBeams' steps): Run from slot
  // 0, with the decoder's graphs when it has them.
  StepResult Step(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, const std::vector<int32_t>& logitRows, const SampleBatch& sample,
                  const std::vector<int32_t>& sourceLengths, const std::vector<int32_t>& banned, bool argmax);
  // Where a step's inputs are: host vectors' data, or the graphs' device buffers.
  struct StepInputs {
    const int64_t* ids;
    const int64_t* positions;
    const int32_t* seqlens;
    const int32_t* sourceLengths;
    const int32_t* total;  // host memory always
    bool onDevice;
    // Models that take last_index: each row's position the head reads (null: the zeros of
    // lastIndexZeros_, a stable device address for the captured steps, which read none).
    const int32_t* lastIndex = nullptr;
  };
  // Binds a step of `rows` rows from `firstSlot` (`sequence` tokens each): its inputs, the slots'
  // caches as past and present, and the logits. `values` keeps the bound tensors alive.
  void BindStep(Ort::IoBinding& io, std::vector<Ort::Value>& values, int firstSlot, int rows, int sequence, const StepInputs& inputs);
  // Copies a decode step's inputs from the host to the graphs' device buffers.
  void StageInputs(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions, const std::vector<int32_t>& seqlens,
                   const std::vector<int32_t>& sourceLengths);
  // Queues the captured decode step of `rows` rows (capturing it first when new), timed by events[0..1]
  // unless `timed` is false (a launch of a graph already captured then records no events); true where
  // it recorded them. Where a capture fails, the graphs are off for good (graphFailure() says why) and
  // each step runs as RunBoundStep.
  bool LaunchGraph(int rows, void* const* events, bool timed = true);
  // A decode step of `rows` rows as a session run bound at the graphs' device buffers.
  void RunBoundStep(int rows);
  // Captures that step as a graph into *exec (a cudaGraphExec_t); the cause where the capture failed
  // (the stream may then still be capturing), else empty.
  std::string CaptureStep(int rows, void** exec);
  // A run of `rows` rows of `sequence` tokens from slot 0 bound at device inputs (`total`: its
  // total_sequence_length), run plainly or captured into *exec (then as CaptureStep).
  void RunBound(int firstSlot, int rows, int sequence, int32_t total, const StepInputs& inputs);
  std::string CaptureBound(int firstSlot, int rows, int sequence, int32_t total, const StepInputs& inputs, void** exec);
  // A ragged prefill's (first) run from slot 0 (rows x width tokens, each row's seqlens width - 1) as a
  // captured CUDA graph of its shape (captured at its first run): false where it does not go that way
  // (no graphs, a group of ranks, a shape past kPrefillGraphTokens, or a capture that failed before),
  // and the caller runs it. `lastIndex` (rows of it, or null: zeros) goes to models that take it.
  bool PrefillGraph(int firstSlot, int rows, int width, const int64_t* ids, const int64_t* positions, const int32_t* seqlens, const int32_t* lastIndex = nullptr);
 public:
  // Captures the graphs joining prompts of up to `width` tokens prefill with (the staging slots', from
  // ContinuousCore::WarmPrefills, so that no run captures one); false where joins do not go that way.
  bool WarmJoin(int width);

 private:
  // The prefill runs captured as graphs: at most this many tokens (past it the GPU's work hides the
  // session's launches).
  static constexpr int kPrefillGraphTokens = 1024;
  // At most this many shapes keep a graph (the core's buckets take about 60); others run op by op.
  static constexpr size_t kMaxPrefillGraphs = 128;
  // The greedy run of the graphs: see DecodeGreedy.
  GreedyRun DecodeGreedyOnDevice(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, const std::vector<int32_t>& remaining,
                                 const std::vector<int32_t>& endIds, int maxSteps, const std::vector<int32_t>& sourceLengths, const std::vector<int32_t>& minLeft, const StepIds& onStep);
  // DecodeChosen's run with CUDA graphs (slot-decoder-chosen.cc).
  int DecodeChosenOnDevice(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, int maxSteps, const StepSample& sampleStep,
                           const StepChosen& onStep, const StepJoin& join);
  // Checks a run's joins (`rows` rows so far, `step` the step they join at) and sorts them by slot;
  // returns the rows the run has with them, and lowers maxSteps to the steps their slots hold.
  int CheckJoins(std::vector<JoinRow>& joins, int rows, int step, int& maxSteps) const;
  // Prefills each joining row's prompt but its last token into its slot, contiguous slots of equal
  // width together (the core's buckets: widths a multiple of 32, groups of a power of two rows). On
  // the host the runs are done when it returns; with CUDA graphs they are queued on the step stream,
  // their inputs staged through joinHost_[parity].
  void PrefillJoins(const std::vector<JoinRow>& joins, int parity);
  // CUDA graphs: the joined rows' first inputs (last prompt token, its position and seqlens) into the
  // step's device buffers, and `sampleIndex` (rows of it) where the batch's rows changed, through
  // joinHost_[parity] (its inputs part).
  void StageJoinInputs(const std::vector<JoinRow>& joins, const std::vector<int32_t>* sampleIndex, int parity);
  // joinHost_'s part for StageJoinInputs (the prefills' come after it), and both steps' staging grown
  // to `hostBytes` (the stream drained first) and joinDevice_ to `deviceBytes`.
  size_t JoinInputsBytes() const;
  void ReserveJoinStaging(size_t hostBytes, size_t deviceBytes);
  // Checks a decode of tokens.size() rows for `steps` steps from `positions`.
  void CheckRows(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, const std::vector<int32_t>& sourceLengths, int steps) const;
  // CUDA: makes this decoder's device the calling thread's (steps come on any worker thread).
  void UseDevice();
  // Adds a graph's time between events[0] and events[1] (both done) to sessionMs_.
  void AddGraphTime(void* const* events);
  // Runs of steps time one step in kTimedEvery (timing events cost the GPU a few microseconds a step)
  // and count the run's graph time as the timed steps' mean times its steps.
  static constexpr int kTimedEvery = 8;
  struct RunTime {
    double ms = 0;
    int timed = 0;
  };
  // Adds the graph time of a step (events[0..1], both done) to `time` where `timed`.
  static void AddStepTime(RunTime& time, void* const* events, bool timed);
  // The run's estimate of graph time over `steps` steps, added to sessionMs_.
  void AddRunTime(const RunTime& time, int steps);
  // Pinned host memory the kernels write into: its device address (hostIds_ and hostSampled_ are
  // allocated mapped).
  static void* DeviceAddress(void* host);
  // CopySlots' copies queued (on the CPU, done) without waiting for them; the arguments checked.
  // `pinned` (CUDA, optional): pinned memory of 6 ints a copy the index arrays go over through.
  void QueueCopies(const std::vector<int32_t>& src, const std::vector<int32_t>& dst, const std::vector<int32_t>& lengths, const std::vector<int32_t>& sourceLengths,
                   int32_t* pinned = nullptr);
  // Moves the first lengths[i] positions of slots src[i] to dst[i] in each of the `bufferCount` buffers from
  // `buffers` (slots of `slotBytes`, each `heads` blocks `pitch` apart of `rowBytes` per position),
  // through the scratch.
  void MoveSlots(void* const* buffers, int bufferCount, size_t slotBytes, int heads, size_t pitch, size_t rowBytes, const std::vector<int32_t>& src,
                 const std::vector<int32_t>& dst, const std::vector<int32_t>& lengths);
  // CUDA: the same for the `buffers` buffers of the device `table`, the copies' sources, destinations,
  // lengths and scratch starts staged in copyIndex_ (lengths and starts from copyIndex_ + lengthsAt *
  // count), `positions` in all: two launches for all the buffers the scratch holds at once.
  void MoveSlotsDevice(void* const* table, int buffers, size_t slotBytes, int heads, size_t pitch, size_t rowBytes, int count, int lengthsAt, size_t positions);
  // The sampler on the step's logits: on the host, its results in result.sampled; with CUDA, queued
  // (the results left in sampledDevice_ for the caller to fetch).
  void Sample(const SampleBatch& sample, StepResult& result);
  // Paged on CUDA with no blocks given: the pool's blocks from the device's memory now (the weights
  // loaded) and `before` the session.
  void PlanBlocks(const DeviceMemory& before);
  // Paged: the block table to the device when it changed (CUDA), before a step reads it.
  void StageBlockTable();
  void* Allocate(size_t bytes);
  void Free(void* p);
  // Makes `buffer` hold at least `need` bytes: when `capacity` is short, a new one of `grow` bytes.
  void Reserve(void*& buffer, size_t& capacity, size_t need, size_t grow);
  void CopyStrided(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width, size_t height);
  void ToHost(void* dst, const void* src, size_t bytes);

  SlotDecoderOptions options_;
  Ort::Env env_;
  std::unique_ptr<Ort::Session> session_;
  Ort::MemoryInfo memory_{nullptr};
  Ort::MemoryInfo cpu_{nullptr};
  size_t elementBytes_ = 4;
  size_t slotBytes_ = 0;  // one slot of one layer's key (or value)
  size_t cacheBytes_ = 0;
  double sessionMs_ = 0;
  double callMs_ = 0;
  std::atomic<bool> interrupt_{false};
  std::vector<void*> keys_;
  std::vector<void*> values_;
  // Encoder-decoders: the encoder, and each layer's cross-attention keys and values (slots of crossSlotBytes_).
  std::unique_ptr<Ort::Session> encoder_;
  std::vector<void*> crossKeys_;
  std::vector<void*> crossValues_;
  size_t crossSlotBytes_ = 0;
  std::vector<std::string> crossNames_;
  std::vector<std::string> encoderOutputNames_;
  // How CopySlots reads a slot of the decoder's cache: `copyHeads_` blocks `copyPitch_` apart of
  // `copyRowBytes_` per position.
  int copyHeads_ = 0;
  size_t copyPitch_ = 0;
  size_t copyRowBytes_ = 0;
  void* logits_ = nullptr;  // [slots, vocab]
  void* scratch_ = nullptr;  // CopySlots' staging, grown as needed
  size_t scratchBytes_ = 0;
  int32_t* copyIndex_ = nullptr;  // CUDA: CopySlots' sources, destinations, lengths and scratch starts on the device
  std::vector<void*> cacheBuffers_;  // every cache buffer: keys and values per layer, then cross-attention's
  void** bufferTable_ = nullptr;     // CUDA: cacheBuffers_ on the device
  int32_t* argmaxDevice_ = nullptr;
  int32_t* bannedDevice_ = nullptr;
  // The sampler's buffers, allocated when first needed: processed logits (slots x vocab floats), the
  // batch's parameters as copied in, and the choices.
  float* sampleWork_ = nullptr;
  // CUDA: the sampler's probabilities, slots x vocab doubles.
  double* sampleMass_ = nullptr;
  void* sampleStaging_ = nullptr;
  size_t sampleStagingBytes_ = 0;
  std::vector<char> sampleHostStaging_;
  SampleResult* sampledDevice_ = nullptr;
  // CUDA graphs: the decode step's inputs at fixed device addresses, each batch size's captured step
  // (cudaGraphExec_t), and for greedy runs each row's steps left under min_length, two steps' ids in
  // pinned host memory, and per step slot: events before and after the graph, and after the ids' copy.
  int64_t* idsDevice_ = nullptr;
  int64_t* positionsDevice_ = nullptr;
  int32_t* seqlensDevice_ = nullptr;
  int32_t* sourceLengthsDevice_ = nullptr;
  int32_t* minLeftDevice_ = nullptr;
  std::map<int, void*> graphs_;
  // Tensor parallelism: the group's epoch the graphs were captured in (rank-group.h).
  uint64_t graphEpoch_ = 0;
  std::string graphFailure_;
  // The ragged prefills' first runs from slot 0 as graphs, by (rows, width), their inputs' device
  // buffers (kPrefillGraphTokens ids and positions, a seqlens per slot), and why a capture failed (the
  // prefill graphs are then off; the decode steps' are not).
  std::map<std::tuple<int, int, int>, void*> prefillGraphs_;  // by (first slot, rows, width)
  int64_t* prefillIdsDevice_ = nullptr;
  int64_t* prefillPositionsDevice_ = nullptr;
  int32_t* prefillSeqlensDevice_ = nullptr;
  int32_t* prefillLastIndexDevice_ = nullptr;
  std::string prefillGraphFailure_;
  // The model takes last_index (its head's Linear reads each row's logits at the position it names),
  // and the zeros bound as it where no run reads them (a decode step's one position) or its logits are
  // left unread (slots and staging slots of them, where the session runs).
  bool takesLastIndex_ = false;
  int32_t* lastIndexZeros_ = nullptr;
  int32_t* hostIds_ = nullptr;
  // DecodeChosen with CUDA graphs: two steps' sampler choices and sampler batches in pinned memory, and
  // each row's index in the batch (-1: the argmax) on the device.
  SampleResult* hostSampled_ = nullptr;
  char* hostBatches_[2] = {};
  size_t hostBatchBytes_ = 0;
  // The batches' copies run on a stream of their own, queued with their step (the step's sampler waits
  // for stagedEvents_[k % 2]), into slot k % 2 of chosenStaging_.
  void* chosenStaging_ = nullptr;
  size_t chosenStagingBytes_ = 0;
  void* sideStream_ = nullptr;
  void* stagedEvents_[2] = {};
  int32_t* sampleIndexDevice_ = nullptr;
  // DecodeChosen's joins with CUDA graphs: two steps' staging in pinned memory (each a step's joins'
  // inputs, then the prefills' ids, positions and seqlens), and the prefills' inputs on the device.
  char* joinHost_[2] = {};
  size_t joinHostBytes_ = 0;
  void* joinDevice_ = nullptr;
  size_t joinDeviceBytes_ = 0;
  void* events_[2][3] = {};
  void* stream_ = nullptr;
  // Paged: the block table on the host, and where the step reads it (device memory with CUDA).
  std::vector<int32_t> blockTable_;
  int32_t* blockTableDevice_ = nullptr;
  bool blockTableStale_ = false;
  size_t blockBytes_ = 0;  // one block of one layer's key (or value)
  DeviceMemory planned_;
  std::vector<std::string> pastNames_;
  std::vector<std::string> presentNames_;
  // Tensor parallelism: rank 0's group and followers; every rank's group and index; and on rank 0,
  // whether the call under way already runs on every rank.
  std::unique_ptr<Ranks> ranks_;
  RankGroup* group_ = nullptr;
  int rank_ = 0;
  bool fanned_ = false;
};

template <typename Call>
auto SlotDecoder::OnRanks(Call&& call) -> decltype(call(std::declval<SlotDecoder&>())) {
  using Result = decltype(call(std::declval<SlotDecoder&>()));
  struct Fanned {
    explicit Fanned(bool& flag) : flag_(flag) { flag_ = true; }
    ~Fanned() { flag_ = false; }
    bool& flag_;
  } fanned(fanned_);
  auto decoder = [this](int rank) -> SlotDecoder& { return rank == 0 ? *this : *ranks_->followers[rank - 1]; };
  if constexpr (std::is_void_v<Result>) {
    ranks_->group->Run([&](int rank) { call(decoder(rank)); });
  } else {
    Result result{};
    ranks_->group->Run([&](int rank) {
      if (rank == 0) {
        result = call(decoder(rank));
      } else {
        call(decoder(rank));
      }
    });
    return result;
  }
}

}  // namespace chorus
