// Decode kernels of the native engine: what runs on a step's logits where they are, so that only the
// chosen token ids (and the logits of rows the caller asked for) cross to the host.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus {

// The element type of logits and cache: float32, IEEE float16 or bfloat16 (raw bits).
enum class FloatType { kFloat32, kFloat16, kBFloat16 };

// Bytes of one element of the type.
inline size_t ElementBytes(FloatType type) { return type == FloatType::kFloat32 ? 4 : 2; }

// Widens IEEE half-precision bits to float.
float HalfToFloat(uint16_t bits);
// Narrows a float to IEEE half-precision bits, rounding to nearest even.
uint16_t FloatToHalf(float value);
// Widens bfloat16 bits to float.
float BFloat16ToFloat(uint16_t bits);
// Narrows a float to bfloat16 bits, rounding to nearest even.
uint16_t FloatToBFloat16(float value);
// Element i of data of the type, as float.
float ElementAt(const void* data, FloatType type, size_t i);
// Element i of data of the type set to `value`, rounded to nearest even.
void PutElement(void* data, FloatType type, size_t i, float value);
// `value` rounded to the type and widened back.
float RoundTo(float value, FloatType type);

// Host: the dot product of n float32s, in running sums across vector lanes (AVX2 and FMA where the CPU
// has them).
float DotHost(const float* a, const float* b, int n);
// Host: out[d] = sum over j < count of weights[j] * rows[j * stride + d], for d < dim (the sums kept in
// vector registers across the rows where the CPU has AVX2 and FMA).
void WeightedSumHost(const float* weights, const float* rows, size_t stride, int count, int dim, float* out);

// Host work shared among workers: `parallel(context, fn, tasks, data)` calls fn(data, i) for each i in
// [0, tasks) (ONNX Runtime's intra-op threads in a kernel).
using ParallelRunner = void (*)(void* context, void (*fn)(void*, size_t), size_t tasks, void* data);

// Host: the index of each row's largest logit (the lowest index among equals), rows x vocab; with
// `banned`, row r passes over id banned[r] (-1: none), as a min_length that bans the end id does.
void ArgmaxRowsHost(const void* logits, FloatType type, int rows, int vocab, int32_t* out, const int32_t* banned = nullptr);

// Host: `count` rows of logits widened to float32: rows which[0..count-1], or rows 0..count-1 when
// `which` is null.
void WidenRowsHost(const void* logits, FloatType type, int vocab, const int32_t* which, int count, float* out);

#ifdef CHORUS_WITH_CUDA
// Device: as ArgmaxRowsHost, on `stream` (a cudaStream_t), into device memory `out` (`banned` in device memory too).
void ArgmaxRowsDevice(const void* logits, FloatType type, int rows, int vocab, int32_t* out, void* stream, const int32_t* banned = nullptr);

// A greedy step's inputs for the next step, in device memory: each row's argmax becomes its token,
// its position and length move on by one. While minLeft[r] > 0 (null: never) row r's argmax passes
// over `endId` and minLeft[r] counts down.
struct GreedyAdvance {
  int64_t* tokens = nullptr;
  int64_t* positions = nullptr;
  int32_t* lengths = nullptr;
  int32_t* minLeft = nullptr;
  int endId = -1;
  // Where set, each row's argmax is also written here: pinned host memory's device address, so that
  // the host reads the ids once the step's event is done, without a copy queued behind the step.
  int32_t* hostOut = nullptr;
};

// Device: ArgmaxRowsDevice, then each row's next inputs written as `advance` says, in the same launch.
void ArgmaxAdvanceDevice(const void* logits, FloatType type, int rows, int vocab, int32_t* out, const GreedyAdvance& advance, void* stream);

// Device: slot blocks moved between `buffers` cache buffers (their addresses in the device array
// `table`) and a scratch, in one launch. Copy i of buffer b: each of `heads` blocks (`pitch` bytes apart)
// of the slot slotIndex[i] (slots `slotBytes` apart), its first lengths[i] * rowBytes bytes, to (with
// toScratch; else from) scratch + b * stride + (starts[i] * heads + head * lengths[i]) * rowBytes. The
// index arrays are device memory.
void MoveSlotsThroughDevice(void* const* table, int buffers, void* scratch, const int32_t* slotIndex, const int32_t* lengths, const int32_t* starts, int count,
                            int heads, size_t slotBytes, size_t pitch, size_t rowBytes, size_t stride, bool toScratch, void* stream);
#endif

}  // namespace chorus
