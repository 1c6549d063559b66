// A research prototype, not part of the addon: a float16 product of a decode step's few rows (up to 64)
// against a weight matrix, written to stream the weights at the memory's rate, timed against the
// addon's tuned cuBLASLt product (src/native/linear.cu, as CHORUS_LT_TUNE picks it).
//
// Why: at 64 rows Llama-2-7B's projections run in cuBLASLt at 2.2-2.8 TB/s (5.0 ms of an 8.4 ms decode
// step, docs/lab/2026-11-27-prefill-passes.md), and QuantLinear's tiles at 64 rows are bound by
// latency (docs/lab/2026-11-27-quant-tile-stages.md). If a plain kernel of this shape reaches ~3 TB/s
// with float16 weights, the same pipeline with the weights dequantized between shared memory and the
// tensor cores is the many-row QuantLinear to try next.
//
// The kernel: y [rows][N] = x [rows][K] . W^T, float32 sums. A block takes Warps x WarpN weight rows
// (4 x 32 = 128 and 8 x 32 are timed; 4 x 64 and 8 x 64 measured slower) and all 64 rows of x over a run of K (split-K
// where N alone makes too few blocks); each warp WarpN weight rows x 64 rows, mma.m16n8k16 from
// ldmatrix fragments; x's and W's tiles of 64 values of K copied by cp.async through a ring of 3 to 8
// stages (96 KiB a block, 2 blocks a multiprocessor; 200 KiB for the widest), x's rows XOR-swizzled by
// 16-byte chunk so that ldmatrix reads no bank twice. The weights are laid out in tiles of 128 rows x
// 64 values, a column of tiles' stages one after another (TiledOffset), so that a block's stage is one
// run of memory. Split-K parts write float32 sums to a workspace; the last part of each block column
// to finish (a counter) adds them and writes y.
//
// The same kernel with quantized weights, timed beside against cuBLASLt on the float16 they stand for:
// - Bits 8: int8, symmetric, a float16 scale a weight row (as QuantLinear's int8 has them): each
//   row's 64 values laid out so that a lane reads its fragments' 16 bytes at once (PermutedK), widened
//   to float16 pairs by two byte permutes and a subtraction, the scales applied to the sums.
// - Bits 4: uint4 with a float16 scale and zero point a weight row and group of 128 values of K (as
//   AWQ and GPTQ checkpoints have them): a lane's 8 bytes read at once (PermutedK4), widened by masks
//   into float16's mantissa, (q - zero) * scale in float16 pairs.
// Probes time the 4 x 32 kernel without its products, and with its copies alone. Copy modes (kABytesOf):
// 0, every thread's cp.async; 1, the weights' tiles by the bulk copy engine; 2, x's rows by it too; 3, x
// by the tensor copy engine. WgmmaKernel is the same product with int8 weights on Hopper's warpgroup
// instructions (sm_90a), the form that went into the engine (src/native/quant-wgmma.cu).
//
// What it measured (docs/lab/2026-11-28-skinny-gemm.md): on mma.sync, its copies alone about as slow as
// the whole kernel at first, every block reading x again for its 128 weight rows; bulk copies of the
// weights' tiles brought int8 to cuBLASLt's float16 on the largest product, and the warpgroup kernel
// past it (Llama-2-7B's gate and up at 64 rows: 41.4 us against 66.8).
//
// Build here (nvcc, sm_90a): bash lab/skinny-gemm/build.sh; run on the GPU host with cuBLAS 13 on the library
// path: ./build/skinny-gemm [out.json]. SKINNY_ONLY=llama-2-7b/o takes one shape; SKINNY_SPLITS=n forces n parts of K for every shape,
// SKINNY_WAVES=n takes parts enough for n waves of blocks, SKINNY_STAGGER=1 starts neighbouring block
// columns at different tiles of K.
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cudaTypedefs.h>
#include <string>
#include <type_traits>
#include <vector>

#include "../../bench/gpu/cuda-bench.cuh"
#include "../../src/native/hopper.cuh"
#include "../../src/native/linear.h"
#include "../../src/native/quant-linear.h"

namespace {

using bench::Check;
using chorus::BarrierArrive;
using chorus::CopyAsync16;
using chorus::BarrierExpectBytes;
using chorus::BarrierInit;
using chorus::BarrierWait;
using chorus::SharedAddress;
using chorus::SwizzledDescriptor;
using chorus::TensorCopy;
using chorus::Wgmma;
using chorus::WgmmaCommit;
using chorus::WgmmaFence;
using chorus::WgmmaWaitAll;
using bench::Difference;
using bench::TimeLaunches;

constexpr int kM = 64;    // rows of x a block takes (a decode step's, at most)
constexpr int kBK = 64;   // values of K a stage
constexpr int kABytes = kM * kBK * 2;
constexpr int kGroup = 128;  // values of K a 4-bit scale and zero point cover
// A block's shape: Warps warps of WarpN weight rows each (and all 64 rows of x), so BN weight rows a
// block. Blocks a multiprocessor: 1 for the widest (8 warps of 64 rows), else 2; each block's ring of
// stages takes what that leaves (96 or 200 KiB), 3 to 8 stages of each weight width.
template <int WarpN, int Warps>
constexpr int kBN = WarpN * Warps;
template <int WarpN, int Warps>
constexpr int kBlocksPerSm = WarpN * Warps >= 512 ? 1 : 2;
template <int Bits, int WarpN, int Warps>
constexpr int kBBytes = kBN<WarpN, Warps> * kBK * Bits / 8;
// Copy modes: 0, every thread copies 16 bytes at a time (cp.async); 1, the weights in bulk (a copy a
// tile, counted on the stage's mbarrier); 2, x's rows in bulk too, into rows padded to kAPitch bytes
// (ldmatrix's 8 rows then fall in distinct banks), and the stages handed back through mbarriers
// rather than a barrier over the block; 3, x's tile by the tensor copy engine (a 64 x 64 box of a
// tensor map, swizzled by it as ldmatrix wants), the weights in bulk, a barrier over the block.
constexpr int kAPitch = kBK * 2 + 16;
template <int Mode>
constexpr int kABytesOf = Mode == 2 ? kM * kAPitch : kABytes;
template <int Bits, int WarpN, int Warps, int Mode = 0>
constexpr int kStageBytes = kABytesOf<Mode> + kBBytes<Bits, WarpN, Warps>;
template <int Bits, int WarpN, int Warps, int Mode = 0>
constexpr int kStages = std::min(8, std::max(3, (kBlocksPerSm<WarpN, Warps> == 1 ? 200 : 96) * 1024 / kStageBytes<Bits, WarpN, Warps, Mode>));
// The stages start at a multiple of 1024 bytes (the tensor copy's 128-byte swizzle repeats every 1024):
// 1024 bytes more than they take.
template <int Bits, int WarpN, int Warps, int Mode = 0>
constexpr size_t kSharedBytes = static_cast<size_t>(kStages<Bits, WarpN, Warps, Mode>) * kStageBytes<Bits, WarpN, Warps, Mode> + 1024;
constexpr int kMaxTiles = 4096;  // counters in the workspace (block columns)
constexpr size_t kRotationBytes = 256u << 20;  // weights read per graph: five times the H100's L2
constexpr double kPeakBytesPerSecond = 3.35e12;

// Where value k of a row's 64-value block goes in the int8 layout: lane t of a fragment's 4 reads 16
// bytes at 16 t, a word for each 16 values kk, whose bytes are values 2t, 2t + 1, 2t + 8 and 2t + 9
// of them (the B fragment's two pairs).
__host__ __device__ inline int PermutedK(int k) {
  const int kk = k / 16;
  const int r = k % 16;
  return 16 * ((r & 7) >> 1) + 4 * kk + (r & 1) + (r >= 8 ? 2 : 0);
}

// Where value k of a row's 64-value block goes in the 4-bit layout (a nibble index, low nibble first):
// lane t's 8 bytes at 8 t are two words, one for each two 16s of K (kk); in a word, nibbles i and i + 4
// make a pair, i = 0 and 1 the B fragment's two pairs of the first kk (values 2t, 2t + 1 and 2t + 8,
// 2t + 9), i = 2 and 3 those of the second.
__host__ __device__ inline int PermutedK4(int k) {
  const int kk = k / 16;
  const int r = k % 16;
  return 16 * ((r & 7) >> 1) + 8 * (kk / 2) + 2 * (kk % 2) + (r >= 8 ? 1 : 0) + 4 * (r & 1);
}

// Eight uint4 values (a word, PermutedK4) as four float16 pairs of (q - zero) * scale: q as the low
// bits of 1024's mantissa (q or 16 q), less 1024 + zero (hfma: q / 16 less 64 + zero), times the
// scale, each step exact but the last.
__device__ inline void WidenUint4(uint32_t word, __half2 zero1024, __half2 zero64, __half2 scale, uint32_t (&pairs)[4]) {
  const __half2 sixteenth = __float2half2_rn(1.0f / 16.0f);
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const uint32_t w = word >> (8 * h);
    uint32_t lo = (w & 0x000f000fu) | 0x64006400u;
    uint32_t hi = (w & 0x00f000f0u) | 0x64006400u;
    const __half2 first = __hmul2(__hsub2(*reinterpret_cast<__half2*>(&lo), zero1024), scale);
    const __half2 second = __hmul2(__hfma2(*reinterpret_cast<__half2*>(&hi), sixteenth, __hneg2(zero64)), scale);
    pairs[2 * h] = *reinterpret_cast<const uint32_t*>(&first);
    pairs[2 * h + 1] = *reinterpret_cast<const uint32_t*>(&second);
  }
}

// Four int8 values (a word) as two float16 pairs: x + 128 as the low byte of 1024's mantissa, less 1152.
__device__ inline void WidenInt8(uint32_t word, uint32_t& first, uint32_t& second) {
  const uint32_t u = word ^ 0x80808080u;
  const uint32_t bias = 0x64806480u;  // 1152, 1152
  uint32_t lo = __byte_perm(u, 0x64646464u, 0x5140);
  uint32_t hi = __byte_perm(u, 0x64646464u, 0x7362);
  const __half2 l = __hsub2(*reinterpret_cast<__half2*>(&lo), *reinterpret_cast<const __half2*>(&bias));
  const __half2 h = __hsub2(*reinterpret_cast<__half2*>(&hi), *reinterpret_cast<const __half2*>(&bias));
  first = *reinterpret_cast<const uint32_t*>(&l);
  second = *reinterpret_cast<const uint32_t*>(&h);
}

// The offset in halves of chunk `chunk` (8 halves) of row `row` of a [rows][kBK] tile, swizzled.
__device__ inline int Swizzled(int row, int chunk) { return row * kBK + ((chunk ^ (row & 7)) << 3); }

// Weights are laid out in tiles of kTileRows rows by one stage's kBK values of K, a column of tiles'
// stages one after another, so that a block's stage is one contiguous run of memory and a block
// streams one contiguous region: the byte at which row n's values of K tile kt start, for rows of
// `rowStageBytes` bytes a stage.
constexpr int kTileRows = 128;
__host__ __device__ inline size_t TiledOffset(int n, int kt, int tilesK, int rowStageBytes) {
  return ((static_cast<size_t>(n / kTileRows) * tilesK + kt) * kTileRows + n % kTileRows) * rowStageBytes;
}

__device__ inline void LoadMatrices(uint32_t (&r)[4], const __half* at) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(at));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ inline void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Part `split` of `splits` of K's `tiles` tiles: its first tile and how many it takes.
struct Part {
  int first, count;
};
__device__ inline Part PartOf(int tiles, int split, int splits) {
  const int first = static_cast<int>(static_cast<long>(tiles) * split / splits);
  return {first, static_cast<int>(static_cast<long>(tiles) * (split + 1) / splits) - first};
}

// The bulk-copy engine (Hopper's cp.async.bulk): a stage's weight tiles copied by one thread each, their
// arrival counted on the stage's mbarrier in bytes.
__device__ inline void BulkCopy(void* shared, const void* global, int bytes, uint64_t* barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(SharedAddress(shared)), "l"(global), "r"(bytes),
               "r"(SharedAddress(barrier))
               : "memory");
}

// K tile `kt` of x (rows past `rows` zeros) and of weight rows n0 .. n0 + BN - 1 into `stage`. The
// weights' stage is their tiles (of kTileRows rows) as they are in memory: float16 tiles are kept
// swizzled as the x tiles are, quantized ones in PermutedK order. With `barrier`, thread 0 copies the
// weights in bulk (a copy a tile) and counts them on it; else every thread copies 16 bytes at a time.
template <int Bits, int BN, int Threads>
__device__ inline void LoadStage(unsigned char* stage, const __half* x, const void* w, int rows, int K, int n0, int kt, uint64_t* barrier, const CUtensorMap* xMap = nullptr) {
  const int k0 = kt * kBK;
  __half* a = reinterpret_cast<__half*>(stage);
  for (int c = threadIdx.x; xMap == nullptr && c < kM * 8; c += Threads) {
    const int row = c >> 3;
    const int chunk = c & 7;
    const bool inside = row < rows;
    CopyAsync16(a + Swizzled(row, chunk), x + static_cast<size_t>(inside ? row : 0) * K + k0 + chunk * 8, inside);
  }
  constexpr int kRowBytes = kBK * Bits / 8;
  constexpr int kTileBytes = kTileRows * kRowBytes;
  unsigned char* b = stage + kABytes;
  const unsigned char* q = static_cast<const unsigned char*>(w);
  if (barrier != nullptr) {
    if (threadIdx.x == 0) {
      BarrierExpectBytes(barrier, BN * kRowBytes + (xMap != nullptr ? kABytes : 0));
      if (xMap != nullptr) TensorCopy(a, xMap, k0, 0, barrier);
#pragma unroll
      for (int tile = 0; tile < BN / kTileRows; tile++) BulkCopy(b + tile * kTileBytes, q + TiledOffset(n0 + tile * kTileRows, kt, K / kBK, kRowBytes), kTileBytes, barrier);
    }
    return;
  }
#pragma unroll
  for (int c = threadIdx.x; c < BN * kRowBytes / 16; c += Threads) {
    const int tile = c * 16 / kTileBytes;
    const int within = c * 16 % kTileBytes;
    CopyAsync16(b + c * 16, q + TiledOffset(n0 + tile * kTileRows, kt, K / kBK, kRowBytes) + within, true);
  }
}

// Mode 2's copies of K tile `kt` into `stage`, by warp 0: x's first `rows` rows (128 bytes each, a
// lane's rows at a time) into rows of kAPitch bytes, and the weights' tiles, all counted on `barrier`.
template <int Bits, int BN>
__device__ inline void IssueStage(unsigned char* stage, const __half* x, const void* w, int rows, int K, int n0, int kt, uint64_t* barrier) {
  constexpr int kRowBytes = kBK * Bits / 8;
  constexpr int kTileBytes = kTileRows * kRowBytes;
  const int lane = threadIdx.x % 32;
  if (lane == 0) BarrierExpectBytes(barrier, rows * kBK * 2 + BN * kRowBytes);
  __syncwarp();
  for (int r = lane; r < rows; r += 32) BulkCopy(stage + r * kAPitch, x + static_cast<size_t>(r) * K + kt * kBK, kBK * 2, barrier);
  const unsigned char* q = static_cast<const unsigned char*>(w);
  for (int tile = lane; tile < BN / kTileRows; tile += 32)
    BulkCopy(stage + kABytesOf<2> + tile * kTileBytes, q + TiledOffset(n0 + tile * kTileRows, kt, K / kBK, kRowBytes), kTileBytes, barrier);
}

// Block (column of BN weight rows, part of K). `workspace`: [splits][kM][N] float sums, then kMaxTiles
// counters (zeros, left at zero). `scales`: int8's, one a weight row; 4 bits' [N][K / kGroup], with
// `zeros` beside them (float16 integers).
// Outputs col and col + 1 of a row of y from their sums (int8: times their weight rows' scales).
template <int Bits>
__device__ inline void WriteOut(__half* y, const __half* scales, int N, int row, int col, float first, float second) {
  if constexpr (Bits == 8) {
    first *= __half2float(scales[col]);
    second *= __half2float(scales[col + 1]);
  }
  *reinterpret_cast<__half2*>(y + static_cast<size_t>(row) * N + col) = __floats2half2_rn(first, second);
}

// After a block's part of K has written its float32 sums to workspace [split][kM][N]: the last part of
// block column n0 to finish (a counter a column, left at zero) adds every part's sums and writes y,
// four columns a thread at a time, four of them at once (every part's sums of a round read before any
// is written).
template <int Bits, int BN, int Threads>
__device__ inline void JoinParts(const float* workspace, const __half* scales, __half* y, int rows, int N, int n0, int splits) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  int* counter = reinterpret_cast<int*>(const_cast<float*>(workspace) + static_cast<size_t>(splits) * kM * N) + blockIdx.x;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  constexpr int kQuads = BN / 4;
  const int total = rows * kQuads;
  for (int first = threadIdx.x; first < total; first += 4 * Threads) {
    float4 sum[4];
#pragma unroll
    for (int u = 0; u < 4; u++) sum[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = 0; s < splits; s++) {
      float4 part[4];
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const int e = first + u * Threads;
        part[u] = e < total ? __ldcg(reinterpret_cast<const float4*>(workspace + (static_cast<size_t>(s) * kM + e / kQuads) * N + n0 + 4 * (e % kQuads)))
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < 4; u++) {
        sum[u].x += part[u].x;
        sum[u].y += part[u].y;
        sum[u].z += part[u].z;
        sum[u].w += part[u].w;
      }
    }
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int e = first + u * Threads;
      if (e >= total) continue;
      const int row = e / kQuads;
      const int col = n0 + 4 * (e % kQuads);
      WriteOut<Bits>(y, scales, N, row, col, sum[u].x, sum[u].y);
      WriteOut<Bits>(y, scales, N, row, col + 2, sum[u].z, sum[u].w);
    }
  }
  if (threadIdx.x == 0) *counter = 0;
}

// Probe 1 leaves out the products (the copies, fragment loads and widening alone), probe 2 the
// fragments too (the copies alone): where a block's time goes.
template <int Bits, int WarpN, int Warps, int Probe = 0, int Bulk = 0>
__global__ void __launch_bounds__(Warps * 32, (kBlocksPerSm<WarpN, Warps>)) SkinnyKernel(const __half* x, const void* w, const __half* scales, const __half* zeros, __half* y, int rows,
                                                                                       int K, int N, int splits, float* workspace, bool stagger,
                                                                                       const __grid_constant__ CUtensorMap xMap) {
  constexpr int S = kStages<Bits, WarpN, Warps, Bulk>;
  constexpr int BN = kBN<WarpN, Warps>;
  constexpr int Threads = Warps * 32;
  constexpr int J = WarpN / 8;  // n8 tiles a warp
  constexpr int kStage = kStageBytes<Bits, WarpN, Warps, Bulk>;
  constexpr int kA = kABytesOf<Bulk>;
  extern __shared__ float4 sharedWords[];
  unsigned char* stages = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(sharedWords) + 1023) & ~uintptr_t{1023});
  const CUtensorMap* const map = Bulk == 3 ? &xMap : nullptr;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int n0 = blockIdx.x * BN;
  const int split = blockIdx.y;
  const Part part = PartOf(K / kBK, split, splits);
  const int firstK = part.first;
  const int count = part.count;
  // With `stagger`, block column b starts its run of K at a different tile than its neighbours (and
  // wraps), so that the blocks at work at once read different tiles of x rather than the same ones.
  const int rotation = stagger ? (blockIdx.x * 5) % count : 0;
  const auto tileAt = [&](int i) { return firstK + (i + rotation) % count; };

  // Bulk: each stage's weights arrive on its mbarrier (a phase a use of the stage).
  // Mode 2: each stage handed back on its `empty` mbarrier by every warp, and x's rows past `rows`
  // zeroed in every stage once (no copy writes them).
  __shared__ uint64_t full[S], empty[S];
  if constexpr (Bulk > 0) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < S; s++) {
        BarrierInit(&full[s], 1);
        BarrierInit(&empty[s], Warps);
      }
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if constexpr (Bulk == 2) {
      for (int e = threadIdx.x; e < S * (kM - rows) * (kAPitch / 16); e += Threads) {
        const int s = e / ((kM - rows) * (kAPitch / 16));
        const int r = rows + e / (kAPitch / 16) % (kM - rows);
        *reinterpret_cast<uint4*>(stages + s * kStage + r * kAPitch + 16 * (e % (kAPitch / 16))) = make_uint4(0, 0, 0, 0);
      }
    }
    __syncthreads();
  }
  uint64_t* const noBarrier = nullptr;
  // Row tiles of x that hold rows (the rest are zeros and take no products).
  const int mTiles = (rows + 15) / 16;
  // 4 bits: each of the lane's rows' scale and zero point for stage i's group, read a stage ahead.
  __half nextScale[J], nextZero[J];
  const auto loadGroup = [&](int i) {
    if constexpr (Bits == 4) {
      const int group = tileAt(i) * kBK / kGroup;
      const int groups = K / kGroup;
#pragma unroll
      for (int j = 0; j < J; j++) {
        const size_t at = static_cast<size_t>(n0 + WarpN * warp + 8 * j + g) * groups + group;
        nextScale[j] = __ldg(scales + at);
        nextZero[j] = __ldg(zeros + at);
      }
    }
  };
  loadGroup(0);

  float acc[4][J][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < J; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

  if constexpr (Bulk == 2) {
    if (warp == 0)
      for (int s = 0; s < S - 1 && s < count; s++) IssueStage<Bits, BN>(stages + s * kStage, x, w, rows, K, n0, tileAt(s), &full[s]);
  } else {
#pragma unroll
    for (int s = 0; s < S - 1; s++) {
      if (s < count) LoadStage<Bits, BN, Threads>(stages + s * kStage, x, w, rows, K, n0, tileAt(s), Bulk ? &full[s] : noBarrier, map);
      chorus::CommitAsync();
    }
  }
  for (int i = 0; i < count; i++) {
    const int ahead = i + S - 1;
    if constexpr (Bulk == 2) {
      // Warp 0 refills the slot stage i - 1 had once every warp has handed it back.
      if (warp == 0 && ahead < count) {
        if (ahead >= S && lane == 0) BarrierWait(&empty[ahead % S], (ahead / S - 1) & 1);
        __syncwarp();
        IssueStage<Bits, BN>(stages + (ahead % S) * kStage, x, w, rows, K, n0, tileAt(ahead), &full[ahead % S]);
      }
      BarrierWait(&full[i % S], (i / S) & 1);
    } else {
      chorus::WaitAsync<S - 2>();
      if constexpr (Bulk != 0) BarrierWait(&full[i % S], (i / S) & 1);
      __syncthreads();  // stage i is in; every warp is done with the stage the next copy overwrites
      if (ahead < count) {
        if (Bulk != 0 && threadIdx.x == 0) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        LoadStage<Bits, BN, Threads>(stages + (ahead % S) * kStage, x, w, rows, K, n0, tileAt(ahead), Bulk ? &full[ahead % S] : noBarrier, map);
      }
      chorus::CommitAsync();
    }
    const unsigned char* stage = stages + (i % S) * kStage;
    const __half* a = reinterpret_cast<const __half*>(stage);
    // Where the lane's ldmatrix row of x's row tile m starts, for the stage's 16 values kk.
    const auto aAt = [&](int m, int kk) {
      const int row = 16 * m + (lane & 15);
      const int chunk = 2 * kk + (lane >> 4);
      return Bulk == 2 ? a + row * (kAPitch / 2) + chunk * 8 : a + Swizzled(row, chunk);
    };
    // Mode 2: the warp hands the stage back once its reads of it are done.
    const auto handBack = [&]() {
      if constexpr (Bulk == 2) {
        __syncwarp();
        if (lane == 0) BarrierArrive(&empty[i % S]);
      }
    };
    if constexpr (Probe == 2) {
      handBack();
      continue;
    }
    // int8: the lane's 16 bytes of each of its fragments' rows (a word for each 16 values of K).
    uint4 words[J];
    if constexpr (Bits == 8) {
#pragma unroll
      for (int j = 0; j < J; j++) words[j] = *reinterpret_cast<const uint4*>(stage + kA + (WarpN * warp + 8 * j + g) * kBK + 16 * t);
    }
    // 4 bits: the lane's 8 bytes of each row, and the row's group's scale and zero point.
    uint2 nibbles[J];
    __half2 zero1024[J], zero64[J], scale[J];
    if constexpr (Bits == 4) {
#pragma unroll
      for (int j = 0; j < J; j++) {
        nibbles[j] = *reinterpret_cast<const uint2*>(stage + kA + (WarpN * warp + 8 * j + g) * (kBK / 2) + 8 * t);
        const float zero = __half2float(nextZero[j]);
        scale[j] = __half2half2(nextScale[j]);
        zero1024[j] = __float2half2_rn(1024.0f + zero);
        zero64[j] = __float2half2_rn(64.0f + zero);
      }
      if (i + 1 < count) loadGroup(i + 1);  // the next stage's, a stage ahead
    }
    uint32_t wide[J][4];
#pragma unroll
    for (int kk = 0; kk < kBK / 16; kk++) {
      uint32_t af[4][4];
#pragma unroll
      for (int m = 0; m < 4; m++)
        if (m < mTiles) LoadMatrices(af[m], aAt(m, kk));
      uint32_t bf[J][2];
      if constexpr (Bits == 8) {
#pragma unroll
        for (int j = 0; j < J; j++) WidenInt8(kk == 0 ? words[j].x : kk == 1 ? words[j].y : kk == 2 ? words[j].z : words[j].w, bf[j][0], bf[j][1]);
      } else if constexpr (Bits == 4) {
#pragma unroll
        for (int j = 0; j < J; j++) {
          if (kk % 2 == 0) WidenUint4(kk == 0 ? nibbles[j].x : nibbles[j].y, zero1024[j], zero64[j], scale[j], wide[j]);
          bf[j][0] = wide[j][2 * (kk % 2)];
          bf[j][1] = wide[j][2 * (kk % 2) + 1];
        }
      } else {
        const __half* b = reinterpret_cast<const __half*>(stage + kA);
#pragma unroll
        for (int jj = 0; jj < J / 2; jj++) {
          uint32_t r[4];
          LoadMatrices(r, b + Swizzled(WarpN * warp + 16 * jj + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
          bf[2 * jj][0] = r[0];
          bf[2 * jj][1] = r[1];
          bf[2 * jj + 1][0] = r[2];
          bf[2 * jj + 1][1] = r[3];
        }
      }
      if constexpr (Probe == 1) {
        // Kept alive without the tensor cores.
#pragma unroll
        for (int j = 0; j < J; j++) acc[0][j][0] += __uint_as_float((af[j % 4][0] ^ bf[j][0] ^ bf[j][1]) & 0x00ffffffu);
      } else {
#pragma unroll
        for (int m = 0; m < 4; m++)
          if (m < mTiles)
#pragma unroll
            for (int j = 0; j < J; j++) Mma(acc[m][j], af[m], bf[j][0], bf[j][1]);
      }
    }
    handBack();
  }
  chorus::WaitAsync<0>();

  // Each of the lane's pairs of sums (row, columns col and col + 1) that falls in x's rows, to `take`.
  const auto eachPair = [&](auto take) {
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
      for (int j = 0; j < J; j++) {
        const int row = 16 * m + g;
        const int col = n0 + WarpN * warp + 8 * j + 2 * t;
        if (row < rows) take(row, col, acc[m][j][0], acc[m][j][1]);
        if (row + 8 < rows) take(row + 8, col, acc[m][j][2], acc[m][j][3]);
      }
  };
  if (splits == 1) {
    eachPair([&](int row, int col, float first, float second) { WriteOut<Bits>(y, scales, N, row, col, first, second); });
    return;
  }
  float* mine = workspace + static_cast<size_t>(split) * kM * N;
  eachPair([&](int row, int col, float first, float second) { *reinterpret_cast<float2*>(mine + static_cast<size_t>(row) * N + col) = make_float2(first, second); });
  JoinParts<Bits, BN, Threads>(workspace, scales, y, rows, N, n0, splits);
}

// The same product on Hopper's warpgroup instructions (sm_90a): int8 weights as the A operand of
// wgmma.m64n64k16, from registers (each warp's 16 weight rows widened as mma.m16n8k16's A fragments),
// against x's tile as B straight from shared memory (the tensor copy's 128-byte swizzle, K-major). A
// block takes 128 weight rows (two warpgroups of 64) and all 64 rows of x; stages as copy mode 3 (x's
// tile by the tensor copy, the weights in bulk, an mbarrier a stage, a barrier over the block).
constexpr int kWgStages = 6;
constexpr int kWgStageBytes = kABytes + kTileRows * kBK;  // 16 KiB: 8 of x, 8 of int8 weights
constexpr size_t kWgSharedBytes = static_cast<size_t>(kWgStages) * kWgStageBytes + 1024;

template <int Probe = 0>
__global__ void __launch_bounds__(256, 2) WgmmaKernel(const __half* x, const void* w, const __half* scales, __half* y, int rows, int K, int N, int splits, float* workspace,
                                                      const __grid_constant__ CUtensorMap xMap) {
  constexpr int S = kWgStages;
  constexpr int BN = kTileRows;
  constexpr int Threads = 256;
  extern __shared__ float4 sharedWords[];
  unsigned char* stages = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(sharedWords) + 1023) & ~uintptr_t{1023});
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int n0 = blockIdx.x * BN;
  const int split = blockIdx.y;
  const Part part = PartOf(K / kBK, split, splits);
  const int firstK = part.first;
  const int count = part.count;
  __shared__ uint64_t full[S];
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; s++) BarrierInit(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  for (int s = 0; s < S - 1 && s < count; s++) LoadStage<8, BN, Threads>(stages + s * kWgStageBytes, x, w, rows, K, n0, firstK + s, &full[s], &xMap);

  float acc[32];
#pragma unroll
  for (int e = 0; e < 32; e++) acc[e] = 0.0f;
  // This warp's weight rows: 16 of its warpgroup's 64.
  const int wrow = 16 * warp + g;
  for (int i = 0; i < count; i++) {
    BarrierWait(&full[i % S], (i / S) & 1);
    __syncthreads();  // stage i is in; every warp is done with the stage the next copy overwrites
    const int ahead = i + S - 1;
    if (ahead < count) {
      if (threadIdx.x == 0) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      LoadStage<8, BN, Threads>(stages + (ahead % S) * kWgStageBytes, x, w, rows, K, n0, firstK + ahead, &full[ahead % S], &xMap);
    }
    if constexpr (Probe == 2) continue;
    const unsigned char* stage = stages + (i % S) * kWgStageBytes;
    const uint4 upper = *reinterpret_cast<const uint4*>(stage + kABytes + wrow * kBK + 16 * t);
    const uint4 lower = *reinterpret_cast<const uint4*>(stage + kABytes + (wrow + 8) * kBK + 16 * t);
    const unsigned xAddress = SharedAddress(stage);
#pragma unroll
    for (int kk = 0; kk < kBK / 16; kk++) {
      uint32_t a[4];
      const uint32_t wu = kk == 0 ? upper.x : kk == 1 ? upper.y : kk == 2 ? upper.z : upper.w;
      const uint32_t wl = kk == 0 ? lower.x : kk == 1 ? lower.y : kk == 2 ? lower.z : lower.w;
      WidenInt8(wu, a[0], a[2]);
      WidenInt8(wl, a[1], a[3]);
      WgmmaFence();
      Wgmma(acc, a, SwizzledDescriptor(xAddress + 32 * kk));
    }
    WgmmaCommit();
    WgmmaWaitAll();
  }

  // acc[4 j + e]: weight rows wrow (e 0, 1) and wrow + 8 (e 2, 3), x's rows 8 j + 2 t (e even) and + 1.
  const int nUpper = n0 + 64 * (warp / 4) + 16 * (warp % 4) + g;
  const auto each = [&](auto take) {
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int row = 8 * j + 2 * t;
      if (row < rows) {
        take(row, nUpper, acc[4 * j]);
        take(row, nUpper + 8, acc[4 * j + 2]);
      }
      if (row + 1 < rows) {
        take(row + 1, nUpper, acc[4 * j + 1]);
        take(row + 1, nUpper + 8, acc[4 * j + 3]);
      }
    }
  };
  if (splits == 1) {
    each([&](int row, int n, float v) { y[static_cast<size_t>(row) * N + n] = __float2half_rn(v * __half2float(scales[n])); });
    return;
  }
  float* mine = workspace + static_cast<size_t>(split) * kM * N;
  each([&](int row, int n, float v) { mine[static_cast<size_t>(row) * N + n] = v; });
  JoinParts<8, BN, Threads>(workspace, scales, y, rows, N, n0, splits);
}

// Parts of K for N's block columns: enough blocks to fill the multiprocessors where N alone makes fewer.
int SplitsFor(int N, int K, int multiprocessors, int bn, int blocksPerSm) {
  const char* forced = std::getenv("SKINNY_SPLITS");
  const int tiles = N / bn;
  // SKINNY_WAVES=n: at least n waves of blocks (parts rounded up), rather than at most one.
  const char* waves = std::getenv("SKINNY_WAVES");
  int splits = forced != nullptr ? std::atoi(forced)
               : waves != nullptr ? (std::atoi(waves) * blocksPerSm * multiprocessors + tiles - 1) / tiles
                                  : std::max(1, blocksPerSm * multiprocessors / tiles);
  return std::max(1, std::min(splits, K / kBK));
}

// The tensor map mode 3 reads x through (set for each x before its launches).
CUtensorMap xMapNow{};

template <int Bits, int WarpN, int Warps, int Probe = 0, int Bulk = 0>
void Launch(const __half* x, const void* w, const __half* scales, const __half* zeros, __half* y, int rows, int K, int N, int splits, float* workspace, cudaStream_t stream) {
  SkinnyKernel<Bits, WarpN, Warps, Probe, Bulk><<<dim3(N / kBN<WarpN, Warps>, splits), Warps * 32, kSharedBytes<Bits, WarpN, Warps, Bulk>, stream>>>(x, w, scales, zeros, y, rows, K, N, splits, workspace,
                                                                                                                                 std::getenv("SKINNY_STAGGER") != nullptr, xMapNow);
}

// xMapNow for x [rows][K] of float16: boxes of 64 values by 64 rows, swizzled 128 bytes; rows past
// `rows` read as zeros.
void MapX(const __half* x, int rows, int K) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  if (encode == nullptr) {
    cudaDriverEntryPointQueryResult found;
    Check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000, cudaEnableDefault, &found), "cuTensorMapEncodeTiled");
  }
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(K) * 2};
  const cuuint32_t box[2] = {kBK, kM};
  const cuuint32_t elementStrides[2] = {1, 1};
  const CUresult status = encode(&xMapNow, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<__half*>(x), dims, strides, box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", static_cast<int>(status));
    std::exit(2);
  }
}

template <int Probe = 0>
void LaunchWgmma(const __half* x, const void* w, const __half* scales, __half* y, int rows, int K, int N, int splits, float* workspace, cudaStream_t stream) {
  WgmmaKernel<Probe><<<dim3(N / kTileRows, splits), 256, kWgSharedBytes, stream>>>(x, w, scales, y, rows, K, N, splits, workspace, xMapNow);
}

// Weight rows [N][K] of float16 in tiles (TiledOffset), each row's 16-byte chunks swizzled as the
// kernel's shared tiles have them: a block a row.
__global__ void TileRows(const __half* w, int K, __half* tiled) {
  const int row = blockIdx.x;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const int chunk = k % kBK / 8;
    tiled[TiledOffset(row, k / kBK, K / kBK, kBK * 2) / 2 + ((chunk ^ (row & 7)) << 3) + k % 8] = w[static_cast<size_t>(row) * K + k];
  }
}

// Weight rows [N][K] of float16 as int8 (symmetric, a float16 scale a row, max |w| / 127) in the
// kernel's layout (PermutedK within each 64 values), and the float16 they stand for: a block a row.
__global__ void QuantizeRows(const __half* w, int K, unsigned char* q, __half* scales, __half* dequantized) {
  const size_t row = blockIdx.x;
  __shared__ float most[256];
  float m = 0;
  for (int k = threadIdx.x; k < K; k += blockDim.x) m = fmaxf(m, fabsf(__half2float(w[row * K + k])));
  most[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) most[threadIdx.x] = fmaxf(most[threadIdx.x], most[threadIdx.x + s]);
    __syncthreads();
  }
  const __half scale = __float2half(most[0] > 0 ? most[0] / 127.0f : 1.0f);
  if (threadIdx.x == 0) scales[row] = scale;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const int v = max(-127, min(127, __float2int_rn(__half2float(w[row * K + k]) / __half2float(scale))));
    q[TiledOffset(static_cast<int>(row), k / kBK, K / kBK, kBK) + PermutedK(k % kBK)] = static_cast<unsigned char>(static_cast<signed char>(v));
    dequantized[row * K + k] = __float2half(static_cast<float>(v) * __half2float(scale));
  }
}

// Weight rows [N][K] of float16 as uint4 in groups of kGroup (asymmetric: scale (max - min) / 15, zero
// round(-min / scale)) in the kernel's layout (PermutedK4 within each 64 values), their scales and zero
// points [N][K / kGroup], and the float16 they stand for ((q - zero) * scale): a block a row.
__global__ void QuantizeRows4(const __half* w, int K, unsigned char* q, __half* scales, __half* zeros, __half* dequantized) {
  const size_t row = blockIdx.x;
  const int groups = K / kGroup;
  for (int group = threadIdx.x; group < groups; group += blockDim.x) {
    float low = 0, high = 0;
    for (int k = group * kGroup; k < (group + 1) * kGroup; k++) {
      const float v = __half2float(w[row * K + k]);
      low = fminf(low, v);
      high = fmaxf(high, v);
    }
    const __half scale = __float2half(high > low ? (high - low) / 15.0f : 1.0f);
    scales[row * groups + group] = scale;
    zeros[row * groups + group] = __float2half(fminf(15.0f, fmaxf(0.0f, rintf(-low / __half2float(scale)))));
  }
  __syncthreads();
  // A thread a 64-value block: its 32 bytes put together, then written.
  for (int block = threadIdx.x; block < K / kBK; block += blockDim.x) {
    unsigned char bytes[kBK / 2] = {};
    const int group = block * kBK / kGroup;
    const float scale = __half2float(scales[row * groups + group]);
    const float zero = __half2float(zeros[row * groups + group]);
    for (int k = 0; k < kBK; k++) {
      const size_t at = row * K + block * kBK + k;
      const int v = static_cast<int>(fminf(15.0f, fmaxf(0.0f, rintf(__half2float(w[at]) / scale) + zero)));
      const int nibble = PermutedK4(k);
      bytes[nibble / 2] |= static_cast<unsigned char>(v << (4 * (nibble % 2)));
      dequantized[at] = __float2half((static_cast<float>(v) - zero) * scale);
    }
    for (int b = 0; b < kBK / 2; b++) q[TiledOffset(static_cast<int>(row), block, K / kBK, kBK / 2) + b] = bytes[b];
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string jsonPath = argc > 1 ? argv[1] : "skinny-gemm.json";
  struct Shape {
    const char* model;
    const char* product;
    int N, K;
  };
  const Shape shapes[] = {
      {"llama-2-7b", "qkv", 12288, 4096}, {"llama-2-7b", "o", 4096, 4096}, {"llama-2-7b", "gate+up", 22016, 4096}, {"llama-2-7b", "down", 4096, 11008},
      {"tinyllama-1.1b", "gate+up", 11264, 2048}, {"tinyllama-1.1b", "down", 2048, 5632},
  };
  const int rowCounts[] = {16, 64};
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  // The block shapes timed: warps of 32 or 64 weight rows, 4 or 8 of them.
  const auto eachShape = [](auto visit) {
    visit(std::integral_constant<int, 32>(), std::integral_constant<int, 4>());
    visit(std::integral_constant<int, 32>(), std::integral_constant<int, 8>());
  };
  // Shared memory for a kernel's ring, the most the multiprocessor can give to it, and how many of its
  // blocks a multiprocessor then holds (printed).
  const auto allow = [](auto kernel, size_t bytes, const char* name) {
    Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), "cudaFuncSetAttribute");
    Check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100), "cudaFuncSetAttribute");
    cudaFuncAttributes attributes;
    Check(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes");
    int blocks = 0;
    Check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, attributes.maxThreadsPerBlock, bytes), "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    std::printf("%-22s %3d registers, %6zu bytes of shared memory, %d blocks a multiprocessor\n", name, attributes.numRegs, bytes, blocks);
  };
  eachShape([&](auto warpN, auto warps) {
    constexpr int WN = decltype(warpN)::value, W = decltype(warps)::value;
    char name[64];
    std::snprintf(name, sizeof name, "fp16 %dx%d", W, WN);
    allow(SkinnyKernel<16, WN, W>, kSharedBytes<16, WN, W>, name);
    std::snprintf(name, sizeof name, "int8 %dx%d", W, WN);
    allow(SkinnyKernel<8, WN, W>, kSharedBytes<8, WN, W>, name);
    std::snprintf(name, sizeof name, "int4 %dx%d", W, WN);
    allow(SkinnyKernel<4, WN, W>, kSharedBytes<4, WN, W>, name);
  });
  // Copy modes 1 and 2 (bulk weights; bulk weights and x with stages handed back by mbarriers).
  const auto eachMode = [](auto visit) {
    visit(std::integral_constant<int, 1>());
    visit(std::integral_constant<int, 3>());
  };
  eachMode([&](auto mode) {
    constexpr int M = decltype(mode)::value;
    char name[64];
    std::snprintf(name, sizeof name, "fp16 4x32 mode %d", M);
    allow(SkinnyKernel<16, 32, 4, 0, M>, kSharedBytes<16, 32, 4, M>, name);
    std::snprintf(name, sizeof name, "int8 4x32 mode %d", M);
    allow(SkinnyKernel<8, 32, 4, 0, M>, kSharedBytes<8, 32, 4, M>, name);
    std::snprintf(name, sizeof name, "int4 4x32 mode %d", M);
    allow(SkinnyKernel<4, 32, 4, 0, M>, kSharedBytes<4, 32, 4, M>, name);
    std::snprintf(name, sizeof name, "int8 4x32 mode %d copies", M);
    allow(SkinnyKernel<8, 32, 4, 2, M>, kSharedBytes<8, 32, 4, M>, name);
    std::snprintf(name, sizeof name, "fp16 8x32 mode %d", M);
    allow(SkinnyKernel<16, 32, 8, 0, M>, kSharedBytes<16, 32, 8, M>, name);
    std::snprintf(name, sizeof name, "int8 8x32 mode %d", M);
    allow(SkinnyKernel<8, 32, 8, 0, M>, kSharedBytes<8, 32, 8, M>, name);
  });
  allow(WgmmaKernel<0>, kWgSharedBytes, "int8 wgmma");
  allow(WgmmaKernel<2>, kWgSharedBytes, "int8 wgmma copies");
  allow(SkinnyKernel<16, 32, 4, 1>, kSharedBytes<16, 32, 4>, "fp16 4x32 no products");
  allow(SkinnyKernel<16, 32, 4, 2>, kSharedBytes<16, 32, 4>, "fp16 4x32 copies");
  allow(SkinnyKernel<8, 32, 4, 1>, kSharedBytes<8, 32, 4>, "int8 4x32 no products");
  allow(SkinnyKernel<8, 32, 4, 2>, kSharedBytes<8, 32, 4>, "int8 4x32 copies");
  cudaDeviceProp props;
  Check(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties");
  const size_t ltBytes = 4u << 20;
  void* ltWorkspace = nullptr;
  Check(cudaMalloc(&ltWorkspace, ltBytes), "cudaMalloc");
  FILE* json = std::fopen(jsonPath.c_str(), "w");
  if (json == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", jsonPath.c_str());
    return 2;
  }
  std::fprintf(json, "{\n \"gpu\": \"%s\",\n \"sms\": %d,\n \"rows\": [\n", props.name, props.multiProcessorCount);
  std::printf("%s, %d SMs; float16 activations, us a launch (%% of 3.35 TB/s for its own weight bytes), weights rotated over >= %zu MiB\n", props.name,
              props.multiProcessorCount, kRotationBytes >> 20);
  std::printf("%-15s %-8s %6s %6s %4s %-7s %6s | %-16s | %-16s | %-16s | %-16s | %9s | %9s | %9s\n", "model", "product", "N", "K", "rows", "block", "splits", "cuBLASLt tuned",
              "skinny fp16", "skinny int8", "skinny int4", "diff fp16", "diff int8", "diff int4");
  bool first = true;
  // SKINNY_ONLY=model/product (as printed): that shape alone.
  const char* only = std::getenv("SKINNY_ONLY");
  for (const Shape& s : shapes) {
    if (only != nullptr && std::string(only) != std::string(s.model) + "/" + s.product) continue;
    const size_t weightBytes = static_cast<size_t>(s.N) * s.K * sizeof(__half);
    // Copies enough that even the 4-bit ones read kRotationBytes a graph.
    const int copies = static_cast<int>(std::max<size_t>(2, (kRotationBytes + weightBytes / 4 - 1) / (weightBytes / 4)));
    std::vector<__half*> weights(copies), tiled(copies);  // row-major (cuBLASLt's), and in tiles
    // The int8 and uint4 copies, their scales (and zero points), and copy 0's dequantized float16 (the
    // references' weights).
    const size_t groupCount = static_cast<size_t>(s.N) * (s.K / kGroup);
    std::vector<unsigned char*> quantized(copies), quantized4(copies);
    std::vector<__half*> scales(copies), scales4(copies), zeros4(copies);
    __half* dequantized = nullptr;
    __half* dequantized4 = nullptr;
    Check(cudaMalloc(&dequantized, weightBytes), "cudaMalloc");
    Check(cudaMalloc(&dequantized4, weightBytes), "cudaMalloc");
    for (int c = 0; c < copies; c++) {
      Check(cudaMalloc(&weights[c], weightBytes), "cudaMalloc");
      Check(cudaMalloc(&tiled[c], weightBytes), "cudaMalloc");
      Check(cudaMalloc(&quantized[c], weightBytes / 2), "cudaMalloc");
      Check(cudaMalloc(&scales[c], s.N * sizeof(__half)), "cudaMalloc");
      Check(cudaMalloc(&quantized4[c], weightBytes / 4), "cudaMalloc");
      Check(cudaMalloc(&scales4[c], groupCount * sizeof(__half)), "cudaMalloc");
      Check(cudaMalloc(&zeros4[c], groupCount * sizeof(__half)), "cudaMalloc");
      bench::FillKernel<__half><<<1024, 256, 0, stream>>>(weights[c], weightBytes / sizeof(__half), 17u + c, 2.0f / std::sqrt(static_cast<float>(s.K)));
      TileRows<<<s.N, 256, 0, stream>>>(weights[c], s.K, tiled[c]);
      QuantizeRows<<<s.N, 256, 0, stream>>>(weights[c], s.K, quantized[c], scales[c], dequantized);
      QuantizeRows4<<<s.N, 256, 0, stream>>>(weights[c], s.K, quantized4[c], scales4[c], zeros4[c], dequantized4);
    }
    QuantizeRows<<<s.N, 256, 0, stream>>>(weights[0], s.K, quantized[0], scales[0], dequantized);
    QuantizeRows4<<<s.N, 256, 0, stream>>>(weights[0], s.K, quantized4[0], scales4[0], zeros4[0], dequantized4);
    for (int rows : rowCounts) {
      std::vector<void*> owned;
      __half* x = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.K * sizeof(__half), owned));
      __half* yLt = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.N * sizeof(__half), owned));
      __half* y = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.N * sizeof(__half), owned));
      __half* yRef = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.N * sizeof(__half), owned));
      __half* yRef4 = static_cast<__half*>(bench::Zeros(static_cast<size_t>(rows) * s.N * sizeof(__half), owned));
      // The workspace holds the most parts any block shape takes (the narrowest's).
      const int mostSplits = SplitsFor(s.N, s.K, props.multiProcessorCount, kBN<32, 4>, 2);
      float* workspace = static_cast<float*>(bench::Zeros((static_cast<size_t>(mostSplits) * kM * s.N + kMaxTiles) * sizeof(float), owned));
      bench::FillKernel<__half><<<256, 256, 0, stream>>>(x, static_cast<size_t>(rows) * s.K, 99u, 2.0f);
      MapX(x, rows, s.K);
      Check(cudaStreamSynchronize(stream), "the fills");
      chorus::SetLinearLtTune(1 << 30);
      auto product = [&](const __half* weight, __half* out) {
        chorus::LinearArgs a{};
        a.x = x;
        a.weight = weight;
        a.y = out;
        a.rows = rows;
        a.in = s.K;
        a.out = s.N;
        a.activation = chorus::Activation::kNone;
        a.type = chorus::FloatType::kFloat16;
        chorus::LinearLtDevice(a, 0, s.N, out, s.N, false, ltWorkspace, ltBytes, stream);
      };
      product(weights[0], yLt);  // outside a capture: the candidates timed
      product(dequantized, yRef);
      product(dequantized4, yRef4);
      Check(cudaStreamSynchronize(stream), "the references");
      // SKINNY_PROFILE=1 (under a profiler): at 64 rows, one int8 launch in copy mode 1 and its copies
      // alone, nothing timed.
      if (std::getenv("SKINNY_PROFILE") != nullptr) {
        if (rows == 64) {
          const int splits = SplitsFor(s.N, s.K, props.multiProcessorCount, kBN<32, 4>, 2);
          Launch<8, 32, 4, 0, 1>(x, quantized[0], scales[0], nullptr, y, rows, s.K, s.N, splits, workspace, stream);
          Launch<8, 32, 4, 2, 1>(x, quantized[1], scales[1], nullptr, y, rows, s.K, s.N, splits, workspace, stream);
          Check(cudaStreamSynchronize(stream), "the profiled launches");
        }
        for (void* p : owned) cudaFree(p);
        continue;
      }
      const double ltUs = TimeLaunches(stream, copies, [&](int c) { product(weights[c], yLt); });
      product(weights[0], yLt);  // the timed launches left the last copy's product
      const double activations = static_cast<double>(rows) * (s.K + s.N) * sizeof(__half);
      const auto share = [&](double t, double weightShare) { return (static_cast<double>(weightBytes) * weightShare + activations) / (t * 1e-6) / kPeakBytesPerSecond; };
      eachShape([&](auto warpN, auto warps) {
        constexpr int WN = decltype(warpN)::value, W = decltype(warps)::value;
        if (s.N % kBN<WN, W> != 0) return;
        const int splits = std::min(mostSplits, SplitsFor(s.N, s.K, props.multiProcessorCount, kBN<WN, W>, kBlocksPerSm<WN, W>));
        Launch<16, WN, W>(x, tiled[0], nullptr, nullptr, y, rows, s.K, s.N, splits, workspace, stream);
        Check(cudaStreamSynchronize(stream), "the first products");
        const double diff = Difference(y, yLt, static_cast<size_t>(rows) * s.N);
        Launch<8, WN, W>(x, quantized[0], scales[0], nullptr, y, rows, s.K, s.N, splits, workspace, stream);
        Check(cudaStreamSynchronize(stream), "the first int8 product");
        const double diff8 = Difference(y, yRef, static_cast<size_t>(rows) * s.N);
        Launch<4, WN, W>(x, quantized4[0], scales4[0], zeros4[0], y, rows, s.K, s.N, splits, workspace, stream);
        Check(cudaStreamSynchronize(stream), "the first int4 product");
        const double diff4 = Difference(y, yRef4, static_cast<size_t>(rows) * s.N);
        const double us = TimeLaunches(stream, copies, [&](int c) { Launch<16, WN, W>(x, tiled[c], nullptr, nullptr, y, rows, s.K, s.N, splits, workspace, stream); });
        const double us8 = TimeLaunches(stream, copies, [&](int c) { Launch<8, WN, W>(x, quantized[c], scales[c], nullptr, y, rows, s.K, s.N, splits, workspace, stream); });
        const double us4 = TimeLaunches(stream, copies, [&](int c) { Launch<4, WN, W>(x, quantized4[c], scales4[c], zeros4[c], y, rows, s.K, s.N, splits, workspace, stream); });
        char block[16];
        std::snprintf(block, sizeof block, "%dx%d", W, WN);
        std::printf("%-15s %-8s %6d %6d %4d %-7s %6d | %7.2f (%3.0f%%)   | %7.2f (%3.0f%%)   | %7.2f (%3.0f%%)   | %7.2f (%3.0f%%)   | %9.2e | %9.2e | %9.2e\n", s.model, s.product, s.N,
                    s.K, rows, block, splits, ltUs, 100 * share(ltUs, 1), us, 100 * share(us, 1), us8, 100 * share(us8, 0.5), us4, 100 * share(us4, 0.25), diff, diff8, diff4);
        std::fflush(stdout);
        std::fprintf(json,
                     "%s  {\"model\": \"%s\", \"product\": \"%s\", \"N\": %d, \"K\": %d, \"rows\": %d, \"warps\": %d, \"warp_rows\": %d, \"splits\": %d, \"lt_tuned_us\": %.3f, "
                     "\"skinny_us\": %.3f, \"skinny_int8_us\": %.3f, \"skinny_int4_us\": %.3f, \"relative_difference\": %.3e, \"int8_relative_difference\": %.3e, "
                     "\"int4_relative_difference\": %.3e}",
                     first ? "" : ",\n", s.model, s.product, s.N, s.K, rows, W, WN, splits, ltUs, us, us8, us4, diff, diff8, diff4);
        first = false;
      });
      if (s.N % kBN<32, 4> == 0) {
        const int splits = SplitsFor(s.N, s.K, props.multiProcessorCount, kBN<32, 4>, 2);
        const double p16a = TimeLaunches(stream, copies, [&](int c) { Launch<16, 32, 4, 1>(x, tiled[c], nullptr, nullptr, y, rows, s.K, s.N, splits, workspace, stream); });
        const double p16b = TimeLaunches(stream, copies, [&](int c) { Launch<16, 32, 4, 2>(x, tiled[c], nullptr, nullptr, y, rows, s.K, s.N, splits, workspace, stream); });
        const double p8a = TimeLaunches(stream, copies, [&](int c) { Launch<8, 32, 4, 1>(x, quantized[c], scales[c], nullptr, y, rows, s.K, s.N, splits, workspace, stream); });
        const double p8b = TimeLaunches(stream, copies, [&](int c) { Launch<8, 32, 4, 2>(x, quantized[c], scales[c], nullptr, y, rows, s.K, s.N, splits, workspace, stream); });
        std::printf("%-15s %-8s %6d %6d %4d probes 4x32: fp16 no products %.2f, copies %.2f; int8 no products %.2f, copies %.2f\n", s.model, s.product, s.N, s.K, rows, p16a, p16b, p8a,
                    p8b);
        std::fprintf(json, ",\n  {\"model\": \"%s\", \"product\": \"%s\", \"rows\": %d, \"probe_fp16_no_products_us\": %.3f, \"probe_fp16_copies_us\": %.3f, "
                     "\"probe_int8_no_products_us\": %.3f, \"probe_int8_copies_us\": %.3f}", s.model, s.product, rows, p16a, p16b, p8a, p8b);
        // Copy modes 1 and 2, each checked against its reference, then timed.
        const size_t outputs = static_cast<size_t>(rows) * s.N;
        eachMode([&](auto mode) {
          constexpr int M = decltype(mode)::value;
          Launch<16, 32, 4, 0, M>(x, tiled[0], nullptr, nullptr, y, rows, s.K, s.N, splits, workspace, stream);
          Check(cudaStreamSynchronize(stream), "the first bulk product");
          const double d16 = Difference(y, yLt, outputs);
          Launch<8, 32, 4, 0, M>(x, quantized[0], scales[0], nullptr, y, rows, s.K, s.N, splits, workspace, stream);
          Check(cudaStreamSynchronize(stream), "the first bulk int8 product");
          const double d8 = Difference(y, yRef, outputs);
          Launch<4, 32, 4, 0, M>(x, quantized4[0], scales4[0], zeros4[0], y, rows, s.K, s.N, splits, workspace, stream);
          Check(cudaStreamSynchronize(stream), "the first bulk int4 product");
          const double d4 = Difference(y, yRef4, outputs);
          const double t16 = TimeLaunches(stream, copies, [&](int c) { Launch<16, 32, 4, 0, M>(x, tiled[c], nullptr, nullptr, y, rows, s.K, s.N, splits, workspace, stream); });
          const double t8 = TimeLaunches(stream, copies, [&](int c) { Launch<8, 32, 4, 0, M>(x, quantized[c], scales[c], nullptr, y, rows, s.K, s.N, splits, workspace, stream); });
          const double t4 = TimeLaunches(stream, copies, [&](int c) { Launch<4, 32, 4, 0, M>(x, quantized4[c], scales4[c], zeros4[c], y, rows, s.K, s.N, splits, workspace, stream); });
          const double t8c = TimeLaunches(stream, copies, [&](int c) { Launch<8, 32, 4, 2, M>(x, quantized[c], scales[c], nullptr, y, rows, s.K, s.N, splits, workspace, stream); });
          double w16 = 0, w8 = 0;
          if (s.N % kBN<32, 8> == 0) {
            const int wideSplits = std::min(mostSplits, SplitsFor(s.N, s.K, props.multiProcessorCount, kBN<32, 8>, 2));
            w16 = TimeLaunches(stream, copies, [&](int c) { Launch<16, 32, 8, 0, M>(x, tiled[c], nullptr, nullptr, y, rows, s.K, s.N, wideSplits, workspace, stream); });
            w8 = TimeLaunches(stream, copies, [&](int c) { Launch<8, 32, 8, 0, M>(x, quantized[c], scales[c], nullptr, y, rows, s.K, s.N, wideSplits, workspace, stream); });
          }
          std::printf("%-15s %-8s %6d %6d %4d mode %d 4x32: fp16 %.2f, int8 %.2f, int4 %.2f (diffs %.2e %.2e %.2e); int8 copies %.2f; 8x32 fp16 %.2f, int8 %.2f\n", s.model,
                      s.product, s.N, s.K, rows, M, t16, t8, t4, d16, d8, d4, t8c, w16, w8);
          std::fprintf(json,
                       ",\n  {\"model\": \"%s\", \"product\": \"%s\", \"rows\": %d, \"mode\": %d, \"fp16_us\": %.3f, \"int8_us\": %.3f, \"int4_us\": %.3f, "
                       "\"fp16_relative_difference\": %.3e, \"int8_relative_difference\": %.3e, \"int4_relative_difference\": %.3e, \"int8_copies_us\": %.3f, "
                       "\"fp16_8x32_us\": %.3f, \"int8_8x32_us\": %.3f}",
                       s.model, s.product, rows, M, t16, t8, t4, d16, d8, d4, t8c, w16, w8);
        });
        // Warpgroup products (int8), with 2 blocks a multiprocessor's parts of K.
        LaunchWgmma(x, quantized[0], scales[0], y, rows, s.K, s.N, splits, workspace, stream);
        Check(cudaStreamSynchronize(stream), "the first wgmma product");
        const double dw = Difference(y, yRef, outputs);
        const double tw = TimeLaunches(stream, copies, [&](int c) { LaunchWgmma(x, quantized[c], scales[c], y, rows, s.K, s.N, splits, workspace, stream); });
        const double twc = TimeLaunches(stream, copies, [&](int c) { LaunchWgmma<2>(x, quantized[c], scales[c], y, rows, s.K, s.N, splits, workspace, stream); });
        std::printf("%-15s %-8s %6d %6d %4d wgmma int8: %.2f (diff %.2e); copies %.2f\n", s.model, s.product, s.N, s.K, rows, tw, dw, twc);
        // The engine's kernel (src/native/quant-wgmma.cu) on the same bytes as QuantLinear keeps them
        // (rows of K bytes, a scale a row and 256 values; gate and up as one gated product), timed alone.
        if (rows == 64) {
          const bool gated = std::string(s.product) == "gate+up";
          const int blockSize = 256;
          chorus::QuantLinearArgs qa{};
          qa.x = x;
          qa.scales = nullptr;
          qa.y = y;
          qa.rows = rows;
          qa.in = s.K;
          qa.out = gated ? s.N / 2 : s.N;
          qa.bits = 8;
          qa.blockSize = blockSize;
          qa.blocks = s.K / blockSize;
          qa.blobBytes = blockSize;
          qa.activation = gated ? chorus::Activation::kSilu : chorus::Activation::kNone;
          qa.type = chorus::FloatType::kFloat16;
          qa.gated = gated;
          std::vector<void*> engineOwned;
          __half* blockScales = static_cast<__half*>(bench::Zeros(static_cast<size_t>(s.N) * qa.blocks * sizeof(__half), engineOwned));
          bench::FillKernel<__half><<<256, 256, 0, stream>>>(blockScales, static_cast<size_t>(s.N) * qa.blocks, 5u, 0.01f);
          qa.scales = blockScales;
          const auto engine = [&](int c) {
            chorus::QuantLinearArgs b = qa;
            b.weight = quantized[c];
            if (!chorus::QuantWgmmaDevice(b, props.multiProcessorCount, stream)) {
              std::fprintf(stderr, "the engine's kernel declined %s\n", s.product);
              std::exit(2);
            }
          };
          engine(0);
          Check(cudaStreamSynchronize(stream), "the engine's kernel");
          const double te = TimeLaunches(stream, copies, engine);
          std::printf("%-15s %-8s %6d %6d %4d engine wgmma int8%s: %.2f\n", s.model, s.product, s.N, s.K, rows, gated ? " (gated)" : "", te);
          std::fprintf(json, ",\n  {\"model\": \"%s\", \"product\": \"%s\", \"rows\": %d, \"engine_wgmma_int8_us\": %.3f, \"gated\": %s}", s.model, s.product, rows, te,
                       gated ? "true" : "false");
          for (void* p : engineOwned) cudaFree(p);
        }
        std::fprintf(json, ",\n  {\"model\": \"%s\", \"product\": \"%s\", \"rows\": %d, \"wgmma_int8_us\": %.3f, \"wgmma_int8_relative_difference\": %.3e, \"wgmma_int8_copies_us\": %.3f}",
                     s.model, s.product, rows, tw, dw, twc);
      }
      for (void* p : owned) cudaFree(p);
    }
    for (__half* w : weights) cudaFree(w);
    for (__half* w : tiled) cudaFree(w);
    for (unsigned char* q : quantized) cudaFree(q);
    for (unsigned char* q : quantized4) cudaFree(q);
    for (__half* h : scales) cudaFree(h);
    for (__half* h : scales4) cudaFree(h);
    for (__half* h : zeros4) cudaFree(h);
    cudaFree(dequantized);
    cudaFree(dequantized4);
  }
  std::fprintf(json, "\n ]\n}\n");
  std::fclose(json);
  return 0;
}
