// The N-API face of the native engine: SlotDecoder's steps run on libuv's worker threads (the event
// loop never waits on the session or the GPU) and settle promises.
#include <napi.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attention-rows.h"
#include "continuous-core.h"
#include "graph-run.h"
#include "kernels.h"
#include "sampling.h"
#include "slot-decoder.h"

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus {
namespace {

std::vector<int32_t> Int32s(const Napi::Value& value, const char* name) {
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw Napi::TypeError::New(value.Env(), std::string(name) + " must be an Int32Array");
  }
  auto array = value.As<Napi::Int32Array>();
  return std::vector<int32_t>(array.Data(), array.Data() + array.ElementLength());
}

std::vector<int64_t> Int64s(const Napi::Value& value, const char* name) {
  std::vector<int32_t> narrow = Int32s(value, name);
  return std::vector<int64_t>(narrow.begin(), narrow.end());
}

int IntField(const Napi::Object& options, const char* name, int fallback, bool required) {
  Napi::Value value = options.Get(name);
  if (value.IsUndefined()) {
    if (required) throw Napi::TypeError::New(options.Env(), std::string("options.") + name + " is required");
    return fallback;
  }
  if (!value.IsNumber()) throw Napi::TypeError::New(options.Env(), std::string("options.") + name + " must be a number");
  return value.As<Napi::Number>().Int32Value();
}

std::vector<double> Float64s(const Napi::Value& value, const char* name) {
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    throw Napi::TypeError::New(value.Env(), std::string(name) + " must be a Float64Array");
  }
  auto array = value.As<Napi::Float64Array>();
  return std::vector<double>(array.Data(), array.Data() + array.ElementLength());
}

// The rows a step samples, from { rows, params, seenOffsets, seen, banOffsets, bans } (see
// src/native/index.ts); undefined is none. Every id is checked against the vocabulary: the kernels
// write where they point.
SampleBatch ParseSampleBatch(const Napi::Value& value, int vocab) {
  SampleBatch batch;
  if (value.IsUndefined() || value.IsNull()) return batch;
  Napi::Env env = value.Env();
  if (!value.IsObject()) throw Napi::TypeError::New(env, "sample must be an object of rows, params, seenOffsets, seen, banOffsets and bans");
  Napi::Object o = value.As<Napi::Object>();
  batch.rows = Int32s(o.Get("rows"), "sample.rows");
  const size_t rows = batch.rows.size();
  const std::vector<double> params = Float64s(o.Get("params"), "sample.params");
  const std::vector<int32_t> seenOffsets = Int32s(o.Get("seenOffsets"), "sample.seenOffsets");
  const std::vector<int32_t> banOffsets = Int32s(o.Get("banOffsets"), "sample.banOffsets");
  batch.seen = Int32s(o.Get("seen"), "sample.seen");
  batch.bans = Int32s(o.Get("bans"), "sample.bans");
  if (params.size() != rows * kSampleParamDoubles) throw Napi::RangeError::New(env, "sample.params must hold " + std::to_string(kSampleParamDoubles) + " numbers per row");
  auto offsets = [&](const std::vector<int32_t>& at, size_t items, const char* name) {
    if (at.size() != rows + 1 || at[0] != 0 || static_cast<size_t>(at[rows]) != items) {
      throw Napi::RangeError::New(env, std::string(name) + " must be rows + 1 ascending offsets from 0 to the number of entries");
    }
    for (size_t i = 0; i < rows; i++) {
      if (at[i + 1] < at[i]) throw Napi::RangeError::New(env, std::string(name) + " must ascend");
    }
  };
  if (batch.seen.size() % 2 != 0) throw Napi::RangeError::New(env, "sample.seen must hold (id, count) pairs");
  offsets(seenOffsets, batch.seen.size() / 2, "sample.seenOffsets");
  offsets(banOffsets, batch.bans.size(), "sample.banOffsets");
  for (size_t i = 0; i < batch.seen.size(); i += 2) {
    if (batch.seen[i] < 0 || batch.seen[i] >= vocab || batch.seen[i + 1] < 0) throw Napi::RangeError::New(env, "sample.seen has an id outside the vocabulary or a negative count");
  }
  for (int32_t id : batch.bans) {
    if (id < 0 || id >= vocab) throw Napi::RangeError::New(env, "sample.bans has an id outside the vocabulary");
  }
  for (size_t i = 0; i < rows; i++) {
    const double* p = &params[i * kSampleParamDoubles];
    SampleParams row{p[0], p[1], p[2], p[3], p[4], p[5], static_cast<int32_t>(p[6]), static_cast<int32_t>(p[7]), static_cast<int32_t>(p[8]), p[9],
                     seenOffsets[i], seenOffsets[i + 1], banOffsets[i], banOffsets[i + 1]};
    if (!(row.temperature >= 0) || !(row.topP > 0) || !(row.repetition > 0) || !std::isfinite(row.presence) || !std::isfinite(row.frequency)) {
      throw Napi::RangeError::New(env, "sample.params row " + std::to_string(i) + ": temperature >= 0, top_p > 0, repetition > 0, finite penalties");
    }
    if (row.beamKeep == 0 && row.temperature != 0 && !(row.uniform > 0 && row.uniform < 1)) throw Napi::RangeError::New(env, "sample.params row " + std::to_string(i) + ": a draw in (0, 1)");
    if (!(p[6] >= 0 && p[6] <= vocab)) throw Napi::RangeError::New(env, "sample.params row " + std::to_string(i) + ": top_k in [0, vocab]");
    if (!(p[8] >= 0 && p[8] <= kMaxTopLogProbs)) throw Napi::RangeError::New(env, "sample.params row " + std::to_string(i) + ": beam continuations in [0, " + std::to_string(kMaxTopLogProbs) + "]");
    if (!(p[7] >= 0 && p[7] <= kMaxTopLogProbs)) throw Napi::RangeError::New(env, "sample.params row " + std::to_string(i) + ": top_logprobs in [0, " + std::to_string(kMaxTopLogProbs) + "]");
    batch.params.push_back(row);
  }
  return batch;
}

// Beam groups from [{ firstRow, width, outputLength, generated, minLength, endIds, earlyStopping,
// improvable, temperature, lenPenalty, diversityRate, scores, finished }] (see src/native/index.ts).
std::vector<BeamGroup> ParseBeamGroups(const Napi::Value& value) {
  Napi::Env env = value.Env();
  if (!value.IsArray()) throw Napi::TypeError::New(env, "groups must be an array of beam groups");
  Napi::Array array = value.As<Napi::Array>();
  std::vector<BeamGroup> groups;
  for (uint32_t i = 0; i < array.Length(); i++) {
    if (!array.Get(i).IsObject()) throw Napi::TypeError::New(env, "groups[" + std::to_string(i) + "] must be an object");
    Napi::Object o = array.Get(i).As<Napi::Object>();
    auto number = [&](const char* name) {
      Napi::Value v = o.Get(name);
      if (!v.IsNumber()) throw Napi::TypeError::New(env, "groups[" + std::to_string(i) + "]." + name + " must be a number");
      return v.As<Napi::Number>().DoubleValue();
    };
    auto floats = [&](const char* name) {
      const std::vector<double> wide = Float64s(o.Get(name), (std::string("groups[") + std::to_string(i) + "]." + name).c_str());
      return std::vector<float>(wide.begin(), wide.end());
    };
    BeamGroup g;
    g.firstRow = static_cast<int>(number("firstRow"));
    g.width = static_cast<int>(number("width"));
    g.outputLength = static_cast<int>(number("outputLength"));
    g.generated = static_cast<int>(number("generated"));
    g.minLength = static_cast<int>(number("minLength"));
    g.endIds = Int32s(o.Get("endIds"), ("groups[" + std::to_string(i) + "].endIds").c_str());
    g.earlyStopping = static_cast<int>(number("earlyStopping"));
    g.improvable = o.Get("improvable").ToBoolean();
    g.temperature = number("temperature");
    g.lenPenalty = number("lenPenalty");
    g.diversityRate = number("diversityRate");
    g.scores = floats("scores");
    g.finished = floats("finished");
    groups.push_back(std::move(g));
  }
  return groups;
}

// A typed array (Napi::Int32Array, Napi::Float32Array, ...) holding a copy of `values`.
template <typename Array, typename T>
Array ArrayOf(Napi::Env env, const std::vector<T>& values) {
  auto array = Array::New(env, values.size());
  std::copy(values.begin(), values.end(), array.Data());
  return array;
}

Napi::Object SampledObject(Napi::Env env, const std::vector<SampleResult>& sampled, const std::vector<float>* processed = nullptr) {
  Napi::Object out = Napi::Object::New(env);
  auto tokens = Napi::Int32Array::New(env, sampled.size());
  auto logProbs = Napi::Float64Array::New(env, sampled.size());
  // Row i's most likely ids are topTokens[i * kMaxTopLogProbs ..][0..topCounts[i]).
  auto topCounts = Napi::Int32Array::New(env, sampled.size());
  auto topTokens = Napi::Int32Array::New(env, sampled.size() * kMaxTopLogProbs);
  auto topLogProbs = Napi::Float64Array::New(env, sampled.size() * kMaxTopLogProbs);
  for (size_t i = 0; i < sampled.size(); i++) {
    tokens[i] = sampled[i].token;
    logProbs[i] = sampled[i].logProb;
    topCounts[i] = sampled[i].topCount;
    for (int j = 0; j < sampled[i].topCount; j++) {
      topTokens[i * kMaxTopLogProbs + j] = sampled[i].topTokens[j];
      topLogProbs[i * kMaxTopLogProbs + j] = sampled[i].topLogProbs[j];
    }
  }
  out.Set("tokens", tokens);
  out.Set("logProbs", logProbs);
  out.Set("topCounts", topCounts);
  out.Set("topTokens", topTokens);
  out.Set("topLogProbs", topLogProbs);
  if (processed != nullptr) {
    out.Set("processed", ArrayOf<Napi::Float32Array>(env, *processed));
  }
  return out;
}

Napi::Object ResultObject(Napi::Env env, const StepResult& result) {
  Napi::Object out = Napi::Object::New(env);
  out.Set("argmax", ArrayOf<Napi::Int32Array>(env, result.argmax));
  out.Set("logits", ArrayOf<Napi::Float32Array>(env, result.logits));
  out.Set("sampled", SampledObject(env, result.sampled));
  return out;
}

// A run's per-step callback as a thread-safe function (null when `value` is not a function).
std::shared_ptr<Napi::ThreadSafeFunction> StepCallback(const Napi::Value& value, const char* name) {
  if (!value.IsFunction()) return nullptr;
  return std::make_shared<Napi::ThreadSafeFunction>(Napi::ThreadSafeFunction::New(value.Env(), value.As<Napi::Function>(), name, 0, 1));
}

// Releases a run's step callback when the run's work ends, however it ends.
struct ReleaseAfter {
  std::shared_ptr<Napi::ThreadSafeFunction> f;
  ~ReleaseAfter() {
    if (f) f->Release();
  }
};

// Hands a run's step on to its callback from the worker thread: `data` (a copy the call owns) becomes
// the callback's arguments on the main thread through `args(env, data)`.
template <typename Data, typename Args>
void HandOn(Napi::ThreadSafeFunction& f, Data* data, Args args) {
  const napi_status status = f.NonBlockingCall(data, [args](Napi::Env e, Napi::Function callback, Data* d) {
    std::vector<napi_value> values = args(e, *d);
    delete d;
    callback.Call(values);
  });
  if (status != napi_ok) delete data;
}

// Runs `work` on a worker thread; resolves with `done(env)` (undefined without one), or rejects with
// the exception's message.
// `busy` counts the tasks in flight on a decoder (read and written on the main thread only).
class Task : public Napi::AsyncWorker {
 public:
  Task(Napi::Env env, int& busy, std::function<void()> work, std::function<Napi::Value(Napi::Env)> done)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), busy_(busy), work_(std::move(work)), done_(std::move(done)) {
    busy_++;
  }
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    try {
      work_();
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  void OnOK() override {
    busy_--;
    deferred_.Resolve(done_ ? done_(Env()) : Env().Undefined());
  }
  void OnError(const Napi::Error& e) override {
    busy_--;
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  int& busy_;
  std::function<void()> work_;
  std::function<Napi::Value(Napi::Env)> done_;
};

class SlotDecoderWrap : public Napi::ObjectWrap<SlotDecoderWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "SlotDecoder",
                       {InstanceMethod("load", &SlotDecoderWrap::Load), InstanceMethod("prefill", &SlotDecoderWrap::Prefill),
                        InstanceMethod("prefillRagged", &SlotDecoderWrap::PrefillRagged),
                        InstanceMethod("decode", &SlotDecoderWrap::Decode), InstanceMethod("decodeGreedy", &SlotDecoderWrap::DecodeGreedy),
                        InstanceMethod("decodeBeams", &SlotDecoderWrap::DecodeBeams),
                        InstanceMethod("interrupt", &SlotDecoderWrap::Interrupt), InstanceMethod("encode", &SlotDecoderWrap::Encode), InstanceMethod("copySlots", &SlotDecoderWrap::CopySlots),
                        InstanceMethod("setBlockTable", &SlotDecoderWrap::SetBlockTable), InstanceMethod("copyBlocks", &SlotDecoderWrap::CopyBlocks),
                        InstanceAccessor("cacheBlocks", &SlotDecoderWrap::CacheBlocks, nullptr), InstanceAccessor("deviceMemory", &SlotDecoderWrap::PlannedMemory, nullptr),
                        InstanceMethod("startCore", &SlotDecoderWrap::StartCore), InstanceMethod("warmCore", &SlotDecoderWrap::WarmCore), InstanceMethod("coreSubmit", &SlotDecoderWrap::CoreSubmit),
                        InstanceMethod("coreCancel", &SlotDecoderWrap::CoreCancel), InstanceMethod("stopCore", &SlotDecoderWrap::StopCore),
                        InstanceMethod("close", &SlotDecoderWrap::Close), InstanceAccessor("cacheBytes", &SlotDecoderWrap::CacheBytes, nullptr),
                        InstanceAccessor("sessionMs", &SlotDecoderWrap::SessionMs, nullptr), InstanceAccessor("callMs", &SlotDecoderWrap::CallMs, nullptr),
                        InstanceAccessor("graphFailure", &SlotDecoderWrap::GraphFailure, nullptr),
                        InstanceAccessor("rankCacheBytes", &SlotDecoderWrap::RankCacheBytes, nullptr)});
  }

  explicit SlotDecoderWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SlotDecoderWrap>(info) {
    if (!info[0].IsObject()) throw Napi::TypeError::New(info.Env(), "SlotDecoder takes an options object");
    Napi::Object o = info[0].As<Napi::Object>();
    if (!o.Get("model").IsString()) throw Napi::TypeError::New(info.Env(), "options.model must be the path of the slot decoder");
    options_.model = o.Get("model").As<Napi::String>().Utf8Value();
    const std::string provider = o.Get("provider").IsString() ? o.Get("provider").As<Napi::String>().Utf8Value() : "cpu";
    if (provider != "cpu" && provider != "cuda") throw Napi::TypeError::New(info.Env(), "options.provider must be cpu or cuda, not " + provider);
    options_.cuda = provider == "cuda";
    options_.deviceId = IntField(o, "deviceId", 0, false);
    options_.slots = IntField(o, "slots", 0, true);
    options_.maxLength = IntField(o, "maxLength", 0, true);
    options_.layers = IntField(o, "layers", 0, true);
    options_.kvHeads = IntField(o, "kvHeads", 0, true);
    options_.headDim = IntField(o, "headDim", 0, true);
    options_.vocab = IntField(o, "vocab", 0, true);
    options_.intraOpThreads = IntField(o, "intraOpThreads", 0, false);
    options_.intraOpSpinning = o.Get("intraOpSpinning").IsUndefined() || o.Get("intraOpSpinning").ToBoolean();
    options_.cudaGraph = o.Get("cudaGraph").ToBoolean();
    if (!o.Get("encoderModel").IsUndefined()) {
      if (!o.Get("encoderModel").IsString()) throw Napi::TypeError::New(info.Env(), "options.encoderModel must be the path of the encoder");
      options_.encoderModel = o.Get("encoderModel").As<Napi::String>().Utf8Value();
      options_.sourceLength = IntField(o, "sourceLength", 0, true);
    }
    const std::string dtype = o.Get("dtype").IsString() ? o.Get("dtype").As<Napi::String>().Utf8Value() : "fp32";
    if (dtype != "fp32" && dtype != "fp16" && dtype != "bf16") throw Napi::TypeError::New(info.Env(), "options.dtype must be fp32, fp16 or bf16, not " + dtype);
    options_.floatType = dtype == "fp16" ? FloatType::kFloat16 : dtype == "bf16" ? FloatType::kBFloat16 : FloatType::kFloat32;
    options_.blockSize = IntField(o, "blockSize", 0, false);
    options_.stagingSlots = IntField(o, "stagingSlots", 0, false);
    options_.blocks = IntField(o, "blocks", 0, false);
    for (const char* name : {"memoryUtilization", "reserveBytes"}) {
      Napi::Value value = o.Get(name);
      if (value.IsUndefined()) continue;
      if (!value.IsNumber()) throw Napi::TypeError::New(info.Env(), std::string("options.") + name + " must be a number");
      (std::string(name) == "reserveBytes" ? options_.reserveBytes : options_.memoryUtilization) = value.As<Napi::Number>().DoubleValue();
    }
    if (!o.Get("rankModels").IsUndefined()) {
      if (!o.Get("rankModels").IsArray()) throw Napi::TypeError::New(info.Env(), "options.rankModels must be an array of the other ranks' models");
      Napi::Array models = o.Get("rankModels").As<Napi::Array>();
      for (uint32_t i = 0; i < models.Length(); i++) {
        if (!models.Get(i).IsString()) throw Napi::TypeError::New(info.Env(), "options.rankModels[" + std::to_string(i) + "] must be the path of rank " + std::to_string(i + 1) + "'s decoder");
        options_.rankModels.push_back(models.Get(i).As<Napi::String>().Utf8Value());
      }
    }
    if (!o.Get("rankDevices").IsUndefined()) {
      if (!o.Get("rankDevices").IsArray()) throw Napi::TypeError::New(info.Env(), "options.rankDevices must be an array of the other ranks' CUDA devices");
      Napi::Array devices = o.Get("rankDevices").As<Napi::Array>();
      for (uint32_t i = 0; i < devices.Length(); i++) {
        if (!devices.Get(i).IsNumber()) throw Napi::TypeError::New(info.Env(), "options.rankDevices[" + std::to_string(i) + "] must be a CUDA device number");
        options_.rankDevices.push_back(devices.Get(i).As<Napi::Number>().Int32Value());
      }
    }
    if (!o.Get("rankTimeoutMs").IsUndefined()) {
      if (!o.Get("rankTimeoutMs").IsNumber() || !(o.Get("rankTimeoutMs").As<Napi::Number>().DoubleValue() > 0)) throw Napi::TypeError::New(info.Env(), "options.rankTimeoutMs must be a positive number");
      options_.rankTimeoutMs = o.Get("rankTimeoutMs").As<Napi::Number>().DoubleValue();
    }
    if (o.Get("cudaOptions").IsObject()) {
      Napi::Object cuda = o.Get("cudaOptions").As<Napi::Object>();
      Napi::Array keys = cuda.GetPropertyNames();
      for (uint32_t i = 0; i < keys.Length(); i++) {
        std::string key = keys.Get(i).As<Napi::String>().Utf8Value();
        options_.cudaOptions[key] = cuda.Get(key).ToString().Utf8Value();
      }
    }
  }

 private:
  SlotDecoder& Loaded(Napi::Env env) {
    if (!decoder_) throw Napi::Error::New(env, "the slot decoder is not loaded (or was closed)");
    return *decoder_;
  }

  // Queues `work` as a Task of this decoder; returns its promise.
  Napi::Value Queue(Napi::Env env, std::function<void()> work, std::function<Napi::Value(Napi::Env)> done = nullptr) {
    if (core_) throw Napi::Error::New(env, "the slot decoder's continuous core is running; stop it (stopCore) before stepping it here");
    auto* task = new Task(env, busy_, std::move(work), std::move(done));
    Napi::Promise promise = task->Promise();
    task->Queue();
    return promise;
  }

  // Queues a step; its promise resolves with { argmax, logits }.
  Napi::Value QueueStep(Napi::Env env, std::function<StepResult()> step) {
    auto result = std::make_shared<StepResult>();
    return Queue(env, [result, step]() { *result = step(); }, [result](Napi::Env e) { return ResultObject(e, *result); });
  }

  Napi::Value Load(const Napi::CallbackInfo& info) {
    if (busy_ > 0 || decoder_) throw Napi::Error::New(info.Env(), "the slot decoder is loaded already");
    return Queue(info.Env(), [this]() { decoder_ = std::make_unique<SlotDecoder>(options_); });
  }

  Napi::Value Prefill(const Napi::CallbackInfo& info) {
    SlotDecoder& decoder = Loaded(info.Env());
    const int slot = info[0].As<Napi::Number>().Int32Value();
    auto ids = Int64s(info[1], "ids");
    auto rows = Int32s(info[2], "logitRows");
    auto sample = ParseSampleBatch(info[3], decoder.options().vocab);
    if (!info[4].IsUndefined() && !info[4].IsNumber()) throw Napi::TypeError::New(info.Env(), "prefill's prompts must be a number");
    const int prompts = info[4].IsUndefined() ? 1 : info[4].As<Napi::Number>().Int32Value();
    return QueueStep(info.Env(), [&decoder, slot, ids, rows, sample, prompts]() { return decoder.Prefill(slot, ids, rows, sample, prompts); });
  }

  Napi::Value PrefillRagged(const Napi::CallbackInfo& info) {
    SlotDecoder& decoder = Loaded(info.Env());
    const int slot = info[0].As<Napi::Number>().Int32Value();
    if (!info[1].IsArray()) throw Napi::TypeError::New(info.Env(), "prefillRagged's prompts must be an array of Int32Arrays");
    const Napi::Array list = info[1].As<Napi::Array>();
    std::vector<std::vector<int64_t>> prompts;
    for (uint32_t i = 0; i < list.Length(); i++) prompts.push_back(Int64s(list.Get(i), "prompts[i]"));
    auto rows = Int32s(info[2], "logitRows");
    auto sample = ParseSampleBatch(info[3], decoder.options().vocab);
    return QueueStep(info.Env(), [&decoder, slot, prompts, rows, sample]() { return decoder.PrefillRagged(slot, prompts, rows, sample); });
  }

  Napi::Value Encode(const Napi::CallbackInfo& info) {
    SlotDecoder& decoder = Loaded(info.Env());
    const int firstSlot = info[0].As<Napi::Number>().Int32Value();
    auto ids = Int64s(info[1], "ids");
    const int width = info[2].As<Napi::Number>().Int32Value();
    auto lengths = Int32s(info[3], "lengths");
    return Queue(info.Env(), [&decoder, firstSlot, ids, width, lengths]() { decoder.Encode(firstSlot, ids, width, lengths); });
  }

  Napi::Value Decode(const Napi::CallbackInfo& info) {
    SlotDecoder& decoder = Loaded(info.Env());
    auto tokens = Int64s(info[0], "tokens");
    auto positions = Int64s(info[1], "positions");
    auto rows = Int32s(info[2], "logitRows");
    auto sample = ParseSampleBatch(info[3], decoder.options().vocab);
    auto sourceLengths = info[4].IsUndefined() ? std::vector<int32_t>{} : Int32s(info[4], "sourceLengths");
    return QueueStep(info.Env(), [&decoder, tokens, positions, rows, sample, sourceLengths]() { return decoder.Decode(tokens, positions, rows, sample, sourceLengths); });
  }

  Napi::Value DecodeGreedy(const Napi::CallbackInfo& info) {
    SlotDecoder& decoder = Loaded(info.Env());
    auto tokens = Int64s(info[0], "tokens");
    auto positions = Int64s(info[1], "positions");
    auto remaining = Int32s(info[2], "remaining");
    auto endIds = Int32s(info[3], "endIds");
    if (!info[4].IsNumber()) throw Napi::TypeError::New(info.Env(), "decodeGreedy takes the most steps after the end ids");
    const int maxSteps = info[4].As<Napi::Number>().Int32Value();
    auto sourceLengths = info[5].IsUndefined() ? std::vector<int32_t>{} : Int32s(info[5], "sourceLengths");
    auto minLeft = info[6].IsUndefined() ? std::vector<int32_t>{} : Int32s(info[6], "minLeft");
    if (!info[7].IsUndefined() && !info[7].IsFunction()) throw Napi::TypeError::New(info.Env(), "decodeGreedy's onStep must be a function (step, ids)");
    // onStep(step, ids) on the main thread as each step's ids reach the host, while the run goes on.
    auto steps = StepCallback(info[7], "chorus greedy steps");
    auto run = std::make_shared<GreedyRun>();
    return Queue(
        info.Env(),
        [&decoder, run, tokens, positions, remaining, endIds, maxSteps, sourceLengths, minLeft, steps]() {
          ReleaseAfter released{steps};
          StepIds onStep = nullptr;
          if (steps) {
            onStep = [&steps](int step, const int32_t* ids, int rows) {
              using Step = std::pair<int, std::vector<int32_t>>;
              HandOn(*steps, new Step(step, std::vector<int32_t>(ids, ids + rows)), [](Napi::Env e, const Step& d) {
                return std::vector<napi_value>{Napi::Number::New(e, d.first), ArrayOf<Napi::Int32Array>(e, d.second)};
              });
            };
          }
          *run = decoder.DecodeGreedy(tokens, positions, remaining, endIds, maxSteps, sourceLengths, minLeft, onStep);
        },
        [run](Napi::Env e) {
          Napi::Object out = Napi::Object::New(e);
          out.Set("tokens", ArrayOf<Napi::Int32Array>(e, run->tokens));
          out.Set("steps", Napi::Number::New(e, run->steps));
          return out;
        });
  }

  Napi::Value DecodeBeams(const Napi::CallbackInfo& info) {
    SlotDecoder& decoder = Loaded(info.Env());
    auto tokens = Int64s(info[0], "tokens");
    auto positions = Int64s(info[1], "positions");
    auto groups = ParseBeamGroups(info[2]);
    if (!info[3].IsNumber()) throw Napi::TypeError::New(info.Env(), "decodeBeams takes the most steps");
    const int maxSteps = info[3].As<Napi::Number>().Int32Value();
    auto sourceLengths = info[4].IsUndefined() ? std::vector<int32_t>{} : Int32s(info[4], "sourceLengths");
    if (!info[5].IsUndefined() && !info[5].IsFunction()) throw Napi::TypeError::New(info.Env(), "decodeBeams' onStep must be a function (step, sampled, parents)");
    // onStep(step, sampled, parents) on the main thread as each step's beams are chosen, while the run goes on.
    auto steps = StepCallback(info[5], "chorus beam steps");
    auto run = std::make_shared<BeamRun>();
    return Queue(
        info.Env(),
        [&decoder, run, tokens, positions, groups, maxSteps, sourceLengths, steps]() {
          ReleaseAfter released{steps};
          StepBeams onStep = nullptr;
          if (steps) {
            onStep = [&steps](int step, const SampleResult* continuations, const int32_t* parents, int rows) {
              struct Step {
                int index;
                std::vector<SampleResult> continuations;
                std::vector<int32_t> parents;
              };
              HandOn(*steps, new Step{step, std::vector<SampleResult>(continuations, continuations + rows), std::vector<int32_t>(parents, parents + rows)},
                     [](Napi::Env e, const Step& d) {
                       return std::vector<napi_value>{Napi::Number::New(e, d.index), SampledObject(e, d.continuations), ArrayOf<Napi::Int32Array>(e, d.parents)};
                     });
            };
          }
          *run = decoder.DecodeBeams(tokens, positions, groups, maxSteps, sourceLengths, onStep);
        },
        [run](Napi::Env e) {
          Napi::Object out = SampledObject(e, run->continuations);
          out.Set("parents", ArrayOf<Napi::Int32Array>(e, run->parents));
          out.Set("steps", Napi::Number::New(e, run->steps));
          return out;
        });
  }

  // startCore(onStep): the continuous core's thread starts stepping this decoder (continuous-core.h).
  // warmCore(budgetMs): runs the prefill shapes the continuous core admits with, narrowest first, for
  // up to budgetMs (ContinuousCore::WarmPrefills); resolves with how many ran.
  Napi::Value WarmCore(const Napi::CallbackInfo& info) {
    SlotDecoder& decoder = Loaded(info.Env());
    if (!info[0].IsNumber() || !(info[0].As<Napi::Number>().DoubleValue() >= 0)) throw Napi::TypeError::New(info.Env(), "warmCore takes a budget in milliseconds (a number >= 0)");
    const double budget = info[0].As<Napi::Number>().DoubleValue();
    auto ran = std::make_shared<int>(0);
    return Queue(info.Env(), [&decoder, budget, ran]() { *ran = ContinuousCore::WarmPrefills(decoder, budget); }, [ran](Napi::Env e) { return Napi::Number::New(e, *ran); });
  }

  // onStep({ ids, sampled }) gets each step's tokens on the event loop, onStep(error) a failure, after
  // which the core takes nothing more until it is stopped.
  Napi::Value StartCore(const Napi::CallbackInfo& info) {
    SlotDecoder& decoder = Loaded(info.Env());
    if (core_) throw Napi::Error::New(info.Env(), "the continuous core is running already");
    if (busy_ > 0) throw Napi::Error::New(info.Env(), "the slot decoder has a step in flight; await it before startCore()");
    if (!info[0].IsFunction()) throw Napi::TypeError::New(info.Env(), "startCore takes a function onStep(step | error)");
    auto steps = StepCallback(info[0], "chorus continuous core");
    auto onStep = [steps](CoreStep&& step) {
      HandOn(*steps, new CoreStep(std::move(step)), [](Napi::Env e, const CoreStep& d) {
        Napi::Object out = Napi::Object::New(e);
        out.Set("prefill", Napi::Boolean::New(e, d.prefill));
        out.Set("joined", Napi::Number::New(e, d.joined));
        out.Set("ids", ArrayOf<Napi::Int32Array>(e, d.ids));
        out.Set("sampled", SampledObject(e, d.results));
        return std::vector<napi_value>{out};
      });
    };
    auto onError = [steps](const std::string& message) {
      HandOn(*steps, new std::string(message), [](Napi::Env e, const std::string& d) { return std::vector<napi_value>{Napi::Error::New(e, d).Value()}; });
    };
    try {
      core_ = std::make_unique<ContinuousCore>(decoder, onStep, onError);
    } catch (const std::exception& e) {
      steps->Release();
      throw Napi::Error::New(info.Env(), e.what());
    }
    coreSteps_ = steps;
    return info.Env().Undefined();
  }

  // coreSubmit({ id, prompt, maxTokens, endIds, minLength, argmax, temperature, topP, topK, topLogProbs,
  // repetition, presence, frequency, random, seen }): the request joins at the next step boundary.
  Napi::Value CoreSubmit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!core_) throw Napi::Error::New(env, "the continuous core is not running (startCore)");
    if (!info[0].IsObject()) throw Napi::TypeError::New(env, "coreSubmit takes a request object");
    Napi::Object o = info[0].As<Napi::Object>();
    auto number = [&](const char* name) {
      Napi::Value v = o.Get(name);
      if (!v.IsNumber()) throw Napi::TypeError::New(env, std::string("request.") + name + " must be a number");
      return v.As<Napi::Number>().DoubleValue();
    };
    CoreRequest q;
    q.id = static_cast<int32_t>(number("id"));
    q.prompt = Int64s(o.Get("prompt"), "request.prompt");
    q.maxTokens = static_cast<int32_t>(number("maxTokens"));
    q.endIds = Int32s(o.Get("endIds"), "request.endIds");
    q.minLength = static_cast<int32_t>(number("minLength"));
    q.argmax = o.Get("argmax").ToBoolean();
    q.temperature = number("temperature");
    q.topP = number("topP");
    q.topK = static_cast<int32_t>(number("topK"));
    q.topLogProbs = static_cast<int32_t>(number("topLogProbs"));
    q.repetition = number("repetition");
    q.presence = number("presence");
    q.frequency = number("frequency");
    q.random = static_cast<uint32_t>(number("random"));
    q.seen = Int32s(o.Get("seen"), "request.seen");
    if (!(q.temperature >= 0) || !(q.topP > 0) || !(q.repetition > 0)) throw Napi::RangeError::New(env, "request: temperature >= 0, topP > 0, repetition > 0");
    try {
      core_->Submit(std::move(q));
    } catch (const std::exception& e) {
      throw Napi::RangeError::New(env, e.what());
    }
    return env.Undefined();
  }

  // coreCancel(id): the row leaves at the next step boundary (nothing when the core does not run).
  Napi::Value CoreCancel(const Napi::CallbackInfo& info) {
    if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "coreCancel takes a request id");
    if (core_) core_->Cancel(info[0].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
  }

  // stopCore(): resolves when the core's thread has ended (after the step under way); its rows are dropped.
  Napi::Value StopCore(const Napi::CallbackInfo& info) {
    auto deferred = Napi::Promise::Deferred::New(info.Env());
    if (!core_) {
      deferred.Resolve(info.Env().Undefined());
      return deferred.Promise();
    }
    std::shared_ptr<ContinuousCore> core(core_.release());
    auto steps = std::move(coreSteps_);
    auto* task = new Task(info.Env(), busy_, [core, steps]() {
      core->Stop();
      steps->Release();
    }, nullptr);
    Napi::Promise promise = task->Promise();
    task->Queue();
    return promise;
  }

  Napi::Value Interrupt(const Napi::CallbackInfo& info) {
    if (decoder_) decoder_->Interrupt();
    return info.Env().Undefined();
  }

  Napi::Value CopySlots(const Napi::CallbackInfo& info) {
    SlotDecoder& decoder = Loaded(info.Env());
    auto src = Int32s(info[0], "sources");
    auto dst = Int32s(info[1], "destinations");
    auto lengths = Int32s(info[2], "lengths");
    auto sourceLengths = info[3].IsUndefined() ? std::vector<int32_t>{} : Int32s(info[3], "sourceLengths");
    return Queue(info.Env(), [&decoder, src, dst, lengths, sourceLengths]() { decoder.CopySlots(src, dst, lengths, sourceLengths); });
  }

  Napi::Value SetBlockTable(const Napi::CallbackInfo& info) {
    SlotDecoder& decoder = Loaded(info.Env());
    if (busy_ > 0) throw Napi::Error::New(info.Env(), "the slot decoder has a step in flight; await it before setBlockTable()");
    try {
      decoder.SetBlockTable(Int32s(info[0], "table"));
    } catch (const std::exception& e) {
      throw Napi::RangeError::New(info.Env(), e.what());
    }
    return info.Env().Undefined();
  }

  Napi::Value CopyBlocks(const Napi::CallbackInfo& info) {
    SlotDecoder& decoder = Loaded(info.Env());
    auto src = Int32s(info[0], "sources");
    auto dst = Int32s(info[1], "destinations");
    return Queue(info.Env(), [&decoder, src, dst]() { decoder.CopyBlocks(src, dst); });
  }

  Napi::Value CacheBlocks(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), decoder_ && decoder_->paged() ? decoder_->cacheBlocks() : 0);
  }

  // The device's memory when the paged cache was planned from it ({ free, total } bytes; zeros otherwise).
  Napi::Value PlannedMemory(const Napi::CallbackInfo& info) {
    Napi::Object out = Napi::Object::New(info.Env());
    const DeviceMemory memory = decoder_ ? decoder_->plannedMemory() : DeviceMemory{};
    out.Set("free", Napi::Number::New(info.Env(), memory.free));
    out.Set("total", Napi::Number::New(info.Env(), memory.total));
    return out;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    if (busy_ > 0) throw Napi::Error::New(info.Env(), "the slot decoder has a step in flight; await it before close()");
    if (core_) throw Napi::Error::New(info.Env(), "the slot decoder's continuous core is running; await stopCore() before close()");
    // Given back on a worker thread, so the event loop goes on meanwhile (a large model's memory takes a
    // moment to free; a split model's ranks close theirs at once, each on its own thread).
    auto doomed = std::make_shared<std::unique_ptr<SlotDecoder>>(std::move(decoder_));
    auto* task = new Task(info.Env(), busy_, [doomed] { doomed->reset(); }, nullptr);
    Napi::Promise promise = task->Promise();
    task->Queue();
    return promise;
  }

  Napi::Value CacheBytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), decoder_ ? static_cast<double>(decoder_->cacheBytes()) : 0);
  }

  // Each tensor-parallel rank's cache bytes, rank 0's first (one entry without ranks).
  Napi::Value RankCacheBytes(const Napi::CallbackInfo& info) {
    const std::vector<size_t> bytes = decoder_ ? decoder_->rankCacheBytes() : std::vector<size_t>{};
    Napi::Array out = Napi::Array::New(info.Env(), bytes.size());
    for (size_t r = 0; r < bytes.size(); r++) out.Set(static_cast<uint32_t>(r), Napi::Number::New(info.Env(), static_cast<double>(bytes[r])));
    return out;
  }

  Napi::Value SessionMs(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), decoder_ ? decoder_->sessionMs() : 0); }
  Napi::Value CallMs(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), decoder_ ? decoder_->callMs() : 0); }
  Napi::Value GraphFailure(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), decoder_ ? decoder_->graphFailure() : ""); }

  SlotDecoderOptions options_;
  std::unique_ptr<SlotDecoder> decoder_;
  int busy_ = 0;
  // The continuous core while it runs, and the function its steps go to.
  std::unique_ptr<ContinuousCore> core_;
  std::shared_ptr<Napi::ThreadSafeFunction> coreSteps_;
};

// A logits argument of the test entry points: a Float32Array, or a Uint16Array of fp16 bits, of whole
// rows of `vocab`.
struct Logits {
  const void* data;
  size_t bytes;
  FloatType type;
  int rows;
};

Logits LogitsArg(const Napi::Value& value, int vocab) {
  Napi::Env env = value.Env();
  if (!value.IsTypedArray()) throw Napi::TypeError::New(env, "logits must be a Float32Array or a Uint16Array of fp16 bits");
  auto array = value.As<Napi::TypedArray>();
  const bool half = array.TypedArrayType() == napi_uint16_array;
  if (!half && array.TypedArrayType() != napi_float32_array) throw Napi::TypeError::New(env, "logits must be a Float32Array or a Uint16Array of fp16 bits");
  if (vocab <= 0 || array.ElementLength() % vocab != 0) throw Napi::RangeError::New(env, "logits must hold whole rows of vocab");
  return Logits{static_cast<const char*>(array.ArrayBuffer().Data()) + array.ByteOffset(), array.ByteLength(), half ? FloatType::kFloat16 : FloatType::kFloat32,
                static_cast<int>(array.ElementLength() / vocab)};
}

// argmaxRows(logits: Float32Array | Uint16Array (fp16 bits), vocab, device): each row's argmax, on
// the GPU with device true (the kernel the engine runs), else on the host.
Napi::Value ArgmaxRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int vocab = info[1].As<Napi::Number>().Int32Value();
  const bool device = info[2].ToBoolean();
  const Logits logits = LogitsArg(info[0], vocab);
  auto out = Napi::Int32Array::New(env, logits.rows);
  if (!device) {
    ArgmaxRowsHost(logits.data, logits.type, logits.rows, vocab, out.Data());
    return out;
  }
#ifdef CHORUS_WITH_CUDA
  void* onDevice = nullptr;
  int32_t* ids = nullptr;
  auto fail = [&](cudaError_t status) {
    cudaFree(onDevice);
    cudaFree(ids);
    throw Napi::Error::New(env, std::string("CUDA: ") + cudaGetErrorString(status));
  };
  cudaError_t status = cudaMalloc(&onDevice, logits.bytes);
  if (status == cudaSuccess) status = cudaMalloc(&ids, sizeof(int32_t) * logits.rows);
  if (status == cudaSuccess) status = cudaMemcpy(onDevice, logits.data, logits.bytes, cudaMemcpyHostToDevice);
  if (status != cudaSuccess) fail(status);
  ArgmaxRowsDevice(onDevice, logits.type, logits.rows, vocab, ids, nullptr);
  status = cudaGetLastError();
  if (status == cudaSuccess) status = cudaMemcpy(out.Data(), ids, sizeof(int32_t) * logits.rows, cudaMemcpyDeviceToHost);
  if (status != cudaSuccess) fail(status);
  cudaFree(onDevice);
  cudaFree(ids);
  return out;
#else
  throw Napi::Error::New(env, "this build of the native engine has no CUDA");
#endif
}

// sampleRows(logits: Float32Array | Uint16Array (fp16 bits), vocab, sample, device, repeat?): the
// sampler's choices for the sample's rows of `logits`, on the GPU with device true (the engine's kernel),
// else on the host: { tokens, logProbs, processed } (processed: each sampled row's logits after its
// processors). With `repeat` on the GPU, the kernel runs that many more times between two events and
// `kernelMs` is their mean (benchmarks).
Napi::Value SampleRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int vocab = info[1].As<Napi::Number>().Int32Value();
  const bool device = info[3].ToBoolean();
  const Logits logits = LogitsArg(info[0], vocab);
  SampleBatch batch = ParseSampleBatch(info[2], vocab);
  for (int32_t r : batch.rows) {
    if (r < 0 || r >= logits.rows) throw Napi::RangeError::New(env, "sample.rows has a row outside the logits");
  }
  std::vector<SampleResult> out(batch.rows.size());
  std::vector<float> processed(static_cast<size_t>(vocab) * batch.rows.size());
  if (!device) {
    SampleRowsHost(logits.data, logits.type, vocab, batch, processed.data(), out.data());
    return SampledObject(env, out, &processed);
  }
#ifdef CHORUS_WITH_CUDA
  void* onDevice = nullptr;
  void* staging = nullptr;
  void* work = nullptr;
  void* results = nullptr;
  void* mass = nullptr;
  const size_t stagingBytes = SampleStagingBytes(batch);
  std::vector<char> hostStaging(stagingBytes);
  cudaError_t status = cudaMalloc(&onDevice, logits.bytes);
  if (status == cudaSuccess) status = cudaMalloc(&staging, stagingBytes);
  if (status == cudaSuccess) status = cudaMalloc(&work, sizeof(float) * vocab * std::max<size_t>(1, batch.rows.size()));
  if (status == cudaSuccess) status = cudaMalloc(&results, sizeof(SampleResult) * std::max<size_t>(1, batch.rows.size()));
  if (status == cudaSuccess) status = cudaMalloc(&mass, sizeof(double) * vocab * std::max<size_t>(1, batch.rows.size()));
  if (status == cudaSuccess) status = cudaMemcpy(onDevice, logits.data, logits.bytes, cudaMemcpyHostToDevice);
  const auto sample = [&] {
    SampleRowsDevice(onDevice, logits.type, vocab, batch, hostStaging.data(), staging, static_cast<float*>(work), static_cast<double*>(mass), static_cast<SampleResult*>(results), nullptr);
  };
  if (status == cudaSuccess) {
    sample();
    status = cudaGetLastError();
  }
  const int repeat = info.Length() > 4 && info[4].IsNumber() ? info[4].As<Napi::Number>().Int32Value() : 0;
  float kernelMs = 0;
  if (status == cudaSuccess && repeat > 0) {
    cudaEvent_t events[2];
    cudaEventCreate(&events[0]);
    cudaEventCreate(&events[1]);
    cudaEventRecord(events[0], nullptr);
    // Each run stages its parameters in as an engine step does (a host copy and one small upload).
    for (int i = 0; i < repeat; i++) sample();
    cudaEventRecord(events[1], nullptr);
    status = cudaGetLastError();
    if (status == cudaSuccess) status = cudaEventSynchronize(events[1]);
    if (status == cudaSuccess) status = cudaEventElapsedTime(&kernelMs, events[0], events[1]);
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  }
  if (status == cudaSuccess) status = cudaMemcpy(out.data(), results, sizeof(SampleResult) * batch.rows.size(), cudaMemcpyDeviceToHost);
  if (status == cudaSuccess) status = cudaMemcpy(processed.data(), work, sizeof(float) * processed.size(), cudaMemcpyDeviceToHost);
  for (void* p : {onDevice, staging, work, results, mass}) cudaFree(p);
  if (status != cudaSuccess) throw Napi::Error::New(env, std::string("CUDA: ") + cudaGetErrorString(status));
  Napi::Object sampled = SampledObject(env, out, &processed);
  if (repeat > 0) sampled.Set("kernelMs", Napi::Number::New(env, kernelMs / repeat));
  return sampled;
#else
  throw Napi::Error::New(env, "this build of the native engine has no CUDA");
#endif
}

// cudaDevices(): how many CUDA devices the driver reports (0 without CUDA or a GPU).
Napi::Value CudaDevices(const Napi::CallbackInfo& info) {
  int count = 0;
#ifdef CHORUS_WITH_CUDA
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
#endif
  return Napi::Number::New(info.Env(), count);
}

// gpuMemory(device): { free, total } bytes of CUDA device `device` (cudaMemGetInfo).
Napi::Value GpuMemory(const Napi::CallbackInfo& info) {
  if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "gpuMemory takes a device id");
  DeviceMemory memory;
  try {
    memory = DeviceMemoryOf(info[0].As<Napi::Number>().Int32Value());
  } catch (const std::exception& e) {
    throw Napi::Error::New(info.Env(), e.what());
  }
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("free", Napi::Number::New(info.Env(), memory.free));
  out.Set("total", Napi::Number::New(info.Env(), memory.total));
  return out;
}

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("SlotDecoder", SlotDecoderWrap::Define(env));
  exports.Set("argmaxRows", Napi::Function::New(env, ArgmaxRows));
  exports.Set("sampleRows", Napi::Function::New(env, SampleRows));
  exports.Set("attendRows", Napi::Function::New(env, AttendRows));
  exports.Set("cudaDevices", Napi::Function::New(env, CudaDevices));
  exports.Set("gpuMemory", Napi::Function::New(env, GpuMemory));
  exports.Set("runGraph", Napi::Function::New(env, RunGraph));
  exports.Set("runGraphRanks", Napi::Function::New(env, RunGraphRanks));
#ifdef CHORUS_WITH_CUDA
  exports.Set("cuda", Napi::Boolean::New(env, true));
#else
  exports.Set("cuda", Napi::Boolean::New(env, false));
#endif
  exports.Set("ortApiVersion", Napi::Number::New(env, ORT_API_VERSION));
  return exports;
}

}  // namespace chorus

static Napi::Object InitChorus(Napi::Env env, Napi::Object exports) { return chorus::Init(env, exports); }

NODE_API_MODULE(chorus_native, InitChorus)
