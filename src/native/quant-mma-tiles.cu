// QuantLinear for more rows than a decode step's kernels take (9 to kQuantTileRows: steps of many
// sequences, short prefills), float16 with 4 or 8 bits and bfloat16 with 4, on tensor cores with the
// weights dequantized in registers (as quant-mma.cu's GEMV does) and x staged once a block in shared
// memory for all of its weight rows.
//
// A block of W warps of F fragments each takes W x F x 16 weight rows (gated: half as many outputs,
// each 16-row fragment 8 gate rows then their 8 up rows) against a tile of 32 or 64 rows of x (NT tiles
// of 8), over its split of K in steps of 64 values: 4 warps of 2 fragments, or 8 of 1
// (CHORUS_QUANT_TILE_WARPS=8; faster only on projections of about 2048 x 2048). In a step a lane reads
// 16 consecutive values of K of 2F weight rows (8 bytes of 4 bits or 16 of 8), two steps (4 bits) or
// one (8 bits) ahead in registers, or (LaunchGatedOr's rule) copied into stages in shared memory 5 steps
// (4 bits) or 2 (8 bits) ahead by cp.async. x's 64 values a row are staged in shared memory, double-buffered, in
// the order the weights come out of their words, so that ldmatrix hands each lane the x values its
// weights multiply. Each product is an mma.m16n8k16 of 16 weight rows (A) by 8 rows of x (B), with
// float32 sums.
//
// K is split over a cluster of up to 8 blocks (sm_90) until the GPU holds one wave; the splits' sums
// meet in shared memory, each rank adding up its share of the outputs over every rank's memory in rank
// order (the same sums whatever the timing), then the bias and activation, or the gate. Without
// clusters (before sm_90) K is not split. Where the time goes: docs/lab/2026-11-26-quant-many-rows.md.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "device.cuh"
#include "quant-device.cuh"
#include "quant-linear.h"

namespace chorus {

namespace {

// Values of K a step takes: 4 lanes of 16.
constexpr int kStepK = 64;
// Halves of a staged row of x: a step's 64 and 8 of skew (rows 144 bytes apart, so that ldmatrix's 8
// rows fall in distinct banks).
constexpr int kXStride = kStepK + 8;
// The most splits of K: a cluster's portable size.
constexpr int kMaxSplits = 8;

template <int NT, int W, int F>
struct Shape {
  static constexpr int kThreads = W * 32;
  // Rows of x a block takes.
  static constexpr int kRows = NT * 8;
  // Weight rows of one of a warp's fragments, for all warps; a row of the sums' staging.
  static constexpr int kPassRows = W * 16;
  static constexpr int kPartialStride = kPassRows + 4;
  // 8-value chunks of x a thread stages a step.
  static constexpr int kXChunks = kRows * (kStepK / 8) / kThreads;
  static constexpr int kXHalves = kRows * kXStride;
  static constexpr int kXBytes = 2 * kXHalves * 2;
  static constexpr int kPartialBytes = kRows * kPartialStride * 4;
  static constexpr int kSharedBytes = kXBytes > kPartialBytes ? kXBytes : kPartialBytes;
  static_assert(kXChunks >= 1 && kRows * (kStepK / 8) % kThreads == 0, "whole chunks of x a thread");
};

// The weights' stages in shared memory (where LaunchGatedOr takes them): each step's bytes of the
// block's weight rows copied by cp.async kStages - 1 steps ahead, so that far more of them are in flight
// than a lane's registers hold. Row slot (w 2F + r) 8 + g holds warp w's r-th row of lane group g.
template <int Bits, int W, int F>
struct Ring {
  // A weight row's bytes of a step, and the 16-byte chunks of them.
  static constexpr int kRowBytes = kStepK * Bits / 8;
  static constexpr int kRowChunks = kRowBytes / 16;
  static constexpr int kRows = W * 2 * F * 8;
  static constexpr int kStageBytes = kRows * kRowBytes;
  // At most 24 KiB of stages: 6 of 4 bits, 3 of 8 (fewer where x's staging leaves less of the 48 KiB of
  // static shared memory).
  static constexpr int kStages = 24 * 1024 / kStageBytes;
  // Chunks a thread copies a step.
  static constexpr int kChunks = kRows * kRowChunks / (W * 32);
  static_assert(kRows * kRowChunks % (W * 32) == 0, "whole chunks a thread");
};

// A lane's share of one step: 16 values of each of its 2F weight rows (fragment f's rows g and g + 8 at
// 2f and 2f + 1) and each row's scale (low half) and base + zero point (high half), in T's bits.
template <int Bits, int F>
struct Slot {
  uint32_t w[2 * F][Bits / 2];
  uint32_t scaleZero[2 * F];
};

template <typename T>
__device__ inline uint32_t RawBits(T v) {
  return *reinterpret_cast<const uint16_t*>(&v);
}

// A lane's weights of a step, read-only, the L2 fetching 256 bytes around them: the next steps of the
// row (32 or 64 bytes a step across its 4 lanes) then come from L2.
__device__ inline uint2 LoadWeights2(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.L2::256B.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ inline uint4 LoadWeights4(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// A lane's 16 values of a weight row at p (8 bytes of 4 bits, 16 of 8) into its words: from global
// memory through LoadWeights (Global), or from a stage in shared memory.
template <int Bits, bool Global>
__device__ inline void ReadRowWords(const uint8_t* p, uint32_t (&w)[Bits / 2]) {
  if constexpr (Bits == 4) {
    uint2 v;
    if constexpr (Global) {
      v = LoadWeights2(p);
    } else {
      v = *reinterpret_cast<const uint2*>(p);
    }
    w[0] = v.x;
    w[1] = v.y;
  } else {
    uint4 v;
    if constexpr (Global) {
      v = LoadWeights4(p);
    } else {
      v = *reinterpret_cast<const uint4*>(p);
    }
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  }
}

// The lane's weight rows of `step` (zeros past K or past the split: live false); with Words false,
// their scales and zero points alone (the words come from the stages in shared memory).
template <typename T, int Bits, int F, bool Words = true>
__device__ inline void LoadSlot(Slot<Bits, F>& slot, const QuantLinearArgs& a, const int (&rows)[2 * F], int step, bool live, int t, int shift) {
  const int k = step * kStepK + 16 * t;
  const uint32_t base = RawBits(Narrowed<T>(Pair<T>::kBase));
  if (live && k < a.in) {
    const int b = k >> shift;
    const int within = (k & (a.blockSize - 1)) * Bits / 8;
    const uint16_t* scales = static_cast<const uint16_t*>(a.scales);
#pragma unroll
    for (int r = 0; r < 2 * F; r++) {
      if constexpr (Words) ReadRowWords<Bits, true>(a.weight + (static_cast<size_t>(rows[r]) * a.blocks + b) * a.blobBytes + within, slot.w[r]);
      const uint32_t zero = RawBits(Narrowed<T>(Pair<T>::kBase + static_cast<float>(QuantZeroPoint(a, rows[r], b))));
      slot.scaleZero[r] = __ldg(scales + static_cast<size_t>(rows[r]) * a.blocks + b) | (zero << 16);
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2 * F; r++) {
#pragma unroll
      for (int v = 0; v < Bits / 2; v++) slot.w[r][v] = 0;
      slot.scaleZero[r] = base << 16;
    }
  }
}

// Output o's weight rows of a block (gated: its gate row, then its up row a.out after; else fragment
// f's rows g and g + 8): row r of 2F of warp w's lane group g (past the end: the last again).
template <int W, int F, bool Gated>
__device__ inline int WeightRow(const QuantLinearArgs& a, int outputBlock, int w, int r, int g) {
  const int f = r / 2;
  if constexpr (Gated) {
    const int o = min(outputBlock * W * F * 8 + F * 8 * w + 8 * f + g, a.out - 1);
    return r % 2 == 0 ? o : a.out + o;
  } else {
    return min(outputBlock * W * F * 16 + F * 16 * w + 16 * f + g + 8 * (r % 2), a.out - 1);
  }
}

// This thread's chunks of the block's weight rows at `step` into `stage` (one commit group; zeros
// past the rows' bytes or past the split). A row's bytes are its blocks' blobs one after another, so
// a step's are kRowBytes from step * kRowBytes; rows of a whole number of 16 bytes (LaunchGatedOr).
template <int Bits, int W, int F, bool Gated>
__device__ inline void CopyStage(const QuantLinearArgs& a, int outputBlock, int step, bool live, unsigned char* stage) {
  using R = Ring<Bits, W, F>;
  const size_t rowBytes = static_cast<size_t>(a.blocks) * a.blobBytes;
#pragma unroll
  for (int j = 0; j < R::kChunks; j++) {
    const int c = threadIdx.x + j * W * 32;
    const int slot = c / R::kRowChunks;
    const int part = c % R::kRowChunks;
    const int row = WeightRow<W, F, Gated>(a, outputBlock, slot / (16 * F), slot / 8 % (2 * F), slot % 8);
    const size_t at = static_cast<size_t>(step) * R::kRowBytes + part * 16;
    CopyAsync16(stage + slot * R::kRowBytes + part * 16, a.weight + row * rowBytes + (live && at < rowBytes ? at : 0), live && at < rowBytes);
  }
  CommitAsync();
}

// The lane's words of a step from its stage: row r's 16 values of lane t.
template <int Bits, int W, int F>
__device__ inline void ReadWords(Slot<Bits, F>& slot, const unsigned char* stage, int warp, int g, int t) {
  using R = Ring<Bits, W, F>;
#pragma unroll
  for (int r = 0; r < 2 * F; r++) ReadRowWords<Bits, false>(stage + ((warp * 2 * F + r) * 8 + g) * R::kRowBytes + t * (Bits * 2), slot.w[r]);
}

// x's chunks of `step` this thread stages (zeros past the rows, K or the split).
template <typename T, class S>
__device__ inline void LoadX(uint4 (&xr)[S::kXChunks], const QuantLinearArgs& a, int rowBase, int step, bool live) {
  const T* x = static_cast<const T*>(a.x);
#pragma unroll
  for (int u = 0; u < S::kXChunks; u++) {
    const int i = threadIdx.x + u * S::kThreads;
    const int row = rowBase + i / 8;
    const int k = step * kStepK + 8 * (i % 8);
    xr[u] = live && row < a.rows && k < a.in ? __ldg(reinterpret_cast<const uint4*>(x + static_cast<size_t>(row) * a.in + k)) : make_uint4(0, 0, 0, 0);
  }
}

// The chunks into a staging buffer, each pair of x as a lane's weights pair them: chunk c of a row
// holds values 16 (c / 2) + 8 (c % 2) .. + 7 of lane c / 2's 16; pair j of it (4 bits: values j and
// j + 4, as a word's nibbles come out; 8 bits: 2j and 2j + 1) goes to word 16 (c % 2) + 4j + c / 2.
template <int Bits, class S>
__device__ inline void StoreX(const uint4 (&xr)[S::kXChunks], uint32_t* staged) {
#pragma unroll
  for (int u = 0; u < S::kXChunks; u++) {
    const int i = threadIdx.x + u * S::kThreads;
    const int c = i % 8;
    uint32_t* to = staged + (i / 8) * (kXStride / 2) + 16 * (c % 2) + c / 2;
    const uint4 v = xr[u];
    if constexpr (Bits == 4) {
      to[0] = __byte_perm(v.x, v.z, 0x5410);
      to[4] = __byte_perm(v.x, v.z, 0x7632);
      to[8] = __byte_perm(v.y, v.w, 0x5410);
      to[12] = __byte_perm(v.y, v.w, 0x7632);
    } else {
      to[0] = v.x;
      to[4] = v.y;
      to[8] = v.z;
      to[12] = v.w;
    }
  }
}

__device__ inline void LoadMatrices(uint32_t address, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(address));
}

// Row r's scale and base + zero point, each in both halves.
template <typename T2, int Bits, int F>
__device__ inline T2 ScaleOf(const Slot<Bits, F>& slot, int r) {
  const uint32_t s = __byte_perm(slot.scaleZero[r], 0, 0x1010);
  return *reinterpret_cast<const T2*>(&s);
}
template <typename T2, int Bits, int F>
__device__ inline T2 ZeroOf(const Slot<Bits, F>& slot, int r) {
  const uint32_t z = __byte_perm(slot.scaleZero[r], 0, 0x3232);
  return *reinterpret_cast<const T2*>(&z);
}

// One step's products: for each 16 values of K (m), the A fragments of the lane's F fragments from its
// words, and x's B fragments two tiles at a time from the staging buffer (`xAddress`: this lane's row
// of ldmatrix's, in the shared space).
template <typename T, int Bits, int NT, int F>
__device__ inline void Multiply(const Slot<Bits, F>& slot, uint32_t xAddress, float (&acc)[F][NT][4]) {
  using T2 = typename Pair<T>::Type;
  constexpr uint32_t kMagic = Pair<T>::kMagic;
#pragma unroll
  for (int m = 0; m < 4; m++) {
    uint32_t frag[F][4];
#pragma unroll
    for (int f = 0; f < F; f++) {
      const int r0 = 2 * f;
      const int r1 = 2 * f + 1;
      const T2 scale0 = ScaleOf<T2>(slot, r0);
      const T2 scale1 = ScaleOf<T2>(slot, r1);
      const T2 zero0 = ZeroOf<T2>(slot, r0);
      const T2 zero1 = ZeroOf<T2>(slot, r1);
      if constexpr (Bits == 4) {
        // Word m / 2 of each row: pairs 2h and 2h + 1 (h = m % 2), nibbles (j, j + 4) each.
        const uint32_t w0 = slot.w[r0][m / 2] >> (8 * (m % 2));
        const uint32_t w1 = slot.w[r1][m / 2] >> (8 * (m % 2));
        frag[f][0] = Dequant((w0 & 0x000F000Fu) | kMagic, zero0, scale0);
        frag[f][1] = Dequant((w1 & 0x000F000Fu) | kMagic, zero1, scale1);
        frag[f][2] = Dequant(((w0 >> 4) & 0x000F000Fu) | kMagic, zero0, scale0);
        frag[f][3] = Dequant(((w1 >> 4) & 0x000F000Fu) | kMagic, zero1, scale1);
      } else {
        static_assert(std::is_same<T, __half>::value, "8 bits above 128 are not exact in bfloat16's bits");
        // Word m of each row: bytes (0, 1), then (2, 3).
        frag[f][0] = Dequant(__byte_perm(slot.w[r0][m], 0x64646464u, 0x4140), zero0, scale0);
        frag[f][1] = Dequant(__byte_perm(slot.w[r1][m], 0x64646464u, 0x4140), zero1, scale1);
        frag[f][2] = Dequant(__byte_perm(slot.w[r0][m], 0x64646464u, 0x4342), zero0, scale0);
        frag[f][3] = Dequant(__byte_perm(slot.w[r1][m], 0x64646464u, 0x4342), zero1, scale1);
      }
    }
#pragma unroll
    for (int jp = 0; jp < NT / 2; jp++) {
      uint32_t b0, b1, b2, b3;
      LoadMatrices(xAddress + (jp * 16 * kXStride + m * 16) * 2, b0, b1, b2, b3);
#pragma unroll
      for (int f = 0; f < F; f++) {
        Mma<T>(acc[f][2 * jp], frag[f][0], frag[f][1], frag[f][2], frag[f][3], b0, b1);
        Mma<T>(acc[f][2 * jp + 1], frag[f][0], frag[f][1], frag[f][2], frag[f][3], b2, b3);
      }
    }
  }
}

// Every block of the cluster (one block: __syncthreads).
__device__ inline void SplitsBarrier(int splits) {
  if (splits > 1) {
    ClusterBarrier();
  } else {
    __syncthreads();
  }
}

// Blocks a multiprocessor holds: 3 of 4 warps of two fragments (up to 168 registers), or 2 of 8 warps
// of one (up to 128).
template <int W>
constexpr int kBlocksPerMultiprocessor = W == 8 ? 2 : 3;

template <typename T, int Bits, int NT, int W, int F, bool Gated, bool Pipe>
__global__ void __launch_bounds__(W * 32, kBlocksPerMultiprocessor<W>) QuantMmaTileKernel(QuantLinearArgs a, int stepsPerSplit, int splits) {
  using S = Shape<NT, W, F>;
  using R = Ring<Bits, W, F>;
  constexpr int kAhead = Bits == 4 ? 2 : 1;
  constexpr int kSlots = kAhead + 1;
  // The stages that fit beside x's staging in 48 KiB; under two (8 bits at 8 warps), the registers.
  constexpr int kFit = (48 * 1024 - S::kSharedBytes) / R::kStageBytes;
  constexpr int P = R::kStages < kFit ? R::kStages : kFit;
  constexpr bool Piped = Pipe && P >= 2;
  __shared__ __align__(16) unsigned char shared[S::kSharedBytes];
  __shared__ __align__(16) unsigned char ring[Piped ? P * R::kStageBytes : 16];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int rank = blockIdx.x % splits;
  const int outputBlock = blockIdx.x / splits;
  const int rowBase = blockIdx.y * S::kRows;
  const int steps = (a.in + kStepK - 1) / kStepK;
  const int begin = rank * stepsPerSplit;
  const int end = min(steps, begin + stepsPerSplit);
  const int shift = __ffs(a.blockSize) - 1;
  // The lane's weight rows: fragment f's rows g and g + 8, or (gated) its gate and up rows.
  int rows[2 * F];
#pragma unroll
  for (int r = 0; r < 2 * F; r++) rows[r] = WeightRow<W, F, Gated>(a, outputBlock, warp, r, g);
  // The weights do not depend on the kernel before: read ahead while it finishes.
  Slot<Bits, F> slot[kSlots];
#pragma unroll
  for (int u = 0; u < kAhead; u++) LoadSlot<T, Bits, F, !Piped>(slot[u], a, rows, begin + u, begin + u < end, t, shift);
  if constexpr (Piped) {
#pragma unroll
    for (int u = 0; u < P - 1; u++) CopyStage<Bits, W, F, Gated>(a, outputBlock, begin + u, begin + u < end, ring + u * R::kStageBytes);
  }
  WaitForPrevious();
  uint32_t* staged = reinterpret_cast<uint32_t*>(shared);
  const uint32_t sharedBase = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  // ldmatrix's rows: lanes 8q .. 8q + 7 address matrix q (tile q / 2 of a pair, values 8 (q % 2) ..).
  const int q = lane / 8;
  const uint32_t laneOffset = (((q / 2) * 8 + lane % 8) * kXStride + 8 * (q % 2)) * 2;
  float acc[F][NT][4] = {};
  uint4 xr[S::kXChunks];
  if (begin < end) {
    LoadX<T, S>(xr, a, rowBase, begin, true);
    StoreX<Bits, S>(xr, staged);
    LoadX<T, S>(xr, a, rowBase, begin + 1, begin + 1 < end);
  }
  for (int first = begin; first < end; first += kSlots) {
#pragma unroll
    for (int u = 0; u < kSlots; u++) {
      const int step = first + u;
      if (step >= end) break;
      LoadSlot<T, Bits, F, !Piped>(slot[(u + kAhead) % kSlots], a, rows, step + kAhead, step + kAhead < end, t, shift);
      // Piped: this step's stage landed (this thread's copies; the barrier then makes every thread's
      // visible), and every warp is past the step before, whose stage the copies P - 1 steps ahead reuse.
      if constexpr (Piped) WaitAsync<P - 2>();
      __syncthreads();
      if constexpr (Piped) {
        const int i = step - begin;
        CopyStage<Bits, W, F, Gated>(a, outputBlock, step + P - 1, step + P - 1 < end, ring + (i + P - 1) % P * R::kStageBytes);
        ReadWords<Bits, W, F>(slot[u], ring + i % P * R::kStageBytes, warp, g, t);
      }
      const int buffer = (step - begin) & 1;
      Multiply<T, Bits, NT, F>(slot[u], sharedBase + buffer * S::kXHalves * 2 + laneOffset, acc);
      if (step + 1 < end) {
        StoreX<Bits, S>(xr, staged + (buffer ^ 1) * (S::kXHalves / 2));
        LoadX<T, S>(xr, a, rowBase, step + 2, step + 2 < end);
      }
    }
  }
  if constexpr (Piped) WaitAsync<0>();
  LetDependentsStart();
  // The splits' sums, one fragment of every warp at a time: staged [row of x][weight row of the pass],
  // then each rank's share of the outputs added up over the ranks in order.
  float* partial = reinterpret_cast<float*>(shared);
  constexpr int kPassOutputs = Gated ? W * 8 : W * 16;
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
#pragma unroll
  for (int f = 0; f < F; f++) {
    SplitsBarrier(splits);
#pragma unroll
    for (int j = 0; j < NT; j++) {
#pragma unroll
      for (int e = 0; e < 4; e++) partial[(8 * j + 2 * t + (e & 1)) * S::kPartialStride + 16 * warp + g + 8 * (e >> 1)] = acc[f][j][e];
    }
    SplitsBarrier(splits);
    for (int i = rank * S::kThreads + threadIdx.x; i < S::kRows * kPassOutputs; i += splits * S::kThreads) {
      const int xRow = i / kPassOutputs;
      const int local = i % kPassOutputs;
      const int row = rowBase + xRow;
      // Gated: output o's gate at weight row 16w + j of the pass, its up row 8 after.
      const int o = Gated ? outputBlock * W * F * 8 + F * 8 * (local / 8) + 8 * f + local % 8 : outputBlock * W * F * 16 + F * 16 * (local / 16) + 16 * f + local % 16;
      if (row >= a.rows || o >= a.out) continue;
      const int at = xRow * S::kPartialStride + (Gated ? 16 * (local / 8) + local % 8 : local);
      float sum, up;
      RankSums<kMaxSplits, Gated>(partial, at, at + 8, splits, sum, up);
      y[static_cast<size_t>(row) * a.out + o] = Gated ? Gate<T>(sum, up, bias, o, a.out, a.activation) : Finish<T>(sum, bias, o, a.activation);
    }
  }
  // No rank leaves while another may still read its shared memory.
  SplitsBarrier(splits);
}

template <typename T, int Bits, int NT, int W, int F, bool Gated, bool Piped>
void Launch(const QuantLinearArgs& a, int multiprocessors, cudaStream_t stream) {
  const int outputBlocks = Ceil(a.out, W * F * (Gated ? 8 : 16));
  const int rowTiles = Ceil(a.rows, NT * 8);
  const int steps = Ceil(a.in, kStepK);
  // As many blocks as the multiprocessors hold at once (one wave, not one and a bit), each split at
  // least 2 steps long, none empty.
  const int wanted = kBlocksPerMultiprocessor<W> * multiprocessors;
  int splits = std::max(1, std::min({kMaxSplits, Ceil(steps, 2), wanted / (outputBlocks * rowTiles)}));
  int stepsPerSplit = Ceil(steps, splits);
  splits = Ceil(steps, stepsPerSplit);
  auto kernel = QuantMmaTileKernel<T, Bits, NT, W, F, Gated, Piped>;
  if (splits > 1 && LaunchClusters(kernel, dim3(splits * outputBlocks, rowTiles), W * 32, 0, splits, stream, a, stepsPerSplit, splits)) return;
  // No clusters (before sm_90, or no room): one split.
  kernel<<<dim3(outputBlocks, rowTiles), W * 32, 0, stream>>>(a, steps, 1);
}

template <typename T, int Bits, int NT, int W, int F>
void LaunchGatedOr(const QuantLinearArgs& a, int multiprocessors, cudaStream_t stream) {
  // The weights through stages in shared memory where that measured faster on the H100 (Llama-2-7B's and
  // TinyLlama's projections alone at 16, 64 and 128 rows, docs/lab/2026-11-27-quant-tile-stages.md):
  // 4 bits from K 4096 (the 7B's 1-12% faster, bar 4096 x 4096: 6% slower at 16 rows, the same at 128;
  // at TinyLlama's K 2048, 4-18% slower), 8 bits up to 32 rows (row tiles of 4: up to 15% faster; at 64
  // rows, with 3 stages and spilled registers, 1-7% slower). CHORUS_QUANT_TILE_PIPE=1 or 0: always (where
  // the rows allow), never.
  // cp.async copies 16 bytes from 16-byte boundaries: rows of a whole number of 16 bytes only (not 4-bit
  // rows of an odd number of blocks of 16).
  const bool aligned = static_cast<size_t>(a.blocks) * a.blobBytes % 16 == 0;
  const bool pipe = aligned && (a.tilePipe == 1 || (a.tilePipe == -1 && (Bits == 4 ? a.in >= 4096 : a.rows <= 32)));
  if (pipe) {
    a.gated ? Launch<T, Bits, NT, W, F, true, true>(a, multiprocessors, stream) : Launch<T, Bits, NT, W, F, false, true>(a, multiprocessors, stream);
  } else {
    a.gated ? Launch<T, Bits, NT, W, F, true, false>(a, multiprocessors, stream) : Launch<T, Bits, NT, W, F, false, false>(a, multiprocessors, stream);
  }
}

template <typename T, int Bits>
void LaunchOf(const QuantLinearArgs& a, int multiprocessors, cudaStream_t stream) {
  // 4 warps of two fragments, or (CHORUS_QUANT_TILE_WARPS=8) 8 warps of one.
  const bool eight = a.tileWarps8;
  if (a.rows <= 32) {
    eight ? LaunchGatedOr<T, Bits, 4, 8, 1>(a, multiprocessors, stream) : LaunchGatedOr<T, Bits, 4, 4, 2>(a, multiprocessors, stream);
  } else {
    eight ? LaunchGatedOr<T, Bits, 8, 8, 1>(a, multiprocessors, stream) : LaunchGatedOr<T, Bits, 8, 4, 2>(a, multiprocessors, stream);
  }
}

}  // namespace

bool QuantMmaTilesDevice(const QuantLinearArgs& a, int multiprocessors, void* stream) {
  const bool type = a.type == FloatType::kFloat16 || (a.type == FloatType::kBFloat16 && a.bits == 4);
  const bool fits = type && a.rows >= 1 && a.in % 16 == 0 && a.norm == nullptr && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(a.weight) % 16 == 0;
  if (!fits) return false;
  auto s = static_cast<cudaStream_t>(stream);
  if (a.type == FloatType::kBFloat16) {
    LaunchOf<__nv_bfloat16, 4>(a, multiprocessors, s);
  } else if (a.bits == 4) {
    LaunchOf<__half, 4>(a, multiprocessors, s);
  } else {
    LaunchOf<__half, 8>(a, multiprocessors, s);
  }
  return true;
}

}  // namespace chorus
