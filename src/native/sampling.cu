// The sampler's rows on the GPU: the algorithm of sampling.h with one CUDA block per row, its sums and
// searches reduced through shared memory in a fixed order.
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
constexpr size_t kSharedBytes = kSortAtAt + kCompactIds * sizeof(int);
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

  __device__ void Sync() { __syncthreads(); }

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
    unsigned long long sum = 0;
    int count = 0;
    bool usable = true;
    for (int j = begin; j < end; j++) {
      sum += massAdds[j];
      count += massCounts[j];
      usable = usable && massCounts[j] < kMassBucketIds;
    }
    unsigned long long sumTotal;
    int countTotal;
    sum = ExclusiveScan(sum, sumTotal);
    count = ExclusiveScan(count, countTotal);
    for (int j = begin; j < end; j++) {
      sum += massAdds[j];
      massSums[j] = sum;
      count += massCounts[j];
      massCounts[j] = count;
    }
    return __syncthreads_and(usable);
  }

  template <class F>
  __device__ void ForEach(int n, F f) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) f(i);
    __syncthreads();
  }

  // This thread's strided share of n elements in index order, read ahead (device.cuh).
  template <class T, class Read, class Use>
  __device__ void Strided(int n, Read read, Use use) {
    StridedShare<T, kUnroll>(n, read, use);
  }

  // Each thread combines its strided share in index order, then the threads' results are combined.
  template <class T, class Map, class Combine>
  __device__ T Reduce(int n, T init, Map map, Combine combine) {
    T acc = init;
    Strided<T>(n, map, [&](int, T x) { acc = combine(acc, x); });
    return Combined(acc, combine);
  }

  // w[i] = f(i, w[i]) for each i < n.
  template <class F>
  __device__ void Update(int n, float* w, F f) {
    Strided<float>(n, [&](int i) { return w[i]; }, [&](int i, float x) { w[i] = f(i, x); });
    __syncthreads();
  }

  // Update, returning the largest new value.
  template <class F>
  __device__ float UpdateMax(int n, float* w, F f) {
    float max = -INFINITY;
    Strided<float>(n, [&](int i) { return w[i]; }, [&](int i, float x) {
      const float y = f(i, x);
      w[i] = y;
      max = y > max ? y : max;
    });
    return Combined(max, [](float a, float c) { return a > c ? a : c; });
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
  __device__ void WarpSegment(int n, int& begin, int& end) {
    const int warps = blockDim.x >> 5;
    const int segment = ((n + warps - 1) / warps + 31) & ~31;
    begin = min(n, static_cast<int>(threadIdx.x >> 5) * segment);
    end = min(n, begin + segment);
  }

  // use(i, read(i)) for each i < n (a thread's strided share, read ahead).
  template <class Read, class Use>
  __device__ void Each(int n, Read read, Use use) {
    Strided<float>(n, read, use);
    __syncthreads();
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
    int begin, end;
    WarpSegment(n, begin, end);
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
          values[position] = x;
          indices[position] = v;
        }
      } else if (cut && inside) {
        w[v] = -INFINITY;
      }
      at += __popc(mask);
    });
    __syncthreads();
    return CompactRow{values, indices, min(total, kCompact)};
  }

  // Compact that also sums sumOf(id, value) over the ids: each thread takes a contiguous chunk (summing
  // as it counts, then the threads in a fixed tree), the chunks' counts are scanned, and each gathers
  // its own (measured faster than the warps' segments when the sum reads each id's weight).
  template <class Keep, class Sum>
  __device__ CompactRow CompactSum(int n, Keep keep, float* w, bool cut, Sum sumOf, double& sum) {
    int begin, end;
    Share(n, begin, end);
    int local = 0;
    double localSum = 0;
    for (int v = begin; v < end; v++) {
      const float x = w[v];
      local += keep(v, x) ? 1 : 0;
      localSum += sumOf(v, x);
    }
    sum = Combined(localSum, [](double a, double c) { return a + c; });
    int total;
    int at = ExclusiveScan(local, total);
    for (int v = begin; v < end; v++) {
      const float x = w[v];
      if (!keep(v, x)) {
        if (cut) w[v] = -INFINITY;
        continue;
      }
      if (at < kCompact) {
        values[at] = x;
        indices[at] = v;
      }
      at++;
    }
    __syncthreads();
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
    int begin, end;
    Share(n, begin, end);
    double local = 0;
    for (int v = begin; v < end; v++) local += weight(v);
    double total;
    double sum = ExclusiveScan(local, total);
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
    const int first = Combined(found, [](int a, int c) { return a < c ? a : c; });
    return first >= n ? -1 : first;
  }
};

template <typename T>
__global__ void __launch_bounds__(kSampleThreads) SampleRowsKernel(const T* logits, int vocab, const int32_t* rows, const SampleParams* params, const int32_t* seen,
                                                                   const int32_t* bans, float* work, double* mass, SampleResult* out, bool withMarks) {
  extern __shared__ char shared[];
  __shared__ long long marks[8];
  DeviceBlock block{mass + static_cast<size_t>(blockIdx.x) * vocab,
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
  const T* row = logits + static_cast<size_t>(rows[blockIdx.x]) * vocab;
  float* w = work + static_cast<size_t>(blockIdx.x) * vocab;
  const long long start = clock64();
  block.Strided<float>(vocab, [&](int v) { return Load(row + v); }, [&](int v, float x) { w[v] = x; });
  __syncthreads();
  if (withMarks) {
    if (threadIdx.x < 8) marks[threadIdx.x] = 0;
    __syncthreads();
    if (threadIdx.x == 0) marks[0] = clock64();
  }
  const SampleResult result = SampleRow(block, w, vocab, params[blockIdx.x], seen, bans);
  if (threadIdx.x == 0) out[blockIdx.x] = result;
  if (withMarks) __syncthreads();
  if (withMarks && threadIdx.x == 0 && blockIdx.x == 0) {
    const long long done = clock64();
    // The load, then each mark's clock from the start (-1: not reached), then the end's.
    auto at = [&](int k) { return marks[k] != 0 ? marks[k] - marks[0] : -1ll; };
    printf("marks %lld %lld %lld %lld %lld %lld %lld %lld\n", marks[0] - start, at(1), at(2), at(3), at(4), at(5), at(6), done - marks[0]);
  }
}

__global__ void AdvanceChosenKernel(const int32_t* argmax, const SampleResult* sampled, const int32_t* sampleIndex, int rows, int64_t* tokens,
                                    int64_t* positions, int32_t* lengths) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int i = sampleIndex[r];
  tokens[r] = i < 0 ? argmax[r] : sampled[i].token;
  positions[r] += 1;
  lengths[r] += 1;
}

size_t Align8(size_t bytes) { return (bytes + 7) / 8 * 8; }

}  // namespace

size_t SampleStagingBytes(const SampleBatch& batch) {
  return Align8(sizeof(int32_t) * batch.rows.size()) + sizeof(SampleParams) * batch.params.size() + sizeof(int32_t) * (batch.seen.size() + batch.bans.size());
}

void SampleRowsDevice(const void* logits, FloatType type, int vocab, const SampleBatch& batch, char* hostStaging, void* staging, float* work,
                      double* mass, SampleResult* out, void* stream) {
  const int rows = static_cast<int>(batch.rows.size());
  if (rows == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  // One copy in: rows, parameters, seen pairs, bans.
  const size_t rowsBytes = Align8(sizeof(int32_t) * rows);
  const size_t paramsBytes = sizeof(SampleParams) * rows;
  const size_t seenBytes = sizeof(int32_t) * batch.seen.size();
  const size_t bansBytes = sizeof(int32_t) * batch.bans.size();
  std::memcpy(hostStaging, batch.rows.data(), sizeof(int32_t) * rows);
  std::memcpy(hostStaging + rowsBytes, batch.params.data(), paramsBytes);
  if (seenBytes > 0) std::memcpy(hostStaging + rowsBytes + paramsBytes, batch.seen.data(), seenBytes);
  if (bansBytes > 0) std::memcpy(hostStaging + rowsBytes + paramsBytes + seenBytes, batch.bans.data(), bansBytes);
  char* base = static_cast<char*>(staging);
  cudaMemcpyAsync(base, hostStaging, rowsBytes + paramsBytes + seenBytes + bansBytes, cudaMemcpyHostToDevice, s);
  const auto* rowsDevice = reinterpret_cast<const int32_t*>(base);
  const auto* paramsDevice = reinterpret_cast<const SampleParams*>(base + rowsBytes);
  const auto* seenDevice = reinterpret_cast<const int32_t*>(base + rowsBytes + paramsBytes);
  const auto* bansDevice = reinterpret_cast<const int32_t*>(base + rowsBytes + paramsBytes + seenBytes);
  static const bool marks = [] {
    const char* value = std::getenv("CHORUS_SAMPLER_MARKS");
    return value != nullptr && std::string(value) == "1";
  }();
  auto launch = [&](auto kernel, const auto* typed) {
    // Past 48 KiB of shared memory a kernel must ask, once on each device.
    static std::atomic<unsigned long long> asked{0};
    int device = 0;
    cudaGetDevice(&device);
    const unsigned long long bit = 1ull << (device & 63);
    if ((asked.load() & bit) == 0) {
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes));
      asked.fetch_or(bit);
    }
    kernel<<<rows, kSampleThreads, kSharedBytes, s>>>(typed, vocab, rowsDevice, paramsDevice, seenDevice, bansDevice, work, mass, out, marks);
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
                         int32_t* lengths, void* stream) {
  AdvanceChosenKernel<<<(rows + 127) / 128, 128, 0, static_cast<cudaStream_t>(stream)>>>(argmax, sampled, sampleIndex, rows, tokens, positions, lengths);
}

}  // namespace chorus
