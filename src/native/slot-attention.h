// SlotAttention (operator domain `chorus`): the encoder-decoder slot decoder's attention, one new query
// token per row over that row's slot of a cache that stays where the session runs.
//
//   inputs   query [rows, 1, heads * dim]
//            key, value [rows, 1, heads * dim]      optional: given, the self-attention mode
//            past_key, past_value [rows, capacity, heads * dim]
//            lengths int32 [rows]                    keys already in each row's slot
//            position_bias float [heads, span]       optional: added to the score of key j of a row
//                                                    of length n at bias[h, min(n - j, span - 1)]
//   outputs  output [rows, 1, heads * dim]
//            present_key, present_value              self-attention mode: the cache after the new key
//                                                    and value were written at position lengths[r]
//                                                    (bind them to the past's buffers to write in place)
//   attributes  num_heads (int), scale (float, multiplies the scores)
//
// Self-attention (key and value given) writes the row's new key and value at its length and attends
// over lengths[r] + 1 keys; cross-attention (no key) attends over the first lengths[r] keys of a cache
// written once (the encoder's keys and values). Scores, softmax and the weighted sum run in float32.
// The slot layout is position-major, so a row's first n positions are one contiguous block.
#pragma once

#include <onnxruntime_cxx_api.h>

#include <cstdint>

#include "kernels.h"

namespace chorus {

struct SlotAttentionArgs {
  const void* query;
  const void* key;  // null: cross-attention
  const void* value;
  void* cacheKey;
  void* cacheValue;
  const int32_t* lengths;
  const float* bias;  // null: none
  int biasSpan;
  void* output;
  int rows;
  int heads;
  int dim;
  int capacity;
  float scale;
  FloatType type;
};

// Host: the operator on host memory.
void SlotAttentionHost(const SlotAttentionArgs& args);

#ifdef CHORUS_WITH_CUDA
// The most positions a slot may hold for the device kernel (its scores live in shared memory).
constexpr int kSlotAttentionMaxCapacity = 8192;
// Device: the operator on device memory, on `stream`.
void SlotAttentionDevice(const SlotAttentionArgs& args, void* stream);
#endif

// Adds the `chorus` domain with SlotAttention for the session's provider and float type.
void AddSlotAttention(Ort::SessionOptions& options, bool cuda, FloatType type);

}  // namespace chorus
