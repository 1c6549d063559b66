#pragma once
// One CUDA runtime call's status turned into an exception naming the call: "what: <CUDA's message>".
#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace chorus {

inline void CheckCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// The calling thread's current device's multiprocessors.
inline int CurrentMultiprocessors() {
  int device = 0;
  int count = 0;
  CheckCuda(cudaGetDevice(&device), "cudaGetDevice");
  CheckCuda(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return count;
}

}  // namespace chorus
#endif
