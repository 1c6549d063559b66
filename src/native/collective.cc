// The CPU communicator (ranks that are threads of one process) and the calling thread's rank.
#include "collective.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace chorus {

namespace {

thread_local RankContext current;

// What a rank asked of a collective, so that ranks that disagree (a graph of another shape or
// world) are told instead of reading each other's buffers wrong.
struct Call {
  const char* op = "";
  size_t count = 0;
  FloatType type = FloatType::kFloat32;
  const void* x = nullptr;
};

class CpuCommunicator : public Communicator {
 public:
  CpuCommunicator(int world, double timeoutMs) : Communicator(world), timeoutMs_(timeoutMs), calls_(world), arrived_(world, false) {}

  bool onDevice() const override { return false; }

  void AllReduce(int rank, const void* x, void* y, size_t count, FloatType type, void* /*stream*/) override {
    Meet(rank, {"AllReduce", count, type, x});
    // Every rank sums in rank order 0..N-1, in float, rounded once: the same bits on every rank.
    if (type == FloatType::kFloat32) {
      float* out = static_cast<float*>(y);
      std::memcpy(out, calls_[0].x, count * sizeof(float));
      for (size_t r = 1; r < calls_.size(); r++) {
        const float* x = static_cast<const float*>(calls_[r].x);
        for (size_t i = 0; i < count; i++) out[i] += x[i];
      }
    } else {
      for (size_t i = 0; i < count; i++) {
        float sum = 0;
        for (const Call& c : calls_) sum += ElementAt(c.x, type, i);
        PutElement(y, type, i, sum);
      }
    }
    // No rank's input is released (its kernel returns) before every rank has read it.
    Barrier(rank, "AllReduce");
  }

  void AllGather(int rank, const void* x, void* y, size_t rows, size_t n, FloatType type, void* /*stream*/, void* /*scratch*/) override {
    Meet(rank, {"AllGather", rows * n, type, x});
    const size_t bytes = n * ElementBytes(type);
    const size_t ranks = calls_.size();
    for (size_t row = 0; row < rows; row++) {
      for (size_t r = 0; r < ranks; r++) {
        std::memcpy(static_cast<char*>(y) + (row * ranks + r) * bytes, static_cast<const char*>(calls_[r].x) + row * bytes, bytes);
      }
    }
    Barrier(rank, "AllGather");
  }

  void Abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mutex_);
    AbortLocked(reason);
  }

  std::string aborted() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return abort_;
  }

  void Reset() override {
    std::lock_guard<std::mutex> lock(mutex_);
    abort_.clear();
    waiting_ = 0;
    arrived_.assign(arrived_.size(), false);
    generation_++;
  }

 private:
  // Publishes this rank's call, waits for every rank's, and checks that they agree.
  void Meet(int rank, const Call& call) {
    if (rank < 0 || rank >= world()) throw std::out_of_range("rank " + std::to_string(rank) + " of a group of " + std::to_string(world()));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      calls_[rank] = call;
    }
    Barrier(rank, call.op);
    for (int r = 0; r < world(); r++) {
      const Call& other = calls_[r];
      if (std::strcmp(other.op, call.op) != 0 || other.count != call.count || other.type != call.type) {
        const std::string reason = "the ranks disagree: rank " + std::to_string(r) + " ran " + other.op + " of " + std::to_string(other.count) + " elements where rank " +
                                   std::to_string(rank) + " ran " + call.op + " of " + std::to_string(call.count);
        Abort(reason);
        throw std::runtime_error(reason);
      }
    }
  }

  // Waits until every rank has arrived (the group goes on), the group is aborted, or the timeout.
  void Barrier(int rank, const char* op) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!abort_.empty()) throw std::runtime_error(abort_);
    const uint64_t generation = generation_;
    arrived_[rank] = true;
    if (++waiting_ == world()) {
      waiting_ = 0;
      arrived_.assign(arrived_.size(), false);
      generation_++;
      changed_.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(timeoutMs_);
    const bool done = changed_.wait_until(lock, deadline, [&] { return generation_ != generation || !abort_.empty(); });
    if (done && generation_ != generation) return;
    if (!done) {
      std::string missing;
      for (int r = 0; r < world(); r++) {
        if (!arrived_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      char waited[32];
      std::snprintf(waited, sizeof waited, "%.1f s", timeoutMs_ / 1000);
      AbortLocked("rank " + std::to_string(rank) + " waited " + waited + " at " + op + " for rank(s) " + missing + ", which never arrived (the tensor-parallel group is aborted)");
    }
    throw std::runtime_error(abort_);
  }

  void AbortLocked(const std::string& reason) {
    if (abort_.empty()) abort_ = reason.empty() ? "the tensor-parallel group was aborted" : reason;
    changed_.notify_all();
  }

  double timeoutMs_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Call> calls_;
  std::vector<bool> arrived_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
  std::string abort_;
};

}  // namespace

std::unique_ptr<Communicator> MakeCpuCommunicator(int world, double timeoutMs) {
  if (world < 1) throw std::invalid_argument("a tensor-parallel group needs at least one rank, not " + std::to_string(world));
  if (!(timeoutMs > 0)) throw std::invalid_argument("the collectives' timeout must be positive");
  return std::make_unique<CpuCommunicator>(world, timeoutMs);
}

const RankContext& CurrentRank() { return current; }

RankScope::RankScope(Communicator* comm, int rank) : saved_(current) { current = RankContext{comm, rank}; }

RankScope::~RankScope() { current = saved_; }

}  // namespace chorus
