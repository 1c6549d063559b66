// Collectives of tensor parallelism: the ranks of one model, each running its own shard of every layer,
// sum their partial results (AllReduce) and join their shards of the logits (AllGather). A
// Communicator serves every rank of a group; each rank calls it with its own index.
//
// - CPU (MakeCpuCommunicator): the ranks are threads of this process and share buffers. Every rank
//   sums the ranks' inputs in rank order 0..N-1 (in float, rounded once to the float type), so the
//   result is bitwise the same on every rank. A rank that waits longer than the timeout for the others
//   aborts the group.
// - NCCL (MakeNcclCommunicator): a rank per GPU, libnccl.so.2 loaded at run time; each call is queued
//   on the rank's stream (the session's compute stream, so a captured CUDA graph records it).
//
// Abort() ends every wait of every rank, now and until Reset(), with its reason: a rank that failed
// (or a step that hung) makes the others throw instead of waiting for it forever.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels.h"

namespace chorus {

class Communicator {
 public:
  explicit Communicator(int world) : world_(world) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int world() const { return world_; }
  // Whether the buffers are device memory and the calls are queued on a CUDA stream (NCCL).
  virtual bool onDevice() const = 0;
  // y = the sum over ranks of x (`count` elements), on every rank.
  virtual void AllReduce(int rank, const void* x, void* y, size_t count, FloatType type, void* stream) = 0;
  // y [rows, n * world] = the ranks' x [rows, n] side by side in rank order. `scratch` (device
  // communicators, rows > 1): rows x n x world elements of device memory the call may use.
  virtual void AllGather(int rank, const void* x, void* y, size_t rows, size_t n, FloatType type, void* stream, void* scratch) = 0;
  // Makes every wait (under way or later) throw `reason` until Reset(); the first reason stands.
  virtual void Abort(const std::string& reason) = 0;
  // The reason of an abort, empty while none.
  virtual std::string aborted() const = 0;
  // After an abort, once no rank is inside a call: usable again.
  virtual void Reset() = 0;

 private:
  int world_;
};

// Ranks that are threads of this process; a rank waits at most timeoutMs for the others.
std::unique_ptr<Communicator> MakeCpuCommunicator(int world, double timeoutMs);
// A rank per CUDA device, devices[r] for rank r (collective-nccl.cc). Throws, naming libnccl.so.2,
// where NCCL cannot be loaded.
std::unique_ptr<Communicator> MakeNcclCommunicator(const std::vector<int>& devices);

// The rank of the session the calling thread runs (set by the runner before each run; the operators
// AllReduce and AllGather read it): no communicator outside a tensor-parallel group.
struct RankContext {
  Communicator* comm = nullptr;
  int rank = 0;
};
const RankContext& CurrentRank();

// Sets the calling thread's rank for its life, restoring the one before after.
class RankScope {
 public:
  RankScope(Communicator* comm, int rank);
  ~RankScope();
  RankScope(const RankScope&) = delete;
  RankScope& operator=(const RankScope&) = delete;

 private:
  RankContext saved_;
};

}  // namespace chorus
