#include "slot-decoder.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus {

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

// Adds the time of a scope to a counter.
struct Timed {
  explicit Timed(double& total) : total_(total), start_(Clock::now()) {}
  ~Timed() { total_ += MsSince(start_); }
  double& total_;
  Clock::time_point start_;
};

#ifdef CHORUS_WITH_CUDA
void Check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}
#endif

ONNXTensorElementDataType ElementType(FloatType type) {
  return type == FloatType::kFloat16 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}

}  // namespace

SlotDecoder::SlotDecoder(const SlotDecoderOptions& options) : options_(options), env_(ORT_LOGGING_LEVEL_ERROR, "chorus-native") {
  if (options.slots <= 0 || options.maxLength <= 0 || options.layers <= 0 || options.kvHeads <= 0 || options.headDim <= 0 || options.vocab <= 0) {
    throw std::invalid_argument("slots, maxLength, layers, kvHeads, headDim and vocab must be positive");
  }
  elementBytes_ = options.floatType == FloatType::kFloat16 ? 2 : 4;
  slotBytes_ = static_cast<size_t>(options.kvHeads) * options.maxLength * options.headDim * elementBytes_;
  cpu_ = Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);

  Ort::SessionOptions sessionOptions;
  sessionOptions.SetGraphOptimizationLevel(GraphOptimizationLevel::ORT_ENABLE_ALL);
  if (options.intraOpThreads > 0) sessionOptions.SetIntraOpNumThreads(options.intraOpThreads);
  if (options.cuda) {
#ifdef CHORUS_WITH_CUDA
    Check(cudaSetDevice(options.deviceId), "cudaSetDevice");
    cudaStream_t stream;
    Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    stream_ = stream;
    Ort::CUDAProviderOptions cuda;
    std::map<std::string, std::string> settings = options.cudaOptions;
    settings["device_id"] = std::to_string(options.deviceId);
    if (options.cudaGraph) settings["enable_cuda_graph"] = "1";
    cuda.Update(std::unordered_map<std::string, std::string>(settings.begin(), settings.end()));
    sessionOptions.AppendExecutionProvider_CUDA_V2(*cuda);
    memory_ = Ort::MemoryInfo("Cuda", OrtDeviceAllocator, options.deviceId, OrtMemTypeDefault);
#else
    throw std::runtime_error("this build of the native engine has no CUDA (nvcc was not found when it was built)");
#endif
  } else {
    memory_ = Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);
  }
  session_ = std::make_unique<Ort::Session>(env_, options.model.c_str(), sessionOptions);

  for (int l = 0; l < options.layers; l++) {
    for (const char* part : {"key", "value"}) {
      pastNames_.push_back("past_key_values." + std::to_string(l) + "." + part);
      presentNames_.push_back("present." + std::to_string(l) + "." + part);
    }
  }
  const size_t layerBytes = slotBytes_ * options.slots;
  for (int l = 0; l < options.layers; l++) {
    keys_.push_back(Allocate(layerBytes));
    values_.push_back(Allocate(layerBytes));
  }
  cacheBytes_ = layerBytes * 2 * options.layers;
  logits_ = Allocate(static_cast<size_t>(options.slots) * options.vocab * elementBytes_);
#ifdef CHORUS_WITH_CUDA
  if (options.cuda) argmaxDevice_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * options.slots));
  if (options.cuda && options.cudaGraph) {
    idsDevice_ = static_cast<int64_t*>(Allocate(sizeof(int64_t) * options.slots));
    positionsDevice_ = static_cast<int64_t*>(Allocate(sizeof(int64_t) * options.slots));
    seqlensDevice_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * options.slots));
  }
#endif
}

SlotDecoder::~SlotDecoder() {
  session_.reset();
  for (void* p : keys_) Free(p);
  for (void* p : values_) Free(p);
  Free(logits_);
  Free(scratch_);
  Free(copyIndex_);
  Free(argmaxDevice_);
  Free(sampleWork_);
  Free(sampleStaging_);
  Free(sampledDevice_);
  Free(idsDevice_);
  Free(positionsDevice_);
  Free(seqlensDevice_);
#ifdef CHORUS_WITH_CUDA
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
}

void* SlotDecoder::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    void* p = nullptr;
    Check(cudaMalloc(&p, bytes), "cudaMalloc (the cache of slots; lower the slots or their length)");
    Check(cudaMemset(p, 0, bytes), "cudaMemset");
    return p;
  }
#endif
  void* p = std::calloc(1, bytes);
  if (p == nullptr) throw std::runtime_error("out of host memory for the cache of slots");
  return p;
}

void SlotDecoder::Free(void* p) {
  if (p == nullptr) return;
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    cudaFree(p);
    return;
  }
#endif
  std::free(p);
}

void SlotDecoder::Reserve(void*& buffer, size_t& capacity, size_t need, size_t grow) {
  if (capacity >= need) return;
  Free(buffer);
  buffer = nullptr;
  capacity = 0;
  buffer = Allocate(grow);
  capacity = grow;
}

void SlotDecoder::CopyStrided(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width, size_t height) {
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    Check(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, height, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream_)), "cudaMemcpy2DAsync");
    return;
  }
#endif
  for (size_t h = 0; h < height; h++) std::memcpy(static_cast<char*>(dst) + h * dstPitch, static_cast<const char*>(src) + h * srcPitch, width);
}

void SlotDecoder::ToHost(void* dst, const void* src, size_t bytes) {
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_)), "cudaMemcpyAsync");
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

StepResult SlotDecoder::Prefill(int slot, const std::vector<int64_t>& ids, const std::vector<int32_t>& logitRows, const SampleBatch& sample) {
  Timed timed(callMs_);
  const int length = static_cast<int>(ids.size());
  if (slot < 0 || slot >= options_.slots) throw std::out_of_range("slot " + std::to_string(slot) + " is outside 0.." + std::to_string(options_.slots - 1));
  if (length == 0 || length > options_.maxLength) throw std::out_of_range("a prompt of " + std::to_string(length) + " tokens does not fit a slot of " + std::to_string(options_.maxLength));
  std::vector<int64_t> positions(length);
  for (int i = 0; i < length; i++) positions[i] = i;
  return Run(slot, 1, length, ids, positions, {length - 1}, length, logitRows, sample, false);
}

StepResult SlotDecoder::Decode(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, const std::vector<int32_t>& logitRows,
                               const SampleBatch& sample) {
  Timed timed(callMs_);
  const int rows = static_cast<int>(tokens.size());
  if (rows == 0 || rows > options_.slots || positions.size() != tokens.size()) throw std::out_of_range("decode takes 1.." + std::to_string(options_.slots) + " rows, a position for each");
  std::vector<int32_t> seqlens(rows);
  int total = 0;
  for (int r = 0; r < rows; r++) {
    if (positions[r] < 0 || positions[r] >= options_.maxLength) throw std::out_of_range("row " + std::to_string(r) + " at position " + std::to_string(positions[r]) + " is past its slot's " + std::to_string(options_.maxLength));
    seqlens[r] = static_cast<int32_t>(positions[r]);
    total = std::max(total, seqlens[r] + 1);
  }
  // A captured graph keeps its launch shapes: its attention is sized to the whole slot, and each row's
  // seqlens_k (on the device) says how much of it counts.
  const bool graph = options_.cuda && options_.cudaGraph;
  return Run(0, rows, 1, tokens, positions, seqlens, graph ? options_.maxLength : total, logitRows, sample, graph);
}

StepResult SlotDecoder::Run(int firstSlot, int rows, int sequence, const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                            const std::vector<int32_t>& seqlens, int total, const std::vector<int32_t>& logitRows, const SampleBatch& sample, bool graph) {
  for (int32_t r : logitRows) {
    if (r < 0 || r >= rows) throw std::out_of_range("logits of row " + std::to_string(r) + " asked of a step of " + std::to_string(rows));
  }
  for (int32_t r : sample.rows) {
    if (r < 0 || r >= rows) throw std::out_of_range("row " + std::to_string(r) + " sampled in a step of " + std::to_string(rows));
  }
  const ONNXTensorElementDataType floatType = ElementType(options_.floatType);
  const int64_t idsShape[2] = {rows, sequence};
  const int64_t rowsShape[1] = {rows};
  int32_t totalValue = total;
  std::vector<Ort::Value> values;
  values.reserve(4 + 2 * options_.layers + 1);
  Ort::IoBinding io(*session_);
  Ort::RunOptions runOptions;
  if (graph) {
#ifdef CHORUS_WITH_CUDA
    // Staged where the graph reads them; the graph of this batch size is captured on first use.
    auto stream = static_cast<cudaStream_t>(stream_);
    Check(cudaMemcpyAsync(idsDevice_, ids.data(), sizeof(int64_t) * ids.size(), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    Check(cudaMemcpyAsync(positionsDevice_, positions.data(), sizeof(int64_t) * positions.size(), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    Check(cudaMemcpyAsync(seqlensDevice_, seqlens.data(), sizeof(int32_t) * seqlens.size(), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    values.push_back(Ort::Value::CreateTensor<int64_t>(memory_, idsDevice_, ids.size(), idsShape, 2));
    io.BindInput("input_ids", values.back());
    values.push_back(Ort::Value::CreateTensor<int64_t>(memory_, positionsDevice_, positions.size(), idsShape, 2));
    io.BindInput("position_ids", values.back());
    values.push_back(Ort::Value::CreateTensor<int32_t>(memory_, seqlensDevice_, seqlens.size(), rowsShape, 1));
    io.BindInput("seqlens_k", values.back());
    runOptions.AddConfigEntry("gpu_graph_id", std::to_string(rows).c_str());
#endif
  } else {
    values.push_back(Ort::Value::CreateTensor<int64_t>(cpu_, const_cast<int64_t*>(ids.data()), ids.size(), idsShape, 2));
    io.BindInput("input_ids", values.back());
    values.push_back(Ort::Value::CreateTensor<int64_t>(cpu_, const_cast<int64_t*>(positions.data()), positions.size(), idsShape, 2));
    io.BindInput("position_ids", values.back());
    values.push_back(Ort::Value::CreateTensor<int32_t>(cpu_, const_cast<int32_t*>(seqlens.data()), seqlens.size(), rowsShape, 1));
    io.BindInput("seqlens_k", values.back());
    // With graphs on, other runs (prefills) are not captured.
    if (options_.cuda && options_.cudaGraph) runOptions.AddConfigEntry("gpu_graph_id", "-1");
  }
  values.push_back(Ort::Value::CreateTensor<int32_t>(cpu_, &totalValue, 1, nullptr, 0));
  io.BindInput("total_sequence_length", values.back());
  const int64_t cacheShape[4] = {rows, options_.kvHeads, options_.maxLength, options_.headDim};
  for (int l = 0; l < options_.layers; l++) {
    void* bases[2] = {keys_[l], values_[l]};
    for (int part = 0; part < 2; part++) {
      void* at = static_cast<char*>(bases[part]) + static_cast<size_t>(firstSlot) * slotBytes_;
      values.push_back(Ort::Value::CreateTensor(memory_, at, slotBytes_ * rows, cacheShape, 4, floatType));
      io.BindInput(pastNames_[2 * l + part].c_str(), values.back());
      io.BindOutput(presentNames_[2 * l + part].c_str(), values.back());
    }
  }
  const int64_t logitsShape[3] = {rows, 1, options_.vocab};
  const size_t rowBytes = static_cast<size_t>(options_.vocab) * elementBytes_;
  values.push_back(Ort::Value::CreateTensor(memory_, logits_, rowBytes * rows, logitsShape, 3, floatType));
  io.BindOutput("logits", values.back());

  {
    Timed inSession(sessionMs_);
    session_->Run(runOptions, io);
    io.SynchronizeOutputs();
  }

  StepResult result;
  result.argmax.resize(rows);
  result.logits.resize(logitRows.size() * options_.vocab);
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    auto stream = static_cast<cudaStream_t>(stream_);
    ArgmaxRowsDevice(logits_, options_.floatType, rows, options_.vocab, argmaxDevice_, stream_);
    Check(cudaGetLastError(), "argmax kernel");
    ToHost(result.argmax.data(), argmaxDevice_, sizeof(int32_t) * rows);
    Sample(sample, result);
    std::vector<char> staged(rowBytes * logitRows.size());
    for (size_t i = 0; i < logitRows.size(); i++) ToHost(staged.data() + i * rowBytes, static_cast<char*>(logits_) + logitRows[i] * rowBytes, rowBytes);
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    WidenRowsHost(staged.data(), options_.floatType, options_.vocab, nullptr, static_cast<int>(logitRows.size()), result.logits.data());
    return result;
  }
#endif
  ArgmaxRowsHost(logits_, options_.floatType, rows, options_.vocab, result.argmax.data());
  Sample(sample, result);
  WidenRowsHost(logits_, options_.floatType, options_.vocab, logitRows.data(), static_cast<int>(logitRows.size()), result.logits.data());
  return result;
}

void SlotDecoder::Sample(const SampleBatch& sample, StepResult& result) {
  result.sampled.resize(sample.rows.size());
  if (sample.rows.empty()) return;
  if (sampleWork_ == nullptr) sampleWork_ = static_cast<float*>(Allocate(sizeof(float) * options_.vocab * options_.slots));
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    if (sampledDevice_ == nullptr) sampledDevice_ = static_cast<SampleResult*>(Allocate(sizeof(SampleResult) * options_.slots));
    const size_t bytes = SampleStagingBytes(sample);
    Reserve(sampleStaging_, sampleStagingBytes_, bytes, bytes * 2);
    if (sampleHostStaging_.size() < bytes) sampleHostStaging_.resize(bytes * 2);
    SampleRowsDevice(logits_, options_.floatType, options_.vocab, sample, sampleHostStaging_.data(), sampleStaging_, sampleWork_, sampledDevice_,
                     stream_);
    Check(cudaGetLastError(), "sampling kernel");
    ToHost(result.sampled.data(), sampledDevice_, sizeof(SampleResult) * sample.rows.size());
    return;
  }
#endif
  SampleRowsHost(logits_, options_.floatType, options_.vocab, sample, sampleWork_, result.sampled.data());
}

void SlotDecoder::CopySlots(const std::vector<int32_t>& src, const std::vector<int32_t>& dst, const std::vector<int32_t>& lengths) {
  Timed timed(callMs_);
  const size_t count = src.size();
  if (dst.size() != count || lengths.size() != count) throw std::invalid_argument("copySlots takes as many destinations and lengths as sources");
  if (count == 0) return;
  if (count > static_cast<size_t>(options_.slots)) throw std::invalid_argument("copySlots takes at most one copy per slot");
  for (size_t i = 0; i < count; i++) {
    if (src[i] < 0 || src[i] >= options_.slots || dst[i] < 0 || dst[i] >= options_.slots) throw std::out_of_range("slot outside 0.." + std::to_string(options_.slots - 1));
    if (lengths[i] < 0 || lengths[i] > options_.maxLength) throw std::out_of_range("a length outside 0.." + std::to_string(options_.maxLength));
  }
  Reserve(scratch_, scratchBytes_, count * slotBytes_, count * slotBytes_);
  // Each slot is kv_heads blocks of max_length x head_dim; a row's first `length` positions of each.
  const size_t pitch = static_cast<size_t>(options_.maxLength) * options_.headDim * elementBytes_;
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    // Two launches per layer's key or value (into the scratch, then out of it) instead of a copy per
    // slot and head: the index arrays go over once.
    auto stream = static_cast<cudaStream_t>(stream_);
    if (copyIndex_ == nullptr) copyIndex_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * 4 * options_.slots));
    std::vector<int32_t> staged(4 * count);
    for (size_t i = 0; i < count; i++) {
      staged[i] = src[i];
      staged[count + i] = dst[i];
      staged[2 * count + i] = lengths[i];
      staged[3 * count + i] = static_cast<int32_t>(i);
    }
    Check(cudaMemcpyAsync(copyIndex_, staged.data(), sizeof(int32_t) * staged.size(), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    const int32_t* srcIndex = copyIndex_;
    const int32_t* dstIndex = copyIndex_ + count;
    const int32_t* lengthsDevice = copyIndex_ + 2 * count;
    const int32_t* identity = copyIndex_ + 3 * count;
    const size_t rowBytes = static_cast<size_t>(options_.headDim) * elementBytes_;
    for (int l = 0; l < options_.layers; l++) {
      for (void* base : {keys_[l], values_[l]}) {
        CopySlotBlocksDevice(scratch_, base, identity, srcIndex, lengthsDevice, static_cast<int>(count), options_.kvHeads, slotBytes_, pitch, rowBytes, stream_);
        CopySlotBlocksDevice(base, scratch_, dstIndex, identity, lengthsDevice, static_cast<int>(count), options_.kvHeads, slotBytes_, pitch, rowBytes, stream_);
      }
    }
    Check(cudaGetLastError(), "slot copy kernel");
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return;
  }
#endif
  for (int l = 0; l < options_.layers; l++) {
    for (void* base : {keys_[l], values_[l]}) {
      for (size_t i = 0; i < count; i++) {
        const size_t width = static_cast<size_t>(lengths[i]) * options_.headDim * elementBytes_;
        CopyStrided(static_cast<char*>(scratch_) + i * slotBytes_, pitch, static_cast<char*>(base) + src[i] * slotBytes_, pitch, width, options_.kvHeads);
      }
      for (size_t i = 0; i < count; i++) {
        const size_t width = static_cast<size_t>(lengths[i]) * options_.headDim * elementBytes_;
        CopyStrided(static_cast<char*>(base) + dst[i] * slotBytes_, pitch, static_cast<char*>(scratch_) + i * slotBytes_, pitch, width, options_.kvHeads);
      }
    }
  }
}

}  // namespace chorus
