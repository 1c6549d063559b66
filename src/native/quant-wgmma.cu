// QuantLinear with 8-bit weights at 17 to 64 rows of float16 on Hopper's warpgroup instructions
// (sm_90a; this file is compiled for that target alone, CMakeLists.txt): batch decode steps.
//
// The weights are the A operand of wgmma.m64n64k16, from registers: each warp widens its 16 weight
// rows' bytes, as mma.m16n8k16's A fragments, to float16 (q - zero) * scale. x's 64 rows (rows past
// x's read as zeros) are the B operand, straight from shared memory in the tensor copy's 128-byte
// swizzle. A block takes 128 weight rows (two warpgroups of 64; gated, 64 gate rows and their 64 up
// rows) over its split of K, in steps of 64 values: a ring of 6 stages of 16 KiB, each x's 64 x 64 tile
// and the block's two 64-row boxes of weight bytes, copied by the tensor copy engine (one thread, two
// tensor maps) and counted on the stage's mbarrier. K is split over a cluster of up to 8 blocks until
// the GPU holds two blocks a multiprocessor; the splits' sums meet in shared memory and each rank adds
// up its share of the outputs over every rank's in rank order, then the bias and activation or the gate.
//
// Why: at 64 rows QuantLinear's register tiles and cuBLAS on float16 weights are both bound by moving
// x and the weights through the SM (docs/lab/2026-11-28-skinny-gemm.md); here the copy engine moves
// them and one warpgroup instruction does what 32 mma.sync do, so the 8-bit weights' half of the bytes
// shows: Llama-2-7B's gate and up at 64 rows took 41.4 us against cuBLAS's 66.8 on float16.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "device.cuh"
#include "hopper.cuh"
#include "quant-device.cuh"
#include "quant-linear.h"

namespace chorus {

namespace {

constexpr int kStepK = 64;          // values of K a stage
constexpr int kXRows = 64;          // rows of x a block takes (a decode step's, at most)
constexpr int kBoxRows = 64;        // weight rows a warpgroup takes (a box of the weights' map)
constexpr int kThreads = 256;       // two warpgroups
constexpr int kStages = 6;
constexpr int kXBytes = kXRows * kStepK * 2;           // 8 KiB
constexpr int kBoxBytes = kBoxRows * kStepK;            // 4 KiB of 8-bit weights
constexpr int kStageBytes = kXBytes + 2 * kBoxBytes;    // 16 KiB
constexpr size_t kSharedBytes = kStages * static_cast<size_t>(kStageBytes) + 1024;  // + 1024 to align
constexpr int kMaxSplits = 8;
constexpr int kPartialStride = 2 * kBoxRows + 4;  // floats a row of x's sums staged (skewed)

// Bytes 2t, 2t + 1, 2t + 8 and 2t + 9 of a weight row's 16 values (a lane's share of an A fragment's
// row), as (q - zero) * scale in two float16 pairs: q as the low byte of 1024's mantissa (Dequant).
__device__ inline void WidenRow(const unsigned char* values, int t, __half2 zero, __half2 scale, uint32_t& first, uint32_t& second) {
  const uint32_t low = *reinterpret_cast<const uint16_t*>(values + 2 * t);
  const uint32_t high = *reinterpret_cast<const uint16_t*>(values + 2 * t + 8);
  first = Dequant(__byte_perm(low, 0x64646464u, 0x5140), zero, scale);
  second = Dequant(__byte_perm(high, 0x64646464u, 0x5140), zero, scale);
}

// Block (output block, split; splits along x as one cluster). `xMap`: x [rows][K] float16 in boxes of
// 64 x 64, 128-byte swizzle; `wMap`: the weights' bytes [weight rows][blocks * blob] in boxes of 64 x
// 64.
template <bool Gated>
__global__ void __launch_bounds__(kThreads, 2) QuantWgmmaKernel(QuantLinearArgs a, int splits, const __grid_constant__ CUtensorMap xMap, const __grid_constant__ CUtensorMap wMap) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ float4 sharedWords[];
  unsigned char* stages = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(sharedWords) + 1023) & ~uintptr_t{1023});
  __shared__ uint64_t full[kStages];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int rank = blockIdx.x % splits;
  const int outputBlock = blockIdx.x / splits;
  // The two boxes' first weight rows: 128 consecutive rows, or gated 64 gate rows and their up rows.
  const int outputs = Gated ? kBoxRows : 2 * kBoxRows;
  const int firstOutput = outputBlock * outputs;
  const int boxRow0 = firstOutput;
  const int boxRow1 = Gated ? a.out + firstOutput : firstOutput + kBoxRows;
  const int steps = a.in / kStepK;
  const int firstStep = static_cast<int>(static_cast<long>(steps) * rank / splits);
  const int count = static_cast<int>(static_cast<long>(steps) * (rank + 1) / splits) - firstStep;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; s++) BarrierInit(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  WaitForPrevious();
  const auto issue = [&](int i) {
    unsigned char* stage = stages + (i % kStages) * kStageBytes;
    const int k0 = (firstStep + i) * kStepK;
    BarrierExpectBytes(&full[i % kStages], kStageBytes);
    TensorCopy(stage, &xMap, k0, 0, &full[i % kStages]);
    TensorCopy(stage + kXBytes, &wMap, k0, boxRow0, &full[i % kStages]);
    TensorCopy(stage + kXBytes + kBoxBytes, &wMap, k0, boxRow1, &full[i % kStages]);
  };
  if (threadIdx.x == 0)
    for (int s = 0; s < kStages - 1 && s < count; s++) issue(s);

  // This warp's weight rows: rows 16 (warp % 4) + g and + 8 of its warpgroup's box.
  const int boxRow = 16 * (warp % 4) + g;
  const int weightRow = (warp < 4 ? boxRow0 : boxRow1) + boxRow;
  const __half* scales = static_cast<const __half*>(a.scales);
  // Block b of K's scale and zero point (as 1024 + zero) of rows weightRow and weightRow + 8.
  const auto scaleOf = [&](int row, int block) { return __half2half2(scales[static_cast<size_t>(row) * a.blocks + block]); };
  const auto zeroOf = [&](int row, int block) { return Both<__half2>(Pair<__half>::kBase + static_cast<float>(QuantZeroPoint(a, row, block))); };
  int block = -1;
  __half2 scale0 = __float2half2_rn(0.0f), scale1 = scale0, zero0 = scale0, zero1 = scale0;

  float acc[32];
#pragma unroll
  for (int e = 0; e < 32; e++) acc[e] = 0.0f;
  for (int i = 0; i < count; i++) {
    const int k0 = (firstStep + i) * kStepK;
    if (k0 / a.blockSize != block) {
      block = k0 / a.blockSize;
      scale0 = scaleOf(weightRow, block);
      scale1 = scaleOf(weightRow + 8, block);
      zero0 = zeroOf(weightRow, block);
      zero1 = zeroOf(weightRow + 8, block);
    }
    BarrierWait(&full[i % kStages], (i / kStages) & 1);
    __syncthreads();  // stage i is in; every warp is done with the stage the next copy overwrites
    if (threadIdx.x == 0 && i + kStages - 1 < count) {
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      issue(i + kStages - 1);
    }
    const unsigned char* stage = stages + (i % kStages) * kStageBytes;
    const unsigned char* rows = stage + kXBytes + (warp < 4 ? 0 : kBoxBytes);
    const unsigned xAddress = SharedAddress(stage);
#pragma unroll
    for (int kk = 0; kk < kStepK / 16; kk++) {
      uint32_t f[4];
      WidenRow(rows + boxRow * kStepK + 16 * kk, t, zero0, scale0, f[0], f[2]);
      WidenRow(rows + (boxRow + 8) * kStepK + 16 * kk, t, zero1, scale1, f[1], f[3]);
      WgmmaFence();
      Wgmma(acc, f, SwizzledDescriptor(xAddress + 32 * kk));
    }
    WgmmaCommit();
    WgmmaWaitAll();
  }
  LetDependentsStart();

  // The splits' sums staged [row of x][weight row of the block] (the ring is free: every stage was
  // waited for), then each rank's share of the outputs added up over the ranks in order.
  __syncthreads();
  float* partial = reinterpret_cast<float*>(stages);
  const int column = (warp < 4 ? 0 : kBoxRows) + boxRow;
#pragma unroll
  for (int j = 0; j < 8; j++) {
    const int xRow = 8 * j + 2 * t;
    partial[xRow * kPartialStride + column] = acc[4 * j];
    partial[(xRow + 1) * kPartialStride + column] = acc[4 * j + 1];
    partial[xRow * kPartialStride + column + 8] = acc[4 * j + 2];
    partial[(xRow + 1) * kPartialStride + column + 8] = acc[4 * j + 3];
  }
  if (splits > 1) {
    ClusterBarrier();
  } else {
    __syncthreads();
  }
  __half* y = static_cast<__half*>(a.y);
  const __half* bias = static_cast<const __half*>(a.bias);
  for (int i = rank * kThreads + static_cast<int>(threadIdx.x); i < a.rows * outputs; i += splits * kThreads) {
    const int xRow = i / outputs;
    const int local = i % outputs;
    const int at = xRow * kPartialStride + local;
    float sum, up;
    RankSums<kMaxSplits, Gated>(partial, at, at + kBoxRows, splits, sum, up);
    const int o = firstOutput + local;
    y[static_cast<size_t>(xRow) * a.out + o] = Gated ? Gate<__half>(sum, up, bias, o, a.out, a.activation) : Finish<__half>(sum, bias, o, a.activation);
  }
  // No rank leaves while another may still read its shared memory.
  if (splits > 1) ClusterBarrier();
#endif
}

// cuTensorMapEncodeTiled, from the driver (taken once).
PFN_cuTensorMapEncodeTiled_v12000 Encoder() {
  static std::atomic<PFN_cuTensorMapEncodeTiled_v12000> encode{nullptr};
  PFN_cuTensorMapEncodeTiled_v12000 f = encode.load();
  if (f == nullptr) {
    cudaDriverEntryPointQueryResult found;
    void* address = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &address, 12000, cudaEnableDefault, &found) != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    f = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(address);
    encode.store(f);
  }
  return f;
}

// A 2-D map of `rows` rows of `inner` elements, `pitch` bytes apart, in boxes of 64 x 64.
bool Map(CUtensorMap* map, CUtensorMapDataType type, const void* base, int inner, int rows, size_t pitch, CUtensorMapSwizzle swizzle) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = Encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(pitch)};
  const cuuint32_t box[2] = {kStepK, kBoxRows};
  const cuuint32_t elementStrides[2] = {1, 1};
  return encode(map, type, 2, const_cast<void*>(base), dims, strides, box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Whether the current device is a Hopper GPU (compute capability 9.0, where sm_90a's code runs).
bool Hopper() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

std::atomic<unsigned long long> askedPlain{0};
std::atomic<unsigned long long> askedGated{0};

}  // namespace

bool QuantWgmmaDevice(const QuantLinearArgs& a, int multiprocessors, void* stream) {
  const int weightRows = a.gated ? 2 * a.out : a.out;
  const bool fits = a.type == FloatType::kFloat16 && a.bits == 8 && a.rows > 16 && a.rows <= kXRows && a.norm == nullptr && a.in % kStepK == 0 && a.blockSize % kStepK == 0 &&
                    (a.gated ? a.out % kBoxRows == 0 : a.out % (2 * kBoxRows) == 0) && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(a.weight) % 16 == 0 && static_cast<size_t>(a.blocks) * a.blobBytes % 16 == 0;
  if (!fits || !Hopper()) return false;
  CUtensorMap xMap, wMap;
  if (!Map(&xMap, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, a.x, a.in, a.rows, static_cast<size_t>(a.in) * 2, CU_TENSOR_MAP_SWIZZLE_128B) ||
      !Map(&wMap, CU_TENSOR_MAP_DATA_TYPE_UINT8, a.weight, a.in, weightRows, static_cast<size_t>(a.blocks) * a.blobBytes, CU_TENSOR_MAP_SWIZZLE_NONE)) {
    return false;
  }
  // Two blocks a multiprocessor: K split over a cluster (each split at least 2 steps) until they fill it.
  const int outputBlocks = a.out / (a.gated ? kBoxRows : 2 * kBoxRows);
  const int steps = a.in / kStepK;
  const int splits = std::max(1, std::min({kMaxSplits, steps / 2, 2 * multiprocessors / outputBlocks}));
  auto kernel = a.gated ? QuantWgmmaKernel<true> : QuantWgmmaKernel<false>;
  AllowSharedBytes(a.gated ? askedGated : askedPlain, kernel, kSharedBytes);
  auto s = static_cast<cudaStream_t>(stream);
  if (splits > 1) return LaunchClusters(kernel, dim3(splits * outputBlocks), kThreads, kSharedBytes, splits, s, a, splits, xMap, wMap);
  kernel<<<dim3(outputBlocks), kThreads, kSharedBytes, s>>>(a, 1, xMap, wMap);
  return true;
}

}  // namespace chorus
