// The decode kernels of the native engine for rows that do more than take the raw argmax: penalties
// (repetition, presence, frequency), bans (bad words' last ids, the end id before min_length),
// temperature, top-k, top-p (factual nucleus: the row's current p), then greedy or a seeded draw, and the
// chosen token's log-probability under the processed distribution. They follow the TypeScript processors
// (src/generation/processors, sampler.ts) step for step, rounding to float32 where those store into a
// Float32Array and computing in double where they compute in JavaScript numbers.
//
// The algorithm of one row is written once, over a "block" of cooperating threads: the host runs it with
// one thread (HostBlock, sampling.cc), the GPU with a CUDA block per row (sampling.cu). Thresholds (the
// k-th largest logit, the value where the nucleus reaches p) are found by searching the order-preserving
// integer keys of the float32 logits, each probe one pass over the row, so no row is ever sorted.
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
  int32_t seenBegin;   // the row's (id, output count) pairs are seen[seenBegin..seenEnd) (pairs)
  int32_t seenEnd;
  int32_t banBegin;    // the ids it may not choose: bans[banBegin..banEnd)
  int32_t banEnd;
};

// Doubles per row in the packed parameters JavaScript sends: temperature, topP, repetition, presence,
// frequency, uniform, topK.
constexpr int kSampleParamDoubles = 7;

struct SampleResult {
  int32_t token;
  double logProb;
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
// Device: the same on `stream`. `staging` and `work` are device buffers of at least
// SampleStagingBytes(batch) and rows x vocab floats (the processed logits, as on the host); results go
// to device memory `out`. The batch's
// host arrays are copied in with one asynchronous copy from `hostStaging` (SampleStagingBytes bytes,
// filled here).
size_t SampleStagingBytes(const SampleBatch& batch);
void SampleRowsDevice(const void* logits, FloatType type, int vocab, const SampleBatch& batch, char* hostStaging, void* staging, float* work,
                      SampleResult* out, void* stream);
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

// Per-thread running summary of a threshold probe.
struct Probe {
  double weight;      // count or probability mass at or above the probe
  uint32_t lowestAt;  // the smallest key at or above it
  uint32_t highestBelow;  // the largest key below it
  int hasAt;
  int hasBelow;
};

CHORUS_HD inline Probe CombineProbes(const Probe& a, const Probe& b) {
  Probe out;
  out.weight = a.weight + b.weight;
  out.hasAt = a.hasAt | b.hasAt;
  out.hasBelow = a.hasBelow | b.hasBelow;
  out.lowestAt = !a.hasAt ? b.lowestAt : !b.hasAt ? a.lowestAt : (a.lowestAt < b.lowestAt ? a.lowestAt : b.lowestAt);
  out.highestBelow = !a.hasBelow ? b.highestBelow : !b.hasBelow ? a.highestBelow : (a.highestBelow > b.highestBelow ? a.highestBelow : b.highestBelow);
  return out;
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

// The largest key t of the row's elements whose weight at or above t, sum over keys >= t of weightOf(x),
// reaches `target`: the k-th largest value for counts, the nucleus's last value for masses. Each probe is
// one pass; the interval shrinks to elements' own keys, so it ends within 32 probes. Returns false when
// even the whole row falls short of the target.
template <class Block, class Weight>
CHORUS_HD bool ThresholdKey(Block& b, const float* w, int vocab, double target, Weight weightOf, uint32_t& key) {
  auto probe = [&](uint64_t at) {
    Probe init{0.0, 0u, 0u, 0, 0};
    return b.Reduce(vocab, init, [&](int v) {
      const uint32_t k = FloatKey(w[v]);
      Probe p{0.0, k, k, 0, 0};
      if (k >= at) {
        p.weight = weightOf(w[v]);
        p.hasAt = 1;
      } else {
        p.hasBelow = 1;
      }
      return p;
    }, [](const Probe& x, const Probe& y) { return CombineProbes(x, y); });
  };
  Probe all = probe(0);
  if (!(all.weight >= target)) return false;
  uint64_t lo = all.lowestAt;  // weight at or above lo reaches the target
  uint64_t hi = static_cast<uint64_t>(0xffffffffu) + 1;  // weight at or above hi does not
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    const Probe p = probe(mid);
    if (p.weight >= target) {
      lo = p.lowestAt;
    } else {
      hi = static_cast<uint64_t>(p.highestBelow) + 1;
    }
  }
  key = static_cast<uint32_t>(lo);
  return true;
}

// One row: processes `w` (vocab floats: the row's logits, widened) in place, then chooses.
template <class Block>
CHORUS_HD SampleResult SampleRow(Block& b, float* w, int vocab, const SampleParams& p, const int32_t* seen, const int32_t* bans) {
  // Penalties, each id once: repetition (context and output), presence and frequency (output).
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
  if (p.temperature != 0 && p.temperature != 1) b.ForEach(vocab, [&](int v) { w[v] = static_cast<float>(w[v] / p.temperature); });

  // Top-k: below the k-th largest value becomes -inf (ties with it stay).
  if (p.topK > 0 && p.topK < vocab) {
    uint32_t threshold;
    if (ThresholdKey(b, w, vocab, static_cast<double>(p.topK), [](float) { return 1.0; }, threshold)) {
      b.ForEach(vocab, [&](int v) {
        if (FloatKey(w[v]) < threshold) w[v] = -INFINITY;
      });
    }
  }

  auto maxOf = [&]() {
    return b.Reduce(vocab, -INFINITY, [&](int v) { return w[v]; }, [](float a, float c) { return a > c ? a : c; });
  };

  // Top-p: the most likely ids, by value and then index, until their probability reaches p.
  if (p.topP < 1) {
    const double max = maxOf();
    const double total = b.Reduce(vocab, 0.0, [&](int v) { return exp(w[v] - max); }, [](double a, double c) { return a + c; });
    auto mass = [&](float x) { return exp(x - max) / total; };
    uint32_t last;
    if (ThresholdKey(b, w, vocab, p.topP, mass, last)) {
      const double above = b.Reduce(vocab, 0.0, [&](int v) { return FloatKey(w[v]) > last ? mass(w[v]) : 0.0; }, [](double a, double c) { return a + c; });
      // Ties with the last value join in index order until the nucleus reaches p (always one).
      const double tie = mass(b.Reduce(vocab, Best{-INFINITY, vocab}, [&](int v) { return FloatKey(w[v]) == last ? Best{w[v], v} : Best{-INFINITY, vocab}; }, [](const Best& x, const Best& y) { return CombineBest(x, y); }).value);
      const int tieCount = b.Reduce(vocab, 0, [&](int v) { return FloatKey(w[v]) == last ? 1 : 0; }, [](int a, int c) { return a + c; });
      double cumulative = above + tie;
      int ties = 1;
      while (cumulative < p.topP && ties < tieCount) {
        cumulative += tie;
        ties++;
      }
      const int lastIndex = b.FindFirst(vocab, [&](int v) { return FloatKey(w[v]) == last ? 1.0 : 0.0; }, static_cast<double>(ties), false);
      b.ForEach(vocab, [&](int v) {
        const uint32_t k = FloatKey(w[v]);
        if (k < last || (k == last && v > lastIndex)) w[v] = -INFINITY;
      });
    }
  }

  // The choice and its log-probability: log(softmax) at the chosen id.
  const float max = maxOf();
  SampleResult result;
  if (max == -INFINITY) {
    result.token = 0;
    result.logProb = NAN;
    return result;
  }
  const double sum = b.Reduce(vocab, 0.0, [&](int v) { return exp(static_cast<double>(w[v]) - max); }, [](double a, double c) { return a + c; });
  const double norm = max + log(sum);
  if (p.temperature == 0) {
    result.token = b.Reduce(vocab, Best{-INFINITY, vocab}, [&](int v) { return Best{w[v], v}; }, [](const Best& x, const Best& y) { return CombineBest(x, y); }).index;
  } else {
    int token = b.FindFirst(vocab, [&](int v) { return w[v] == -INFINITY ? 0.0 : exp(w[v] - norm); }, p.uniform, true);
    // Rounding left the total a hair under 1 and the draw above it: the last possible id.
    if (token < 0) token = b.Reduce(vocab, -1, [&](int v) { return w[v] == -INFINITY ? -1 : v; }, [](int a, int c) { return a > c ? a : c; });
    result.token = token;
  }
  result.logProb = w[result.token] - norm;
  b.Sync();
  return result;
}

}  // namespace chorus
