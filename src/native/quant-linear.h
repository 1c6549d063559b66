// QuantLinear (domain `chorus`): a projection of weights quantized as ONNX Runtime's MatMulNBits
// (com.microsoft) stores them, with the bias and activation of the addon's Linear.
//   inputs   A [..., K]
//            B uint8 [N, blocks, blob]        blocks = ceil(K / block_size), blob = block_size * bits / 8;
//                                             element k of output n is bits wide at bit (k % block) * bits of
//                                             its block (4 bits: the low nibble first)
//            scales [N, blocks] (or [N * blocks])   of A's float type
//            zero_points uint8                optional: [N, ceil(blocks * bits / 8)], packed as the weights
//                                             (absent: 2^(bits - 1))
//            g_idx int32 [K]                  optional, refused (act-order checkpoints are reordered at build)
//            bias [N]                         optional
//            residual [..., K], norm [K]      optional: a pre-norm, as Linear's (linear.h): the product is
//                                             taken of RMSNorm(A + residual) * norm (no residual: of
//                                             RMSNorm(A) * norm), epsilon the attribute norm_epsilon
//   outputs  Y [..., N] = activation(A @ ((B - zero_points) * scales)^T + bias)
//            sum [..., K]                     optional, with a pre-norm: A + residual (rounded), the
//                                             residual stream's next value
//   attributes  K, N, bits (4 or 8), block_size (a power of 2, at least 16), activation as Linear's,
//               gated as Linear's (1: B's N rows are a gated MLP's gate rows then its up rows, bias
//               likewise, and Y [..., N / 2] = activation(gate product) * up product, each rounded as
//               Linear's gated products are),
//               accuracy_level (MatMulNBits': 4 takes int8 activations for 8-bit weights on the CPU, where
//               the CPU has AVX2; 0 or absent, float activations; CUDA ignores it)
// The sum is taken in float32 and rounded as Linear rounds it (once with its bias, again after the
// activation). With int8 activations each row of A is quantized per block of the weights first
// (quant-linear-int8.cc).
// On CUDA up to kQuantRowsKernelRows rows (decode steps) run as one kernel that reads each weight byte
// once for all rows and dequantizes in registers: up to kQuantWideRows rows of float16 in float16
// arithmetic (4 bits; 8 bits one row, or 2 to 4 rows of K under 4096; CHORUS_QUANT_BYTE_PAIRS=0, when a
// session is made: 8 bits as bfloat16's), or of 8-bit weights in float32 arithmetic (bfloat16, and
// float16 rows the float16 kernel does not take) with K of 4096 or more, the wide kernels (Linear's layout of work: 4 or 8
// outputs a block, 16 bytes of each weight row a thread);
// otherwise in float16 (and 4-bit bfloat16) on tensor cores
// (quant-mma.cu; K and block_size multiples of 32), else with float32 multiply-adds one warp an output
// (CHORUS_QUANT_GEMV=wide|mma|plain names the first of them to try, when a session is made;
// CHORUS_QUANT_HOST=avx2 takes the host's AVX2 int8 products where it has AVX-512 VNNI); more rows of
// float16 (and 4-bit bfloat16), up to kQuantTileRows, run on tensor cores with the weights dequantized
// in registers against x staged in shared memory (quant-mma-tiles.cu: K split over a cluster of blocks,
// the gate in the epilogue; 4 warps a block, CHORUS_QUANT_TILE_WARPS=8 when a session is made: 8; the
// weights read ahead through stages in shared memory where that is faster, CHORUS_QUANT_TILE_PIPE);
// where those do not take them (CHORUS_QUANT_TILES=wmma: never), as tensor-core tiles of weights dequantized in shared memory
// (the K axis split across blocks until the GPU is full, the partial sums joined by a last launch that
// adds the bias and takes the activation); anything larger (prefills) dequantizes the weights once into
// scratch memory and runs Linear's GEMM. Scratch memory is one buffer per CUDA stream, grown in a run that is not being
// captured (so that a captured run of a shape that ran before allocates nothing) and kept for the life
// of the process (graphs captured earlier still point at the buffers it outgrew).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels.h"
#include "linear.h"

namespace chorus {

struct QuantLinearArgs {
  const void* x;
  const uint8_t* weight;
  const void* scales;
  const uint8_t* zeroPoints;  // null: 2^(bits - 1)
  const void* bias;           // null: none
  void* y;
  int rows;
  int in;   // K
  int out;  // N (gated: N / 2, the weights' rows 2 * out)
  int bits;
  int blockSize;
  int blocks;    // ceil(K / blockSize)
  int blobBytes; // blockSize * bits / 8
  Activation activation;
  FloatType type;
  bool int8Activations;  // accuracy_level 4: int8 activations for 8-bit weights on the host
  bool int8Avx2;         // those on AVX2 even where the CPU has AVX-512 VNNI (CHORUS_QUANT_HOST=avx2)
  bool tileWarps8;       // the many-row tiles at 8 warps of one fragment (CHORUS_QUANT_TILE_WARPS=8)
  int tilePipe;          // the many-row tiles' weights through stages in shared memory: 1 always, 0 never (registers), -1 where
                         // they measured faster (CHORUS_QUANT_TILE_PIPE=1, 0, unset)
  bool bytesAsFloats;    // 8-bit float16 steps in float32 arithmetic, not float16 pairs (CHORUS_QUANT_BYTE_PAIRS=0)
  bool gated;            // y = activation(product of row o) * product of row out + o
  int pairThreads;       // the float16 decode kernels' most threads a block, a thread a chunk (CHORUS_QUANT_PAIR_THREADS; 0: PairThreads' choice)
  // A pre-norm (norm given), as LinearArgs': x is the stream's new delta, the product is taken of
  // RMSNorm(x + residual) * norm, and sum (where given) receives x + residual.
  const void* residual;
  const void* norm;
  void* sum;
  float epsilon;
};

// The zero point of output n's block b (packed as MatMulNBits packs them), on the host and the device.
CHORUS_HOST_DEVICE inline int QuantZeroPoint(const QuantLinearArgs& a, int n, int b) {
  if (a.zeroPoints == nullptr) return 1 << (a.bits - 1);
  if (a.bits == 8) return a.zeroPoints[static_cast<size_t>(n) * a.blocks + b];
  const uint8_t packed = a.zeroPoints[static_cast<size_t>(n) * ((a.blocks + 1) / 2) + b / 2];
  return (b & 1) ? packed >> 4 : packed & 15;
}

// The quantized value of output n's element k.
CHORUS_HOST_DEVICE inline int QuantValue(const QuantLinearArgs& a, int n, int k) {
  const int b = k / a.blockSize;
  const int j = k % a.blockSize;
  const uint8_t* row = a.weight + (static_cast<size_t>(n) * a.blocks + b) * a.blobBytes;
  if (a.bits == 8) return row[j];
  const uint8_t byte = row[j / 2];
  return (j & 1) ? byte >> 4 : byte & 15;
}

// Host: y of x on host memory, its outputs shared among `parallel`'s workers (kernels.h). Neither gated
// nor pre-normed: the operator runs a gated product as its two products, then the gate, and a pre-norm
// as Linear's pass first.
void QuantLinearHost(const QuantLinearArgs& args, ParallelRunner parallel, void* context);

#ifdef CHORUS_WITH_CUDA
// The most rows the dequantizing GEMV takes, and the most the tensor-core tiles take (16-bit types).
constexpr int kQuantRowsKernelRows = 8;
constexpr int kQuantTileRows = 128;

// Device: how many splits of K the tiles take for `args` on a device of `multiprocessors` SMs, and the
// scratch bytes they need (their float32 partial sums).
int QuantTileSplits(const QuantLinearArgs& args, int multiprocessors);
size_t QuantTileScratchBytes(const QuantLinearArgs& args, int splits);
// Device: y of x for at most kQuantRowsKernelRows rows, on `stream`.
void QuantRowsDevice(const QuantLinearArgs& args, void* stream);
// Device: the same by the wide kernels (4 or 8 weight rows a block, as Linear's; at most kQuantWideRows
// rows of x; 8 bits: float16 of K a multiple of 16, and bfloat16 of K at least 4096 and a multiple of
// 16; 4 bits: float16, K a multiple of 32, block_size at least 32); false, running nothing, where they
// do not take the product. They alone take gated args (the other kernels run the two products ungated
// into scratch rows, then Linear's GatedDevice); of args with a pre-norm, the float16 ones alone take
// them (the others need Linear's pre-norm pass first).
constexpr int kQuantWideRows = 4;
// Where the wide kernel of float32 arithmetic takes 8-bit weights (bfloat16, and float16 where
// args.bytesAsFloats) by default (the tensor-core GEMV the others): one row of K
// from half of kWideLeastIn; 2 to 4 rows gated from kWideLeastIn, ungated of K 2048 (`anyWidth`: whatever
// K and rows, for CHORUS_QUANT_GEMV=wide).
constexpr int kWideLeastIn = 4096;
bool QuantWideRowsDevice(const QuantLinearArgs& args, void* stream, bool anyWidth = false);
// Device: the same on tensor cores, where it takes them (float16, or bfloat16 of 4 bits; K and
// block_size multiples of 32; x and the weights 16-byte aligned); false, running nothing, where not.
bool QuantMmaRowsDevice(const QuantLinearArgs& args, void* stream);
// Device: y of x on tensor cores with the weights dequantized in registers, x staged in shared memory,
// K split over clusters of blocks (quant-mma-tiles.cu), gated args' gate in the epilogue, where it
// takes them (float16, or bfloat16 of 4 bits; K a multiple of 16; no pre-norm; x and the weights
// 16-byte aligned); false, running nothing, where not. `multiprocessors`: the device's.
bool QuantMmaTilesDevice(const QuantLinearArgs& args, int multiprocessors, void* stream);
// Device: y of x on Hopper's warpgroup instructions (quant-wgmma.cu), where it takes them: 8-bit
// weights, float16, 17 to 64 rows, no pre-norm, K and block_size multiples of 64, outputs a multiple of
// 128 (gated: 64), on a GPU of compute capability 9.0; false where it does not (nothing launched).
bool QuantWgmmaDevice(const QuantLinearArgs& args, int multiprocessors, void* stream);
// Device: y of x by tensor-core tiles in `splits` splits (float16 or bfloat16; at most kQuantTileRows
// rows), the partial sums in `scratch` (QuantTileScratchBytes), on `stream`.
void QuantTilesDevice(const QuantLinearArgs& args, int splits, void* scratch, void* stream);
// Device: the dequantized weights [N, K] of the float type into `weights`, on `stream`.
void DequantizeDevice(const QuantLinearArgs& args, void* weights, void* stream);
#endif

}  // namespace chorus
