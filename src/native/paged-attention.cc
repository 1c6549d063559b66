#include "paged-attention.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda-check.h"
#include "custom-op.h"
#include "slot-attention.h"

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus {

namespace {

// Row r's position of token s, checked against its blocks.
int PositionOf(const PagedAttentionArgs& a, int r, int s) {
  const int position = a.seqlens[r] + 1 - a.tokens + s;
  if (position < 0 || position >= a.maxBlocks * a.blockSize) {
    throw std::out_of_range("row " + std::to_string(r) + " at position " + std::to_string(position) + " is outside its " + std::to_string(a.maxBlocks) + " blocks of " +
                            std::to_string(a.blockSize));
  }
  if (a.cos != nullptr && position >= a.rotaryPositions) {
    throw std::out_of_range("row " + std::to_string(r) + " at position " + std::to_string(position) + " is past the rotary caches' " + std::to_string(a.rotaryPositions));
  }
  return position;
}

// Where position j of row r's key head k starts in a cache.
size_t CacheAt(const PagedAttentionArgs& a, int r, int k, int j) {
  const int block = a.blockTable == nullptr ? r : a.blockTable[static_cast<size_t>(r) * a.maxBlocks + j / a.blockSize];
  if (block < 0 || block >= a.blocks) throw std::out_of_range("row " + std::to_string(r) + "'s block " + std::to_string(block) + " is outside 0.." + std::to_string(a.blocks - 1));
  return ((static_cast<size_t>(block) * a.kvHeads + k) * a.blockSize + j % a.blockSize) * a.dim;
}

// Head `head` of token row y's packed qkv (heads counted over q, k and v), biased, normed (q and k
// heads, with norms) and rotated at `position` when rotate, each step rounded to the float type.
void HeadOf(const PagedAttentionArgs& a, size_t y, int head, int position, bool rotate, float* out) {
  const size_t width = static_cast<size_t>(a.heads + 2 * a.kvHeads) * a.dim;
  const size_t at = y * width + static_cast<size_t>(head) * a.dim;
  float squares = 0;
  for (int d = 0; d < a.dim; d++) {
    float x = ElementAt(a.qkv, a.type, at + d);
    if (a.bias != nullptr) x = RoundTo(x + ElementAt(a.bias, a.type, static_cast<size_t>(head) * a.dim + d), a.type);
    out[d] = x;
    squares += x * x;
  }
  if (a.qNorm != nullptr && head < a.heads + a.kvHeads) {
    const void* norm = head < a.heads ? a.qNorm : a.kNorm;
    const float inverse = 1.0f / std::sqrt(squares / a.dim + a.epsilon);
    for (int d = 0; d < a.dim; d++) out[d] = RoundTo(out[d] * inverse * ElementAt(norm, a.type, d), a.type);
  }
  if (!rotate || a.cos == nullptr) return;
  const int half = a.dim / 2;
  std::vector<float> x(out, out + a.dim);
  for (int d = 0; d < a.dim; d++) {
    const int i = d % half;
    const size_t table = static_cast<size_t>(position) * half + i;
    const float c = ElementAt(a.cos, a.type, table);
    const float s = ElementAt(a.sin, a.type, table);
    out[d] = RoundTo(d < half ? x[d] * c - x[d + half] * s : x[d] * c + x[d - half] * s, a.type);
  }
}

}  // namespace

void PagedAttentionHost(const PagedAttentionArgs& a) {
  const int group = a.heads / a.kvHeads;
  std::vector<float> head(a.dim);
  std::vector<float> sum(a.dim);
  std::vector<float> scores;
  // Every new key and value first: a row's tokens attend over each other's.
  for (int r = 0; r < a.rows; r++) {
    for (int s = 0; s < a.tokens; s++) {
      const size_t y = static_cast<size_t>(r) * a.tokens + s;
      const int position = PositionOf(a, r, s);
      for (int k = 0; k < a.kvHeads; k++) {
        const size_t to = CacheAt(a, r, k, position);
        HeadOf(a, y, a.heads + k, position, true, head.data());
        for (int d = 0; d < a.dim; d++) PutElement(a.keyCache, a.type, to + d, head[d]);
        HeadOf(a, y, a.heads + a.kvHeads + k, position, false, head.data());
        for (int d = 0; d < a.dim; d++) PutElement(a.valueCache, a.type, to + d, head[d]);
      }
    }
  }
  for (int r = 0; r < a.rows; r++) {
    for (int s = 0; s < a.tokens; s++) {
      const size_t y = static_cast<size_t>(r) * a.tokens + s;
      const int position = PositionOf(a, r, s);
      const int n = position + 1;
      const int first = FirstKey(position, a.window);
      scores.resize(n);
      for (int h = 0; h < a.heads; h++) {
        const int k = h / group;
        HeadOf(a, y, h, position, true, head.data());
        float highest = -INFINITY;
        for (int j = first; j < n; j++) {
          const size_t at = CacheAt(a, r, k, j);
          float dot = 0;
          for (int d = 0; d < a.dim; d++) dot += head[d] * ElementAt(a.keyCache, a.type, at + d);
          scores[j] = SoftCapped(dot * a.scale, a.softcap);
          highest = std::max(highest, scores[j]);
        }
        float total = 0;
        std::fill(sum.begin(), sum.end(), 0.0f);
        for (int j = first; j < n; j++) {
          const float p = std::exp(scores[j] - highest);
          total += p;
          const size_t at = CacheAt(a, r, k, j);
          for (int d = 0; d < a.dim; d++) sum[d] += p * ElementAt(a.valueCache, a.type, at + d);
        }
        const size_t out = (y * a.heads + h) * a.dim;
        for (int d = 0; d < a.dim; d++) PutElement(a.output, a.type, out + d, sum[d] / total);
      }
    }
  }
}

namespace {

struct PagedAttentionKernel : KernelBase<PagedAttentionKernel> {
  static constexpr const char* kName = "PagedAttention";

  PagedAttentionKernel(const OrtKernelInfo* info, bool cuda, FloatType type) : KernelBase(cuda, type), attributes_(AttentionAttributesOf(info)) {
    epsilon_ = AttributeOr<float>(Ort::ConstKernelInfo(info), "epsilon", 1e-6f);
    if (!(epsilon_ >= 0) || std::isinf(epsilon_)) throw std::invalid_argument("epsilon must be a finite number >= 0, got " + std::to_string(epsilon_));
  }

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    const Ort::ConstValue qkv = ctx.GetInput(0);
    const std::vector<int64_t> qkvShape = ShapeOf(qkv);
    const int heads = attributes_.heads;
    const int kvHeads = attributes_.kvHeads;
    const int64_t packed = heads + 2 * kvHeads;
    if (qkvShape.size() != 3 || qkvShape[1] < 1 || qkvShape[2] % packed != 0) throw std::invalid_argument("qkv must be [rows, tokens, (num_heads + 2 * kv_num_heads) * head_dim]");
    const int64_t dim = qkvShape[2] / packed;
    const Ort::ConstValue keyCache = ctx.GetInput(1);
    const Ort::ConstValue valueCache = ctx.GetInput(2);
    const std::vector<int64_t> cacheShape = ShapeOf(keyCache);
    if (cacheShape.size() != 4 || cacheShape[1] != kvHeads || cacheShape[3] != dim || cacheShape[2] < 1 || ShapeOf(valueCache) != cacheShape) {
      throw std::invalid_argument("key_cache and value_cache must be [blocks, kv_num_heads, block_size, head_dim] of qkv's head_dim");
    }
    const Ort::ConstValue seqlens = ctx.GetInput(3);
    if (ShapeOf(seqlens) != std::vector<int64_t>{qkvShape[0]}) throw std::invalid_argument("seqlens_k must be [rows]");
    const bool tabled = Given(ctx, 4);
    std::vector<int64_t> tableShape{qkvShape[0], 1};
    if (tabled) {
      tableShape = ShapeOf(ctx.GetInput(4));
      if (tableShape.size() != 2 || tableShape[0] != qkvShape[0] || tableShape[1] < 1) throw std::invalid_argument("block_table must be [rows, max_blocks]");
    } else if (cacheShape[0] < qkvShape[0]) {
      throw std::invalid_argument("without block_table, key_cache and value_cache must hold a block of each row: " + std::to_string(cacheShape[0]) + " blocks for " +
                                  std::to_string(qkvShape[0]) + " rows");
    }
    PagedAttentionArgs args{};
    args.qkv = qkv.GetTensorRawData();
    args.rows = static_cast<int>(qkvShape[0]);
    args.tokens = static_cast<int>(qkvShape[1]);
    args.heads = heads;
    args.kvHeads = kvHeads;
    args.dim = static_cast<int>(dim);
    args.scale = attributes_.scale;
    args.window = attributes_.window;
    args.softcap = attributes_.softcap;
    args.type = type_;
    args.blocks = static_cast<int>(cacheShape[0]);
    args.blockSize = static_cast<int>(cacheShape[2]);
    args.maxBlocks = static_cast<int>(tableShape[1]);
    args.seqlens = seqlens.GetTensorData<int32_t>();
    args.blockTable = tabled ? ctx.GetInput(4).GetTensorData<int32_t>() : nullptr;
    args.epsilon = epsilon_;
    if (Given(ctx, 8) != Given(ctx, 9)) throw std::invalid_argument("q_norm and k_norm come together");
    if (Given(ctx, 8)) {
      if (ShapeOf(ctx.GetInput(8)) != std::vector<int64_t>{dim} || ShapeOf(ctx.GetInput(9)) != std::vector<int64_t>{dim}) {
        throw std::invalid_argument("q_norm and k_norm must be [head_dim] (" + std::to_string(dim) + ")");
      }
      args.qNorm = ctx.GetInput(8).GetTensorRawData();
      args.kNorm = ctx.GetInput(9).GetTensorRawData();
    }
    if (Given(ctx, 5) != Given(ctx, 6)) throw std::invalid_argument("cos_cache and sin_cache come together");
    if (Given(ctx, 5)) {
      const Ort::ConstValue cos = ctx.GetInput(5);
      const std::vector<int64_t> rotaryShape = ShapeOf(cos);
      if (dim % 2 != 0 || rotaryShape.size() != 2 || rotaryShape[1] != dim / 2 || ShapeOf(ctx.GetInput(6)) != rotaryShape) {
        throw std::invalid_argument("cos_cache and sin_cache must be [positions, head_dim / 2] (an even head_dim)");
      }
      args.cos = cos.GetTensorRawData();
      args.sin = ctx.GetInput(6).GetTensorRawData();
      args.rotaryPositions = static_cast<int>(rotaryShape[0]);
    }
    if (Given(ctx, 7)) {
      const Ort::ConstValue bias = ctx.GetInput(7);
      if (ShapeOf(bias) != std::vector<int64_t>{qkvShape[2]}) throw std::invalid_argument("qkv_bias must be [(num_heads + 2 * kv_num_heads) * head_dim]");
      args.bias = bias.GetTensorRawData();
    }
    args.output = ctx.GetOutput(0, {qkvShape[0], qkvShape[1], heads * dim}).GetTensorMutableRawData();
    args.keyCache = ctx.GetOutput(1, cacheShape).GetTensorMutableRawData();
    args.valueCache = ctx.GetOutput(2, cacheShape).GetTensorMutableRawData();
    if (args.keyCache != keyCache.GetTensorRawData() || args.valueCache != valueCache.GetTensorRawData()) {
      throw std::invalid_argument("present_key and present_value must be bound to the caches' own buffers (the cache is written in place)");
    }
    if (args.rows == 0) return;
#ifdef CHORUS_WITH_CUDA
    if (cuda_) {
      workspace_.Attend(args, workspace_.Splits(args), ctx.GetGPUComputeStream());
      return;
    }
#endif
    PagedAttentionHost(args);
  }

  AttentionAttributes attributes_;
  float epsilon_ = 1e-6f;
#ifdef CHORUS_WITH_CUDA
  PagedWorkspace workspace_;
#endif
};

}  // namespace

#ifdef CHORUS_WITH_CUDA
PagedWorkspace::~PagedWorkspace() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  for (float* old : retired_) cudaFree(old);
}

int PagedWorkspace::Splits(const PagedAttentionArgs& args) {
  if (multiprocessors_ == 0) multiprocessors_ = CurrentMultiprocessors();
  return PagedAttentionSplits(args, multiprocessors_);
}

void PagedWorkspace::Attend(const PagedAttentionArgs& args, int splits, void* stream) {
  const size_t floats = PagedAttentionWorkspaceFloats(args, splits);
  if (floats > floats_) {
    void* made = nullptr;
    if (cudaMalloc(&made, floats * sizeof(float)) != cudaSuccess) throw std::runtime_error("cudaMalloc of the attention's workspace failed");
    // The decode kernel's counters start at zero (and are left there).
    if (cudaMemsetAsync(made, 0, floats * sizeof(float), static_cast<cudaStream_t>(stream)) != cudaSuccess) {
      cudaFree(made);
      throw std::runtime_error("zeroing the attention's workspace failed");
    }
    if (workspace_ != nullptr) retired_.push_back(workspace_);
    workspace_ = static_cast<float*>(made);
    floats_ = floats;
  }
  PagedAttentionDevice(args, splits, workspace_, stream);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw std::runtime_error(std::string("kernel: ") + cudaGetErrorString(status));
}
#endif

OpList PagedAttentionOps(bool cuda, FloatType type) {
  const ONNXTensorElementDataType t = ElementOf(type);
  const ONNXTensorElementDataType i32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
  // PagedAttention: qkv, key_cache, value_cache, seqlens_k, block_table, cos_cache, sin_cache, qkv_bias,
  // q_norm, k_norm.
  return {MakeOp<PagedAttentionKernel>(cuda, type, {t, t, t, i32, i32, t, t, t, t, t}, {4, 5, 6, 7, 8, 9}, 3)};
}

}  // namespace chorus
