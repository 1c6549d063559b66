// A whole BART decoder step in one persistent kernel, on its own: what a greedy step of bart-large at
// batch 32 costs when it is not a chain of 170 launches. One block per SM; the step's phases (each
// layer's q/k/v product, self-attention, output product, cross-attention query, cross-attention, its
// output product, fc1 with GELU, fc2, then the head and the argmax) are separated by a barrier over the
// grid. Each block's share of the next product's weights is copied into shared memory (bulk copies) while
// the current phase runs, so a product waits only on its activations, which every block copies in whole.
// Products run on tensor cores (mma.m16n8k16, float32 sums), with the weights packed for that at load.
//
// It checks itself against a reference made of one plain kernel per operation, with the same rounding
// points (each product rounded once after its bias, residual sums rounded before the norm, attention's
// softmax in float32), on random weights of bart-large's shapes: the hidden states of the first step,
// then the tokens of 8 steps. Then it times a barrier alone, and steps (one launch each, and 64 in one
// launch) in four variants: every block norming all rows before its product; the norm taken once a row
// (32 blocks, then a barrier); that with the next-but-one product's weights pulled into L2; that with the
// layer's cross caches pulled into L2 during self-attention. For each it prints block 0's clock at marks
// inside layer 6, and for the first the time between barriers by phase.
// A second design, the clustered step (ClusterStepKernel below), takes each head in a group of 8 blocks, so
// that a layer needs 6 barriers over the grid instead of 11; it is checked and timed the same way.
//   bash bench/gpu/decoder-step/build.sh, then on the GPU host: ./build/decoder-step [out.json]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "../../../src/native/device.cuh"

namespace {

using chorus::Widen8;

constexpr int kD = 1024;       // model width
constexpr int kHeads = 16;     // heads
constexpr int kHeadDim = 64;   // head width
constexpr int kF = 4096;       // fc1 width
constexpr int kLayers = 12;    // decoder layers
constexpr int kVocab = 50265;  // bart's vocabulary
constexpr int kMaxRows = 32;   // rows a step (two m16 tiles)
constexpr int kThreads = 256;  // 8 warps a block
constexpr int kWarps = kThreads / 32;
constexpr int kTileBytes = 16 * 1024;  // one packed n8 x k1024 weight tile
constexpr int kXPitch = kD + 8;        // halves a row of X in shared memory (16 bytes of skew)
constexpr int kBufferBytes = 4 * kTileBytes;
constexpr int kXBytes = kMaxRows * kXPitch * 2;
constexpr int kScratchBytes = 8 * 1024;
constexpr int kSharedBytes = 2 * kBufferBytes + kXBytes + kScratchBytes;

void Check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
  std::exit(2);
}

// ---------------------------------------------------------------------------------------------------
// Device helpers: shared-memory addresses, mbarriers, bulk copies, the grid barrier, mma.

__device__ inline unsigned SharedAddress(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__device__ inline void MbarInit(uint64_t* bar) { asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SharedAddress(bar)) : "memory"); }

__device__ inline void MbarExpect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SharedAddress(bar)), "r"(bytes) : "memory");
}

__device__ inline void BulkCopy(void* to, const void* from, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(SharedAddress(to)), "l"(from), "r"(bytes),
               "r"(SharedAddress(bar))
               : "memory");
}

// A watchdog for the waits below: a block that waits for more than two seconds records where (stuck[block]:
// 1 << 24 | the mbarrier's shared address, or 2 << 24 | the grid barrier's target) and exits, so that a hang
// ends the kernel with a record instead of holding the GPU.
__device__ unsigned stuck[256];

__device__ inline unsigned long long Clock() {
  unsigned long long now;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(now));
  return now;
}

// Called on every spin of a wait: every 1,024th reads the clock, and past two seconds from the first
// reading records `where` and exits.
struct Watchdog {
  unsigned spins = 0;
  unsigned long long since = 0;
  __device__ void Tick(unsigned where) {
    if ((++spins & 1023) != 0) return;
    if (since == 0) {
      since = Clock();
    } else if (Clock() - since > 2000000000ull) {
      stuck[blockIdx.x] = where;
      __threadfence();
      asm volatile("exit;");
    }
  }
};

__device__ inline void MbarWait(uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  Watchdog watchdog;
  for (;;) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(SharedAddress(bar)), "r"(parity)
        : "memory");
    if (done) break;
    watchdog.Tick(1u << 24 | SharedAddress(bar));
  }
}

// A barrier over the whole grid: a counter that only grows; the n-th barrier waits for n x blocks.
__device__ inline void ProxyFence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ inline void GridBarrier(unsigned* counter, unsigned target) {
  ProxyFence();
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    unsigned seen = 0;
    Watchdog watchdog;
    for (;;) {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      if (seen >= target) break;
      watchdog.Tick(2u << 24 | (target & 0xffffff));
    }
    __threadfence();
  }
  __syncthreads();
}

__device__ inline void Mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline void LoadMatrix(unsigned* a, const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(SharedAddress(p)));
}

// One packed weight vector `w` (two k16 steps of an n8 tile, this lane's B fragments) against X's
// inputs k.. k + 32 for the first mTiles m16 tiles of rows, summed into acc[m].
// `pitch`: halves a row of X.
__device__ inline void MmaPair(float (*acc)[4], const __half* x, int k, uint4 w, int mTiles, int lane, int pitch = kXPitch) {
#pragma unroll
  for (int m = 0; m < 2; m++) {
    if (m >= mTiles) break;
    unsigned a[4];
    const __half* row = x + (m * 16 + lane % 16) * pitch + k + (lane / 16) * 8;
    LoadMatrix(a, row);
    Mma(acc[m], a, w.x, w.y);
    LoadMatrix(a, row + 16);
    Mma(acc[m], a, w.z, w.w);
  }
}

__device__ inline float Round(float x) { return __half2float(__float2half_rn(x)); }
__device__ inline float Gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

// A residual sum as PyTorch rounds it (a half addition), and one element of its LayerNorm (float32,
// rounded once).
__device__ inline float RoundedSum(__half a, __half b) { return Round(__half2float(a) + __half2float(b)); }
__device__ inline __half Normed(float h, float mean, float scale, __half gain, __half bias) {
  return __float2half_rn((h - mean) * scale * __half2float(gain) + __half2float(bias));
}

// A (logit, token) candidate as one key: the largest key is the largest logit, the lowest token among
// equal logits (-0 counted as +0).
__device__ inline unsigned long long RankKey(float logit, int token) {
  unsigned bits = __float_as_uint(logit + 0.0f);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<unsigned long long>(bits) << 32) | static_cast<unsigned>(~token);
}
__device__ inline int TokenOf(unsigned long long key) { return static_cast<int>(~static_cast<unsigned>(key)); }

// The dot product of a lane's 8 query values with the 8 halves of a key vector.
__device__ inline float Dot8(const float* q, uint4 bits) {
  float k[8];
  Widen8(bits, k);
  float dot = 0;
#pragma unroll
  for (int e = 0; e < 4; e++) dot += q[2 * e] * k[2 * e] + q[2 * e + 1] * k[2 * e + 1];
  return dot;
}

// ---------------------------------------------------------------------------------------------------
// The model as the step kernel sees it.

struct Layer {
  const uint4* qkv;  // packed: 384 tiles
  const __half* qkvBias;
  const uint4* out;  // 128 tiles
  const __half* outBias;
  const __half* norm1Gain;
  const __half* norm1Bias;
  const uint4* crossQuery;  // 128 tiles
  const __half* crossQueryBias;
  const uint4* crossOut;  // 128 tiles
  const __half* crossOutBias;
  const __half* norm2Gain;
  const __half* norm2Bias;
  const uint4* fc1;  // 512 tiles
  const __half* fc1Bias;
  const uint4* fc2;  // 512 tiles: column group g (32 wide), quarter q of the inputs, n8 tile s at (g * 4 + q) * 4 + s
  const __half* fc2Bias;
  const __half* norm3Gain;
  const __half* norm3Bias;
  __half* selfKey;  // [rows][heads][capacity][64]
  __half* selfValue;
  // The same weights packed for the clustered step: block b's share of a product contiguous, at b x its bytes.
  const uint4* qkvChunks;
  const uint4* outChunks;
  const uint4* crossQueryChunks;
  const uint4* crossOutChunks;
  const uint4* fc1Chunks;
  const uint4* fc2Chunks;
  const __half* crossKey;  // [rows][heads][source][64]
  const __half* crossValue;
};

struct Step {
  Layer layers[kLayers];
  const __half* embed;  // [vocab][1024]
  const __half* positions;  // [positions + 2][1024]
  const __half* embedNormGain;
  const __half* embedNormBias;
  const uint4* head;  // packed: ceil(vocab / 8) tiles
  const __half* logitsBias;  // [vocab]
  int rows, source, capacity;
  int* tokens;   // [rows] the tokens this step reads
  int* lengths;  // [rows] positions so far
  int* emitted;  // [steps][rows]
  __half* residual[2];  // [rows][1024] each, taken in turn
  __half* qkv;          // [rows][3072]
  __half* attention;    // [rows][1024]
  __half* projected;    // [rows][1024]
  __half* query;        // [rows][1024]
  __half* hidden;       // [rows][4096]
  float* fc2Partial;    // [4][rows][1024]
  unsigned* fc2Arrived; // [32]
  __half* sum;          // [rows][1024] a split product's sums with the residual: the next norm's input (clustered step)
  float* partials;      // [16 groups][8 blocks][32 rows][64] (clustered step)
  unsigned long long* best;  // [blocks][32]: each block's best candidate a row (RankKey)
  unsigned* barrier;
  unsigned* groupBarrier;  // [16] the clustered step's groups
  unsigned long long* trace;  // [240]: block 0's clock leaving each barrier of a step, and at marks inside layer 6 from [200] (null: none)
};

// Where a block's shared memory goes.
struct Shared {
  unsigned char* buffer[2];  // weights of the product now and of the next one
  __half* x;                 // the product's input, [rows][kXPitch]
  float* scratch;            // small sums
  uint64_t* bars;            // [2] buffer arrivals, [2..10) the head's warp slots, [10..12) cross-attention stages,
                             // [12..16) self-attention's warps, [16] X
};

// The n8 tiles of one product that this block takes: [first, first + count), inputs starting at column k0.
struct Share {
  int first, count, k0;
};

__device__ inline Share ShareOf(int tiles, int blocks) {
  Share s;
  const int b = blockIdx.x;
  s.first = static_cast<int>((static_cast<long long>(tiles) * b) / blocks);
  s.count = static_cast<int>((static_cast<long long>(tiles) * (b + 1)) / blocks) - s.first;
  s.k0 = 0;
  return s;
}

// fc2: blocks 0..127 each take a 32-wide column group and a quarter of the 4096 inputs.
__device__ inline Share Fc2Share() {
  Share s;
  const int b = blockIdx.x;
  s.first = b < 128 ? 4 * b : 0;
  s.count = b < 128 ? 4 : 0;
  s.k0 = (b % 4) * 1024;
  return s;
}

// Starts copying this block's tiles of a product into a buffer.
__device__ inline void Prefetch(const uint4* tiles, Share s, unsigned char* buffer, uint64_t* bar) {
  if (threadIdx.x != 0 || s.count == 0) return;
  const unsigned bytes = s.count * kTileBytes;
  MbarExpect(bar, bytes);
  BulkCopy(buffer, reinterpret_cast<const unsigned char*>(tiles) + static_cast<size_t>(s.first) * kTileBytes, bytes, bar);
}

// Copies rows of `from` (columns k0.. k0 + 1024, rows `pitch` apart; row r at rowOf(r)) into X with bulk
// copies arriving on `bar`: warp 0's lane r copies row r. Rows past `rows` are zeroed.
template <class RowOf>
__device__ inline void StageX(__half* x, RowOf rowOf, int rows, uint64_t* bar) {
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) MbarExpect(bar, rows * kD * 2);
    __syncwarp();
    if (threadIdx.x < rows) BulkCopy(x + threadIdx.x * kXPitch, rowOf(threadIdx.x), kD * 2, bar);
  }
  for (int i = threadIdx.x; i < (kMaxRows - rows) * (kD / 8); i += kThreads) {
    const int r = rows + i / (kD / 8);
    *reinterpret_cast<uint4*>(x + r * kXPitch + 8 * (i % (kD / 8))) = make_uint4(0, 0, 0, 0);
  }
}

__device__ inline void WaitX(uint64_t* bar, unsigned* parity) {
  MbarWait(bar, *parity);
  *parity ^= 1;
  __syncthreads();
}

// X = LayerNorm(a + b) row by row (the sum rounded to half first, the norm in float32, rounded once);
// block r writes row r to `out` as well. a's rows were staged into X (StageX); each warp reads its rows
// of b into registers while they arrive, then takes the norm in place.
template <class RowB>
__device__ inline void NormX(__half* x, RowB rowB, const __half* gain, const __half* bias, __half* out, int rows, uint64_t* bar, unsigned* parity) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  constexpr int kPer = kMaxRows / kWarps;
  uint4 bv[kPer][4];
#pragma unroll
  for (int k = 0; k < kPer; k++) {
    const int r = warp + k * kWarps;
    if (r < rows) {
      const uint4* b = reinterpret_cast<const uint4*>(rowB(r));
#pragma unroll
      for (int i = 0; i < 4; i++) bv[k][i] = b[lane + 32 * i];
    }
  }
  MbarWait(bar, *parity);
  *parity ^= 1;
#pragma unroll
  for (int k = 0; k < kPer; k++) {
    const int r = warp + k * kWarps;
    if (r >= rows) continue;
    __half* to = x + r * kXPitch;
    float h[32];
    float sum = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const uint4 av = *reinterpret_cast<const uint4*>(to + 8 * (lane + 32 * i));
      const __half* a = reinterpret_cast<const __half*>(&av);
      const __half* b = reinterpret_cast<const __half*>(&bv[k][i]);
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        h[8 * i + e] = RoundedSum(a[e], b[e]);
        h[8 * i + e + 1] = RoundedSum(a[e + 1], b[e + 1]);
        sum += h[8 * i + e] + h[8 * i + e + 1];
      }
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float mean = sum / kD;
    float squares = 0;
#pragma unroll
    for (int i = 0; i < 32; i++) squares += (h[i] - mean) * (h[i] - mean);
    for (int o = 16; o > 0; o >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, o);
    const float scale = rsqrtf(squares / kD + 1e-5f);
    const bool writes = out != nullptr && blockIdx.x == r;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int v = lane + 32 * i;
      const uint4 gv = reinterpret_cast<const uint4*>(gain)[v];
      const uint4 cv = reinterpret_cast<const uint4*>(bias)[v];
      const __half* g = reinterpret_cast<const __half*>(&gv);
      const __half* c = reinterpret_cast<const __half*>(&cv);
      uint4 result;
      __half* y = reinterpret_cast<__half*>(&result);
#pragma unroll
      for (int e = 0; e < 8; e++) y[e] = Normed(h[8 * i + e], mean, scale, g[e], c[e]);
      *reinterpret_cast<uint4*>(to + 8 * v) = result;
      if (writes) reinterpret_cast<uint4*>(out + static_cast<size_t>(r) * kD)[v] = result;
    }
  }
  __syncthreads();
}

// out = LayerNorm(a + b), row r by block r (4 elements a thread): the norm taken once a row, for the
// blocks' products to copy in after a barrier.
template <class RowA, class RowB>
__device__ inline void NormRows(RowA rowA, RowB rowB, const __half* gain, const __half* bias, __half* out, int rows, float* scratch) {
  const int r = blockIdx.x;
  if (r >= rows) return;
  const int t = threadIdx.x;
  const uint2 av = reinterpret_cast<const uint2*>(rowA(r))[t];
  const uint2 bv = reinterpret_cast<const uint2*>(rowB(r))[t];
  const uint2 gv = reinterpret_cast<const uint2*>(gain)[t];
  const uint2 cv = reinterpret_cast<const uint2*>(bias)[t];
  const __half* a = reinterpret_cast<const __half*>(&av);
  const __half* b = reinterpret_cast<const __half*>(&bv);
  const __half* g = reinterpret_cast<const __half*>(&gv);
  const __half* c = reinterpret_cast<const __half*>(&cv);
  float h[4];
  float sum = 0;
#pragma unroll
  for (int e = 0; e < 4; e++) {
    h[e] = RoundedSum(a[e], b[e]);
    sum += h[e];
  }
  const int warp = t / 32;
  const int lane = t % 32;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) scratch[warp] = sum;
  __syncthreads();
  sum = 0;
#pragma unroll
  for (int w = 0; w < kWarps; w++) sum += scratch[w];
  const float mean = sum / kD;
  float squares = 0;
#pragma unroll
  for (int e = 0; e < 4; e++) squares += (h[e] - mean) * (h[e] - mean);
  for (int o = 16; o > 0; o >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, o);
  if (lane == 0) scratch[kWarps + warp] = squares;
  __syncthreads();
  squares = 0;
#pragma unroll
  for (int w = 0; w < kWarps; w++) squares += scratch[kWarps + w];
  const float scale = rsqrtf(squares / kD + 1e-5f);
  uint2 result;
  __half* y = reinterpret_cast<__half*>(&result);
#pragma unroll
  for (int e = 0; e < 4; e++) y[e] = Normed(h[e], mean, scale, g[e], c[e]);
  reinterpret_cast<uint2*>(out + static_cast<size_t>(r) * kD)[t] = result;
}

// A warp's part of a product: four packed weight vectors (two k16 steps each, at packed[p x 32 + lane])
// against X's inputs k0.. k0 + 128, for the first mTiles m16 tiles of rows; then the sums ([row 0..31][col
// 0..7] float) over the 2 KB the warp read them from.
__device__ inline void WarpQuad(unsigned char* packed, const __half* x, int pitch, int k0, int mTiles, int lane) {
  uint4 w[4];
#pragma unroll
  for (int p = 0; p < 4; p++) w[p] = reinterpret_cast<const uint4*>(packed)[p * 32 + lane];
  float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
  for (int p = 0; p < 4; p++) MmaPair(acc, x, k0 + p * 32, w[p], mTiles, lane, pitch);
  __syncwarp();
  float* sums = reinterpret_cast<float*>(packed);
#pragma unroll
  for (int m = 0; m < 2; m++) {
    const int r = m * 16 + lane / 4;
    const int c = (lane % 4) * 2;
    sums[r * 8 + c] = acc[m][0];
    sums[r * 8 + c + 1] = acc[m][1];
    sums[(r + 8) * 8 + c] = acc[m][2];
    sums[(r + 8) * 8 + c + 1] = acc[m][3];
  }
}

enum class Epilogue { kBias, kBiasGelu, kPartial };

// One product phase: this block's n8 tiles (in `buffer`, arrived on `bar`) times X. Each warp sums an
// eighth of the inputs (128) of every tile, then writes its sums over the part of the tile it read; the
// block adds the eight in order. `column(t)` maps the block's t-th tile to its first output column.
template <Epilogue E, class Column>
__device__ inline void Product(const Shared& sm, Share s, uint64_t* bar, unsigned parity, int rows, const __half* bias, __half* out, int outPitch,
                               float* partial, Column column, unsigned char* buffer) {
  if (s.count == 0) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int mTiles = rows > 16 ? 2 : 1;
  MbarWait(bar, parity);
  for (int t = 0; t < s.count; t++) {
    WarpQuad(buffer + t * kTileBytes + warp * 2048, sm.x, kXPitch, warp * 128, mTiles, lane);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < s.count * kMaxRows * 8; i += kThreads) {
    const int t = i / (kMaxRows * 8);
    const int r = (i / 8) % kMaxRows;
    const int c = i % 8;
    if (r >= rows) continue;
    const float* sums = reinterpret_cast<const float*>(buffer + t * kTileBytes);
    float v = 0;
#pragma unroll
    for (int w = 0; w < kWarps; w++) v += sums[w * 512 + r * 8 + c];
    const int n = column(t) + c;
    if (E == Epilogue::kPartial) {
      partial[static_cast<size_t>(r) * kD + n] = v;
    } else {
      float y = Round(v + __half2float(bias[n]));
      if (E == Epilogue::kBiasGelu) y = Gelu(y);
      out[static_cast<size_t>(r) * outPitch + n] = __float2half_rn(y);
    }
  }
}

// Self-attention: warp w < 4 takes (row, head) pair first + w x stride (pair = row x heads + head). Its slot's keys and values
// before the row's position are bulk-copied into a 32 KB region of its own (the free weight buffer, then
// X); the new key and value go to the slot and to the region from q/k/v. Then 8 lanes a position score
// (16 bytes a lane), softmax in float32, and each lane sums two dimensions of the values.
__device__ inline void SelfAttention(const Step& st, const Layer& L, const Shared& sm, unsigned char* region0, unsigned char* region1,
                                     unsigned* parity, int step, int first, int stride) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int pair = first + warp * stride;
  if (warp >= 4 || pair >= st.rows * kHeads) return;
  float* scores = sm.scratch + warp * 256;
  uint64_t* bar = sm.bars + 12 + warp;
  __half* keys = reinterpret_cast<__half*>((warp < 2 ? region0 : region1) + (warp % 2) * 32768);
  __half* values = keys + 128 * kHeadDim;
  const int r = pair / kHeads;
  const int h = pair % kHeads;
  const int position = st.lengths[r] + step;
  const int n = position + 1;
  const size_t base = (static_cast<size_t>(r) * kHeads + h) * st.capacity * kHeadDim;
  if (lane == 0) {
    MbarExpect(bar, 2 * position * kHeadDim * 2);
    if (position > 0) {
      BulkCopy(keys, L.selfKey + base, position * kHeadDim * 2, bar);
      BulkCopy(values, L.selfValue + base, position * kHeadDim * 2, bar);
    }
  }
  const __half* q = st.qkv + static_cast<size_t>(r) * 3 * kD + h * kHeadDim;
  const __half2 kNew = __ldcg(reinterpret_cast<const __half2*>(q + kD) + lane);
  const __half2 vNew = __ldcg(reinterpret_cast<const __half2*>(q + 2 * kD) + lane);
  reinterpret_cast<__half2*>(L.selfKey + base + static_cast<size_t>(position) * kHeadDim)[lane] = kNew;
  reinterpret_cast<__half2*>(L.selfValue + base + static_cast<size_t>(position) * kHeadDim)[lane] = vNew;
  reinterpret_cast<__half2*>(keys + position * kHeadDim)[lane] = kNew;
  reinterpret_cast<__half2*>(values + position * kHeadDim)[lane] = vNew;
  // The slot is read by bulk copies at the next step.
  asm volatile("fence.proxy.async.global;" ::: "memory");
  const int part = lane % 8;
  const int group = lane / 8;
  float qf[8];
  Widen8(__ldcg(reinterpret_cast<const uint4*>(q) + part), qf);
  MbarWait(bar, *parity);
  *parity ^= 1;
  __syncwarp();
  float highest = -INFINITY;
  for (int j0 = 0; j0 < n; j0 += 4) {
    const int j = j0 + group;
    float dot = j < n ? Dot8(qf, reinterpret_cast<const uint4*>(keys + j * kHeadDim)[part]) : 0.0f;
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);
    dot += __shfl_xor_sync(0xffffffffu, dot, 2);
    dot += __shfl_xor_sync(0xffffffffu, dot, 4);
    dot *= 0.125f;
    if (j < n) {
      if (part == 0) scores[j] = dot;
      highest = fmaxf(highest, dot);
    }
  }
  for (int o = 16; o > 0; o >>= 1) highest = fmaxf(highest, __shfl_xor_sync(0xffffffffu, highest, o));
  __syncwarp();
  float total = 0;
  for (int j = lane; j < n; j += 32) {
    const float e = __expf(scores[j] - highest);
    scores[j] = e;
    total += e;
  }
  for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
  __syncwarp();
  float2 acc = make_float2(0, 0);
#pragma unroll 8
  for (int j = 0; j < n; j++) {
    const float2 v = __half22float2(reinterpret_cast<const __half2*>(values + j * kHeadDim)[lane]);
    acc.x += scores[j] * v.x;
    acc.y += scores[j] * v.y;
  }
  reinterpret_cast<__half2*>(st.attention + static_cast<size_t>(r) * kD + h * kHeadDim)[lane] = __floats2half2_rn(acc.x / total, acc.y / total);
  ProxyFence();
}

// Starts pulling this block's tiles of a later product into L2 (no shared memory).
__device__ inline void PrefetchL2(const uint4* tiles, Share s) {
  if (threadIdx.x != 0 || s.count == 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(reinterpret_cast<const unsigned char*>(tiles) + static_cast<size_t>(s.first) * kTileBytes),
               "r"(s.count * kTileBytes)
               : "memory");
}

// Starts pulling this block's cross-attention keys and values into L2.
__device__ inline void PrefetchCross(const Step& st, const Layer& L) {
  if (threadIdx.x != 0) return;
  const unsigned bytes = st.source * kHeadDim * 2;
  for (int pair = blockIdx.x; pair < st.rows * kHeads; pair += gridDim.x) {
    const size_t offset = static_cast<size_t>(pair) * st.source * kHeadDim;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(L.crossKey + offset), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(L.crossValue + offset), "r"(bytes) : "memory");
  }
}

// Cross-attention: `count` (row, head) pairs from `first`, `stride` apart, each pair's keys and values (32 KB each, head-major)
// copied into shared memory in two stages while the block works on the stage before.
__device__ inline void CrossAttention(const Step& st, const Layer& L, const Shared& sm, unsigned char* stage0, unsigned char* stage1, unsigned* parity,
                               int first, int stride, int count) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int S = st.source;
  const unsigned pairBytes = S * kHeadDim * 2;
  unsigned char* stages[2] = {stage0, stage1};
  uint64_t* bars = sm.bars + 10;
  const auto issue = [&](int pair, int which) {
    if (threadIdx.x != 0) return;
    const size_t offset = static_cast<size_t>(pair) * S * kHeadDim;
    MbarExpect(&bars[which], 2 * pairBytes);
    BulkCopy(stages[which], L.crossKey + offset, pairBytes, &bars[which]);
    BulkCopy(stages[which] + pairBytes, L.crossValue + offset, pairBytes, &bars[which]);
  };
  for (int round = 0; round < count; round++) {
    const int pair = first + round * stride;
    if (round == 0) issue(pair, 0);
    if (round + 1 < count) issue(pair + stride, (round + 1) % 2);
    const int which = round % 2;
    MbarWait(&bars[which], parity[which]);
    parity[which] ^= 1;
    const __half* keys = reinterpret_cast<const __half*>(stages[which]);
    const __half* values = keys + S * kHeadDim;
    const int r = pair / kHeads;
    const int h = pair % kHeads;
    const int part = lane % 8;
    const int group = lane / 8;
    float qf[8];
    Widen8(__ldcg(reinterpret_cast<const uint4*>(st.query + static_cast<size_t>(r) * kD + h * kHeadDim) + part), qf);
    float* scores = sm.scratch;  // S floats
    float* reduce = sm.scratch + 512;  // warps x 64 floats, then maxima and sums
    // Warp w scores positions w, w + 8, ... four at a time.
    float highest = -INFINITY;
    for (int j0 = warp * 4; j0 < S; j0 += kWarps * 4) {
      const int j = j0 + group;
      float dot = Dot8(qf, reinterpret_cast<const uint4*>(keys + j * kHeadDim)[part]);
      dot += __shfl_xor_sync(0xffffffffu, dot, 1);
      dot += __shfl_xor_sync(0xffffffffu, dot, 2);
      dot += __shfl_xor_sync(0xffffffffu, dot, 4);
      dot *= 0.125f;
      if (part == 0) scores[j] = dot;
      highest = fmaxf(highest, dot);
    }
    for (int o = 16; o > 0; o >>= 1) highest = fmaxf(highest, __shfl_xor_sync(0xffffffffu, highest, o));
    if (lane == 0) reduce[kWarps * 64 + warp] = highest;
    __syncthreads();
    highest = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; w++) highest = fmaxf(highest, reduce[kWarps * 64 + w]);
    // Warp w sums positions [w S/8, (w+1) S/8): group g takes every fourth, lane part its 8 dimensions.
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float total = 0;
    const int per = S / kWarps;
    for (int j = warp * per + group; j < (warp + 1) * per; j += 4) {
      const float p = __expf(scores[j] - highest);
      total += p;
      float v[8];
      Widen8(reinterpret_cast<const uint4*>(values + j * kHeadDim)[part], v);
#pragma unroll
      for (int e = 0; e < 8; e++) acc[e] += p * v[e];
    }
#pragma unroll
    for (int e = 0; e < 8; e++) {
      acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 8);
      acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 16);
    }
    total += __shfl_xor_sync(0xffffffffu, total, 8);
    total += __shfl_xor_sync(0xffffffffu, total, 16);
    if (group == 0) {
#pragma unroll
      for (int e = 0; e < 8; e++) reduce[warp * 64 + part * 8 + e] = acc[e];
    }
    if (lane == 0) reduce[kWarps * 64 + kWarps + warp] = total;
    __syncthreads();
    if (threadIdx.x < kHeadDim) {
      float sum = 0, all = 0;
#pragma unroll
      for (int w = 0; w < kWarps; w++) {
        sum += reduce[w * 64 + threadIdx.x];
        all += reduce[kWarps * 64 + kWarps + w];
      }
      st.attention[static_cast<size_t>(r) * kD + h * kHeadDim + threadIdx.x] = __float2half_rn(sum / all);
    }
    ProxyFence();
    __syncthreads();
  }
}

// The head: warp w of the block takes the block's tiles w, w + 8, ... through its own 16 KB slot, then
// each row's best (logit, token) over the block's tiles goes to `best` as one ordered key.
__device__ inline void Head(const Step& st, const Shared& sm, unsigned* slotParity) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int tiles = (kVocab + 7) / 8;
  const Share s = ShareOf(tiles, gridDim.x);
  unsigned char* slot = (warp < 4 ? sm.buffer[0] : sm.buffer[1]) + (warp % 4) * kTileBytes;
  uint64_t* bar = sm.bars + 2 + warp;
  const int mTiles = st.rows > 16 ? 2 : 1;
  // This lane's best candidate (RankKey) for each of its four rows.
  unsigned long long best[4] = {0, 0, 0, 0};
  const auto issue = [&](int t) {
    if (lane == 0) {
      MbarExpect(bar, kTileBytes);
      BulkCopy(slot, reinterpret_cast<const unsigned char*>(st.head) + static_cast<size_t>(s.first + t) * kTileBytes, kTileBytes, bar);
    }
  };
  if (warp < s.count) issue(warp);
  for (int t = warp; t < s.count; t += kWarps) {
    MbarWait(bar, *slotParity);
    const uint4* packed = reinterpret_cast<const uint4*>(slot);
    float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll 4
    for (int p = 0; p < 32; p++) MmaPair(acc, sm.x, p * 32, packed[p * 32 + lane], mTiles, lane);
    ProxyFence();
    __syncwarp();
    *slotParity ^= 1;
    if (t + kWarps < s.count) issue(t + kWarps);
    const int n0 = (s.first + t) * 8 + (lane % 4) * 2;
#pragma unroll
    for (int m = 0; m < 2; m++) {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int n = n0 + (i % 2);
        if (n >= kVocab) continue;
        const float logit = Round(Round(acc[m][i]) + __half2float(st.logitsBias[n]));
        const int k = m * 2 + i / 2;
        best[k] = max(best[k], RankKey(logit, n));
      }
    }
  }
  // The four lanes of a row, then the warps.
#pragma unroll
  for (int k = 0; k < 4; k++) {
    for (int o = 1; o < 4; o <<= 1) best[k] = max(best[k], __shfl_xor_sync(0xffffffffu, best[k], o));
  }
  unsigned long long* keys = reinterpret_cast<unsigned long long*>(sm.scratch);  // [warps][32]
  if (lane % 4 == 0) {
#pragma unroll
    for (int k = 0; k < 4; k++) keys[warp * 32 + (k / 2) * 16 + (k % 2) * 8 + lane / 4] = best[k];
  }
  __syncthreads();
  if (threadIdx.x < st.rows) {
    unsigned long long key = 0;
    for (int w = 0; w < kWarps; w++) key = max(key, keys[w * 32 + threadIdx.x]);
    st.best[blockIdx.x * kMaxRows + threadIdx.x] = key;
  }
}

// Every row's token from the blocks' candidates (8 threads a row, each over every 8th block, then the
// 8): into tokens[] of this block; block 0 also records them. (Positions move on at the launch's end:
// within it, step s of a row is at lengths[r] + s.)
__device__ inline void TakeTokens(const Step& st, int* tokens, int blocks, int step) {
  const int r = threadIdx.x / 8;
  const int part = threadIdx.x % 8;
  unsigned long long best = 0;
  if (r < st.rows) {
    unsigned long long keys[20];
#pragma unroll
    for (int i = 0; i < 20; i++) {
      const int b = part + 8 * i;
      keys[i] = b < blocks ? __ldcg(&st.best[b * kMaxRows + r]) : 0ull;
    }
#pragma unroll
    for (int i = 0; i < 20; i++) best = max(best, keys[i]);
  }
  for (int o = 1; o < 8; o <<= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  if (r < st.rows && part == 0) {
    const int id = TokenOf(best);
    tokens[r] = id;
    if (blockIdx.x == 0) {
      st.tokens[r] = id;
      st.emitted[step * st.rows + r] = id;
    }
  }
}

// Each row's token for step `step`: at the first step the given one, then the best of the blocks'
// candidates from the last step's head (every block takes them; block 0 records them).
__device__ inline void StepTokens(const Step& st, int* tokens, int blocks, int step) {
  if (step == 0) {
    if (threadIdx.x < st.rows) tokens[threadIdx.x] = st.tokens[threadIdx.x];
  } else {
    TakeTokens(st, tokens, blocks, step - 1);
  }
  __syncthreads();
}

// The block's dynamic shared memory laid out as Shared, with its `count` mbarriers initialized.
__device__ inline Shared LayOut(unsigned char* shared, uint64_t* bars, int count) {
  Shared sm;
  sm.buffer[0] = shared;
  sm.buffer[1] = shared + kBufferBytes;
  sm.x = reinterpret_cast<__half*>(shared + 2 * kBufferBytes);
  sm.scratch = reinterpret_cast<float*>(shared + 2 * kBufferBytes + kXBytes);
  sm.bars = bars;
  if (threadIdx.x < count) MbarInit(&bars[threadIdx.x]);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  return sm;
}

__global__ void __launch_bounds__(kThreads, 1) StepKernel(const Step* __restrict__ step_, int steps, unsigned barrierBase, int prefetchCross, int normOnce, int weightsL2) {
  const Step& st = *step_;
  extern __shared__ __align__(128) unsigned char shared[];
  __shared__ __align__(8) uint64_t bars[17];
  const Shared sm = LayOut(shared, bars, 17);
  unsigned parity[2] = {0, 0};  // buffer arrivals
  unsigned crossParity[2] = {0, 0};
  unsigned headParity = 0;
  unsigned selfParity = 0;
  unsigned xParity = 0;
  unsigned barriers = barrierBase;
  const unsigned blocks = gridDim.x;
  int traced = 0;
  const auto sync = [&]() {
    GridBarrier(st.barrier, (++barriers) * blocks);
    if (st.trace != nullptr && blockIdx.x == 0 && threadIdx.x == 0 && traced < 11 * kLayers + 4) st.trace[traced++] = Clock();
  };
  if (st.trace != nullptr && blockIdx.x == 0 && threadIdx.x == 0) st.trace[traced++] = Clock();
  const int rows = st.rows;
  const Share wide = ShareOf(384, blocks);
  const Share square = ShareOf(128, blocks);
  const Share fc1 = ShareOf(512, blocks);
  const Share fc2 = Fc2Share();
  const auto plainColumn = [](Share s) { return [s](int t) { return (s.first + t) * 8; }; };
  const auto fc2Column = [](int t) { return (blockIdx.x / 4) * 32 + t * 8; };
  // Sub-phase marks: block 0's clock at points inside layer 6 of a traced step.
  int marks = 0;
  int markLayer = -1;
  const auto mark = [&]() {
    if (st.trace != nullptr && markLayer == 6 && blockIdx.x == 0 && threadIdx.x == 0 && marks < 32) st.trace[200 + marks++] = Clock();
  };
  const auto rowOf = [](const __half* base) { return [base](int r) { return base + static_cast<size_t>(r) * kD; }; };
  __shared__ int tokens[kMaxRows];
  int cur = 0;  // residual[cur] holds the stream
  // A product's input X: the norm of a + b (rows from rowA and rowB), which also becomes the stream,
  // either taken by every block for all rows in X, or once a row (NormRows) and copied in after a
  // barrier. `ahead` queues the copies of later products' weights behind X's.
  const auto normedInput = [&](auto rowA, auto rowB, const __half* gain, const __half* bias, auto ahead) {
    if (normOnce) {
      NormRows(rowA, rowB, gain, bias, st.residual[cur ^ 1], rows, sm.scratch);
      sync();
      StageX(sm.x, rowOf(st.residual[cur ^ 1]), rows, &bars[16]);
      ahead();
      WaitX(&bars[16], &xParity);
    } else {
      StageX(sm.x, rowA, rows, &bars[16]);
      ahead();
      NormX(sm.x, rowB, gain, bias, st.residual[cur ^ 1], rows, &bars[16], &xParity);
    }
    cur ^= 1;
  };
  const auto plainInput = [&](auto row, auto ahead) {
    StageX(sm.x, row, rows, &bars[16]);
    ahead();
    WaitX(&bars[16], &xParity);
  };
  // Product w of a step takes buffer w % 2; `which` is that buffer.
  const auto product = [&](auto epilogue, int which, Share share, const __half* bias, __half* out, int pitch, float* partial, auto column) {
    Product<decltype(epilogue)::value>(sm, share, &bars[which], parity[which], rows, bias, out, pitch, partial, column, sm.buffer[which]);
    if (share.count > 0) parity[which] ^= 1;
  };
  using Bias = std::integral_constant<Epilogue, Epilogue::kBias>;
  using BiasGelu = std::integral_constant<Epilogue, Epilogue::kBiasGelu>;
  using Partial = std::integral_constant<Epilogue, Epilogue::kPartial>;
  Prefetch(st.layers[0].qkv, wide, sm.buffer[0], &bars[0]);
  for (int step = 0; step < steps; step++) {
    StepTokens(st, tokens, blocks, step);
    for (int l = 0; l < kLayers; l++) {
      const Layer& L = st.layers[l];
      const Layer* next = l + 1 < kLayers ? &st.layers[l + 1] : nullptr;
      markLayer = l;
      marks = 0;
      // q/k/v. Input: layer 0, the embedded token and position, normed; then the last layer's fc2 plus
      // its residual, normed.
      const auto qkvAhead = [&]() {
        Prefetch(L.out, square, sm.buffer[1], &bars[1]);
        if (weightsL2) PrefetchL2(L.crossQuery, square);
      };
      if (l == 0) {
        normedInput([&](int r) { return st.embed + static_cast<size_t>(tokens[r]) * kD; },
                    [&](int r) { return st.positions + static_cast<size_t>(st.lengths[r] + step + 2) * kD; }, st.embedNormGain, st.embedNormBias, qkvAhead);
      } else {
        const Layer& P = st.layers[l - 1];
        normedInput(rowOf(st.projected), rowOf(st.residual[cur]), P.norm3Gain, P.norm3Bias, qkvAhead);
      }
      mark();  // 0: X ready
      product(Bias{}, 0, wide, L.qkvBias, st.qkv, 3 * kD, nullptr, plainColumn(wide));
      mark();  // 1: product done
      sync();
      mark();  // 2
      SelfAttention(st, L, sm, sm.buffer[0], reinterpret_cast<unsigned char*>(sm.x), &selfParity, step, blockIdx.x, gridDim.x);
      if (prefetchCross) PrefetchCross(st, L);
      mark();  // 3: self-attention done
      sync();
      mark();  // 4
      // The output product.
      plainInput(rowOf(st.attention), [&]() {
        Prefetch(L.crossQuery, square, sm.buffer[0], &bars[0]);
        if (weightsL2) PrefetchL2(L.crossOut, square);
      });
      mark();  // 5: X ready
      product(Bias{}, 1, square, L.outBias, st.projected, kD, nullptr, plainColumn(square));
      mark();  // 6: product done
      sync();
      mark();  // 7
      // The cross-attention query, from the normed residual sum.
      normedInput(rowOf(st.projected), rowOf(st.residual[cur]), L.norm1Gain, L.norm1Bias, [&]() {
        Prefetch(L.crossOut, square, sm.buffer[1], &bars[1]);
        if (weightsL2) PrefetchL2(L.fc1, fc1);
      });
      mark();  // 8: X ready
      product(Bias{}, 0, square, L.crossQueryBias, st.query, kD, nullptr, plainColumn(square));
      mark();  // 9: product done
      sync();
      mark();  // 10
      CrossAttention(st, L, sm, sm.buffer[0], reinterpret_cast<unsigned char*>(sm.x), crossParity, blockIdx.x, gridDim.x,
                     (rows * kHeads - static_cast<int>(blockIdx.x) + gridDim.x - 1) / gridDim.x);
      mark();  // 11: cross-attention done
      sync();
      mark();  // 12
      // The cross-attention's output product.
      plainInput(rowOf(st.attention), [&]() {
        Prefetch(L.fc1, fc1, sm.buffer[0], &bars[0]);
        if (weightsL2) PrefetchL2(L.fc2, fc2);
      });
      mark();  // 13: X ready
      product(Bias{}, 1, square, L.crossOutBias, st.projected, kD, nullptr, plainColumn(square));
      mark();  // 14: product done
      sync();
      mark();  // 15
      // fc1 and GELU.
      normedInput(rowOf(st.projected), rowOf(st.residual[cur]), L.norm2Gain, L.norm2Bias, [&]() {
        Prefetch(L.fc2, fc2, sm.buffer[1], &bars[1]);
        if (weightsL2 && next != nullptr) PrefetchL2(next->qkv, wide);
      });
      mark();  // 16: X ready
      product(BiasGelu{}, 0, fc1, L.fc1Bias, st.hidden, kF, nullptr, plainColumn(fc1));
      mark();  // 17: product done
      sync();
      mark();  // 18
      // fc2: a quarter of the inputs a block; the last of a column group's four blocks adds them.
      const auto fc2Ahead = [&]() {
        if (next == nullptr) return;
        Prefetch(next->qkv, wide, sm.buffer[0], &bars[0]);
        if (weightsL2) PrefetchL2(next->out, square);
      };
      if (fc2.count > 0) {
        plainInput([&](int r) { return st.hidden + static_cast<size_t>(r) * kF + fc2.k0; }, fc2Ahead);
        mark();  // 19: X ready
        product(Partial{}, 1, fc2, nullptr, nullptr, 0, st.fc2Partial + static_cast<size_t>(blockIdx.x % 4) * rows * kD, fc2Column);
        mark();  // 20: product done
        __shared__ unsigned last;
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) last = (atomicAdd(&st.fc2Arrived[blockIdx.x / 4], 1u) % 4) == 3;
        __syncthreads();
        if (last) {
          __threadfence();
          const int g = blockIdx.x / 4;
          for (int i = threadIdx.x; i < rows * 32; i += kThreads) {
            const int r = i / 32;
            const int n = g * 32 + i % 32;
            float v = 0;
#pragma unroll
            for (int q = 0; q < 4; q++) v += __ldcg(&st.fc2Partial[(static_cast<size_t>(q) * rows + r) * kD + n]);
            st.projected[static_cast<size_t>(r) * kD + n] = __float2half_rn(v + __half2float(L.fc2Bias[n]));
          }
        }
        mark();  // 21: sums added
      } else {
        fc2Ahead();
      }
      sync();
    }
    markLayer = -1;
    // The head over the last layer's normed output; each block's best candidates.
    const Layer& P = st.layers[kLayers - 1];
    normedInput(rowOf(st.projected), rowOf(st.residual[cur]), P.norm3Gain, P.norm3Bias, []() {});
    Head(st, sm, &headParity);
    sync();
    Prefetch(st.layers[0].qkv, wide, sm.buffer[0], &bars[0]);
  }
  if (blockIdx.x == 0) {
    TakeTokens(st, tokens, blocks, steps - 1);
    if (threadIdx.x < rows) st.lengths[threadIdx.x] += steps;
  }
  // The last prefetch was for a step that does not come: let it land before the block ends.
  if (wide.count > 0) MbarWait(&bars[0], parity[0]);
}

// ---------------------------------------------------------------------------------------------------
// The clustered step: 128 blocks in groups of 8, group c (blocks 8c.. 8c + 7) taking head c, with 6
// barriers over the grid a layer instead of 11. A layer's phases, with the barriers between them:
//   q/k/v of head c (three n8 tiles a block), a group barrier, self-attention of head c for rows 4j..
//   (block j of the group) | out: the group's 64 output columns, block j over inputs 128j.. (heads 2j,
//   2j + 1), its partial sums added in order by the group after a group barrier, with the bias and the
//   residual | every block copies the sums in and takes the norm itself; the cross query of head c (a
//   tile a block), a group barrier, cross-attention of head c for rows 4j.. | cross out, as out | the
//   norm, fc1 with GELU (the group's 256 columns) | fc2: the group's 64 output columns, block j over
//   inputs 512j.., added as out's | the norm.
// The rows that every block copies in come by multicast within thread-block clusters (of 4 or 2 blocks,
// as many as 128 blocks of fit at once: an H100 holds only 15 clusters of 8): each block of a cluster
// copies its share of the rows into all of them. A group's barrier is a counter of its own in global
// memory, as the grid's.
// Each block keeps columns 8b.. 8b + 8 of each norm's output: the residual that the block's share of the
// next split product's sums adds.

constexpr int kGroup = 8;  // blocks a group (a head)
constexpr int kGroupedBlocks = kHeads * kGroup;
constexpr int kSplitPitch = 128 + 8;  // halves a row of out's inputs in shared memory
constexpr int kFc2Pitch = 512 + 8;    // halves a row of fc2's inputs

__device__ inline unsigned ClusterRank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Every thread of every block of the cluster; writes before it are seen after it across the cluster.
__device__ inline void ClusterBarrier() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Generic writes to global memory before it are seen by bulk copies after the next synchronization.
__device__ inline void GlobalProxyFence() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

// A bulk copy into the same offset of the shared memory of every block of a cluster of `size`; each block's
// `bar` takes the bytes.
template <int size>
__device__ inline void MulticastCopy(void* to, const void* from, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;" ::"r"(SharedAddress(to)),
               "l"(from), "r"(bytes), "r"(SharedAddress(bar)), "h"(static_cast<unsigned short>((1u << size) - 1))
               : "memory");
}

// All 32 rows (rowOf(r), 2 KB each) into `to`, `pitch` halves a row, in every block of a cluster of `size`:
// block k of the cluster copies rows 32k/size.. to all of them, and each block's `bar` expects all 32.
template <int size, class RowOf>
__device__ inline void MulticastRows(__half* to, int pitch, RowOf rowOf, uint64_t* bar) {
  if (threadIdx.x >= kMaxRows / size) return;
  if (threadIdx.x == 0) MbarExpect(bar, kMaxRows * kD * 2);
  const int r = static_cast<int>(ClusterRank()) * (kMaxRows / size) + threadIdx.x;
  GlobalProxyFence();
  MulticastCopy<size>(to + r * pitch, rowOf(r), kD * 2, bar);
}


// `bytes` of each of the 32 rows (rowOf(r)) into `to`, `pitch` halves a row, in this block only.
template <class RowOf>
__device__ inline void StageRows(__half* to, int pitch, RowOf rowOf, unsigned bytes, uint64_t* bar) {
  if (threadIdx.x >= 32) return;
  if (threadIdx.x == 0) MbarExpect(bar, kMaxRows * bytes);
  __syncwarp();
  GlobalProxyFence();
  BulkCopy(to + threadIdx.x * pitch, rowOf(threadIdx.x), bytes, bar);
}

// X = LayerNorm(X) (or of X + other, rounded to half first), in every block: warp w takes rows w, w + 8,
// ...; float32, rounded once. Columns 8b.. 8b + 8 of the result go to `keep` ([row][8]).
__device__ inline void NormLocal(__half* x, const __half* other, int otherPitch, const __half* gain, const __half* bias, __half* keep) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  uint4 gv[4], cv[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    gv[i] = reinterpret_cast<const uint4*>(gain)[lane + 32 * i];
    cv[i] = reinterpret_cast<const uint4*>(bias)[lane + 32 * i];
  }
#pragma unroll 1
  for (int r = warp; r < kMaxRows; r += kWarps) {
    __half* row = x + r * kXPitch;
    float h[32];
    float sums[4] = {0, 0, 0, 0};  // four chains, one a 16-byte vector
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const uint4 av = *reinterpret_cast<const uint4*>(row + 8 * (lane + 32 * i));
      const __half* a = reinterpret_cast<const __half*>(&av);
      if (other != nullptr) {
        const uint4 bv = *reinterpret_cast<const uint4*>(other + r * otherPitch + 8 * (lane + 32 * i));
        const __half* b = reinterpret_cast<const __half*>(&bv);
#pragma unroll
        for (int e = 0; e < 8; e++) h[8 * i + e] = RoundedSum(a[e], b[e]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; e++) h[8 * i + e] = __half2float(a[e]);
      }
#pragma unroll
      for (int e = 0; e < 8; e++) sums[i] += h[8 * i + e];
    }
    float sum = (sums[0] + sums[1]) + (sums[2] + sums[3]);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float mean = sum / kD;
    float squareSums[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 32; i++) squareSums[i / 8] += (h[i] - mean) * (h[i] - mean);
    float squares = (squareSums[0] + squareSums[1]) + (squareSums[2] + squareSums[3]);
    for (int o = 16; o > 0; o >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, o);
    const float scale = rsqrtf(squares / kD + 1e-5f);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const __half* g = reinterpret_cast<const __half*>(&gv[i]);
      const __half* c = reinterpret_cast<const __half*>(&cv[i]);
      uint4 result;
      __half* y = reinterpret_cast<__half*>(&result);
#pragma unroll
      for (int e = 0; e < 8; e++) y[e] = Normed(h[8 * i + e], mean, scale, g[e], c[e]);
      *reinterpret_cast<uint4*>(row + 8 * (lane + 32 * i)) = result;
    }
  }
  __syncthreads();
  static_assert(kThreads == kMaxRows * 8, "a thread an element of keep");
  keep[threadIdx.x] = x[(threadIdx.x / 8) * kXPitch + 8 * blockIdx.x + threadIdx.x % 8];
  ProxyFence();
  __syncthreads();
}

// A product of the clustered step: this block's `count` n8 tiles of `pairs` k32 pairs each (packed
// [tile][pair][lane]) in `buffer`, times X (`pitch` halves a row; the tiles' inputs from its column 0).
// Items of four pairs of one tile go round the warps; an item's sums overwrite its own weights, then the
// block adds each tile's items in order and hands (tile, row, column in the tile, sum) to `out`.
template <class Out>
__device__ inline void ChunkProduct(unsigned char* buffer, uint64_t* bar, unsigned parity, int count, int pairs, const __half* x, int pitch, Out out) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int quads = pairs / 4;
  MbarWait(bar, parity);
  for (int item = warp; item < count * quads; item += kWarps) {
    const int t = item / quads;
    const int s = item % quads;
    WarpQuad(buffer + (static_cast<size_t>(t) * pairs + 4 * s) * 512, x, pitch, 4 * s * 32, 2, lane);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < count * kMaxRows * 8; i += kThreads) {
    const int t = i / (kMaxRows * 8);
    const int r = (i / 8) % kMaxRows;
    const int c = i % 8;
    float v = 0;
    for (int s = 0; s < quads; s++) v += reinterpret_cast<const float*>(buffer + (static_cast<size_t>(t) * pairs + 4 * s) * 512)[r * 8 + c];
    out(t, r, c, v);
  }
  ProxyFence();
  __syncthreads();
}

// Bytes a block's share of each product takes.
constexpr unsigned kQkvChunk = 3 * 32 * 512;
constexpr unsigned kSplitChunk = 8 * 4 * 512;
constexpr unsigned kQueryChunk = 32 * 512;
constexpr unsigned kFc1Chunk = 4 * 32 * 512;
constexpr unsigned kFc2Chunk = 8 * 16 * 512;

// The keys and values of `count` (row, head) pairs from `first`, `stride` apart, pulled into L2 by every
// thread's prefetch instructions (not the bulk copies, which would queue ahead of the block's next copies).
__device__ inline void PrefetchCrossLines(const Step& st, const Layer& L, int first, int stride, int count) {
  const int lines = st.source * kHeadDim * 2 / 128;
  for (int i = threadIdx.x; i < 2 * count * lines; i += kThreads) {
    const int k = i / (2 * lines);
    const int line = i % (2 * lines);
    const __half* base = (line < lines ? L.crossKey : L.crossValue) + static_cast<size_t>(first + k * stride) * st.source * kHeadDim;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const unsigned char*>(base) + (line % lines) * 128));
  }
}

template <int kGroupSize>
__global__ void __launch_bounds__(kThreads, 1) ClusterStepKernel(const Step* __restrict__ step_, int steps, unsigned barrierBase, unsigned groupBase,
                                                                 int crossL2) {
  const Step& st = *step_;
  extern __shared__ __align__(128) unsigned char shared[];
  __shared__ __align__(8) uint64_t bars[18];
  __shared__ __half keep[kMaxRows * 8];
  __shared__ int tokens[kMaxRows];
  const Shared sm = LayOut(shared, bars, 18);
  ClusterBarrier();  // every block's barriers are ready before any block multicasts into it
  const int c = blockIdx.x / kGroup;  // the group, and its head
  const int j = blockIdx.x % kGroup;
  unsigned groupBarriers = groupBase;
  // A barrier over the group's 8 blocks: GridBarrier on the group's own counter.
  const auto groupSync = [&]() { GridBarrier(&st.groupBarrier[c], (++groupBarriers) * kGroup); };
  unsigned parity[2] = {0, 0};
  unsigned crossParity[2] = {0, 0};
  unsigned headParity = 0, selfParity = 0, xParity = 0, positionParity = 0;
  unsigned barriers = barrierBase;
  const unsigned blocks = gridDim.x;
  int traced = 0;
  const auto sync = [&]() {
    GlobalProxyFence();
    GridBarrier(st.barrier, (++barriers) * blocks);
    if (st.trace != nullptr && blockIdx.x == 0 && threadIdx.x == 0 && traced < 6 * kLayers + 2) st.trace[traced++] = Clock();
  };
  if (st.trace != nullptr && blockIdx.x == 0 && threadIdx.x == 0) st.trace[traced++] = Clock();
  int marks = 0;
  int markLayer = -1;
  const auto mark = [&]() {
    if (st.trace != nullptr && markLayer == 6 && blockIdx.x == 0 && threadIdx.x == 0 && marks < 32) st.trace[200 + marks++] = Clock();
  };
  const auto rowOf = [](const __half* base) { return [base](int r) { return base + static_cast<size_t>(r) * kD; }; };
  const auto prefetch = [&](const uint4* chunks, unsigned bytes, int which) {
    if (threadIdx.x != 0) return;
    MbarExpect(&bars[which], bytes);
    BulkCopy(sm.buffer[which], reinterpret_cast<const unsigned char*>(chunks) + static_cast<size_t>(blockIdx.x) * bytes, bytes, &bars[which]);
  };
  const auto product = [&](int which, int count, int pairs, const __half* x, int pitch, auto out) {
    ChunkProduct(sm.buffer[which], &bars[which], parity[which], count, pairs, x, pitch, out);
    parity[which] ^= 1;
  };
  const auto waitX = [&]() {
    MbarWait(&bars[16], xParity);
    xParity ^= 1;
    __syncthreads();
  };
  // A split product's sums: each block's partials ([group][block][row][64]), then block j adds the
  // group's eight in order for columns 64c + 8j.., rounds with the bias, and adds the residual it kept.
  const auto partial = [&](int t, int r, int cc, float v) { st.partials[((c * kGroup + j) * kMaxRows + r) * 64 + 8 * t + cc] = v; };
  const auto splitSums = [&](const __half* bias) {
    groupSync();
    const int r = threadIdx.x / 8;
    const int cc = threadIdx.x % 8;
    const int n = 64 * c + 8 * j + cc;
    float v = 0;
#pragma unroll
    for (int q = 0; q < kGroup; q++) v += __ldcg(&st.partials[((c * kGroup + q) * kMaxRows + r) * 64 + 8 * j + cc]);
    const float y = Round(v + __half2float(bias[n]));
    st.sum[r * kD + n] = __float2half_rn(y + __half2float(keep[r * 8 + cc]));
  };
  // A split product (in buffer 1): this block's inputs (`bytes` of each row from `from`, rows `rowPitch`
  // apart) into X at `pitch`, then `ahead` (weights' copies, queued behind them), the product of its
  // `pairs` k32 pairs a tile, and the group's sums.
  const auto splitProduct = [&](const __half* from, int rowPitch, unsigned bytes, int pitch, int pairs, auto ahead, const __half* bias) {
    StageRows(sm.x, pitch, [&](int r) { return from + static_cast<size_t>(r) * rowPitch; }, bytes, &bars[16]);
    ahead();
    waitX();
    product(1, 8, pairs, sm.x, pitch, partial);
    splitSums(bias);
  };
  // The sums into X (multicast), then `ahead` (weights' copies, queued behind X's), then the norm.
  const auto normSum = [&](const __half* gain, const __half* bias, auto ahead) {
    MulticastRows<kGroupSize>(sm.x, kXPitch, rowOf(st.sum), &bars[16]);
    ahead();
    waitX();
    NormLocal(sm.x, nullptr, 0, gain, bias, keep);
  };
  prefetch(st.layers[0].qkvChunks, kQkvChunk, 0);
  for (int step = 0; step < steps; step++) {
    StepTokens(st, tokens, blocks, step);
    // The embedded tokens into X and their positions into buffer 1, then the embedding's norm.
    MulticastRows<kGroupSize>(sm.x, kXPitch, [&](int r) { return st.embed + static_cast<size_t>(tokens[r]) * kD; }, &bars[16]);
    MulticastRows<kGroupSize>(reinterpret_cast<__half*>(sm.buffer[1]), kD, [&](int r) { return st.positions + static_cast<size_t>(st.lengths[r] + step + 2) * kD; },
                  &bars[17]);
    MbarWait(&bars[17], positionParity);
    positionParity ^= 1;
    waitX();
    NormLocal(sm.x, reinterpret_cast<const __half*>(sm.buffer[1]), kD, st.embedNormGain, st.embedNormBias, keep);
    for (int l = 0; l < kLayers; l++) {
      const Layer& L = st.layers[l];
      const Layer* next = l + 1 < kLayers ? &st.layers[l + 1] : nullptr;
      markLayer = l;
      marks = 0;
      mark();  // 0: X holds the layer's input
      prefetch(L.outChunks, kSplitChunk, 1);
      product(0, 3, 32, sm.x, kXPitch, [&](int t, int r, int cc, float v) {
        const int g = 3 * j + t;
        const int n = (g / 8) * kD + 64 * c + 8 * (g % 8) + cc;
        st.qkv[r * 3 * kD + n] = __float2half_rn(Round(v + __half2float(L.qkvBias[n])));
      });
      groupSync();
      if (crossL2) PrefetchCrossLines(st, L, 64 * j + c, kHeads, kMaxRows / kGroup);
      mark();  // 1: q/k/v
      SelfAttention(st, L, sm, sm.buffer[0], reinterpret_cast<unsigned char*>(sm.x), &selfParity, step, 64 * j + c, kHeads);
      mark();  // 2: self-attention
      sync();
      mark();  // 3
      splitProduct(st.attention + 128 * j, kD, 256, kSplitPitch, 4, [&]() { prefetch(L.crossQueryChunks, kQueryChunk, 0); }, L.outBias);
      mark();  // 4: out
      sync();
      mark();  // 5
      normSum(L.norm1Gain, L.norm1Bias, [&]() { prefetch(L.crossOutChunks, kSplitChunk, 1); });
      mark();  // 6: norm
      product(0, 1, 32, sm.x, kXPitch, [&](int, int r, int cc, float v) {
        const int n = 64 * c + 8 * j + cc;
        st.query[r * kD + n] = __float2half_rn(Round(v + __half2float(L.crossQueryBias[n])));
      });
      groupSync();
      mark();  // 7: cross query
      CrossAttention(st, L, sm, sm.buffer[0], reinterpret_cast<unsigned char*>(sm.x), crossParity, 64 * j + c, kHeads, kMaxRows / kGroup);
      mark();  // 8: cross-attention
      sync();
      mark();  // 9
      splitProduct(st.attention + 128 * j, kD, 256, kSplitPitch, 4, [&]() { prefetch(L.fc1Chunks, kFc1Chunk, 0); }, L.crossOutBias);
      mark();  // 10: cross out
      sync();
      mark();  // 11
      normSum(L.norm2Gain, L.norm2Bias, [&]() { prefetch(L.fc2Chunks, kFc2Chunk, 1); });
      mark();  // 12: norm
      product(0, 4, 32, sm.x, kXPitch, [&](int t, int r, int cc, float v) {
        const int n = 256 * c + 32 * j + 8 * t + cc;
        st.hidden[r * kF + n] = __float2half_rn(Gelu(Round(v + __half2float(L.fc1Bias[n]))));
      });
      mark();  // 13: fc1
      sync();
      mark();  // 14
      splitProduct(st.hidden + 512 * j, kF, 1024, kFc2Pitch, 16, [&]() {
        if (next != nullptr) prefetch(next->qkvChunks, kQkvChunk, 0);
      }, L.fc2Bias);
      mark();  // 15: fc2
      sync();
      mark();  // 16
      normSum(L.norm3Gain, L.norm3Bias, []() {});
      mark();  // 17: norm
    }
    markLayer = -1;
    // The head over the last layer's normed output (block 0 also writes the first step's out, for the check).
    if (blockIdx.x == 0 && step == 0) {
      for (int i = threadIdx.x; i < kMaxRows * kD / 8; i += kThreads)
        reinterpret_cast<uint4*>(st.residual[0])[i] = *reinterpret_cast<const uint4*>(sm.x + (i / (kD / 8)) * kXPitch + 8 * (i % (kD / 8)));
    }
    Head(st, sm, &headParity);
    sync();
    prefetch(st.layers[0].qkvChunks, kQkvChunk, 0);
  }
  if (blockIdx.x == 0) {
    TakeTokens(st, tokens, blocks, steps - 1);
    if (threadIdx.x < kMaxRows) st.lengths[threadIdx.x] += steps;
  }
  MbarWait(&bars[0], parity[0]);
  ClusterBarrier();  // no block leaves while a peer may still multicast into it
}

// Only barriers: what one costs over the grid.
__global__ void BarrierKernel(unsigned* counter, int n) {
  for (int i = 1; i <= n; i++) GridBarrier(counter, i * gridDim.x);
}

// Only group barriers: 8 blocks a counter, as the clustered step's groups.
__global__ void GroupBarrierKernel(unsigned* counters, int n) {
  for (int i = 1; i <= n; i++) GridBarrier(&counters[blockIdx.x / kGroup], i * kGroup);
}

// ---------------------------------------------------------------------------------------------------
// The reference: one plain kernel an operation, natural layouts.

__global__ void RefNormSum(const __half* a, const __half* b, const __half* gain, const __half* bias, __half* out) {
  const int r = blockIdx.x;
  __shared__ float h[kD];
  __shared__ float red[2];
  for (int i = threadIdx.x; i < kD; i += blockDim.x) h[i] = Round(__half2float(a[static_cast<size_t>(r) * kD + i]) + __half2float(b[static_cast<size_t>(r) * kD + i]));
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int i = 0; i < kD; i++) s += h[i];
    const double mean = s / kD;
    double q = 0;
    for (int i = 0; i < kD; i++) q += (h[i] - mean) * (h[i] - mean);
    red[0] = static_cast<float>(mean);
    red[1] = static_cast<float>(1.0 / std::sqrt(q / kD + 1e-5));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kD; i += blockDim.x)
    out[static_cast<size_t>(r) * kD + i] = __float2half_rn((h[i] - red[0]) * red[1] * __half2float(gain[i]) + __half2float(bias[i]));
}

// out[r][n] = round(x[r] . w[n] + bias[n]) (GELU after it when gelu), sums in float32.
__global__ void RefLinear(const __half* x, int K, const __half* w, const __half* bias, __half* out, int N, int rows, bool gelu) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y;
  if (n >= N || r >= rows) return;
  float acc = 0;
  for (int k = 0; k < K; k++) acc += __half2float(x[static_cast<size_t>(r) * K + k]) * __half2float(w[static_cast<size_t>(n) * K + k]);
  float y = Round(acc + (bias != nullptr ? __half2float(bias[n]) : 0.0f));
  if (gelu) y = Gelu(y);
  out[static_cast<size_t>(r) * N + n] = __float2half_rn(y);
}

// One block per (row, head): scores over n positions of keys [n][64], softmax, values.
__global__ void RefAttention(const __half* q, int qPitch, const __half* keys, const __half* values, size_t pairStride, const int* lengths, int fixedN,
                             __half* out) {
  const int r = blockIdx.x;
  const int h = blockIdx.y;
  const int n = fixedN > 0 ? fixedN : lengths[r] + 1;
  __shared__ float s[512];
  const __half* qr = q + static_cast<size_t>(r) * qPitch + h * kHeadDim;
  const size_t base = (static_cast<size_t>(r) * kHeads + h) * pairStride;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    float dot = 0;
    for (int d = 0; d < kHeadDim; d++) dot += __half2float(qr[d]) * __half2float(keys[base + static_cast<size_t>(j) * kHeadDim + d]);
    s[j] = dot * 0.125f;
  }
  __syncthreads();
  if (threadIdx.x < kHeadDim) {
    float m = -INFINITY;
    for (int j = 0; j < n; j++) m = fmaxf(m, s[j]);
    float total = 0, acc = 0;
    for (int j = 0; j < n; j++) {
      const float e = expf(s[j] - m);
      total += e;
      acc += e * __half2float(values[base + static_cast<size_t>(j) * kHeadDim + threadIdx.x]);
    }
    out[static_cast<size_t>(r) * kD + h * kHeadDim + threadIdx.x] = __float2half_rn(acc / total);
  }
}

// Writes each row's new key and value (from qkv) at its position.
__global__ void RefAppend(const __half* qkv, __half* keys, __half* values, int capacity, const int* lengths) {
  const int r = blockIdx.x;
  const int h = blockIdx.y;
  const int d = threadIdx.x;
  const size_t at = ((static_cast<size_t>(r) * kHeads + h) * capacity + lengths[r]) * kHeadDim + d;
  keys[at] = qkv[static_cast<size_t>(r) * 3 * kD + kD + h * kHeadDim + d];
  values[at] = qkv[static_cast<size_t>(r) * 3 * kD + 2 * kD + h * kHeadDim + d];
}

__global__ void RefEmbed(const __half* embed, const __half* positions, const int* tokens, const int* lengths, __half* a, __half* b) {
  const int r = blockIdx.x;
  for (int i = threadIdx.x; i < kD; i += blockDim.x) {
    a[static_cast<size_t>(r) * kD + i] = embed[static_cast<size_t>(tokens[r]) * kD + i];
    b[static_cast<size_t>(r) * kD + i] = positions[static_cast<size_t>(lengths[r] + 2) * kD + i];
  }
}

// logits[r][n] = round(round(x[r] . e[n]) + bias[n]).
__global__ void RefHead(const __half* x, const __half* embed, const __half* bias, float* logits, int rows) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y;
  if (n >= kVocab) return;
  float acc = 0;
  for (int k = 0; k < kD; k++) acc += __half2float(x[static_cast<size_t>(r) * kD + k]) * __half2float(embed[static_cast<size_t>(n) * kD + k]);
  logits[static_cast<size_t>(r) * kVocab + n] = Round(Round(acc) + __half2float(bias[n]));
}

__global__ void RefArgmax(const float* logits, int* tokens, int* lengths, int* emitted) {
  const int r = blockIdx.x;
  if (threadIdx.x != 0) return;
  float best = -INFINITY;
  int id = 0;
  for (int n = 0; n < kVocab; n++) {
    if (logits[static_cast<size_t>(r) * kVocab + n] > best) {
      best = logits[static_cast<size_t>(r) * kVocab + n];
      id = n;
    }
  }
  tokens[r] = id;
  lengths[r] += 1;
  emitted[r] = id;
}

// ---------------------------------------------------------------------------------------------------
// Random weights and packing.

__global__ void FillRandom(__half* p, size_t n, uint32_t seed, float center, float spread) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed * 2246822519u ^ static_cast<uint32_t>(i >> 32) * 3266489917u;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    x *= 3266489917u;
    x ^= x >> 16;
    const float u = (x >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
    p[i] = __float2half_rn(center + spread * u);
  }
}

// Vector i (pair i / 32, lane i % 32) of the n8 tile of w [N][K] at output row n0 and input k0: the lane's
// 8 halves are its two m16n8k16 B fragments for that pair of 16-wide input steps (zeros past row N).
__device__ inline uint4 PackedVector(const __half* w, int N, int K, int n0, int k0, int i) {
  const int p = i / 32;
  const int lane = i % 32;
  const int n = n0 + lane / 4;
  const int k = k0 + p * 32 + (lane % 4) * 2;
  __half v[8];
  const int ks[8] = {k, k + 1, k + 8, k + 9, k + 16, k + 17, k + 24, k + 25};
  for (int e = 0; e < 8; e++) v[e] = n < N ? w[static_cast<size_t>(n) * K + ks[e]] : __float2half(0.0f);
  return *reinterpret_cast<uint4*>(v);
}

// Packs w [N][K] (columns k0.. k0 + 1024 of output rows n0.. n0 + 8) as tile `tile`: for each pair of
// 16-wide input steps, lane l's 8 halves are its two m16n8k16 B fragments.
__global__ void PackTiles(const __half* w, int N, int K, uint4* packed, int tiles, int mode) {
  const int t = blockIdx.x;
  if (t >= tiles) return;
  int n0, k0;
  if (mode == 0) {
    n0 = t * 8;
    k0 = 0;
  } else {  // fc2: tile t = (g * 4 + q) * 4 + s
    const int g = t / 16, q = (t / 4) % 4, s = t % 4;
    n0 = g * 32 + s * 8;
    k0 = q * 1024;
  }
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) packed[static_cast<size_t>(t) * 1024 + i] = PackedVector(w, N, K, n0, k0, i);
}

// Packs w [N][K] for the clustered step: block b's `count` n8 tiles of kLen inputs each, contiguous
// ([b][tile][pair][lane], pairs of 16-wide input steps as PackTiles). `mode` says which outputs and inputs
// block b = 8c + j's tile t takes: 0 q/k/v (tile 3j + t of head c's 24: q's 8, k's, v's), 1 a split product
// (columns 64c + 8t.., inputs kLen j..), 2 the cross query (columns 64c + 8j..), 3 fc1 (columns 256c + 32j + 8t..).
__global__ void PackChunks(const __half* w, int N, int K, uint4* packed, int count, int kLen, int mode) {
  const int b = blockIdx.x;
  const int t = blockIdx.y;
  const int c = b / kGroup;
  const int j = b % kGroup;
  int n0 = 0, k0 = 0;
  if (mode == 0) {
    const int g = 3 * j + t;
    n0 = (g / 8) * kD + 64 * c + 8 * (g % 8);
  } else if (mode == 1) {
    n0 = 64 * c + 8 * t;
    k0 = j * kLen;
  } else if (mode == 2) {
    n0 = 64 * c + 8 * j;
  } else {
    n0 = 256 * c + 32 * j + 8 * t;
  }
  const int pairs = kLen / 32;
  uint4* out = packed + (static_cast<size_t>(b) * count + t) * pairs * 32;
  for (int i = threadIdx.x; i < pairs * 32; i += blockDim.x) out[i] = PackedVector(w, N, K, n0, k0, i);
}

template <typename T>
T* Alloc(size_t n) {
  T* p = nullptr;
  Check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
  return p;
}

uint32_t seedCounter = 1;
__half* RandomHalves(size_t n, float center, float spread) {
  __half* p = Alloc<__half>(n);
  FillRandom<<<1024, 256>>>(p, n, seedCounter++, center, spread);
  return p;
}

uint4* Pack(const __half* w, int N, int K, int tiles, int mode) {
  uint4* p = Alloc<uint4>(static_cast<size_t>(tiles) * 1024);
  PackTiles<<<tiles, 256>>>(w, N, K, p, tiles, mode);
  return p;
}

uint4* PackChunked(const __half* w, int N, int K, int count, int kLen, int mode) {
  uint4* p = Alloc<uint4>(static_cast<size_t>(kGroupedBlocks) * count * kLen);
  PackChunks<<<dim3(kGroupedBlocks, count), 256>>>(w, N, K, p, count, kLen, mode);
  return p;
}

struct NaturalLayer {
  __half *qkv, *out, *crossQuery, *crossOut, *fc1, *fc2;
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const char* jsonPath = argc > 1 ? argv[1] : nullptr;
  const int rows = 32;
  const int source = 256;
  const int capacity = 128;
  const int startLength = 32;  // positions already in the self caches
  const int checkSteps = 8;
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const int blocks = prop.multiProcessorCount;
  std::printf("device %s, %d SMs, shared memory a block %zu (need %d)\n", prop.name, blocks, prop.sharedMemPerBlockOptin, kSharedBytes);

  const float w = 0.0346f;  // uniform spread of std 0.02
  Step st{};
  std::vector<NaturalLayer> natural(kLayers);
  const size_t selfElems = static_cast<size_t>(rows) * kHeads * capacity * kHeadDim;
  const size_t crossElems = static_cast<size_t>(rows) * kHeads * source * kHeadDim;
  std::vector<__half*> refSelfKey(kLayers), refSelfValue(kLayers), initSelfKey(kLayers), initSelfValue(kLayers);
  for (int l = 0; l < kLayers; l++) {
    Layer& L = st.layers[l];
    NaturalLayer& N = natural[l];
    N.qkv = RandomHalves(static_cast<size_t>(3 * kD) * kD, 0, w);
    N.out = RandomHalves(static_cast<size_t>(kD) * kD, 0, w);
    N.crossQuery = RandomHalves(static_cast<size_t>(kD) * kD, 0, w);
    N.crossOut = RandomHalves(static_cast<size_t>(kD) * kD, 0, w);
    N.fc1 = RandomHalves(static_cast<size_t>(kF) * kD, 0, w);
    N.fc2 = RandomHalves(static_cast<size_t>(kD) * kF, 0, w / 2);
    L.qkv = Pack(N.qkv, 3 * kD, kD, 384, 0);
    L.out = Pack(N.out, kD, kD, 128, 0);
    L.crossQuery = Pack(N.crossQuery, kD, kD, 128, 0);
    L.crossOut = Pack(N.crossOut, kD, kD, 128, 0);
    L.fc1 = Pack(N.fc1, kF, kD, 512, 0);
    L.fc2 = Pack(N.fc2, kD, kF, 512, 1);
    L.qkvChunks = PackChunked(N.qkv, 3 * kD, kD, 3, 1024, 0);
    L.outChunks = PackChunked(N.out, kD, kD, 8, 128, 1);
    L.crossQueryChunks = PackChunked(N.crossQuery, kD, kD, 1, 1024, 2);
    L.crossOutChunks = PackChunked(N.crossOut, kD, kD, 8, 128, 1);
    L.fc1Chunks = PackChunked(N.fc1, kF, kD, 4, 1024, 3);
    L.fc2Chunks = PackChunked(N.fc2, kD, kF, 8, 512, 1);
    L.qkvBias = RandomHalves(3 * kD, 0, 0.05f);
    L.outBias = RandomHalves(kD, 0, 0.05f);
    L.crossQueryBias = RandomHalves(kD, 0, 0.05f);
    L.crossOutBias = RandomHalves(kD, 0, 0.05f);
    L.fc1Bias = RandomHalves(kF, 0, 0.05f);
    L.fc2Bias = RandomHalves(kD, 0, 0.05f);
    L.norm1Gain = RandomHalves(kD, 1, 0.1f);
    L.norm1Bias = RandomHalves(kD, 0, 0.05f);
    L.norm2Gain = RandomHalves(kD, 1, 0.1f);
    L.norm2Bias = RandomHalves(kD, 0, 0.05f);
    L.norm3Gain = RandomHalves(kD, 1, 0.1f);
    L.norm3Bias = RandomHalves(kD, 0, 0.05f);
    initSelfKey[l] = RandomHalves(selfElems, 0, 1);
    initSelfValue[l] = RandomHalves(selfElems, 0, 1);
    L.selfKey = Alloc<__half>(selfElems);
    L.selfValue = Alloc<__half>(selfElems);
    refSelfKey[l] = Alloc<__half>(selfElems);
    refSelfValue[l] = Alloc<__half>(selfElems);
    L.crossKey = RandomHalves(crossElems, 0, 1);
    L.crossValue = RandomHalves(crossElems, 0, 1);
  }
  __half* embed = RandomHalves(static_cast<size_t>(kVocab) * kD, 0, w);
  st.embed = embed;
  st.positions = RandomHalves(static_cast<size_t>(1026) * kD, 0, w);
  st.embedNormGain = RandomHalves(kD, 1, 0.1f);
  st.embedNormBias = RandomHalves(kD, 0, 0.05f);
  const int headTiles = (kVocab + 7) / 8;
  st.head = Pack(embed, kVocab, kD, headTiles, 0);
  st.logitsBias = RandomHalves(kVocab, 0, 0.05f);
  st.rows = rows;
  st.source = source;
  st.capacity = capacity;
  st.tokens = Alloc<int>(rows);
  st.lengths = Alloc<int>(rows);
  st.emitted = Alloc<int>(static_cast<size_t>(1024) * rows);
  st.residual[0] = Alloc<__half>(rows * kD);
  st.residual[1] = Alloc<__half>(rows * kD);
  st.qkv = Alloc<__half>(rows * 3 * kD);
  st.attention = Alloc<__half>(rows * kD);
  st.projected = Alloc<__half>(rows * kD);
  st.query = Alloc<__half>(rows * kD);
  st.hidden = Alloc<__half>(rows * kF);
  st.fc2Partial = Alloc<float>(4 * rows * kD);
  st.sum = Alloc<__half>(rows * kD);
  st.partials = Alloc<float>(static_cast<size_t>(kGroupedBlocks) * kMaxRows * 64);
  st.fc2Arrived = Alloc<unsigned>(32);
  st.best = Alloc<unsigned long long>(blocks * kMaxRows);
  st.barrier = Alloc<unsigned>(1);
  st.groupBarrier = Alloc<unsigned>(kHeads);
  Check(cudaDeviceSynchronize(), "setup");

  std::vector<int> firstTokens(rows), firstLengths(rows, startLength);
  for (int r = 0; r < rows; r++) firstTokens[r] = (r * 7919 + 17) % kVocab;
  const auto reset = [&](bool ref) {
    for (int l = 0; l < kLayers; l++) {
      Check(cudaMemcpy(ref ? refSelfKey[l] : st.layers[l].selfKey, initSelfKey[l], selfElems * 2, cudaMemcpyDeviceToDevice), "copy");
      Check(cudaMemcpy(ref ? refSelfValue[l] : st.layers[l].selfValue, initSelfValue[l], selfElems * 2, cudaMemcpyDeviceToDevice), "copy");
    }
    Check(cudaMemcpy(st.tokens, firstTokens.data(), rows * 4, cudaMemcpyHostToDevice), "tokens");
    Check(cudaMemcpy(st.lengths, firstLengths.data(), rows * 4, cudaMemcpyHostToDevice), "lengths");
    Check(cudaMemset(st.fc2Arrived, 0, 32 * 4), "arrived");
    Check(cudaMemset(st.barrier, 0, 4), "barrier");
    Check(cudaMemset(st.groupBarrier, 0, kHeads * 4), "group barriers");
  };

  // --- The reference, checkSteps steps.
  reset(true);
  __half *ra = Alloc<__half>(rows * kD), *rb = Alloc<__half>(rows * kD), *rx = Alloc<__half>(rows * kD), *rqkv = Alloc<__half>(rows * 3 * kD);
  __half *rattn = Alloc<__half>(rows * kD), *rproj = Alloc<__half>(rows * kD), *rq = Alloc<__half>(rows * kD), *rh = Alloc<__half>(rows * kF);
  float* rlogits = Alloc<float>(static_cast<size_t>(rows) * kVocab);
  std::vector<__half> refHidden(rows * kD);
  std::vector<float> refLogits(static_cast<size_t>(rows) * kVocab);
  std::vector<int> refTokens(checkSteps * rows);
  int* rEmitted = Alloc<int>(rows);
  for (int s = 0; s < checkSteps; s++) {
    RefEmbed<<<rows, 256>>>(embed, st.positions, st.tokens, st.lengths, ra, rb);
    RefNormSum<<<rows, 256>>>(ra, rb, st.embedNormGain, st.embedNormBias, rx);
    for (int l = 0; l < kLayers; l++) {
      const Layer& L = st.layers[l];
      const NaturalLayer& N = natural[l];
      RefLinear<<<dim3(3 * kD / 128, rows), 128>>>(rx, kD, N.qkv, L.qkvBias, rqkv, 3 * kD, rows, false);
      RefAppend<<<dim3(rows, kHeads), kHeadDim>>>(rqkv, refSelfKey[l], refSelfValue[l], capacity, st.lengths);
      RefAttention<<<dim3(rows, kHeads), 128>>>(rqkv, 3 * kD, refSelfKey[l], refSelfValue[l], static_cast<size_t>(capacity) * kHeadDim, st.lengths, 0, rattn);
      RefLinear<<<dim3(kD / 128, rows), 128>>>(rattn, kD, N.out, L.outBias, rproj, kD, rows, false);
      RefNormSum<<<rows, 256>>>(rproj, rx, L.norm1Gain, L.norm1Bias, ra);
      std::swap(ra, rx);
      RefLinear<<<dim3(kD / 128, rows), 128>>>(rx, kD, N.crossQuery, L.crossQueryBias, rq, kD, rows, false);
      RefAttention<<<dim3(rows, kHeads), 128>>>(rq, kD, L.crossKey, L.crossValue, static_cast<size_t>(source) * kHeadDim, nullptr, source, rattn);
      RefLinear<<<dim3(kD / 128, rows), 128>>>(rattn, kD, N.crossOut, L.crossOutBias, rproj, kD, rows, false);
      RefNormSum<<<rows, 256>>>(rproj, rx, L.norm2Gain, L.norm2Bias, ra);
      std::swap(ra, rx);
      RefLinear<<<dim3(kF / 128, rows), 128>>>(rx, kD, N.fc1, L.fc1Bias, rh, kF, rows, true);
      RefLinear<<<dim3(kD / 128, rows), 128>>>(rh, kF, N.fc2, L.fc2Bias, rproj, kD, rows, false);
      RefNormSum<<<rows, 256>>>(rproj, rx, L.norm3Gain, L.norm3Bias, ra);
      std::swap(ra, rx);
    }
    RefHead<<<dim3((kVocab + 127) / 128, rows), 128>>>(rx, embed, st.logitsBias, rlogits, rows);
    if (s == 0) {
      Check(cudaMemcpy(refHidden.data(), rx, rows * kD * 2, cudaMemcpyDeviceToHost), "hidden");
      Check(cudaMemcpy(refLogits.data(), rlogits, refLogits.size() * 4, cudaMemcpyDeviceToHost), "logits");
    }
    RefArgmax<<<rows, 32>>>(rlogits, st.tokens, st.lengths, rEmitted);
    Check(cudaMemcpy(&refTokens[s * rows], rEmitted, rows * 4, cudaMemcpyDeviceToHost), "tokens");
  }
  Check(cudaDeviceSynchronize(), "reference");

  // --- The step kernel.
  Check(cudaFuncSetAttribute(StepKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes), "shared");
  unsigned barrierBase = 0;
  Step* device = Alloc<Step>(1);
  Check(cudaMemcpy(device, &st, sizeof(Step), cudaMemcpyHostToDevice), "step");
  int prefetchCross = 0;
  int normOnce = 0;
  int weightsL2 = 0;
  int clustered = 0;
  // The clustered step: 128 blocks, in hardware clusters of the largest size (4 or 2) of which 128 blocks
  // fit at once, launched cooperatively when the driver takes both.
  cudaLaunchAttribute clusterAttributes[2];
  clusterAttributes[0].id = cudaLaunchAttributeClusterDimension;
  clusterAttributes[0].val.clusterDim.y = 1;
  clusterAttributes[0].val.clusterDim.z = 1;
  clusterAttributes[1].id = cudaLaunchAttributeCooperative;
  clusterAttributes[1].val.cooperative = 1;
  cudaLaunchConfig_t clusterConfig = {};
  clusterConfig.gridDim = dim3(kGroupedBlocks);
  clusterConfig.blockDim = dim3(kThreads);
  clusterConfig.dynamicSmemBytes = kSharedBytes;
  clusterConfig.attrs = clusterAttributes;
  clusterConfig.numAttrs = 1;
  int clusterSize = 0;
  void (*clusterKernel)(const Step*, int, unsigned, unsigned, int) = nullptr;
  const auto fits = [&](auto kernel, int size) {
    Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes), "shared");
    clusterAttributes[0].val.clusterDim.x = size;
    int active = 0;
    Check(cudaOccupancyMaxActiveClusters(&active, kernel, &clusterConfig), "active clusters");
    std::printf("clusters of %d that fit at once: %d (%d blocks; the clustered step needs %d)\n", size, active, active * size, kGroupedBlocks);
    if (clusterKernel == nullptr && active * size >= kGroupedBlocks) {
      clusterKernel = kernel;
      clusterSize = size;
    }
  };
  fits(ClusterStepKernel<4>, 4);
  fits(ClusterStepKernel<2>, 2);
  clusterAttributes[0].val.clusterDim.x = clusterSize;
  unsigned groupBase = 0;
  clusterConfig.numAttrs = 2;
  // Where any block gave up waiting (the watchdog in MbarWait and GridBarrier), after a run.
  const auto reportStuck = [&](const char* what) {
    std::vector<unsigned> where(256);
    Check(cudaMemcpyFromSymbol(where.data(), stuck, 256 * 4), "stuck");
    int n = 0;
    for (int b = 0; b < 256; b++) {
      if (where[b] == 0) continue;
      if (n++ < 12) std::printf("%s: block %d stuck at %s 0x%x\n", what, b, where[b] >> 24 == 1 ? "mbarrier" : "grid barrier", where[b] & 0xffffff);
    }
    if (n > 0) {
      std::printf("%s: %d blocks stuck\n", what, n);
      std::exit(3);
    }
  };
  const auto launch = [&](int steps, cudaStream_t stream) {
    if (clustered) {
      clusterConfig.stream = stream;
      cudaError_t status = cudaLaunchKernelEx(&clusterConfig, clusterKernel, const_cast<const Step*>(device), steps, barrierBase, groupBase, prefetchCross);
      if (status != cudaSuccess && clusterConfig.numAttrs == 2) {
        cudaGetLastError();
        std::printf("cooperative launch with clusters refused (%s); launching without the cooperative flag (all %d blocks fit at once)\n",
                    cudaGetErrorString(status), kGroupedBlocks);
        clusterConfig.numAttrs = 1;
        status = cudaLaunchKernelEx(&clusterConfig, clusterKernel, const_cast<const Step*>(device), steps, barrierBase, groupBase, prefetchCross);
      }
      Check(status, "cluster launch");
      barrierBase += steps * (6 * kLayers + 1);
      groupBase += steps * 5 * kLayers;
      return;
    }
    void* args[] = {&device, &steps, &barrierBase, &prefetchCross, &normOnce, &weightsL2};
    Check(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(StepKernel), dim3(blocks), dim3(kThreads), args, kSharedBytes, stream), "launch");
    // Barriers a step: 8 a layer (11 with a norm phase before each of the 3 products that take one), the
    // head's (and its norm's).
    barrierBase += steps * ((normOnce ? 11 : 8) * kLayers + (normOnce ? 2 : 1));
  };
  // The check, for one setting: step 1's hidden state and tokens, then checkSteps steps in one launch.
  double hiddenDiff = 0, hiddenMax = 0;
  std::string checksJson;
  int firstSame = 0, same = 0, sameUntil = 0;
  const auto check = [&]() {
    reset(false);
    barrierBase = 0;
    groupBase = 0;
    launch(1, 0);
    Check(cudaDeviceSynchronize(), "step");
    reportStuck("step");
    // The head's input is the stream's last write; residual[cur] flips at every norm from 0: the
    // embedding's, two a layer, layers 1.. once more, the head's.
    std::vector<__half> hidden(rows * kD);
    const int last = clustered ? 0 : (1 + 2 * kLayers + (kLayers - 1) + 1) % 2;
    Check(cudaMemcpy(hidden.data(), st.residual[last], rows * kD * 2, cudaMemcpyDeviceToHost), "hidden");
    hiddenDiff = 0;
    for (int i = 0; i < rows * kD; i++) {
      hiddenDiff = std::max(hiddenDiff, static_cast<double>(std::fabs(__half2float(hidden[i]) - __half2float(refHidden[i]))));
      hiddenMax = std::max(hiddenMax, static_cast<double>(std::fabs(__half2float(refHidden[i]))));
    }
    std::vector<int> stepTokens(rows);
    Check(cudaMemcpy(stepTokens.data(), st.emitted, rows * 4, cudaMemcpyDeviceToHost), "tokens");
    firstSame = 0;
    for (int r = 0; r < rows; r++) firstSame += stepTokens[r] == refTokens[r];
    reset(false);
    barrierBase = 0;
    groupBase = 0;
    launch(checkSteps, 0);
    Check(cudaDeviceSynchronize(), "steps");
    reportStuck("steps");
    std::vector<int> tokens(checkSteps * rows);
    Check(cudaMemcpy(tokens.data(), st.emitted, tokens.size() * 4, cudaMemcpyDeviceToHost), "tokens");
    same = 0;
    sameUntil = 0;
    for (int r = 0; r < rows; r++) {
      int s = 0;
      while (s < checkSteps && tokens[s * rows + r] == refTokens[s * rows + r]) s++;
      sameUntil += s;
      for (int k = 0; k < checkSteps; k++) same += tokens[k * rows + r] == refTokens[k * rows + r];
    }
    const char* design = clustered ? "clustered" : normOnce ? "norm once a row" : "norm in every block";
    std::printf("check (%s): hidden max |diff| %.3g (max |h| %.3g); step 1 tokens %d/%d; %d steps: %d/%d tokens, %d/%d before a row's "
                "first difference\n",
                design, hiddenDiff, hiddenMax, firstSame, rows, checkSteps, same, checkSteps * rows, sameUntil, checkSteps * rows);
    checksJson += std::string(checksJson.empty() ? "" : ",") + "{\"design\":\"" + design +
                  "\",\"hiddenMaxDiff\":" + std::to_string(hiddenDiff) + ",\"step1TokensSame\":" + std::to_string(firstSame) +
                  ",\"tokensSame\":" + std::to_string(same) + "}";
    return firstSame == rows && hiddenDiff < 0.05;
  };
  const bool clusteredFits = clusterKernel != nullptr;
  bool ok = check();
  normOnce = 1;
  ok = check() && ok;
  normOnce = 0;
  if (clusteredFits) {
    clustered = 1;
    ok = check() && ok;
    reportStuck("clustered check");
    clustered = 0;
  }
  // Logit gap of the reference's top two at step 1, to read the check by.
  double minGap = 1e9;
  for (int r = 0; r < rows; r++) {
    float a = -INFINITY, b = -INFINITY;
    for (int n = 0; n < kVocab; n++) {
      const float v = refLogits[static_cast<size_t>(r) * kVocab + n];
      if (v > a) {
        b = a;
        a = v;
      } else if (v > b) {
        b = v;
      }
    }
    minGap = std::min(minGap, static_cast<double>(a - b));
  }
  std::printf("smallest top-2 logit gap of the reference at step 1: %.3g\n", minGap);

  // --- Barriers alone.
  double barrierUs = 0, groupBarrierUs = 0;
  {
    cudaEvent_t begin, end;
    cudaEventCreate(&begin);
    cudaEventCreate(&end);
    int n = 2000;
    // us a barrier: n of them in one cooperative launch of `grid` blocks, counters zeroed first; the second round.
    const auto time = [&](void* kernel, int grid, int counters) {
      unsigned* counter = Alloc<unsigned>(counters);
      float ms = 0;
      for (int round = 0; round < 2; round++) {
        Check(cudaMemset(counter, 0, counters * 4), "counters");
        void* args[] = {&counter, &n};
        cudaEventRecord(begin);
        Check(cudaLaunchCooperativeKernel(kernel, dim3(grid), dim3(kThreads), args, 0, 0), "barriers");
        cudaEventRecord(end);
        Check(cudaEventSynchronize(end), "barriers");
        cudaEventElapsedTime(&ms, begin, end);
      }
      return ms * 1000 / n;
    };
    barrierUs = time(reinterpret_cast<void*>(BarrierKernel), blocks, 1);
    std::printf("a grid barrier over %d blocks: %.2f us\n", blocks, barrierUs);
    groupBarrierUs = time(reinterpret_cast<void*>(GroupBarrierKernel), kGroupedBlocks, kHeads);
    std::printf("a barrier over a group of %d blocks (16 groups at once): %.2f us\n", kGroup, groupBarrierUs);
  }

  // --- Timing and where the time goes, without and with the cross caches pulled into L2 ahead.
  std::string json = "{\"device\":\"" + std::string(prop.name) + "\",\"rows\":" + std::to_string(rows) + ",\"source\":" + std::to_string(source) +
                     ",\"startLength\":" + std::to_string(startLength) + ",\"checkSteps\":" + std::to_string(checkSteps) +
                     ",\"checks\":[" + checksJson + "],\"barrierUs\":" + std::to_string(barrierUs) + ",\"groupBarrierUs\":" + std::to_string(groupBarrierUs) +
                     ",\"clusterSize\":" + std::to_string(clusterSize) + ",\"variants\":[";
  cudaEvent_t begin, end;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  const int timedSteps = 64;
  // Variants: each row normed by every block; normed once a row; that with the next-but-one product's
  // weights pulled into L2; that with the layer's cross caches pulled into L2 during self-attention; the
  // clustered step; that with the layer's cross caches pulled into L2 after its q/k/v product.
  for (int variant = 0; variant < 6; variant++) {
    clustered = variant >= 4 ? 1 : 0;
    if (clustered && !clusteredFits) continue;
    normOnce = variant > 0 && !clustered ? 1 : 0;
    weightsL2 = variant == 2 ? 1 : 0;
    prefetchCross = variant == 3 || variant == 5 ? 1 : 0;
    std::vector<double> perStep, perStepOne;
    for (int round = 0; round < 5; round++) {
      reset(false);
      barrierBase = 0;
      groupBase = 0;
      cudaEventRecord(begin);
      for (int s = 0; s < timedSteps; s++) launch(1, 0);
      cudaEventRecord(end);
      Check(cudaEventSynchronize(end), "time");
      float ms = 0;
      cudaEventElapsedTime(&ms, begin, end);
      perStep.push_back(ms / timedSteps);
      reset(false);
      barrierBase = 0;
      groupBase = 0;
      cudaEventRecord(begin);
      launch(timedSteps, 0);
      cudaEventRecord(end);
      Check(cudaEventSynchronize(end), "time");
      cudaEventElapsedTime(&ms, begin, end);
      perStepOne.push_back(ms / timedSteps);
    }
    // Where a step's time goes: block 0's clock as it leaves each barrier, in the second step of a run.
    unsigned long long* trace = Alloc<unsigned long long>(240);
    std::vector<unsigned long long> t(240);
    double sub[32] = {0};
    double phase[8] = {0}, head = 0, token = 0, total = 0;
    const char* plainNames[8] = {"q/k/v (with the norm before it)", "self-attention", "output product", "cross query (with norm)", "cross-attention",
                                 "cross output product", "fc1 + GELU (with norm)", "fc2"};
    const char* clusteredNames[6] = {"norm, q/k/v, self-attention", "output product", "norm, cross query, cross-attention", "cross output product",
                                     "norm, fc1 + GELU", "fc2"};
    const char* const* names = clustered ? clusteredNames : plainNames;
    const int per = clustered ? 6 : normOnce ? 11 : 8;  // barriers a layer
    const int markCount = clustered ? 18 : 22;
    const bool byPhase = clustered || !normOnce;
    const int rounds = 5;
    for (int round = 0; round < rounds; round++) {
      reset(false);
      barrierBase = 0;
      groupBase = 0;
      launch(1, 0);
      st.trace = trace;
      Check(cudaMemcpy(device, &st, sizeof(Step), cudaMemcpyHostToDevice), "step");
      launch(1, 0);
      Check(cudaDeviceSynchronize(), "trace");
      st.trace = nullptr;
      Check(cudaMemcpy(device, &st, sizeof(Step), cudaMemcpyHostToDevice), "step");
      Check(cudaMemcpy(t.data(), trace, t.size() * 8, cudaMemcpyDeviceToHost), "trace");
      if (byPhase) {
        for (int l = 0; l < kLayers; l++)
          for (int p = 0; p < per; p++) phase[p] += (t[l * per + p + 1] - t[l * per + p]) / 1000.0 / rounds;
        head += (t[per * kLayers + 1] - t[per * kLayers]) / 1000.0 / rounds;
      }
      total += (t[per * kLayers + (normOnce ? 2 : 1)] - t[0]) / 1000.0 / rounds;
      for (int k = 1; k < markCount; k++) sub[k] += (static_cast<double>(t[200 + k]) - static_cast<double>(t[200 + k - 1])) / 1000.0 / rounds;
    }
    std::sort(perStep.begin(), perStep.end());
    std::sort(perStepOne.begin(), perStepOne.end());
    std::printf("\n%s; norm once a row: %s; weights two products ahead into L2: %s; cross caches into L2 ahead: %s\n| phase (block 0, barrier to barrier) | us a layer | us a step |\n| --- | --- | --- |\n",
                clustered ? "clustered step" : "one block an SM", normOnce ? "yes" : "no", weightsL2 ? "yes" : "no", prefetchCross ? "yes" : "no");
    json += std::string(variant ? "," : "") + "{\"clustered\":" + std::to_string(clustered) + ",\"normOnce\":" + std::to_string(normOnce) + ",\"weightsL2\":" + std::to_string(weightsL2) + ",\"prefetchCross\":" + std::to_string(prefetchCross) +
            ",\"marksUs\":[";
    for (int k = 1; k < markCount; k++) json += std::string(k > 1 ? "," : "") + std::to_string(sub[k]);
    json += "],\"phasesUsPerLayer\":{";
    for (int p = 0; byPhase && p < per; p++) {
      std::printf("| %s | %.2f | %.1f |\n", names[p], phase[p] / kLayers, phase[p]);
      json += std::string(p ? "," : "") + "\"" + names[p] + "\":" + std::to_string(phase[p] / kLayers);
    }
    if (byPhase) std::printf("| head (with norm) | | %.1f |\n", head);
    std::printf("| step (block 0's clock) | | %.1f |\n", total);
    std::printf("marks in layer 6 (us from the mark before):");
    for (int k = 1; k < markCount; k++) std::printf(" %d:%.2f", k, sub[k]);
    std::printf("\n");
    std::printf("\n| steps at batch %d (bart-large shapes, source %d, from %d positions) | median ms a step | best |\n| --- | --- | --- |\n", rows, source,
                startLength);
    std::printf("| a launch a step | %.4f | %.4f |\n", perStep[2], perStep[0]);
    std::printf("| %d steps a launch | %.4f | %.4f |\n", timedSteps, perStepOne[2], perStepOne[0]);
    json += "},\"headUs\":" + std::to_string(head) + ",\"tokenUs\":" + std::to_string(token) + ",\"msPerStepLaunchEach\":" + std::to_string(perStep[2]) +
            ",\"msPerStepOneLaunch\":" + std::to_string(perStepOne[2]) + "}";
  }
  json += "]}\n";
  if (jsonPath != nullptr) {
    FILE* f = std::fopen(jsonPath, "w");
    if (f != nullptr) {
      std::fputs(json.c_str(), f);
      std::fclose(f);
    }
  }
  return ok ? 0 : 1;
}
