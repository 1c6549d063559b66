// QuantLinear's host rows with AVX2 and FMA (quant-linear-avx2.cc), where the CPU has them.
#pragma once

#include "quant-linear.h"

namespace chorus {

// The most rows the AVX2 path takes at once (a decode step's).
constexpr int kAvx2Rows = 4;

// Whether this CPU has AVX2 and FMA (false off x86).
bool HasAvx2();

// Output n's sums (before bias and rounding) for each of the args.rows <= kAvx2Rows rows of x
// (float32, rows x K), into sums[0..rows-1]. Only where HasAvx2().
void QuantRowsAvx2(const QuantLinearArgs& args, int n, const float* x, float* sums);

}  // namespace chorus
