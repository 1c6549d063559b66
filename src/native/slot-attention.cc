#include "slot-attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus {

namespace {

void Put(void* p, FloatType type, size_t i, float value) {
  if (type == FloatType::kFloat16) {
    static_cast<uint16_t*>(p)[i] = FloatToHalf(value);
  } else {
    static_cast<float*>(p)[i] = value;
  }
}

void CopyElement(void* dst, const void* src, FloatType type, size_t to, size_t from) {
  if (type == FloatType::kFloat16) {
    static_cast<uint16_t*>(dst)[to] = static_cast<const uint16_t*>(src)[from];
  } else {
    static_cast<float*>(dst)[to] = static_cast<const float*>(src)[from];
  }
}

}  // namespace

void SlotAttentionHost(const SlotAttentionArgs& a) {
  const size_t width = static_cast<size_t>(a.heads) * a.dim;
  const bool self = a.key != nullptr;
  std::vector<float> scores(a.capacity);
  std::vector<float> sum(a.dim);
  for (int r = 0; r < a.rows; r++) {
    const int past = a.lengths[r];
    if (past < 0 || past + (self ? 1 : 0) > a.capacity || (!self && past == 0)) {
      throw std::out_of_range("SlotAttention: row " + std::to_string(r) + " has length " + std::to_string(past) + " in a slot of " + std::to_string(a.capacity));
    }
    const size_t slot = static_cast<size_t>(r) * a.capacity * width;
    if (self) {
      for (size_t i = 0; i < width; i++) {
        CopyElement(a.cacheKey, a.key, a.type, slot + past * width + i, r * width + i);
        CopyElement(a.cacheValue, a.value, a.type, slot + past * width + i, r * width + i);
      }
    }
    const int n = past + (self ? 1 : 0);
    for (int h = 0; h < a.heads; h++) {
      const size_t q = r * width + static_cast<size_t>(h) * a.dim;
      float highest = -INFINITY;
      for (int j = 0; j < n; j++) {
        const size_t k = slot + j * width + static_cast<size_t>(h) * a.dim;
        float dot = 0;
        for (int d = 0; d < a.dim; d++) dot += ElementAt(a.query, a.type, q + d) * ElementAt(a.cacheKey, a.type, k + d);
        float score = dot * a.scale;
        if (a.bias != nullptr) score += a.bias[static_cast<size_t>(h) * a.biasSpan + std::min(past - j, a.biasSpan - 1)];
        scores[j] = score;
        highest = std::max(highest, score);
      }
      float total = 0;
      for (int j = 0; j < n; j++) {
        scores[j] = std::exp(scores[j] - highest);
        total += scores[j];
      }
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int j = 0; j < n; j++) {
        const size_t v = slot + j * width + static_cast<size_t>(h) * a.dim;
        for (int d = 0; d < a.dim; d++) sum[d] += scores[j] * ElementAt(a.cacheValue, a.type, v + d);
      }
      for (int d = 0; d < a.dim; d++) Put(a.output, a.type, q + d, sum[d] / total);
    }
  }
}

namespace {

ONNXTensorElementDataType ElementOf(FloatType type) {
  return type == FloatType::kFloat16 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}

std::vector<int64_t> ShapeOf(const Ort::ConstValue& value) { return value.GetTensorTypeAndShapeInfo().GetShape(); }

OrtStatusPtr Failure(const std::string& message) { return Ort::GetApi().CreateStatus(ORT_INVALID_ARGUMENT, ("SlotAttention: " + message).c_str()); }

struct SlotAttentionKernel {
  SlotAttentionKernel(const OrtKernelInfo* info, bool cuda, FloatType type) : cuda_(cuda), type_(type) {
    Ort::ConstKernelInfo kernel(info);
    heads_ = static_cast<int>(kernel.GetAttribute<int64_t>("num_heads"));
    scale_ = kernel.GetAttribute<float>("scale");
  }

  OrtStatusPtr ComputeV2(OrtKernelContext* context) {
    try {
      Compute(context);
      return nullptr;
    } catch (const std::exception& e) {
      return Failure(e.what());
    }
  }

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    const Ort::ConstValue query = ctx.GetInput(0);
    const std::vector<int64_t> queryShape = ShapeOf(query);
    if (queryShape.size() != 3 || queryShape[1] != 1 || heads_ <= 0 || queryShape[2] % heads_ != 0) {
      throw std::invalid_argument("query must be [rows, 1, num_heads * head_dim]");
    }
    const Ort::ConstValue key = ctx.GetInput(1);
    const Ort::ConstValue value = ctx.GetInput(2);
    const bool self = static_cast<const OrtValue*>(key) != nullptr;
    if (self != (static_cast<const OrtValue*>(value) != nullptr)) throw std::invalid_argument("key and value come together");
    const Ort::ConstValue pastKey = ctx.GetInput(3);
    const Ort::ConstValue pastValue = ctx.GetInput(4);
    const std::vector<int64_t> cacheShape = ShapeOf(pastKey);
    if (cacheShape.size() != 3 || cacheShape[0] != queryShape[0] || cacheShape[2] != queryShape[2] || ShapeOf(pastValue) != cacheShape) {
      throw std::invalid_argument("past_key and past_value must be [rows, capacity, num_heads * head_dim] of the query's rows and width");
    }
    const Ort::ConstValue lengths = ctx.GetInput(5);
    if (ShapeOf(lengths) != std::vector<int64_t>{queryShape[0]}) throw std::invalid_argument("lengths must be [rows]");
    SlotAttentionArgs args{};
    args.rows = static_cast<int>(queryShape[0]);
    args.heads = heads_;
    args.dim = static_cast<int>(queryShape[2] / heads_);
    args.capacity = static_cast<int>(cacheShape[1]);
    args.scale = scale_;
    args.type = type_;
    args.query = query.GetTensorRawData();
    args.lengths = lengths.GetTensorData<int32_t>();
    if (ctx.GetInputCount() > 6) {
      const Ort::ConstValue bias = ctx.GetInput(6);
      if (static_cast<const OrtValue*>(bias) != nullptr) {
        const std::vector<int64_t> biasShape = ShapeOf(bias);
        if (biasShape.size() != 2 || biasShape[0] != heads_ || biasShape[1] < 1) throw std::invalid_argument("position_bias must be [num_heads, span]");
        args.bias = bias.GetTensorData<float>();
        args.biasSpan = static_cast<int>(biasShape[1]);
      }
    }
    args.output = ctx.GetOutput(0, queryShape).GetTensorMutableRawData();
    const size_t cacheBytes = static_cast<size_t>(cacheShape[0]) * cacheShape[1] * cacheShape[2] * (type_ == FloatType::kFloat16 ? 2 : 4);
    if (self) {
      if (ShapeOf(key) != queryShape || ShapeOf(value) != queryShape) throw std::invalid_argument("key and value must be shaped as the query");
      if (ctx.GetOutputCount() < 3) throw std::invalid_argument("self-attention writes present_key and present_value");
      args.key = key.GetTensorRawData();
      args.value = value.GetTensorRawData();
      void* present[2] = {ctx.GetOutput(1, cacheShape).GetTensorMutableRawData(), ctx.GetOutput(2, cacheShape).GetTensorMutableRawData()};
      const void* past[2] = {pastKey.GetTensorRawData(), pastValue.GetTensorRawData()};
      // Bound to the past's buffers, the present is written in place; elsewhere, it starts as a copy.
      for (int i = 0; i < 2; i++) {
        if (present[i] == past[i]) continue;
#ifdef CHORUS_WITH_CUDA
        if (cuda_) {
          cudaMemcpyAsync(present[i], past[i], cacheBytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(ctx.GetGPUComputeStream()));
          continue;
        }
#endif
        std::memcpy(present[i], past[i], cacheBytes);
      }
      args.cacheKey = present[0];
      args.cacheValue = present[1];
    } else {
      args.cacheKey = const_cast<void*>(pastKey.GetTensorRawData());
      args.cacheValue = const_cast<void*>(pastValue.GetTensorRawData());
    }
#ifdef CHORUS_WITH_CUDA
    if (cuda_) {
      if (args.capacity > kSlotAttentionMaxCapacity) throw std::invalid_argument("a slot of " + std::to_string(args.capacity) + " positions; at most " + std::to_string(kSlotAttentionMaxCapacity));
      SlotAttentionDevice(args, ctx.GetGPUComputeStream());
      const cudaError_t status = cudaGetLastError();
      if (status != cudaSuccess) throw std::runtime_error(std::string("kernel: ") + cudaGetErrorString(status));
      return;
    }
#endif
    SlotAttentionHost(args);
  }

  bool cuda_;
  FloatType type_;
  int heads_ = 0;
  float scale_ = 1;
};

struct SlotAttentionOp : Ort::CustomOpBase<SlotAttentionOp, SlotAttentionKernel, true> {
  SlotAttentionOp(bool cuda, FloatType type) : cuda_(cuda), type_(type) {}

  OrtStatusPtr CreateKernelV2(const OrtApi& /*api*/, const OrtKernelInfo* info, void** kernel) const {
    try {
      *kernel = new SlotAttentionKernel(info, cuda_, type_);
      return nullptr;
    } catch (const std::exception& e) {
      return Failure(e.what());
    }
  }
  const char* GetName() const { return "SlotAttention"; }
  const char* GetExecutionProviderType() const { return cuda_ ? "CUDAExecutionProvider" : "CPUExecutionProvider"; }
  size_t GetInputTypeCount() const { return 7; }
  ONNXTensorElementDataType GetInputType(size_t index) const {
    if (index == 5) return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
    if (index == 6) return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    return ElementOf(type_);
  }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t index) const {
    return index == 1 || index == 2 || index == 6 ? OrtCustomOpInputOutputCharacteristic::INPUT_OUTPUT_OPTIONAL : OrtCustomOpInputOutputCharacteristic::INPUT_OUTPUT_REQUIRED;
  }
  size_t GetOutputTypeCount() const { return 3; }
  ONNXTensorElementDataType GetOutputType(size_t /*index*/) const { return ElementOf(type_); }
  OrtCustomOpInputOutputCharacteristic GetOutputCharacteristic(size_t index) const {
    return index == 0 ? OrtCustomOpInputOutputCharacteristic::INPUT_OUTPUT_REQUIRED : OrtCustomOpInputOutputCharacteristic::INPUT_OUTPUT_OPTIONAL;
  }

  bool cuda_;
  FloatType type_;
};

// One operator and domain per provider and float type, kept for the life of the process (sessions
// refer to them).
struct Registered {
  std::unique_ptr<SlotAttentionOp> op;
  std::unique_ptr<Ort::CustomOpDomain> domain;
};

}  // namespace

void AddSlotAttention(Ort::SessionOptions& options, bool cuda, FloatType type) {
  static std::mutex mutex;
  static std::map<std::pair<bool, FloatType>, Registered> registered;
  std::lock_guard<std::mutex> lock(mutex);
  Registered& entry = registered[{cuda, type}];
  if (!entry.domain) {
    entry.op = std::make_unique<SlotAttentionOp>(cuda, type);
    entry.domain = std::make_unique<Ort::CustomOpDomain>("chorus");
    entry.domain->Add(entry.op.get());
  }
  options.Add(*entry.domain);
}

}  // namespace chorus
