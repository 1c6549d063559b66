// QuantLinear's host rows with AVX2 and FMA, for steps of up to kAvx2Rows rows (decoding): each 8
// weights are widened from their bytes once, dequantized with one multiply-add per block's scale and
// zero point, and multiplied into every row's running sums, without a dequantized row in memory.
#include "quant-linear-avx2.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace chorus {

namespace {

// 8 values starting at value j of a block (j a multiple of 8), as int32 lanes.
template <int Bits>
__attribute__((target("avx2,fma"))) inline __m256i Values8(const uint8_t* blob, int j) {
  if constexpr (Bits == 8) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blob + j)));
  } else {
    int packed;
    std::memcpy(&packed, blob + j / 2, 4);
    const __m128i bytes = _mm_cvtsi32_si128(packed);
    const __m128i low = _mm_and_si128(bytes, _mm_set1_epi8(15));
    const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(15));
    // Value 2i is byte i's low nibble, 2i + 1 its high one.
    return _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(low, high));
  }
}

// 16 4-bit values starting at value j of a block (j a multiple of 16), as two sets of 8 int32 lanes.
__attribute__((target("avx2,fma"))) inline void Values16(const uint8_t* blob, int j, __m256i* first, __m256i* second) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blob + j / 2));
  const __m128i low = _mm_and_si128(bytes, _mm_set1_epi8(15));
  const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(15));
  const __m128i values = _mm_unpacklo_epi8(low, high);
  *first = _mm256_cvtepu8_epi32(values);
  *second = _mm256_cvtepu8_epi32(_mm_srli_si128(values, 8));
}

__attribute__((target("avx2,fma"))) inline float Sum8(__m256 v) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
}

// R rows, each with C running sums taken in turn (so that the multiply-adds do not wait on each other).
template <int Bits, int R>
__attribute__((target("avx2,fma"))) void Rows(const QuantLinearArgs& a, int n, const float* x, float* sums) {
  constexpr int C = R <= 2 ? 4 : 2;
  __m256 acc[R][C];
  for (int r = 0; r < R; r++) {
    for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
  }
  float tail[R] = {};
  const size_t row = static_cast<size_t>(n) * a.blocks;
  int turn = 0;
  for (int b = 0; b < a.blocks; b++) {
    const float scale = a.type == FloatType::kFloat32 ? static_cast<const float*>(a.scales)[row + b] : ElementAt(a.scales, a.type, row + b);
    const float shift = static_cast<float>(QuantZeroPoint(a, n, b)) * scale;
    const __m256 scales = _mm256_set1_ps(scale);
    const __m256 shifts = _mm256_set1_ps(shift);
    const uint8_t* blob = a.weight + (row + b) * a.blobBytes;
    const int first = b * a.blockSize;
    const int count = std::min(a.blockSize, a.in - first);
    int j = 0;
    for (; j + 8 * C <= count; j += 8 * C) {
      __m256i values[C];
      for (int c = 0; c < C; c += 2) {
        if constexpr (Bits == 4) {
          Values16(blob, j + 8 * c, &values[c], &values[c + 1]);
        } else {
          values[c] = Values8<Bits>(blob, j + 8 * c);
          values[c + 1] = Values8<Bits>(blob, j + 8 * c + 8);
        }
      }
      for (int c = 0; c < C; c++) {
        const __m256 w = _mm256_fmsub_ps(_mm256_cvtepi32_ps(values[c]), scales, shifts);
        for (int r = 0; r < R; r++) acc[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(x + static_cast<size_t>(r) * a.in + first + j + 8 * c), w, acc[r][c]);
      }
    }
    for (; j + 8 <= count; j += 8, turn = (turn + 1) % C) {
      const __m256 w = _mm256_fmsub_ps(_mm256_cvtepi32_ps(Values8<Bits>(blob, j)), scales, shifts);
      for (int r = 0; r < R; r++) acc[r][turn] = _mm256_fmadd_ps(_mm256_loadu_ps(x + static_cast<size_t>(r) * a.in + first + j), w, acc[r][turn]);
    }
    for (; j < count; j++) {
      const int q = Bits == 8 ? blob[j] : (j & 1 ? blob[j / 2] >> 4 : blob[j / 2] & 15);
      const float w = static_cast<float>(q) * scale - shift;
      for (int r = 0; r < R; r++) tail[r] += x[static_cast<size_t>(r) * a.in + first + j] * w;
    }
  }
  for (int r = 0; r < R; r++) {
    __m256 total = acc[r][0];
    for (int c = 1; c < C; c++) total = _mm256_add_ps(total, acc[r][c]);
    sums[r] = Sum8(total) + tail[r];
  }
}

template <int Bits>
void RowsOf(const QuantLinearArgs& a, int n, const float* x, float* sums) {
  switch (a.rows) {
    case 1: Rows<Bits, 1>(a, n, x, sums); break;
    case 2: Rows<Bits, 2>(a, n, x, sums); break;
    case 3: Rows<Bits, 3>(a, n, x, sums); break;
    default: Rows<Bits, 4>(a, n, x, sums); break;
  }
}

}  // namespace

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

void QuantRowsAvx2(const QuantLinearArgs& a, int n, const float* x, float* sums) {
  if (a.bits == 8) {
    RowsOf<8>(a, n, x, sums);
  } else {
    RowsOf<4>(a, n, x, sums);
  }
}

}  // namespace chorus

#else

namespace chorus {

bool HasAvx2() { return false; }
void QuantRowsAvx2(const QuantLinearArgs&, int, const float*, float*) {}

}  // namespace chorus

#endif
