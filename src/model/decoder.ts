// The scoring graph of a decoder-only causal LM, built from a Hugging Face checkpoint.
//
// Read it top to bottom like nanoGPT: embeddings, then each decoder layer (norm →
// attention → residual → norm → MLP → residual), then the final norm and the output
// projection on the scored positions only, then the log-prob kernel. Family
// differences come from `config.spec` (families.ts), never from copied code. A tap
// (kernels/probe-tap.ts) may watch the attention probabilities through three hooks.
//
// Inputs (B rows of T new tokens, S = P + T key slots, N scored positions):
//   input_ids     [B, T] int64
//   position_ids  [B, T] int64    absolute position of each new token
//   key_positions [B, S] int64    position of each key slot, -1 = masked: a row's past, then
//                                 its new tokens, then padding (slot = position)
//   past.L.key / past.L.value  [B', kv_heads, P₀, head_dim]  each row's past (may be empty;
//                                 B' = B, or fewer rows that the pass's rows share)
//   recent.L.key / recent.L.value [B', kv_heads, P₁, head_dim]  the rest of it (may be empty):
//                                 a row's past is the first past_lengths[b] slots of the
//                                 two end to end (P = P₀ + P₁), padding after them. A long
//                                 past kept whole goes in as it lies and the few tokens
//                                 since as `recent`, so a decode step copies no past outside
//                                 the graph (session.ts)
//   past_lengths  [B]    int64    valid slots of each row's past: its new slots follow them
//   past_rows     [B]    int64    the row of past/recent each row continues, read when the
//                                 past has fewer rows than the pass (rows sharing a past:
//                                 continuations of one context); else row b is row b
//   score_rows    [N]    int64    flat index b·T + t of each scored position
//   target_ids    [N]    int64    the token each scored position should predict
//   top_k         [1]    int64
//   next_rows     [M]    int64    scored positions whose whole distribution is fetched (generation)
//   shape_salt    [h]    bool     unread; its length is a hash of the pass's shapes (session-host.ts)
// On WebGPU the index feeds (ids, positions, rows) are int32 pieces of one input,
// `index_feeds`, with `size.<dim>` inputs for the dims the host side reads
// (graph/index-feeds.ts); past_lengths and past_rows give way to kv_rows [B, 4] and
// kv_steps [4], where each key slot's K/V lies (past.ts: keySources); and full_slots [1]
// int64 asks for each layer's keys and values whole (full.L.*).
// Outputs: logprobs [N], greedy [N], topk_logprobs [N, k], topk_ids [N, k], next_logprobs [M, vocab],
//   new.L.key / new.L.value [B, kv_heads, T, head_dim]: the new tokens' KV only. The past
//   is already where the caller keeps it; returning it again cost a copy of the whole
//   past per pass (measured at a 1900-token past, batch 1: 46 → 30 ms a pass).
import type { IndexFeedPlan } from '../graph/index-feeds.js';
import { HELD_WEIGHTS_ROOT, type HeldWeights } from '../graph/held-weights.js';
import type { DeviceUpload } from '../graph/onnx-graph.js';
import { kvDType, type ComputeDType } from '../common/dtypes.js';
import type { ProviderKind } from '../common/providers.js';
import { unreachable } from '../common/unreachable.js';
import type { MlpSpec, ModelConfig } from './families.js';
import { logprobKernel } from '../../kernels/logprobs.js';
import { KEEP_SHAPE, type WeightSource, type WeightsAtRest } from './ops.js';
import { pastInputs, type Layout, type Past } from './past.js';
import { AttentionOps, type Rope } from './self-attention.js';
import { quantizedProduct, quantizedRows, type QuantizeAtLoad, type QuantizedActivations } from './quantized.js';
import type { DecoderTap } from './tap.js';

export type { WeightSource } from './ops.js';
export type { DecoderTap, TapModel } from './tap.js';

export interface DecoderGraph {
  model: Uint8Array;
  weightsDir: string;
  nodeCount: number;
  /** With packed index feeds (WebGPU): the feeds that travel in `index_feeds` (empty elsewhere). */
  indexFeeds: IndexFeedPlan;
  /** How the graph lays out its keys, so what the session thread feeds it: `branches` reads
   * past_lengths and past_rows, `gather` reads kv_rows and kv_steps (past.ts). */
  keyLayout: Layout['kind'];
  /** The graph widens stored weights each pass: it reads `weights_keep_shape` ([0, 0]). */
  keepsWeightsAsStored: boolean;
  /** With device weights (providers.ts `deviceWeights`): the graphs that put the weights on
   * the device once, which `model` reads as inputs (graph/device-weights.ts). */
  uploads?: DeviceUpload[];
  /** With `heldWeightsFile`: the weights the session thread copies there at load, read from
   * that private copy (graph/held-weights.ts); every file is then named from the root. */
  heldWeights?: HeldWeights;
}

/** How a graph takes its weights: narrow ones widened at load or kept as stored
 * (WeightsAtRest), and a private file the weights a session would read from the
 * checkpoint's memory map are copied to (graph/held-weights.ts). */
export interface GraphWeights {
  atRest?: WeightsAtRest;
  heldWeightsFile?: string;
  quantizedActivations?: QuantizedActivations;
  quantize?: QuantizeAtLoad;
}

export function buildDecoderGraph(
  config: ModelConfig,
  weights: WeightSource,
  dtype: ComputeDType = 'float32',
  tap?: DecoderTap,
  provider: ProviderKind = 'cpu',
  weightsOptions: GraphWeights = {},
): DecoderGraph {
  const { atRest = 'compute', heldWeightsFile, quantizedActivations = 'float32', quantize } = weightsOptions;
  const b = new DecoderBuilder(config, weights, dtype, tap, provider);
  b.atRest = atRest;
  b.quantizedActivations = quantizedActivations;
  if (quantize) b.quantizeAtLoad = quantize;
  b.build();
  const heldWeights = heldWeightsFile ? b.g.holdMappedWeights({ file: heldWeightsFile, weightsDir: weights.weightsDir }) : undefined;
  const graphName = `ctxprobe/${config.modelType}`;
  const { model, uploads } = b.g.provider.deviceWeights ? b.g.encodeWithDeviceWeights(graphName) : { model: b.g.encode(graphName), uploads: [] };
  return {
    model,
    ...(uploads.length > 0 && { uploads }),
    weightsDir: heldWeights ? HELD_WEIGHTS_ROOT : weights.weightsDir,
    nodeCount: b.g.nodeCount,
    indexFeeds: b.g.indexFeedPlan,
    keyLayout: b.g.provider.ifNodes ? 'branches' : 'gather',
    keepsWeightsAsStored: b.g.hasInput(KEEP_SHAPE),
    ...(heldWeights && { heldWeights }),
  };
}

/** The residual stream between layers: its value, or (WebGPU, float32) its two terms not
 * yet added, which the next norm adds as it norms (`skipNorm`). */
type Residual = { kind: 'sum'; sum: string } | { kind: 'pending'; base: string; delta: string };

class DecoderBuilder extends AttentionOps {
  private readonly maskValue: number;
  /** Residual adds and the norms after them as one node each (decoderLayer). */
  private readonly fuseNorms: boolean;

  constructor(
    c: ModelConfig,
    source: WeightSource,
    dt: ComputeDType,
    tap?: DecoderTap,
    provider: ProviderKind = 'cpu',
  ) {
    super(c, source, dt, tap, provider);
    // Finite, so fully masked (padding) rows never produce NaN that 0·NaN could spread.
    this.maskValue = dt === 'float32' ? -1e30 : -1e4;
    this.fuseNorms = this.g.provider.skipNorms && dt === 'float32';
  }

  build(): void {
    const { g, c } = this;
    // Index feeds are int64, or on WebGPU int32 pieces of one upload (index-feeds.ts).
    const inputIds = g.indexInput('input_ids', ['batch', 'seq']);
    const positionIds = g.indexInput('position_ids', ['batch', 'seq']);
    const keyPositions = g.indexInput('key_positions', ['batch', 'total']);
    g.input('shape_salt', 'bool', ['salt']);
    // CPU and CUDA lay keys out by Ifs over past_lengths and past_rows; WebGPU by a Gather
    // of rows whose sources the session thread describes (past.ts: kv_rows, kv_steps).
    const branchFeeds = g.provider.ifNodes
      ? { inputIds, keyPositions, pastLengths: g.input('past_lengths', 'int64', ['batch']), pastRows: g.input('past_rows', 'int64', ['batch']) }
      : undefined;
    // WebGPU: how many key slots of each layer's keys and values to return whole (`full.L.*`,
    // the next decode step's past as it lies); 0 returns none.
    const fullSlots = g.provider.kvOnDevice ? g.input('full_slots', 'int64', [1]) : undefined;

    let x = g.scope('model', () => this.embed(inputIds, positionIds));
    const mask = g.scope('model/attn_mask', () => this.attentionMask(positionIds, keyPositions));
    // longrope: each row's whole-sequence length picks its frequencies.
    const sequenceLengths = c.rope?.long ? g.indexInput('sequence_lengths', ['batch']) : undefined;
    const rope = c.rope ? g.scope('model/rotary', () => this.rotaryTables(positionIds, c.rope!, '/model/rotary', sequenceLengths)) : undefined;
    // Gemma 3: the sliding layers rotate with their own frequencies.
    const localRope = c.localRope ? g.scope('model/rotary_local', () => this.rotaryTables(positionIds, c.localRope!, '/model/rotary_local')) : rope;
    if (this.tap) g.scope('model', () => this.tap!.begin(g, { config: c, allowed: mask.allowed, toCompute: (v) => this.fromFloat32(v) }));
    const kvType = kvDType(this.dt);
    const pastOf = pastInputs(g, c, this.dt, branchFeeds);

    let stream: Residual = { kind: 'sum', sum: x };
    for (let i = 0; i < c.numLayers; i++) {
      const past = pastOf(i);
      const layer = g.scope(`model/layers.${i}`, () => this.decoderLayer(i, stream, mask.biases[i]!, c.slidingLayers[i] ? localRope : rope, past));
      stream = layer.hidden;
      if (this.tap && layer.hidden.kind === 'sum') {
        const hidden = layer.hidden.sum;
        stream = { kind: 'sum', sum: g.scope(`model/layers.${i}`, () => this.tap!.afterLayer(i, hidden)) };
      }
      g.output(`new.${i}.key`, layer.newKey, kvType, ['batch', c.numKvHeads, 'seq', c.headDim]);
      g.output(`new.${i}.value`, layer.newValue, kvType, ['batch', c.numKvHeads, 'seq', c.headDim]);
      if (fullSlots) {
        g.scope(`model/layers.${i}/attn`, () => {
          const whole = (t: string, name: string) => this.kvOut(g.node('Slice', [t, g.ints([0]), fullSlots, g.ints([2])], { name }));
          g.output(`full.${i}.key`, whole(layer.keys, 'full_keys'), kvType, ['batch', c.numKvHeads, 'full', c.headDim]);
          g.output(`full.${i}.value`, whole(layer.values, 'full_values'), kvType, ['batch', c.numKvHeads, 'full', c.headDim]);
        });
      }
    }
    // A tap's statistics come beside the log-probs: one pass answers both.
    if (this.tap) g.scope('model', () => this.tap!.end());
    const last = stream;
    x = last.kind === 'sum' ? last.sum : g.scope(`model/layers.${c.numLayers - 1}`, () => g.node('Add', [last.base, last.delta], { name: 'mlp_residual' }));

    const scoreRows = g.indexInput('score_rows', ['scored']);
    const targetIds = g.indexInput('target_ids', ['scored']);
    const topK = g.input('top_k', 'int64', [1]);
    const nextRows = g.indexInput('next_rows', ['next']);
    const k = g.scope('model', () => logprobKernel(g, this.head(x, scoreRows), c.vocabSize, targetIds, topK, nextRows));
    g.output('logprobs', k.logprobs, 'float32', ['scored']);
    g.output('greedy', k.greedy, 'bool', ['scored']);
    g.output('topk_logprobs', k.topkLogprobs, 'float32', ['scored', 'k']);
    g.output('topk_ids', k.topkIds, 'int64', ['scored', 'k']);
    g.output('next_logprobs', k.nextLogprobs, 'float32', ['next', c.vocabSize]);
    if (k.top1) {
      g.output('top1_ids', k.top1.ids, 'int64', ['scored']);
      g.output('top1_logprobs', k.top1.logprobs, 'float32', ['scored']);
    }
  }

  // input_ids ──Gather(embed)──► x ──(+ Gather(wpe, position_ids) for learned positions)
  // (weights kept as stored: the rows gathered, then widened)
  private embed(inputIds: string, positionIds: string): string {
    const { g, c } = this;
    const x = this.scaleEmbeddings(this.embedRows(inputIds));
    const positions = this.spec.positions;
    switch (positions.kind) {
      case 'rope':
        return x; // applied to q and k in every layer
      case 'learned': {
        const wpe = this.weight(positions.table, [c.maxPositions, c.hiddenSize]);
        const pos = g.node('Gather', [wpe, positionIds], { name: 'embed_positions', attrs: { axis: 0 } });
        return g.node('Add', [x, pos], { name: 'embed_sum' });
      }
      default:
        return unreachable(positions);
    }
  }

  private embedRows(inputIds: string): string {
    const { g, c } = this;
    const quantized = this.quantizedParts(this.spec.embed, [c.vocabSize, c.hiddenSize], 'rows');
    if (quantized) return g.scope('embed_tokens', () => quantizedRows(g, inputIds, quantized));
    // Kept as stored: the rows gathered as stored, then widened.
    const kept = this.keptTable(this.spec.embed, [c.vocabSize, c.hiddenSize]);
    if (kept)
      return g.scope('embed_tokens', () =>
        kept.widen(kept.blocks.length === 1 ? g.node('Gather', [kept.blocks[0]!.value, inputIds], { name: 'rows_as_stored', attrs: { axis: 0 } }) : this.blockGather(kept.blocks, inputIds)),
      );
    const blocks = this.weightRows(this.spec.embed, [c.vocabSize, c.hiddenSize]);
    if (blocks.length === 1) return g.node('Gather', [blocks[0]!.value, inputIds], { name: 'embed_tokens', attrs: { axis: 0 } });
    return g.scope('embed_tokens', () => this.blockGather(blocks, inputIds));
  }

  // A table in row blocks (weightRows): each id's row from the block that holds it, the
  // other blocks gathering row 0 and passed over — the one row, exactly.
  //   ids ─GreaterOrEqual(start)─And(Less(end))─► in block ─┐
  //   ids ─Sub(start)──────────────────────────Where(in block, ·, 0)─► local ─Gather(block)─► rows
  //   rows of each block ─Where(in block, rows, the blocks before)─►
  private blockGather(blocks: { value: string; start: number; end: number }[], ids: string): string {
    const { g } = this;
    let x = '';
    blocks.forEach((b, k) => {
      g.scope(`block_${k}`, () => {
        const inBlock = g.node('And', [g.node('GreaterOrEqual', [ids, g.index(b.start)], { name: 'from_start' }), g.node('Less', [ids, g.index(b.end)], { name: 'before_end' })], { name: 'in_block' });
        const local = g.node('Where', [inBlock, g.node('Sub', [ids, g.index(b.start)], { name: 'offset' }), g.index(0)], { name: 'local' });
        const rows = g.node('Gather', [b.value, local], { name: 'rows', attrs: { axis: 0 } });
        x = k === 0 ? rows : g.node('Where', [g.node('Unsqueeze', [inBlock, g.ints([-1])], { name: 'in_block_3d' }), rows, x], { name: 'picked' });
      });
    });
    return x;
  }

  // Gemma: embeddings × √hidden, the factor rounded to the compute dtype as transformers
  // does (`torch.tensor(hidden ** 0.5, dtype=…)`).
  private scaleEmbeddings(x: string): string {
    const { g, c } = this;
    switch (this.spec.embedScale) {
      case 'none':
        return x;
      case 'sqrtHidden':
        return g.node('Mul', [x, this.fromFloat32(g.scalar(Math.sqrt(c.hiddenSize)))], { name: 'embed_scale' });
      default:
        return unreachable(this.spec.embedScale);
    }
  }

  // Additive masks from positions (so left/right padding and a shared past all follow the
  // same rule); a layer with the sliding window uses the windowed one:
  //   key_positions [B,S] ─Unsqueeze─► [B,1,S] ─┬─ LessOrEqual(q) ──┐
  //   position_ids  [B,T] ─Unsqueeze─► [B,T,1] ─┘  GreaterOrEqual(0)─And─► allowed ─Where(0, -big)─► [B,1,1,T,S]
  //                                               Sub(q, k) < window ─And(allowed)─► windowed ─Where─► [B,1,1,T,S]
  // `allowed` for a tap: the windowed mask when every layer slides, else the causal one.
  private attentionMask(positionIds: string, keyPositions: string): { biases: string[]; allowed: string } {
    const { g, c } = this;
    const q = g.node('Unsqueeze', [positionIds, g.ints([2])], { name: 'query_positions' });
    const k = g.node('Unsqueeze', [keyPositions, g.ints([1])], { name: 'key_positions' });
    const causal = g.node('LessOrEqual', [k, q], { name: 'causal' });
    const valid = g.node('GreaterOrEqual', [k, g.index(0)], { name: 'valid_keys' });
    const allowed = g.node('And', [causal, valid], { name: 'allowed' });
    const bias = (mask: string, name: string) =>
      g.node('Unsqueeze', [g.node('Where', [mask, g.scalar(0), g.scalar(this.maskValue)], { name }), g.ints([1, 2])], {
        name: `${name}_5d`,
      });
    const sliding = c.slidingLayers;
    let windowed: string | undefined;
    if (c.slidingWindow !== undefined && sliding.some(Boolean)) {
      const distance = g.node('Sub', [q, k], { name: 'distance' });
      const inWindow = g.node('Less', [distance, g.index(c.slidingWindow)], { name: 'in_window' });
      windowed = g.node('And', [allowed, inWindow], { name: 'allowed_in_window' });
    }
    const full = sliding.every(Boolean) ? undefined : bias(allowed, 'bias');
    const window = windowed ? bias(windowed, 'window_bias') : undefined;
    return {
      biases: sliding.map((slides) => (slides ? window! : full!)),
      allowed: windowed && sliding.every(Boolean) ? windowed : allowed,
    };
  }


  //   x ─► (attn_in norm) ─► attention ─► (attn_out norm) ─► + ─► (mlp_in norm) ─► mlp ─► (mlp_out norm) ─► + ─► hidden
  //   └──────────────────────────────────────────────────────┘ └─────────────────────────────────────────┘
  // On WebGPU in float32 each residual + and the norm after it are one node (skipNorm): the
  // layer's own, and across layers (hidden left as its two terms for the next layer's
  // attn_in norm) unless a tap reads the hidden state.
  private decoderLayer(i: number, x: Residual, bias: string, rope: Rope | undefined, past: Past) {
    const { g, c } = this;
    const prefix = this.spec.layerPrefix(i);
    const norms = this.spec.norms;
    const maybeNorm = (role: keyof Omit<typeof norms, 'q' | 'k'>, v: string) => {
      const name = norms[role];
      return name ? g.scope(`${role}_norm`, () => this.norm(v, prefix + name, c.hiddenSize)) : v;
    };
    // A residual's sum and the norm of `role` over it: one node where both are pending.
    const addNorm = (role: 'attnIn' | 'mlpIn', r: Residual, addName: string): { sum: string; normed: string } => {
      if (r.kind === 'sum') return { sum: r.sum, normed: maybeNorm(role, r.sum) };
      const name = norms[role];
      if (name) return g.scope(`${role}_norm`, () => this.skipNorm(r.base, r.delta, prefix + name, c.hiddenSize));
      const sum = g.node('Add', [r.base, r.delta], { name: addName });
      return { sum, normed: sum };
    };
    // (the attn_in norm is named inside the attention's scope, as it always was)
    let input = { sum: '', normed: '' };
    const attn = g.scope('attn', () => {
      input = addNorm('attnIn', x, 'residual_in');
      return this.attention(prefix, input.normed, bias, rope, past, i);
    });
    const attnDelta = maybeNorm('attnOut', attn.out);
    const residual: Residual = this.fuseNorms
      ? { kind: 'pending', base: input.sum, delta: attnDelta }
      : { kind: 'sum', sum: g.node('Add', [input.sum, attnDelta], { name: 'attn_residual' }) };
    let afterAttn = { sum: '', normed: '' };
    const mlp = g.scope('mlp', () => {
      afterAttn = addNorm('mlpIn', residual, 'attn_residual');
      return this.mlp(prefix, afterAttn.normed, i);
    });
    const mlpDelta = maybeNorm('mlpOut', mlp);
    const hidden: Residual =
      this.fuseNorms && !this.tap
        ? { kind: 'pending', base: afterAttn.sum, delta: mlpDelta }
        : { kind: 'sum', sum: g.node('Add', [afterAttn.sum, mlpDelta], { name: 'mlp_residual' }) };
    return { hidden, newKey: this.kvOut(attn.newKey), newValue: this.kvOut(attn.newValue), keys: attn.keys, values: attn.values };
  }


  private mlp(prefix: string, x: string, layer: number): string {
    const { g, c } = this;
    const m = this.spec.mlp;
    const [H, I, withBias] = [c.hiddenSize, c.intermediateSize, c.bias.mlp];
    const gated = (gate: string, up: string, down: string) =>
      this.linear(prefix + down, g.node('Mul', [this.activation(gate), up], { name: 'gated' }), I, H, withBias, 'down_proj');
    switch (m.kind) {
      case 'gated': {
        const gate = this.linear(prefix + m.gate, x, H, I, withBias, 'gate_proj');
        const up = this.linear(prefix + m.up, x, H, I, withBias, 'up_proj');
        return gated(gate, up, m.down);
      }
      case 'moe': {
        if (c.moe!.sparseLayers[layer]) return this.moeBlock(prefix, x, m);
        if (!m.dense) throw new Error(`${c.modelType}: layer ${layer} is dense but the family has no dense MLP`);
        const gate = this.linear(prefix + m.dense.gate, x, H, I, withBias, 'gate_proj');
        const up = this.linear(prefix + m.dense.up, x, H, I, withBias, 'up_proj');
        return gated(gate, up, m.dense.down);
      }
      case 'gatedFused': {
        const both = this.linear(prefix + m.gateUp, x, H, 2 * I, withBias, 'gate_up_proj');
        const [gate, up] = g.nodeN('Split', 'gate_up_split', [both], { outputs: 2, attrs: { axis: -1, num_outputs: 2 } });
        return gated(gate!, up!, m.down);
      }
      case 'plain': {
        const fc = this.linear(prefix + m.fc, x, H, I, withBias, 'fc');
        return this.linear(prefix + m.proj, this.activation(fc), I, H, withBias, 'proj');
      }
      default:
        return unreachable(m);
    }
  }

  // Sparse experts, computing each expert on its own tokens only (as transformers' loop
  // over experts, in the graph):
  //   x [B,T,H] ─Reshape─► [N,H] ─router─► logits [N,E] ─Softmax (f32)─► TopK(k) ─► weights [N,k], chosen [N,k]
  //     (─ ÷ ReduceSum ─ when renormalised)
  //   per expert e: Equal(chosen, e) ─► its tokens' rows (NonZero) and weights (ReduceSum of Where)
  //     Gather(x, rows) ─► gate/up/act/down ─► × weight
  //   all experts' rows and outputs ─combine (ScatterND add; WebGPU: ordered gathers)─► [N,H] ─Reshape─► [B,T,H]
  // Each token's outputs are added in expert order, as transformers' index_add_ loop does.
  private moeBlock(prefix: string, x: string, m: Extract<MlpSpec, { kind: 'moe' }>): string {
    const { g, c } = this;
    const moe = c.moe!;
    const [H, I, E] = [c.hiddenSize, moe.expertIntermediate, moe.experts];
    const flat = g.node('Reshape', [x, g.ints([-1, H])], { name: 'tokens' });
    const logits = this.toFloat32(this.linear(prefix + m.router, flat, H, E, false, 'router'));
    const probs = g.node('Softmax', [logits], { name: 'router_probs', attrs: { axis: -1 } });
    const [top, chosen] = g.nodeN('TopK', 'top_experts', [probs, g.ints([moe.topK])], { outputs: 2, attrs: { axis: -1 } }) as [string, string];
    const weights = moe.renormalize
      ? g.node('Div', [top, g.node('ReduceSum', [top, g.ints([-1])], { name: 'top_sum', attrs: { keepdims: 1 } })], { name: 'renormalised' })
      : top;
    const rows: string[] = [];
    const routedBy: string[] = [];
    const outputs: string[] = [];
    for (let e = 0; e < E; e++) {
      g.scope(`experts.${e}`, () => {
        const mine = g.node('Equal', [chosen, g.ints([e])], { name: 'chosen' });
        const weight = g.node('ReduceSum', [g.node('Where', [mine, weights, g.scalar(0)], { name: 'own_weight' }), g.ints([-1])], {
          name: 'weight',
          attrs: { keepdims: 0 },
        });
        const routed = g.node('ReduceMax', [g.cast(mine, 'float32', 'bool', 'chosen_f32'), g.ints([-1])], { name: 'routed', attrs: { keepdims: 0 } });
        const idx = g.node('Reshape', [g.nonZero(routed), g.ints([-1])], { name: 'rows' });
        const xe = g.node('Gather', [flat, idx], { name: 'tokens', attrs: { axis: 0 } });
        const name = (part: string) => `${prefix}${m.experts}.${e}.${part}`;
        const gate = this.linear(name(m.expert.gate), xe, H, I, false, 'gate_proj');
        const up = this.linear(name(m.expert.up), xe, H, I, false, 'up_proj');
        const y = this.linear(name(m.expert.down), g.node('Mul', [this.activation(gate), up], { name: 'gated' }), I, H, false, 'down_proj');
        const w = this.fromFloat32(g.node('Unsqueeze', [g.node('Gather', [weight, idx], { name: 'row_weight', attrs: { axis: 0 } }), g.ints([-1])], { name: 'row_weight_2d' }));
        rows.push(idx);
        routedBy.push(routed);
        outputs.push(g.node('Mul', [y, w], { name: 'weighted' }));
      });
    }
    const summed = g.combineExperts(flat, rows, outputs, routedBy, moe.topK, this.dt);
    return g.node('Reshape', [summed, g.node('Shape', [x], { name: 'input_shape' })], { name: 'output' });
  }

  // Only the scored positions reach the output projection:
  //   x [B,T,H] ─Reshape─► [B·T,H] ─Gather(score_rows)─► [N,H] ─final norm─► lm_head ─► logits [N,V] float32
  private head(x: string, scoreRows: string): string {
    const { g, c } = this;
    const flat = g.node('Reshape', [x, g.ints([-1, c.hiddenSize])], { name: 'flatten_positions' });
    const scored = g.node('Gather', [flat, scoreRows], { name: 'scored_positions', attrs: { axis: 0 } });
    const normed = g.scope('norm', () => this.norm(scored, this.spec.finalNorm, c.hiddenSize, 'any'));
    const headName = c.tiedEmbeddings ? this.spec.embed : this.spec.lmHead;
    const quantized = this.quantizedParts(headName, [c.vocabSize, c.hiddenSize], 'product');
    if (quantized) return this.softcap(g.scope('lm_head', () => quantizedProduct(g, normed, quantized, this.quantizedActivations)), c.finalSoftcap, 'logits_softcap');
    // Row blocks of the head (weightRows) give the logits of their tokens, side by side.
    const blocks = this.orderedAfter(normed, () => this.weightRows(headName, [c.vocabSize, c.hiddenSize]));
    const logits = this.toFloat32(
      g.scope('lm_head', () =>
        blocks.length === 1
          ? g.matMulT(normed, blocks[0]!.value)
          : g.node('Concat', blocks.map((b, k) => g.matMulT(normed, b.value, { rank: 2, name: `block_${k}` })), { name: 'logits', attrs: { axis: -1 } }),
      ),
    );
    return this.softcap(logits, c.finalSoftcap, 'logits_softcap');
  }

}
