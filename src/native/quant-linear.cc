#include "quant-linear.h"

#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda-check.h"
#include "custom-op.h"

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus {

namespace {

int64_t RequiredInt(const Ort::ConstKernelInfo& kernel, const char* name) {
  try {
    return kernel.GetAttribute<int64_t>(name);
  } catch (const Ort::Exception&) {
    throw std::invalid_argument(std::string("the attribute ") + name + " is required");
  }
}

int64_t ElementsOf(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The kernel knob `name` from the environment: empty where unset, else one of `allowed`, refused by
// name otherwise ("must be a, b or c, not x").
std::string Knob(const char* name, std::initializer_list<const char*> allowed) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return "";
  std::string list;
  size_t i = 0;
  for (const char* choice : allowed) {
    if (std::string(choice) == value) return value;
    list += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + std::string(choice);
    i++;
  }
  throw std::invalid_argument(std::string(name) + " must be " + list + ", not " + value);
}

#ifdef CHORUS_WITH_CUDA
// ONNX Runtime's CUDA provider's cuBLAS handle (cuda_resource.h), as Linear takes it.
constexpr int kCudaResourceVersion = 3;
constexpr int kCublasHandleResource = 10002;
// The most scratch memory cuBLASLt may use in the prefill's GEMM.
constexpr size_t kLtWorkspaceBytes = 4u << 20;

// At least `bytes` of device memory for work on `stream`, shared by every QuantLinear on that stream
// (they run one after another on it). It grows only in a run that is not being captured; the buffers
// it outgrows are kept, as graphs captured earlier still write there.
void* StreamScratch(void* stream, size_t bytes) {
  static std::mutex lock;
  static std::map<void*, std::pair<void*, size_t>> buffers;
  std::lock_guard<std::mutex> held(lock);
  std::pair<void*, size_t>& buffer = buffers[stream];
  if (bytes <= buffer.second) return buffer.first;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  CheckCuda(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capturing), "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone) {
    throw std::runtime_error("the scratch memory would grow to " + std::to_string(bytes) + " bytes inside a captured run; run the same shape once uncaptured first");
  }
  void* made = nullptr;
  CheckCuda(cudaMalloc(&made, bytes), "cudaMalloc of QuantLinear's scratch memory");
  buffer = {made, bytes};
  return made;
}
#endif

struct QuantLinearKernel : KernelBase<QuantLinearKernel> {
  static constexpr const char* kName = "QuantLinear";

  QuantLinearKernel(const OrtKernelInfo* info, bool cuda, FloatType type) : KernelBase(cuda, type) {
    Ort::ConstKernelInfo kernel(info);
    k_ = RequiredInt(kernel, "K");
    n_ = RequiredInt(kernel, "N");
    bits_ = RequiredInt(kernel, "bits");
    blockSize_ = RequiredInt(kernel, "block_size");
    if (k_ < 1 || n_ < 1 || k_ > std::numeric_limits<int>::max() || n_ > std::numeric_limits<int>::max()) {
      throw std::invalid_argument("K and N must be positive ints, got K " + std::to_string(k_) + ", N " + std::to_string(n_));
    }
    if (bits_ != 4 && bits_ != 8) throw std::invalid_argument("bits must be 4 or 8, got " + std::to_string(bits_));
    if (blockSize_ < 16 || (blockSize_ & (blockSize_ - 1)) != 0) {
      throw std::invalid_argument("block_size must be a power of 2 of at least 16, got " + std::to_string(blockSize_));
    }
    // No attribute: no activation, float activations.
    activation_ = ActivationNamed(AttributeOr<std::string>(kernel, "activation", ""));
    gated_ = AttributeOr<int64_t>(kernel, "gated", 0) != 0;
    epsilon_ = AttributeOr<float>(kernel, "norm_epsilon", 1e-6f);
    if (gated_ && n_ % 2 != 0) throw std::invalid_argument("a gated QuantLinear's N must be even (the gate's rows, then the up projection's), got " + std::to_string(n_));
    accuracyLevel_ = AttributeOr<int64_t>(kernel, "accuracy_level", 0);
    gemv_ = Knob("CHORUS_QUANT_GEMV", {"plain", "mma", "wide"});
    tiles_ = Knob("CHORUS_QUANT_TILES", {"mma", "wmma"});
    tileWarps8_ = Knob("CHORUS_QUANT_TILE_WARPS", {"4", "8"}) == "8";
    wgmma_ = Knob("CHORUS_QUANT_WGMMA", {"0", "1"}) != "0";
    const std::string pipe = Knob("CHORUS_QUANT_TILE_PIPE", {"0", "1"});
    tilePipe_ = pipe.empty() ? -1 : pipe == "1" ? 1 : 0;
    bytesAsFloats_ = Knob("CHORUS_QUANT_BYTE_PAIRS", {"0", "1"}) == "0";
    const std::string pairThreads = Knob("CHORUS_QUANT_PAIR_THREADS", {"64", "128", "256"});
    pairThreads_ = pairThreads.empty() ? 0 : std::stoi(pairThreads);
    const char* host = std::getenv("CHORUS_QUANT_HOST");
    int8Avx2_ = host != nullptr && std::string(host) == "avx2";
  }

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    QuantLinearArgs args = Parse(ctx);
    if (args.rows == 0) return;
#ifdef CHORUS_WITH_CUDA
    if (cuda_) {
      void* stream = ctx.GetGPUComputeStream();
      // The wide kernels take the gate in their epilogue (and the float16 ones a pre-norm in themselves);
      // elsewhere a pre-norm is a pass of its own into scratch rows, and both products of a gated one
      // go into scratch rows (each rounded with its bias), then Linear's gated pass.
      if ((args.gated || args.norm != nullptr) && Wide(args, stream)) {
        CheckCuda(cudaGetLastError(), "kernel");
        return;
      }
      // The allocator, taken where needed, outlives its allocations (they free through it).
      std::optional<Ort::Allocator> allocator;
      auto allocate = [&](size_t bytes) {
        if (!allocator) allocator.emplace(ctx.GetAllocator(*ctx.GetInput(0).GetTensorMemoryInfo()));
        return allocator->GetAllocation(bytes);
      };
      std::optional<Ort::MemoryAllocation> normed;
      if (args.norm != nullptr) {
        normed.emplace(allocate(static_cast<size_t>(args.rows) * args.in * ElementBytes(args.type)));
        PreNormDevice(PreNormOf(args), normed->get(), stream);
        args = OfNormedRows(args, normed->get());
      }
      if (args.gated && MmaTiles(args, stream)) {
        CheckCuda(cudaGetLastError(), "kernel");
        return;
      }
      if (args.gated) {
        QuantLinearArgs both = Ungated(args);
        Ort::MemoryAllocation products = allocate(static_cast<size_t>(args.rows) * both.out * ElementBytes(args.type));
        both.y = products.get();
        Product(both, context, stream);
        GatedDevice(GateOf(args), both.y, stream);
      } else {
        Product(args, context, stream);
      }
      CheckCuda(cudaGetLastError(), "kernel");
      return;
    }
#endif
    std::vector<char> normed;
    if (args.norm != nullptr) {
      normed.resize(static_cast<size_t>(args.rows) * args.in * ElementBytes(args.type));
      PreNormHost(PreNormOf(args), normed.data());
      args = OfNormedRows(args, normed.data());
    }
    if (args.gated) {
      QuantLinearArgs both = Ungated(args);
      std::vector<char> products(static_cast<size_t>(args.rows) * both.out * ElementBytes(args.type));
      both.y = products.data();
      QuantLinearHost(both, RunParallel, context);
      GatedHost(GateOf(args), products.data());
      return;
    }
    QuantLinearHost(args, RunParallel, context);
  }

  // Linear's pre-norm pass over args' rows.
  static LinearArgs PreNormOf(const QuantLinearArgs& q) {
    LinearArgs args{q.x, nullptr, nullptr, nullptr, q.rows, q.in, q.in, Activation::kNone, q.type};
    args.residual = q.residual;
    args.norm = q.norm;
    args.sum = q.sum;
    args.epsilon = q.epsilon;
    return args;
  }

  // Linear's gated pass for args' outputs (their y, activation and type; the bias is in the products).
  static LinearArgs GateOf(const QuantLinearArgs& q) { return LinearArgs{q.x, nullptr, nullptr, q.y, q.rows, q.in, q.out, q.activation, q.type}; }

  // A gated product's two products side by side, ungated: 2 * out outputs, no activation (the bias of
  // each rounded with it).
  static QuantLinearArgs Ungated(const QuantLinearArgs& gated) {
    QuantLinearArgs both = gated;
    both.gated = false;
    both.out = 2 * gated.out;
    both.activation = Activation::kNone;
    return both;
  }

#ifdef CHORUS_WITH_CUDA
  // Whether the wide kernels took args (a decode step, CHORUS_QUANT_GEMV unset or wide), on `stream`.
  bool Wide(const QuantLinearArgs& args, void* stream) const {
    return args.rows <= kQuantRowsKernelRows && (gemv_.empty() || gemv_ == "wide") && QuantWideRowsDevice(args, stream, gemv_ == "wide");
  }

  // Whether the tensor-core tiles of weights dequantized in registers took args (more rows than a decode
  // step's kernels take, up to kQuantTileRows; CHORUS_QUANT_TILES unset or mma), on `stream`: on Hopper,
  // 8-bit steps of up to 64 rows on its warpgroup instructions where they take them.
  bool MmaTiles(const QuantLinearArgs& args, void* stream) {
    if (args.rows <= kQuantRowsKernelRows || args.rows > kQuantTileRows || tiles_ == "wmma") return false;
    return (wgmma_ && QuantWgmmaDevice(args, Multiprocessors(), stream)) || QuantMmaTilesDevice(args, Multiprocessors(), stream);
  }

  int Multiprocessors() {
    if (multiprocessors_ == 0) multiprocessors_ = CurrentMultiprocessors();
    return multiprocessors_;
  }

  // y of x for an ungated product, on `stream`.
  void Product(const QuantLinearArgs& args, OrtKernelContext* context, void* stream) {
    if (args.rows <= kQuantRowsKernelRows) {
      // The wide kernel where it takes the product, else tensor cores, else the plain kernel
      // (CHORUS_QUANT_GEMV names the first to try).
      if (!Wide(args, stream) && (gemv_ == "plain" || !QuantMmaRowsDevice(args, stream))) QuantRowsDevice(args, stream);
    } else if (type_ != FloatType::kFloat32 && args.rows <= kQuantTileRows) {
      if (MmaTiles(args, stream)) return;
      const int splits = QuantTileSplits(args, Multiprocessors());
      QuantTilesDevice(args, splits, StreamScratch(stream, QuantTileScratchBytes(args, splits)), stream);
    } else {
      void* handle = nullptr;
      Ort::ThrowOnError(Ort::GetApi().KernelContext_GetResource(context, kCudaResourceVersion, kCublasHandleResource, &handle));
      Gemm(args, handle, stream);
    }
  }
#endif

  // The inputs and output, checked against the attributes.
  QuantLinearArgs Parse(Ort::KernelContext& ctx) const {
    const Ort::ConstValue x = ctx.GetInput(0);
    std::vector<int64_t> shape = ShapeOf(x);
    if (shape.empty() || shape.back() != k_) throw std::invalid_argument("A must be [..., K] with K = " + std::to_string(k_) + ", got " + ShapeText(shape));
    QuantLinearArgs args{};
    args.in = static_cast<int>(k_);
    args.out = static_cast<int>(gated_ ? n_ / 2 : n_);
    args.gated = gated_;
    args.bits = static_cast<int>(bits_);
    args.blockSize = static_cast<int>(blockSize_);
    args.blocks = static_cast<int>((k_ + blockSize_ - 1) / blockSize_);
    args.blobBytes = static_cast<int>(blockSize_ * bits_ / 8);
    args.activation = activation_;
    args.type = type_;
    args.int8Activations = accuracyLevel_ == 4;
    args.int8Avx2 = int8Avx2_;
    args.tileWarps8 = tileWarps8_;
    args.tilePipe = tilePipe_;
    args.bytesAsFloats = bytesAsFloats_;
    args.pairThreads = pairThreads_;
    args.x = x.GetTensorRawData();
    const Ort::ConstValue weight = ctx.GetInput(1);
    const std::vector<int64_t> weightShape = ShapeOf(weight);
    if (ElementsOf(weightShape) != n_ * args.blocks * args.blobBytes || weightShape.empty() || weightShape[0] != n_) {
      throw std::invalid_argument("B must be [N, ceil(K / block_size), block_size * bits / 8] = [" + std::to_string(n_) + ", " + std::to_string(args.blocks) + ", " +
                                  std::to_string(args.blobBytes) + "], got " + ShapeText(weightShape));
    }
    args.weight = weight.GetTensorData<uint8_t>();
    const Ort::ConstValue scales = ctx.GetInput(2);
    if (ElementsOf(ShapeOf(scales)) != n_ * args.blocks) {
      throw std::invalid_argument("scales must be [N, ceil(K / block_size)] = [" + std::to_string(n_) + ", " + std::to_string(args.blocks) + "], got " + ShapeText(ShapeOf(scales)));
    }
    args.scales = scales.GetTensorRawData();
    if (Given(ctx, 3)) {
      const Ort::ConstValue zeros = ctx.GetInput(3);
      const int64_t perRow = (static_cast<int64_t>(args.blocks) * bits_ + 7) / 8;
      if (ElementsOf(ShapeOf(zeros)) != n_ * perRow) {
        throw std::invalid_argument("zero_points must be uint8 [N, ceil(blocks * bits / 8)] = [" + std::to_string(n_) + ", " + std::to_string(perRow) + "], got " +
                                    ShapeText(ShapeOf(zeros)));
      }
      args.zeroPoints = zeros.GetTensorData<uint8_t>();
    }
    if (Given(ctx, 4)) throw std::invalid_argument("g_idx is not supported: order an act-order checkpoint's inputs by group when the model is built");
    if (Given(ctx, 5)) {
      const Ort::ConstValue bias = ctx.GetInput(5);
      if (ShapeOf(bias) != std::vector<int64_t>{n_}) throw std::invalid_argument("bias must be [N] = [" + std::to_string(n_) + "], got " + ShapeText(ShapeOf(bias)));
      args.bias = bias.GetTensorRawData();
    }
    // The pre-norm: residual (input 6, A's shape), the norm's weight (input 7, [K]) and the sum (output 1).
    if (Given(ctx, 7)) {
      const Ort::ConstValue norm = ctx.GetInput(7);
      if (ShapeOf(norm) != std::vector<int64_t>{k_}) throw std::invalid_argument("norm must be [K] = [" + std::to_string(k_) + "], got " + ShapeText(ShapeOf(norm)));
      args.norm = norm.GetTensorRawData();
      args.epsilon = epsilon_;
      if (Given(ctx, 6)) {
        const Ort::ConstValue residual = ctx.GetInput(6);
        if (ShapeOf(residual) != shape) throw std::invalid_argument("residual must have A's shape " + ShapeText(shape) + ", got " + ShapeText(ShapeOf(residual)));
        args.residual = residual.GetTensorRawData();
      }
      if (ctx.GetOutputCount() > 1) args.sum = ctx.GetOutput(1, shape).GetTensorMutableRawData();
    } else if (Given(ctx, 6)) {
      throw std::invalid_argument("a residual (input 6) goes with a norm's weight (input 7)");
    }
    const int64_t rows = ElementsOf(shape) / k_;
    if (rows > std::numeric_limits<int>::max()) throw std::invalid_argument("A has more rows than an int counts");
    args.rows = static_cast<int>(rows);
    shape.back() = args.out;
    args.y = ctx.GetOutput(0, shape).GetTensorMutableRawData();
    return args;
  }

  static void RunParallel(void* context, void (*fn)(void*, size_t), size_t tasks, void* data) {
    Ort::KernelContext(static_cast<OrtKernelContext*>(context)).ParallelFor(fn, tasks, 0, data);
  }

#ifdef CHORUS_WITH_CUDA
  // Many rows: the weights dequantized once into scratch memory, then Linear's GEMM (cuBLASLt with the
  // bias in its epilogue, else cublasGemmEx), then what is left of bias and activation.
  static void Gemm(const QuantLinearArgs& q, void* handle, void* stream) {
    const size_t weightBytes = (static_cast<size_t>(q.out) * q.in * ElementBytes(q.type) + 255) / 256 * 256;
    char* scratch = static_cast<char*>(StreamScratch(stream, weightBytes + kLtWorkspaceBytes));
    DequantizeDevice(q, scratch, stream);
    LinearArgs args{q.x, scratch, q.bias, q.y, q.rows, q.in, q.out, q.activation, q.type};
    const bool withBias = q.bias != nullptr;
    const bool lt = LinearLtDevice(args, 0, q.out, q.y, q.out, withBias, nullptr, kLtWorkspaceBytes, stream) &&
                    LinearLtDevice(args, 0, q.out, q.y, q.out, withBias, scratch + weightBytes, kLtWorkspaceBytes, stream);
    if (!lt) LinearGemmDevice(args, handle, 0, q.out, q.y, q.out);
    if (lt) {
      args.bias = nullptr;
      if (args.activation == Activation::kRelu) args.activation = Activation::kNone;
    }
    if (args.bias != nullptr || args.activation != Activation::kNone) BiasActivateDevice(args, stream);
  }

  int multiprocessors_ = 0;
#endif

  std::string gemv_;   // CHORUS_QUANT_GEMV: plain, mma, wide, or empty (the default order)
  std::string tiles_;  // CHORUS_QUANT_TILES: mma (the default), or wmma (the tiles of weights dequantized in shared memory)
  bool int8Avx2_ = false;
  bool tileWarps8_ = false;  // CHORUS_QUANT_TILE_WARPS=8
  bool wgmma_ = true;        // 8-bit batch steps on Hopper's warpgroup instructions (CHORUS_QUANT_WGMMA=0: not)
  int tilePipe_ = -1;        // CHORUS_QUANT_TILE_PIPE: 1 always, 0 never, unset where faster
  bool bytesAsFloats_ = false;  // CHORUS_QUANT_BYTE_PAIRS=0
  int pairThreads_ = 0;          // CHORUS_QUANT_PAIR_THREADS
  int64_t k_ = 0;
  int64_t n_ = 0;
  int64_t bits_ = 0;
  int64_t blockSize_ = 0;
  int64_t accuracyLevel_ = 0;
  Activation activation_ = Activation::kNone;
  bool gated_ = false;
  float epsilon_ = 1e-6f;
};

}  // namespace

OpList QuantLinearOps(bool cuda, FloatType type) {
  const ONNXTensorElementDataType t = ElementOf(type);
  const ONNXTensorElementDataType u8 = ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
  // QuantLinear: A, B, scales, zero_points, g_idx, bias (MatMulNBits' inputs), residual, norm; Y, sum.
  return {MakeOp<QuantLinearKernel>(cuda, type, {t, u8, t, u8, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, t, t, t}, {3, 4, 5, 6, 7}, 2)};
}

}  // namespace chorus
