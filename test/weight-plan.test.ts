// The weight plan (src/engine/weights-plan.ts): on small models of every storage its bytes
// are what the load holds — the private copy's rows sum to the bytes the load copies there,
// every row's bytes are its tensor's elements at its form's width (an exact form's by the
// ggml format's own arithmetic), and their sum is the memory plan's weights — and
// `ctxprobe plan` shows it without loading, as a table and as JSON.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine, type EngineOptions } from '../src/engine/engine.js';
import { planModel, type WeightPlan } from '../src/engine/weights-plan.js';
import { repackedBytes } from '../src/checkpoint/ggml-blocks.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { convertToGguf } from './gguf-convert.js';
import { ROOT } from './cli-serve.js';

const engines: Engine[] = [];
afterAll(async () => Promise.all(engines.map((e) => e.release())));

const SPEC = { ...FAMILY_FIXTURES.llama!, intermediate: 64 };
const sum = (plan: WeightPlan, where?: string) => plan.tensors.filter((t) => !where || t.where === where).reduce((n, t) => n + t.bytes, 0);

const cases: [string, () => string, EngineOptions][] = [
  ['F32 folder', () => makeFixture(SPEC).dir, {}],
  ['BF16 folder widened at load', () => makeFixture(SPEC, { dtype: 'bfloat16' }).dir, { weightsAtRest: 'compute' }],
  ['BF16 folder kept as stored', () => makeFixture(SPEC, { dtype: 'bfloat16' }).dir, { weightsAtRest: 'stored' }],
  [
    'Q8_0 GGUF',
    () => {
      const fx = makeFixture(SPEC);
      return convertToGguf(fx, path.join(fx.dir, 'm.gguf'), { dtype: 'Q8_0' }).file;
    },
    {},
  ],
  ['F32 folder quantized at load to q8_0', () => makeFixture(SPEC).dir, { quantize: 'q8_0' }],
];

describe('the weight plan', () => {
  it.each(cases)('%s: its bytes are what the load holds, and the memory plan counts them', async (_, model, options) => {
    const dir = model();
    const plan = planModel(dir, { threads: 1, ...options });
    expect(plan.bytes).toBe(sum(plan));
    expect(plan.bytes).toBe(plan.memory.weights);
    const engine = await Engine.load(dir, { threads: 1, ...options });
    engines.push(engine);
    // The private copy the load writes holds exactly the plan's rows there (each piece
    // aligned to 64 bytes in it: at most 63 more a piece).
    const held = plan.tensors.filter((t) => t.where === 'private copy');
    expect(engine.weights.heldBytes).toBeGreaterThanOrEqual(sum(plan, 'private copy'));
    expect(engine.weights.heldBytes - sum(plan, 'private copy')).toBeLessThanOrEqual(63 * held.length);
    // Each row at its form's width.
    for (const t of plan.tensors) {
      const dims = /\[([\d,]+)\]/.exec(t.stored)![1]!.split(',').map(Number);
      const n = dims.reduce((a, b) => a * b, 1);
      if (t.form.startsWith('widened to float32')) expect(t.bytes).toBe(4 * n);
      else if (t.form.startsWith('as stored')) expect(t.bytes).toBe((t.stored.startsWith('bfloat16') ? 2 : 4) * n);
      else expect(t.form).toMatch(/Q8_0, exact form: part (lo|hi|scales|loZeros|hiZeros)$/);
      if (t.form === 'as stored, widened to float32 for each product') expect(t.passBytes).toBe(4 * n);
    }
    // An exact form's parts together: the format's own arithmetic (ggml-blocks.ts).
    const q = plan.tensors.filter((t) => t.name.startsWith('model.layers.0.mlp.up_proj.weight.'));
    if (q.length > 0) expect(q.reduce((n, t) => n + t.bytes, 0)).toBe(repackedBytes('Q8_0', 64, 32));
    // The load log's one line sums the same.
    expect(engine.info.weightPlan).toMatch(/ GiB /);
  });

  it('ctxprobe plan --model: a table without loading, and --json the same plan as data', () => {
    const fx = makeFixture(SPEC);
    const file = convertToGguf(fx, path.join(fx.dir, 'm.gguf'), { dtype: 'Q8_0' }).file;
    const run = (...args: string[]) =>
      execFileSync(process.execPath, [path.join(ROOT, 'bin/ctxprobe.js'), 'plan', '--model', file, ...args], { encoding: 'utf8' });
    const table = run();
    expect(table).toMatch(/^m\.gguf on cpu: .*GGUF/);
    expect(table).toMatch(/needs \d+\.\d GiB of \d+\.\d GiB available/);
    expect(table).toMatch(
      /model\.layers\.\*\.mlp\.up_proj\.weight ×2 +Q8_0 \[64,32\] +Q8_0, exact form \(lo, scales, loZeros, hi, hiZeros\) .* private copy/,
    );
    const json = JSON.parse(run('--json'));
    expect(json).toMatchObject({ name: 'm', device: 'cpu' });
    expect(json.bytes).toBe(json.memory.weights);
    // The same plan as the library's (what memory is available moves between the two).
    expect(json.tensors).toEqual(planModel(file, { threads: 0 }).tensors);
  });
});
