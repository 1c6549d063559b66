#include "continuous-core.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include <unistd.h>

namespace chorus {

namespace {

// CHORUS_CORE_TRACE=<file>: a line per arrival, admission and run of steps (milliseconds since the
// first line's process began tracing), to see where a request's first token waits.
class CoreTrace {
 public:
  CoreTrace() {
    const char* value = std::getenv("CHORUS_CORE_TRACE");
    if (value == nullptr || *value == '\0') return;
    // %p in the path: this process's id (a server and its bench each write their own).
    std::string path = value;
    const size_t at = path.find("%p");
    if (at != std::string::npos) path.replace(at, 2, std::to_string(getpid()));
    file_ = std::fopen(path.c_str(), "a");
  }
  ~CoreTrace() {
    if (file_ != nullptr) std::fclose(file_);
  }
  bool on() const { return file_ != nullptr; }
  double Now() const { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count(); }
  template <typename... Args>
  void Line(const char* format, Args... args) {
    if (file_ == nullptr) return;
    std::fprintf(file_, format, args...);
    std::fputc('\n', file_);
    std::fflush(file_);
  }

 private:
  std::FILE* file_ = nullptr;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

CoreTrace& Trace() {
  static CoreTrace trace;
  return trace;
}

// CHORUS_CORE_BUCKETS=0: admissions prefill their exact shapes (to compare).
bool PrefillBuckets() {
  static const bool on = [] {
    const char* value = std::getenv("CHORUS_CORE_BUCKETS");
    return value == nullptr || std::string(value) != "0";
  }();
  return on;
}

// CHORUS_CORE_GROUPS=pow2: admissions prefill groups of a power of two rows (to compare).
bool PowerOfTwoGroups() {
  static const bool on = [] {
    const char* value = std::getenv("CHORUS_CORE_GROUPS");
    return value != nullptr && std::string(value) == "pow2";
  }();
  return on;
}

// CHORUS_CORE_JOINS=0: requests wait for the run of steps under way to end, as greedy runs' do (to
// compare).
bool JoinsWanted() {
  static const bool on = [] {
    const char* value = std::getenv("CHORUS_CORE_JOINS");
    return value == nullptr || std::string(value) != "0";
  }();
  return on;
}

// CHORUS_CORE_HOLD_STEPS=<n>: how many steps a few waiting rows wait for more to join with
// (ContinuousCore::kHoldSteps; to compare).
int64_t HoldSteps(int64_t fallback) {
  static const int64_t steps = [fallback] {
    const char* value = std::getenv("CHORUS_CORE_HOLD_STEPS");
    return value == nullptr || *value == '\0' ? fallback : std::max<int64_t>(0, std::atoll(value));
  }();
  return steps;
}

}  // namespace

ContinuousCore::ContinuousCore(SlotDecoder& decoder, CoreOnStep onStep, CoreOnError onError)
    : decoder_(decoder), onStep_(std::move(onStep)), onError_(std::move(onError)) {
  if (decoder.paged()) throw std::logic_error("the continuous core runs a cache of slots, not a paged one");
  if (decoder.seq2seq()) throw std::logic_error("the continuous core runs decoder-only models");
  thread_ = std::thread([this]() { Loop(); });
}

ContinuousCore::~ContinuousCore() { Stop(); }

double ContinuousCore::Draw(uint32_t& state) {
  state += 0x6d2b79f5u;
  uint32_t t = state;
  t = (t ^ (t >> 15)) * (t | 1u);
  t ^= t + (t ^ (t >> 7)) * (t | 61u);
  return (static_cast<double>(t ^ (t >> 14)) + 0.5) / 4294967296.0;
}

void ContinuousCore::Submit(CoreRequest request) {
  const SlotDecoderOptions& o = decoder_.options();
  const size_t prompt = request.prompt.size();
  if (prompt == 0 || request.maxTokens < 1 || prompt + request.maxTokens > static_cast<size_t>(o.maxLength)) {
    throw std::out_of_range("a prompt of " + std::to_string(prompt) + " tokens and " + std::to_string(request.maxTokens) + " new ones do not fit a slot of " +
                            std::to_string(o.maxLength));
  }
  for (int64_t id : request.prompt) {
    if (id < 0 || id >= o.vocab) throw std::out_of_range("prompt id " + std::to_string(id) + " is outside the vocabulary");
  }
  if (request.seen.size() % 2 != 0) throw std::invalid_argument("seen must hold (id, count) pairs");
  for (size_t i = 0; i < request.seen.size(); i += 2) {
    if (request.seen[i] < 0 || request.seen[i] >= o.vocab) throw std::out_of_range("seen has an id outside the vocabulary");
  }
  for (int32_t id : request.endIds) {
    if (id < 0 || id >= o.vocab) throw std::out_of_range("end id " + std::to_string(id) + " is outside the vocabulary");
  }
  if (request.topLogProbs < 0 || request.topLogProbs > kMaxTopLogProbs) throw std::out_of_range("topLogProbs must be in [0, " + std::to_string(kMaxTopLogProbs) + "]");
  if (request.topK < 0 || request.topK > o.vocab) throw std::out_of_range("topK must be in [0, vocab]");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    inbox_.push_back(std::move(request));
    // A greedy run under way ends after its step, so that the request joins (a run of chosen steps
    // takes it in as it goes).
    if (stopsForArrivals_) decoder_.Interrupt();
  }
  wake_.notify_one();
}

void ContinuousCore::Cancel(int32_t id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.push_back(id);
    if (stopsForArrivals_) decoder_.Interrupt();
  }
  wake_.notify_one();
}

void ContinuousCore::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  decoder_.Interrupt();
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void ContinuousCore::Loop() {
  const size_t slots = static_cast<size_t>(decoder_.options().slots);
  bool failed = false;
  while (true) {
    std::vector<CoreRequest> arrived;
    std::vector<int32_t> cancelled;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&]() { return stopping_ || !inbox_.empty() || !cancels_.empty() || (!failed && (!rows_.empty() || (!waiting_.empty() && rows_.size() < slots))); });
      if (stopping_) return;
      arrived.swap(inbox_);
      cancelled.swap(cancels_);
    }
    // After a failure every row was failed by the caller: what comes until it stops the core is dropped.
    if (failed) continue;
    Arrive(arrived);
    if (!cancelled.empty()) {
      try {
        CancelRows(cancelled, false);
      } catch (const std::exception& e) {
        failed = true;
        onError_(e.what());
        continue;
      }
    }
    try {
      Admit(waiting_);
      if (!rows_.empty()) Step();
    } catch (const std::exception& e) {
      failed = true;
      rows_.clear();
      waiting_.clear();
      onError_(e.what());
    }
  }
}

ContinuousCore::StopsForArrivals::StopsForArrivals(ContinuousCore& core, bool on) : core_(core), on_(on) {
  std::lock_guard<std::mutex> lock(core_.mutex_);
  core_.stopsForArrivals_ = on;
  // An interrupt left from before (a row that ended in a run's last step) is not this run's.
  if (core_.stopping_ || (on && (!core_.inbox_.empty() || !core_.cancels_.empty()))) {
    core_.decoder_.Interrupt();
  } else {
    core_.decoder_.ClearInterrupt();
  }
}

ContinuousCore::StopsForArrivals::~StopsForArrivals() {
  if (!on_) return;
  std::lock_guard<std::mutex> lock(core_.mutex_);
  core_.stopsForArrivals_ = false;
}

void ContinuousCore::Arrive(std::vector<CoreRequest>& arrived) {
  if (arrived.empty()) return;
  Trace().Line("%.3f arrived %zu running %zu waiting %zu", Trace().Now(), arrived.size(), rows_.size(), waiting_.size());
  for (CoreRequest& request : arrived) {
    Row row;
    row.request = std::move(request);
    row.penalties = row.request.repetition != 1 || row.request.presence != 0 || row.request.frequency != 0;
    for (size_t i = 0; i < row.request.seen.size(); i += 2) row.seenAt[row.request.seen[i]] = i;
    row.serial = ++serials_;
    waiting_.push_back(std::move(row));
  }
}

void ContinuousCore::CancelRows(const std::vector<int32_t>& cancelled, bool ended) {
  auto isCancelled = [&](const Row& row) { return std::find(cancelled.begin(), cancelled.end(), row.request.id) != cancelled.end(); };
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), isCancelled), waiting_.end());
  std::vector<bool> gone(rows_.size());
  for (size_t r = 0; r < rows_.size(); r++) {
    gone[r] = isCancelled(rows_[r]);
    if (ended && gone[r]) rows_[r].ended = true;
  }
  if (!ended) Retire(gone);
}

bool ContinuousCore::CanJoin(const Row& row) {
  return !row.penalties && (row.request.minLength == 0 || row.request.endIds.size() <= SlotDecoder::kJoinBans);
}

void ContinuousCore::Join(int step, StepJoins& joins) {
  std::vector<CoreRequest> arrived;
  std::vector<int32_t> cancelled;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      joins.stop = true;
      return;
    }
    arrived.swap(inbox_);
    cancelled.swap(cancels_);
  }
  Arrive(arrived);
  if (!cancelled.empty()) CancelRows(cancelled, true);
  const int64_t call = joinCalls_++;
  for (Row& row : waiting_) {
    if (row.seenAtJoin < 0) row.seenAtJoin = call;
  }
  const size_t slots = static_cast<size_t>(decoder_.options().slots);
  std::vector<size_t> holes;
  for (size_t r = 0; r < rows_.size(); r++) {
    if (rows_[r].ended) holes.push_back(r);
  }
  // The waiting rows that take the ended rows' slots and the free ones, in order of arrival, up to a
  // prefill's tokens.
  const size_t room = holes.size() + (slots - rows_.size());
  size_t taking = 0;
  size_t tokens = 0;
  bool blocked = false;
  while (taking < waiting_.size() && taking < room) {
    const Row& row = waiting_[taking];
    if (!CanJoin(row)) {
      blocked = true;
      break;
    }
    if (taking > 0 && tokens + row.request.prompt.size() > kPrefillTokens) break;
    tokens += row.request.prompt.size();
    taking++;
  }
  // A few waiting rows behind many running ones wait a few steps for more to prefill with.
  const size_t liveNow = rows_.size() - holes.size();
  if (!blocked && taking > 0 && taking < static_cast<size_t>(decoder_.joinGroup()) && liveNow >= kHoldRows && call - waiting_[0].seenAtJoin < HoldSteps(kHoldSteps)) taking = 0;
  const size_t endedLeft = holes.size() - std::min(holes.size(), taking);
  const size_t runRows = rows_.size() + (taking > holes.size() ? taking - holes.size() : 0);
  const size_t live = runRows - endedLeft;
  // Many at once prefill faster together (Admit) than one by one behind the steps.
  const bool many = taking >= kJoinsAtOnce;
  if (blocked || many || live == 0 || endedLeft * 4 > runRows) {
    const char* why = blocked ? "a waiting row cannot join" : many ? "many rows wait" : "rows ended";
    Trace().Line("%.3f run stops before step %d: %s, %zu of %zu rows ended, %zu waiting", Trace().Now(), step, why, endedLeft, runRows, waiting_.size());
    joins.stop = true;
    return;
  }
  for (size_t i = 0; i < taking; i++) {
    Row& row = waiting_[i];
    row.token = row.request.prompt.back();
    row.length = static_cast<int64_t>(row.request.prompt.size()) - 1;
    row.startStep = step;
    row.takenAtStart = row.taken;
    row.ended = false;
    const size_t slot = i < holes.size() ? holes[i] : rows_.size();
    joins.rows.push_back(JoinRow{static_cast<int>(slot), row.request.prompt});
    if (slot < rows_.size()) {
      rows_[slot] = std::move(row);
    } else {
      rows_.push_back(std::move(row));
    }
  }
  waiting_.erase(waiting_.begin(), waiting_.begin() + static_cast<std::ptrdiff_t>(taking));
  if (taking > 0) {
    Trace().Line("%.3f joined rows %zu (ended rows' slots %zu) tokens %zu at step %d running %zu waiting %zu", Trace().Now(), taking, std::min(taking, holes.size()), tokens, step,
                 rows_.size(), waiting_.size());
  }
}

SampleParams ContinuousCore::ParamsOf(Row& row, SampleBatch& batch, int32_t taken) {
  const CoreRequest& q = row.request;
  SampleParams p{};
  p.temperature = q.temperature;
  p.topP = q.topP;
  p.repetition = q.repetition;
  p.presence = q.presence;
  p.frequency = q.frequency;
  p.uniform = q.temperature == 0 ? 0 : Draw(row.request.random);
  p.topK = q.topK;
  p.topLogProbs = q.topLogProbs;
  p.seenBegin = static_cast<int32_t>(batch.seen.size() / 2);
  if (row.penalties) batch.seen.insert(batch.seen.end(), q.seen.begin(), q.seen.end());
  p.seenEnd = static_cast<int32_t>(batch.seen.size() / 2);
  p.banBegin = static_cast<int32_t>(batch.bans.size());
  if (taken < q.minLength) batch.bans.insert(batch.bans.end(), q.endIds.begin(), q.endIds.end());
  p.banEnd = static_cast<int32_t>(batch.bans.size());
  return p;
}

bool ContinuousCore::Take(Row& row, const SampleResult& chosen, CoreStep& out) {
  out.ids.push_back(row.request.id);
  out.results.push_back(chosen);
  row.taken++;
  row.token = chosen.token;
  if (row.penalties) {
    auto found = row.seenAt.find(chosen.token);
    if (found != row.seenAt.end()) {
      row.request.seen[found->second + 1]++;
    } else {
      row.seenAt[chosen.token] = row.request.seen.size();
      row.request.seen.push_back(chosen.token);
      row.request.seen.push_back(1);
    }
  }
  return IsEndId(row.request.endIds, chosen.token) || row.taken >= row.request.maxTokens;
}

// The argmax's choice as the sampler's result: no log-probability asked for.
static SampleResult ArgmaxChoice(int32_t token) {
  SampleResult result{};
  result.token = token;
  return result;
}

int ContinuousCore::PrefillWidth(size_t longest, bool oneRun, int maxLength) {
  const size_t tokens = oneRun ? longest : longest - 1;
  const size_t bucket = (tokens + kPrefillWidthStep - 1) / kPrefillWidthStep * kPrefillWidthStep;
  return static_cast<int>(std::min(bucket, static_cast<size_t>(oneRun ? maxLength : maxLength - 1)));
}

int ContinuousCore::WarmPrefills(SlotDecoder& decoder, double budgetMs) {
  const auto started = std::chrono::steady_clock::now();
  const auto spent = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count(); };
  const int slots = decoder.options().slots;
  const int maxLength = decoder.options().maxLength;
  // The widths admissions run (PrefillWidth): with two runs the multiples of kPrefillWidthStep under
  // the slot's length, of prompts a token longer; with one, those up to the slot's length and the
  // slot's length itself, of prompts as long.
  const bool oneRun = decoder.OneRunPrefill();
  const int step = static_cast<int>(kPrefillWidthStep);
  int ran = 0;
  for (int bucket = step; oneRun || bucket < maxLength; bucket += step) {
    const int width = std::min(bucket, maxLength);
    for (int rows = 1; rows <= slots; rows *= 2) {
      // The admissions' most: kPrefillTokens of prompts, padded up to twice that.
      if (static_cast<size_t>(rows) * width > 2 * kPrefillTokens) break;
      if (spent() >= budgetMs) return ran;
      const size_t length = static_cast<size_t>(width) + (oneRun ? 0 : 1);
      decoder.PrefillRagged(0, std::vector<std::vector<int64_t>>(static_cast<size_t>(rows), std::vector<int64_t>(length, 0)), {}, SampleBatch{}, width);
      ran++;
    }
    if (width == maxLength) break;
    // A joining prompt of this width's graph (its staging slot's).
    decoder.WarmJoin(width);
  }
  return ran;
}

void ContinuousCore::Admit(std::vector<Row>& waiting) {
  const size_t slots = static_cast<size_t>(decoder_.options().slots);
  const int maxLength = decoder_.options().maxLength;
  while (!waiting.empty() && rows_.size() < slots) {
    // The waiting requests that fit the free slots prefill together, at most kPrefillTokens tokens once
    // padded to the longest and at most twice their own tokens (a long prompt does not make short ones
    // pay for its length), in the decoder's ragged prefill: one run of every prompt padded, its logits
    // at each row's last token, or (a model without last_index) a run of every prompt but its last
    // token, padded, then a run of the last tokens. ONNX Runtime meets each shape's first run slowly (5
    // to 20 ms for GPT-2 on an H100, against 1 to 2 after), so the shapes come from a few buckets: the
    // (first) run's width a multiple of kPrefillWidthStep and its rows a power of two: padded where the free
    // slots allow (the padding rows run a one-token prompt in free slots, and are dropped), else the
    // largest power of two of the group now and the rest in the next prefill.
    const size_t count = std::min(waiting.size(), slots - rows_.size());
    size_t group = 1;
    while (group * 2 <= count) group *= 2;
    if (!PowerOfTwoGroups()) group = count;
    const auto fits = [&](size_t n) {
      size_t most = 0;
      size_t tokens = 0;
      for (size_t r = 0; r < n; r++) {
        most = std::max(most, waiting[r].request.prompt.size());
        tokens += waiting[r].request.prompt.size();
      }
      return n * most <= kPrefillTokens && n * most <= 2 * tokens;
    };
    while (group > 1 && !fits(group)) group = PowerOfTwoGroups() ? group / 2 : group - 1;
    const bool buckets = PrefillBuckets();
    size_t runRows = group;
    if (buckets) {
      size_t power = 1;
      while (power < group) power *= 2;
      if (rows_.size() + power <= slots) {
        runRows = power;
      } else if (power > group) {
        // No room to pad: the largest power of two of them now, the rest in the next prefill.
        group = runRows = power / 2;
      }
    }
    size_t longest = 0;
    for (size_t r = 0; r < group; r++) longest = std::max(longest, waiting[r].request.prompt.size());
    const int width = buckets ? PrefillWidth(longest, decoder_.OneRunPrefill(), maxLength) : 0;
    const size_t length = waiting[0].request.prompt.size();
    bool equal = !buckets;
    for (size_t r = 1; r < group; r++) equal = equal && waiting[r].request.prompt.size() == length;
    std::vector<int64_t> ids;
    std::vector<std::vector<int64_t>> prompts;
    SampleBatch sample;
    for (size_t r = 0; r < group; r++) {
      Row& row = waiting[r];
      if (equal) {
        ids.insert(ids.end(), row.request.prompt.begin(), row.request.prompt.end());
      } else {
        prompts.push_back(row.request.prompt);
      }
      if (!row.request.argmax) {
        sample.rows.push_back(static_cast<int32_t>(r));
        sample.params.push_back(ParamsOf(row, sample, row.taken));
      }
    }
    prompts.resize(equal ? 0 : runRows, std::vector<int64_t>{0});
    const int first = static_cast<int>(rows_.size());
    const double began = Trace().on() ? Trace().Now() : 0;
    StepResult result = equal ? decoder_.Prefill(first, ids, {}, sample, static_cast<int>(group)) : decoder_.PrefillRagged(first, prompts, {}, sample, width);
    if (Trace().on()) {
      size_t tokens = 0;
      for (size_t r = 0; r < group; r++) tokens += waiting[r].request.prompt.size();
      Trace().Line("%.3f prefill rows %zu (run %zu x %d) tokens %zu waiting %zu running %d ms %.3f", began, group, equal ? group : runRows, equal ? static_cast<int>(length) : width, tokens,
                   waiting.size(), first, Trace().Now() - began);
    }
    CoreStep out;
    out.prefill = true;
    std::vector<bool> gone(rows_.size(), false);
    size_t sampled = 0;
    for (size_t r = 0; r < group; r++) {
      Row& row = waiting[r];
      row.length = static_cast<int64_t>(row.request.prompt.size());
      const SampleResult chosen = row.request.argmax ? ArgmaxChoice(result.argmax[r]) : result.sampled[sampled++];
      gone.push_back(Take(row, chosen, out));
      rows_.push_back(std::move(row));
    }
    waiting.erase(waiting.begin(), waiting.begin() + static_cast<std::ptrdiff_t>(group));
    onStep_(std::move(out));
    Retire(gone);
  }
}

void ContinuousCore::Step() {
  const size_t n = rows_.size();
  const std::vector<int32_t> endIds = rows_[0].request.endIds;
  // Greedy rows run as a greedy run (its end ids checked on the device), which arrivals stop; several
  // of them, where requests may join, run as chosen steps instead (the argmax is their choice), which
  // take arrivals in as they go. One row keeps the greedy run: a lone stream's steps are the leanest.
  const bool greedy = std::all_of(rows_.begin(), rows_.end(), [&](const Row& row) { return row.request.argmax && row.request.endIds == endIds; });
  if (greedy && (n == 1 || !decoder_.joins() || !JoinsWanted())) {
    GreedySteps(endIds);
    return;
  }
  // Penalties count each step's tokens into the next step's parameters: those batches step one at a time.
  if (std::none_of(rows_.begin(), rows_.end(), [](const Row& row) { return row.penalties; })) {
    ChosenSteps();
    return;
  }
  std::vector<int64_t> tokens(n);
  std::vector<int64_t> positions(n);
  SampleBatch sample;
  for (size_t r = 0; r < n; r++) {
    Row& row = rows_[r];
    tokens[r] = row.token;
    positions[r] = row.length;
    if (!row.request.argmax) {
      sample.rows.push_back(static_cast<int32_t>(r));
      sample.params.push_back(ParamsOf(row, sample, row.taken));
    }
  }
  StepResult result = decoder_.Decode(tokens, positions, {}, sample);
  CoreStep out;
  std::vector<bool> gone(n, false);
  size_t sampled = 0;
  for (size_t r = 0; r < n; r++) {
    Row& row = rows_[r];
    row.length++;
    const SampleResult chosen = row.request.argmax ? ArgmaxChoice(result.argmax[r]) : result.sampled[sampled++];
    gone[r] = Take(row, chosen, out);
  }
  onStep_(std::move(out));
  Retire(gone);
}

ContinuousCore::RunStart ContinuousCore::StartRun() const {
  RunStart start;
  int64_t room = kMaxGreedySteps;
  for (const Row& row : rows_) {
    start.tokens.push_back(row.token);
    start.positions.push_back(row.length);
    room = std::min<int64_t>(room, decoder_.options().maxLength - row.length);
  }
  start.maxSteps = static_cast<int>(std::max<int64_t>(1, room));
  return start;
}

void ContinuousCore::GreedySteps(const std::vector<int32_t>& endIds) {
  const size_t n = rows_.size();
  const RunStart start = StartRun();
  std::vector<int32_t> remaining(n);
  for (size_t r = 0; r < n; r++) remaining[r] = rows_[r].request.maxTokens - rows_[r].taken;
  // The run's steps as they come: a row that ends stops the run after the step under way (rows that
  // ended run along, unread, until it does), and so does a request or cancellation arriving.
  std::vector<bool> gone(n, false);
  const StepIds onStep = [&](int, const int32_t* ids, int) {
    CoreStep out;
    for (size_t r = 0; r < n; r++) {
      if (gone[r]) continue;
      gone[r] = Take(rows_[r], ArgmaxChoice(ids[r]), out);
      if (gone[r]) decoder_.Interrupt();
    }
    onStep_(std::move(out));
  };
  const double began = Trace().on() ? Trace().Now() : 0;
  const StopsForArrivals stops(*this, true);
  const GreedyRun run = decoder_.DecodeGreedy(start.tokens, start.positions, remaining, endIds, start.maxSteps, {}, {}, onStep);
  Trace().Line("%.3f greedy rows %zu steps %d ms %.3f", began, n, run.steps, Trace().Now() - began);
  for (Row& row : rows_) row.length += run.steps;
  Retire(gone);
}

void ContinuousCore::ChosenSteps() {
  const RunStart start = StartRun();
  for (Row& row : rows_) {
    row.startStep = 0;
    row.takenAtStart = row.taken;
    row.ended = false;
  }
  // Where the decoder takes joins, arrivals and ends do not stop the run: an ended row runs along
  // unread until a waiting row takes its slot (Join). Each queued step's rows are kept (by serial,
  // -1: ended, and each row's index in the sampler batch, -1: the argmax) so that its results go to
  // the rows it ran for: a row's slot may change hands between a step's queueing and its reading.
  const bool joinable = decoder_.joins() && JoinsWanted();
  struct Queued {
    std::vector<int64_t> serials;
    std::vector<int32_t> batchIndex;
  };
  Queued queued[4];
  // Step k's parameters may be asked for before step k - 1's tokens are taken: its bans go by k.
  const StepSample sampleStep = [&](int step, SampleBatch& batch) {
    Queued& q = queued[step % 4];
    q.serials.assign(rows_.size(), -1);
    q.batchIndex.assign(rows_.size(), -1);
    for (size_t r = 0; r < rows_.size(); r++) {
      Row& row = rows_[r];
      if (!row.ended) q.serials[r] = row.serial;
      if (row.request.argmax) continue;
      q.batchIndex[r] = static_cast<int32_t>(batch.rows.size());
      batch.rows.push_back(static_cast<int32_t>(r));
      batch.params.push_back(ParamsOf(row, batch, row.takenAtStart + (step - row.startStep)));
    }
  };
  const StepChosen onStep = [&](int step, const int32_t* argmax, const SampleResult* sampled) {
    const Queued& q = queued[step % 4];
    CoreStep out;
    for (size_t r = 0; r < q.serials.size(); r++) {
      Row& row = rows_[r];
      if (q.serials[r] < 0 || row.serial != q.serials[r] || row.ended) continue;
      const SampleResult chosen = q.batchIndex[r] < 0 ? ArgmaxChoice(argmax[r]) : sampled[q.batchIndex[r]];
      if (row.taken == 0) out.joined++;
      if (Take(row, chosen, out)) {
        row.ended = true;
        if (!joinable) decoder_.Interrupt();
      }
    }
    onStep_(std::move(out));
  };
  const StepJoin join = [&](int step, StepJoins& joins) { Join(step, joins); };
  const double began = Trace().on() ? Trace().Now() : 0;
  const size_t startRows = rows_.size();
  int steps = 0;
  {
    const StopsForArrivals stops(*this, !joinable);
    steps = decoder_.DecodeChosen(start.tokens, start.positions, start.maxSteps, sampleStep, onStep, joinable ? join : StepJoin());
  }
  Trace().Line("%.3f chosen rows %zu-%zu steps %d ms %.3f", began, startRows, rows_.size(), steps, Trace().Now() - began);
  std::vector<bool> gone(rows_.size());
  for (size_t r = 0; r < rows_.size(); r++) {
    gone[r] = rows_[r].ended;
    if (!gone[r]) rows_[r].length += steps - rows_[r].startStep;
  }
  Retire(gone);
}

void ContinuousCore::Retire(const std::vector<bool>& gone) {
  if (std::none_of(gone.begin(), gone.end(), [](bool g) { return g; })) return;
  std::vector<int32_t> src, dst, lengths;
  std::vector<Row> kept;
  kept.reserve(rows_.size());
  for (size_t r = 0; r < rows_.size(); r++) {
    if (gone[r]) continue;
    const size_t to = kept.size();
    if (to != r) {
      src.push_back(static_cast<int32_t>(r));
      dst.push_back(static_cast<int32_t>(to));
      lengths.push_back(static_cast<int32_t>(rows_[r].length));
    }
    kept.push_back(std::move(rows_[r]));
  }
  rows_ = std::move(kept);
  if (!src.empty()) decoder_.CopySlots(src, dst, lengths);
}

}  // namespace chorus
