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

  it('reads exactly the tensors the synthetic checkpoint writes (both derived from the decoder)', () => {
    const written = new Map([...fx.tensors].map(([n, t]) => [n, t.shape]));
    expect(requiredTensors(fx.config)).toEqual(written);
  });
});
