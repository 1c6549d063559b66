// The slot decoders' attention operators (domain `chorus`): each new query token of a row attends over
// that row's slot of a cache that stays where the session runs, and self-attention writes the row's
// new keys and values into the slot first. Scores, softmax and the weighted sum run in float32.
//
// SlotAttention, the encoder-decoder slot decoder's (one new token per row):
//   inputs   query [rows, 1, heads * dim]
//            key, value [rows, 1, heads * dim]      optional: given, the self-attention mode
//            past_key, past_value [rows, capacity, heads * dim]
//            lengths int32 [rows]                    keys already in each row's slot
//            position_bias float [heads, span]       optional: added to the score of key j of a row
//                                                    of length n at bias[h, min(n - j, span - 1)]
//            qkv_bias [width] or [3 * width]         optional: the query's bias (cross-attention), or
//                                                    q, k and v's (qkv_packed); added rounded as an
//                                                    Add would round it
//   outputs  output [rows, 1, heads * dim]
//            present_key, present_value              self-attention mode: the cache after the new key
//                                                    and value were written at position lengths[r]
//                                                    (bind them to the past's buffers to write in place)
//   attributes  num_heads (int), scale (float, multiplies the scores), qkv_packed (int, default 0):
//               1 when query holds q, k and v packed [rows, 1, 3 * heads * dim] (self-attention, key
//               and value left out)
// Self-attention (key and value given) writes the row's new key and value at its length and attends
// over lengths[r] + 1 keys; cross-attention (no key) attends over the first lengths[r] keys of a cache
// written once (the encoder's keys and values). The slot layout is position-major, so a row's first n
// positions are one contiguous block.
//
// DecoderSlotAttention, the decoder-only slot decoder's (GroupQueryAttention's cache layout and
// lengths, without rotary embeddings):
//   inputs   qkv [rows, tokens, (heads + 2 * kv_heads) * dim]   the queries, keys and values packed
//            past_key, past_value [rows, kv_heads, capacity, dim]
//            seqlens_k int32 [rows]                  each row's length after this run, minus one
//            qkv_bias [(heads + 2 * kv_heads) * dim] optional: added to qkv (rounded as an Add would)
//   outputs  output [rows, tokens, heads * dim], present_key, present_value (as SlotAttention's)
//   attributes  num_heads, kv_num_heads (int), scale (float), sliding_window (int), softcap (float):
//               see AttentionAttributes
// Token s of row r sits at position seqlens_k[r] + 1 - tokens + s and attends over the keys up to it
// (the last sliding_window of them, with a window); query head h reads key head h / (num_heads /
// kv_num_heads).
#pragma once

#include <onnxruntime_cxx_api.h>

#include <cmath>
#include <cstdint>

#include "kernels.h"

#ifdef __CUDACC__
#define CHORUS_HOST_DEVICE __host__ __device__
#else
#define CHORUS_HOST_DEVICE
#endif

namespace chorus {

class PagedWorkspace;  // paged-attention.h

// The attributes DecoderSlotAttention and PagedAttention share:
//   num_heads, kv_num_heads (int)  query and key heads; num_heads a multiple of kv_num_heads
//   scale (float)                  multiplies the scores
//   sliding_window (int, 0 = none) a query at position i attends keys j with i - j < sliding_window
//   softcap (float, 0 = none)      scores (scaled) become softcap * tanh(score / softcap) before the softmax
struct AttentionAttributes {
  int heads = 0;
  int kvHeads = 0;
  float scale = 1;
  int window = 0;
  float softcap = 0;
};

// The operator's attributes, checked (a bad one throws, naming it).
AttentionAttributes AttentionAttributesOf(const OrtKernelInfo* info);

// The first key a query at `position` attends (window 0: the first of all).
CHORUS_HOST_DEVICE inline int FirstKey(int position, int window) { return window > 0 && position >= window ? position - window + 1 : 0; }

// A scaled score, soft-capped (softcap 0: as it is).
CHORUS_HOST_DEVICE inline float SoftCapped(float score, float softcap) { return softcap > 0 ? softcap * tanhf(score / softcap) : score; }

// Where one launch of either operator reads and writes. Token rows: y = r * tokens + s. Query head h
// of token row y is query[y * queryStride + h * dim ...] (+ queryBias[h * dim ...]); its output
// output[(y * heads + h) * dim ...]. Key head k of the row's slot: position j at cacheKey[r * rowStride
// + k * headStride + j * positionStride ...]; a new token's key key[y * newStride + k * dim ...] (+
// keyBias[k * dim ...]), written at position past + s, where past = lengths[r] + lengthsOffset.
struct SlotAttentionArgs {
  const void* query;
  size_t queryStride;
  const void* queryBias;  // null: none
  const void* key;        // null: nothing new to write (cross-attention, or written by SlotAppend)
  const void* value;
  size_t newStride;
  const void* keyBias;  // null: none (then valueBias too)
  const void* valueBias;
  void* cacheKey;
  void* cacheValue;
  size_t rowStride;
  size_t headStride;
  size_t positionStride;
  const int32_t* lengths;
  int lengthsOffset;
  // true: token s attends over past + s + 1 keys; false (cross-attention): over lengths[r].
  bool causal;
  const float* bias;  // null: none
  int biasSpan;
  void* output;
  int rows;
  int tokens;
  int heads;
  int kvHeads;
  int dim;
  int capacity;
  float scale;
  // Causal only: token at position i attends keys j with i - j < window (0: every key up to it).
  int window;
  float softcap;  // 0: none
  FloatType type;
};

// Host: the attention on host memory; new keys and values (key given) are written first, then the
// queries are shared among `parallel`'s workers (kernels.h; null: all on this thread).
void SlotAttentionHost(const SlotAttentionArgs& args, ParallelRunner parallel = nullptr, void* context = nullptr);

// The most keys one query of `args` attends over: its window's, or the slot's.
CHORUS_HOST_DEVICE inline int SlotScoreSpan(const SlotAttentionArgs& a) { return a.causal && a.window > 0 && a.window < a.capacity ? a.window : a.capacity; }

#ifdef CHORUS_WITH_CUDA
// The most keys a query may attend over for the device kernel (its scores live in shared memory): a
// slot's positions, or with a sliding window, the window's.
constexpr int kSlotAttentionMaxCapacity = 8192;
// Device: the attention on device memory, on `stream`; with key given, tokens must be 1 (each block
// writes its own token's key before it attends).
void SlotAttentionDevice(const SlotAttentionArgs& args, void* stream);
// Device: writes every new token's key and value (key given) into the slots, for the attention after it.
void SlotAppendDevice(const SlotAttentionArgs& args, void* stream);
// Device: a decode step of DecoderSlotAttention's layout (packed q, k and v; caches [rows, kv heads,
// capacity, head_dim]) through PagedAttention's decode kernel, the slots its blocks (one a row), where
// that kernel takes it: few rows, whose positions it splits over the GPU, of 16-bit types. It starts
// under the projection before it. False where it does not (SlotAttentionDevice then): steps of many rows
// keep the slot kernel (GPT-2 at batch 64 on an H100: 22 against 26 us a layer; at batch 1 the sampled
// step took 0.396 against 0.450 ms).
bool SlotDecodeThroughPaged(const SlotAttentionArgs& args, PagedWorkspace& workspace, void* stream);
#endif

}  // namespace chorus
