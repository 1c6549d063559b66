// The sampler's rows on the host: the algorithm of sampling.h with a block of one thread, so every sum
// runs in index order, as the TypeScript processors add.
#include "sampling.h"

#include <algorithm>
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
  // The nucleus's buckets (sampling.h's MassBucket): fixed-point sums of weights and counts, running
  // totals from the top once scanned.
  unsigned long long massSums[kMassBuckets];
  int massCounts[kMassBuckets];

  void ClearMassBuckets() {
    std::fill(massSums, massSums + kMassBuckets, 0ull);
    std::fill(massCounts, massCounts + kMassBuckets, 0);
  }
  void AddMass(int bucket, double weight) {
    massSums[bucket] += MassUnits(weight);
    massCounts[bucket]++;
  }
  void ScanMassBuckets() {
    for (int j = 1; j < kMassBuckets; j++) {
      massSums[j] += massSums[j - 1];
      massCounts[j] += massCounts[j - 1];
    }
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
  // The ids `keep` keeps, with their values, in id order (at most kCompact).
  template <class Keep>
  CompactRow Compact(int n, Keep keep, const float* w) {
    int m = 0;
    for (int v = 0; v < n && m < kCompact; v++) {
      if (!keep(v)) continue;
      values[m] = w[v];
      indices[m] = v;
      m++;
    }
    return CompactRow{values, indices, m};
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
