#include "linear.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "custom-op.h"

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus {

Activation ActivationNamed(const std::string& name) {
  if (name.empty() || name == "none") return Activation::kNone;
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu") return Activation::kGelu;
  if (name == "gelu_tanh") return Activation::kGeluTanh;
  if (name == "silu") return Activation::kSilu;
  throw std::invalid_argument("activation must be one of \"\", relu, gelu, gelu_tanh, silu; not \"" + name + "\"");
}

namespace {

// n elements of data of the float type from `data`, as float.
void Widen(const void* data, FloatType type, size_t from, size_t n, float* out) {
  for (size_t i = 0; i < n; i++) out[i] = ElementAt(data, type, from + i);
}

float Round(float v, FloatType type) { return RoundTo(v, type); }

}  // namespace

void PreNormHost(const LinearArgs& a, void* normed) {
  const size_t in = static_cast<size_t>(a.in);
  std::vector<float> row(in);
  for (int r = 0; r < a.rows; r++) {
    const size_t at = static_cast<size_t>(r) * in;
    // A post-norm: x normed on its own first (float32 inside, rounded once).
    float postInverse = 1;
    if (a.postNorm != nullptr) {
      float squares = 0;
      for (size_t k = 0; k < in; k++) {
        const float x = ElementAt(a.x, a.type, at + k);
        squares += x * x;
      }
      postInverse = 1.0f / std::sqrt(squares / static_cast<float>(in) + a.postEpsilon);
    }
    float squares = 0;
    for (size_t k = 0; k < in; k++) {
      float x = ElementAt(a.x, a.type, at + k);
      if (a.postNorm != nullptr) x = Round(x * postInverse * ElementAt(a.postNorm, a.type, k), a.type);
      row[k] = a.residual == nullptr ? x : Round(x + ElementAt(a.residual, a.type, at + k), a.type);
      squares += row[k] * row[k];
      if (a.sum != nullptr) PutElement(a.sum, a.type, at + k, row[k]);
    }
    const float inverse = 1.0f / std::sqrt(squares / static_cast<float>(in) + a.epsilon);
    for (size_t k = 0; k < in; k++) PutElement(normed, a.type, at + k, Round(ElementAt(a.norm, a.type, k) * Round(row[k] * inverse, a.type), a.type));
  }
}

void LinearHost(const LinearArgs& given) {
  // A pre-norm: the product of the normed rows.
  std::vector<uint8_t> normed;
  if (given.norm != nullptr) {
    normed.resize(static_cast<size_t>(given.rows) * given.in * ElementBytes(given.type));
    PreNormHost(given, normed.data());
  }
  const LinearArgs a = given.norm == nullptr ? given : OfNormedRows(given, normed.data());
  if (a.gated) {
    // Both products (each rounded with its bias), then the gate.
    std::vector<uint8_t> products(static_cast<size_t>(a.rows) * 2 * a.out * ElementBytes(a.type));
    LinearArgs both = a;
    both.gated = false;
    both.out = 2 * a.out;
    both.activation = Activation::kNone;
    both.y = products.data();
    LinearHost(both);
    GatedHost(a, products.data());
    return;
  }
  const size_t in = static_cast<size_t>(a.in);
  std::vector<float> x(static_cast<size_t>(a.rows) * in);
  Widen(a.x, a.type, 0, x.size(), x.data());
  std::vector<float> w(in);
  for (int o = 0; o < a.out; o++) {
    Widen(a.weight, a.type, static_cast<size_t>(o) * in, in, w.data());
    const float bias = a.bias == nullptr ? 0.0f : ElementAt(a.bias, a.type, o);
    for (int r = 0; r < a.rows; r++) {
      const float* row = x.data() + static_cast<size_t>(r) * in;
      float sum = 0;
      for (size_t k = 0; k < in; k++) sum += row[k] * w[k];
      float v = Round(sum + bias, a.type);
      if (a.activation != Activation::kNone) v = Round(Activate(v, a.activation), a.type);
      if (a.softcap > 0) v = Round(Round(std::tanh(Round(v / a.softcap, a.type)), a.type) * a.softcap, a.type);
      PutElement(a.y, a.type, static_cast<size_t>(r) * a.out + o, v);
    }
  }
}

void GatedHost(const LinearArgs& a, const void* products) {
  for (int r = 0; r < a.rows; r++) {
    for (int o = 0; o < a.out; o++) {
      const size_t at = static_cast<size_t>(r) * 2 * a.out + o;
      float gate = ElementAt(products, a.type, at);
      if (a.activation != Activation::kNone) gate = Round(Activate(gate, a.activation), a.type);
      PutElement(a.y, a.type, static_cast<size_t>(r) * a.out + o, Round(gate * ElementAt(products, a.type, at + a.out), a.type));
    }
  }
}

namespace {

// ONNX Runtime's CUDA provider hands kernels its cuBLAS handle as a resource (cuda_resource.h:
// version 3, id cuda_resource_offset + 2).
constexpr int kCudaResourceVersion = 3;
constexpr int kCublasHandleResource = 10002;
// The most scratch memory a cuBLASLt product may use (split-K partial sums).
constexpr size_t kLtWorkspaceBytes = 4u << 20;

struct LinearKernel : KernelBase<LinearKernel> {
  static constexpr const char* kName = "Linear";

  LinearKernel(const OrtKernelInfo* info, bool cuda, FloatType type) : KernelBase(cuda, type) {
    Ort::ConstKernelInfo kernel(info);
    // No attribute: no activation, one projection.
    activation_ = ActivationNamed(AttributeOr<std::string>(kernel, "activation", ""));
    gated_ = AttributeOr<int64_t>(kernel, "gated", 0) != 0;
    epsilon_ = AttributeOr<float>(kernel, "norm_epsilon", 1e-6f);
    postEpsilon_ = AttributeOr<float>(kernel, "post_norm_epsilon", 1e-6f);
    last_ = AttributeOr<int64_t>(kernel, "last", 0) != 0;
    softcap_ = AttributeOr<float>(kernel, "softcap", 0.0f);
    if (!(softcap_ >= 0) || std::isinf(softcap_)) throw std::invalid_argument("softcap must be a finite number >= 0 (0: none), not " + std::to_string(softcap_));
    if (softcap_ > 0 && gated_) throw std::invalid_argument("softcap is not taken with gated: a gated Linear's output is not capped");
  }

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    const Ort::ConstValue x = ctx.GetInput(0);
    const Ort::ConstValue weight = ctx.GetInput(1);
    std::vector<int64_t> shape = ShapeOf(x);
    const std::vector<int64_t> weightShape = ShapeOf(weight);
    if (shape.empty()) throw std::invalid_argument("x must be [..., in], not a scalar");
    if (weightShape.size() != 2 || weightShape[1] != shape.back()) {
      throw std::invalid_argument("weight must be [out, in] with in = x's last axis (" + std::to_string(shape.back()) + ")");
    }
    if (gated_ && weightShape[0] % 2 != 0) throw std::invalid_argument("a gated Linear's weight must be [2 * out, in] (the gate's rows, then the up projection's), not " + std::to_string(weightShape[0]) + " rows");
    LinearArgs args{};
    args.in = static_cast<int>(shape.back());
    args.out = static_cast<int>(gated_ ? weightShape[0] / 2 : weightShape[0]);
    args.activation = activation_;
    args.type = type_;
    args.gated = gated_;
    args.softcap = softcap_;
    args.x = x.GetTensorRawData();
    args.weight = weight.GetTensorRawData();
    if (Given(ctx, 2)) {
      const Ort::ConstValue bias = ctx.GetInput(2);
      if (ShapeOf(bias) != std::vector<int64_t>{weightShape[0]}) throw std::invalid_argument("bias must be [weight's rows] (" + std::to_string(weightShape[0]) + ")");
      args.bias = bias.GetTensorRawData();
    }
    // last: x [batch, sequence, in] (and the residual), of which each row's last position alone is taken.
    const std::vector<int64_t> given = shape;
    int64_t positions = 1;
    if (last_) {
      if (shape.size() != 3) throw std::invalid_argument("a Linear with last takes x [batch, sequence, in], not " + std::to_string(shape.size()) + " axes");
      if (ctx.GetOutputCount() > 1) throw std::invalid_argument("a Linear with last has no sum output");
      positions = shape[1];
      if (positions == 0) throw std::invalid_argument("a Linear with last takes at least one position, not 0");
      shape[1] = 1;
    }
    // last_index (input 6, int32 [batch]): each row's position to take instead of its last (a prefill of
    // rows padded past their prompts). A decode step's single position is taken as it is.
    const int32_t* lastIndex = nullptr;
    if (Given(ctx, 6)) {
      if (!last_) throw std::invalid_argument("last_index (input 6) goes with last=1");
      const Ort::ConstValue index = ctx.GetInput(6);
      const Ort::TensorTypeAndShapeInfo info = index.GetTensorTypeAndShapeInfo();
      if (info.GetElementType() != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32) throw std::invalid_argument("last_index must be int32");
      const std::vector<int64_t> indexShape = info.GetShape();
      if (indexShape != std::vector<int64_t>{given[0]}) throw std::invalid_argument("last_index must be [batch] (" + std::to_string(given[0]) + "), not " + ShapeText(indexShape));
      if (positions > 1) lastIndex = index.GetTensorData<int32_t>();
    }
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < shape.size(); d++) rows *= shape[d];
    if (rows > std::numeric_limits<int>::max()) throw std::invalid_argument("x has more rows than an int counts");
    args.rows = static_cast<int>(rows);
    // The pre-norm: residual (input 3, x's shape), the norm's weight (input 4, [in]) and the sum (output 1).
    if (Given(ctx, 4)) {
      const Ort::ConstValue norm = ctx.GetInput(4);
      if (ShapeOf(norm) != std::vector<int64_t>{args.in}) throw std::invalid_argument("norm must be [in] (" + std::to_string(args.in) + ")");
      args.norm = norm.GetTensorRawData();
      args.epsilon = epsilon_;
      if (Given(ctx, 3)) {
        const Ort::ConstValue residual = ctx.GetInput(3);
        if (ShapeOf(residual) != given) throw std::invalid_argument("residual must have x's shape");
        args.residual = residual.GetTensorRawData();
      }
      if (ctx.GetOutputCount() > 1) args.sum = ctx.GetOutput(1, shape).GetTensorMutableRawData();
      // The post-norm (input 5, [in]): x normed on its own before the residual joins it.
      if (Given(ctx, 5)) {
        const Ort::ConstValue post = ctx.GetInput(5);
        if (ShapeOf(post) != std::vector<int64_t>{args.in}) throw std::invalid_argument("post_norm must be [in] (" + std::to_string(args.in) + ")");
        args.postNorm = post.GetTensorRawData();
        args.postEpsilon = postEpsilon_;
      }
    } else if (Given(ctx, 3)) {
      throw std::invalid_argument("a residual (input 3) goes with a norm's weight (input 4)");
    } else if (Given(ctx, 5)) {
      throw std::invalid_argument("a post_norm (input 5) goes with a norm's weight (input 4)");
    }
    shape.back() = args.out;
    Ort::UnownedValue y = ctx.GetOutput(0, shape);
    args.y = y.GetTensorMutableRawData();
    if (args.rows == 0 || args.out == 0) return;
#ifdef CHORUS_WITH_CUDA
    if (cuda_) {
      void* stream = ctx.GetGPUComputeStream();
      // Scratch rows, from an allocator taken where needed that outlives them (they free through it).
      std::optional<Ort::Allocator> allocator;
      std::vector<Ort::MemoryAllocation> scratch;
      auto allocate = [&](size_t bytes) {
        if (!allocator) allocator.emplace(ctx.GetAllocator(*y.GetTensorMemoryInfo()));
        scratch.push_back(allocator->GetAllocation(bytes));
        return scratch.back().get();
      };
      // last over several positions (a prefill): each row's last x and residual gathered into scratch rows
      // (with last_index, the rows its device memory names, without the host reading it).
      if (positions > 1) {
        const size_t rowBytes = static_cast<size_t>(args.in) * ElementBytes(args.type);
        auto lastOf = [&](const void* from) {
          void* rows = allocate(rowBytes * args.rows);
          GatherRowsDevice(from, rows, rowBytes, args.rows, positions, lastIndex, stream);
          return rows;
        };
        args.x = lastOf(args.x);
        if (args.residual != nullptr) args.residual = lastOf(args.residual);
      }
      // A pre-norm the kernel cannot take: its own pass into scratch rows, then the product of those.
      if (args.norm != nullptr && !LinearRowsFusesNorm(args)) {
        void* normed = allocate(static_cast<size_t>(args.rows) * args.in * ElementBytes(args.type));
        PreNormDevice(args, normed, stream);
        args = OfNormedRows(args, normed);
      }
      if (args.rows <= kLinearKernelRows) {
        LinearRowsDevice(args, stream);
      } else {
        void* handle = nullptr;
        Ort::ThrowOnError(Ort::GetApi().KernelContext_GetResource(context, kCudaResourceVersion, kCublasHandleResource, &handle));
        if (args.gated) {
          // Both products into scratch rows (each rounded with its bias), then the gate applied in one pass.
          void* products = allocate(static_cast<size_t>(args.rows) * 2 * args.out * ElementBytes(args.type));
          LinearArgs both = args;
          both.gated = false;
          both.out = 2 * args.out;
          both.activation = Activation::kNone;
          both.y = products;
          Gemm(ctx, y.GetTensorMemoryInfo(), both, handle, stream);
          GatedDevice(args, products, stream);
        } else {
          Gemm(ctx, y.GetTensorMemoryInfo(), args, handle, stream);
        }
      }
      const cudaError_t status = cudaGetLastError();
      if (status != cudaSuccess) throw std::runtime_error(std::string("kernel: ") + cudaGetErrorString(status));
      return;
    }
#endif
    std::vector<uint8_t> lastX;
    std::vector<uint8_t> lastResidual;
    if (positions > 1) {
      const size_t rowBytes = static_cast<size_t>(args.in) * ElementBytes(args.type);
      if (lastIndex != nullptr) {
        for (int r = 0; r < args.rows; r++) {
          if (lastIndex[r] < 0 || lastIndex[r] >= positions) {
            throw std::out_of_range("last_index of row " + std::to_string(r) + " is " + std::to_string(lastIndex[r]) + ", outside 0.." + std::to_string(positions - 1));
          }
        }
      }
      auto lastOf = [&](const void* from, std::vector<uint8_t>& into) {
        into.resize(rowBytes * args.rows);
        for (int r = 0; r < args.rows; r++) {
          const int64_t at = lastIndex == nullptr ? positions - 1 : lastIndex[r];
          std::memcpy(into.data() + r * rowBytes, static_cast<const uint8_t*>(from) + (r * positions + at) * rowBytes, rowBytes);
        }
        return into.data();
      };
      args.x = lastOf(args.x, lastX);
      if (args.residual != nullptr) args.residual = lastOf(args.residual, lastResidual);
    }
    LinearHost(args);
  }

  Activation activation_ = Activation::kNone;
  bool gated_ = false;
  float epsilon_ = 1e-6f;
  float postEpsilon_ = 1e-6f;
  bool last_ = false;
  float softcap_ = 0;

#ifdef CHORUS_WITH_CUDA
  // More rows: one GEMM by cuBLASLt, the bias (and a ReLU) in its epilogue, or by cublasGemmEx where
  // cuBLASLt did not load or has no algorithm for it; what is left of bias and activation in one pass.
  // cuBLAS's fast kernels want outputs in multiples of 16 bytes: a product of 50,265 outputs (a
  // vocabulary) got a kernel twice as slow as one of 50,272 (82 us against 43 for bart-large's head at 32
  // rows). Such a product runs as the multiple's outputs and the few left, into rows padded to 16 bytes in
  // scratch memory, then one strided copy into y.
  static void Gemm(const Ort::KernelContext& ctx, const OrtMemoryInfo* memory, const LinearArgs& args, void* handle, void* stream) {
    Ort::Allocator allocator = ctx.GetAllocator(*memory);
    const size_t element = ElementBytes(args.type);
    const int per = static_cast<int>(16 / element);
    const int aligned = args.out / per * per;
    // The products: all outputs into y, or the aligned ones and the rest into padded scratch rows.
    struct Part {
      int first, count;
      void* y;
      int ldy;
    };
    std::vector<Part> parts;
    std::optional<Ort::MemoryAllocation> scratch;
    const int padded = aligned + per;
    if (aligned == args.out || aligned == 0) {
      parts.push_back({0, args.out, args.y, args.out});
    } else {
      scratch.emplace(allocator.GetAllocation(static_cast<size_t>(padded) * element * static_cast<size_t>(args.rows)));
      char* rows = static_cast<char*>(scratch->get());
      parts.push_back({0, aligned, rows, padded});
      parts.push_back({aligned, args.out - aligned, rows + static_cast<size_t>(aligned) * element, padded});
    }
    const bool withBias = args.bias != nullptr;
    bool lt = true;
    for (const Part& p : parts) lt = lt && LinearLtDevice(args, p.first, p.count, p.y, p.ldy, withBias, nullptr, kLtWorkspaceBytes, stream);
    if (lt) {
      Ort::MemoryAllocation workspace = allocator.GetAllocation(kLtWorkspaceBytes);
      for (const Part& p : parts) LinearLtDevice(args, p.first, p.count, p.y, p.ldy, withBias, workspace.get(), kLtWorkspaceBytes, stream);
    } else {
      for (const Part& p : parts) LinearGemmDevice(args, handle, p.first, p.count, p.y, p.ldy);
    }
    if (scratch.has_value()) {
      const size_t rowBytes = static_cast<size_t>(args.out) * element;
      const cudaError_t copied = cudaMemcpy2DAsync(args.y, rowBytes, scratch->get(), static_cast<size_t>(padded) * element, rowBytes, static_cast<size_t>(args.rows),
                                                   cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream));
      if (copied != cudaSuccess) throw std::runtime_error(std::string("cudaMemcpy2DAsync: ") + cudaGetErrorString(copied));
    }
    LinearArgs rest = args;
    if (lt) {
      rest.bias = nullptr;
      if (rest.activation == Activation::kRelu) rest.activation = Activation::kNone;
    }
    if (rest.bias != nullptr || rest.activation != Activation::kNone || rest.softcap > 0) BiasActivateDevice(rest, stream);
  }
#endif
};

}  // namespace

OpList LinearOps(bool cuda, FloatType type) {
  const ONNXTensorElementDataType t = ElementOf(type);
  // Linear: x, weight, bias, residual, norm, post_norm, last_index; y, sum.
  return {MakeOp<LinearKernel>(cuda, type, {t, t, t, t, t, t, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32}, {2, 3, 4, 5, 6}, 2)};
}

}  // namespace chorus
