// runGraph(options, inputs) (graph-run.cc): a model with the addon's operators run once on given inputs,
// and optionally timed; see src/native/index.ts. runGraphRanks (rank-run.cc) runs one such model per
// rank of a tensor-parallel group.
#pragma once

#include <napi.h>
#include <onnxruntime_cxx_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels.h"

namespace chorus {

struct Tensor {
  std::string name;
  ONNXTensorElementDataType type;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};

struct GraphRunOptions {
  std::string model;
  bool cuda = false;
  int deviceId = 0;
  FloatType floatType = FloatType::kFloat32;
  int intraOpThreads = 0;
  int iterations = 0;
  bool cudaGraph = false;
};

struct GraphRunResult {
  std::vector<Tensor> outputs;
  double ms = 0;  // per timed run
};

// One run of the model on the calling thread (and the timed ones the options ask for).
GraphRunResult RunGraphOnce(const GraphRunOptions& options, const std::vector<Tensor>& inputs);
// runGraph's options, inputs and result as JavaScript gives and takes them.
GraphRunOptions ParseGraphRunOptions(const Napi::Value& value);
std::vector<Tensor> ParseGraphTensors(const Napi::Value& value);
Napi::Object GraphRunObject(Napi::Env env, const GraphRunResult& result);

Napi::Value RunGraph(const Napi::CallbackInfo& info);
Napi::Value RunGraphRanks(const Napi::CallbackInfo& info);

}  // namespace chorus
