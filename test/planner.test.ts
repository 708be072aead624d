// The pass planner on its own: units in, passes out, no engine. Expected plans are
// worked out by hand from the packing rule (rows × longest row ≤ budget, longest first).
import { describe, expect, it } from 'vitest';
import { plan, planTokens, packByLength } from '../src/scoring/planner.js';
import type { Unit } from '../src/scoring/units.js';

const unit = (prefix: number[], tail: number[]): Unit => ({ prefix, tail, targets: tail.map((t) => t + 100), topK: 0 });

const units: Unit[] = [
  unit([1, 2, 3, 4], [5]), // 0: shares its prefix with 1
  unit([1, 2, 3, 4], [7, 8]), // 1
  unit([], [1, 2, 3, 4, 5, 6]), // 2: no prefix
  unit([9, 9], [1]), // 3: a prefix nobody shares: scored as one whole row
  unit([], [4, 4, 4]), // 4
];

describe('plan', () => {
  it('computes a shared prefix once, its tails against it, and packs solo rows by the budget', () => {
    const p = plan(units, { maxBatchTokens: 8, prefixSharing: true });
    expect(p.passes).toEqual([
      {
        kind: 'score',
        rows: [{ unit: 2, tokens: [1, 2, 3, 4, 5, 6], startPosition: 0, scoredFrom: 0, pastRow: 0, targetFrom: 0, targetCount: 6 }],
      },
      {
        kind: 'score',
        rows: [
          // Units without a prefix come first, then those whose prefix nobody shares;
          // the sort by length is stable.
          { unit: 4, tokens: [4, 4, 4], startPosition: 0, scoredFrom: 0, pastRow: 0, targetFrom: 0, targetCount: 3 },
          { unit: 3, tokens: [9, 9, 1], startPosition: 0, scoredFrom: 2, pastRow: 0, targetFrom: 0, targetCount: 1 },
        ],
      },
      { kind: 'prefix', rows: [{ tokens: [1, 2, 3, 4], startPosition: 0 }] },
      {
        kind: 'score',
        past: 2,
        rows: [
          { unit: 1, tokens: [7, 8], startPosition: 4, scoredFrom: 0, pastRow: 0, targetFrom: 0, targetCount: 2 },
          { unit: 0, tokens: [5], startPosition: 4, scoredFrom: 0, pastRow: 0, targetFrom: 0, targetCount: 1 },
        ],
      },
    ]);
    // The shared prefix counts once: 6 + (3 + 3) + 4 + (2 + 1).
    expect(planTokens(p)).toBe(19);
  });

  it('without sharing, every unit is one whole row', () => {
    const p = plan(units, { maxBatchTokens: 8, prefixSharing: false });
    expect(p.passes.map((pass) => pass.kind)).toEqual(['score', 'score', 'score', 'score']);
    expect(p.passes.map((pass) => pass.rows.map((r) => (r as { unit: number }).unit))).toEqual([[1], [2], [0], [3, 4]]);
    expect(planTokens(p)).toBe(5 + 6 + 6 + 3 + 3);
  });

  it('puts groups of different prefixes in one prefix pass when the budget allows, each tail on its own past row', () => {
    const grouped = [unit([1, 2], [3]), unit([1, 2], [4]), unit([7, 8, 9], [1]), unit([7, 8, 9], [2])];
    const p = plan(grouped, { maxBatchTokens: 64, prefixSharing: true });
    // Prefix rows are packed longest first, like every row.
    expect(p.passes[0]).toEqual({
      kind: 'prefix',
      rows: [
        { tokens: [7, 8, 9], startPosition: 0 },
        { tokens: [1, 2], startPosition: 0 },
      ],
    });
    expect(p.passes.slice(1)).toEqual([
      {
        kind: 'score',
        past: 0,
        rows: [
          { unit: 2, tokens: [1], startPosition: 3, scoredFrom: 0, pastRow: 0, targetFrom: 0, targetCount: 1 },
          { unit: 3, tokens: [2], startPosition: 3, scoredFrom: 0, pastRow: 0, targetFrom: 0, targetCount: 1 },
          { unit: 0, tokens: [3], startPosition: 2, scoredFrom: 0, pastRow: 1, targetFrom: 0, targetCount: 1 },
          { unit: 1, tokens: [4], startPosition: 2, scoredFrom: 0, pastRow: 1, targetFrom: 0, targetCount: 1 },
        ],
      },
    ]);
  });

  it('always places a row longer than the budget, alone', () => {
    expect(packByLength([[1, 2, 3, 4, 5], [1]], (r) => r.length, 2)).toEqual([[[1, 2, 3, 4, 5]], [[1]]]);
  });

  it('runs a row longer than the budget in query blocks, each continuing the one before', () => {
    // Prefix [1, 2, 3], tail [4 … 10]: positions 3..9 are scored (7 targets); budget 4.
    const long = unit([1, 2, 3], [4, 5, 6, 7, 8, 9, 10]);
    const p = plan([long], { maxBatchTokens: 4, prefixSharing: true });
    expect(p.passes).toEqual([
      {
        kind: 'score',
        past: undefined,
        keep: true,
        rows: [{ unit: 0, tokens: [1, 2, 3, 4], startPosition: 0, scoredFrom: 3, pastRow: 0, targetFrom: 0, targetCount: 1 }],
      },
      {
        kind: 'score',
        past: 0,
        keep: true,
        rows: [{ unit: 0, tokens: [5, 6, 7, 8], startPosition: 4, scoredFrom: 0, pastRow: 0, targetFrom: 1, targetCount: 4 }],
      },
      {
        kind: 'score',
        past: 1,
        keep: false,
        rows: [{ unit: 0, tokens: [9, 10], startPosition: 8, scoredFrom: 0, pastRow: 0, targetFrom: 5, targetCount: 2 }],
      },
    ]);
    expect(planTokens(p)).toBe(10);
  });

  it('runs a shared prefix longer than the budget in prefix blocks, its tails against the last', () => {
    const units2 = [unit([1, 2, 3, 4, 5], [6]), unit([1, 2, 3, 4, 5], [7, 8])];
    const p = plan(units2, { maxBatchTokens: 2, prefixSharing: true });
    expect(p.passes.map((x) => [x.kind, x.past, x.rows.map((r) => r.tokens)])).toEqual([
      ['prefix', undefined, [[1, 2]]],
      ['prefix', 0, [[3, 4]]],
      ['prefix', 1, [[5]]],
      ['score', 2, [[7, 8]]],
      ['score', 2, [[6]]],
    ]);
  });

  it('shrinks blocks as their keys grow so that block × keys stays within the attention cells', () => {
    // 12 cells: b × (keys + b) ≤ 12 gives blocks of 3 (0 keys before), 2 (3), then 1s.
    const p = plan([unit([], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])], { maxBatchTokens: 100, prefixSharing: true, maxAttentionCells: 12 });
    const sizes = p.passes.map((x) => x.rows[0]!.tokens.length);
    expect(sizes).toEqual([3, 2, 1, 1, 1, 1, 1]);
    let keys = 0;
    for (const size of sizes) {
      expect(size * (keys + size)).toBeLessThanOrEqual(12);
      keys += size;
    }
    // Targets still add up: each block scores its own positions, in order.
    expect(p.passes.map((x) => (x.rows[0] as { targetFrom: number }).targetFrom)).toEqual([0, 3, 5, 6, 7, 8, 9]);
  });
});
