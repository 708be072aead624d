// The graph as a reader of a profile or Netron sees it: nodes named by where they live,
// small constants named once by type and value, and a probe graph that is the scoring
// graph plus the tap's nodes.
import onnxProto from 'onnx-proto';
import { describe, expect, it } from 'vitest';
import { SafetensorsCheckpoint } from '../src/checkpoint/safetensors.js';
import { readModelConfig } from '../src/model/config.js';
import { buildDecoderGraph } from '../src/model/decoder.js';
import { requiredTensors } from '../src/model/synthetic.js';
import { probeTap } from '../kernels/probe-tap.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';

const { onnx } = onnxProto;

describe.each(Object.keys(FAMILY_FIXTURES))('%s graph', (family) => {
  const fx = makeFixture(FAMILY_FIXTURES[family]!);
  const config = readModelConfig(fx.dir);
  const ckpt = new SafetensorsCheckpoint(fx.dir);
  const decode = (bytes: Uint8Array) => {
    const g = onnx.ModelProto.decode(bytes).graph!;
    return { initializer: g.initializer ?? [], node: g.node ?? [], output: g.output ?? [] };
  };

  it('names constants once, globally and by value, and nodes by location', () => {
    const graph = decode(buildDecoderGraph(config, ckpt).model);
    const weights = new Set(ckpt.tensors.keys());
    const constants = graph.initializer.map((t) => t.name!).filter((n) => !weights.has(n) && !n.startsWith('transformer.'));
    for (const name of constants) expect(name).toMatch(/^\/model\/(constants\/(INT64|FLOAT)\/|rotary(_local)?\/(cos|sin)$)/);
    expect(new Set(constants).size).toBe(constants.length);
    expect(constants).toContain(`/model/constants/INT64/[-1, ${config.hiddenSize}]`);
    for (const node of graph.node) {
      expect(node.name).toMatch(/^\/(model|outputs)\//);
      expect(node.name).not.toContain('//');
    }
    // The scoring graph has no probe nodes; the probe graph adds them beside the same layers.
    expect(graph.node.some((n) => n.name!.includes('/probe'))).toBe(false);
    const probe = decode(buildDecoderGraph(config, ckpt, 'float32', probeTap()).model);
    expect(probe.node.some((n) => n.name!.startsWith('/model/layers.0/attn/probe/'))).toBe(true);
    // Scores and probes from one pass: the probe graph keeps the log-prob head.
    expect(probe.output.map((o) => o.name)).toContain('logprobs');
  });

  // The probe tap orders each layer's probe before the next layer (kernels/probe-tap.ts:
  // left to onnxruntime's order, every layer's probabilities were alive at once; on
  // lavapipe a 2048-token probe of 12 layers peaked 1.9 GB higher without it).
  it.each(['cpu', 'webgpu'] as const)('probe graph (%s): each layer waits for the last one\'s probe results', (target) => {
    const graph = decode(buildDecoderGraph(config, ckpt, 'float32', probeTap(), target).model);
    const producer = new Map<string, (typeof graph.node)[number]>();
    for (const n of graph.node) for (const o of n.output ?? []) if (o) producer.set(o, n);
    const ancestors = (start: string[]) => {
      const seen = new Set<string>();
      const todo = [...start];
      while (todo.length > 0) {
        const n = producer.get(todo.pop()!);
        if (!n || seen.has(n.name!)) continue;
        seen.add(n.name!);
        todo.push(...(n.input ?? []));
      }
      return seen;
    };
    const outputs = new Set(graph.output.map((o) => o.name!));
    for (let i = 0; i + 1 < config.numLayers; i++) {
      // What layer i's probe leaves for the outputs: its raw attention, and the last node of
      // each statistic stacked over layers (votes, mass, sinks) and each pool.
      const next = graph.node.filter((n) => n.name!.startsWith(`/model/layers.${i + 1}/`));
      const before = ancestors(next.flatMap((n) => n.input ?? []));
      const stacked = ['votes', 'sink_votes', 'mass', 'sink_mass'].map((s) => graph.node.find((n) => n.name === `/model/probe/${s}_${i}`)!.input![0]!);
      const pools = graph.node.filter((n) => /^\/model\/layers\.\d+\/probe\/pool_(max|sum)$/.test(n.name!) && n.name!.startsWith(`/model/layers.${i}/`));
      const results = [`raw.${i}`, ...stacked, ...pools.flatMap((n) => n.output ?? [])];
      expect(pools.length).toBe(i === 0 ? 0 : 2);
      for (const r of results) expect(outputs.has(r) || producer.has(r)).toBe(true);
      for (const r of results) expect(before.has(producer.get(r)!.name!), `${r} before layer ${i + 1}`).toBe(true);
    }
  });

  it('reads exactly the tensors the synthetic checkpoint writes (both derived from the decoder)', () => {
    const written = new Map([...fx.tensors].map(([n, t]) => [n, t.shape]));
    expect(requiredTensors(fx.config)).toEqual(written);
  });
});
