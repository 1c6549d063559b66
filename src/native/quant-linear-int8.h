// QuantLinear's host path for 8-bit weights with int8 activations (quant-linear-int8.cc).
#pragma once

#include "quant-linear.h"

namespace chorus {

// Whether `args` take the int8 path: 8-bit weights, int8Activations asked for, and a CPU with AVX2 and FMA.
bool QuantLinearInt8Runs(const QuantLinearArgs& args);

// y of x on host memory, each row of x quantized to int8 per block of the weights; outputs shared among
// `parallel`'s workers. Only where QuantLinearInt8Runs(args).
void QuantLinearInt8Host(const QuantLinearArgs& args, ParallelRunner parallel, void* context);

}  // namespace chorus
