// The NCCL communicator: libnccl.so.2 (the host's CUDA user-space packages, or CHORUS_NCCL_LIBRARY)
// loaded at run time, the handful of its declarations this file needs written out here (nccl.h:
// float16 = 6, float32 = 7, bfloat16 = 9; ncclSum = 0; ncclSuccess = 0), a communicator per rank made
// at once by ncclCommInitAll, and each collective queued on the rank's own stream.
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "collective.h"
#include "cuda-check.h"

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#include <dlfcn.h>
#endif

namespace chorus {

#ifdef CHORUS_WITH_CUDA
namespace {

using ncclComm_t = struct ncclComm*;
using ncclResult_t = int;
constexpr int kNcclFloat16 = 6;
constexpr int kNcclFloat32 = 7;
constexpr int kNcclBFloat16 = 9;
constexpr int kNcclSum = 0;

struct Nccl {
  ncclResult_t (*commInitAll)(ncclComm_t* comms, int ndev, const int* devlist);
  ncclResult_t (*allReduce)(const void* send, void* recv, size_t count, int type, int op, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*allGather)(const void* send, void* recv, size_t sendCount, int type, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*commAbort)(ncclComm_t comm);
  ncclResult_t (*commDestroy)(ncclComm_t comm);
  const char* (*errorString)(ncclResult_t result);
};

// NCCL's functions, loaded once; throws (every time) where the library or a function is missing.
const Nccl& LoadNccl() {
  static std::once_flag once;
  static Nccl nccl{};
  static std::string failure;
  std::call_once(once, [] {
    // CHORUS_NCCL_LIBRARY names the library's file where the loader's paths do not hold it (pip's
    // nvidia-nccl-cu12 keeps it in site-packages/nvidia/nccl/lib).
    const char* named = std::getenv("CHORUS_NCCL_LIBRARY");
    const std::string file = named != nullptr && *named != '\0' ? named : "libnccl.so.2";
    void* library = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* why = dlerror();
      failure = "tensor parallelism on CUDA needs NCCL, and " + file + " could not be loaded (" + std::string(why != nullptr ? why : "not found") +
                "): install the host's NCCL runtime (apt-get install libnccl2), or set CHORUS_NCCL_LIBRARY to the path of libnccl.so.2 (pip's nvidia-nccl-cu12 has it "
                "under site-packages/nvidia/nccl/lib)";
      return;
    }
    auto bind = [&](auto& field, const char* name) {
      field = reinterpret_cast<std::remove_reference_t<decltype(field)>>(dlsym(library, name));
      if (field == nullptr && failure.empty()) failure = std::string("libnccl.so.2 has no ") + name + " (NCCL 2.x is needed)";
    };
    bind(nccl.commInitAll, "ncclCommInitAll");
    bind(nccl.allReduce, "ncclAllReduce");
    bind(nccl.allGather, "ncclAllGather");
    bind(nccl.commAbort, "ncclCommAbort");
    bind(nccl.commDestroy, "ncclCommDestroy");
    bind(nccl.errorString, "ncclGetErrorString");
  });
  if (!failure.empty()) throw std::runtime_error(failure);
  return nccl;
}

int NcclType(FloatType type) {
  switch (type) {
    case FloatType::kFloat16:
      return kNcclFloat16;
    case FloatType::kBFloat16:
      return kNcclBFloat16;
    default:
      return kNcclFloat32;
  }
}

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(const std::vector<int>& devices) : Communicator(static_cast<int>(devices.size())), nccl_(LoadNccl()), devices_(devices) { Init(); }

  // The ranks' captured steps are destroyed first (SlotDecoder::CloseRanks): ncclCommDestroy waits for
  // every CUDA graph that captured the communicator's collectives.
  ~NcclCommunicator() override {
    for (ncclComm_t comm : comms_) {
      if (comm != nullptr) nccl_.commDestroy(comm);
    }
  }

  bool onDevice() const override { return true; }

  void AllReduce(int rank, const void* x, void* y, size_t count, FloatType type, void* stream) override {
    Call("ncclAllReduce", [&] { return nccl_.allReduce(x, y, count, NcclType(type), kNcclSum, Comm(rank), static_cast<cudaStream_t>(stream)); });
  }

  void AllGather(int rank, const void* x, void* y, size_t rows, size_t n, FloatType type, void* stream, void* scratch) override {
    auto s = static_cast<cudaStream_t>(stream);
    if (rows == 1) {
      Call("ncclAllGather", [&] { return nccl_.allGather(x, y, n, NcclType(type), Comm(rank), s); });
      return;
    }
    // NCCL gathers whole buffers one after another ([world, rows, n]); each rank's block then goes to
    // its columns of y ([rows, world * n]).
    if (scratch == nullptr) throw std::invalid_argument("AllGather of several rows on CUDA needs a scratch buffer");
    Call("ncclAllGather", [&] { return nccl_.allGather(x, scratch, rows * n, NcclType(type), Comm(rank), s); });
    const size_t bytes = n * ElementBytes(type);
    for (int r = 0; r < world(); r++) {
      CheckCuda(cudaMemcpy2DAsync(static_cast<char*>(y) + r * bytes, bytes * world(), static_cast<const char*>(scratch) + r * rows * bytes, bytes, bytes, rows,
                                  cudaMemcpyDeviceToDevice, s),
                "cudaMemcpy2DAsync (AllGather)");
    }
  }

  void Abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_.empty()) return;
    aborted_ = reason.empty() ? "the tensor-parallel group was aborted" : reason;
    // Kernels waiting for a rank that will not come end, and the ranks' waits on their streams return.
    // ncclCommAbort raises each communicator's abort flag at once, but the last one then waits until
    // every CUDA graph that captured their collectives is destroyed (which the ranks do at their next
    // captured step, or as they close), so the aborts run on a thread of their own.
    std::vector<ncclComm_t> doomed;
    for (ncclComm_t& comm : comms_) {
      if (comm != nullptr) doomed.push_back(comm);
      comm = nullptr;
    }
    const Nccl* nccl = &nccl_;
    try {
      std::thread([nccl, doomed] {
        for (ncclComm_t comm : doomed) nccl->commAbort(comm);
      }).detach();
    } catch (const std::system_error&) {
      // No thread to be had: the flags still go up here, and the last abort may wait for the graphs.
      for (ncclComm_t comm : doomed) nccl->commAbort(comm);
    }
  }

  std::string aborted() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return aborted_;
  }

  void Reset() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_.empty()) return;
    comms_.clear();
    // The ranks' streams may hold errors of the aborted kernels: the next calls should not read them.
    for (int device : devices_) {
      if (cudaSetDevice(device) == cudaSuccess) cudaDeviceSynchronize();
      cudaGetLastError();
    }
    Init();
    aborted_.clear();
  }

 private:
  void Init() {
    comms_.assign(devices_.size(), nullptr);
    Call("ncclCommInitAll", [&] { return nccl_.commInitAll(comms_.data(), world(), devices_.data()); });
  }

  ncclComm_t Comm(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_.empty()) throw std::runtime_error(aborted_);
    if (rank < 0 || rank >= world()) throw std::out_of_range("rank " + std::to_string(rank) + " of a group of " + std::to_string(world()));
    return comms_[rank];
  }

  // NCCL can leave a CUDA error of its own on the calling thread where it probes a kernel and skips it
  // (NVIDIA/nccl#1864). ONNX Runtime reads the thread's last error after its next kernel and would fail
  // there with it ("GroupQueryAttention: cudaErrorInvalidValue"), so a call drains what it left, unless
  // an error was there before it.
  template <typename Collective>
  void Call(const char* what, Collective&& collective) const {
    const bool clean = cudaPeekAtLastError() == cudaSuccess;
    const ncclResult_t result = collective();
    if (clean) cudaGetLastError();
    Check(result, what);
  }

  void Check(ncclResult_t result, const char* what) const {
    if (result != 0) throw std::runtime_error(std::string(what) + ": " + nccl_.errorString(result));
  }

  const Nccl& nccl_;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  mutable std::mutex mutex_;
  std::string aborted_;
};

}  // namespace

std::unique_ptr<Communicator> MakeNcclCommunicator(const std::vector<int>& devices) {
  if (devices.empty()) throw std::invalid_argument("an NCCL group needs at least one device");
  return std::make_unique<NcclCommunicator>(devices);
}
#else
std::unique_ptr<Communicator> MakeNcclCommunicator(const std::vector<int>& /*devices*/) {
  throw std::runtime_error("tensor parallelism on CUDA needs a build of the native engine with CUDA (nvcc was not found when it was built)");
}
#endif

}  // namespace chorus
