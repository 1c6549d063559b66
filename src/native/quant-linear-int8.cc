// QuantLinear's host path for 8-bit weights with int8 activations (accuracy_level 4, as ONNX Runtime's
// MatMulNBits): each row of x is quantized per block of the weights (symmetric, its largest magnitude
// to 127), and each block's product is taken in int32 (weights widened to 16 bits, pairs multiplied and
// added in one instruction), then scaled by the weight's and the activation's scales in float32. The
// zero point comes off once per block through the sum of the block's quantized activations. Where the
// CPU has AVX-512 VNNI, 64 weights at a time are multiplied with the int8 activations and added in one
// instruction instead. The products are exact; what differs from the float path is the activations'
// rounding.
#include "quant-linear-int8.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which it then reports as
// used uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace chorus {

namespace {

// Outputs a task takes, and the rows each pass over an output's weights takes.
constexpr int kOutputsPerTask = 16;
constexpr int kRowsAtOnce = 4;

// x quantized: for each row, K rounded up to whole blocks of values (the tail zero; int8 for the VNNI
// path, int16 for the AVX2 one), and each block's scale and the sum of its values.
template <typename T>
struct QuantizedRows {
  std::vector<T> values;
  std::vector<float> scales;
  std::vector<int32_t> sums;
  int stride = 0;
};

template <typename T>
QuantizedRows<T> QuantizeRows(const QuantLinearArgs& a) {
  QuantizedRows<T> q;
  q.stride = a.blocks * a.blockSize;
  q.values.assign(static_cast<size_t>(a.rows) * q.stride, 0);
  q.scales.resize(static_cast<size_t>(a.rows) * a.blocks);
  q.sums.resize(q.scales.size());
  std::vector<float> block(static_cast<size_t>(a.blockSize));
  for (int r = 0; r < a.rows; r++) {
    for (int b = 0; b < a.blocks; b++) {
      const int first = b * a.blockSize;
      const int count = std::min(a.blockSize, a.in - first);
      float largest = 0;
      for (int j = 0; j < count; j++) {
        block[j] = ElementAt(a.x, a.type, static_cast<size_t>(r) * a.in + first + j);
        largest = std::max(largest, std::fabs(block[j]));
      }
      const float scale = largest / 127.0f;
      const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
      T* out = q.values.data() + static_cast<size_t>(r) * q.stride + first;
      int32_t sum = 0;
      for (int j = 0; j < count; j++) {
        out[j] = static_cast<T>(std::nearbyint(block[j] * inverse));
        sum += out[j];
      }
      q.scales[static_cast<size_t>(r) * a.blocks + b] = scale;
      q.sums[static_cast<size_t>(r) * a.blocks + b] = sum;
    }
  }
  return q;
}

__attribute__((target("avx2,fma"))) inline float Sum8(__m256 v) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
}

// Output n's sums for R rows starting at row `first`: AVX2, each 16 weights widened to int16.
template <int R>
__attribute__((target("avx2,fma"))) void Rows(const QuantLinearArgs& a, const QuantizedRows<int16_t>& q, int n, int first, float* sums) {
  __m256 total[R];
  float shift[R];
  for (int r = 0; r < R; r++) {
    total[r] = _mm256_setzero_ps();
    shift[r] = 0;
  }
  const size_t row = static_cast<size_t>(n) * a.blocks;
  for (int b = 0; b < a.blocks; b++) {
    const float scale = a.type == FloatType::kFloat32 ? static_cast<const float*>(a.scales)[row + b] : ElementAt(a.scales, a.type, row + b);
    const int zero = QuantZeroPoint(a, n, b);
    const uint8_t* blob = a.weight + (row + b) * a.blobBytes;
    const int16_t* x = q.values.data() + static_cast<size_t>(first) * q.stride + static_cast<size_t>(b) * a.blockSize;
    __m256i products[R];
    for (int r = 0; r < R; r++) products[r] = _mm256_setzero_si256();
    for (int j = 0; j < a.blockSize; j += 16) {
      const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blob + j)));
      for (int r = 0; r < R; r++) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + static_cast<size_t>(r) * q.stride + j));
        products[r] = _mm256_add_epi32(products[r], _mm256_madd_epi16(w, v));
      }
    }
    for (int r = 0; r < R; r++) {
      const size_t at = static_cast<size_t>(first + r) * a.blocks + b;
      const float factor = scale * q.scales[at];
      total[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(products[r]), _mm256_set1_ps(factor), total[r]);
      shift[r] += static_cast<float>(zero * q.sums[at]) * factor;
    }
  }
  for (int r = 0; r < R; r++) sums[r] = Sum8(total[r]) - shift[r];
}


// The same with AVX-512 VNNI: each 64 weight bytes multiplied with 64 int8 activations and added in
// fours into int32 lanes in one instruction; a block shorter than 64 is read through a mask.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void RowsVnni(const QuantLinearArgs& a, const QuantizedRows<int8_t>& q, int n, int first, float* sums) {
  __m512 total[R];
  float shift[R];
  for (int r = 0; r < R; r++) {
    total[r] = _mm512_setzero_ps();
    shift[r] = 0;
  }
  const __mmask64 mask = a.blockSize >= 64 ? ~__mmask64{0} : (__mmask64{1} << a.blockSize) - 1;
  const size_t row = static_cast<size_t>(n) * a.blocks;
  for (int b = 0; b < a.blocks; b++) {
    const float scale = a.type == FloatType::kFloat32 ? static_cast<const float*>(a.scales)[row + b] : ElementAt(a.scales, a.type, row + b);
    const int zero = QuantZeroPoint(a, n, b);
    const uint8_t* blob = a.weight + (row + b) * a.blobBytes;
    const int8_t* x = q.values.data() + static_cast<size_t>(first) * q.stride + static_cast<size_t>(b) * a.blockSize;
    __m512i products[R][2];
    for (int r = 0; r < R; r++) products[r][0] = products[r][1] = _mm512_setzero_si512();
    for (int j = 0, turn = 0; j < a.blockSize; j += 64, turn ^= 1) {
      const __m512i w = _mm512_maskz_loadu_epi8(mask, blob + j);
      for (int r = 0; r < R; r++) {
        const __m512i v = _mm512_maskz_loadu_epi8(mask, x + static_cast<size_t>(r) * q.stride + j);
        products[r][turn] = _mm512_dpbusd_epi32(products[r][turn], w, v);
      }
    }
    for (int r = 0; r < R; r++) {
      const size_t at = static_cast<size_t>(first + r) * a.blocks + b;
      const float factor = scale * q.scales[at];
      const __m512i both = _mm512_add_epi32(products[r][0], products[r][1]);
      total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(both), _mm512_set1_ps(factor), total[r]);
      shift[r] += static_cast<float>(zero * q.sums[at]) * factor;
    }
  }
  for (int r = 0; r < R; r++) sums[r] = _mm512_reduce_add_ps(total[r]) - shift[r];
}

bool HasVnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return has;
}

template <typename T>
struct Work {
  const QuantLinearArgs* args;
  const QuantizedRows<T>* x;
};

// Output n's sums for `rows` rows (at most kRowsAtOnce) starting at row `first`.
template <int R>
void RowsOf(const QuantLinearArgs& a, const QuantizedRows<int16_t>& q, int n, int first, float* sums) {
  Rows<R>(a, q, n, first, sums);
}
template <int R>
void RowsOf(const QuantLinearArgs& a, const QuantizedRows<int8_t>& q, int n, int first, float* sums) {
  RowsVnni<R>(a, q, n, first, sums);
}

template <typename T>
void RunTask(void* data, size_t task) {
  const Work<T>& work = *static_cast<const Work<T>*>(data);
  const QuantLinearArgs& a = *work.args;
  float sums[kRowsAtOnce];
  const int firstOutput = static_cast<int>(task) * kOutputsPerTask;
  const int lastOutput = std::min(a.out, firstOutput + kOutputsPerTask);
  for (int first = 0; first < a.rows; first += kRowsAtOnce) {
    const int rows = std::min(kRowsAtOnce, a.rows - first);
    for (int n = firstOutput; n < lastOutput; n++) {
      switch (rows) {
        case 1: RowsOf<1>(a, *work.x, n, first, sums); break;
        case 2: RowsOf<2>(a, *work.x, n, first, sums); break;
        case 3: RowsOf<3>(a, *work.x, n, first, sums); break;
        default: RowsOf<4>(a, *work.x, n, first, sums); break;
      }
      const float bias = a.bias == nullptr ? 0.0f : ElementAt(a.bias, a.type, n);
      for (int r = 0; r < rows; r++) {
        float v = RoundTo(sums[r] + bias, a.type);
        if (a.activation != Activation::kNone) v = RoundTo(Activate(v, a.activation), a.type);
        PutElement(a.y, a.type, static_cast<size_t>(first + r) * a.out + n, v);
      }
    }
  }
}

}  // namespace

bool QuantLinearInt8Runs(const QuantLinearArgs& a) {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has && a.bits == 8 && a.int8Activations;
}

void QuantLinearInt8Host(const QuantLinearArgs& a, ParallelRunner parallel, void* context) {
  const size_t tasks = (static_cast<size_t>(a.out) + kOutputsPerTask - 1) / kOutputsPerTask;
  if (HasVnni() && !a.int8Avx2) {
    const QuantizedRows<int8_t> x = QuantizeRows<int8_t>(a);
    Work<int8_t> work{&a, &x};
    parallel(context, RunTask<int8_t>, tasks, &work);
    return;
  }
  const QuantizedRows<int16_t> x = QuantizeRows<int16_t>(a);
  Work<int16_t> work{&a, &x};
  parallel(context, RunTask<int16_t>, tasks, &work);
}

}  // namespace chorus

#else

namespace chorus {

bool QuantLinearInt8Runs(const QuantLinearArgs&) { return false; }
void QuantLinearInt8Host(const QuantLinearArgs&, ParallelRunner, void*) {}

}  // namespace chorus

#endif
