// The probe tap: wires kernels/attention.ts into the decoder through its three hooks
// (begin, attentionProbs, afterLayer, end), so decoder.ts reads as a model and the
// probe graph is the scoring graph plus this: attention statistics beside the log-probs,
// so one pass can answer both.
//
// Extra inputs: key_bin [B,S], query_rows [B,Q], query_weight [B,Q], num_bins [1], raw_heads [Hr],
// raw_queries [Q], want_heatmap [1] (false: no per-row maps, 1-row heat outputs). Outputs: probe.votes / probe.mass
// [B,layers,H,bins], probe.sink_votes / probe.sink_mass [B,layers,H], raw.L
// [B,Hr,Q,S], heat.{max,mean}.key_{max,sum} [B,T,bins], heat.key_count [B,T,bins].
import type { GraphBuilder } from '../src/graph/builder.js';
import type { DecoderTap, TapModel } from '../src/model/tap.js';
import { heatmapKeys, heatRowMaps, layerProbe, probeInputs, type LayerProbe, type ProbeInputs } from './attention.js';

export function probeTap(): DecoderTap {
  return new ProbeTap();
}

class ProbeTap implements DecoderTap {
  private g!: GraphBuilder;
  private model!: TapModel;
  private inputs!: ProbeInputs;
  private readonly layers: LayerProbe[] = [];
  private poolMax = '';
  private poolSum = '';

  begin(builder: GraphBuilder, m: TapModel): void {
    const g = (this.g = builder);
    this.model = m;
    // The key bins are an index feed: with packed index feeds (WebGPU) int32, in the pass's
    // one upload, so the heatmap's per-query copy of them (Expand) and its ScatterElements
    // run on the device, where int64 ones ran on the CPU and sent 2 × 18 MB up a pass
    // (H100, 8k probe).
    const keyBin = g.indexInput('key_bin', ['batch', 'total']);
    // An index feed too: on WebGPU int32 in the one upload, expanded over heads on the device.
    const queryRows = g.indexInput('query_rows', ['batch', 'query_rows']);
    const queryWeight = g.input('query_weight', 'float32', ['batch', 'query_rows']);
    const numBins = g.input('num_bins', 'int64', [1]);
    const rawHeads = g.input('raw_heads', 'int64', ['raw_heads']);
    const rawQueries = g.input('raw_queries', 'int64', ['raw_queries']);
    const wantHeatmap = g.input('want_heatmap', 'bool', [1]);
    const { numHeads, numKvHeads } = m.config;
    this.inputs = probeInputs(
      g,
      { keyBin, queryRows, queryWeight, numBins, rawHeads, rawQueries, wantHeatmap },
      { kv: numKvHeads, group: numHeads / numKvHeads },
    );
  }

  attentionProbs(_layer: number, probs: string): void {
    this.layers.push(layerProbe(this.g, probs, this.inputs, this.model.config.numHeads));
  }

  // Pool layer i's attention into the running max / sum over layers, and make the next
  // layer wait for this layer's probe: onnxruntime's default order may otherwise run
  // the reductions late and keep every layer's probabilities alive at once (measured:
  // peak 3.2 GB → 1.3 GB for a 2048-token probe).
  //   head_max, head_sum ─Max / Add─► pools
  //   CPU, CUDA: one element of each result ─ReduceSum─×0─+─► hidden
  //   WebGPU: each result's first dim ─Shape─Concat─ReduceMax─×0─► [0, 0, 0] ─Reshape─► hidden
  // On WebGPU the order costs no dispatch: a Shape waits for its input to be made but
  // reads only its dims, and the int64 arithmetic after it is the host's (the values'
  // form was 11 dispatches a layer, about 18 µs each on the H100).
  afterLayer(i: number, hidden: string): string {
    const { g, model } = this;
    return g.scope('probe', () => {
      const lp = this.layers[i]!;
      this.poolMax = i === 0 ? lp.headMax : g.node('Max', [this.poolMax, lp.headMax], { name: 'pool_max' });
      this.poolSum = i === 0 ? lp.headSum : g.node('Add', [this.poolSum, lp.headSum], { name: 'pool_sum' });
      const results: [string, string][] = [
        [lp.votes, 'votes'],
        [lp.sinkVotes, 'sink_votes'],
        [lp.mass, 'mass'],
        [lp.sinkMass, 'sink_mass'],
        [lp.raw, 'raw'],
        [this.poolMax, 'pool_max'],
        [this.poolSum, 'pool_sum'],
      ];
      if (g.provider.orderByShapes) {
        const dims = results.map(([x, name]) => g.node('Shape', [x], { name: `${name}_dim`, attrs: { start: 0, end: 1 } }));
        const most = g.node('ReduceMax', [g.node('Concat', dims, { name: 'dims', attrs: { axis: 0 } })], {
          name: 'anchor',
          attrs: { keepdims: 1 },
        });
        const zero = g.node('Mul', [most, g.ints([0])], { name: 'zero_anchor' });
        const same = g.node('Concat', [zero, zero, zero], { name: 'same_shape', attrs: { axis: 0 } });
        return g.node('Reshape', [hidden, same], { name: 'ordered_hidden' });
      }
      const one = (x: string, name: string) =>
        g.node('Slice', [g.node('Reshape', [x, g.ints([-1])], { name: `${name}_flat` }), g.ints([0]), g.ints([1])], {
          name: `${name}_first`,
        });
      const parts = results.map(([x, name]) => one(x, name));
      const anchor = g.node('ReduceSum', [g.node('Concat', parts, { name: 'parts', attrs: { axis: 0 } })], {
        name: 'anchor',
        attrs: { keepdims: 0 },
      });
      const zero = g.node('Mul', [anchor, g.scalar(0)], { name: 'zero_anchor' });
      return g.node('Add', [hidden, model.toCompute(zero)], { name: 'ordered_hidden' });
    });
  }

  // Per-layer probes stacked to [B, layers, …]; the pooled maps (max and mean over
  // layers and heads) reduced over key bins:
  //   votes, sink_votes, mass, sink_mass: Concat over layers
  //   pooled max / mean [B,T,S] ─heatmapKeys─► key_max, key_sum [B,T,bins];  allowed ─MatMul─► key_count
  end(): void {
    const { g, model, inputs, layers } = this;
    g.scope('probe', () => {
      const { numLayers, numHeads } = model.config;
      const stack = (pick: (l: LayerProbe) => string, name: string) =>
        g.node(
          'Concat',
          layers.map((l, i) => g.node('Unsqueeze', [pick(l), g.ints([1])], { name: `${name}_${i}` })),
          { name, attrs: { axis: 1 } },
        );
      const perLayer: [string, (l: LayerProbe) => string, boolean][] = [
        ['votes', (l) => l.votes, true],
        ['sink_votes', (l) => l.sinkVotes, false],
        ['mass', (l) => l.mass, true],
        ['sink_mass', (l) => l.sinkMass, false],
      ];
      for (const [name, pick, withBins] of perLayer) {
        g.output(`probe.${name}`, stack(pick, name), 'float32', ['batch', numLayers, numHeads, ...(withBins ? ['bins'] : [])]);
      }
      layers.forEach((l, i) => g.output(`raw.${i}`, l.raw, 'float32', ['batch', 'raw_heads', 'raw_queries', 'total']));

      const poolMean = g.node('Div', [this.poolSum, g.scalar(numLayers * numHeads)], { name: 'pool_mean' });
      for (const [name, pooled] of [
        ['max', this.poolMax],
        ['mean', poolMean],
      ] as const) {
        const h = heatmapKeys(g, pooled, inputs.keyBin, inputs.keyBinsGrouped, inputs.numBins, `heat_${name}`);
        g.output(`heat.${name}.key_max`, h.keyMax, 'float32', ['batch', 'heat_rows', 'bins']);
        g.output(`heat.${name}.key_sum`, h.keySum, 'float32', ['batch', 'heat_rows', 'bins']);
      }
      // Visible keys per bin, for the heatmap's key mean (a [B, T, S] product: only with it).
      const allowedF = () => g.cast(model.allowed, 'float32', 'bool', 'allowed_f');
      const heat = inputs.heatRows;
      const [keyCount] =
        heat.kind === 'rows'
          ? heatRowMaps(
              g,
              heat,
              allowedF(),
              1,
              (rows) => [g.node('MatMul', [rows, inputs.keyBinsOneHot3], { name: 'key_count' })],
              'key_count',
            ) // WebGPU: no If
          : g.ifNode(
              'key_count',
              inputs.wantHeatmap,
              {
                then: () => [g.node('MatMul', [allowedF(), inputs.keyBinsOneHot3], { name: 'key_count' })],
                else: () => {
                  const dims = g.node('Shape', [inputs.keyBinsOneHot3], { name: 'onehot_shape' });
                  const shape = g.node(
                    'Concat',
                    [
                      g.node('Slice', [dims, g.ints([0]), g.ints([1])], { name: 'batch' }),
                      g.ints([1]),
                      g.node('Slice', [dims, g.ints([2]), g.ints([3])], { name: 'bins' }),
                    ],
                    {
                      name: 'one_row_shape',
                      attrs: { axis: 0 },
                    },
                  );
                  return [g.zeros(shape)];
                },
              },
              [{ dtype: 'float32', dims: ['batch', 'heat_rows', 'bins'] }],
            );
      g.output('heat.key_count', keyCount!, 'float32', ['batch', 'heat_rows', 'bins']);
    });
  }
}
