#include "slot-attention.h"

#include "custom-op.h"
#include "paged-attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus {

namespace {

void Put(void* p, FloatType type, size_t i, float value) { PutElement(p, type, i, value); }

// x[i] (+ bias[j]), rounded to the float type as an Add of the two would round it.
float Biased(const void* x, const void* bias, FloatType type, size_t i, size_t j) {
  const float value = ElementAt(x, type, i);
  if (bias == nullptr) return value;
  const float sum = value + ElementAt(bias, type, j);
  return RoundTo(sum, type);
}

}  // namespace

AttentionAttributes AttentionAttributesOf(const OrtKernelInfo* info) {
  Ort::ConstKernelInfo kernel(info);
  AttentionAttributes a;
  a.heads = static_cast<int>(kernel.GetAttribute<int64_t>("num_heads"));
  a.kvHeads = static_cast<int>(kernel.GetAttribute<int64_t>("kv_num_heads"));
  a.scale = kernel.GetAttribute<float>("scale");
  const int64_t window = AttributeOr<int64_t>(kernel, "sliding_window", 0);
  a.softcap = AttributeOr<float>(kernel, "softcap", 0.0f);
  if (a.heads <= 0 || a.kvHeads <= 0 || a.heads % a.kvHeads != 0) {
    throw std::invalid_argument("num_heads (" + std::to_string(a.heads) + ") must be a positive multiple of kv_num_heads (" + std::to_string(a.kvHeads) + ")");
  }
  if (window < 0 || window > INT32_MAX) throw std::invalid_argument("sliding_window must be an integer in [0, 2^31), got " + std::to_string(window));
  if (!(a.softcap >= 0) || std::isinf(a.softcap)) throw std::invalid_argument("softcap must be a finite number >= 0, got " + std::to_string(a.softcap));
  a.window = static_cast<int>(window);
  return a;
}

namespace {

// Multiply-adds of keys and values below which the queries run on the calling thread alone.
constexpr size_t kParallelProducts = size_t{1} << 18;

// Query `task` of the attention: row r, token s, head h at task (r * tokens + s) * heads + h.
void AttendQuery(void* data, size_t task) {
  const SlotAttentionArgs& a = *static_cast<const SlotAttentionArgs*>(data);
  thread_local std::vector<float> scores, sum, query;
  scores.resize(a.capacity);
  sum.resize(a.dim);
  query.resize(a.dim);
  const int h = static_cast<int>(task % a.heads);
  const size_t y = task / a.heads;
  const int r = static_cast<int>(y / a.tokens);
  const int s = static_cast<int>(y % a.tokens);
  const int group = a.heads / a.kvHeads;
  // float32 caches are read in place, in vector lanes, without a call per element.
  const float* keys32 = a.type == FloatType::kFloat32 ? static_cast<const float*>(a.cacheKey) : nullptr;
  const float* values32 = a.type == FloatType::kFloat32 ? static_cast<const float*>(a.cacheValue) : nullptr;
  const int past = a.lengths[r] + (a.causal ? a.lengthsOffset : 0);
  const size_t slot = static_cast<size_t>(r) * a.rowStride;
  const int position = past + s;
  const int n = a.causal ? position + 1 : past;
  const int first = a.causal ? FirstKey(position, a.window) : 0;
  const size_t q = y * a.queryStride + static_cast<size_t>(h) * a.dim;
  const size_t head = slot + static_cast<size_t>(h / group) * a.headStride;
  if (a.type == FloatType::kFloat32) {
    const float* from = static_cast<const float*>(a.query) + q;
    const float* bias = a.queryBias == nullptr ? nullptr : static_cast<const float*>(a.queryBias) + static_cast<size_t>(h) * a.dim;
    for (int d = 0; d < a.dim; d++) query[d] = bias == nullptr ? from[d] : from[d] + bias[d];
  } else {
    for (int d = 0; d < a.dim; d++) query[d] = Biased(a.query, a.queryBias, a.type, q + d, static_cast<size_t>(h) * a.dim + d);
  }
  float highest = -INFINITY;
  for (int j = first; j < n; j++) {
    const size_t k = head + j * a.positionStride;
    float dot = 0;
    if (keys32 != nullptr) {
      dot = DotHost(query.data(), keys32 + k, a.dim);
    } else {
      for (int d = 0; d < a.dim; d++) dot += query[d] * ElementAt(a.cacheKey, a.type, k + d);
    }
    float score = SoftCapped(dot * a.scale, a.softcap);
    if (a.bias != nullptr) score += a.bias[static_cast<size_t>(h) * a.biasSpan + std::min(position - j, a.biasSpan - 1)];
    scores[j] = score;
    highest = std::max(highest, score);
  }
  float total = 0;
  for (int j = first; j < n; j++) {
    scores[j] = std::exp(scores[j] - highest);
    total += scores[j];
  }
  if (values32 != nullptr) {
    WeightedSumHost(scores.data() + first, values32 + head + static_cast<size_t>(first) * a.positionStride, a.positionStride, n - first, a.dim, sum.data());
  } else {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int j = first; j < n; j++) {
      const size_t v = head + j * a.positionStride;
      for (int d = 0; d < a.dim; d++) sum[d] += scores[j] * ElementAt(a.cacheValue, a.type, v + d);
    }
  }
  const size_t out = (y * a.heads + h) * a.dim;
  if (a.type == FloatType::kFloat32) {
    for (int d = 0; d < a.dim; d++) static_cast<float*>(a.output)[out + d] = sum[d] / total;
  } else {
    for (int d = 0; d < a.dim; d++) Put(a.output, a.type, out + d, sum[d] / total);
  }
}

// A float32 key and value (head_dim elements at `from`, their biases at `bias`) into the caches at `to`.
void AppendFloat32(const SlotAttentionArgs& a, size_t from, size_t bias, size_t to) {
  const float* keyBias = static_cast<const float*>(a.keyBias);
  const float* valueBias = static_cast<const float*>(a.valueBias);
  const float* key = static_cast<const float*>(a.key) + from;
  const float* value = static_cast<const float*>(a.value) + from;
  float* keys = static_cast<float*>(a.cacheKey) + to;
  float* values = static_cast<float*>(a.cacheValue) + to;
  for (int d = 0; d < a.dim; d++) {
    keys[d] = keyBias == nullptr ? key[d] : key[d] + keyBias[bias + d];
    values[d] = valueBias == nullptr ? value[d] : value[d] + valueBias[bias + d];
  }
}

}  // namespace

void SlotAttentionHost(const SlotAttentionArgs& a, ParallelRunner parallel, void* context) {
  for (int r = 0; r < a.rows; r++) {
    const int past = a.lengths[r] + (a.causal ? a.lengthsOffset : 0);
    if (past < 0 || past + (a.causal ? a.tokens : 0) > a.capacity || (!a.causal && past == 0)) {
      throw std::out_of_range("row " + std::to_string(r) + " has " + std::to_string(past) + " keys before its " + std::to_string(a.causal ? a.tokens : 0) +
                              " new ones in a slot of " + std::to_string(a.capacity));
    }
    const size_t slot = static_cast<size_t>(r) * a.rowStride;
    for (int s = 0; s < a.tokens && a.key != nullptr; s++) {
      const size_t y = static_cast<size_t>(r) * a.tokens + s;
      for (int k = 0; k < a.kvHeads; k++) {
        const size_t to = slot + k * a.headStride + (past + s) * a.positionStride;
        if (a.type == FloatType::kFloat32) {
          AppendFloat32(a, y * a.newStride + static_cast<size_t>(k) * a.dim, static_cast<size_t>(k) * a.dim, to);
          continue;
        }
        for (int d = 0; d < a.dim; d++) {
          const size_t from = y * a.newStride + static_cast<size_t>(k) * a.dim + d;
          Put(a.cacheKey, a.type, to + d, Biased(a.key, a.keyBias, a.type, from, static_cast<size_t>(k) * a.dim + d));
          Put(a.cacheValue, a.type, to + d, Biased(a.value, a.valueBias, a.type, from, static_cast<size_t>(k) * a.dim + d));
        }
      }
    }
  }
  // Every new key is written before any query attends; then each query on its own (its sums in the
  // same order on any number of workers). Waking the workers takes tens of microseconds, longer than a
  // short context's queries take on one thread: below kParallelProducts they stay on this one.
  void* data = const_cast<SlotAttentionArgs*>(&a);
  const size_t queries = static_cast<size_t>(a.rows) * a.tokens * a.heads;
  size_t keys = 0;
  for (int r = 0; r < a.rows; r++) keys += static_cast<size_t>(std::min(a.lengths[r] + (a.causal ? a.lengthsOffset + a.tokens : 0), SlotScoreSpan(a)));
  const size_t products = keys * a.tokens * a.heads * a.dim;
  if (parallel == nullptr || products < kParallelProducts) {
    for (size_t i = 0; i < queries; i++) AttendQuery(data, i);
  } else {
    parallel(context, AttendQuery, queries, data);
  }
}

namespace {

// What both operators' kernels share: the cache written in place and the attention's launch.
template <class Kernel>
struct SlotKernelBase : KernelBase<Kernel> {
  using KernelBase<Kernel>::KernelBase;
  using KernelBase<Kernel>::cuda_;
  using KernelBase<Kernel>::type_;

  // Output `index`, the cache `past` after this run: bound to the past's buffer, it is written in
  // place; elsewhere, it starts as a copy.
  void* Present(Ort::KernelContext& ctx, size_t index, const Ort::ConstValue& past, const std::vector<int64_t>& shape) const {
    void* present = ctx.GetOutput(index, shape).GetTensorMutableRawData();
    const void* from = past.GetTensorRawData();
    if (present == from) return present;
    size_t bytes = ElementBytes(type_);
    for (int64_t d : shape) bytes *= static_cast<size_t>(d);
#ifdef CHORUS_WITH_CUDA
    if (cuda_) {
      cudaMemcpyAsync(present, from, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(ctx.GetGPUComputeStream()));
      return present;
    }
#endif
    std::memcpy(present, from, bytes);
    return present;
  }

  // Keys and values packed after the queries in one tensor (and their biases after the queries' bias,
  // when given): args.key, value, keyBias and valueBias from args.query and queryBias.
  void PointPacked(SlotAttentionArgs& args) const {
    const size_t elementBytes = ElementBytes(type_);
    const size_t keyAt = static_cast<size_t>(args.heads) * args.dim * elementBytes;
    const size_t valueAt = keyAt + static_cast<size_t>(args.kvHeads) * args.dim * elementBytes;
    const auto at = [](const void* base, size_t offset) { return base == nullptr ? nullptr : static_cast<const char*>(base) + offset; };
    args.key = at(args.query, keyAt);
    args.value = at(args.query, valueAt);
    args.keyBias = at(args.queryBias, keyAt);
    args.valueBias = at(args.queryBias, valueAt);
  }

  // The attention of `args` where the session runs (new keys written first when given).
  void Attend(Ort::KernelContext& ctx, SlotAttentionArgs args) const {
#ifdef CHORUS_WITH_CUDA
    if (cuda_) {
      if (SlotScoreSpan(args) > kSlotAttentionMaxCapacity) {
        throw std::invalid_argument("a slot of " + std::to_string(args.capacity) + " positions" + (args.window > 0 ? " (a window of " + std::to_string(args.window) + ")" : "") +
                                    "; a query attends over at most " + std::to_string(kSlotAttentionMaxCapacity));
      }
      void* stream = ctx.GetGPUComputeStream();
      if (args.key != nullptr && args.tokens > 1) {
        // Several new tokens a row: all are written before any attends.
        SlotAppendDevice(args, stream);
        args.key = args.value = args.keyBias = args.valueBias = nullptr;
      }
      SlotAttentionDevice(args, stream);
      const cudaError_t status = cudaGetLastError();
      if (status != cudaSuccess) throw std::runtime_error(std::string("kernel: ") + cudaGetErrorString(status));
      return;
    }
#endif
    SlotAttentionHost(args, RunParallel, ctx.GetOrtKernelContext());
  }

  static void RunParallel(void* context, void (*fn)(void*, size_t), size_t tasks, void* data) {
    Ort::KernelContext(static_cast<OrtKernelContext*>(context)).ParallelFor(fn, tasks, 0, data);
  }
};

struct SlotAttentionKernel : SlotKernelBase<SlotAttentionKernel> {
  static constexpr const char* kName = "SlotAttention";

  SlotAttentionKernel(const OrtKernelInfo* info, bool cuda, FloatType type) : SlotKernelBase(cuda, type) {
    Ort::ConstKernelInfo kernel(info);
    heads_ = static_cast<int>(kernel.GetAttribute<int64_t>("num_heads"));
    scale_ = kernel.GetAttribute<float>("scale");
    packed_ = AttributeOr<int64_t>(kernel, "qkv_packed", 0) != 0;
  }

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    const Ort::ConstValue query = ctx.GetInput(0);
    std::vector<int64_t> queryShape = ShapeOf(query);
    const int parts = packed_ ? 3 : 1;
    if (queryShape.size() != 3 || queryShape[1] != 1 || heads_ <= 0 || queryShape[2] % (parts * heads_) != 0) {
      throw std::invalid_argument(packed_ ? "query must be [rows, 1, 3 * num_heads * head_dim] (qkv_packed)" : "query must be [rows, 1, num_heads * head_dim]");
    }
    const size_t stride = static_cast<size_t>(queryShape[2]);
    queryShape[2] /= parts;
    const size_t width = static_cast<size_t>(queryShape[2]);
    const bool self = packed_ || Given(ctx, 1);
    if (packed_ && (Given(ctx, 1) || Given(ctx, 2))) throw std::invalid_argument("with qkv_packed, key and value come inside the query");
    if (!packed_ && Given(ctx, 1) != Given(ctx, 2)) throw std::invalid_argument("key and value come together");
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
    args.tokens = 1;
    args.heads = args.kvHeads = heads_;
    args.dim = static_cast<int>(width / heads_);
    args.capacity = static_cast<int>(cacheShape[1]);
    args.scale = scale_;
    args.type = type_;
    args.query = query.GetTensorRawData();
    args.queryStride = args.newStride = stride;
    args.positionStride = width;
    args.rowStride = static_cast<size_t>(args.capacity) * width;
    args.headStride = static_cast<size_t>(args.dim);
    args.lengths = lengths.GetTensorData<int32_t>();
    args.causal = self;
    if (Given(ctx, 6)) {
      const Ort::ConstValue bias = ctx.GetInput(6);
      const std::vector<int64_t> biasShape = ShapeOf(bias);
      if (biasShape.size() != 2 || biasShape[0] != heads_ || biasShape[1] < 1) throw std::invalid_argument("position_bias must be [num_heads, span]");
      args.bias = bias.GetTensorData<float>();
      args.biasSpan = static_cast<int>(biasShape[1]);
    }
    if (Given(ctx, 7)) {
      const Ort::ConstValue bias = ctx.GetInput(7);
      if (ShapeOf(bias) != std::vector<int64_t>{static_cast<int64_t>(stride)}) {
        throw std::invalid_argument(packed_ ? "qkv_bias must be [3 * num_heads * head_dim] (qkv_packed)" : "qkv_bias must be [num_heads * head_dim] (the query's)");
      }
      args.queryBias = bias.GetTensorRawData();
    }
    args.output = ctx.GetOutput(0, queryShape).GetTensorMutableRawData();
    if (self) {
      if (ctx.GetOutputCount() < 3) throw std::invalid_argument("self-attention writes present_key and present_value");
      if (packed_) {
        PointPacked(args);
      } else {
        const Ort::ConstValue key = ctx.GetInput(1);
        const Ort::ConstValue value = ctx.GetInput(2);
        if (ShapeOf(key) != queryShape || ShapeOf(value) != queryShape) throw std::invalid_argument("key and value must be shaped as the query");
        args.key = key.GetTensorRawData();
        args.value = value.GetTensorRawData();
        if (args.queryBias != nullptr) throw std::invalid_argument("qkv_bias applies to a packed qkv or a cross-attention's query");
      }
      args.cacheKey = Present(ctx, 1, pastKey, cacheShape);
      args.cacheValue = Present(ctx, 2, pastValue, cacheShape);
    } else {
      args.cacheKey = const_cast<void*>(pastKey.GetTensorRawData());
      args.cacheValue = const_cast<void*>(pastValue.GetTensorRawData());
    }
    Attend(ctx, args);
  }

  int heads_ = 0;
  float scale_ = 1;
  bool packed_ = false;
};

struct DecoderSlotAttentionKernel : SlotKernelBase<DecoderSlotAttentionKernel> {
  static constexpr const char* kName = "DecoderSlotAttention";

  DecoderSlotAttentionKernel(const OrtKernelInfo* info, bool cuda, FloatType type) : SlotKernelBase(cuda, type), attributes_(AttentionAttributesOf(info)) {}

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    const Ort::ConstValue qkv = ctx.GetInput(0);
    const std::vector<int64_t> qkvShape = ShapeOf(qkv);
    const int heads = attributes_.heads;
    const int kvHeads = attributes_.kvHeads;
    const int64_t packed = heads + 2 * kvHeads;
    if (qkvShape.size() != 3 || qkvShape[1] < 1 || qkvShape[2] % packed != 0) throw std::invalid_argument("qkv must be [rows, tokens, (num_heads + 2 * kv_num_heads) * head_dim]");
    const int64_t dim = qkvShape[2] / packed;
    const Ort::ConstValue pastKey = ctx.GetInput(1);
    const Ort::ConstValue pastValue = ctx.GetInput(2);
    const std::vector<int64_t> cacheShape = ShapeOf(pastKey);
    if (cacheShape.size() != 4 || cacheShape[0] != qkvShape[0] || cacheShape[1] != kvHeads || cacheShape[3] != dim || ShapeOf(pastValue) != cacheShape) {
      throw std::invalid_argument("past_key and past_value must be [rows, kv_num_heads, capacity, head_dim] of qkv's rows and head_dim");
    }
    const Ort::ConstValue seqlens = ctx.GetInput(3);
    if (ShapeOf(seqlens) != std::vector<int64_t>{qkvShape[0]}) throw std::invalid_argument("seqlens_k must be [rows]");
    SlotAttentionArgs args{};
    args.rows = static_cast<int>(qkvShape[0]);
    args.tokens = static_cast<int>(qkvShape[1]);
    args.heads = heads;
    args.kvHeads = kvHeads;
    args.dim = static_cast<int>(dim);
    args.capacity = static_cast<int>(cacheShape[2]);
    args.scale = attributes_.scale;
    args.window = attributes_.window;
    args.softcap = attributes_.softcap;
    args.type = type_;
    args.query = qkv.GetTensorRawData();
    args.queryStride = args.newStride = static_cast<size_t>(qkvShape[2]);
    if (Given(ctx, 4)) {
      const Ort::ConstValue bias = ctx.GetInput(4);
      if (ShapeOf(bias) != std::vector<int64_t>{qkvShape[2]}) throw std::invalid_argument("qkv_bias must be [(num_heads + 2 * kv_num_heads) * head_dim]");
      args.queryBias = bias.GetTensorRawData();
    }
    PointPacked(args);
    args.positionStride = static_cast<size_t>(dim);
    args.headStride = static_cast<size_t>(args.capacity) * dim;
    args.rowStride = static_cast<size_t>(kvHeads) * args.headStride;
    args.lengths = seqlens.GetTensorData<int32_t>();
    args.lengthsOffset = 1 - args.tokens;
    args.causal = true;
    args.output = ctx.GetOutput(0, {qkvShape[0], qkvShape[1], heads * dim}).GetTensorMutableRawData();
    args.cacheKey = Present(ctx, 1, pastKey, cacheShape);
    args.cacheValue = Present(ctx, 2, pastValue, cacheShape);
#ifdef CHORUS_WITH_CUDA
    if (cuda_ && SlotDecodeThroughPaged(args, paged_, ctx.GetGPUComputeStream())) return;
#endif
    Attend(ctx, args);
  }

#ifdef CHORUS_WITH_CUDA
  PagedWorkspace paged_;
#endif

  AttentionAttributes attributes_;
};

}  // namespace

#ifdef CHORUS_WITH_CUDA
bool SlotDecodeThroughPaged(const SlotAttentionArgs& a, PagedWorkspace& workspace, void* stream) {
  if (a.tokens != 1 || !a.causal || a.bias != nullptr) return false;
  PagedAttentionArgs p{};
  p.qkv = a.query;
  p.bias = a.queryBias;
  p.keyCache = a.cacheKey;
  p.valueCache = a.cacheValue;
  p.seqlens = a.lengths;
  p.maxBlocks = 1;
  p.blockSize = a.capacity;
  p.blocks = a.rows;
  p.output = a.output;
  p.rows = a.rows;
  p.tokens = 1;
  p.heads = a.heads;
  p.kvHeads = a.kvHeads;
  p.dim = a.dim;
  p.scale = a.scale;
  p.window = a.window;
  p.softcap = a.softcap;
  p.type = a.type;
  const int splits = workspace.Splits(p);
  if (!PagedDecodeKernelTakes(p, splits)) return false;
  workspace.Attend(p, splits, stream);
  return true;
}
#endif

OpList SlotAttentionOps(bool cuda, FloatType type) {
  const ONNXTensorElementDataType t = ElementOf(type);
  const ONNXTensorElementDataType i32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
  return {
      // SlotAttention: query, key, value, past_key, past_value, lengths, position_bias, qkv_bias.
      MakeOp<SlotAttentionKernel>(cuda, type, {t, t, t, t, t, i32, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, t}, {1, 2, 6, 7}, 3),
      // DecoderSlotAttention: qkv, past_key, past_value, seqlens_k, qkv_bias.
      MakeOp<DecoderSlotAttentionKernel>(cuda, type, {t, t, t, i32, t}, {4}, 3),
  };
}

}  // namespace chorus
