// A WebGPU pass's index feeds as one int32 upload (src/graph/index-feeds.ts): the packing
// the session thread does, against the plan the graph is built with. The graph's side (its
// Split, run on the software GPU, and that nothing else goes up) is in webgpu.test.ts.
import onnxProto from 'onnx-proto';
import { describe, expect, it } from 'vitest';
import { SafetensorsCheckpoint } from '../src/checkpoint/safetensors.js';
import { packIndexFeeds, type IndexFeedPlan } from '../src/graph/index-feeds.js';
import { readModelConfig } from '../src/model/config.js';
import { buildDecoderGraph } from '../src/model/decoder.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';

const feed = (dims: number[], values: number[]) => ({ dims, data: BigInt64Array.from(values, BigInt) });

describe('index feeds', () => {
  const plan: IndexFeedPlan = {
    feeds: [
      { name: 'ids', dims: ['batch', 'seq'] },
      { name: 'rows', dims: ['batch'] },
      { name: 'none', dims: ['next'] },
      { name: 'keys', dims: ['batch', 'total'] },
    ],
    sizes: ['seq', 'batch', 'total'],
  };
  const feeds = {
    ids: feed([2, 3], [10, 11, 12, 20, 21, 22]),
    rows: feed([2], [1, 0]),
    none: feed([0], []),
    keys: feed([2, 4], [0, 1, 2, -1, 0, 1, -1, -1]),
    other: feed([1], [7]),
  };

  it('lays the feeds end to end in int32, with their lengths and the named sizes', () => {
    const packed = packIndexFeeds(plan, feeds);
    expect(Object.keys(packed).sort()).toEqual(['index_feed_sizes', 'index_feeds', 'size.batch', 'size.seq', 'size.total']);
    expect(packed.index_feeds!.type).toBe('int32');
    expect(Array.from(packed.index_feeds!.data, Number)).toEqual([10, 11, 12, 20, 21, 22, 1, 0, 0, 1, 2, -1, 0, 1, -1, -1]);
    expect(Array.from(packed.index_feed_sizes!.data, Number)).toEqual([6, 2, 0, 8]);
    expect(packed['size.seq']).toEqual({ type: 'int64', dims: [1], data: BigInt64Array.of(3n) });
    expect(packed['size.batch']!.data).toEqual(BigInt64Array.of(2n));
    expect(packed['size.total']!.data).toEqual(BigInt64Array.of(4n));
  });

  it('refuses feeds that disagree with the plan, naming the feed', () => {
    expect(() => packIndexFeeds(plan, { ...feeds, rows: feed([3], [0, 1, 2]) })).toThrow(/rows dim 0 \(batch\) is 3, not 2/);
    expect(() => packIndexFeeds(plan, { ...feeds, rows: feed([2, 1], [0, 1]) })).toThrow(/rows has 2 dims, not 1/);
    const { keys: _, ...withoutKeys } = feeds;
    expect(() => packIndexFeeds(plan, withoutKeys)).toThrow(/no feed keys/);
    expect(() => packIndexFeeds(plan, { ...feeds, ids: feed([2, 3], [0, 0, 2 ** 31, 0, 0, 0]) })).toThrow(/ids\[2\] = 2147483648 is outside int32/);
    expect(() => packIndexFeeds({ ...plan, sizes: ['heads'] }, feeds)).toThrow(/no feed has dim heads/);
  });

  it.each(Object.keys(FAMILY_FIXTURES))('%s: the WebGPU graph declares what its plan says, and the CPU graph no plan', (family) => {
    const fx = makeFixture(FAMILY_FIXTURES[family]!);
    const config = readModelConfig(fx.dir);
    const ckpt = new SafetensorsCheckpoint(fx.dir);
    const gpu = buildDecoderGraph(config, ckpt, 'float32', undefined, 'webgpu');
    const names = gpu.indexFeeds.feeds.map((f) => f.name);
    expect(names).toEqual(
      ['input_ids', 'position_ids', 'key_positions', ...(config.rope?.long ? ['sequence_lengths'] : []), 'kv_rows', 'kv_steps', 'score_rows', 'target_ids', 'next_rows'],
    );
    const inputs = onnxProto.onnx.ModelProto.decode(gpu.model).graph!.input!.map((i) => i.name!);
    for (const name of names) expect(inputs).not.toContain(name);
    expect(inputs).toEqual(expect.arrayContaining(['index_feeds', 'index_feed_sizes', ...gpu.indexFeeds.sizes.map((d) => `size.${d}`)]));
    expect(inputs.filter((i) => i.startsWith('size.')).length).toBe(gpu.indexFeeds.sizes.length);
    const cpu = buildDecoderGraph(config, ckpt, 'float32', undefined, 'cpu');
    expect(cpu.indexFeeds.feeds).toEqual([]);
  });
});
