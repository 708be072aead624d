// The runner: executes a plan (planner.ts) on the engine and returns every unit's
// scores plus the work done. A prefix pass's KV is kept until the last pass that
// continues it has run, then dropped.
import type { Engine, PastKV, ScoredPosition } from '../engine.js';
import { CancelledError } from '../errors.js';
import { planTokens, type Plan, type ScorePass } from './planner.js';
import type { Unit, UnitScore } from './units.js';

export interface Work {
  /** Tokens run through the model (a shared prefix counts once). */
  tokensComputed: number;
  passes: number;
}

export interface PlanResult {
  scores: UnitScore[];
  work: Work;
}

export interface RunOptions {
  /** Checked between passes: when it says stop, the run ends with CancelledError. */
  shouldStop?: () => boolean;
}

export async function runPlan(engine: Engine, units: readonly Unit[], plan: Plan, options: RunOptions = {}): Promise<PlanResult> {
  const scores: UnitScore[] = new Array(units.length);
  const lastUse = new Map<number, number>();
  plan.passes.forEach((p, i) => p.past !== undefined && lastUse.set(p.past, i));
  const kept = new Map<number, PastKV>();
  try {
    for (const [i, pass] of plan.passes.entries()) {
      if (options.shouldStop?.()) throw new CancelledError();
      const past = pass.past === undefined ? undefined : kept.get(pass.past);
      let present: PastKV | undefined;
      switch (pass.kind) {
        case 'prefix': {
          const rows = pass.rows.map((r) => ({ tokens: r.tokens, startPosition: r.startPosition, pastRow: 0 }));
          ({ present } = await engine.forward({ rows, past, scored: [], topK: 0, keepPresent: true }));
          break;
        }
        case 'score':
          present = await runScorePass(engine, units, pass, past, scores);
          break;
      }
      if (present) kept.set(i, present);
      // A KV no later pass continues is freed at once.
      if (pass.past !== undefined && lastUse.get(pass.past) === i) {
        engine.dropPast(kept.get(pass.past)!);
        kept.delete(pass.past);
      }
    }
  } finally {
    // A run that stopped early still frees the KV it kept.
    for (const past of kept.values()) engine.dropPast(past);
  }
  return { scores, work: { tokensComputed: planTokens(plan), passes: plan.passes.length } };
}

async function runScorePass(
  engine: Engine,
  units: readonly Unit[],
  pass: ScorePass,
  past: PastKV | undefined,
  results: UnitScore[],
): Promise<PastKV | undefined> {
  const scored: ScoredPosition[] = [];
  pass.rows.forEach((r, row) => {
    const targets = units[r.unit]!.targets;
    for (let j = 0; j < r.targetCount; j++) scored.push({ row, index: r.scoredFrom + j, target: targets[r.targetFrom + j]! });
  });
  const topK = Math.max(0, ...pass.rows.map((r) => units[r.unit]!.topK));
  const out = await engine.forward({
    rows: pass.rows.map((r) => ({ tokens: r.tokens, startPosition: r.startPosition, pastRow: r.pastRow })),
    past,
    scored,
    topK,
    keepPresent: pass.keep ?? false,
  });
  let n = 0;
  for (const r of pass.rows) {
    const unit = units[r.unit]!;
    const count = r.targetCount;
    // A unit in query blocks gets its scores block by block, in order.
    const res = (results[r.unit] ??= { logprobs: [], greedy: [], ...(unit.topK > 0 ? { topK: [] } : {}) });
    for (let j = 0; j < count; j++) {
      res.logprobs.push(out.logprobs[n + j]!);
      res.greedy.push(out.greedy[n + j]!);
      if (unit.topK > 0) {
        const base = (n + j) * topK;
        res.topK!.push({
          ids: Array.from(out.topkIds!.subarray(base, base + unit.topK), Number),
          logprobs: Array.from(out.topkLogprobs!.subarray(base, base + unit.topK)),
        });
      }
    }
    n += count;
  }
  return out.present;
}
