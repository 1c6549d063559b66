// The test entry point of the decoder attention kernels: attendRows(call, device) runs
// DecoderSlotAttention's (call.op 'slot') or PagedAttention's ('paged') kernels on the call's arrays,
// on the host, or on the GPU with device true (the kernels the engine runs), without a session.
#include "attention-rows.h"

#include <string>
#include <vector>

#include "kernels.h"
#include "paged-attention.h"
#include "slot-attention.h"

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus {
namespace {

int Field(const Napi::Object& call, const char* name, int fallback, bool required) {
  const Napi::Value value = call.Get(name);
  if (value.IsUndefined() && !required) return fallback;
  if (!value.IsNumber()) throw Napi::TypeError::New(call.Env(), std::string("call.") + name + " must be a number");
  return value.As<Napi::Number>().Int32Value();
}

float FloatField(const Napi::Object& call, const char* name, float fallback) {
  const Napi::Value value = call.Get(name);
  if (value.IsUndefined()) return fallback;
  if (!value.IsNumber()) throw Napi::TypeError::New(call.Env(), std::string("call.") + name + " must be a number");
  return value.As<Napi::Number>().FloatValue();
}

// An array of the call: its bytes where JavaScript keeps them, and (device) a copy on the GPU.
struct Buffer {
  void* host = nullptr;
  size_t bytes = 0;
  void* device = nullptr;
  void* at(bool onDevice) const { return onDevice ? device : host; }
};

// call[name]: a Float32Array (fp32) or a Uint16Array of fp16 / bf16 bits (`floats`), or an Int32Array,
// of `count` elements; absent (optional): an empty Buffer.
Buffer ArrayField(const Napi::Object& call, const char* name, FloatType type, bool floats, size_t count, bool optional) {
  const Napi::Env env = call.Env();
  const Napi::Value value = call.Get(name);
  if (value.IsUndefined() && optional) return Buffer{};
  const napi_typedarray_type want = !floats ? napi_int32_array : type == FloatType::kFloat32 ? napi_float32_array : napi_uint16_array;
  const char* what = !floats ? "an Int32Array" : type == FloatType::kFloat32 ? "a Float32Array (fp32)" : "a Uint16Array of 16-bit float bits";
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != want) throw Napi::TypeError::New(env, std::string("call.") + name + " must be " + what);
  auto array = value.As<Napi::TypedArray>();
  if (array.ElementLength() != count) {
    throw Napi::RangeError::New(env, std::string("call.") + name + " must hold " + std::to_string(count) + " elements, got " + std::to_string(array.ElementLength()));
  }
  return Buffer{static_cast<char*>(array.ArrayBuffer().Data()) + array.ByteOffset(), array.ByteLength(), nullptr};
}

#ifdef CHORUS_WITH_CUDA
void Check(Napi::Env env, cudaError_t status) {
  if (status != cudaSuccess) throw Napi::Error::New(env, std::string("CUDA: ") + cudaGetErrorString(status));
}

// Copies of every buffer on the GPU for the life of the call, and the written ones back.
struct OnDevice {
  Napi::Env env;
  std::vector<Buffer*> buffers;
  // PagedAttention's workspace, as the operator keeps it.
  PagedWorkspace paged;
  ~OnDevice() {
    for (Buffer* b : buffers) cudaFree(b->device);
  }
  void Up(Buffer& b) {
    if (b.host == nullptr) return;
    buffers.push_back(&b);
    Check(env, cudaMalloc(&b.device, b.bytes));
    Check(env, cudaMemcpy(b.device, b.host, b.bytes, cudaMemcpyHostToDevice));
  }
  void Down(const Buffer& b) const { Check(env, cudaMemcpy(b.host, b.device, b.bytes, cudaMemcpyDeviceToHost)); }
};
#endif

}  // namespace

Napi::Value AttendRows(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (!info[0].IsObject()) throw Napi::TypeError::New(env, "attendRows takes a call object");
  const Napi::Object call = info[0].As<Napi::Object>();
  const bool device = info[1].ToBoolean();
  const std::string op = call.Get("op").ToString().Utf8Value();
  const std::string dtype = call.Get("dtype").IsUndefined() ? "fp32" : call.Get("dtype").ToString().Utf8Value();
  if (op != "slot" && op != "paged") throw Napi::TypeError::New(env, "call.op must be 'slot' or 'paged', got '" + op + "'");
  if (dtype != "fp32" && dtype != "fp16" && dtype != "bf16") throw Napi::TypeError::New(env, "call.dtype must be fp32, fp16 or bf16, got '" + dtype + "'");
  const FloatType type = dtype == "fp16" ? FloatType::kFloat16 : dtype == "bf16" ? FloatType::kBFloat16 : FloatType::kFloat32;
  const int rows = Field(call, "rows", 0, true);
  const int tokens = Field(call, "tokens", 0, true);
  const int heads = Field(call, "heads", 0, true);
  const int kvHeads = Field(call, "kvHeads", 0, true);
  const int dim = Field(call, "dim", 0, true);
  const int window = Field(call, "slidingWindow", 0, false);
  const float scale = FloatField(call, "scale", 1.0f);
  const float softcap = FloatField(call, "softcap", 0.0f);
  if (rows < 1 || tokens < 1 || dim < 1 || kvHeads < 1 || heads < 1 || heads % kvHeads != 0 || window < 0 || softcap < 0) {
    throw Napi::RangeError::New(env, "call needs rows, tokens, dim, kvHeads >= 1, heads a multiple of kvHeads, slidingWindow and softcap >= 0");
  }
  const bool paged = op == "paged";
  const size_t width = static_cast<size_t>(heads + 2 * kvHeads) * dim;
  // slot: caches [rows, kvHeads, capacity, dim]; paged: [blocks, kvHeads, blockSize, dim].
  const int capacity = paged ? 0 : Field(call, "capacity", 0, true);
  const int blockSize = paged ? Field(call, "blockSize", 0, true) : 0;
  const int blocks = paged ? Field(call, "blocks", 0, true) : 0;
  const int maxBlocks = paged ? Field(call, "maxBlocks", 0, true) : 0;
  const int rotaryPositions = paged ? Field(call, "rotaryPositions", 0, false) : 0;
  const size_t cacheElements = static_cast<size_t>(paged ? blocks : rows) * kvHeads * (paged ? blockSize : capacity) * dim;
  Buffer qkv = ArrayField(call, "qkv", type, true, static_cast<size_t>(rows) * tokens * width, false);
  Buffer bias = ArrayField(call, "bias", type, true, width, true);
  Buffer key = ArrayField(call, "key", type, true, cacheElements, false);
  Buffer value = ArrayField(call, "value", type, true, cacheElements, false);
  Buffer seqlens = ArrayField(call, "seqlens", type, false, rows, false);
  // paged without a table: row r's one block is block r (a cache of slots, maxBlocks 1).
  const bool tabled = paged && call.Has("blockTable") && !call.Get("blockTable").IsUndefined();
  if (paged && !tabled && (maxBlocks != 1 || blocks < rows)) throw Napi::RangeError::New(env, "call without blockTable needs maxBlocks 1 and a block for each row");
  Buffer table = ArrayField(call, "blockTable", type, false, static_cast<size_t>(rows) * maxBlocks, !tabled);
  Buffer qNorm = ArrayField(call, "qNorm", type, true, static_cast<size_t>(dim), true);
  Buffer kNorm = ArrayField(call, "kNorm", type, true, static_cast<size_t>(dim), true);
  if (!paged && (qNorm.bytes != 0 || kNorm.bytes != 0)) throw Napi::RangeError::New(env, "call.qNorm and call.kNorm are PagedAttention's");
  if ((qNorm.bytes == 0) != (kNorm.bytes == 0)) throw Napi::RangeError::New(env, "call.qNorm and call.kNorm come together");
  const float epsilon = FloatField(call, "epsilon", 1e-6f);
  Buffer cos = ArrayField(call, "cos", type, true, static_cast<size_t>(rotaryPositions) * (dim / 2), !paged || rotaryPositions == 0);
  Buffer sin = ArrayField(call, "sin", type, true, static_cast<size_t>(rotaryPositions) * (dim / 2), !paged || rotaryPositions == 0);
  const size_t outputElements = static_cast<size_t>(rows) * tokens * heads * dim;
  Napi::TypedArray outputArray = type == FloatType::kFloat32 ? Napi::TypedArray(Napi::Float32Array::New(env, outputElements)) : Napi::TypedArray(Napi::Uint16Array::New(env, outputElements));
  Buffer output{static_cast<char*>(outputArray.ArrayBuffer().Data()) + outputArray.ByteOffset(), outputArray.ByteLength(), nullptr};
#ifdef CHORUS_WITH_CUDA
  OnDevice gpu{env, {}};
  if (device) {
    for (Buffer* b : {&qkv, &bias, &key, &value, &seqlens, &table, &cos, &sin, &qNorm, &kNorm, &output}) gpu.Up(*b);
  }
#else
  if (device) throw Napi::Error::New(env, "this build of the native engine has no CUDA");
#endif
  // What both operators' arguments take alike: the shape, scale, window, softcap and float type.
  const auto shapeOf = [&](auto& a) {
    a.rows = rows;
    a.tokens = tokens;
    a.heads = heads;
    a.kvHeads = kvHeads;
    a.dim = dim;
    a.scale = scale;
    a.window = window;
    a.softcap = softcap;
    a.type = type;
  };
  try {
    if (paged) {
      PagedAttentionArgs a{};
      a.qkv = qkv.at(device);
      a.bias = bias.at(device);
      a.cos = cos.at(device);
      a.sin = sin.at(device);
      a.rotaryPositions = rotaryPositions;
      a.keyCache = key.at(device);
      a.valueCache = value.at(device);
      a.seqlens = static_cast<const int32_t*>(seqlens.at(device));
      a.blockTable = tabled ? static_cast<const int32_t*>(table.at(device)) : nullptr;
      a.qNorm = qNorm.at(device);
      a.kNorm = kNorm.at(device);
      a.epsilon = epsilon;
      a.maxBlocks = maxBlocks;
      a.blockSize = blockSize;
      a.blocks = blocks;
      a.output = output.at(device);
      shapeOf(a);
      if (!device) {
        PagedAttentionHost(a);
      } else {
#ifdef CHORUS_WITH_CUDA
        // call.splits: the splits of the positions (default: the engine's choice for this GPU).
        const int splits = Field(call, "splits", gpu.paged.Splits(a), false);
        if (splits < 1) throw Napi::RangeError::New(env, "call.splits must be >= 1");
        gpu.paged.Attend(a, splits, nullptr);
#endif
      }
    } else {
      SlotAttentionArgs a{};
      a.query = qkv.at(device);
      a.queryStride = a.newStride = width;
      a.queryBias = bias.at(device);
      a.positionStride = dim;
      a.headStride = static_cast<size_t>(capacity) * dim;
      a.rowStride = static_cast<size_t>(kvHeads) * a.headStride;
      a.cacheKey = key.at(device);
      a.cacheValue = value.at(device);
      a.lengths = static_cast<const int32_t*>(seqlens.at(device));
      a.lengthsOffset = 1 - tokens;
      a.causal = true;
      a.output = output.at(device);
      shapeOf(a);
      a.capacity = capacity;
      // The new keys and values sit after the queries (and their biases after the queries').
      const size_t keyAt = static_cast<size_t>(heads) * dim * ElementBytes(type);
      const size_t valueAt = keyAt + static_cast<size_t>(kvHeads) * dim * ElementBytes(type);
      const auto after = [](const void* base, size_t offset) { return base == nullptr ? nullptr : static_cast<const char*>(base) + offset; };
      a.key = after(a.query, keyAt);
      a.value = after(a.query, valueAt);
      a.keyBias = after(a.queryBias, keyAt);
      a.valueBias = after(a.queryBias, valueAt);
      if (!device) {
        SlotAttentionHost(a);
      } else {
#ifdef CHORUS_WITH_CUDA
        if (SlotScoreSpan(a) > kSlotAttentionMaxCapacity) throw Napi::RangeError::New(env, "a query attends over at most " + std::to_string(kSlotAttentionMaxCapacity) + " keys on CUDA");
        // A decode step as DecoderSlotAttention takes it: through PagedAttention's decode kernel where
        // that takes it.
        if (!SlotDecodeThroughPaged(a, gpu.paged, nullptr)) {
          if (tokens > 1) {
            SlotAppendDevice(a, nullptr);
            a.key = a.value = a.keyBias = a.valueBias = nullptr;
          }
          SlotAttentionDevice(a, nullptr);
        }
#endif
      }
    }
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
#ifdef CHORUS_WITH_CUDA
  if (device) {
    Check(env, cudaGetLastError());
    Check(env, cudaDeviceSynchronize());
    for (const Buffer* b : {&key, &value, &output}) gpu.Down(*b);
  }
#endif
  return outputArray;
}

}  // namespace chorus
