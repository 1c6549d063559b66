// The native engine's continuous core: a thread of its own that steps a SlotDecoder back to back
// without returning to JavaScript between steps. It admits submitted rows at step boundaries
// (prefilling the waiting ones together, whatever their lengths; into a run of steps under way
// where the decoder takes joins, without ending it), chooses every row's token in the step (the raw
// argmax, or the sampler where the logits are, with the row's own seeded stream and its penalties'
// counts kept here), retires rows at their end id, their last token or a cancellation, and moves the
// rows behind a retired one down into its slot. Each step's tokens go to `onStep` at once, all rows
// together; stop strings and the like stay with the caller, who cancels a row it ends.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sampling.h"
#include "slot-decoder.h"

namespace chorus {

// A request as the core runs it.
struct CoreRequest {
  int32_t id = 0;
  std::vector<int64_t> prompt;
  // Tokens it may take (its request_output_len), its end ids (any of them ends it; none: empty), and
  // for how many of its first tokens they are banned (min_length).
  int32_t maxTokens = 1;
  std::vector<int32_t> endIds;
  int32_t minLength = 0;
  // The raw argmax of each step's logits (every other row goes through the sampler).
  bool argmax = true;
  double temperature = 0;
  double topP = 1;
  int32_t topK = 0;
  int32_t topLogProbs = 0;
  double repetition = 1;
  double presence = 0;
  double frequency = 0;
  // mulberry32's state (src/util/random.ts): one draw a step when temperature != 0.
  uint32_t random = 0;
  // (id, output count) pairs the penalties start from: the context's ids for repetition, count 0.
  std::vector<int32_t> seen;
};

// A step's tokens (a prefill's first ones, or a decode step's): ids[i] took results[i] (the argmax's
// log-probability is 0).
struct CoreStep {
  bool prefill = false;
  // A decode step's rows that joined the run under way: their first tokens.
  int32_t joined = 0;
  std::vector<int32_t> ids;
  std::vector<SampleResult> results;
};

using CoreOnStep = std::function<void(CoreStep&& step)>;
using CoreOnError = std::function<void(const std::string& message)>;

class ContinuousCore {
 public:
  // Starts the thread; `onStep` and `onError` are called from it (after an error it stops stepping).
  ContinuousCore(SlotDecoder& decoder, CoreOnStep onStep, CoreOnError onError);
  ~ContinuousCore();
  ContinuousCore(const ContinuousCore&) = delete;
  ContinuousCore& operator=(const ContinuousCore&) = delete;

  // From any thread: a request joins at the next step boundary (as soon as a slot is free).
  void Submit(CoreRequest request);
  // From any thread: the row (running or waiting) leaves at the next step boundary.
  void Cancel(int32_t id);
  // Ends the thread after the step under way and waits for it.
  void Stop();

  // Before the core starts: runs `decoder`'s prefill shapes the core's admissions use (rows a power of
  // two up to the slots, (first) runs kPrefillWidthStep, 2 kPrefillWidthStep, ... wide), narrowest first,
  // until `budgetMs` is spent (ONNX Runtime meets each shape's first run slowly); returns how many ran.
  static int WarmPrefills(SlotDecoder& decoder, double budgetMs);

  // A uniform draw in (0, 1) from mulberry32 state `state` (advanced), as src/util/random.ts draws it.
  static double Draw(uint32_t& state);

 private:
  struct Row {
    CoreRequest request;
    int64_t token = 0;
    int64_t length = 0;
    int32_t taken = 0;
    std::unordered_map<int32_t, size_t> seenAt;
    bool penalties = false;
    // The core's own number for the row (a joined row takes an ended one's slot within a run).
    int64_t serial = 0;
    // In a run of chosen steps: the row ended (or was cancelled) and is no longer read; the step it
    // joined the run at, and its tokens taken then.
    bool ended = false;
    int startStep = 0;
    int32_t takenAtStart = 0;
    // Waiting: the Join call that first saw it (-1: none yet).
    int64_t seenAtJoin = -1;
  };

  void Loop();
  // Arrived requests to the waiting rows. Cancelled ids out of the waiting rows, and among the running
  // ones marked ended where `ended` (a run under way reads them no more), else retired at once.
  void Arrive(std::vector<CoreRequest>& arrived);
  void CancelRows(const std::vector<int32_t>& cancelled, bool ended);
  // Whether a waiting row may join a run of chosen steps (no penalties; its bans within the decoder's).
  static bool CanJoin(const Row& row);
  // ChosenSteps' admissions before its step `step`: arrivals and cancellations taken in, waiting rows
  // into ended rows' slots or past the last, or the run stopped (a waiting row that cannot join, or a
  // quarter of its rows ended and none to take their slots).
  void Join(int step, StepJoins& joins);
  // Prefills waiting requests into the free slots; false when none was waiting or fitting.
  void Admit(std::vector<Row>& waiting);
  void Step();
  // Steps of rows that all take the raw argmax with the same end ids, back to back in the decoder
  // (DecodeGreedy: with CUDA graphs, each step queued before the one before it is read).
  void GreedySteps(const std::vector<int32_t>& endIds);
  // Steps of rows without penalties, some sampled, back to back in the decoder (DecodeChosen: with
  // CUDA graphs, each step's choices feed the next on the device, queued before the host reads them).
  void ChosenSteps();
  static constexpr int64_t kMaxGreedySteps = 1024;
  // Waiting rows that join a run of chosen steps at once: from this many, the run stops and they
  // prefill together (a burst of requests).
  static constexpr size_t kJoinsAtOnce = 8;
  // With at least kHoldRows rows running, fewer waiting rows than the decoder prefills as one wait up
  // to kHoldSteps steps for more (one prefill of a few rows costs about what one of a row does).
  static constexpr size_t kHoldRows = 16;
  static constexpr int64_t kHoldSteps = 8;
  // The most tokens one admission prefills, counting each prompt padded to the group's longest (a
  // group's padded tokens are also at most twice its own).
  static constexpr size_t kPrefillTokens = 16384;
  // The ragged prefill's (first) run is a multiple of this wide (shape buckets).
  static constexpr size_t kPrefillWidthStep = 32;
  // The (first) run's width of a ragged prefill whose longest prompt is `longest` tokens: the bucket
  // of the whole prompt with one run (SlotDecoder::OneRunPrefill), up to the slot's length, or of all
  // but its last token with two, up to the slot's length less 1.
  static int PrefillWidth(size_t longest, bool oneRun, int maxLength);
  // What a run of steps starts from: each row's token and position, and the steps every row's slot
  // leaves room for (at least 1, at most kMaxGreedySteps).
  struct RunStart {
    std::vector<int64_t> tokens;
    std::vector<int64_t> positions;
    int maxSteps;
  };
  RunStart StartRun() const;
  // Records a chosen token of `row`; true when the row ends with it.
  bool Take(Row& row, const SampleResult& chosen, CoreStep& out);
  // The sampler's parameters for `row`'s step after `taken` tokens (its draw taken now), its pairs and
  // bans appended.
  SampleParams ParamsOf(Row& row, SampleBatch& batch, int32_t taken);
  // Drops the rows whose `gone` flag is set, moving those behind them down.
  void Retire(const std::vector<bool>& gone);

  SlotDecoder& decoder_;
  CoreOnStep onStep_;
  CoreOnError onError_;
  std::vector<Row> rows_;
  std::vector<Row> waiting_;
  int64_t serials_ = 0;
  int64_t joinCalls_ = 0;
  // Under mutex_: a run that takes no joins is under way (a greedy run, or chosen steps where the
  // decoder takes no joins), which an arrival or a cancellation ends after its step.
  bool stopsForArrivals_ = false;
  // Sets stopsForArrivals_ for the life of a run, and the decoder's interrupt as the run starts: set
  // where the core is stopping or (`on`) requests came first, else cleared.
  class StopsForArrivals {
   public:
    StopsForArrivals(ContinuousCore& core, bool on);
    ~StopsForArrivals();

   private:
    ContinuousCore& core_;
    bool on_;
  };

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<CoreRequest> inbox_;
  std::vector<int32_t> cancels_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace chorus
