// Tiny deterministic checkpoints of every supported family, written once per test file
// into a temporary folder, with the tensors kept for the reference forward pass.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { writeSyntheticCheckpoint, type SyntheticSpec, type WriteOptions } from '../src/model/synthetic.js';
import { afterAll, beforeAll } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import type { ReferenceModel } from './reference.js';

export { FAMILY_FIXTURES } from './family-specs.js';
import { FAMILY_FIXTURES } from './family-specs.js';

export interface Fixture extends ReferenceModel {
  dir: string;
}

export function tempDir(label: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `ctxprobe-${label}-`));
}

export function makeFixture(spec: SyntheticSpec, options: WriteOptions = {}, dir = tempDir(spec.family)): Fixture {
  const tensors = writeSyntheticCheckpoint(dir, spec, options);
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  return { dir, config, tensors };
}

/** In a describe block: a fixture of `family` and its engine, made before and released after. */
export function familyEngine(family: string): { fx: Fixture; engine: Engine } {
  const ctx = {} as { fx: Fixture; engine: Engine };
  beforeAll(async () => {
    ctx.fx = makeFixture(FAMILY_FIXTURES[family]!);
    ctx.engine = await Engine.load(ctx.fx.dir, { threads: 1 });
  });
  afterAll(async () => ctx.engine?.release());
  return ctx;
}
