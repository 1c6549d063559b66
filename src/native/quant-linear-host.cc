// QuantLinear on the host: each output's weights dequantized into a float32 row, then its dot product
// with every row of x (steps of a few rows on AVX2 dequantize 8 weights at a time in registers
// instead, quant-linear-avx2.cc); outputs are shared among ONNX Runtime's intra-op threads in groups.
#include <algorithm>
#include <vector>

#include "quant-linear-avx2.h"
#include "quant-linear-int8.h"
#include "quant-linear.h"

namespace chorus {

namespace {

// Outputs a task takes.
constexpr int kOutputsPerTask = 16;

// Output n's weights as float32, K of them: q * scale - zero * scale.
void DequantizeRow(const QuantLinearArgs& a, int n, float* w) {
  const size_t row = static_cast<size_t>(n) * a.blocks;
  const float* scales32 = a.type == FloatType::kFloat32 ? static_cast<const float*>(a.scales) + row : nullptr;
  for (int b = 0; b < a.blocks; b++) {
    const float scale = scales32 != nullptr ? scales32[b] : ElementAt(a.scales, a.type, row + b);
    const float shift = static_cast<float>(QuantZeroPoint(a, n, b)) * scale;
    const uint8_t* blob = a.weight + (static_cast<size_t>(n) * a.blocks + b) * a.blobBytes;
    const int first = b * a.blockSize;
    const int count = std::min(a.blockSize, a.in - first);
    float* out = w + first;
    if (a.bits == 8) {
      for (int j = 0; j < count; j++) out[j] = static_cast<float>(blob[j]) * scale - shift;
      continue;
    }
    const int pairs = count / 2;
    for (int j = 0; j < pairs; j++) {
      out[2 * j] = static_cast<float>(blob[j] & 15) * scale - shift;
      out[2 * j + 1] = static_cast<float>(blob[j] >> 4) * scale - shift;
    }
    if (count % 2 != 0) out[count - 1] = static_cast<float>(blob[pairs] & 15) * scale - shift;
  }
}

// The dot product of n floats, in 8 running sums (which the compiler vectorizes).
float Dot(const float* a, const float* b, int n) {
  float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int i = 0; i < 8; i++) sums[i] += a[k + i] * b[k + i];
  }
  for (; k < n; k++) sums[0] += a[k] * b[k];
  return ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
}

struct HostWork {
  const QuantLinearArgs* args;
  const float* x;  // rows x K, widened
};

void RunTask(void* data, size_t task) {
  const HostWork& work = *static_cast<const HostWork*>(data);
  const QuantLinearArgs& a = *work.args;
  const bool avx2 = a.rows <= kAvx2Rows && HasAvx2();
  std::vector<float> w(avx2 ? 0 : static_cast<size_t>(a.in));
  std::vector<float> sums(static_cast<size_t>(a.rows));
  const int first = static_cast<int>(task) * kOutputsPerTask;
  const int last = std::min(a.out, first + kOutputsPerTask);
  for (int n = first; n < last; n++) {
    if (avx2) {
      QuantRowsAvx2(a, n, work.x, sums.data());
    } else {
      DequantizeRow(a, n, w.data());
      for (int r = 0; r < a.rows; r++) sums[r] = Dot(work.x + static_cast<size_t>(r) * a.in, w.data(), a.in);
    }
    const float bias = a.bias == nullptr ? 0.0f : ElementAt(a.bias, a.type, n);
    for (int r = 0; r < a.rows; r++) {
      float v = RoundTo(sums[r] + bias, a.type);
      if (a.activation != Activation::kNone) v = RoundTo(Activate(v, a.activation), a.type);
      PutElement(a.y, a.type, static_cast<size_t>(r) * a.out + n, v);
    }
  }
}

}  // namespace

void QuantLinearHost(const QuantLinearArgs& a, ParallelRunner parallel, void* context) {
  if (QuantLinearInt8Runs(a)) {
    QuantLinearInt8Host(a, parallel, context);
    return;
  }
  std::vector<float> x(static_cast<size_t>(a.rows) * a.in);
  for (size_t i = 0; i < x.size(); i++) x[i] = ElementAt(a.x, a.type, i);
  HostWork work{&a, x.data()};
  const size_t tasks = (static_cast<size_t>(a.out) + kOutputsPerTask - 1) / kOutputsPerTask;
  parallel(context, RunTask, tasks, &work);
}

}  // namespace chorus
