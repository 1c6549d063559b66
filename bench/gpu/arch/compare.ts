/** How the arch parity check scores an engine's tokens against transformers' goldens. */
import type { ArchBeamCase } from '../../../test/helpers/arch-golden.ts';

export interface BeamResult {
  sequences: number[][];
  scores: number[];
}

export interface Agreement {
  same: number;
  total: number;
  ratio: number;
  firstDivergences: Array<{ prompt: number; step: number }>;
}

export interface BeamAgreement {
  equal: boolean;
  sequencesEqual: boolean;
  worstScoreDiff: number;
}

/** Tokens equal position by position (a missing token counts as different), and each differing row's first differing step. */
export function agreement(ids: number[][], golden: number[][]): Agreement {
  let same = 0;
  let total = 0;
  const firstDivergences: Array<{ prompt: number; step: number }> = [];
  golden.forEach((want, p) => {
    const got = ids[p] ?? [];
    total += want.length;
    same += want.filter((token, i) => got[i] === token).length;
    const step = want.findIndex((token, i) => got[i] !== token);
    if (step !== -1 || got.length !== want.length) firstDivergences.push({ prompt: p, step: step === -1 ? want.length : step });
  });
  return { same, total, ratio: total === 0 ? 0 : same / total, firstDivergences };
}

/** Whether every case's returned sequences equal the golden's (in rank order) with scores within 1e-4 (relative past 1). */
export function beamAgreement(found: BeamResult[], cases: ArchBeamCase[]): BeamAgreement {
  let sequencesEqual = true;
  let worstScoreDiff = 0;
  cases.forEach((c, i) => {
    const got = found[i] ?? { sequences: [], scores: [] };
    if (JSON.stringify(got.sequences) !== JSON.stringify(c.sequences)) sequencesEqual = false;
    c.scores.forEach((score, j) => {
      const diff = Math.abs((got.scores[j] ?? Number.POSITIVE_INFINITY) - score) / Math.max(1, Math.abs(score));
      worstScoreDiff = Math.max(worstScoreDiff, diff);
    });
  });
  return { equal: sequencesEqual && worstScoreDiff <= 1e-4, sequencesEqual, worstScoreDiff };
}
