#include "rank-group.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace chorus {

namespace {

// How long GPU ranks get to end their calls by themselves after one of them failed.
constexpr int64_t kAbortGraceMs = 200;

std::string Seconds(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", ms / 1000);
  return text;
}

}  // namespace

RankGroup::RankGroup(std::unique_ptr<Communicator> comm, double timeoutMs)
    : comm_(std::move(comm)), timeoutMs_(timeoutMs), workers_(comm_->world() - 1), notes_(comm_->world()) {
  if (!(timeoutMs > 0)) throw std::invalid_argument("the tensor-parallel timeout must be positive");
  for (int r = 1; r < world(); r++) workers_[r - 1].thread = std::thread([this, r] { Serve(r); });
  // CPU ranks' waits time out by themselves; a GPU rank's hang shows only as a stream that never ends.
  if (comm_->onDevice()) watchdog_ = std::thread([this] { Watch(); });
}

RankGroup::~RankGroup() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ending_ = true;
  }
  wake_.notify_all();
  watch_.notify_all();
  for (Worker& w : workers_) {
    // A rank stuck in a call (the group is broken) cannot be joined; it is left to the process.
    if (w.done) {
      w.thread.join();
    } else {
      w.thread.detach();
    }
  }
  if (watchdog_.joinable()) watchdog_.join();
}

void RankGroup::Run(const std::function<void(int)>& work, bool watched) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.empty()) throw std::runtime_error(broken_);
    failure_ = nullptr;
    failedRank_ = -1;
    failureMessage_.clear();
    abortReason_.clear();
    for (auto& queue : notes_) queue.clear();
    for (Worker& w : workers_) {
      w.job = work;
      w.pending = true;
      w.done = false;
    }
    running_ = watched;
    rootBusy_ = true;
  }
  if (!comm_->aborted().empty()) {
    comm_->Reset();
    epoch_++;
  }
  Beat();
  wake_.notify_all();
  try {
    RankScope scope(comm_.get(), 0);
    work(0);
  } catch (const std::exception& e) {
    Fail(0, std::current_exception(), e.what());
  } catch (...) {
    Fail(0, std::current_exception(), "an unknown error");
  }
  std::unique_lock<std::mutex> lock(mutex_);
  rootBusy_ = false;
  auto allDone = [&] {
    for (const Worker& w : workers_) {
      if (!w.done) return false;
    }
    return true;
  };
  finished_.wait(lock, [&] { return allDone() || failure_ != nullptr; });
  // After a failure the others' waits throw at once; a rank still busy past the timeout is stuck.
  if (!allDone() && !finished_.wait_for(lock, std::chrono::duration<double, std::milli>(timeoutMs_), allDone)) {
    std::string stuck;
    for (size_t i = 0; i < workers_.size(); i++) {
      if (!workers_[i].done) stuck += (stuck.empty() ? "" : ", ") + std::to_string(i + 1);
    }
    broken_ = "rank(s) " + stuck + " of the tensor-parallel group did not end their call within " + Seconds(timeoutMs_) + " of its abort (" + abortReason_ +
              "); the model must be loaded again";
  }
  running_ = false;
  abortDue_ = 0;
  const std::exception_ptr failure = failure_;
  const int rank = failedRank_;
  const std::string message = failureMessage_;
  const bool broken = !broken_.empty();
  lock.unlock();
  if (failure == nullptr) return;
  if (!broken && !comm_->aborted().empty()) {
    comm_->Reset();
    epoch_++;
  }
  if (rank <= 0) std::rethrow_exception(failure);
  throw std::runtime_error("tensor-parallel rank " + std::to_string(rank) + " failed: " + message);
}

void RankGroup::Publish(const StepNote& note) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!abortReason_.empty()) throw std::runtime_error(abortReason_);
    for (size_t r = 1; r < notes_.size(); r++) notes_[r].push_back(note);
  }
  noted_.notify_all();
  Beat();
}

StepNote RankGroup::Receive(int rank, StepNote::Kind kind) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::deque<StepNote>& queue = notes_.at(rank);
  const bool came = noted_.wait_for(lock, std::chrono::duration<double, std::milli>(timeoutMs_), [&] { return !queue.empty() || !abortReason_.empty(); });
  if (!abortReason_.empty()) throw std::runtime_error(abortReason_);
  if (!came) throw std::runtime_error("rank " + std::to_string(rank) + " waited " + Seconds(timeoutMs_) + " for rank 0's next step, which never came");
  StepNote note = std::move(queue.front());
  queue.pop_front();
  if (note.kind != kind) throw std::logic_error("the tensor-parallel ranks' steps disagree: rank " + std::to_string(rank) + " expected another kind of step note from rank 0");
  lock.unlock();
  Beat();
  return note;
}

void RankGroup::Serve(int rank) {
  Worker& w = workers_[rank - 1];
  for (;;) {
    std::function<void(int)> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return ending_ || w.pending; });
      if (!w.pending) return;
      job = w.job;
      w.pending = false;
    }
    try {
      RankScope scope(comm_.get(), rank);
      job(rank);
    } catch (const std::exception& e) {
      Fail(rank, std::current_exception(), e.what());
    } catch (...) {
      Fail(rank, std::current_exception(), "an unknown error");
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      w.done = true;
      w.job = nullptr;
    }
    finished_.notify_all();
  }
}

void RankGroup::Watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!ending_) {
    watch_.wait_for(lock, std::chrono::milliseconds(abortDue_ > 0 ? std::max<int64_t>(1, abortDue_ - Now()) : 100));
    if (ending_) break;
    if (abortDue_ > 0 && Now() >= abortDue_) {
      // A rank failed a moment ago: the communicator is aborted only where a rank is still in its call
      // (waiting, maybe, in a collective the failed rank will never join).
      abortDue_ = 0;
      bool busy = rootBusy_;
      for (const Worker& w : workers_) busy = busy || !w.done;
      if (!busy) continue;
      const std::string reason = abortReason_;
      lock.unlock();
      comm_->Abort(reason);
      lock.lock();
      continue;
    }
    if (!running_ || !abortReason_.empty() || Now() - lastBeat_.load() <= timeoutMs_) continue;
    const std::string reason = "the tensor-parallel group made no progress for " + Seconds(timeoutMs_) + " (a rank hung in a step), and was aborted";
    lock.unlock();
    Fail(-1, std::make_exception_ptr(std::runtime_error(reason)), reason);
    lock.lock();
  }
}

void RankGroup::Fail(int rank, std::exception_ptr error, const std::string& message) {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The first failure stands; where rank 0 failed the same way (the same bad argument on every
    // rank), its caller gets rank 0's error as it is.
    if (failure_ == nullptr || (rank == 0 && failedRank_ > 0 && message == failureMessage_)) {
      failure_ = error;
      failedRank_ = rank;
      failureMessage_ = message;
    }
    if (abortReason_.empty()) {
      abortReason_ = rank <= 0 ? message : "tensor-parallel rank " + std::to_string(rank) + " failed: " + message;
      // GPU ranks: the watchdog aborts the communicator a moment later, and only where a rank is still
      // in its call; ranks that all failed alike (a bad argument) keep their communicators.
      if (comm_->onDevice()) abortDue_ = Now() + kAbortGraceMs;
    }
    reason = abortReason_;
  }
  noted_.notify_all();
  finished_.notify_all();
  watch_.notify_all();
  if (!comm_->onDevice()) comm_->Abort(reason);
}

}  // namespace chorus
