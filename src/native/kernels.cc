#include "kernels.h"

#include <cmath>
#include <cstring>

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
