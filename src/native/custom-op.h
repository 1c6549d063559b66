// What the addon's ONNX Runtime operators (domain `chorus`) share: their registration as custom
// operators of one provider and float type, and their kernels' error handling.
#pragma once

#include <onnxruntime_cxx_api.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels.h"

namespace chorus {

inline ONNXTensorElementDataType ElementOf(FloatType type) {
  switch (type) {
    case FloatType::kFloat16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
    case FloatType::kBFloat16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
    default:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
}

inline std::vector<int64_t> ShapeOf(const Ort::ConstValue& value) { return value.GetTensorTypeAndShapeInfo().GetShape(); }

// A shape as error messages give it: "[2, 3]".
inline std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); i++) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Whether optional input `index` was given.
inline bool Given(const Ort::KernelContext& ctx, size_t index) {
  return ctx.GetInputCount() > index && static_cast<const OrtValue*>(ctx.GetInput(index)) != nullptr;
}

// Attribute `name` of the kernel, or `fallback` when the node has none.
template <typename T>
T AttributeOr(const Ort::ConstKernelInfo& kernel, const char* name, T fallback) {
  try {
    return kernel.GetAttribute<T>(name);
  } catch (const Ort::Exception&) {
    return fallback;
  }
}

// `work`, its exception returned as operator `op`'s failure.
template <typename Work>
OrtStatusPtr Guarded(const char* op, Work&& work) {
  try {
    work();
    return nullptr;
  } catch (const std::exception& e) {
    return Ort::GetApi().CreateStatus(ORT_INVALID_ARGUMENT, (std::string(op) + ": " + e.what()).c_str());
  }
}

// A kernel's provider and float type, and its ComputeV2: Kernel::Compute, its exception returned as
// the operator's failure (Kernel::kName).
template <class Kernel>
struct KernelBase {
  KernelBase(bool cuda, FloatType type) : cuda_(cuda), type_(type) {}

  OrtStatusPtr ComputeV2(OrtKernelContext* context) {
    return Guarded(Kernel::kName, [&] { static_cast<Kernel*>(this)->Compute(context); });
  }

  bool cuda_;
  FloatType type_;
};

// The operator of `Kernel` (named Kernel::kName) for one provider and float type: `inputs` its input
// types, `optional` which of them may be left out; `outputs` outputs of the float type, all but the
// first optional.
template <typename Kernel>
struct ChorusOp : Ort::CustomOpBase<ChorusOp<Kernel>, Kernel, true> {
  ChorusOp(bool cuda, FloatType type, std::vector<ONNXTensorElementDataType> inputs, std::vector<size_t> optional, size_t outputs)
      : cuda_(cuda), type_(type), inputs_(std::move(inputs)), optional_(std::move(optional)), outputs_(outputs) {}

  OrtStatusPtr CreateKernelV2(const OrtApi& /*api*/, const OrtKernelInfo* info, void** kernel) const {
    return Guarded(Kernel::kName, [&] { *kernel = new Kernel(info, cuda_, type_); });
  }
  const char* GetName() const { return Kernel::kName; }
  const char* GetExecutionProviderType() const { return cuda_ ? "CUDAExecutionProvider" : "CPUExecutionProvider"; }
  size_t GetInputTypeCount() const { return inputs_.size(); }
  ONNXTensorElementDataType GetInputType(size_t index) const { return inputs_[index]; }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t index) const {
    return std::find(optional_.begin(), optional_.end(), index) != optional_.end() ? OrtCustomOpInputOutputCharacteristic::INPUT_OUTPUT_OPTIONAL
                                                                                   : OrtCustomOpInputOutputCharacteristic::INPUT_OUTPUT_REQUIRED;
  }
  size_t GetOutputTypeCount() const { return outputs_; }
  ONNXTensorElementDataType GetOutputType(size_t /*index*/) const { return ElementOf(type_); }
  OrtCustomOpInputOutputCharacteristic GetOutputCharacteristic(size_t index) const {
    return index == 0 ? OrtCustomOpInputOutputCharacteristic::INPUT_OUTPUT_REQUIRED : OrtCustomOpInputOutputCharacteristic::INPUT_OUTPUT_OPTIONAL;
  }

  bool cuda_;
  FloatType type_;
  std::vector<ONNXTensorElementDataType> inputs_;
  std::vector<size_t> optional_;
  size_t outputs_;
};

// Operators as the domain takes them, each deleted as its own type.
using OpList = std::vector<std::shared_ptr<OrtCustomOp>>;

template <typename Kernel>
std::shared_ptr<OrtCustomOp> MakeOp(bool cuda, FloatType type, std::vector<ONNXTensorElementDataType> inputs, std::vector<size_t> optional, size_t outputs) {
  return std::shared_ptr<OrtCustomOp>(new ChorusOp<Kernel>(cuda, type, std::move(inputs), std::move(optional), outputs));
}

// The slot attention operators (slot-attention.cc), Linear (linear.cc), PagedAttention
// (paged-attention.cc), QuantLinear (quant-linear.cc) and AllReduce and AllGather (collective-op.cc) of a
// provider and float type.
OpList SlotAttentionOps(bool cuda, FloatType type);
OpList LinearOps(bool cuda, FloatType type);
OpList PagedAttentionOps(bool cuda, FloatType type);
OpList QuantLinearOps(bool cuda, FloatType type);
OpList CollectiveOps(bool cuda, FloatType type);

// Adds the `chorus` domain with every operator of the addon for the session's provider and float type.
void AddChorusOps(Ort::SessionOptions& options, bool cuda, FloatType type);

}  // namespace chorus
