// The ranks of a tensor-parallel model at work together: Run(work) runs work(r) for every rank r at
// once, rank 0 on the calling thread and every other rank on a worker thread of its own, each under
// its rank's context (collective.h), and returns when all have ended.
//
// Ranks never wait for each other forever: a rank that throws aborts the group (the others' waits in
// a collective or at the step gate throw at once; on GPUs the communicator is aborted a moment later
// if a rank is still in its call), a collective that waits past the timeout aborts it (collective.h),
// and on GPUs a watchdog aborts a run that makes no progress (no step note, no Beat()) for the timeout. The caller gets one clear error; the communicator is reset for the next run.
//
// The step gate carries what only rank 0 decides to the others, in order: whether to stop after a
// step (an Interrupt() comes to rank 0 only), and the sampler batch of each step of a run whose batch
// the caller fills step by step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective.h"
#include "sampling.h"

namespace chorus {

// A decision of rank 0 that the other ranks follow.
struct StepNote {
  enum Kind { kStop, kBatch } kind = kStop;
  bool stop = false;
  SampleBatch batch;
};

class RankGroup {
 public:
  RankGroup(std::unique_ptr<Communicator> comm, double timeoutMs);
  ~RankGroup();
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  int world() const { return comm_->world(); }
  Communicator& comm() { return *comm_; }
  // Runs work(r) on every rank at once; rethrows the failure that came first (rank 0's own as it is,
  // another rank's named with its rank). `watched`: the watchdog aborts the run when it makes no
  // progress for the timeout (loading a model is not watched).
  void Run(const std::function<void(int rank)>& work, bool watched = true);
  // Rank 0: hands `note` to every other rank.
  void Publish(const StepNote& note);
  // Rank r > 0: the next note of rank 0, of kind `kind`; throws when the group is aborted or none
  // comes within the timeout.
  StepNote Receive(int rank, StepNote::Kind kind);
  // A mark of progress for the watchdog (a step done).
  void Beat() { lastBeat_.store(Now()); }
  // Counts the communicator's resets: CUDA graphs captured before one hold the aborted communicator's
  // kernels and must be captured again.
  uint64_t epoch() const { return epoch_.load(); }

 private:
  struct Worker {
    std::thread thread;
    std::function<void(int)> job;
    bool pending = false;
    bool done = true;
  };
  static int64_t Now() { return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
  void Serve(int rank);
  void Watch();
  // Records rank r's failure (the first one stands) and aborts the group.
  void Fail(int rank, std::exception_ptr error, const std::string& message);

  std::unique_ptr<Communicator> comm_;
  double timeoutMs_;
  std::mutex mutex_;
  std::condition_variable wake_;      // workers: a job, or the end
  std::condition_variable finished_;  // Run: a worker's job ended
  std::condition_variable noted_;     // Receive: a note, or an abort
  std::condition_variable watch_;     // the watchdog: the end
  std::vector<Worker> workers_;       // ranks 1..N-1 at index r - 1
  std::vector<std::deque<StepNote>> notes_;
  bool ending_ = false;
  bool running_ = false;
  // Rank 0 is in its call; and (GPU ranks) when the watchdog is to abort the communicator after a
  // failure, 0 for never.
  bool rootBusy_ = false;
  int64_t abortDue_ = 0;
  // A rank that did not end its job after an abort: the group takes no more runs.
  std::string broken_;
  int failedRank_ = -1;
  std::exception_ptr failure_;
  std::string failureMessage_;
  // Why the run under way was aborted (every wait throws it); empty while it goes on.
  std::string abortReason_;
  std::atomic<int64_t> lastBeat_{0};
  std::atomic<uint64_t> epoch_{0};
  std::thread watchdog_;
};

}  // namespace chorus
