// The decode kernels of the native engine for rows that do more than take the raw argmax: penalties
// (repetition, presence, frequency), bans (bad words' last ids, the end id before min_length),
// temperature, top-k, top-p (factual nucleus: the row's current p), then greedy or a seeded draw, the
// chosen token's log-probability under the processed distribution and its top_logprobs; and, for a
// beam of a beam search, its best continuations (BeamRow). They follow the TypeScript processors
// (src/generation/processors, sampler.ts, beam-search.ts) step for step, rounding to float32 where those
// store into a Float32Array and computing in double where they compute in JavaScript numbers.
//
// The algorithm of one row is written once, over a "block" of cooperating threads: the host runs it with
// one thread (HostBlock, sampling.cc), the GPU with a CUDA block per row, or a cluster of blocks per row
// when few rows are sampled (sampling.cu: the passes over the whole row split between them). No whole row is
// sorted. Top-k and top-p count (top-p also weighs) each id into buckets by how far it lies below the
// row's maximum: the buckets show where the k-th largest lies, or where the weight from the top reaches
// p, and only the ids up to there (or of the crossing bucket alone) are gathered and searched exactly,
// sorted by their order-preserving integer keys. A radix selection (top-k) or search (top-p, a pass per
// 4-bit digit) over the whole row's keys is left for rows where the buckets hold too many ids. Once few
// ids remain possible they are gathered and the later stages run over them alone.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels.h"

#if defined(__CUDACC__)
#define CHORUS_HD __host__ __device__
#else
#define CHORUS_HD
#endif

namespace chorus {

// One row's parameters. Defaults (1 for temperature, top_p and repetition, 0 for the rest) change nothing.
struct SampleParams {
  double temperature;  // 0: greedy
  double topP;         // the row's current p; >= 1: off
  double repetition;   // multiplicative, on ids of the context and the output
  double presence;     // subtracted once from ids of the output
  double frequency;    // subtracted per occurrence in the output
  double uniform;      // the row's draw in (0, 1) when temperature != 0
  int32_t topK;        // 0: off
  int32_t topLogProbs; // how many of the most likely ids (and log-probabilities) to return, 0..kMaxTopLogProbs
  // Beam search (beamKeep > 0): the row is a beam whose running score is beamScore; instead of choosing,
  // it returns its beamKeep best continuations (see BeamRow).
  int32_t beamKeep;
  double beamScore;
  int32_t seenBegin;   // the row's (id, output count) pairs are seen[seenBegin..seenEnd) (pairs)
  int32_t seenEnd;
  int32_t banBegin;    // the ids it may not choose: bans[banBegin..banEnd)
  int32_t banEnd;
};

// Doubles per row in the packed parameters JavaScript sends: temperature, topP, repetition, presence,
// frequency, uniform, topK, topLogProbs, beamKeep, beamScore.
constexpr int kSampleParamDoubles = 10;
constexpr int kMaxTopLogProbs = 20;

struct SampleResult {
  int32_t token;
  int32_t topCount;  // entries of top: the possible ids among the topLogProbs most likely; a beam's continuations
  double logProb;
  int32_t topTokens[kMaxTopLogProbs];
  double topLogProbs[kMaxTopLogProbs];
};

// The rows a step samples where its logits are: batch rows, their parameters, and the pairs and bans
// those index.
struct SampleBatch {
  std::vector<int32_t> rows;
  std::vector<SampleParams> params;
  std::vector<int32_t> seen;  // id, count, id, count, ...
  std::vector<int32_t> bans;
};

// Host: runs each row of the batch on logits [*, vocab]; row i's processed logits are left in
// work[i * vocab ..] (rows x vocab floats).
void SampleRowsHost(const void* logits, FloatType type, int vocab, const SampleBatch& batch, float* work, SampleResult* out);

#ifdef CHORUS_WITH_CUDA
// Device: the same on `stream`. `staging`, `work` and `mass` are device buffers of at least
// SampleStagingBytes(batch), rows x vocab floats (the processed logits, as on the host) and rows x vocab
// doubles (scratch); results go to device memory `out`. The batch's
// host arrays are copied in with one asynchronous copy from `hostStaging` (SampleStagingBytes bytes,
// filled here).
size_t SampleStagingBytes(const SampleBatch& batch);
void SampleRowsDevice(const void* logits, FloatType type, int vocab, const SampleBatch& batch, char* hostStaging, void* staging, float* work,
                      double* mass, SampleResult* out, void* stream);
// SampleRowsDevice in two: the batch filled into `hostStaging` (pinned) and its copy to `staging`
// queued on `stream`; then the sampler, on another stream once that copy is done, reading `staging`.
void StageSampleBatch(const SampleBatch& batch, char* hostStaging, void* staging, void* stream);
void SampleStagedRowsDevice(const void* logits, FloatType type, int vocab, const SampleBatch& batch, const void* staging, float* work, double* mass,
                            SampleResult* out, void* stream);
// Device: each of `rows` rows' next inputs from its choice (the sampler's sampled[sampleIndex[r]], or
// argmax[r] where sampleIndex[r] < 0): its token, and its position and length one further. Where
// set, `hostIds` (every row's argmax) and `hostSampled` (result i) take the choices too: pinned host
// memory's device addresses, read by the host once the step's event is done.
void AdvanceChosenDevice(const int32_t* argmax, const SampleResult* sampled, const int32_t* sampleIndex, int rows, int64_t* tokens, int64_t* positions,
                         int32_t* lengths, void* stream, int32_t* hostIds = nullptr, SampleResult* hostSampled = nullptr);
#endif

// The order-preserving key of a float: a larger float has a larger key (-inf smallest, +inf largest),
// and equal floats the same key (-0 is +0).
CHORUS_HD inline uint32_t FloatKey(float x) {
  if (x == 0) return 0x80000000u;
  uint32_t bits;
#if defined(__CUDA_ARCH__)
  bits = __float_as_uint(x);
#else
  std::memcpy(&bits, &x, sizeof bits);
#endif
  return (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
}

// The float whose key FloatKey gives (+0 for the key of zero).
CHORUS_HD inline float KeyFloat(uint32_t key) {
  const uint32_t bits = (key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
#endif
}

struct Best {
  float value;
  int index;
};

// The larger value; the lower index among equals (the first maximum).
CHORUS_HD inline Best CombineBest(const Best& a, const Best& b) {
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

// A row as the stages see it: the whole vocabulary (element i is id i), or the ids still possible after
// top-k or a nucleus bound, gathered in id order (element i is id index(i)).
struct FullRow {
  float* w;
  int n;
  CHORUS_HD float value(int i) const { return w[i]; }
  CHORUS_HD int index(int i) const { return i; }
  CHORUS_HD void set(int i, float x) const { w[i] = x; }
};

struct CompactRow {
  float* values;
  int* indices;
  int n;
  CHORUS_HD float value(int i) const { return values[i]; }
  CHORUS_HD int index(int i) const { return indices[i]; }
  CHORUS_HD void set(int i, float x) const { values[i] = x; }
};

// Buckets of a digit of the keys in the nucleus's search (ThresholdKey): 4 bits a pass.
constexpr int kThresholdBuckets = 16;

// A gathered row's keys sorted, largest first (ties in row order), with each one's position in the row.
struct SortedKeys {
  const uint32_t* keys;
  const int* at;
};

// Where a row's weight from the top reaches a target: the key, the weight and count of the elements
// above it, and those of the elements at it.
struct Threshold {
  uint32_t key;
  double above;
  double at;
  int countAbove;
  int countAt;
};

// The largest key t of the row's elements whose weight at or above t, sum over keys >= t of weightOf(i, x),
// reaches `target` (for masses: the nucleus's last value). A radix search from the top digit: each pass
// sums the weights (and counts the elements) whose key shares the digits chosen so far into 16 buckets
// by the next 4 bits (b.BucketSums), and takes the bucket where the weight from the top reaches the
// target; 8 passes for 32-bit keys. Returns false when even the whole row falls short.
// `above` and `countAbove` start with the weight and count of ids outside the row that lie above all of it.
template <class Block, class Row, class Weight>
CHORUS_HD bool ThresholdKey(Block& b, const Row& row, double target, Weight weightOf, Threshold& out, double above = 0, int countAbove = 0) {
  uint32_t prefix = 0;
  uint32_t mask = 0;
  // above, countAbove: the weight and count of the elements above the digits chosen so far
  double sums[kThresholdBuckets];
  int counts[kThresholdBuckets];
  int bucket = 0;
  for (int shift = 28; shift >= 0; shift -= 4) {
    b.BucketSums(
        row.n,
        [&](int i) {
          const uint32_t k = FloatKey(row.value(i));
          return (k & mask) == prefix ? static_cast<int>((k >> shift) & 0xfu) : -1;
        },
        [&](int i) { return weightOf(i, row.value(i)); }, sums, counts);
    bucket = kThresholdBuckets - 1;
    double cumulative = above;
    int count = countAbove;
    for (; bucket >= 0; bucket--) {
      if (sums[bucket] > 0 && cumulative + sums[bucket] >= target) break;
      cumulative += sums[bucket];
      count += counts[bucket];
    }
    if (bucket < 0) {
      if (shift == 28) return false;
      // The digits chosen so far reached the target, and their buckets summed apart fall an ulp short of
      // it: the crossing is at their smallest key with weight.
      bucket = 0;
      while (bucket < kThresholdBuckets - 1 && !(sums[bucket] > 0)) bucket++;
      cumulative = above;
      count = countAbove;
      for (int j = kThresholdBuckets - 1; j > bucket; j--) {
        cumulative += sums[j];
        count += counts[j];
      }
    }
    above = cumulative;
    countAbove = count;
    prefix |= static_cast<uint32_t>(bucket) << shift;
    mask |= 0xfu << shift;
  }
  out = Threshold{prefix, above, sums[bucket], countAbove, counts[bucket]};
  return true;
}

// The key of the k-th largest of the row's n >= k values (sorted descending, ties counted), by radix
// selection over four 8-bit digits; `atOrAbove` gets how many values have that key or a larger one.
template <class Block, class Row>
CHORUS_HD uint32_t KthLargestKey(Block& b, const Row& row, int k, int& atOrAbove) {
  uint32_t prefix = 0;
  uint32_t mask = 0;
  int remaining = k;
  int inBucket = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const int* counts = b.Histogram(row.n, [&](int i) {
      const uint32_t key = FloatKey(row.value(i));
      return (key & mask) == prefix ? static_cast<int>((key >> shift) & 0xffu) : -1;
    });
    int bucket = 255;
    for (; bucket > 0; bucket--) {
      if (counts[bucket] >= remaining) break;
      remaining -= counts[bucket];
    }
    inBucket = counts[bucket];
    prefix |= static_cast<uint32_t>(bucket) << shift;
    mask |= 0xffu << shift;
  }
  atOrAbove = k - remaining + inBucket;
  return prefix;
}

// The nucleus's buckets: an id with value x goes to bucket floor((max - x) * kMassBucketsPerUnit), the
// last bucket taking the rest (weights under exp(-32)) and -inf. A larger value never lands in a later
// bucket, and equal values share one. Each bucket sums its ids' weights exp(x - max) in 32-bit fixed
// point (kMassFixedScale units of weight, each weight truncated), so that the sums come out the same in
// any order and cost one integer add; a bucket of 65,536 ids or more could wrap, and then the buckets
// are not used.
constexpr int kMassBuckets = 1024;
constexpr float kMassBucketsPerUnit = 32;
constexpr double kMassFixedScale = 65536.0;
constexpr int kMassBucketIds = 65536;

CHORUS_HD inline int MassBucket(float x, float max) {
  const float below = (max - x) * kMassBucketsPerUnit;
  return below < static_cast<float>(kMassBuckets - 1) ? static_cast<int>(below) : kMassBuckets - 1;
}

CHORUS_HD inline unsigned MassUnits(double weight) { return static_cast<unsigned>(weight * kMassFixedScale); }

// Where the weight from the top reaches the target, by buckets: the crossing lies in buckets lo..hi
// (usually one), countBefore ids lie in the buckets before lo and countThrough in those up to hi.
// Not `usable` when a bucket held too many ids for its sum.
struct MassRange {
  bool usable;
  int lo;
  int hi;
  int countBefore;
  int countThrough;
};

// The crossing's buckets, from the buckets' sums (b.ScanMassBuckets turns them into running totals from
// the top, 64-bit, in massSums and massCounts). Truncation leaves the true weight through bucket j within
// [sums[j], sums[j] + counts[j]] units; a relative margin covers the rounding of the double sums the
// exact search compares.
template <class Block>
CHORUS_HD MassRange CrossingBuckets(Block& b, double target) {
  const bool usable = b.ScanMassBuckets();
  const unsigned long long* sums = b.massSums;
  const int* counts = b.massCounts;
  constexpr double kMargin = 1e-9;
  auto first = [](int a, int c) { return a < c ? a : c; };
  const int lo = b.Reduce(kMassBuckets, kMassBuckets - 1, [&](int j) {
    return (static_cast<double>(sums[j]) + counts[j]) / kMassFixedScale * (1 + kMargin) >= target ? j : kMassBuckets - 1;
  }, first);
  const int hi = b.Reduce(kMassBuckets, kMassBuckets - 1, [&](int j) {
    return static_cast<double>(sums[j]) / kMassFixedScale * (1 - kMargin) >= target ? j : kMassBuckets - 1;
  }, first);
  return MassRange{usable, lo, hi, lo == 0 ? 0 : counts[lo - 1], counts[hi]};
}

// The first bucket through which the buckets' counts (AddCount) reach k: hi, with countThrough ids up to
// it.
template <class Block>
CHORUS_HD MassRange CountedBuckets(Block& b, int k) {
  const bool usable = b.ScanMassBuckets();
  const int* counts = b.massCounts;
  const int hi = b.Reduce(kMassBuckets, kMassBuckets - 1, [&](int j) { return counts[j] >= k ? j : kMassBuckets - 1; }, [](int a, int c) { return a < c ? a : c; });
  return MassRange{usable, hi, hi, hi == 0 ? 0 : counts[hi - 1], counts[hi]};
}

// An id's probability under max and total (those of the row before the nucleus).
CHORUS_HD inline double MassOf(float x, double max, double total) { return exp(x - max) / total; }

// What the nucleus kept: how many ids, and their weight.
struct Kept {
  int count;
  double weight;
};

// Top-p over a row, its threshold found (ThresholdKey with the same weights; `tie` is the weight of one
// element at the threshold, and a weight over `divisor` its probability): the ids above it, and those
// at it in id order until the probability reaches topP (always one), stay; the rest become -inf. The
// ties' probabilities add one at a time, as the TypeScript processor adds them. The ties are looked for
// in `tieRow`, a part of the row (in its order) that holds every element at the threshold; rowOf maps its
// positions to the row's. Returns the ids kept and their weight.
template <class Block, class Row, class TieRow, class RowOf>
CHORUS_HD Kept NucleusAmong(Block& b, const Row& row, const TieRow& tieRow, RowOf rowOf, double topP, const Threshold& t, double tie, double divisor) {
  const double tieP = tie / divisor;
  double cumulative = t.above / divisor + tieP;
  int ties = 1;
  while (cumulative < topP && ties < t.countAt) {
    cumulative += tieP;
    ties++;
  }
  const uint32_t last = t.key;
  // Every tie joined: no id among them is cut.
  int lastAt = row.n;
  if (ties < t.countAt) {
    const int at = b.FindFirst(tieRow.n, [&](int i) { return FloatKey(tieRow.value(i)) == last ? 1.0 : 0.0; }, static_cast<double>(ties), false);
    lastAt = at < 0 ? -1 : rowOf(at);
  }
  b.Each(row.n, [&](int i) { return row.value(i); }, [&](int i, float x) {
    const uint32_t k = FloatKey(x);
    if (k < last || (k == last && i > lastAt)) row.set(i, -INFINITY);
  });
  return Kept{t.countAbove + ties, t.above + ties * tie};
}

template <class Block, class Row>
CHORUS_HD Kept Nucleus(Block& b, const Row& row, double topP, const Threshold& t, double tie, double divisor) {
  return NucleusAmong(b, row, row, [](int i) { return i; }, topP, t, tie, divisor);
}

// ThresholdKey over a gathered row (at most Block::kCompact elements), from its elements sorted by key,
// largest first (ties in row order): the first position where the weights summed in that order (after
// `above`) reach the target gives the key, and the run of equal keys around it the weight and count at
// it. False when even the whole row falls short.
template <class Block, class Row, class Weight>
CHORUS_HD bool ThresholdSorted(Block& b, const Row& row, double target, Weight weightOf, Threshold& out, double above = 0, int countAbove = 0) {
  const SortedKeys sorted = b.SortByKey(row.n, [&](int i) { return FloatKey(row.value(i)); });
  auto weight = [&](int j) { return weightOf(sorted.at[j], row.value(sorted.at[j])); };
  const int crossing = b.FindFirst(row.n, weight, target - above, false);
  if (crossing < 0) return false;
  const uint32_t key = sorted.keys[crossing];
  const int first = b.Reduce(row.n, row.n, [&](int j) { return sorted.keys[j] == key ? j : row.n; }, [](int a, int c) { return a < c ? a : c; });
  const int last = b.Reduce(row.n, -1, [&](int j) { return sorted.keys[j] == key ? j : -1; }, [](int a, int c) { return a > c ? a : c; });
  const double before = b.Reduce(first, 0.0, weight, [](double a, double c) { return a + c; });
  const double at = b.Reduce(last - first + 1, 0.0, [&](int j) { return weight(first + j); }, [](double a, double c) { return a + c; });
  b.Sync();
  out = Threshold{key, above + before, at, countAbove + first, last - first + 1};
  return true;
}

// log(sum(exp(values))) of a row, with the maximum taken out first (as the TypeScript logSumExp); -inf
// when every value is -inf.
template <class Block, class Value>
CHORUS_HD double LogNorm(Block& b, int n, Value valueOf) {
  const float max = b.Reduce(n, -INFINITY, [&](int i) { return valueOf(i); }, [](float a, float c) { return a > c ? a : c; });
  if (max == -INFINITY) return -INFINITY;
  const double sum = b.Reduce(n, 0.0, [&](int i) { return exp(static_cast<double>(valueOf(i)) - max); }, [](double a, double c) { return a + c; });
  return max + log(sum);
}

// The choice over a processed row, its log-normalizer `norm` known: its argmax (temperature 0) or the
// draw's id, walking the ids in id order with weightOf(i) (exp(value - norm), or anything proportional
// to it with `scale` its total) until their sum passes uniform * scale; and log(softmax) there.
template <class Block, class Row, class Weight>
CHORUS_HD SampleResult ChooseWith(Block& b, const Row& row, const SampleParams& p, double norm, Weight weightOf, double scale) {
  SampleResult result;
  if (norm == -INFINITY) {
    result.token = 0;
    result.logProb = NAN;
    result.topCount = 0;
    return result;
  }
  int at;
  if (p.temperature == 0) {
    at = b.Reduce(row.n, Best{-INFINITY, row.n}, [&](int i) { return Best{row.value(i), i}; }, [](const Best& x, const Best& y) { return CombineBest(x, y); }).index;
  } else {
    at = b.FindFirst(row.n, weightOf, p.uniform * scale, true);
    // Rounding left the total a hair under 1 and the draw above it: the last possible id.
    if (at < 0) at = b.Reduce(row.n, -1, [&](int i) { return row.value(i) == -INFINITY ? -1 : i; }, [](int a, int c) { return a > c ? a : c; });
  }
  result.token = row.index(at);
  result.logProb = row.value(at) - norm;
  // The most likely ids in order (value, then id), as many as asked, impossible ones left out.
  result.topCount = 0;
  if (p.topLogProbs > 0) {
    Best top[kMaxTopLogProbs];
    const int found = b.TopK(row.n, [&](int i) { return row.value(i); }, p.topLogProbs < row.n ? p.topLogProbs : row.n, top);
    for (int j = 0; j < found && top[j].value != -INFINITY; j++) {
      result.topTokens[j] = row.index(top[j].index);
      result.topLogProbs[j] = top[j].value - norm;
      result.topCount = j + 1;
    }
  }
  b.Sync();
  return result;
}

// The choice over a processed row (ChooseWith), its normalizer and the softmax computed here.
template <class Block, class Row>
CHORUS_HD SampleResult Choose(Block& b, const Row& row, const SampleParams& p) {
  const double norm = LogNorm(b, row.n, [&](int i) { return row.value(i); });
  return ChooseWith(b, row, p, norm, [&](int i) { return row.value(i) == -INFINITY ? 0.0 : exp(row.value(i) - norm); }, 1.0);
}

// Penalties, each id once: repetition (context and output), presence and frequency (output); then
// the bans.
template <class Block>
CHORUS_HD void PenalizeAndBan(Block& b, float* w, const SampleParams& p, const int32_t* seen, const int32_t* bans) {
  const int pairs = (p.seenEnd - p.seenBegin);
  b.ForEach(pairs, [&](int i) {
    const int32_t id = seen[2 * (p.seenBegin + i)];
    const int32_t count = seen[2 * (p.seenBegin + i) + 1];
    float x = w[id];
    if (p.repetition != 1) x = static_cast<float>(x > 0 ? x / p.repetition : x * p.repetition);
    if (count > 0 && p.presence != 0) x = static_cast<float>(x - p.presence);
    if (count > 0 && p.frequency != 0) x = static_cast<float>(x - p.frequency * count);
    w[id] = x;
  });
  b.ForEach(p.banEnd - p.banBegin, [&](int i) { w[bans[p.banBegin + i]] = -INFINITY; });
}

// A thread's running top k (k <= kMaxTopLogProbs) of the elements it has seen, in the order of values,
// largest first, then of indices: `x` at index `i`, offered in ascending index order, joins when it beats
// the last held (an equal value came earlier, so the held one stays ahead).
CHORUS_HD inline void OfferTop(Best* held, int& count, int k, float x, int i) {
  if (count == k && !(x > held[k - 1].value)) return;
  int at = count < k ? count++ : k - 1;
  while (at > 0 && x > held[at - 1].value) {
    held[at] = held[at - 1];
    at--;
  }
  held[at] = Best{x, i};
}

// One beam of a beam search, as src/generation/beam-search.ts steps it: temperature, log-softmax (in
// float32), then the penalties and bans on the log-probabilities; each id's accumulated score is
// float32(log-prob + the beam's score), and the beamKeep best by that score (then by id) come back as
// (id, log-prob) in order. `w` ends with the processed log-probabilities.
template <class Block>
CHORUS_HD SampleResult BeamRow(Block& b, float* w, int vocab, const SampleParams& p, const int32_t* seen, const int32_t* bans) {
  if (p.temperature != 0 && p.temperature != 1) b.Update(vocab, w, [&](int, float x) { return static_cast<float>(x / p.temperature); });
  const double norm = LogNorm(b, vocab, [&](int v) { return w[v]; });
  // All -inf stays all -inf (no NaN from -inf - -inf).
  b.Update(vocab, w, [&](int, float x) { return norm == -INFINITY ? -INFINITY : static_cast<float>(x - norm); });
  PenalizeAndBan(b, w, p, seen, bans);
  auto accumulated = [&](int v) { return static_cast<float>(w[v] + p.beamScore); };
  SampleResult result;
  Best best[kMaxTopLogProbs];
  result.topCount = b.TopK(vocab, accumulated, p.beamKeep < vocab ? p.beamKeep : vocab, best);
  for (int j = 0; j < result.topCount; j++) {
    result.topTokens[j] = best[j].index;
    result.topLogProbs[j] = w[best[j].index];
  }
  result.token = result.topTokens[0];
  result.logProb = result.topLogProbs[0];
  b.Sync();
  return result;
}

// One row: processes `w` (vocab floats: the row's logits, widened) in place, then chooses (or, for a
// beam, returns its continuations). Once top-k, a bound on the nucleus or the nucleus leaves at most
// Block::kCompact possible ids, they are gathered (in id order) and the later stages run over them alone;
// `w` ends with the processed row either way. Top-p over a whole row reads each id's exp(value - max)
// from b.mass, computed once with the row's total and its buckets (CrossingBuckets): the exact
// threshold's search and the draw weigh ids by it.
template <class Block>
CHORUS_HD SampleResult SampleRow(Block& b, float* w, int vocab, const SampleParams& p, const int32_t* seen, const int32_t* bans) {
  if (p.beamKeep > 0) return BeamRow(b, w, vocab, p, seen, bans);
  PenalizeAndBan(b, w, p, seen, bans);
  // Top-k and top-p bucket ids by the row's maximum: taken in the temperature's pass when there is one
  // (top-k keeps it).
  const bool needMax = p.topP < 1 || (p.topK > 0 && p.topK < vocab);
  float rowMax = -INFINITY;
  if (p.temperature != 0 && p.temperature != 1) {
    auto scaled = [&](int, float x) { return static_cast<float>(x / p.temperature); };
    if (needMax) rowMax = b.UpdateMax(vocab, w, scaled);
    else b.Update(vocab, w, scaled);
  } else if (needMax) {
    rowMax = b.Reduce(vocab, -INFINITY, [&](int v) { return w[v]; }, [](float a, float c) { return a > c ? a : c; });
  }
  b.Mark(1);

  const FullRow full{w, vocab};
  // Ids below `floor` (a key) are impossible from here on; `possible` of them are at or above it.
  uint32_t floor = 0;
  int possible = vocab;
  // Top-k: below the k-th largest value becomes -inf (ties with it stay). The ids are counted into the
  // nucleus's buckets by how far they lie below the maximum; when the k largest lie among at most
  // Block::kCompact ids of the first buckets, those are gathered (the rest cut on the way) and the k-th
  // is taken among them, sorted; otherwise by a radix selection over the whole row.
  CompactRow topK{nullptr, nullptr, 0};
  bool topKGathered = false;
  if (p.topK > 0 && p.topK < vocab) {
    if (rowMax != -INFINITY) {
      b.ClearMassBuckets();
      b.Each(vocab, [&](int v) { return w[v]; }, [&](int, float x) { b.AddCount(MassBucket(x, rowMax)); });
      const MassRange range = CountedBuckets(b, p.topK);
      if (range.usable && range.hi < kMassBuckets - 1 && range.countThrough <= Block::kCompact) {
        const int hi = range.hi;
        topK = b.Compact(vocab, [&](int, float x) { return MassBucket(x, rowMax) <= hi; }, w, true);
        const SortedKeys sorted = b.SortByKey(topK.n, [&](int i) { return FloatKey(topK.value(i)); });
        const uint32_t kth = sorted.keys[p.topK - 1];
        possible = b.Reduce(topK.n, 0, [&](int i) { return sorted.keys[i] >= kth ? 1 : 0; }, [](int a, int c) { return a + c; });
        b.Each(topK.n, [&](int i) { return topK.value(i); }, [&](int i, float x) {
          if (FloatKey(x) < kth) {
            topK.set(i, -INFINITY);
            w[topK.index(i)] = -INFINITY;
          }
        });
        floor = kth;
        topKGathered = true;
      }
    }
    if (!topKGathered) {
      floor = KthLargestKey(b, full, p.topK, possible);
      const uint32_t kth = floor;
      b.Update(vocab, w, [&](int, float x) { return FloatKey(x) < kth ? -INFINITY : x; });
    }
  }
  double max = 0;
  double total = 0;
  bool nucleusDone = false;
  // A trained model's row (below): ids in buckets past cutBucket are cut when gathered.
  int cutBucket = -1;
  if (p.topP < 1) {
    max = rowMax;
    if (topKGathered) {
      // Every possible id is gathered: the total over them (the rest are -inf) is the row's.
      total = b.Reduce(topK.n, 0.0, [&](int i) { return exp(topK.value(i) - max); }, [](double a, double c) { return a + c; });
    }
    // The nucleus over the whole row weighs each id by exp(value - max), kept in b.mass, against p times
    // their total: the same ids as probabilities against p. (A row of -inf alone has no nucleus: Choose
    // gives it token 0, as the TypeScript sampler does.)
    const bool wholeRow = possible > Block::kCompact && max != -INFINITY;
    if (wholeRow) b.ClearMassBuckets();
    if (!topKGathered) total = b.Reduce(vocab, 0.0, [&](int v) {
      const double e = exp(w[v] - max);
      if (wholeRow) {
        b.mass[v] = e;
        b.AddMass(MassBucket(w[v], rowMax), e);
      }
      return e;
    }, [](double a, double c) { return a + c; });
    b.Mark(2);
    if (wholeRow) {
      const double target = p.topP * total;
      const MassRange range = CrossingBuckets(b, target);
      b.Mark(3);
      if (range.usable && range.countThrough <= Block::kCompact) {
        // A trained model's row: the ids up to the crossing's buckets are few, and the nucleus lies among
        // them; they alone go on, gathered, and the rest are cut as they are.
        cutBucket = range.hi;
        possible = range.countThrough;
      } else {
        double kept = total;
        Threshold t;
        bool found = false;
        auto massOf = [&](int v, float) { return b.mass[v]; };
        if (range.usable && range.countThrough - range.countBefore <= Block::kCompact) {
          // A flat row: the threshold lies among the ids of the crossing's buckets, gathered (and the exact
          // weight of the ids above them summed on the way), and so do the ties at it.
          const int lo = range.lo;
          const int hi = range.hi;
          double above = 0;
          const CompactRow crossing = b.CompactSum(vocab, [&](int, float x) {
            const int bucket = MassBucket(x, rowMax);
            return bucket >= lo && bucket <= hi;
          }, w, false, [&](int v, float x) { return MassBucket(x, rowMax) < lo ? b.mass[v] : 0.0; }, above);
          b.Mark(4);
          found = ThresholdSorted(b, crossing, target, [&](int i, float) { return b.mass[crossing.index(i)]; }, t, above, range.countBefore);
          b.Mark(5);
          if (found) {
            const Kept nucleus = NucleusAmong(b, full, crossing, [&](int i) { return crossing.index(i); }, p.topP, t, exp(static_cast<double>(KeyFloat(t.key)) - max), total);
            floor = t.key;
            possible = nucleus.count;
            kept = nucleus.weight;
          }
        }
        if (!found && ThresholdKey(b, full, target, massOf, t)) {
          const Kept nucleus = Nucleus(b, full, p.topP, t, exp(static_cast<double>(KeyFloat(t.key)) - max), total);
          floor = t.key;
          possible = nucleus.count;
          kept = nucleus.weight;
        }
        b.Mark(6);
        nucleusDone = true;
        if (possible > Block::kCompact) {
          return ChooseWith(b, full, p, max + log(kept), [&](int v) { return w[v] == -INFINITY ? 0.0 : b.mass[v]; }, kept);
        }
      }
    }
  }
  // The possible ids gathered: the nucleus among them unless done, the choice, and their values back.
  auto gathered = [&](const CompactRow& compact) {
    if (p.topP < 1 && !nucleusDone) {
      auto massAt = [&](int, float x) { return MassOf(x, max, total); };
      Threshold t;
      if (ThresholdSorted(b, compact, p.topP, massAt, t)) Nucleus(b, compact, p.topP, t, MassOf(KeyFloat(t.key), max, total), 1.0);
    }
    const SampleResult result = Choose(b, compact, p);
    b.ForEach(compact.n, [&](int i) { w[compact.index(i)] = compact.value(i); });
    return result;
  };
  if (cutBucket >= 0) {
    const int hi = cutBucket;
    return gathered(b.Compact(vocab, [&](int, float x) { return MassBucket(x, rowMax) <= hi; }, w, true));
  }
  // Top-k's gathered ids (those it cut are -inf among them); the nucleus, never over the whole row
  // then, runs among them.
  if (topKGathered) return gathered(topK);
  if (possible <= Block::kCompact) {
    const uint32_t at = floor;
    return gathered(b.Compact(vocab, [&](int, float x) { return FloatKey(x) >= at; }, w, false));
  }
  return Choose(b, full, p);
}

}  // namespace chorus
