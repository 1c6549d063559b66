#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace chorus {

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: normalize
      int shift = 0;
      uint32_t m = mantissa;
      while ((m & 0x400u) == 0) {
        m <<= 1;
        shift++;
      }
      out = sign | (static_cast<uint32_t>(127 - 15 - shift + 1) << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);
  } else {
    out = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &out, sizeof f);
  return f;
}

uint16_t FloatToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0));  // inf, nan
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past the largest half
  if (magnitude < 0x38800000u) {
    // Subnormal half (or zero): the value in units of 2^-24, rounded to nearest even.
    if (magnitude < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t exponent = magnitude >> 23;
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // (1.m x 2^23) x 2^(exponent - 126) units of 2^-24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) half++;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((magnitude - 0x38000000u) >> 13);
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++;
  return static_cast<uint16_t>(sign | half);
}

float BFloat16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

uint16_t FloatToBFloat16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // nan stays nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float ElementAt(const void* data, FloatType type, size_t i) {
  switch (type) {
    case FloatType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case FloatType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

void PutElement(void* data, FloatType type, size_t i, float value) {
  switch (type) {
    case FloatType::kFloat16:
      static_cast<uint16_t*>(data)[i] = FloatToHalf(value);
      break;
    case FloatType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = FloatToBFloat16(value);
      break;
    default:
      static_cast<float*>(data)[i] = value;
  }
}

float RoundTo(float value, FloatType type) {
  switch (type) {
    case FloatType::kFloat16:
      return HalfToFloat(FloatToHalf(value));
    case FloatType::kBFloat16:
      return BFloat16ToFloat(FloatToBFloat16(value));
    default:
      return value;
  }
}

namespace {

// 8 running sums, which the compiler keeps in vector lanes.
float DotPlain(const float* a, const float* b, int n) {
  float sums[8] = {};
  int k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int i = 0; i < 8; i++) sums[i] += a[k + i] * b[k + i];
  }
  for (; k < n; k++) sums[0] += a[k] * b[k];
  return ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
}

void WeightedSumPlain(const float* weights, const float* rows, size_t stride, int count, int dim, float* out) {
  std::fill(out, out + dim, 0.0f);
  for (int j = 0; j < count; j++) {
    const float* row = rows + j * stride;
    for (int d = 0; d < dim; d++) out[d] += weights[j] * row[d];
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float DotAvx2(const float* a, const float* b, int n) {
  __m256 first = _mm256_setzero_ps();
  __m256 second = _mm256_setzero_ps();
  int k = 0;
  for (; k + 16 <= n; k += 16) {
    first = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), first);
    second = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), second);
  }
  if (k + 8 <= n) {
    first = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), first);
    k += 8;
  }
  const __m256 both = _mm256_add_ps(first, second);
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(both), _mm256_extractf128_ps(both, 1));
  const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
  float total = _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
  for (; k < n; k++) total += a[k] * b[k];
  return total;
}

// Columns [first, first + 8 * C) of the weighted sum, in C registers over all the rows.
template <int C>
__attribute__((target("avx2,fma"))) void WeightedColumns(const float* weights, const float* rows, size_t stride, int count, int first, float* out) {
  __m256 sums[C];
  for (int c = 0; c < C; c++) sums[c] = _mm256_setzero_ps();
  for (int j = 0; j < count; j++) {
    const __m256 w = _mm256_set1_ps(weights[j]);
    const float* row = rows + j * stride + first;
    for (int c = 0; c < C; c++) sums[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8 * c), sums[c]);
  }
  for (int c = 0; c < C; c++) _mm256_storeu_ps(out + first + 8 * c, sums[c]);
}

__attribute__((target("avx2,fma"))) void WeightedSumAvx2(const float* weights, const float* rows, size_t stride, int count, int dim, float* out) {
  int d = 0;
  for (; d + 32 <= dim; d += 32) WeightedColumns<4>(weights, rows, stride, count, d, out);
  for (; d + 8 <= dim; d += 8) WeightedColumns<1>(weights, rows, stride, count, d, out);
  if (d < dim) {
    std::fill(out + d, out + dim, 0.0f);
    for (int j = 0; j < count; j++) {
      for (int e = d; e < dim; e++) out[e] += weights[j] * rows[j * stride + e];
    }
  }
}
#endif

}  // namespace

void WeightedSumHost(const float* weights, const float* rows, size_t stride, int count, int dim, float* out) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) return WeightedSumAvx2(weights, rows, stride, count, dim, out);
#endif
  WeightedSumPlain(weights, rows, stride, count, dim, out);
}

float DotHost(const float* a, const float* b, int n) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) return DotAvx2(a, b, n);
#endif
  return DotPlain(a, b, n);
}

void ArgmaxRowsHost(const void* logits, FloatType type, int rows, int vocab, int32_t* out, const int32_t* banned) {
  for (int r = 0; r < rows; r++) {
    const size_t base = static_cast<size_t>(r) * vocab;
    const int ban = banned == nullptr ? -1 : banned[r];
    int best = 0;
    float bestValue = -INFINITY;
    for (int v = 0; v < vocab; v++) {
      const float x = v == ban ? -INFINITY : ElementAt(logits, type, base + v);
      if (x > bestValue) {
        bestValue = x;
        best = v;
      }
    }
    out[r] = best;
  }
}

void WidenRowsHost(const void* logits, FloatType type, int vocab, const int32_t* which, int count, float* out) {
  for (int i = 0; i < count; i++) {
    const size_t base = static_cast<size_t>(which == nullptr ? i : which[i]) * vocab;
    for (int v = 0; v < vocab; v++) out[static_cast<size_t>(i) * vocab + v] = ElementAt(logits, type, base + v);
  }
}

}  // namespace chorus
