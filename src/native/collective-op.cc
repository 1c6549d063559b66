// The operators AllReduce(x) -> y (the sum over ranks) and AllGather(x) -> y (the ranks' x side by
// side along the last axis), domain `chorus`, attribute world_size. The rank and its communicator
// come from the thread that runs the session (collective.h, CurrentRank), so every rank's graph is
// the same graph with its own weights.
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "collective.h"
#include "custom-op.h"

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus {

namespace {

// What both kernels share: the world size, the rank of the calling thread checked against it, and
// the copy a group of one makes.
template <class Kernel>
struct CollectiveKernel : KernelBase<Kernel> {
  CollectiveKernel(const OrtKernelInfo* info, bool cuda, FloatType type) : KernelBase<Kernel>(cuda, type) {
    world_ = static_cast<int>(Ort::ConstKernelInfo(info).GetAttribute<int64_t>("world_size"));
    if (world_ < 1) throw std::invalid_argument("world_size must be at least 1, got " + std::to_string(world_));
  }

  // The calling thread's rank, or null for a group of one.
  const RankContext* Rank() const {
    if (world_ == 1) return nullptr;
    const RankContext& rank = CurrentRank();
    if (rank.comm == nullptr) {
      throw std::runtime_error("world_size " + std::to_string(world_) + " needs a tensor-parallel group of as many ranks, and this session runs outside one (load the model with tensor_parallel " +
                               std::to_string(world_) + ")");
    }
    if (rank.comm->world() != world_) throw std::runtime_error("world_size " + std::to_string(world_) + " in a tensor-parallel group of " + std::to_string(rank.comm->world()));
    if (rank.comm->onDevice() != this->cuda_) throw std::runtime_error(std::string("a ") + (this->cuda_ ? "CUDA" : "CPU") + " session in a group whose collectives run on the " + (this->cuda_ ? "CPU" : "GPU"));
    return &rank;
  }

  void Copy(void* y, const void* x, size_t bytes, Ort::KernelContext& ctx) const {
    if (bytes == 0 || y == x) return;
#ifdef CHORUS_WITH_CUDA
    if (this->cuda_) {
      const cudaError_t status = cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(ctx.GetGPUComputeStream()));
      if (status != cudaSuccess) throw std::runtime_error(std::string("cudaMemcpyAsync: ") + cudaGetErrorString(status));
      return;
    }
#endif
    std::memcpy(y, x, bytes);
  }

  int world_ = 1;
};

struct AllReduceKernel : CollectiveKernel<AllReduceKernel> {
  static constexpr const char* kName = "AllReduce";
  using CollectiveKernel::CollectiveKernel;

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    Ort::ConstValue x = ctx.GetInput(0);
    const std::vector<int64_t> shape = ShapeOf(x);
    const size_t count = x.GetTensorTypeAndShapeInfo().GetElementCount();
    Ort::UnownedValue y = ctx.GetOutput(0, shape);
    const RankContext* rank = Rank();
    if (rank == nullptr) return Copy(y.GetTensorMutableRawData(), x.GetTensorRawData(), count * ElementBytes(type_), ctx);
    if (count == 0) return;
    rank->comm->AllReduce(rank->rank, x.GetTensorRawData(), y.GetTensorMutableRawData(), count, type_, cuda_ ? ctx.GetGPUComputeStream() : nullptr);
  }
};

struct AllGatherKernel : CollectiveKernel<AllGatherKernel> {
  static constexpr const char* kName = "AllGather";
  using CollectiveKernel::CollectiveKernel;

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    Ort::ConstValue x = ctx.GetInput(0);
    std::vector<int64_t> shape = ShapeOf(x);
    if (shape.empty()) throw std::invalid_argument("x must have at least one axis, the one gathered");
    const size_t n = static_cast<size_t>(shape.back());
    const size_t count = x.GetTensorTypeAndShapeInfo().GetElementCount();
    const size_t rows = n == 0 ? 0 : count / n;
    shape.back() *= world_;
    Ort::UnownedValue y = ctx.GetOutput(0, shape);
    const RankContext* rank = Rank();
    if (rank == nullptr) return Copy(y.GetTensorMutableRawData(), x.GetTensorRawData(), count * ElementBytes(type_), ctx);
    if (count == 0) return;
    std::optional<Ort::MemoryAllocation> scratch;
    if (cuda_ && rows > 1) {
      Ort::Allocator allocator = ctx.GetAllocator(*y.GetTensorMemoryInfo());
      scratch.emplace(allocator.GetAllocation(count * world_ * ElementBytes(type_)));
    }
    rank->comm->AllGather(rank->rank, x.GetTensorRawData(), y.GetTensorMutableRawData(), rows, n, type_, cuda_ ? ctx.GetGPUComputeStream() : nullptr,
                          scratch ? scratch->get() : nullptr);
  }
};

}  // namespace

OpList CollectiveOps(bool cuda, FloatType type) {
  const ONNXTensorElementDataType element = ElementOf(type);
  return {MakeOp<AllReduceKernel>(cuda, type, {element}, {}, 1), MakeOp<AllGatherKernel>(cuda, type, {element}, {}, 1)};
}

}  // namespace chorus
