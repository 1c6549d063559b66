// runGraph: one ONNX model with the addon's operators (domain `chorus`) run on given inputs, on the
// CPU or on CUDA with its inputs and outputs resident on the device, optionally timed over repeated
// runs (replays of a captured CUDA graph, or plain runs). For operator tests and kernel benchmarks.
#include <napi.h>
#include <onnxruntime_cxx_api.h>
#include <onnxruntime_run_options_config_keys.h>

#include <chrono>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "custom-op.h"
#include "graph-run.h"

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus {

namespace {

const std::map<std::string, ONNXTensorElementDataType>& ElementTypes() {
  static const std::map<std::string, ONNXTensorElementDataType> types = {
      {"float32", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT}, {"float16", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16}, {"bfloat16", ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16},
      {"uint8", ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8},   {"int32", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32},     {"int64", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64},
  };
  return types;
}

std::string TypeName(ONNXTensorElementDataType type) {
  for (const auto& [name, t] : ElementTypes()) {
    if (t == type) return name;
  }
  throw std::invalid_argument("an output of element type " + std::to_string(static_cast<int>(type)) + ", which runGraph does not return");
}

size_t ElementSize(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return 1;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return 2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return 8;
    default: return 4;
  }
}

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

#ifdef CHORUS_WITH_CUDA
void Cuda(cudaError_t status, const char* what) { Check(status == cudaSuccess, std::string(what) + ": " + cudaGetErrorString(status)); }
#endif

}  // namespace

GraphRunResult RunGraphOnce(const GraphRunOptions& o, const std::vector<Tensor>& inputs) {
  // Never destroyed: at exit the CUDA provider may be gone before a static's destructor runs.
  static Ort::Env* env = new Ort::Env(ORT_LOGGING_LEVEL_ERROR, "chorus-graph-run");
  Ort::SessionOptions options;
  options.SetGraphOptimizationLevel(GraphOptimizationLevel::ORT_ENABLE_ALL);
  if (o.intraOpThreads > 0) options.SetIntraOpNumThreads(o.intraOpThreads);
  GraphRunResult result;
  std::vector<void*> device;  // device buffers, freed at the end
  void* stream = nullptr;
  auto release = [&] {
#ifdef CHORUS_WITH_CUDA
    for (void* p : device) cudaFree(p);
    if (stream != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
#endif
  };
  try {
#ifdef CHORUS_WITH_CUDA
    if (o.cuda) {
      Cuda(cudaSetDevice(o.deviceId), "cudaSetDevice");
      cudaStream_t s;
      Cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
      stream = s;
      Ort::CUDAProviderOptions provider;
      provider.Update({{"device_id", std::to_string(o.deviceId)}});
      provider.UpdateWithValue("user_compute_stream", stream);
      options.AppendExecutionProvider_CUDA_V2(*provider);
    }
#else
    if (o.cuda) throw std::runtime_error("this build of the native engine has no CUDA (nvcc was not found when it was built)");
#endif
    AddChorusOps(options, o.cuda, o.floatType);
    Ort::Session session(*env, o.model.c_str(), options);
    Ort::MemoryInfo memory = o.cuda ? Ort::MemoryInfo("Cuda", OrtDeviceAllocator, o.deviceId, OrtMemTypeDefault) : Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);
    Ort::IoBinding io(session);
    std::vector<Ort::Value> values;
    for (const Tensor& t : inputs) {
      void* data = const_cast<uint8_t*>(t.bytes.data());
#ifdef CHORUS_WITH_CUDA
      if (o.cuda) {
        Cuda(cudaMalloc(&data, std::max<size_t>(t.bytes.size(), 1)), "cudaMalloc");
        device.push_back(data);
        Cuda(cudaMemcpy(data, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
      }
#endif
      values.push_back(Ort::Value::CreateTensor(memory, data, t.bytes.size(), t.dims.data(), t.dims.size(), t.type));
      io.BindInput(t.name.c_str(), values.back());
    }
    Ort::AllocatorWithDefaultOptions allocator;
    std::vector<std::string> names;
    for (size_t i = 0; i < session.GetOutputCount(); i++) names.push_back(session.GetOutputNameAllocated(i, allocator).get());
    for (const std::string& name : names) io.BindOutput(name.c_str(), memory);
    session.Run(Ort::RunOptions(), io);
    io.SynchronizeOutputs();
    std::vector<Ort::Value> outputs = io.GetOutputValues();
#ifdef CHORUS_WITH_CUDA
    if (o.cuda && o.cudaGraph) {
      // The outputs bound at buffers of their own, a plain run to size ONNX Runtime's memory, then
      // the captured run.
      io.ClearBoundOutputs();
      std::vector<Ort::Value> bound;
      for (size_t i = 0; i < names.size(); i++) {
        Ort::TensorTypeAndShapeInfo info = outputs[i].GetTensorTypeAndShapeInfo();
        const size_t bytes = info.GetElementCount() * ElementSize(info.GetElementType());
        void* data = nullptr;
        Cuda(cudaMalloc(&data, std::max<size_t>(bytes, 1)), "cudaMalloc");
        device.push_back(data);
        const std::vector<int64_t> shape = info.GetShape();
        bound.push_back(Ort::Value::CreateTensor(memory, data, bytes, shape.data(), shape.size(), info.GetElementType()));
        io.BindOutput(names[i].c_str(), bound.back());
      }
      outputs = std::move(bound);
      session.Run(Ort::RunOptions(), io);
      Ort::RunOptions capture;
      capture.AddConfigEntry(kOrtRunOptionsConfigDisableSynchronizeExecutionProviders, "1");
      auto s = static_cast<cudaStream_t>(stream);
      Cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
      cudaGraph_t graph = nullptr;
      try {
        session.Run(capture, io);
      } catch (...) {
        cudaStreamEndCapture(s, &graph);
        if (graph != nullptr) cudaGraphDestroy(graph);
        throw;
      }
      Cuda(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
      cudaGraphExec_t exec = nullptr;
      const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      Cuda(made, "cudaGraphInstantiate");
      cudaEvent_t events[2];
      Cuda(cudaEventCreate(&events[0]), "cudaEventCreate");
      Cuda(cudaEventCreate(&events[1]), "cudaEventCreate");
      Cuda(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
      Cuda(cudaEventRecord(events[0], s), "cudaEventRecord");
      for (int i = 0; i < o.iterations; i++) Cuda(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
      Cuda(cudaEventRecord(events[1], s), "cudaEventRecord");
      Cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize (the captured runs)");
      float ms = 0;
      Cuda(cudaEventElapsedTime(&ms, events[0], events[1]), "cudaEventElapsedTime");
      result.ms = o.iterations > 0 ? ms / o.iterations : 0;
      cudaEventDestroy(events[0]);
      cudaEventDestroy(events[1]);
      cudaGraphExecDestroy(exec);
    }
#endif
    if (o.iterations > 0 && !(o.cuda && o.cudaGraph)) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iterations; i++) session.Run(Ort::RunOptions(), io);
      io.SynchronizeOutputs();
      result.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / o.iterations;
      if (!o.cuda) outputs = io.GetOutputValues();
    }
    for (size_t i = 0; i < names.size(); i++) {
      Ort::TensorTypeAndShapeInfo info = outputs[i].GetTensorTypeAndShapeInfo();
      Tensor t{names[i], info.GetElementType(), info.GetShape(), {}};
      t.bytes.resize(info.GetElementCount() * ElementSize(t.type));
      const void* from = outputs[i].GetTensorRawData();
#ifdef CHORUS_WITH_CUDA
      if (o.cuda) {
        Cuda(cudaMemcpy(t.bytes.data(), from, t.bytes.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
      } else
#endif
      {
        std::copy(static_cast<const uint8_t*>(from), static_cast<const uint8_t*>(from) + t.bytes.size(), t.bytes.begin());
      }
      result.outputs.push_back(std::move(t));
    }
  } catch (...) {
    release();
    throw;
  }
  release();
  return result;
}


GraphRunOptions ParseGraphRunOptions(const Napi::Value& value) {
  Napi::Env e = value.Env();
  if (!value.IsObject()) throw Napi::TypeError::New(e, "runGraph takes an options object");
  Napi::Object o = value.As<Napi::Object>();
  GraphRunOptions options;
  if (!o.Get("model").IsString()) throw Napi::TypeError::New(e, "options.model must be the path of an ONNX model");
  options.model = o.Get("model").As<Napi::String>().Utf8Value();
  const std::string provider = o.Get("provider").IsString() ? o.Get("provider").As<Napi::String>().Utf8Value() : "cpu";
  if (provider != "cpu" && provider != "cuda") throw Napi::TypeError::New(e, "options.provider must be cpu or cuda, not " + provider);
  options.cuda = provider == "cuda";
  const std::string dtype = o.Get("dtype").IsString() ? o.Get("dtype").As<Napi::String>().Utf8Value() : "fp32";
  if (dtype != "fp32" && dtype != "fp16" && dtype != "bf16") throw Napi::TypeError::New(e, "options.dtype must be fp32, fp16 or bf16, not " + dtype);
  options.floatType = dtype == "fp16" ? FloatType::kFloat16 : dtype == "bf16" ? FloatType::kBFloat16 : FloatType::kFloat32;
  for (auto [name, field] : {std::pair<const char*, int*>{"deviceId", &options.deviceId}, {"intraOpThreads", &options.intraOpThreads}, {"iterations", &options.iterations}}) {
    Napi::Value v = o.Get(name);
    if (v.IsUndefined()) continue;
    if (!v.IsNumber() || v.As<Napi::Number>().Int32Value() < 0) throw Napi::TypeError::New(e, std::string("options.") + name + " must be a non-negative integer");
    *field = v.As<Napi::Number>().Int32Value();
  }
  options.cudaGraph = o.Get("cudaGraph").ToBoolean();
  return options;
}

std::vector<Tensor> ParseGraphTensors(const Napi::Value& value) {
  Napi::Env e = value.Env();
  if (!value.IsArray()) throw Napi::TypeError::New(e, "runGraph's inputs must be an array of { name, type, dims, data }");
  std::vector<Tensor> inputs;
  Napi::Array list = value.As<Napi::Array>();
  for (uint32_t i = 0; i < list.Length(); i++) {
    Napi::Value item = list.Get(i);
    if (!item.IsObject()) throw Napi::TypeError::New(e, "inputs[" + std::to_string(i) + "] must be { name, type, dims, data }");
    Napi::Object t = item.As<Napi::Object>();
    const std::string type = t.Get("type").ToString().Utf8Value();
    auto found = ElementTypes().find(type);
    if (found == ElementTypes().end()) throw Napi::TypeError::New(e, "inputs[" + std::to_string(i) + "].type must be float32, float16, bfloat16, uint8, int32 or int64, not " + type);
    if (!t.Get("dims").IsArray() || !t.Get("data").IsTypedArray()) throw Napi::TypeError::New(e, "inputs[" + std::to_string(i) + "] needs dims (an array) and data (a typed array)");
    Tensor tensor{t.Get("name").ToString().Utf8Value(), found->second, {}, {}};
    Napi::Array dims = t.Get("dims").As<Napi::Array>();
    for (uint32_t d = 0; d < dims.Length(); d++) tensor.dims.push_back(dims.Get(d).As<Napi::Number>().Int64Value());
    Napi::TypedArray data = t.Get("data").As<Napi::TypedArray>();
    const uint8_t* bytes = static_cast<const uint8_t*>(data.ArrayBuffer().Data()) + data.ByteOffset();
    tensor.bytes.assign(bytes, bytes + data.ByteLength());
    inputs.push_back(std::move(tensor));
  }
  return inputs;
}

Napi::Object GraphRunObject(Napi::Env e, const GraphRunResult& result) {
  Napi::Array outputs = Napi::Array::New(e, result.outputs.size());
  for (size_t i = 0; i < result.outputs.size(); i++) {
    const Tensor& t = result.outputs[i];
    Napi::Object out = Napi::Object::New(e);
    out.Set("name", t.name);
    out.Set("type", TypeName(t.type));
    Napi::Array dims = Napi::Array::New(e, t.dims.size());
    for (size_t d = 0; d < t.dims.size(); d++) dims.Set(static_cast<uint32_t>(d), Napi::Number::New(e, static_cast<double>(t.dims[d])));
    out.Set("dims", dims);
    Napi::Uint8Array data = Napi::Uint8Array::New(e, t.bytes.size());
    std::copy(t.bytes.begin(), t.bytes.end(), data.Data());
    out.Set("data", data);
    outputs.Set(static_cast<uint32_t>(i), out);
  }
  Napi::Object returned = Napi::Object::New(e);
  returned.Set("outputs", outputs);
  returned.Set("ms", Napi::Number::New(e, result.ms));
  return returned;
}

Napi::Value RunGraph(const Napi::CallbackInfo& info) {
  const GraphRunOptions options = ParseGraphRunOptions(info[0]);
  const std::vector<Tensor> inputs = ParseGraphTensors(info[1]);
  GraphRunResult result;
  try {
    result = RunGraphOnce(options, inputs);
  } catch (const std::exception& error) {
    throw Napi::Error::New(info.Env(), error.what());
  }
  return GraphRunObject(info.Env(), result);
}

}  // namespace chorus
