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

namespace {
inline float At(const void* logits, FloatType type, size_t i) {
  return type == FloatType::kFloat32 ? static_cast<const float*>(logits)[i] : HalfToFloat(static_cast<const uint16_t*>(logits)[i]);
}
}  // namespace

void ArgmaxRowsHost(const void* logits, FloatType type, int rows, int vocab, int32_t* out) {
  for (int r = 0; r < rows; r++) {
    const size_t base = static_cast<size_t>(r) * vocab;
    int best = 0;
    float bestValue = -INFINITY;
    for (int v = 0; v < vocab; v++) {
      const float x = At(logits, type, base + v);
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
    for (int v = 0; v < vocab; v++) out[static_cast<size_t>(i) * vocab + v] = At(logits, type, base + v);
  }
}

}  // namespace chorus
