// The sampler's rows on the host: the algorithm of sampling.h with a block of one thread, so every sum
// runs in index order, as the TypeScript processors add.
#include "sampling.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

namespace chorus {
namespace {

struct HostBlock {
  static constexpr int kCompact = 2048;
  // A row's probabilities (vocab doubles), for the nucleus over the whole row.
  double* mass = nullptr;
  int counts[256];
  float values[kCompact];
  int indices[kCompact];
  // The nucleus's buckets (sampling.h's MassBucket): 32-bit fixed-point sums of weights and counts,
  // then running totals from the top (64-bit) once scanned.
  unsigned massAdds[kMassBuckets];
  unsigned long long massSums[kMassBuckets];
  int massCounts[kMassBuckets];

  void ClearMassBuckets() {
    std::fill(massAdds, massAdds + kMassBuckets, 0u);
    std::fill(massCounts, massCounts + kMassBuckets, 0);
  }
  void AddMass(int bucket, double weight) {
    massAdds[bucket] += MassUnits(weight);
    massCounts[bucket]++;
  }
  void AddCount(int bucket) { massCounts[bucket]++; }
  // False when a bucket held too many ids for its sum.
  bool ScanMassBuckets() {
    bool usable = true;
    unsigned long long sum = 0;
    int count = 0;
    for (int j = 0; j < kMassBuckets; j++) {
      usable = usable && massCounts[j] < kMassBucketIds;
      sum += massAdds[j];
      count += massCounts[j];
      massSums[j] = sum;
      massCounts[j] = count;
    }
    return usable;
  }
  void Sync() {}
  template <class F>
  void ForEach(int n, F f) {
    for (int i = 0; i < n; i++) f(i);
  }
  // w[i] = f(i, w[i]) for each i < n.
  template <class F>
  void Update(int n, float* w, F f) {
    for (int i = 0; i < n; i++) w[i] = f(i, w[i]);
  }

  // Update, returning the largest new value.
  template <class F>
  float UpdateMax(int n, float* w, F f) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++) {
      w[i] = f(i, w[i]);
      max = w[i] > max ? w[i] : max;
    }
    return max;
  }
  void Mark(int) {}
  // use(i, read(i)) for each i < n.
  template <class Read, class Use>
  void Each(int n, Read read, Use use) {
    for (int i = 0; i < n; i++) use(i, read(i));
  }
  template <class T, class Map, class Combine>
  T Reduce(int n, T init, Map map, Combine combine) {
    T acc = init;
    for (int v = 0; v < n; v++) acc = combine(acc, map(v));
    return acc;
  }
  // Counts per bucket of bucketOf(i) (-1: not counted).
  template <class F>
  const int* Histogram(int n, F bucketOf) {
    std::fill(counts, counts + 256, 0);
    for (int i = 0; i < n; i++) {
      const int bucket = bucketOf(i);
      if (bucket >= 0) counts[bucket]++;
    }
    return counts;
  }
  // Per bucket of bucketOf(i) (-1: none), the sum of weightOf(i), in index order, and the count.
  template <class Bucket, class Weight>
  void BucketSums(int n, Bucket bucketOf, Weight weightOf, double* sums, int* counts) {
    std::fill(sums, sums + kThresholdBuckets, 0.0);
    std::fill(counts, counts + kThresholdBuckets, 0);
    for (int i = 0; i < n; i++) {
      const int bucket = bucketOf(i);
      if (bucket < 0) continue;
      sums[bucket] += weightOf(i);
      counts[bucket]++;
    }
  }
  // The ids `keep` keeps (keep(id, value)), with their values, in id order (at most kCompact); with
  // `cut`, the others become -inf in w. CompactSum also sums sumOf(id, value) over the ids, in id order.
  template <class Keep, class Sum>
  CompactRow CompactSum(int n, Keep keep, float* w, bool cut, Sum sumOf, double& sum) {
    int m = 0;
    sum = 0;
    for (int v = 0; v < n; v++) {
      sum += sumOf(v, w[v]);
      if (!keep(v, w[v])) {
        if (cut) w[v] = -INFINITY;
        continue;
      }
      if (m < kCompact) {
        values[m] = w[v];
        indices[m] = v;
      }
      m++;
    }
    return CompactRow{values, indices, std::min(m, kCompact)};
  }
  template <class Keep>
  CompactRow Compact(int n, Keep keep, float* w, bool cut) {
    double unused;
    return CompactSum(n, keep, w, cut, [](int, float) { return 0.0; }, unused);
  }
  // A gathered row's keys sorted, largest first, ties in row order.
  uint32_t sortKeys[kCompact];
  int sortAt[kCompact];
  template <class Key>
  SortedKeys SortByKey(int n, Key keyOf) {
    for (int i = 0; i < n; i++) {
      sortKeys[i] = keyOf(i);
      sortAt[i] = i;
    }
    std::stable_sort(sortAt, sortAt + n, [&](int a, int c) { return sortKeys[a] > sortKeys[c]; });
    for (int i = 0; i < n; i++) sortKeys[i] = keyOf(sortAt[i]);
    return SortedKeys{sortKeys, sortAt};
  }
  // The k first elements (k <= kMaxTopLogProbs) in the order of values, largest first, then of indices,
  // into out; returns how many (min(k, n)).
  template <class Value>
  int TopK(int n, Value valueOf, int k, Best* out) {
    int count = 0;
    for (int i = 0; i < n; i++) OfferTop(out, count, k, valueOf(i), i);
    return count;
  }
  // The first index whose running sum of weights passes `target` (exceeds it when strict, reaches it
  // otherwise); -1 when none does.
  template <class Weight>
  int FindFirst(int n, Weight weight, double target, bool strict) {
    double sum = 0;
    for (int v = 0; v < n; v++) {
      sum += weight(v);
      if (strict ? target < sum : sum >= target) return v;
    }
    return -1;
  }
};

}  // namespace

void SampleRowsHost(const void* logits, FloatType type, int vocab, const SampleBatch& batch, float* work, SampleResult* out) {
  auto block = std::make_unique<HostBlock>();
  std::vector<double> mass(static_cast<size_t>(vocab));
  block->mass = mass.data();
  for (size_t i = 0; i < batch.rows.size(); i++) {
    float* w = work + i * static_cast<size_t>(vocab);
    WidenRowsHost(logits, type, vocab, &batch.rows[i], 1, w);
    out[i] = SampleRow(*block, w, vocab, batch.params[i], batch.seen.data(), batch.bans.data());
  }
}

}  // namespace chorus
