// Prints a sha256 of every graph ctxprobe builds for the test fixtures: every family ×
// provider × dtype, scoring and probe graphs, and the KV layout graphs. A change meant to
// leave behaviour alone (a refactor) must leave every line the same:
//   npx tsx scripts/graph-hashes.ts > before.txt; …; npx tsx scripts/graph-hashes.ts | diff before.txt -
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { writeSyntheticCheckpoint } from '../src/model/synthetic.js';
import { readModelConfig } from '../src/model/config.js';
import { SafetensorsCheckpoint } from '../src/checkpoint/safetensors.js';
import { buildDecoderGraph } from '../src/model/decoder.js';
import { probeTap } from '../kernels/probe-tap.js';
import { buildKvLayoutGraph, layoutBuckets } from '../src/engine/kv-layout.js';
import { FAMILY_FIXTURES } from '../test/family-specs.js';
import type { ComputeDType } from '../src/common/dtypes.js';

const sha = (bytes: Uint8Array) => crypto.createHash('sha256').update(bytes).digest('hex');
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-hashes-'));
const targets: { target: 'cpu' | 'cuda' | 'webgpu'; dtypes: ComputeDType[] }[] = [
  { target: 'cpu', dtypes: ['float32', 'float16'] },
  { target: 'cuda', dtypes: ['float32', 'float16', 'bfloat16'] },
  { target: 'webgpu', dtypes: ['float32', 'float16'] },
];
try {
  for (const [name, spec] of Object.entries(FAMILY_FIXTURES)) {
    const dir = path.join(root, name);
    fs.mkdirSync(dir);
    writeSyntheticCheckpoint(dir, spec);
    const config = readModelConfig(dir);
    const ckpt = new SafetensorsCheckpoint(dir);
    for (const { target, dtypes } of targets) {
      for (const dtype of dtypes) {
        for (const probe of [false, true]) {
          const graph = buildDecoderGraph(config, ckpt, dtype, probe ? probeTap() : undefined, target);
          // With device weights (WebGPU) the uploads that put the weights on the device follow.
          const uploads = graph.uploads ? ` uploads ${sha(Buffer.concat(graph.uploads.map((u) => u.model)))}` : '';
          console.log(`${name} ${target} ${dtype} ${probe ? 'probe' : 'score'} ${sha(graph.model)} ${graph.nodeCount}${uploads}`);
        }
      }
    }
  }
  for (const dtype of ['float32', 'float16'] as const) {
    for (const sources of layoutBuckets()) {
      console.log(`kv-layout ${dtype} ${sources} ${sha(buildKvLayoutGraph({ tensors: 4, kvHeads: 2, headDim: 8, dtype }, sources))}`);
    }
  }
} finally {
  fs.rmSync(root, { recursive: true, force: true });
}
