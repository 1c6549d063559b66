// Beam searches stepped inside the native engine: each step's next beams chosen from the beams'
// continuations (the sampler's beam mode, sampling.h) as src/generation/beam-search.ts chooses them
// (BeamSearch.stepWith), for searches whose processors that mode applies alone: temperature and the end
// id's ban under min_length; no penalties, bad words or stop words. Only what choosing needs is kept:
// the beams' running scores, the finished hypotheses' scores and whether a live beam can still beat
// them. The TypeScript search replays the same continuations, keeps the hypotheses and checks the
// parents chosen here against its own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sampling.h"

namespace chorus {

// Whether `token` is one of `endIds` (a model's end ids: a few, any of which ends a sequence).
inline bool IsEndId(const std::vector<int32_t>& endIds, int32_t token) { return std::find(endIds.begin(), endIds.end(), token) != endIds.end(); }

// One request's beam search, `width` consecutive rows from `firstRow` (beam b in row firstRow + b).
struct BeamGroup {
  int firstRow = 0;
  int width = 0;
  int outputLength = 0;  // request_output_len
  int generated = 0;     // tokens each live beam has
  int minLength = 0;
  std::vector<int32_t> endIds;  // any of them ends a hypothesis (none: empty)
  int earlyStopping = 0; // 0: false, 1: true, 2: never
  bool improvable = true;
  bool done = false;
  double temperature = 1;
  double lenPenalty = 1;
  double diversityRate = 0;
  std::vector<float> scores;    // each live beam's running score
  std::vector<float> finished;  // the finished hypotheses' scores, best first (at most width)
};

// Checks a group's fields, naming the first that is wrong (std::invalid_argument).
void CheckBeamGroup(const BeamGroup& group, int rows);

// The sampler row of beam b for the group's next step: its continuations (2 x width), score and bans
// (the end ids while generated < minLength), appending to `bans`.
SampleParams BeamSampleParams(const BeamGroup& group, int b, std::vector<int32_t>& bans);

// Steps `group` from its beams' continuations (continuations[b]: beam b's, best first): writes each next
// beam's parent (0..width-1) and token, and moves the group on (scores, finished, done).
void StepBeamGroup(BeamGroup& group, const SampleResult* continuations, int32_t* parents, int32_t* tokens);

}  // namespace chorus
