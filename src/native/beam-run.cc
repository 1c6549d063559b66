#include "beam-run.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace chorus {

namespace {

// What transformers adds to a score to take it out of the running.
constexpr double kOut = -1e9;

struct Candidate {
  int parent;
  int token;
  float score;
  float rank;  // the score lowered by the diversity rate: what the candidates are chosen by
  bool ends;
};

}  // namespace

void CheckBeamGroup(const BeamGroup& g, int rows) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("beam group: " + what); };
  if (g.width < 1 || 2 * g.width > kMaxTopLogProbs) fail("width must be 1.." + std::to_string(kMaxTopLogProbs / 2) + ", not " + std::to_string(g.width));
  if (g.firstRow < 0 || g.firstRow + g.width > rows) fail("rows " + std::to_string(g.firstRow) + ".." + std::to_string(g.firstRow + g.width - 1) + " are outside the step's " + std::to_string(rows));
  if (g.generated < 1 || g.generated >= g.outputLength) fail("generated must be 1..outputLength - 1 (the first step spreads one row over the beams), not " + std::to_string(g.generated));
  if (g.earlyStopping < 0 || g.earlyStopping > 2) fail("earlyStopping must be 0 (false), 1 (true) or 2 (never)");
  if (!(g.temperature >= 0) || !std::isfinite(g.lenPenalty) || !(g.diversityRate >= 0)) fail("temperature >= 0, a finite lenPenalty and diversityRate >= 0");
  if (static_cast<int>(g.scores.size()) != g.width) fail("scores must hold one score per beam");
  if (static_cast<int>(g.finished.size()) > g.width) fail("at most width finished scores");
}

SampleParams BeamSampleParams(const BeamGroup& g, int b, std::vector<int32_t>& bans) {
  const int32_t banBegin = static_cast<int32_t>(bans.size());
  if (g.generated < g.minLength) bans.insert(bans.end(), g.endIds.begin(), g.endIds.end());
  return SampleParams{g.temperature, 1, 1, 0, 0, 0, 0, 0, 2 * g.width, static_cast<double>(g.scores[b]), 0, 0, banBegin, static_cast<int32_t>(bans.size())};
}

void StepBeamGroup(BeamGroup& g, const SampleResult* continuations, int32_t* parents, int32_t* tokens) {
  const int width = g.width;
  const size_t keep = 2 * static_cast<size_t>(width);
  const int length = g.generated + 1;
  const bool last = length >= g.outputLength;
  std::vector<Candidate> candidates;
  candidates.reserve(keep * width);
  for (int b = 0; b < width; b++) {
    const SampleResult& row = continuations[b];
    for (int k = 0; k < row.topCount; k++) {
      const float score = static_cast<float>(row.topLogProbs[k] + static_cast<double>(g.scores[b]));
      const float rank = static_cast<float>(static_cast<double>(score) - g.diversityRate * k);
      candidates.push_back(Candidate{b, row.topTokens[k], score, rank, false});
    }
  }
  // The best 2B over all beams: by rank, then beam, then id.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& x, const Candidate& y) {
    if (x.rank != y.rank) return x.rank > y.rank;
    if (x.parent != y.parent) return x.parent < y.parent;
    return x.token < y.token;
  });
  if (candidates.size() > keep) candidates.resize(keep);
  for (Candidate& c : candidates) c.ends = IsEndId(g.endIds, c.token) || last;

  // The top-B continuations that ended join the finished set if they beat its worst.
  const bool full = static_cast<int>(g.finished.size()) == width;
  if (g.improvable && !(g.earlyStopping == 1 && full)) {
    std::vector<float> merged = g.finished;
    const size_t top = std::min(candidates.size(), static_cast<size_t>(width));
    for (size_t i = 0; i < top; i++) {
      if (candidates[i].ends) merged.push_back(static_cast<float>(static_cast<double>(candidates[i].score) / std::pow(static_cast<double>(length), g.lenPenalty)));
    }
    std::stable_sort(merged.begin(), merged.end(), [](float x, float y) { return x > y; });
    if (static_cast<int>(merged.size()) > width) merged.resize(width);
    g.finished = merged;
  }

  // The next beams: the best B that did not end (ended ones sink by kOut, keeping their order).
  struct Next {
    const Candidate* c;
    float order;
    float running;
  };
  std::vector<Next> next;
  next.reserve(candidates.size());
  for (const Candidate& c : candidates) {
    next.push_back(Next{&c, c.ends ? static_cast<float>(c.rank + kOut) : c.rank, c.ends ? static_cast<float>(c.score + kOut) : c.score});
  }
  std::stable_sort(next.begin(), next.end(), [](const Next& x, const Next& y) { return x.order > y.order; });
  if (static_cast<int>(next.size()) < width) throw std::logic_error("a beam step had fewer continuations than beams");
  for (int b = 0; b < width; b++) {
    parents[b] = next[b].c->parent;
    tokens[b] = next[b].c->token;
    g.scores[b] = next[b].running;
  }
  g.generated = length;

  // Can the best live beam still beat the worst finished hypothesis? Once no, it stays no.
  const double hypothetical = g.earlyStopping == 2 && g.lenPenalty > 0 ? g.outputLength : length;
  const float bestPossible = static_cast<float>(static_cast<double>(g.scores[0]) / std::pow(hypothetical, g.lenPenalty));
  const double worst = static_cast<int>(g.finished.size()) < width ? kOut : *std::min_element(g.finished.begin(), g.finished.end());
  g.improvable = g.improvable && bestPossible > worst;
  const bool allEnd = std::all_of(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.ends; });
  g.done = !g.improvable || (g.earlyStopping == 1 && static_cast<int>(g.finished.size()) == width) || allEnd;
}

}  // namespace chorus
