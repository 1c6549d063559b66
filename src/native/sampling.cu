// The sampler's rows on the GPU: the algorithm of sampling.h with one CUDA block per row, its sums and
// searches reduced through shared memory in a fixed order; few rows take a cluster of blocks each
// (DeviceBlock's ranks), which split the passes over the whole row between them.
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "device.cuh"
#include "sampling.h"

namespace chorus {
namespace {

constexpr int kSampleThreads = 512;

constexpr int kCompactIds = 2048;
// Shared memory per block: one reduction slot of up to 32 bytes per thread, a histogram of 256 counts,
// the gathered ids with their values, the nucleus's buckets (running sums, counts, 32-bit sums), and
// a gathered row's sorted keys with their positions.
constexpr size_t kReduceBytes = kSampleThreads * 32;
constexpr size_t kCountsAt = kReduceBytes;
constexpr size_t kValuesAt = kCountsAt + 256 * sizeof(int);
constexpr size_t kIndicesAt = kValuesAt + kCompactIds * sizeof(float);
constexpr size_t kMassSumsAt = kIndicesAt + kCompactIds * sizeof(int);
constexpr size_t kMassCountsAt = kMassSumsAt + kMassBuckets * sizeof(unsigned long long);
constexpr size_t kMassAddsAt = kMassCountsAt + kMassBuckets * sizeof(int);
constexpr size_t kSortKeysAt = kMassAddsAt + kMassBuckets * sizeof(unsigned);
constexpr size_t kSortAtAt = kSortKeysAt + kCompactIds * sizeof(uint32_t);
// A cluster's ranks: two exchange slots (alternating) and a gather's staging (its part of the ids).
constexpr size_t kExchangeAt = kSortAtAt + kCompactIds * sizeof(int);
constexpr size_t kExchangeBytes = 64;
constexpr size_t kStageValuesAt = kExchangeAt + 2 * kExchangeBytes;
constexpr size_t kStageIndicesAt = kStageValuesAt + kCompactIds * sizeof(float);
constexpr size_t kSharedBytes = kStageIndicesAt + kCompactIds * sizeof(int);
// Blocks a row takes when few rows are sampled (a cluster of the portable size; 16, which sm_90 allows
// too, measured slower: 0.076 against 0.070 ms for a flat top-p row on an H100).
constexpr int kClusterRanks = 8;
// The most blocks a clustered launch takes (the H100's 132 SMs hold one each).
constexpr int kClusterBlocks = 128;
static_assert(kMassSumsAt % 8 == 0, "the buckets' sums are 8-byte aligned");

struct DeviceBlock {
  static constexpr int kCompact = kCompactIds;
  // The block's row's probabilities (vocab doubles in global memory), for the nucleus over the whole row.
  double* mass;
  char* shared;
  int* counts;
  float* values;
  int* indices;
  // The nucleus's buckets (sampling.h's MassBucket): 32-bit sums, then running totals and counts.
  unsigned* massAdds;
  unsigned long long* massSums;
  int* massCounts;
  // A gathered row's sorted keys and their positions (SortByKey).
  uint32_t* sortKeys;
  int* sortAt;
  // Phase marks (CHORUS_SAMPLER_MARKS=1 in the environment, for profiling): the clock at each of block
  // 0's phases, printed when it ends; none when null.
  long long* marks;
  // A cluster's blocks share the row: this block's rank of `ranks`, the row's length (the passes over
  // the whole row, n == vocab, are split between the ranks; the gathered rows' passes run in every rank
  // over its own copy), and the ranks' exchange slots and staging.
  int rank = 0;
  int ranks = 1;
  int vocab = 0;
  char* exchange = nullptr;
  float* stageValues = nullptr;
  int* stageIndices = nullptr;
  int exchanges = 0;

  __device__ void Sync() { __syncthreads(); }

  // Whether a pass over n items is split between the ranks: the whole row's.
  __device__ bool Split(int n) const { return ranks > 1 && n == vocab; }
  // This rank's part [lo, hi) of n items (multiples of 32, in rank order).
  __device__ void RankRange(int n, int& lo, int& hi) const {
    const int chunk = ((n + ranks - 1) / ranks + 31) & ~31;
    lo = min(n, rank * chunk);
    hi = min(n, lo + chunk);
  }
  __device__ void ClusterSync() { ClusterBarrier(); }
  // A pass over n items: this rank's part [lo, hi) of them (all of them unless the pass is split), and
  // where a gather over it writes (the staging when split, else the gathered row).
  struct Part {
    bool split;
    int lo;
    int hi;
    float* values;
    int* indices;
  };
  __device__ Part PartOf(int n) const {
    Part part{Split(n), 0, n, values, indices};
    if (part.split) {
      RankRange(n, part.lo, part.hi);
      part.values = stageValues;
      part.indices = stageIndices;
    }
    return part;
  }
  // The end of a pass's writes: every rank's, when it was split.
  __device__ void PassDone(const Part& part) {
    if (part.split) ClusterSync();
    else __syncthreads();
  }
  // Every rank's `value` (the same in all of a block's threads), in rank order, into out[0..ranks).
  template <class T>
  __device__ void Gathered(T value, T* out) {
    static_assert(sizeof(T) <= kExchangeBytes, "an exchanged value fits its slot");
    T* slot = reinterpret_cast<T*>(exchange + (exchanges++ & 1) * kExchangeBytes);
    if (threadIdx.x == 0) *slot = value;
    // The slots alternate: a rank writes this one again only after the next exchange's sync, which every
    // rank reaches after reading it here.
    ClusterSync();
    for (int r = 0; r < ranks; r++) out[r] = *RankShared(slot, r);
  }
  // The ranks' values combined in rank order (the same in every rank).
  template <class T, class Combine>
  __device__ T AcrossRanks(T value, Combine combine) {
    T all[kClusterRanks];
    Gathered(value, all);
    T acc = all[0];
    for (int r = 1; r < ranks; r++) acc = combine(acc, all[r]);
    return acc;
  }

  // The nucleus's buckets: cleared, added to by any thread (integer sums, so the order does not
  // matter), then scanned into running totals from the top; false when a bucket held too many ids for
  // its 32-bit sum.
  __device__ void ClearMassBuckets() {
    for (int j = threadIdx.x; j < kMassBuckets; j += blockDim.x) {
      massAdds[j] = 0;
      massCounts[j] = 0;
    }
    __syncthreads();
  }
  __device__ void AddMass(int bucket, double weight) {
    atomicAdd(&massAdds[bucket], MassUnits(weight));
    atomicAdd(&massCounts[bucket], 1);
  }
  __device__ void AddCount(int bucket) { atomicAdd(&massCounts[bucket], 1); }
  __device__ bool ScanMassBuckets() {
    __syncthreads();
    int begin, end;
    Share(kMassBuckets, begin, end);
    // This thread's buckets, summed over the ranks' (each added its part of the row).
    constexpr int kMost = (kMassBuckets + kSampleThreads - 1) / kSampleThreads;
    unsigned long long adds[kMost];
    int many[kMost];
    if (ranks > 1) ClusterSync();
    for (int j = begin; j < end; j++) {
      adds[j - begin] = 0;
      many[j - begin] = 0;
      for (int r = 0; r < ranks; r++) {
        adds[j - begin] += ranks > 1 ? *RankShared(&massAdds[j], r) : massAdds[j];
        many[j - begin] += ranks > 1 ? *RankShared(&massCounts[j], r) : massCounts[j];
      }
    }
    // Read everywhere before any rank writes its running totals over them.
    if (ranks > 1) ClusterSync();
    unsigned long long sum = 0;
    int count = 0;
    bool usable = true;
    for (int j = begin; j < end; j++) {
      sum += adds[j - begin];
      count += many[j - begin];
      usable = usable && many[j - begin] < kMassBucketIds;
    }
    unsigned long long sumTotal;
    int countTotal;
    sum = ExclusiveScan(sum, sumTotal);
    count = ExclusiveScan(count, countTotal);
    for (int j = begin; j < end; j++) {
      sum += adds[j - begin];
      massSums[j] = sum;
      count += many[j - begin];
      massCounts[j] = count;
    }
    return __syncthreads_and(usable);
  }

  // f(i) for each i < n, once (a cluster's rank 0 alone: f may read and write the row).
  template <class F>
  __device__ void ForEach(int n, F f) {
    if (rank == 0) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) f(i);
    }
    if (ranks > 1) ClusterSync();
    else __syncthreads();
  }

  // This thread's strided share of n elements in index order, read ahead (device.cuh).
  template <class T, class Read, class Use>
  __device__ void Strided(int n, Read read, Use use) {
    StridedShare<T, kUnroll>(n, read, use);
  }
  // The same over this rank's items of a pass, [part.lo, part.hi): use(i, read(i)) by item index.
  template <class T, class Read, class Use>
  __device__ void StridedOver(const Part& part, Read read, Use use) {
    const int lo = part.lo;
    Strided<T>(part.hi - lo, [&](int i) { return read(lo + i); }, [&](int i, T x) { use(lo + i, x); });
  }

  // Each thread combines its strided share in index order, then the threads' results are combined.
  template <class T, class Map, class Combine>
  __device__ T Reduce(int n, T init, Map map, Combine combine) {
    T acc = init;
    const Part part = PartOf(n);
    StridedOver<T>(part, map, [&](int, T x) { acc = combine(acc, x); });
    acc = Combined(acc, combine);
    return part.split ? AcrossRanks(acc, combine) : acc;
  }

  // w[i] = f(i, w[i]) for each i < n.
  template <class F>
  __device__ void Update(int n, float* w, F f) {
    const Part part = PartOf(n);
    StridedOver<float>(part, [&](int i) { return w[i]; }, [&](int i, float x) { w[i] = f(i, x); });
    PassDone(part);
  }

  // Update, returning the largest new value.
  template <class F>
  __device__ float UpdateMax(int n, float* w, F f) {
    float max = -INFINITY;
    const Part part = PartOf(n);
    StridedOver<float>(part, [&](int i) { return w[i]; }, [&](int i, float x) {
      const float y = f(i, x);
      w[i] = y;
      max = y > max ? y : max;
    });
    const auto larger = [](float a, float c) { return a > c ? a : c; };
    max = Combined(max, larger);
    return part.split ? AcrossRanks(max, larger) : max;
  }

  __device__ void Mark(int k) {
    if (marks == nullptr) return;
    __syncthreads();
    if (threadIdx.x == 0) marks[k] = clock64();
  }

  // Every thread's `value` combined, in a fixed tree order; every thread gets the result.
  template <class T, class Combine>
  __device__ T Combined(T value, Combine combine) {
    T* slots = reinterpret_cast<T*>(shared);
    __syncthreads();
    slots[threadIdx.x] = value;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
      if (threadIdx.x < stride) slots[threadIdx.x] = combine(slots[threadIdx.x], slots[threadIdx.x + stride]);
      __syncthreads();
    }
    const T out = slots[0];
    __syncthreads();
    return out;
  }

  // Counts per bucket of bucketOf(i) (-1: not counted); lanes of a warp that share a bucket add once.
  template <class F>
  __device__ const int* Histogram(int n, F bucketOf) {
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) counts[i] = 0;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    for (int base = 0; base < n; base += blockDim.x) {
      const int i = base + threadIdx.x;
      const int bucket = i < n ? bucketOf(i) : -1;
      const unsigned peers = __match_any_sync(0xffffffffu, bucket);
      if (bucket >= 0 && lane == __ffs(peers) - 1) atomicAdd(&counts[bucket], __popc(peers));
    }
    __syncthreads();
    return counts;
  }

  // Per bucket of bucketOf(i) (-1: none), the sum of weightOf(i) and the count, into sums and counts
  // (every thread's copy): each thread sums its strided share in index order, then each warp's lanes in
  // a fixed tree, then the warps in order.
  template <class Bucket, class Weight>
  __device__ void BucketSums(int n, Bucket bucketOf, Weight weightOf, double* sums, int* counts) {
    double local[kThresholdBuckets];
    int many[kThresholdBuckets];
#pragma unroll
    for (int j = 0; j < kThresholdBuckets; j++) {
      local[j] = 0;
      many[j] = 0;
    }
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int bucket = bucketOf(i);
      if (bucket < 0) continue;
      const double weight = weightOf(i);
      // Unrolled, so that the sums stay in registers.
#pragma unroll
      for (int j = 0; j < kThresholdBuckets; j++) {
        local[j] += j == bucket ? weight : 0.0;
        many[j] += j == bucket ? 1 : 0;
      }
    }
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    double* slots = reinterpret_cast<double*>(shared);
    int* countSlots = reinterpret_cast<int*>(slots + (warps + 1) * kThresholdBuckets);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kThresholdBuckets; j++) {
      double x = local[j];
      int c = many[j];
      for (int offset = 16; offset > 0; offset >>= 1) {
        x += __shfl_down_sync(0xffffffffu, x, offset);
        c += __shfl_down_sync(0xffffffffu, c, offset);
      }
      if (lane == 0) {
        slots[warp * kThresholdBuckets + j] = x;
        countSlots[warp * kThresholdBuckets + j] = c;
      }
    }
    __syncthreads();
    if (threadIdx.x < kThresholdBuckets) {
      double total = 0;
      int count = 0;
      for (int w = 0; w < warps; w++) {
        total += slots[w * kThresholdBuckets + threadIdx.x];
        count += countSlots[w * kThresholdBuckets + threadIdx.x];
      }
      slots[warps * kThresholdBuckets + threadIdx.x] = total;
      countSlots[warps * kThresholdBuckets + threadIdx.x] = count;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kThresholdBuckets; j++) {
      sums[j] = slots[warps * kThresholdBuckets + j];
      counts[j] = countSlots[warps * kThresholdBuckets + j];
    }
    __syncthreads();
  }

  // This thread's contiguous share [begin, end) of n items, in thread order.
  __device__ void Share(int n, int& begin, int& end) {
    const int chunk = (n + blockDim.x - 1) / blockDim.x;
    begin = min(n, static_cast<int>(threadIdx.x) * chunk);
    end = min(n, begin + chunk);
  }
  // The same of this rank's items of a pass, [part.lo, part.hi), as item indices.
  __device__ void ShareOf(const Part& part, int& begin, int& end) {
    Share(part.hi - part.lo, begin, end);
    begin += part.lo;
    end += part.lo;
  }

  // A scan of one value per thread in a fixed order: each warp's lanes by shuffles, the warps' totals by
  // the first warp. Every thread gets the sum of the values of the threads before it, and `total` the
  // sum of all.
  template <class T>
  __device__ T ExclusiveScan(T value, T& total) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    T x = value;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const T y = __shfl_up_sync(0xffffffffu, x, offset);
      if (lane >= offset) x += y;
    }
    T* sums = reinterpret_cast<T*>(shared);
    __syncthreads();
    if (lane == 31) sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
      T y = lane < warps ? sums[lane] : T(0);
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const T z = __shfl_up_sync(0xffffffffu, y, offset);
        if (lane >= offset) y += z;
      }
      if (lane < warps) sums[lane] = y;
    }
    T inWarp = __shfl_up_sync(0xffffffffu, x, 1);
    if (lane == 0) inWarp = T(0);
    __syncthreads();
    const T before = warp == 0 ? inWarp : sums[warp - 1] + inWarp;
    total = sums[warps - 1];
    __syncthreads();
    return before;
  }

  // This warp's segment of n elements: the warps take consecutive segments (multiples of 32), in order,
  // which their lanes read together, 32 consecutive elements at a time.
  // This warp's segment of [lo, hi).
  __device__ void WarpSegment(int lo, int hi, int& begin, int& end) {
    const int warps = blockDim.x >> 5;
    const int segment = ((hi - lo + warps - 1) / warps + 31) & ~31;
    begin = min(hi, lo + static_cast<int>(threadIdx.x >> 5) * segment);
    end = min(hi, begin + segment);
  }

  // A split gather's end: each rank's part (in its staging, `count` ids) copied after the parts of the
  // ranks before it into every rank's values and indices; returns how many there are in all (at most
  // kCompact kept).
  __device__ int GatherParts(int count) {
    int counts[kClusterRanks];
    Gathered(count, counts);
    int at = 0;
    for (int r = 0; r < ranks; r++) {
      const int n = min(counts[r], kCompact - at);
      const float* fromValues = RankShared(stageValues, r);
      const int* fromIndices = RankShared(stageIndices, r);
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
        values[at + i] = fromValues[i];
        indices[at + i] = fromIndices[i];
      }
      at += n > 0 ? n : 0;
    }
    int total = 0;
    for (int r = 0; r < ranks; r++) total += counts[r];
    // Every rank has read the others' staging before any gathers into its own again.
    ClusterSync();
    return total;
  }

  // use(i, read(i)) for each i < n (a thread's strided share, read ahead).
  template <class Read, class Use>
  __device__ void Each(int n, Read read, Use use) {
    const Part part = PartOf(n);
    StridedOver<float>(part, read, use);
    PassDone(part);
  }

  // f(id, value, inside) over this warp's segment [begin, end) of w, 32 ids at a time with kAhead rows of
  // 32 read ahead; every lane calls f at every step (`inside` false past the end), so that f may vote
  // across the warp, and f may write the ids it is given.
  template <class F>
  __device__ void ForSegment(const float* w, int begin, int end, F f) {
    constexpr int kAhead = 4;
    const int lane = threadIdx.x & 31;
    for (int base = begin; base < end; base += 32 * kAhead) {
      float x[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; u++) {
        const int v = base + u * 32 + lane;
        x[u] = v < end ? w[v] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kAhead; u++) f(base + u * 32 + lane, x[u], base + u * 32 + lane < end);
    }
  }

  // The ids `keep` keeps (keep(id, value)), with their values, in id order (at most kCompact): each warp
  // counts its segment's, the warps' counts are scanned, and each warp gathers its own at its offset;
  // with `cut`, the others become -inf in w on the way.
  template <class Keep>
  __device__ CompactRow Compact(int n, Keep keep, float* w, bool cut) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const Part part = PartOf(n);
    int begin, end;
    WarpSegment(part.lo, part.hi, begin, end);
    int count = 0;
    ForSegment(w, begin, end, [&](int v, float x, bool inside) { count += __popc(__ballot_sync(0xffffffffu, inside && keep(v, x))); });
    int* counts = reinterpret_cast<int*>(shared);
    __syncthreads();
    if (lane == 0) counts[warp] = count;
    __syncthreads();
    int at = 0;
    int total = 0;
    for (int q = 0; q < warps; q++) {
      if (q < warp) at += counts[q];
      total += counts[q];
    }
    __syncthreads();
    ForSegment(w, begin, end, [&](int v, float x, bool inside) {
      const bool kept = inside && keep(v, x);
      const unsigned mask = __ballot_sync(0xffffffffu, kept);
      if (kept) {
        const int position = at + __popc(mask & ((1u << lane) - 1u));
        if (position < kCompact) {
          part.values[position] = x;
          part.indices[position] = v;
        }
      } else if (cut && inside) {
        w[v] = -INFINITY;
      }
      at += __popc(mask);
    });
    __syncthreads();
    if (part.split) total = GatherParts(total);
    return CompactRow{values, indices, min(total, kCompact)};
  }

  // Compact that also sums sumOf(id, value) over the ids: each thread takes a contiguous chunk (summing
  // as it counts, then the threads in a fixed tree), the chunks' counts are scanned, and each gathers
  // its own (measured faster than the warps' segments when the sum reads each id's weight).
  template <class Keep, class Sum>
  __device__ CompactRow CompactSum(int n, Keep keep, float* w, bool cut, Sum sumOf, double& sum) {
    const Part part = PartOf(n);
    int begin, end;
    ShareOf(part, begin, end);
    int local = 0;
    double localSum = 0;
    for (int v = begin; v < end; v++) {
      const float x = w[v];
      local += keep(v, x) ? 1 : 0;
      localSum += sumOf(v, x);
    }
    const auto add = [](double a, double c) { return a + c; };
    sum = Combined(localSum, add);
    if (part.split) sum = AcrossRanks(sum, add);
    int total;
    int at = ExclusiveScan(local, total);
    for (int v = begin; v < end; v++) {
      const float x = w[v];
      if (!keep(v, x)) {
        if (cut) w[v] = -INFINITY;
        continue;
      }
      if (at < kCompact) {
        part.values[at] = x;
        part.indices[at] = v;
      }
      at++;
    }
    __syncthreads();
    if (part.split) total = GatherParts(total);
    return CompactRow{values, indices, min(total, kCompact)};
  }

  // A gathered row's keys (n <= kCompact) sorted, largest first, ties in row order: a bitonic sort in
  // shared memory over the next power of two, padded with keys that sort last.
  template <class Key>
  __device__ SortedKeys SortByKey(int n, Key keyOf) {
    int m = 1;
    while (m < n) m <<= 1;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
      sortKeys[i] = i < n ? keyOf(i) : 0u;
      sortAt[i] = i < n ? i : kCompactIds + i;
    }
    __syncthreads();
    // a goes before c: a larger key, or an equal key earlier in the row.
    auto before = [](uint32_t ka, int ia, uint32_t kc, int ic) { return ka > kc || (ka == kc && ia < ic); };
    for (int k = 2; k <= m; k <<= 1) {
      for (int j = k >> 1; j > 0; j >>= 1) {
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
          const int partner = i ^ j;
          if (partner <= i) continue;
          const uint32_t ka = sortKeys[i];
          const uint32_t kc = sortKeys[partner];
          const int ia = sortAt[i];
          const int ic = sortAt[partner];
          // Runs with (i & k) == 0 end in the sorted order, the others in the reverse.
          const bool swap = (i & k) == 0 ? before(kc, ic, ka, ia) : before(ka, ia, kc, ic);
          if (swap) {
            sortKeys[i] = kc;
            sortKeys[partner] = ka;
            sortAt[i] = ic;
            sortAt[partner] = ia;
          }
        }
        __syncthreads();
      }
    }
    return SortedKeys{sortKeys, sortAt};
  }

  // The k first elements (k <= kMaxTopLogProbs) in the order of values, largest first, then of indices,
  // into out (every thread's copy); returns how many (min(k, n)). Each thread keeps the top k of its
  // strided share in registers; then k rounds each take the best of the threads' heads.
  template <class Value>
  __device__ int TopK(int n, Value valueOf, int k, Best* out) {
    Best held[kMaxTopLogProbs];
    int count = 0;
    Strided<float>(n, valueOf, [&](int i, float x) { OfferTop(held, count, k, x, i); });
    Best* winners = reinterpret_cast<Best*>(shared);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    int head = 0;
    int found = 0;
    for (int j = 0; j < k; j++) {
      Best mine = head < count ? held[head] : Best{-INFINITY, n};
      for (int offset = 16; offset > 0; offset >>= 1) {
        const Best other{__shfl_down_sync(0xffffffffu, mine.value, offset), __shfl_down_sync(0xffffffffu, mine.index, offset)};
        mine = CombineBest(mine, other);
      }
      __syncthreads();
      if (lane == 0) winners[warp] = mine;
      __syncthreads();
      Best best = winners[0];
      for (int w = 1; w < warps; w++) best = CombineBest(best, winners[w]);
      if (best.index >= n) break;
      out[j] = best;
      found = j + 1;
      if (head < count && held[head].index == best.index) head++;
    }
    __syncthreads();
    return found;
  }

  // Each thread sums a contiguous chunk, the chunks' sums are scanned, and each thread walks its chunk
  // from the sum before it; the first crossing wins. Weights are never negative, so a thread whose sum
  // before passes the target crosses at its first element, and one whose chunk ends short of the target
  // (by more than the rounding its walk may add up differently) never crosses: only the thread whose
  // chunk holds the crossing walks. (A walk by warps over segments was measured slower: its one warp's
  // steps wait on each read.)
  template <class Weight>
  __device__ int FindFirst(int n, Weight weight, double target, bool strict) {
    const Part part = PartOf(n);
    int begin, end;
    ShareOf(part, begin, end);
    double local = 0;
    for (int v = begin; v < end; v++) local += weight(v);
    double total;
    double sum = ExclusiveScan(local, total);
    if (part.split) {
      // The ranks before this one, in rank order.
      double totals[kClusterRanks];
      Gathered(total, totals);
      for (int r = 0; r < rank; r++) sum += totals[r];
    }
    int found = n;
    auto passes = [&](double s) { return strict ? target < s : s >= target; };
    if (begin < end && passes(sum)) {
      found = begin;
    } else if (begin < end && (sum + local) * (1 + 1e-9) >= target) {
      for (int v = begin; v < end; v++) {
        sum += weight(v);
        if (passes(sum)) {
          found = v;
          break;
        }
      }
    }
    const auto least = [](int a, int c) { return a < c ? a : c; };
    int first = Combined(found, least);
    if (part.split) first = AcrossRanks(first, least);
    return first >= n ? -1 : first;
  }
};

template <typename T>
__global__ void __launch_bounds__(kSampleThreads) SampleRowsKernel(const T* logits, int vocab, const int32_t* rows, const SampleParams* params, const int32_t* seen,
                                                                   const int32_t* bans, float* work, double* mass, SampleResult* out, bool withMarks, int ranks) {
  extern __shared__ char shared[];
  __shared__ long long marks[8];
  // Row r takes blocks r * ranks .. r * ranks + ranks - 1 (a cluster when ranks > 1).
  const int r = blockIdx.x / ranks;
  DeviceBlock block{mass + static_cast<size_t>(r) * vocab,
                    shared,
                    reinterpret_cast<int*>(shared + kCountsAt),
                    reinterpret_cast<float*>(shared + kValuesAt),
                    reinterpret_cast<int*>(shared + kIndicesAt),
                    reinterpret_cast<unsigned*>(shared + kMassAddsAt),
                    reinterpret_cast<unsigned long long*>(shared + kMassSumsAt),
                    reinterpret_cast<int*>(shared + kMassCountsAt),
                    reinterpret_cast<uint32_t*>(shared + kSortKeysAt),
                    reinterpret_cast<int*>(shared + kSortAtAt),
                    withMarks ? marks : nullptr};
  block.rank = blockIdx.x % ranks;
  block.ranks = ranks;
  block.vocab = vocab;
  block.exchange = shared + kExchangeAt;
  block.stageValues = reinterpret_cast<float*>(shared + kStageValuesAt);
  block.stageIndices = reinterpret_cast<int*>(shared + kStageIndicesAt);
  const T* row = logits + static_cast<size_t>(rows[r]) * vocab;
  float* w = work + static_cast<size_t>(r) * vocab;
  const long long start = clock64();
  const DeviceBlock::Part part = block.PartOf(vocab);
  block.StridedOver<float>(part, [&](int v) { return Load(row + v); }, [&](int v, float x) { w[v] = x; });
  block.PassDone(part);
  if (withMarks) {
    if (threadIdx.x < 8) marks[threadIdx.x] = 0;
    __syncthreads();
    if (threadIdx.x == 0) marks[0] = clock64();
  }
  const SampleResult result = SampleRow(block, w, vocab, params[r], seen, bans);
  if (threadIdx.x == 0 && block.rank == 0) out[r] = result;
  if (withMarks) __syncthreads();
  if (withMarks && threadIdx.x == 0 && blockIdx.x == 0) {
    const long long done = clock64();
    // The load, then each mark's clock from the start (-1: not reached), then the end's.
    auto at = [&](int k) { return marks[k] != 0 ? marks[k] - marks[0] : -1ll; };
    printf("marks %lld %lld %lld %lld %lld %lld %lld %lld\n", marks[0] - start, at(1), at(2), at(3), at(4), at(5), at(6), done - marks[0]);
  }
}

__global__ void AdvanceChosenKernel(const int32_t* argmax, const SampleResult* sampled, const int32_t* sampleIndex, int rows, int64_t* tokens,
                                    int64_t* positions, int32_t* lengths, int32_t* hostIds, SampleResult* hostSampled) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int i = sampleIndex[r];
  tokens[r] = i < 0 ? argmax[r] : sampled[i].token;
  positions[r] += 1;
  lengths[r] += 1;
  // Every row's argmax where it was taken (the step's callback reads it for each row).
  if (hostIds != nullptr) hostIds[r] = argmax[r];
  if (i >= 0 && hostSampled != nullptr) {
    // What the host reads of a result: its token, log-probability and top entries.
    const SampleResult& from = sampled[i];
    SampleResult& to = hostSampled[i];
    to.token = from.token;
    to.topCount = from.topCount;
    to.logProb = from.logProb;
    for (int k = 0; k < from.topCount && k < kMaxTopLogProbs; k++) {
      to.topTokens[k] = from.topTokens[k];
      to.topLogProbs[k] = from.topLogProbs[k];
    }
  }
}

size_t Align8(size_t bytes) { return (bytes + 7) / 8 * 8; }

}  // namespace

size_t SampleStagingBytes(const SampleBatch& batch) {
  return Align8(sizeof(int32_t) * batch.rows.size()) + sizeof(SampleParams) * batch.params.size() + sizeof(int32_t) * (batch.seen.size() + batch.bans.size());
}

void StageSampleBatch(const SampleBatch& batch, char* hostStaging, void* staging, void* stream) {
  const int rows = static_cast<int>(batch.rows.size());
  if (rows == 0) return;
  // One copy in: rows, parameters, seen pairs, bans.
  const size_t rowsBytes = Align8(sizeof(int32_t) * rows);
  const size_t paramsBytes = sizeof(SampleParams) * rows;
  const size_t seenBytes = sizeof(int32_t) * batch.seen.size();
  const size_t bansBytes = sizeof(int32_t) * batch.bans.size();
  std::memcpy(hostStaging, batch.rows.data(), sizeof(int32_t) * rows);
  std::memcpy(hostStaging + rowsBytes, batch.params.data(), paramsBytes);
  if (seenBytes > 0) std::memcpy(hostStaging + rowsBytes + paramsBytes, batch.seen.data(), seenBytes);
  if (bansBytes > 0) std::memcpy(hostStaging + rowsBytes + paramsBytes + seenBytes, batch.bans.data(), bansBytes);
  cudaMemcpyAsync(staging, hostStaging, rowsBytes + paramsBytes + seenBytes + bansBytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream));
}

void SampleRowsDevice(const void* logits, FloatType type, int vocab, const SampleBatch& batch, char* hostStaging, void* staging, float* work,
                      double* mass, SampleResult* out, void* stream) {
  StageSampleBatch(batch, hostStaging, staging, stream);
  SampleStagedRowsDevice(logits, type, vocab, batch, staging, work, mass, out, stream);
}

void SampleStagedRowsDevice(const void* logits, FloatType type, int vocab, const SampleBatch& batch, const void* staging, float* work, double* mass,
                            SampleResult* out, void* stream) {
  const int rows = static_cast<int>(batch.rows.size());
  if (rows == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const size_t rowsBytes = Align8(sizeof(int32_t) * rows);
  const size_t paramsBytes = sizeof(SampleParams) * rows;
  const size_t seenBytes = sizeof(int32_t) * batch.seen.size();
  const char* base = static_cast<const char*>(staging);
  const auto* rowsDevice = reinterpret_cast<const int32_t*>(base);
  const auto* paramsDevice = reinterpret_cast<const SampleParams*>(base + rowsBytes);
  const auto* seenDevice = reinterpret_cast<const int32_t*>(base + rowsBytes + paramsBytes);
  const auto* bansDevice = reinterpret_cast<const int32_t*>(base + rowsBytes + paramsBytes + seenBytes);
  static const bool marks = [] {
    const char* value = std::getenv("CHORUS_SAMPLER_MARKS");
    return value != nullptr && std::string(value) == "1";
  }();
  static const int clusterRows = [] {
    const char* value = std::getenv("CHORUS_SAMPLER_CLUSTER_ROWS");
    return value == nullptr ? kClusterBlocks / 2 : std::atoi(value);
  }();
  // CHORUS_SAMPLER_CLUSTER_RANKS=2, 4 or 8: every clustered row takes that many blocks (to test).
  static const int forcedRanks = [] {
    const char* value = std::getenv("CHORUS_SAMPLER_CLUSTER_RANKS");
    const int ranks = value == nullptr ? 0 : std::atoi(value);
    return ranks == 2 || ranks == 4 || ranks == 8 ? ranks : 0;
  }();
  auto launch = [&](auto kernel, const auto* typed) {
    static std::atomic<unsigned long long> asked{0};
    AllowSharedBytes(asked, kernel, kSharedBytes);
    int device = 0;
    cudaGetDevice(&device);
    // Up to CHORUS_SAMPLER_CLUSTER_ROWS rows (default 64; 0: none) take a cluster each, of as many
    // blocks (8, 4 or 2) as keep the launch within kClusterBlocks (whole rows longer than a gather only).
    int ranks = 1;
    if (rows <= clusterRows && vocab > kCompactIds && TakesClusters(device)) {
      ranks = forcedRanks;
      if (ranks == 0) {
        ranks = kClusterRanks;
        while (ranks > 1 && rows * ranks > kClusterBlocks) ranks /= 2;
      }
    }
    if (ranks == 1) {
      kernel<<<rows, kSampleThreads, kSharedBytes, s>>>(typed, vocab, rowsDevice, paramsDevice, seenDevice, bansDevice, work, mass, out, marks, 1);
      return;
    }
    if (!LaunchClusters(kernel, rows * ranks, kSampleThreads, kSharedBytes, ranks, s, typed, vocab, rowsDevice, paramsDevice, seenDevice, bansDevice, work, mass, out,
                        static_cast<bool>(marks), ranks)) {
      // Refused (no room for a cluster): one block a row.
      kernel<<<rows, kSampleThreads, kSharedBytes, s>>>(typed, vocab, rowsDevice, paramsDevice, seenDevice, bansDevice, work, mass, out, marks, 1);
    }
  };
  switch (type) {
    case FloatType::kFloat16:
      launch(SampleRowsKernel<__half>, static_cast<const __half*>(logits));
      break;
    case FloatType::kBFloat16:
      launch(SampleRowsKernel<__nv_bfloat16>, static_cast<const __nv_bfloat16*>(logits));
      break;
    default:
      launch(SampleRowsKernel<float>, static_cast<const float*>(logits));
  }
}

void AdvanceChosenDevice(const int32_t* argmax, const SampleResult* sampled, const int32_t* sampleIndex, int rows, int64_t* tokens, int64_t* positions,
                         int32_t* lengths, void* stream, int32_t* hostIds, SampleResult* hostSampled) {
  AdvanceChosenKernel<<<(rows + 127) / 128, 128, 0, static_cast<cudaStream_t>(stream)>>>(argmax, sampled, sampleIndex, rows, tokens, positions, lengths, hostIds,
                                                                                          hostSampled);
}

}  // namespace chorus
