#include "slot-decoder.h"

#include "cuda-check.h"
#include "custom-op.h"
#include "linear.h"

#include <onnxruntime_run_options_config_keys.h>
#include <onnxruntime_session_options_config_keys.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
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

// ONNX Runtime 1.29's XQA decode kernel (GroupQueryAttention's, fp16 and bf16) raises its shared-memory
// limit once per process, on the device current at its first launch (a function-local static in
// xqa/mha_impl.cuh); on any other device each of its launches fails with cudaErrorInvalidValue. XQA is
// therefore left to the first device a decoder of the process runs on: a decoder on another device, or
// one split over several, turns it off for the sessions made from then on (ORT_ENABLE_XQA=0, which each
// GroupQueryAttention reads as its session loads; decode attention then goes to flash decoding). A value
// the environment already has is kept.
void KeepXqaToOneDevice(int device, bool severalDevices) {
  static std::mutex lock;
  static int first = -1;
  std::lock_guard<std::mutex> held(lock);
  if (first < 0) first = device;
  if (severalDevices || device != first) setenv("ORT_ENABLE_XQA", "0", 0);
}

}  // namespace

DeviceMemory DeviceMemoryOf(int device) {
  DeviceMemory memory;
#ifdef CHORUS_WITH_CUDA
  CheckCuda(cudaSetDevice(device), "cudaSetDevice");
  size_t free = 0;
  size_t total = 0;
  CheckCuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  memory.free = static_cast<double>(free);
  memory.total = static_cast<double>(total);
#endif
  return memory;
}

SlotDecoder::SlotDecoder(const SlotDecoderOptions& options) : options_(options), env_(ORT_LOGGING_LEVEL_ERROR, "chorus-native") {
  if (options.cuda) KeepXqaToOneDevice(options.deviceId, !options.rankModels.empty());
  // A load that fails gives back what it had taken (no destructor runs for a constructor that throws).
  try {
    if (options.rankModels.empty()) {
      Load();
    } else {
      LoadRanks();
    }
  } catch (...) {
    CloseRanks();
    Release();
    throw;
  }
}

void SlotDecoder::Load() {
  const SlotDecoderOptions& options = options_;
  if (options.slots <= 0 || options.maxLength <= 0 || options.layers <= 0 || options.kvHeads <= 0 || options.headDim <= 0 || options.vocab <= 0) {
    throw std::invalid_argument("slots, maxLength, layers, kvHeads, headDim and vocab must be positive");
  }
  if (options.blockSize < 0 || options.blocks < 0) throw std::invalid_argument("blockSize and blocks must not be negative");
  if (options.blockSize > 0 && !options.encoderModel.empty()) throw std::invalid_argument("the paged cache is for decoder-only models");
  if (options.blockSize > 0 && !(options.memoryUtilization > 0 && options.memoryUtilization <= 1)) {
    throw std::invalid_argument("memoryUtilization must be in (0, 1], not " + std::to_string(options.memoryUtilization));
  }
  elementBytes_ = ElementBytes(options.floatType);
  slotBytes_ = static_cast<size_t>(options.kvHeads) * options.maxLength * options.headDim * elementBytes_;
  cpu_ = Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);

  Ort::SessionOptions sessionOptions;
  sessionOptions.SetGraphOptimizationLevel(GraphOptimizationLevel::ORT_ENABLE_ALL);
  if (options.intraOpThreads > 0) sessionOptions.SetIntraOpNumThreads(options.intraOpThreads);
  if (!options.intraOpSpinning) sessionOptions.AddConfigEntry(kOrtSessionOptionsConfigAllowIntraOpSpinning, "0");
  // CHORUS_ORT_PROFILE=<prefix>: ONNX Runtime's own profile of every run (each node's time), written as
  // <prefix>_<date>.json when the session closes (bench/cpu/native-step-profile.ts reads it).
  if (const char* profile = std::getenv("CHORUS_ORT_PROFILE"); profile != nullptr && *profile != '\0') sessionOptions.EnableProfiling(profile);
  if (options.cuda) {
#ifdef CHORUS_WITH_CUDA
    CheckCuda(cudaSetDevice(options.deviceId), "cudaSetDevice");
    // MultiHeadAttention (the slot encoder's) leaves cuDNN's flash attention out unless the environment
    // asks for it: on bart-large it spent 74 ms of the host's time in each beam request's encode, where
    // the other kernels take 2 ms (and 10 ms against 7.5 for a greedy batch of 32 sources).
    setenv("ORT_ENABLE_CUDNN_FLASH_ATTENTION", "0", 0);
    cudaStream_t stream;
    CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    stream_ = stream;
    Ort::CUDAProviderOptions cuda;
    std::map<std::string, std::string> settings = options.cudaOptions;
    settings["device_id"] = std::to_string(options.deviceId);
    cuda.Update(std::unordered_map<std::string, std::string>(settings.begin(), settings.end()));
    // ONNX Runtime's work goes on this decoder's stream, in order with its own kernels and copies (and
    // into its graphs when captured).
    cuda.UpdateWithValue("user_compute_stream", stream_);
    sessionOptions.AppendExecutionProvider_CUDA_V2(*cuda);
    memory_ = Ort::MemoryInfo("Cuda", OrtDeviceAllocator, options.deviceId, OrtMemTypeDefault);
#else
    throw std::runtime_error("this build of the native engine has no CUDA (nvcc was not found when it was built)");
#endif
  } else {
    memory_ = Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);
  }
  const size_t width = static_cast<size_t>(options.kvHeads) * options.headDim * elementBytes_;
  AddChorusOps(sessionOptions, options.cuda, options.floatType);
  if (seq2seq()) {
    if (options.sourceLength <= 0) throw std::invalid_argument("an encoder-decoder needs a positive sourceLength");
    encoder_ = std::make_unique<Ort::Session>(env_, options.encoderModel.c_str(), sessionOptions);
    // Position-major slots: a row's first n positions are one block.
    copyHeads_ = 1;
    copyPitch_ = slotBytes_;
    copyRowBytes_ = width;
  } else {
    copyHeads_ = options.kvHeads;
    copyPitch_ = static_cast<size_t>(options.maxLength) * options.headDim * elementBytes_;
    copyRowBytes_ = static_cast<size_t>(options.headDim) * elementBytes_;
  }
  // A paged pool planned from the GPU counts what this decoder's session takes (the weights) apart
  // from what others hold.
  const bool planning = options.blockSize > 0 && options.blocks == 0 && options.cuda;
  const DeviceMemory before = planning ? DeviceMemoryOf(options.deviceId) : DeviceMemory{};
  session_ = std::make_unique<Ort::Session>(env_, options.model.c_str(), sessionOptions);
  Ort::AllocatorWithDefaultOptions names;
  for (size_t i = 0; i < session_->GetInputCount(); i++) takesLastIndex_ = takesLastIndex_ || std::string(session_->GetInputNameAllocated(i, names).get()) == "last_index";

  const std::string stack = seq2seq() ? ".decoder" : "";
  for (int l = 0; l < options.layers; l++) {
    for (const char* part : {"key", "value"}) {
      pastNames_.push_back("past_key_values." + std::to_string(l) + stack + "." + part);
      presentNames_.push_back("present." + std::to_string(l) + stack + "." + part);
      if (seq2seq()) {
        crossNames_.push_back("past_key_values." + std::to_string(l) + ".encoder." + part);
        encoderOutputNames_.push_back("cross." + std::to_string(l) + "." + part);
      }
    }
  }
  if (options.stagingSlots < 0 || (options.stagingSlots & (options.stagingSlots - 1)) != 0) throw std::invalid_argument("stagingSlots must be 0 or a power of two");
  if (options.stagingSlots > 0 && (!options.cuda || !options.cudaGraph || options.blockSize > 0 || !options.encoderModel.empty() || !options.rankModels.empty())) {
    throw std::invalid_argument("stagingSlots takes a cache of slots on CUDA with graphs, one rank, decoder-only");
  }
  size_t layerBytes = slotBytes_ * (options.slots + options.stagingSlots);
  if (paged()) {
    blockBytes_ = static_cast<size_t>(options.kvHeads) * options.blockSize * options.headDim * elementBytes_;
    if (planning) PlanBlocks(before);
    if (options_.blocks == 0) options_.blocks = options.slots * blocksPerRow() + 1;
    layerBytes = blockBytes_ * options_.blocks;
    blockTable_.assign(static_cast<size_t>(options.slots) * blocksPerRow(), 0);
    blockTableStale_ = true;
    if (options.cuda) blockTableDevice_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * blockTable_.size()));
  }
  crossSlotBytes_ = static_cast<size_t>(options.sourceLength) * width;
  for (int l = 0; l < options.layers; l++) {
    keys_.push_back(Allocate(layerBytes));
    values_.push_back(Allocate(layerBytes));
    if (seq2seq()) {
      crossKeys_.push_back(Allocate(crossSlotBytes_ * options.slots));
      crossValues_.push_back(Allocate(crossSlotBytes_ * options.slots));
    }
  }
  cacheBytes_ = (layerBytes + (seq2seq() ? crossSlotBytes_ * options.slots : 0)) * 2 * options.layers;
  // Every cache buffer's address, for the slot moves: each layer's key and value, then the
  // cross-attention's.
  for (int l = 0; l < options.layers; l++) cacheBuffers_.insert(cacheBuffers_.end(), {keys_[l], values_[l]});
  for (int l = 0; l < options.layers && seq2seq(); l++) cacheBuffers_.insert(cacheBuffers_.end(), {crossKeys_[l], crossValues_[l]});
  logits_ = Allocate(static_cast<size_t>(options.slots) * options.vocab * elementBytes_);
  if (takesLastIndex_) lastIndexZeros_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * (options.slots + options.stagingSlots)));
#ifdef CHORUS_WITH_CUDA
  if (options.cuda) {
    // The same addresses on the device, for the slot moves' kernels.
    bufferTable_ = static_cast<void**>(Allocate(sizeof(void*) * cacheBuffers_.size()));
    CheckCuda(cudaMemcpy(bufferTable_, cacheBuffers_.data(), sizeof(void*) * cacheBuffers_.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  if (options.cuda) argmaxDevice_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * options.slots));
  if (options.cuda) bannedDevice_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * options.slots));
  if (options.cuda && options.cudaGraph) {
    idsDevice_ = static_cast<int64_t*>(Allocate(sizeof(int64_t) * options.slots));
    positionsDevice_ = static_cast<int64_t*>(Allocate(sizeof(int64_t) * options.slots));
    seqlensDevice_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * options.slots));
    minLeftDevice_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * options.slots));
    if (seq2seq()) sourceLengthsDevice_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * options.slots));
    CheckCuda(cudaHostAlloc(&hostIds_, sizeof(int32_t) * 2 * options.slots, cudaHostAllocMapped), "cudaHostAlloc");
    for (auto& slot : events_) {
      for (int e = 0; e < 3; e++) {
        // events[2] orders the host after a step; only the graph's pair is timed.
        cudaEvent_t made;
        CheckCuda(cudaEventCreateWithFlags(&made, e == 2 ? cudaEventDisableTiming : cudaEventDefault), "cudaEventCreate");
        slot[e] = made;
      }
    }
  }
#endif
}

SlotDecoder::~SlotDecoder() {
  CloseRanks();
  Release();
}

void SlotDecoder::DropGraphs() {
#ifdef CHORUS_WITH_CUDA
  for (auto& [rows, graph] : graphs_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
  for (auto& [shape, graph] : prefillGraphs_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
#endif
  graphs_.clear();
  prefillGraphs_.clear();
}

void SlotDecoder::Release() {
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) cudaSetDevice(options_.deviceId);
  // A greedy run may have left a step queued behind its last one read.
  if (stream_ != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
#endif
  session_.reset();
  encoder_.reset();
  for (const auto* buffers : {&keys_, &values_, &crossKeys_, &crossValues_}) {
    for (void* p : *buffers) Free(p);
  }
  Free(logits_);
  Free(scratch_);
  Free(copyIndex_);
  Free(bufferTable_);
  Free(argmaxDevice_);
  Free(bannedDevice_);
  Free(sampleWork_);
  Free(sampleMass_);
  Free(sampleStaging_);
  Free(chosenStaging_);
  Free(sampledDevice_);
  Free(idsDevice_);
  Free(blockTableDevice_);
  Free(positionsDevice_);
  Free(seqlensDevice_);
  Free(sourceLengthsDevice_);
  Free(minLeftDevice_);
  Free(prefillIdsDevice_);
  Free(prefillPositionsDevice_);
  Free(prefillSeqlensDevice_);
  Free(prefillLastIndexDevice_);
  Free(lastIndexZeros_);
  Free(sampleIndexDevice_);
  Free(joinDevice_);
#ifdef CHORUS_WITH_CUDA
  DropGraphs();
  for (auto& slot : events_) {
    for (void* event : slot) {
      if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
    }
  }
  if (hostIds_ != nullptr) cudaFreeHost(hostIds_);
  if (hostSampled_ != nullptr) cudaFreeHost(hostSampled_);
  for (char* batch : hostBatches_) {
    if (batch != nullptr) cudaFreeHost(batch);
  }
  for (char* staging : joinHost_) {
    if (staging != nullptr) cudaFreeHost(staging);
  }
  for (void* event : stagedEvents_) {
    if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }
  if (sideStream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(sideStream_));
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
}

void SlotDecoder::PlanBlocks(const DeviceMemory& before) {
  // The share of the device this model may take, less what its session took (the weights) and the
  // activations' reserve (the logits and the sampler's buffers come out of it too), and never more
  // than is free beside the reserve (other processes hold the rest).
  const DeviceMemory memory = DeviceMemoryOf(options_.deviceId);
  planned_ = memory;
  const double used = std::max(0.0, before.free - memory.free);
  const double budget = std::min(memory.total * options_.memoryUtilization - used, memory.free) - options_.reserveBytes;
  const double perBlock = 2.0 * options_.layers * static_cast<double>(blockBytes_);
  // Every slot full, and the block the caller keeps aside for rows that hold none.
  const double most = static_cast<double>(options_.slots) * blocksPerRow() + 1;
  const double blocks = std::min(most, std::floor(budget / perBlock));
  if (blocks < blocksPerRow()) {
    const auto gib = [](double bytes) {
      char text[32];
      std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1 << 30));
      return std::string(text);
    };
    char share[16];
    std::snprintf(share, sizeof share, "%g", options_.memoryUtilization);
    throw std::runtime_error("the GPU's memory leaves no room for the cache: gpu_memory_utilization " + std::string(share) + " allows " + gib(memory.total * options_.memoryUtilization) +
                             " of its " + gib(memory.total) + "; " + gib(used) + " went to the weights (" + gib(memory.free) + " are free) and " +
                             gib(options_.reserveBytes) + " are kept for activations, which leaves " + gib(std::max(budget, 0.0)) + ", and one sequence of " +
                             std::to_string(options_.maxLength) + " tokens needs " + gib(perBlock * blocksPerRow()));
  }
  options_.blocks = static_cast<int>(blocks);
}

void SlotDecoder::SetBlockTable(const std::vector<int32_t>& table) {
  if (Fans()) return OnRanks([&](SlotDecoder& d) { d.SetBlockTable(table); });
  if (!paged()) throw std::logic_error("setBlockTable is for a paged cache");
  if (table.size() != blockTable_.size()) throw std::invalid_argument("the block table holds slots x blocksPerRow = " + std::to_string(blockTable_.size()) + " ids, not " + std::to_string(table.size()));
  for (int32_t block : table) {
    if (block < 0 || block >= options_.blocks) throw std::out_of_range("block " + std::to_string(block) + " is outside 0.." + std::to_string(options_.blocks - 1));
  }
  blockTable_ = table;
  blockTableStale_ = true;
}

void SlotDecoder::StageBlockTable() {
  if (!paged() || !blockTableStale_) return;
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    CheckCuda(cudaMemcpyAsync(blockTableDevice_, blockTable_.data(), sizeof(int32_t) * blockTable_.size(), cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)),
          "cudaMemcpyAsync");
  }
#endif
  blockTableStale_ = false;
}

void SlotDecoder::CopyBlocks(const std::vector<int32_t>& src, const std::vector<int32_t>& dst) {
  if (Fans()) return OnRanks([&](SlotDecoder& d) { d.CopyBlocks(src, dst); });
  Timed timed(callMs_);
  UseDevice();
  if (!paged()) throw std::logic_error("copyBlocks is for a paged cache");
  if (src.size() != dst.size()) throw std::invalid_argument("copyBlocks takes as many destinations as sources");
  std::vector<bool> source(options_.blocks, false);
  for (size_t i = 0; i < src.size(); i++) {
    if (src[i] < 0 || src[i] >= options_.blocks || dst[i] < 0 || dst[i] >= options_.blocks) throw std::out_of_range("block outside 0.." + std::to_string(options_.blocks - 1));
    source[src[i]] = true;
  }
  for (int32_t d : dst) {
    if (source[d]) throw std::invalid_argument("copyBlocks' destination " + std::to_string(d) + " is also a source");
  }
  for (int l = 0; l < options_.layers; l++) {
    for (void* base : {keys_[l], values_[l]}) {
      for (size_t i = 0; i < src.size(); i++) {
        CopyStrided(static_cast<char*>(base) + dst[i] * blockBytes_, blockBytes_, static_cast<char*>(base) + src[i] * blockBytes_, blockBytes_, blockBytes_, 1);
      }
    }
  }
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) CheckCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
#endif
}

void* SlotDecoder::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    void* p = nullptr;
    CheckCuda(cudaMalloc(&p, bytes), "cudaMalloc (the cache of slots; lower the slots or their length)");
    CheckCuda(cudaMemset(p, 0, bytes), "cudaMemset");
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
#ifdef CHORUS_WITH_CUDA
  // Kernels queued on the stream may still read the old buffer.
  if (options_.cuda && buffer != nullptr) CheckCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
#endif
  Free(buffer);
  buffer = nullptr;
  capacity = 0;
  buffer = Allocate(grow);
  capacity = grow;
}

void SlotDecoder::CopyStrided(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width, size_t height) {
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    CheckCuda(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, height, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream_)), "cudaMemcpy2DAsync");
    return;
  }
#endif
  for (size_t h = 0; h < height; h++) std::memcpy(static_cast<char*>(dst) + h * dstPitch, static_cast<const char*>(src) + h * srcPitch, width);
}

void SlotDecoder::ToHost(void* dst, const void* src, size_t bytes) {
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    CheckCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_)), "cudaMemcpyAsync");
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

StepResult SlotDecoder::Prefill(int slot, const std::vector<int64_t>& ids, const std::vector<int32_t>& logitRows, const SampleBatch& sample, int prompts) {
  if (Fans()) return OnRanks([&](SlotDecoder& d) { return d.Prefill(slot, ids, logitRows, sample, prompts); });
  Timed timed(callMs_);
  UseDevice();
  if (seq2seq()) throw std::logic_error("an encoder-decoder starts a request with encode(), then decodes from its start token");
  if (prompts < 1 || slot < 0 || slot + prompts > options_.slots) {
    const std::string which = prompts == 1 ? "slot " + std::to_string(slot) + " is" : std::to_string(prompts) + " prompts from slot " + std::to_string(slot) + " are";
    throw std::out_of_range(which + " outside 0.." + std::to_string(options_.slots - 1));
  }
  if (ids.size() % prompts != 0) throw std::invalid_argument("prefill takes prompts of one length: " + std::to_string(ids.size()) + " ids are not " + std::to_string(prompts) + " rows");
  const int length = static_cast<int>(ids.size() / prompts);
  if (length == 0 || length > options_.maxLength) throw std::out_of_range("a prompt of " + std::to_string(length) + " tokens does not fit a slot of " + std::to_string(options_.maxLength));
  std::vector<int64_t> positions(ids.size());
  for (size_t i = 0; i < positions.size(); i++) positions[i] = static_cast<int64_t>(i % length);
  const std::vector<int32_t> seqlens(prompts, length - 1);
  // Every row's logits at its last position (last_index, where the model takes it).
  return Run(slot, prompts, length, ids, positions, seqlens, length, logitRows, sample, false, {}, {}, true, seqlens);
}

bool SlotDecoder::OneRunPrefill() const {
  // CHORUS_PREFILL_ONE_RUN=0: ragged prefills in two runs whatever the model (read once, to compare).
  static const bool wanted = [] {
    const char* value = std::getenv("CHORUS_PREFILL_ONE_RUN");
    return value == nullptr || std::string(value) != "0";
  }();
  return wanted && takesLastIndex_ && !paged() && !seq2seq();
}

StepResult SlotDecoder::PrefillRagged(int slot, const std::vector<std::vector<int64_t>>& prompts, const std::vector<int32_t>& logitRows, const SampleBatch& sample, int least) {
  if (Fans()) return OnRanks([&](SlotDecoder& d) { return d.PrefillRagged(slot, prompts, logitRows, sample, least); });
  Timed timed(callMs_);
  UseDevice();
  if (seq2seq()) throw std::logic_error("an encoder-decoder starts a request with encode(), then decodes from its start token");
  // A paged row holds the blocks of its own length only: the padding would be written past them.
  if (paged()) throw std::logic_error("a ragged prefill writes past each row's prompt: contiguous slots only");
  const int rows = static_cast<int>(prompts.size());
  if (rows < 1 || slot < 0 || slot + rows > options_.slots) {
    throw std::out_of_range(std::to_string(rows) + " prompts from slot " + std::to_string(slot) + " are outside 0.." + std::to_string(options_.slots - 1));
  }
  size_t longest = 0;
  for (const std::vector<int64_t>& prompt : prompts) {
    if (prompt.empty() || prompt.size() > static_cast<size_t>(options_.maxLength)) {
      throw std::out_of_range("a prompt of " + std::to_string(prompt.size()) + " tokens does not fit a slot of " + std::to_string(options_.maxLength));
    }
    longest = std::max(longest, prompt.size());
  }
  // Every row as long as the longest (one run) or the longest but one (two runs), or the least width
  // asked for: its prompt, then its last token again as padding, written past its prompt where its next
  // tokens overwrite it.
  const bool oneRun = OneRunPrefill();
  const int width = oneRun ? std::max(static_cast<int>(longest), std::min(least, options_.maxLength))
                           : std::max(static_cast<int>(longest) - 1, std::min(least, options_.maxLength - 1));
  if (oneRun) CheckStepRows(rows, logitRows, sample);
  if (width > 0) {
    std::vector<int64_t> ids;
    std::vector<int64_t> positions;
    ids.reserve(static_cast<size_t>(rows) * width);
    positions.reserve(ids.capacity());
    for (const std::vector<int64_t>& prompt : prompts) {
      for (int i = 0; i < width; i++) {
        ids.push_back(prompt[std::min<size_t>(i, prompt.size() - 1)]);
        positions.push_back(i);
      }
    }
    const std::vector<int32_t> seqlens(static_cast<size_t>(rows), width - 1);
    if (oneRun) {
      // Each row's logits at its own last token, in the run that writes its prompt.
      std::vector<int32_t> lastIndex;
      for (const std::vector<int64_t>& prompt : prompts) lastIndex.push_back(static_cast<int32_t>(prompt.size()) - 1);
#ifdef CHORUS_WITH_CUDA
      if (slot == 0 && options_.cuda && options_.cudaGraph) {
        auto stream = static_cast<cudaStream_t>(stream_);
        CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(events_[0][0]), stream), "cudaEventRecord");
        if (PrefillGraph(0, rows, width, ids.data(), positions.data(), seqlens.data(), lastIndex.data())) {
          CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(events_[0][1]), stream), "cudaEventRecord");
          return Collect(rows, logitRows, sample, true, {}, true);
        }
      }
#endif
      return Run(slot, rows, width, ids, positions, seqlens, width, logitRows, sample, false, {}, {}, true, lastIndex);
    }
    // From slot 0, a shape of few tokens runs as its captured graph: ONNX Runtime's launches, not the
    // GPU, are most of its time.
    if (slot != 0 || !PrefillGraph(0, rows, width, ids.data(), positions.data(), seqlens.data())) Run(slot, rows, width, ids, positions, seqlens, width, {}, SampleBatch{}, false);
  }
  std::vector<int64_t> last;
  std::vector<int64_t> at;
  std::vector<int32_t> seqlens;
  for (const std::vector<int64_t>& prompt : prompts) {
    last.push_back(prompt.back());
    at.push_back(static_cast<int64_t>(prompt.size()) - 1);
    seqlens.push_back(static_cast<int32_t>(prompt.size()) - 1);
  }
  // From slot 0 the last tokens' run is a decode step of `rows` rows, as the captured graph of that
  // batch size takes it (bound at slots 0 on): launched whole rather than op by op.
  const bool graph = options_.cuda && options_.cudaGraph && slot == 0;
  return Run(slot, rows, 1, last, at, seqlens, static_cast<int>(longest), logitRows, sample, graph);
}

void SlotDecoder::Encode(int firstSlot, const std::vector<int64_t>& ids, int width, const std::vector<int32_t>& lengths) {
  if (Fans()) return OnRanks([&](SlotDecoder& d) { d.Encode(firstSlot, ids, width, lengths); });
  Timed timed(callMs_);
  UseDevice();
  if (!seq2seq()) throw std::logic_error("encode() is for encoder-decoders");
  const int rows = static_cast<int>(lengths.size());
  if (rows == 0 || firstSlot < 0 || firstSlot + rows > options_.slots) throw std::out_of_range("encode takes rows for slots inside 0.." + std::to_string(options_.slots - 1));
  if (width < 1 || width > options_.sourceLength) throw std::out_of_range("a source of " + std::to_string(width) + " tokens does not fit a slot's " + std::to_string(options_.sourceLength));
  if (ids.size() != static_cast<size_t>(rows) * width) throw std::invalid_argument("encode takes rows x width ids");
  std::vector<int64_t> mask(ids.size());
  for (int r = 0; r < rows; r++) {
    if (lengths[r] < 1 || lengths[r] > width) throw std::out_of_range("row " + std::to_string(r) + "'s source length " + std::to_string(lengths[r]) + " is outside 1.." + std::to_string(width));
    for (int i = 0; i < width; i++) mask[static_cast<size_t>(r) * width + i] = i < lengths[r] ? 1 : 0;
  }
  const int64_t shape[2] = {rows, width};
  Ort::IoBinding io(*encoder_);
  Ort::Value idsValue = Ort::Value::CreateTensor<int64_t>(cpu_, const_cast<int64_t*>(ids.data()), ids.size(), shape, 2);
  Ort::Value maskValue = Ort::Value::CreateTensor<int64_t>(cpu_, mask.data(), mask.size(), shape, 2);
  io.BindInput("input_ids", idsValue);
  io.BindInput("attention_mask", maskValue);
  for (const std::string& name : encoderOutputNames_) io.BindOutput(name.c_str(), memory_);
  Ort::RunOptions runOptions;
  {
    Timed inSession(sessionMs_);
    encoder_->Run(runOptions, io);
    io.SynchronizeOutputs();
  }
  std::vector<Ort::Value> outputs = io.GetOutputValues();
  const size_t rowBytes = static_cast<size_t>(width) * options_.kvHeads * options_.headDim * elementBytes_;
  for (int l = 0; l < options_.layers; l++) {
    void* targets[2] = {crossKeys_[l], crossValues_[l]};
    for (int part = 0; part < 2; part++) {
      char* at = static_cast<char*>(targets[part]) + static_cast<size_t>(firstSlot) * crossSlotBytes_;
      CopyStrided(at, crossSlotBytes_, outputs[2 * l + part].GetTensorRawData(), rowBytes, rowBytes, rows);
    }
  }
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) CheckCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
#endif
}

void SlotDecoder::CheckRows(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, const std::vector<int32_t>& sourceLengths, int steps) const {
  const int rows = static_cast<int>(tokens.size());
  if (rows == 0 || rows > options_.slots || positions.size() != tokens.size()) throw std::out_of_range("decode takes 1.." + std::to_string(options_.slots) + " rows, a position for each");
  if (seq2seq()) {
    if (sourceLengths.size() != tokens.size()) throw std::invalid_argument("an encoder-decoder's decode takes each row's source length");
    for (int r = 0; r < rows; r++) {
      if (sourceLengths[r] < 1 || sourceLengths[r] > options_.sourceLength) throw std::out_of_range("row " + std::to_string(r) + "'s source length " + std::to_string(sourceLengths[r]) + " is outside 1.." + std::to_string(options_.sourceLength));
    }
  }
  for (int r = 0; r < rows; r++) {
    if (positions[r] < 0 || positions[r] + steps > options_.maxLength) {
      throw std::out_of_range("row " + std::to_string(r) + " at position " + std::to_string(positions[r]) + (steps > 1 ? " for " + std::to_string(steps) + " steps" : "") + " is past its slot's " + std::to_string(options_.maxLength));
    }
  }
}

StepResult SlotDecoder::Decode(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, const std::vector<int32_t>& logitRows,
                               const SampleBatch& sample, const std::vector<int32_t>& sourceLengths, const std::vector<int32_t>& banned) {
  if (Fans()) return OnRanks([&](SlotDecoder& d) { return d.Decode(tokens, positions, logitRows, sample, sourceLengths, banned); });
  Timed timed(callMs_);
  UseDevice();
  CheckRows(tokens, positions, sourceLengths, 1);
  if (!banned.empty() && banned.size() != tokens.size()) throw std::invalid_argument("decode takes a banned id (-1: none) for each row, or none");
  return Step(tokens, positions, logitRows, sample, sourceLengths, banned, true);
}

StepResult SlotDecoder::Step(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, const std::vector<int32_t>& logitRows,
                             const SampleBatch& sample, const std::vector<int32_t>& sourceLengths, const std::vector<int32_t>& banned, bool argmax) {
  std::vector<int32_t> seqlens(positions.begin(), positions.end());
  // With graphs, LaunchGraph sizes the step to the whole slot instead.
  const int total = *std::max_element(seqlens.begin(), seqlens.end()) + 1;
  return Run(0, static_cast<int>(tokens.size()), 1, tokens, positions, seqlens, total, logitRows, sample, options_.cuda && options_.cudaGraph, sourceLengths,
             banned, argmax);
}

GreedyRun SlotDecoder::DecodeGreedy(std::vector<int64_t> tokens, std::vector<int64_t> positions, const std::vector<int32_t>& remaining,
                                    const std::vector<int32_t>& endIds, int maxSteps, const std::vector<int32_t>& sourceLengths, const std::vector<int32_t>& minLeft,
                                    const StepIds& onStep) {
  if (Fans()) {
    return OnRanks([&](SlotDecoder& d) { return d.DecodeGreedy(tokens, positions, remaining, endIds, maxSteps, sourceLengths, minLeft, d.rank_ == 0 ? onStep : nullptr); });
  }
  const size_t rows = tokens.size();
  if (remaining.size() != rows) throw std::invalid_argument("decodeGreedy takes each row's remaining tokens");
  if (!minLeft.empty() && minLeft.size() != rows) throw std::invalid_argument("decodeGreedy takes each row's steps under min_length, or none");
  if (!minLeft.empty() && endIds.size() > 1) throw std::invalid_argument("decodeGreedy bans one end id under min_length, not " + std::to_string(endIds.size()));
  // The id the argmax passes over under min_length.
  const int endId = endIds.empty() ? -1 : endIds[0];
  if (maxSteps < 1) throw std::out_of_range("decodeGreedy takes at least one step");
  if (options_.cuda && options_.cudaGraph) {
    Timed timed(callMs_);
    UseDevice();
    CheckRows(tokens, positions, sourceLengths, maxSteps);
    return DecodeGreedyOnDevice(tokens, positions, remaining, endIds, maxSteps, sourceLengths, minLeft, onStep);
  }
  std::vector<int32_t> left(remaining);
  GreedyRun run;
  run.tokens.reserve(rows * static_cast<size_t>(maxSteps));
  const SampleBatch none;
  std::vector<int32_t> banned(minLeft.size());
  for (int step = 0; step < maxSteps; step++) {
    // The end id is banned for the first minLeft[r] steps of row r.
    for (size_t r = 0; r < minLeft.size(); r++) banned[r] = step < minLeft[r] ? endId : -1;
    StepResult result = Decode(tokens, positions, {}, none, sourceLengths, banned);
    run.tokens.insert(run.tokens.end(), result.argmax.begin(), result.argmax.end());
    if (onStep) onStep(run.steps, result.argmax.data(), static_cast<int>(rows));
    run.steps++;
    bool going = false;
    for (size_t r = 0; r < rows; r++) {
      // A row stops at an end id or its last token (left at 0 from then on).
      if (left[r] > 0) left[r] = IsEndId(endIds, result.argmax[r]) ? 0 : left[r] - 1;
      going = going || left[r] > 0;
      tokens[r] = result.argmax[r];
      positions[r]++;
    }
    if (!going || AgreedStop()) break;
  }
  return run;
}

BeamRun SlotDecoder::DecodeBeams(std::vector<int64_t> tokens, std::vector<int64_t> positions, std::vector<BeamGroup> groups, int maxSteps,
                                 const std::vector<int32_t>& sourceLengths, const StepBeams& onStep) {
  if (Fans()) return OnRanks([&](SlotDecoder& d) { return d.DecodeBeams(tokens, positions, groups, maxSteps, sourceLengths, d.rank_ == 0 ? onStep : nullptr); });
  Timed timed(callMs_);
  UseDevice();
  if (maxSteps < 1) throw std::out_of_range("decodeBeams takes at least one step");
  CheckRows(tokens, positions, sourceLengths, maxSteps);
  const int rows = static_cast<int>(tokens.size());
  if (groups.empty()) throw std::invalid_argument("decodeBeams takes at least one beam group");
  std::vector<bool> taken(rows, false);
  for (const BeamGroup& g : groups) {
    CheckBeamGroup(g, rows);
    for (int b = 0; b < g.width; b++) {
      const int r = g.firstRow + b;
      if (taken[r]) throw std::invalid_argument("beam groups overlap at row " + std::to_string(r));
      taken[r] = true;
      // A group's slots move between its beams with the group's one length.
      if (positions[r] != positions[g.firstRow]) throw std::invalid_argument("the beams of the group at row " + std::to_string(g.firstRow) + " are at different positions");
    }
    for (const int32_t endId : g.endIds) {
      if (endId < 0 || endId >= options_.vocab) throw std::out_of_range("beam group end id " + std::to_string(endId) + " is outside the vocabulary");
    }
  }
  BeamRun run;
  std::vector<int32_t> parents(rows);
  std::vector<int32_t> next(rows);
  for (int step = 0; step < maxSteps; step++) {
    SampleBatch sample;
    for (const BeamGroup& g : groups) {
      for (int b = 0; b < g.width; b++) {
        sample.rows.push_back(g.firstRow + b);
        sample.params.push_back(BeamSampleParams(g, b, sample.bans));
      }
    }
    // Each beam's continuations are all the step needs: no argmax.
    StepResult result = Step(tokens, positions, {}, sample, sourceLengths, {}, false);
    run.continuations.resize(run.continuations.size() + rows, SampleResult{});
    SampleResult* continuations = run.continuations.data() + static_cast<size_t>(step) * rows;
    for (size_t i = 0; i < sample.rows.size(); i++) continuations[sample.rows[i]] = result.sampled[i];
    for (int r = 0; r < rows; r++) {
      parents[r] = r;
      next[r] = static_cast<int32_t>(tokens[r]);
    }
    bool finished = false;
    size_t at = 0;
    for (BeamGroup& g : groups) {
      StepBeamGroup(g, result.sampled.data() + at, parents.data() + g.firstRow, next.data() + g.firstRow);
      for (int b = 0; b < g.width; b++) parents[g.firstRow + b] += g.firstRow;
      at += g.width;
      finished = finished || g.done;
    }
    // Beams that continue another take its slot (their length after this step), in one queued move.
    std::vector<int32_t> src, dst, lengths;
    for (int r = 0; r < rows; r++) {
      if (parents[r] == r) continue;
      src.push_back(parents[r]);
      dst.push_back(r);
      lengths.push_back(static_cast<int32_t>(positions[r] + 1));
    }
    if (!src.empty()) QueueCopies(src, dst, lengths, {});
    run.parents.insert(run.parents.end(), parents.begin(), parents.end());
    // Handed on while the next step runs (the moves are queued before it).
    if (onStep) onStep(run.steps, continuations, parents.data(), rows);
    run.steps++;
    for (int r = 0; r < rows; r++) {
      tokens[r] = next[r];
      positions[r]++;
    }
    if (finished || AgreedStop()) break;
  }
#ifdef CHORUS_WITH_CUDA
  // The last step's moves are done before its caller reads or steps the slots again.
  if (options_.cuda) CheckCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
#endif
  return run;
}

StepResult SlotDecoder::Run(int firstSlot, int rows, int sequence, const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                            const std::vector<int32_t>& seqlens, int total, const std::vector<int32_t>& logitRows, const SampleBatch& sample, bool graph,
                            const std::vector<int32_t>& sourceLengths, const std::vector<int32_t>& banned, bool argmax, const std::vector<int32_t>& lastIndex) {
  CheckStepRows(rows, logitRows, sample);
  StageBlockTable();
  if (graph) {
    StageInputs(ids, positions, seqlens, sourceLengths);
    LaunchGraph(rows, events_[0]);
  } else {
    const int32_t totalValue = total;
    const StepInputs inputs{ids.data(), positions.data(), seqlens.data(), sourceLengths.data(), &totalValue, false, lastIndex.empty() ? nullptr : lastIndex.data()};
    std::vector<Ort::Value> values;
    Ort::IoBinding io(*session_);
    BindStep(io, values, firstSlot, rows, sequence, inputs);
    Timed inSession(sessionMs_);
    session_->Run(Ort::RunOptions(), io);
    io.SynchronizeOutputs();
  }
  return Collect(rows, logitRows, sample, graph, banned, argmax);
}

void SlotDecoder::CheckStepRows(int rows, const std::vector<int32_t>& logitRows, const SampleBatch& sample) {
  for (int32_t r : logitRows) {
    if (r < 0 || r >= rows) throw std::out_of_range("logits of row " + std::to_string(r) + " asked of a step of " + std::to_string(rows));
  }
  for (int32_t r : sample.rows) {
    if (r < 0 || r >= rows) throw std::out_of_range("row " + std::to_string(r) + " sampled in a step of " + std::to_string(rows));
  }
}

StepResult SlotDecoder::Collect(int rows, const std::vector<int32_t>& logitRows, const SampleBatch& sample, bool timed, const std::vector<int32_t>& banned, bool argmax) {
  const size_t rowBytes = static_cast<size_t>(options_.vocab) * elementBytes_;
  StepResult result;
  result.argmax.resize(argmax ? rows : 0);
  result.logits.resize(logitRows.size() * options_.vocab);
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    auto stream = static_cast<cudaStream_t>(stream_);
    if (argmax) {
      if (!banned.empty()) CheckCuda(cudaMemcpyAsync(bannedDevice_, banned.data(), sizeof(int32_t) * rows, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
      ArgmaxRowsDevice(logits_, options_.floatType, rows, options_.vocab, argmaxDevice_, stream_, banned.empty() ? nullptr : bannedDevice_);
      CheckCuda(cudaGetLastError(), "argmax kernel");
    }
    // Every kernel is queued before the first copy to (pageable) host memory waits for them.
    Sample(sample, result);
    if (argmax) ToHost(result.argmax.data(), argmaxDevice_, sizeof(int32_t) * rows);
    if (!sample.rows.empty()) ToHost(result.sampled.data(), sampledDevice_, sizeof(SampleResult) * sample.rows.size());
    std::vector<char> staged(rowBytes * logitRows.size());
    for (size_t i = 0; i < logitRows.size(); i++) ToHost(staged.data() + i * rowBytes, static_cast<char*>(logits_) + logitRows[i] * rowBytes, rowBytes);
    CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (timed) AddGraphTime(events_[0]);
    WidenRowsHost(staged.data(), options_.floatType, options_.vocab, nullptr, static_cast<int>(logitRows.size()), result.logits.data());
    return result;
  }
#endif
  if (argmax) ArgmaxRowsHost(logits_, options_.floatType, rows, options_.vocab, result.argmax.data(), banned.empty() ? nullptr : banned.data());
  Sample(sample, result);
  WidenRowsHost(logits_, options_.floatType, options_.vocab, logitRows.data(), static_cast<int>(logitRows.size()), result.logits.data());
  return result;
}

void SlotDecoder::BindStep(Ort::IoBinding& io, std::vector<Ort::Value>& values, int firstSlot, int rows, int sequence, const StepInputs& inputs) {
  const ONNXTensorElementDataType floatType = ElementOf(options_.floatType);
  const int64_t idsShape[2] = {rows, sequence};
  const int64_t rowsShape[1] = {rows};
  values.reserve(values.size() + 7 + 4 * options_.layers + 1);
  const OrtMemoryInfo* where = inputs.onDevice ? static_cast<const OrtMemoryInfo*>(memory_) : static_cast<const OrtMemoryInfo*>(cpu_);
  auto bindInput = [&](const char* name, ONNXTensorElementDataType type, const void* data, size_t count, const int64_t* shape, size_t dims) {
    const size_t bytes = count * (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 ? sizeof(int64_t) : sizeof(int32_t));
    values.push_back(Ort::Value::CreateTensor(where, const_cast<void*>(data), bytes, shape, dims, type));
    io.BindInput(name, values.back());
  };
  const size_t tokens = static_cast<size_t>(rows) * sequence;
  bindInput("input_ids", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, inputs.ids, tokens, idsShape, 2);
  if (takesLastIndex_) {
    if (inputs.lastIndex != nullptr) {
      bindInput("last_index", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, inputs.lastIndex, rows, rowsShape, 1);
    } else {
      // The zeros where the session runs: one address for every captured step.
      values.push_back(Ort::Value::CreateTensor(memory_, lastIndexZeros_, sizeof(int32_t) * rows, rowsShape, 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32));
      io.BindInput("last_index", values.back());
    }
  }
  if (seq2seq()) {
    bindInput("lengths", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, inputs.seqlens, rows, rowsShape, 1);
    bindInput("encoder_lengths", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, inputs.sourceLengths, rows, rowsShape, 1);
  } else {
    bindInput("position_ids", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, inputs.positions, tokens, idsShape, 2);
    bindInput("seqlens_k", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, inputs.seqlens, rows, rowsShape, 1);
    if (paged()) {
      // The rows' block table where the session runs, and every layer's whole pool.
      const int64_t tableShape[2] = {rows, blocksPerRow()};
      int32_t* table = (options_.cuda ? blockTableDevice_ : blockTable_.data()) + static_cast<size_t>(firstSlot) * blocksPerRow();
      values.push_back(Ort::Value::CreateTensor(memory_, table, sizeof(int32_t) * rows * blocksPerRow(), tableShape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32));
      io.BindInput("block_table", values.back());
      const int64_t poolShape[4] = {options_.blocks, options_.kvHeads, options_.blockSize, options_.headDim};
      for (int l = 0; l < options_.layers; l++) {
        void* bases[2] = {keys_[l], values_[l]};
        for (int part = 0; part < 2; part++) {
          values.push_back(Ort::Value::CreateTensor(memory_, bases[part], blockBytes_ * options_.blocks, poolShape, 4, floatType));
          io.BindInput(pastNames_[2 * l + part].c_str(), values.back());
          io.BindOutput(presentNames_[2 * l + part].c_str(), values.back());
        }
      }
      const int64_t logitsShape[3] = {rows, 1, options_.vocab};
      values.push_back(Ort::Value::CreateTensor(memory_, logits_, static_cast<size_t>(options_.vocab) * elementBytes_ * rows, logitsShape, 3, floatType));
      io.BindOutput("logits", values.back());
      return;
    }
    values.push_back(Ort::Value::CreateTensor<int32_t>(cpu_, const_cast<int32_t*>(inputs.total), 1, nullptr, 0));
    io.BindInput("total_sequence_length", values.back());
  }
  const int64_t cacheShape[4] = {rows, options_.kvHeads, options_.maxLength, options_.headDim};
  const int64_t slotShape[3] = {rows, options_.maxLength, static_cast<int64_t>(options_.kvHeads) * options_.headDim};
  for (int l = 0; l < options_.layers; l++) {
    void* bases[2] = {keys_[l], values_[l]};
    for (int part = 0; part < 2; part++) {
      void* at = static_cast<char*>(bases[part]) + static_cast<size_t>(firstSlot) * slotBytes_;
      if (seq2seq()) {
        values.push_back(Ort::Value::CreateTensor(memory_, at, slotBytes_ * rows, slotShape, 3, floatType));
      } else {
        values.push_back(Ort::Value::CreateTensor(memory_, at, slotBytes_ * rows, cacheShape, 4, floatType));
      }
      io.BindInput(pastNames_[2 * l + part].c_str(), values.back());
      io.BindOutput(presentNames_[2 * l + part].c_str(), values.back());
    }
  }
  if (seq2seq()) {
    const int64_t crossShape[3] = {rows, options_.sourceLength, static_cast<int64_t>(options_.kvHeads) * options_.headDim};
    for (int l = 0; l < options_.layers; l++) {
      void* bases[2] = {crossKeys_[l], crossValues_[l]};
      for (int part = 0; part < 2; part++) {
        void* at = static_cast<char*>(bases[part]) + static_cast<size_t>(firstSlot) * crossSlotBytes_;
        values.push_back(Ort::Value::CreateTensor(memory_, at, crossSlotBytes_ * rows, crossShape, 3, floatType));
        io.BindInput(crossNames_[2 * l + part].c_str(), values.back());
      }
    }
  }
  const int64_t logitsShape[3] = {rows, 1, options_.vocab};
  const size_t rowBytes = static_cast<size_t>(options_.vocab) * elementBytes_;
  values.push_back(Ort::Value::CreateTensor(memory_, logits_, rowBytes * rows, logitsShape, 3, floatType));
  io.BindOutput("logits", values.back());
}

void SlotDecoder::UseDevice() {
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    CheckCuda(cudaSetDevice(options_.deviceId), "cudaSetDevice");
    // Each call runs on a worker thread of a pool that every engine shares: a CUDA error another call
    // left on it (ONNX Runtime reads it after each kernel) is not this call's.
    cudaGetLastError();
  }
#endif
}

#ifdef CHORUS_WITH_CUDA
void SlotDecoder::StageInputs(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions, const std::vector<int32_t>& seqlens,
                              const std::vector<int32_t>& sourceLengths) {
  auto stream = static_cast<cudaStream_t>(stream_);
  CheckCuda(cudaMemcpyAsync(idsDevice_, ids.data(), sizeof(int64_t) * ids.size(), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  CheckCuda(cudaMemcpyAsync(positionsDevice_, positions.data(), sizeof(int64_t) * positions.size(), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  CheckCuda(cudaMemcpyAsync(seqlensDevice_, seqlens.data(), sizeof(int32_t) * seqlens.size(), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  if (seq2seq()) {
    CheckCuda(cudaMemcpyAsync(sourceLengthsDevice_, sourceLengths.data(), sizeof(int32_t) * sourceLengths.size(), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  }
}

// The capture of a step failed: the stream out of capture mode, whatever it captured dropped, and the
// thread's last CUDA error cleared. ONNX Runtime checks cudaGetLastError after each of its kernels, so an
// error left behind would fail the next run of any session on this thread (a worker thread of the pool
// that every engine shares), not just this decoder's.
static void EndFailedCapture(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
  }
  cudaGetLastError();
  cudaStreamSynchronize(stream);
  cudaGetLastError();
}

void SlotDecoder::RunBoundStep(int rows) {
  const StepInputs inputs{idsDevice_, positionsDevice_, seqlensDevice_, sourceLengthsDevice_, nullptr, true, nullptr};
  RunBound(0, rows, 1, options_.maxLength, inputs);
}

std::string SlotDecoder::CaptureStep(int rows, void** exec) {
  const StepInputs inputs{idsDevice_, positionsDevice_, seqlensDevice_, sourceLengthsDevice_, nullptr, true, nullptr};
  return CaptureBound(0, rows, 1, options_.maxLength, inputs, exec);
}

void SlotDecoder::RunBound(int firstSlot, int rows, int sequence, int32_t total, const StepInputs& bound) {
  StepInputs inputs = bound;
  inputs.total = &total;
  std::vector<Ort::Value> values;
  Ort::IoBinding io(*session_);
  BindStep(io, values, firstSlot, rows, sequence, inputs);
  session_->Run(Ort::RunOptions(), io);
}

std::string SlotDecoder::CaptureBound(int firstSlot, int rows, int sequence, int32_t total, const StepInputs& bound, void** exec) {
  auto stream = static_cast<cudaStream_t>(stream_);
  StepInputs inputs = bound;
  inputs.total = &total;
  std::vector<Ort::Value> values;
  Ort::IoBinding io(*session_);
  BindStep(io, values, firstSlot, rows, sequence, inputs);
  Ort::RunOptions capture;
  capture.AddConfigEntry(kOrtRunOptionsConfigDisableSynchronizeExecutionProviders, "1");
  CheckCuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  cudaGraph_t graph = nullptr;
  std::string failure;
  try {
    session_->Run(capture, io);
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    if (ended != cudaSuccess) throw std::runtime_error(std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended));
    cudaGraphExec_t made = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&made, graph, 0);
    if (status != cudaSuccess) throw std::runtime_error(std::string("cudaGraphInstantiate: ") + cudaGetErrorString(status));
    *exec = made;
  } catch (const std::exception& e) {
    failure = e.what();
    if (failure.empty()) failure = "the capture failed";
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  return failure;
}

bool SlotDecoder::PrefillGraph(int firstSlot, int rows, int width, const int64_t* ids, const int64_t* positions, const int32_t* seqlens, const int32_t* lastIndex) {
  // CHORUS_PREFILL_GRAPHS=0: every prefill run op by op (read once, to compare).
  static const bool wanted = [] {
    const char* value = std::getenv("CHORUS_PREFILL_GRAPHS");
    return value == nullptr || std::string(value) != "0";
  }();
  // A model whose decode step could not be captured (graphFailure_) would not capture this either.
  if (!wanted || !options_.cuda || !options_.cudaGraph || group_ != nullptr || paged() || seq2seq() || !graphFailure_.empty() || !prefillGraphFailure_.empty()) return false;
  if (static_cast<long>(rows) * width > kPrefillGraphTokens || rows > options_.slots) return false;
  if (firstSlot < 0 || firstSlot + rows > options_.slots + options_.stagingSlots) throw std::out_of_range("a prefill of " + std::to_string(rows) + " rows from slot " + std::to_string(firstSlot) + " is past the cache");
  const auto key = std::make_tuple(firstSlot, rows, width);
  auto found = prefillGraphs_.find(key);
  if (found == prefillGraphs_.end() && prefillGraphs_.size() >= kMaxPrefillGraphs) return false;
  auto stream = static_cast<cudaStream_t>(stream_);
  // An error some other call left on this thread is not this run's.
  cudaGetLastError();
  if (prefillIdsDevice_ == nullptr) {
    prefillIdsDevice_ = static_cast<int64_t*>(Allocate(sizeof(int64_t) * kPrefillGraphTokens));
    prefillPositionsDevice_ = static_cast<int64_t*>(Allocate(sizeof(int64_t) * kPrefillGraphTokens));
    prefillSeqlensDevice_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * options_.slots));
    if (takesLastIndex_) prefillLastIndexDevice_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * options_.slots));
  }
  const size_t tokens = static_cast<size_t>(rows) * width;
  CheckCuda(cudaMemcpyAsync(prefillIdsDevice_, ids, sizeof(int64_t) * tokens, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  CheckCuda(cudaMemcpyAsync(prefillPositionsDevice_, positions, sizeof(int64_t) * tokens, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  CheckCuda(cudaMemcpyAsync(prefillSeqlensDevice_, seqlens, sizeof(int32_t) * rows, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  // Every prefill graph reads its rows' positions from the one buffer (zeros where none are given).
  if (takesLastIndex_ && lastIndex != nullptr) {
    CheckCuda(cudaMemcpyAsync(prefillLastIndexDevice_, lastIndex, sizeof(int32_t) * rows, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  } else if (takesLastIndex_) {
    CheckCuda(cudaMemsetAsync(prefillLastIndexDevice_, 0, sizeof(int32_t) * rows, stream), "cudaMemsetAsync");
  }
  const StepInputs inputs{prefillIdsDevice_, prefillPositionsDevice_, prefillSeqlensDevice_, nullptr, nullptr, true, prefillLastIndexDevice_};
  if (found == prefillGraphs_.end()) {
    // As a decode step's graph: a plain run first (it is the run; ONNX Runtime sizes its memory for the
    // shape), then the capture, whose graph later runs replay.
    RunBound(firstSlot, rows, width, width, inputs);
    void* exec = nullptr;
    const std::string failure = CaptureBound(firstSlot, rows, width, width, inputs, &exec);
    if (!failure.empty()) {
      EndFailedCapture(stream);
      prefillGraphFailure_ = failure.substr(0, failure.find('\n'));
      return true;
    }
    prefillGraphs_.emplace(key, exec);
    return true;
  }
  CheckCuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(found->second), stream), "cudaGraphLaunch");
  return true;
}

bool SlotDecoder::WarmJoin(int width) {
  if (options_.stagingSlots < 1 || width < 1) return false;
  UseDevice();
  bool ran = false;
  for (int rows = 1; rows <= options_.stagingSlots && rows * width <= kPrefillGraphTokens; rows *= 2) {
    const std::vector<int64_t> zeros(static_cast<size_t>(rows) * width, 0);
    std::vector<int64_t> positions(zeros.size());
    for (size_t i = 0; i < positions.size(); i++) positions[i] = static_cast<int64_t>(i % width);
    const std::vector<int32_t> seqlens(static_cast<size_t>(rows), width - 1);
    ran = PrefillGraph(options_.slots, rows, width, zeros.data(), positions.data(), seqlens.data()) || ran;
    // Its copies read the host's vectors: done before they go.
    CheckCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
  }
  return ran && prefillGraphFailure_.empty();
}

bool SlotDecoder::LaunchGraph(int rows, void* const* events, bool timed) {
  auto stream = static_cast<cudaStream_t>(stream_);
  // An error some other call left on this thread is not this step's.
  cudaGetLastError();
  if (!graphFailure_.empty()) {
    // Graphs are off for this decoder (a capture failed): the step runs as a session run bound at the
    // same device buffers.
    CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(events[0]), stream), "cudaEventRecord");
    RunBoundStep(rows);
    CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(events[1]), stream), "cudaEventRecord");
    return true;
  }
  if (group_ != nullptr) {
    // A captured step launches the collectives without asking the communicator: an aborted group's
    // would run on its destroyed communicators.
    const std::string aborted = group_->comm().aborted();
    if (!aborted.empty()) throw std::runtime_error(aborted);
  }
  if (group_ != nullptr && graphEpoch_ != group_->epoch()) {
    // The group was aborted and its communicator made anew since these graphs were captured.
    DropGraphs();
    graphEpoch_ = group_->epoch();
  }
  auto found = graphs_.find(rows);
  if (found == graphs_.end()) {
    // The step is bound at the graphs' device buffers, its attention sized to the whole slot (each
    // row's seqlens_k says how much counts). A plain run first sizes ONNX Runtime's memory for this
    // batch, so that the captured run allocates nothing; it is the step itself, and the graph
    // launched after it writes the same keys, values and logits again.
    CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(events[0]), stream), "cudaEventRecord");
    RunBoundStep(rows);
    void* exec = nullptr;
    std::string failure = CaptureStep(rows, &exec);
    if (!failure.empty() && LinearDependentLaunch()) {
      // A driver that cannot capture the Linear kernel's dependent launches: the capture is tried once
      // more with plain launches, which stay (in every decoder) where that one succeeds.
      EndFailedCapture(stream);
      SetLinearDependentLaunch(false);
      failure = CaptureStep(rows, &exec);
      if (!failure.empty()) SetLinearDependentLaunch(true);
    }
    if (!failure.empty()) {
      // Some operator of this model cannot be captured (one ONNX Runtime placed on the CPU waits on the
      // GPU, or a kernel synchronizes): the step the plain run made stands, and every later step runs
      // that way. The first line of the cause is kept for the engine's log.
      EndFailedCapture(stream);
      graphFailure_ = failure.substr(0, failure.find('\n'));
      CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(events[1]), stream), "cudaEventRecord");
      return true;
    }
    found = graphs_.emplace(rows, exec).first;
    if (group_ != nullptr) {
      // A rank of a group lets the plain run stand as the step, as where a capture fails: each rank
      // then runs the step's collectives once, whether its own capture succeeded or not.
      CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(events[1]), stream), "cudaEventRecord");
      return true;
    }
  }
  if (timed) CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(events[0]), stream), "cudaEventRecord");
  CheckCuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(found->second), stream), "cudaGraphLaunch");
  if (timed) CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(events[1]), stream), "cudaEventRecord");
  return timed;
}

void SlotDecoder::AddGraphTime(void* const* events) {
  float ms = 0;
  CheckCuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(events[0]), static_cast<cudaEvent_t>(events[1])), "cudaEventElapsedTime");
  sessionMs_ += ms;
}

void SlotDecoder::AddStepTime(RunTime& time, void* const* events, bool timed) {
  if (!timed) return;
  float ms = 0;
  CheckCuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(events[0]), static_cast<cudaEvent_t>(events[1])), "cudaEventElapsedTime");
  time.ms += ms;
  time.timed++;
}

void SlotDecoder::AddRunTime(const RunTime& time, int steps) {
  if (time.timed > 0) sessionMs_ += time.ms * steps / time.timed;
}

void* SlotDecoder::DeviceAddress(void* host) {
  void* device = nullptr;
  CheckCuda(cudaHostGetDevicePointer(&device, host, 0), "cudaHostGetDevicePointer");
  return device;
}

GreedyRun SlotDecoder::DecodeGreedyOnDevice(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions, const std::vector<int32_t>& remaining,
                                            const std::vector<int32_t>& endIds, int maxSteps, const std::vector<int32_t>& sourceLengths, const std::vector<int32_t>& minLeft,
                                            const StepIds& onStep) {
  const int rows = static_cast<int>(tokens.size());
  auto stream = static_cast<cudaStream_t>(stream_);
  std::vector<int32_t> seqlens(positions.begin(), positions.end());
  StageBlockTable();
  StageInputs(tokens, positions, seqlens, sourceLengths);
  GreedyAdvance advance;
  advance.tokens = idsDevice_;
  advance.positions = positionsDevice_;
  advance.lengths = seqlensDevice_;
  // Under min_length (DecodeGreedy checked there is at most one end id then).
  advance.endId = endIds.empty() ? -1 : endIds[0];
  if (!minLeft.empty()) {
    CheckCuda(cudaMemcpyAsync(minLeftDevice_, minLeft.data(), sizeof(int32_t) * rows, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    advance.minLeft = minLeftDevice_;
  }
  // Step k: the graph, the argmax writing step k + 1's inputs and the ids into slot k % 2 of the pinned
  // ids itself (a copy queued after it would hold the next step's graph back by several microseconds),
  // and an event. Step k + 1 is queued before the host waits for step k, unless no row can go on after
  // step k whatever its ids (then the run ends there).
  auto* hostIdsDevice = static_cast<int32_t*>(DeviceAddress(hostIds_));
  bool timed[2] = {};
  RunTime time;
  auto queue = [&](int step) {
    void* const* events = events_[step % 2];
    timed[step % 2] = LaunchGraph(rows, events, step % kTimedEvery == 0);
    GreedyAdvance stepAdvance = advance;
    stepAdvance.hostOut = hostIdsDevice + (step % 2) * options_.slots;
    ArgmaxAdvanceDevice(logits_, options_.floatType, rows, options_.vocab, argmaxDevice_, stepAdvance, stream_);
    CheckCuda(cudaGetLastError(), "argmax kernel");
    CheckCuda(cudaEventRecord(static_cast<cudaEvent_t>(events[2]), stream), "cudaEventRecord");
  };
  std::vector<int32_t> left(remaining);
  GreedyRun run;
  run.tokens.reserve(static_cast<size_t>(rows) * maxSteps);
  // Interrupted, the run reads the step already queued (a step like any other) and ends there.
  bool stopping = false;
  queue(0);
  for (int step = 0; step < maxSteps; step++) {
    const bool more = !stopping && step + 1 < maxSteps && std::any_of(left.begin(), left.end(), [](int32_t n) { return n > 1; });
    if (more) queue(step + 1);
    void* const* events = events_[step % 2];
    CheckCuda(cudaEventSynchronize(static_cast<cudaEvent_t>(events[2])), "cudaEventSynchronize");
    AddStepTime(time, events, timed[step % 2]);
    const int32_t* ids = hostIds_ + (step % 2) * options_.slots;
    run.tokens.insert(run.tokens.end(), ids, ids + rows);
    if (onStep) onStep(run.steps, ids, rows);
    run.steps++;
    bool going = false;
    for (int r = 0; r < rows; r++) {
      if (left[r] > 0) left[r] = IsEndId(endIds, ids[r]) ? 0 : left[r] - 1;
      going = going || left[r] > 0;
    }
    // A step queued after the rows' last runs on unread (the next call stages its inputs anew).
    if (!going || !more) break;
    if (AgreedStop()) stopping = true;
  }
  AddRunTime(time, run.steps);
  return run;
}
#else
void SlotDecoder::StageInputs(const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int32_t>&, const std::vector<int32_t>&) {}
bool SlotDecoder::LaunchGraph(int, void* const*, bool) { return false; }
bool SlotDecoder::PrefillGraph(int, int, int, const int64_t*, const int64_t*, const int32_t*, const int32_t*) { return false; }
bool SlotDecoder::WarmJoin(int) { return false; }
void SlotDecoder::RunBoundStep(int) {}
void SlotDecoder::AddGraphTime(void* const*) {}
GreedyRun SlotDecoder::DecodeGreedyOnDevice(const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int32_t>&, const std::vector<int32_t>&, int,
                                            const std::vector<int32_t>&, const std::vector<int32_t>&, const StepIds&) {
  throw std::logic_error("CUDA graphs need a build with CUDA");
}
#endif

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
    if (sampleMass_ == nullptr) sampleMass_ = static_cast<double*>(Allocate(sizeof(double) * options_.vocab * options_.slots));
    SampleRowsDevice(logits_, options_.floatType, options_.vocab, sample, sampleHostStaging_.data(), sampleStaging_, sampleWork_, sampleMass_,
                     sampledDevice_, stream_);
    CheckCuda(cudaGetLastError(), "sampling kernel");
    return;
  }
#endif
  SampleRowsHost(logits_, options_.floatType, options_.vocab, sample, sampleWork_, result.sampled.data());
}

void SlotDecoder::CopySlots(const std::vector<int32_t>& src, const std::vector<int32_t>& dst, const std::vector<int32_t>& lengths,
                            const std::vector<int32_t>& sourceLengths) {
  if (Fans()) return OnRanks([&](SlotDecoder& d) { d.CopySlots(src, dst, lengths, sourceLengths); });
  Timed timed(callMs_);
  UseDevice();
  QueueCopies(src, dst, lengths, sourceLengths);
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) CheckCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
#endif
}

void SlotDecoder::QueueCopies(const std::vector<int32_t>& src, const std::vector<int32_t>& dst, const std::vector<int32_t>& lengths,
                              const std::vector<int32_t>& sourceLengths, int32_t* pinned) {
  if (paged()) throw std::logic_error("a paged cache moves rows through its block table and copyBlocks, not copySlots");
  const size_t count = src.size();
  if (dst.size() != count || lengths.size() != count) throw std::invalid_argument("copySlots takes as many destinations and lengths as sources");
  if (!sourceLengths.empty() && (!seq2seq() || sourceLengths.size() != count)) throw std::invalid_argument("copySlots takes source lengths for an encoder-decoder, one per copy");
  if (count == 0) return;
  if (count > static_cast<size_t>(options_.slots)) throw std::invalid_argument("copySlots takes at most one copy per slot");
  for (size_t i = 0; i < count; i++) {
    // The staging slots (past the last) are the decoder's own: only its joins copy from them.
    const int sources = pinned != nullptr ? options_.slots + options_.stagingSlots : options_.slots;
    if (src[i] < 0 || src[i] >= sources || dst[i] < 0 || dst[i] >= options_.slots) throw std::out_of_range("slot outside 0.." + std::to_string(options_.slots - 1));
    if (lengths[i] < 0 || lengths[i] > options_.maxLength) throw std::out_of_range("a length outside 0.." + std::to_string(options_.maxLength));
    if (!sourceLengths.empty() && (sourceLengths[i] < 0 || sourceLengths[i] > options_.sourceLength)) throw std::out_of_range("a source length outside 0.." + std::to_string(options_.sourceLength));
  }
  const bool cross = std::any_of(sourceLengths.begin(), sourceLengths.end(), [](int32_t n) { return n > 0; });
  const size_t crossWidth = static_cast<size_t>(options_.kvHeads) * options_.headDim * elementBytes_;
  // The decoder's cache buffers, then as many of the cross-attention's (cacheBuffers_).
  const int buffers = 2 * options_.layers;
#ifdef CHORUS_WITH_CUDA
  if (options_.cuda) {
    // The index arrays go over once: sources, destinations, then for the decoder's cache and the
    // cross-attention cache each copy's length and where it starts in the scratch (in positions).
    if (copyIndex_ == nullptr) copyIndex_ = static_cast<int32_t*>(Allocate(sizeof(int32_t) * 6 * options_.slots));
    std::vector<int32_t> staged(6 * count, 0);
    size_t positions = 0;
    size_t crossPositions = 0;
    for (size_t i = 0; i < count; i++) {
      staged[i] = src[i];
      staged[count + i] = dst[i];
      staged[2 * count + i] = lengths[i];
      staged[3 * count + i] = static_cast<int32_t>(positions);
      positions += lengths[i];
      if (cross) {
        staged[4 * count + i] = sourceLengths[i];
        staged[5 * count + i] = static_cast<int32_t>(crossPositions);
        crossPositions += sourceLengths[i];
      }
    }
    const int32_t* from = staged.data();
    if (pinned != nullptr) from = std::copy(staged.begin(), staged.end(), pinned) - staged.size();
    CheckCuda(cudaMemcpyAsync(copyIndex_, from, sizeof(int32_t) * staged.size(), cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)), "cudaMemcpyAsync");
    MoveSlotsDevice(bufferTable_, buffers, slotBytes_, copyHeads_, copyPitch_, copyRowBytes_, static_cast<int>(count), 2, positions);
    if (cross) MoveSlotsDevice(bufferTable_ + buffers, buffers, crossSlotBytes_, 1, crossSlotBytes_, crossWidth, static_cast<int>(count), 4, crossPositions);
    CheckCuda(cudaGetLastError(), "slot copy kernel");
    return;
  }
#endif
  Reserve(scratch_, scratchBytes_, count * std::max(slotBytes_, cross ? crossSlotBytes_ : 0), count * std::max(slotBytes_, crossSlotBytes_));
  MoveSlots(cacheBuffers_.data(), buffers, slotBytes_, copyHeads_, copyPitch_, copyRowBytes_, src, dst, lengths);
  if (cross) MoveSlots(cacheBuffers_.data() + buffers, buffers, crossSlotBytes_, 1, crossSlotBytes_, crossWidth, src, dst, sourceLengths);
}

#ifdef CHORUS_WITH_CUDA
void SlotDecoder::MoveSlotsDevice(void* const* table, int buffers, size_t slotBytes, int heads, size_t pitch, size_t rowBytes, int count, int lengthsAt,
                                  size_t positions) {
  // Each buffer's copies side by side in the scratch: as many buffers per launch as kMoveScratchBytes holds.
  const size_t stride = positions * heads * rowBytes;
  if (stride == 0) return;
  constexpr size_t kMoveScratchBytes = size_t{256} << 20;
  const int per = static_cast<int>(std::max<size_t>(1, std::min<size_t>(buffers, kMoveScratchBytes / stride)));
  // Grown with room to spare: a beam run's moves grow by a position every step.
  Reserve(scratch_, scratchBytes_, per * stride, std::max(per * stride, std::min(2 * per * stride + (size_t{1} << 20), kMoveScratchBytes)));
  const int32_t* lengths = copyIndex_ + lengthsAt * count;
  const int32_t* starts = lengths + count;
  for (int b = 0; b < buffers; b += per) {
    const int n = std::min(per, buffers - b);
    MoveSlotsThroughDevice(table + b, n, scratch_, copyIndex_, lengths, starts, count, heads, slotBytes, pitch, rowBytes, stride, true, stream_);
    MoveSlotsThroughDevice(table + b, n, scratch_, copyIndex_ + count, lengths, starts, count, heads, slotBytes, pitch, rowBytes, stride, false, stream_);
  }
}
#else
void SlotDecoder::MoveSlotsDevice(void* const*, int, size_t, int, size_t, size_t, int, int, size_t) {}
#endif

void SlotDecoder::MoveSlots(void* const* buffers, int bufferCount, size_t slotBytes, int heads, size_t pitch, size_t rowBytes, const std::vector<int32_t>& src,
                            const std::vector<int32_t>& dst, const std::vector<int32_t>& lengths) {
  const size_t count = src.size();
  for (int b = 0; b < bufferCount; b++) {
    void* base = buffers[b];
    for (size_t i = 0; i < count; i++) {
      CopyStrided(static_cast<char*>(scratch_) + i * slotBytes, pitch, static_cast<char*>(base) + src[i] * slotBytes, pitch, lengths[i] * rowBytes, heads);
    }
    for (size_t i = 0; i < count; i++) {
      CopyStrided(static_cast<char*>(base) + dst[i] * slotBytes, pitch, static_cast<char*>(scratch_) + i * slotBytes, pitch, lengths[i] * rowBytes, heads);
    }
  }
}

}  // namespace chorus
