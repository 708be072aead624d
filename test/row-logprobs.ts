// Each row's next-token log-probs from one engine pass, and the batch contract the quantized
// tests check: a row's bits are its own whatever its batch, and a pass of one token (the
// products see one row, padded to the provider's minimum) gives the bits of the same
// position in a longer pass.
import { expect } from 'vitest';
import type { Engine } from '../src/engine/engine.js';

export async function rowLogprobs(e: Engine, rows: number[][]): Promise<number[][]> {
  const out = await e.forward({
    rows: rows.map((tokens, row) => ({ tokens, startPosition: 0, pastRow: row })),
    scored: rows.flatMap((tokens, row) => tokens.slice(1).map((target, index) => ({ row, index, target }))),
    topK: 0,
    keepPresent: false,
  });
  const all = Array.from(out.logprobs);
  let at = 0;
  return rows.map((t) => all.slice(at, (at += t.length - 1)));
}

export async function expectRowBitsOwn(e: Engine, rows: number[][]): Promise<void> {
  const together = await rowLogprobs(e, rows);
  for (const [i, r] of rows.entries()) expect((await rowLogprobs(e, [r]))[0]).toEqual(together[i]);
  const last = rows.at(-1)!;
  const one = await e.forward({ rows: [{ tokens: [last[0]!], startPosition: 0, pastRow: 0 }], scored: [{ row: 0, index: 0, target: last[1]! }], topK: 0, keepPresent: false });
  expect(one.logprobs[0]).toBe(together.at(-1)![0]);
}
