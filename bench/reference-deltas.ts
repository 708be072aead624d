// Accuracy against the float64 reference, per family: every fixture of test/ (tiny,
// random weights) scored by the engine — one 39-token sequence and a padded batch with a
// shared prefix through the scorer — and the largest |Δ| of a token log-prob from
// test/reference.ts. Prints a table; asserts nothing (the tests hold each under 1e-4).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { rng, writeSyntheticCheckpoint } from '../src/model/synthetic.js';
import { FAMILY_FIXTURES } from '../test/family-specs.js';
import { referenceTokenLogprobs } from '../test/reference.js';
import { directScoring } from '../src/requests/scoring.js';

const ids = (seed: number, n: number, vocab: number) => {
  const r = rng(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(r() * (vocab - 3)));
};

console.log('family          max |Δ| log-prob vs float64 reference (39 tokens; batch of 4 with a shared 20-token prefix)');
for (const [name, spec] of Object.entries(FAMILY_FIXTURES)) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `ctxprobe-delta-${name}-`));
  const tensors = writeSyntheticCheckpoint(dir, spec);
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  const engine = await Engine.load(dir, { threads: 1 });
  const vocab = engine.config.vocabSize;
  const shared = ids(1, 20, vocab);
  const requests = [
    { context: ids(2, 39, vocab).slice(0, 1), continuations: [ids(2, 39, vocab).slice(1)] },
    ...[3, 4, 5].map((s) => ({ context: shared, continuations: [ids(s, 4 + s, vocab)] })),
  ];
  const got = await directScoring(new Scorer(engine)).loglikelihood(requests);
  let maxDiff = 0;
  requests.forEach((req, i) => {
    const cont = req.continuations[0]!;
    const ref = referenceTokenLogprobs({ config, tensors }, [...req.context, ...cont], cont.length);
    got[i]![0]!.tokenLogprobs.forEach((lp, k) => (maxDiff = Math.max(maxDiff, Math.abs(lp - ref.logprobs[k]!))));
  });
  console.log(`${name.padEnd(16)}${maxDiff.toExponential(2)}`);
  await engine.release();
  fs.rmSync(dir, { recursive: true, force: true });
}
