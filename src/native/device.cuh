// Device helpers the native engine's CUDA files share.
#pragma once

#include <cuda_fp16.h>

namespace chorus {

// A logit as float: float32 as it is, float16 widened.
template <typename T>
__device__ inline float Load(const T* p);
template <>
__device__ inline float Load<float>(const float* p) { return *p; }
template <>
__device__ inline float Load<__half>(const __half* p) { return __half2float(*p); }

}  // namespace chorus
