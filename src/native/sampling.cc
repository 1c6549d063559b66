// The sampler's rows on the host: the algorithm of sampling.h with a block of one thread, so every sum
// runs in index order, as the TypeScript processors add.
#include "sampling.h"

#include <stdexcept>

namespace chorus {
namespace {

struct HostBlock {
  void Sync() {}
  template <class F>
  void ForEach(int n, F f) {
    for (int i = 0; i < n; i++) f(i);
  }
  template <class T, class Map, class Combine>
  T Reduce(int n, T init, Map map, Combine combine) {
    T acc = init;
    for (int v = 0; v < n; v++) acc = combine(acc, map(v));
    return acc;
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
  HostBlock block;
  for (size_t i = 0; i < batch.rows.size(); i++) {
    float* w = work + i * static_cast<size_t>(vocab);
    WidenRowsHost(logits, type, vocab, &batch.rows[i], 1, w);
    out[i] = SampleRow(block, w, vocab, batch.params[i], batch.seen.data(), batch.bans.data());
  }
}

}  // namespace chorus
