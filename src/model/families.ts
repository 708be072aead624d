// Architectures differ by data: one FamilySpec per Hugging Face `model_type`.
//
// A spec says where each weight lives in the checkpoint (by role: the norm before
// attention, the norm before the MLP, …), how config.json names the dimensions, and
// which kind of each block the family uses (separate or fused q/k/v, gated or plain
// MLP, rotary or learned positions). Families are overrides of the Llama base. The
// decoder in decoder.ts switches on the kinds; it has no per-family code paths.
import { CheckpointError } from '../common/errors.js';
import { DIM_CAPS } from '../common/dim-caps.js';
import { countOf, flag, positiveInt, positiveNumber, ropeFrequencies, windowOrNone } from './config-values.js';
import type { Biases, FamilySpec, RawConfig } from './family-spec.js';

export type * from './family-spec.js';

const fixedBiases = (qkv: boolean, o: boolean, mlp: boolean) => (): Biases => ({ qkv, o, mlp });
/** q/k/v/o biases with `attention_bias`, none in the MLP (Qwen3, OLMo 2, Gemma, Qwen3-MoE). */
const attentionBiases = (c: RawConfig): Biases => ({ qkv: flag(c, 'attention_bias'), o: flag(c, 'attention_bias'), mlp: false });
const absentOr =
  (...ok: unknown[]) =>
  (v: unknown) =>
    v === undefined || v === null || ok.includes(v);

// ---- the families --------------------------------------------------------------------

const LLAMA: FamilySpec = {
  family: 'llama',
  modelTypes: ['llama'],
  keys: {
    hidden: 'hidden_size',
    layers: 'num_hidden_layers',
    heads: 'num_attention_heads',
    kvHeads: 'num_key_value_heads',
    headDim: 'head_dim',
    intermediate: 'intermediate_size',
    vocab: 'vocab_size',
    maxPositions: 'max_position_embeddings',
    normEps: 'rms_norm_eps',
    activation: 'hidden_act',
    tied: 'tie_word_embeddings',
  },
  defaults: { maxPositions: 2048, normEps: 1e-6, activation: 'silu', tied: false },
  embed: 'model.embed_tokens.weight',
  positions: { kind: 'rope' },
  layerPrefix: (i) => `model.layers.${i}.`,
  norm: 'rms',
  norms: { attnIn: 'input_layernorm', mlpIn: 'post_attention_layernorm' },
  finalNorm: 'model.norm',
  qkv: { kind: 'separate', q: 'self_attn.q_proj', k: 'self_attn.k_proj', v: 'self_attn.v_proj' },
  o: 'self_attn.o_proj',
  mlp: { kind: 'gated', gate: 'mlp.gate_proj', up: 'mlp.up_proj', down: 'mlp.down_proj' },
  lmHead: 'lm_head.weight',
  linearLayout: 'out_in',
  // LlamaAttention: q/k/v/o bias = config.attention_bias; LlamaMLP: bias = config.mlp_bias.
  bias: (c) => ({ qkv: flag(c, 'attention_bias'), o: flag(c, 'attention_bias'), mlp: flag(c, 'mlp_bias') }),
  // LlamaModel has no sliding window: a `sliding_window` key in its config is ignored there too.
  slidingWindow: () => undefined,
  embedScale: 'none',
  unsupported: [],
};

// Qwen2 and Qwen3 (Qwen2Config, Qwen3Config): a window only with `use_sliding_window:
// true` (default false), of `sliding_window` (default 4096), on the layers `layer_types`
// names, else on the layers from `max_window_layers` (default 28) on.
const qwenWindow = (c: RawConfig) =>
  flag(c, 'use_sliding_window') ? (c.sliding_window === undefined ? 4096 : windowOrNone(c.sliding_window)) : undefined;
const qwenWindows: Pick<FamilySpec, 'slidingWindow' | 'slidingLayers'> = {
  slidingWindow: qwenWindow,
  slidingLayers: (c, layers) =>
    Array.isArray(c.layer_types)
      ? layerTypes(c, layers, 1)
      : Array.from({ length: layers }, (_, l) => l >= countOf(c, 'max_window_layers', 28)),
};

/** Which layers slide: `layer_types` when given (it wins over any pattern), else layer
 * `l` slides when (l + 1) % pattern ≠ 0. */
function layerTypes(c: RawConfig, layers: number, pattern: number): boolean[] {
  if (Array.isArray(c.layer_types)) {
    if (c.layer_types.length !== layers)
      throw new CheckpointError(`config.json: layer_types has ${c.layer_types.length} entries for ${layers} layers`);
    return c.layer_types.map((t: unknown, l: number) => {
      if (t === 'sliding_attention') return true;
      if (t === 'full_attention') return false;
      throw new CheckpointError(
        `config.json: layer_types[${l}] = ${JSON.stringify(t)} is not supported (sliding_attention, full_attention)`,
      );
    });
  }
  return Array.from({ length: layers }, (_, l) => (l + 1) % pattern !== 0);
}

const family = (base: FamilySpec, overrides: Partial<FamilySpec> & Pick<FamilySpec, 'family' | 'modelTypes'>): FamilySpec => ({
  ...base,
  ...overrides,
});

// Gemma 2 (modeling_gemma2.py, configuration_gemma2.py): embeddings × √hidden;
// RMSNorm × (1 + w) in float32; sandwich norms (input / post_attention on the attention
// output / pre_feedforward / post_feedforward on the MLP output); scores ×
// query_pre_attn_scalar^-0.5, soft-capped at attn_logit_softcapping before the mask;
// logits soft-capped at final_logit_softcapping; `layer_types` (default: even layers
// sliding) pick the layers `sliding_window` applies to. Absent keys take the config
// class's defaults (caps 50 and 30, scalar 256, window 4096, head_dim 256); an explicit
// null turns a cap or the window off.
const GEMMA2: FamilySpec = family(LLAMA, {
  family: 'gemma2',
  modelTypes: ['gemma2'],
  keys: { ...LLAMA.keys, activation: 'hidden_activation' },
  defaults: { maxPositions: 8192, headDim: 256, normEps: 1e-6, activation: 'gelu_pytorch_tanh', tied: true },
  norm: 'rmsOffset',
  norms: {
    attnIn: 'input_layernorm',
    attnOut: 'post_attention_layernorm',
    mlpIn: 'pre_feedforward_layernorm',
    mlpOut: 'post_feedforward_layernorm',
  },
  embedScale: 'sqrtHidden',
  // Gemma2Attention: q/k/v/o bias = config.attention_bias; Gemma2MLP has none.
  bias: attentionBiases,
  slidingWindow: (c) => (c.sliding_window === undefined ? 4096 : windowOrNone(c.sliding_window)),
  slidingLayers: (c, layers) => layerTypes(c, layers, 2),
  attentionScale: (c) => positiveNumber(c.query_pre_attn_scalar ?? 256, 'query_pre_attn_scalar') ** -0.5,
  attentionSoftcap: (c) => (c.attn_logit_softcapping === undefined ? 50 : (c.attn_logit_softcapping ?? undefined)),
  finalSoftcap: (c) => (c.final_logit_softcapping === undefined ? 30 : (c.final_logit_softcapping ?? undefined)),
  unsupported: [{ key: 'use_bidirectional_attention', supported: absentOr(false), why: 'attention to every token, not causal' }],
});

export const FAMILIES: FamilySpec[] = [
  LLAMA,
  // MistralAttention and MistralMLP have no biases, whatever the config says.
  family(LLAMA, {
    family: 'mistral',
    modelTypes: ['mistral'],
    bias: fixedBiases(false, false, false),
    slidingWindow: (c) => windowOrNone(c.sliding_window),
  }),
  family(LLAMA, {
    family: 'qwen2',
    modelTypes: ['qwen2'],
    bias: fixedBiases(true, false, false),
    ...qwenWindows,
  }),
  // Qwen3: per-head RMSNorm of queries and keys before rotary (modeling_qwen3.py),
  // head_dim 128 unless the config says otherwise.
  family(LLAMA, {
    family: 'qwen3',
    modelTypes: ['qwen3'],
    defaults: { ...LLAMA.defaults, headDim: 128 },
    norms: { ...LLAMA.norms, q: { name: 'self_attn.q_norm', over: 'head' }, k: { name: 'self_attn.k_norm', over: 'head' } },
    // Qwen3Attention: q/k/v/o bias = config.attention_bias; Qwen3MLP has none.
    bias: attentionBiases,
    ...qwenWindows,
  }),
  // OLMo 2: no pre-norms; RMSNorm of the attention and MLP outputs before each residual
  // add (`post_attention_layernorm`, `post_feedforward_layernorm`) and of the whole q and
  // k projections (modeling_olmo2.py).
  family(LLAMA, {
    family: 'olmo2',
    modelTypes: ['olmo2'],
    norms: {
      attnOut: 'post_attention_layernorm',
      mlpOut: 'post_feedforward_layernorm',
      q: { name: 'self_attn.q_norm', over: 'projection' },
      k: { name: 'self_attn.k_norm', over: 'projection' },
    },
    // Olmo2Attention: q/k/v/o bias = config.attention_bias; Olmo2MLP has none.
    bias: attentionBiases,
  }),
  // Phi-3: Llama with q/k/v fused into `qkv_proj` and gate/up into `gate_up_proj`
  // (modeling_phi3.py: query_pos = heads·head_dim, then kv_heads·head_dim each; the
  // first half of gate_up is the gate); `partial_rotary_factor` rotates the first
  // dimensions only; `longrope` scaling (ropeFrequencies).
  family(LLAMA, {
    family: 'phi3',
    modelTypes: ['phi3'],
    qkv: { kind: 'fused', qkv: 'self_attn.qkv_proj' },
    mlp: { kind: 'gatedFused', gateUp: 'mlp.gate_up_proj', down: 'mlp.down_proj' },
    partialRotary: true,
    // Phi3Attention and Phi3MLP have no biases.
    bias: fixedBiases(false, false, false),
    slidingWindow: (c) => windowOrNone(c.sliding_window),
  }),
  GEMMA2,
  // Gemma 3 text (modeling_gemma3.py, Gemma3TextConfig): Gemma 2's layout plus per-head
  // q/k RMSNorm × (1 + w) before rotary; attention is never soft-capped (Gemma3Attention
  // passes no cap, whatever the config says), the logits only when
  // final_logit_softcapping is set (default none); sliding layers from `layer_types` or
  // every layer but each `sliding_window_pattern`-th (default 6); sliding layers rotate
  // with `rope_local_base_freq` (default 10000, never scaled), the others with
  // `rope_theta` (default 1e6) and `rope_scaling`.
  family(GEMMA2, {
    family: 'gemma3_text',
    modelTypes: ['gemma3_text'],
    defaults: { ...GEMMA2.defaults, maxPositions: 131072, ropeTheta: 1e6 },
    norms: { ...GEMMA2.norms, q: { name: 'self_attn.q_norm', over: 'head' }, k: { name: 'self_attn.k_norm', over: 'head' } },
    slidingLayers: (c, layers) => layerTypes(c, layers, positiveInt(c, 'sliding_window_pattern', 6)),
    attentionSoftcap: () => undefined,
    finalSoftcap: (c) => c.final_logit_softcapping ?? undefined,
    localRope: (c, headDim) => {
      const local = c.rope_parameters?.sliding_attention;
      return local
        ? ropeFrequencies({ rope_parameters: local }, headDim, 10000, false, 'rope_parameters.sliding_attention')
        : ropeFrequencies({ rope_theta: positiveNumber(c.rope_local_base_freq ?? 10000, 'rope_local_base_freq') }, headDim);
    },
  }),
  // Mixtral (modeling_mixtral.py): Mistral with a sparse MoE block — router
  // `block_sparse_moe.gate`, softmax over all `num_local_experts`, the top
  // `num_experts_per_tok`, renormalised to sum to 1; experts w1 (gate), w3 (up), w2 (down)
  // of `intermediate_size`; no biases; `sliding_window` on every layer when set.
  family(LLAMA, {
    family: 'mixtral',
    modelTypes: ['mixtral'],
    defaults: { ...LLAMA.defaults, maxPositions: 4096 * 32, normEps: 1e-5, ropeTheta: 1e6 },
    mlp: {
      kind: 'moe',
      router: 'block_sparse_moe.gate',
      experts: 'block_sparse_moe.experts',
      expert: { gate: 'w1', up: 'w3', down: 'w2' },
    },
    moe: (c, layers) => ({
      experts: positiveInt(c, 'num_local_experts', 8, DIM_CAPS.experts),
      topK: positiveInt(c, 'num_experts_per_tok', 2),
      renormalize: true,
      expertIntermediate: positiveInt(c, 'intermediate_size', 14336, DIM_CAPS.intermediate),
      sparseLayers: new Array(layers).fill(true),
    }),
    bias: fixedBiases(false, false, false),
    slidingWindow: (c) => windowOrNone(c.sliding_window),
  }),
  // Qwen3-MoE (modeling_qwen3_moe.py, Qwen3MoeConfig): Qwen3's attention (per-head q/k
  // norms, head_dim hidden/heads unless given); router `mlp.gate`, softmax over all
  // `num_experts`, top `num_experts_per_tok`, renormalised only with `norm_topk_prob`
  // (default false); experts of `moe_intermediate_size`; a layer is sparse unless listed
  // in `mlp_only_layers` or (l + 1) % `decoder_sparse_step` ≠ 0, and then uses the dense
  // MLP of `intermediate_size`; `use_sliding_window` windows every layer.
  family(LLAMA, {
    family: 'qwen3_moe',
    modelTypes: ['qwen3_moe'],
    defaults: { ...LLAMA.defaults, maxPositions: 32768 },
    norms: { ...LLAMA.norms, q: { name: 'self_attn.q_norm', over: 'head' }, k: { name: 'self_attn.k_norm', over: 'head' } },
    mlp: {
      kind: 'moe',
      router: 'mlp.gate',
      experts: 'mlp.experts',
      expert: { gate: 'gate_proj', up: 'up_proj', down: 'down_proj' },
      dense: { gate: 'mlp.gate_proj', up: 'mlp.up_proj', down: 'mlp.down_proj' },
    },
    moe: (c, layers) => {
      const step = positiveInt(c, 'decoder_sparse_step', 1);
      const only: unknown = c.mlp_only_layers ?? [];
      if (!Array.isArray(only) || !only.every((l) => Number.isSafeInteger(l) && l >= 0))
        throw new CheckpointError(`config.json: mlp_only_layers must be a list of layer indices (got ${JSON.stringify(only)})`);
      const experts = positiveInt(c, c.num_experts !== undefined ? 'num_experts' : 'num_local_experts', 128, DIM_CAPS.experts);
      return {
        experts,
        topK: positiveInt(c, 'num_experts_per_tok', 8),
        renormalize: flag(c, 'norm_topk_prob'),
        expertIntermediate: positiveInt(c, 'moe_intermediate_size', 768, DIM_CAPS.intermediate),
        sparseLayers: Array.from({ length: layers }, (_, l) => !only.includes(l) && (l + 1) % step === 0),
      };
    },
    bias: attentionBiases,
    slidingWindow: qwenWindow,
  }),
  {
    family: 'gpt2',
    modelTypes: ['gpt2'],
    keys: {
      hidden: 'n_embd',
      layers: 'n_layer',
      heads: 'n_head',
      intermediate: 'n_inner',
      vocab: 'vocab_size',
      maxPositions: 'n_positions',
      normEps: 'layer_norm_epsilon',
      activation: 'activation_function',
      tied: 'tie_word_embeddings',
    },
    defaults: { normEps: 1e-5, activation: 'gelu_new', tied: true, intermediate: (hidden) => 4 * hidden },
    embed: 'transformer.wte.weight',
    positions: { kind: 'learned', table: 'transformer.wpe.weight' },
    layerPrefix: (i) => `transformer.h.${i}.`,
    norm: 'layer',
    norms: { attnIn: 'ln_1', mlpIn: 'ln_2' },
    finalNorm: 'transformer.ln_f',
    qkv: { kind: 'fused', qkv: 'attn.c_attn' },
    o: 'attn.c_proj',
    mlp: { kind: 'plain', fc: 'mlp.c_fc', proj: 'mlp.c_proj' },
    lmHead: 'lm_head.weight',
    linearLayout: 'in_out',
    bias: fixedBiases(true, true, true),
    slidingWindow: () => undefined,
    embedScale: 'none',
    unsupported: [
      { key: 'scale_attn_weights', supported: absentOr(true), why: 'attention scores not divided by √head_dim' },
      { key: 'scale_attn_by_inverse_layer_idx', supported: absentOr(false), why: 'attention scores divided by the layer number' },
    ],
    alternativeNames: (name) => (name.startsWith('transformer.') ? [name.slice('transformer.'.length)] : []),
  },
];

export function familySpec(name: string): FamilySpec {
  const spec = FAMILIES.find((f) => f.family === name);
  if (!spec) throw new CheckpointError(`unknown family ${name} (known: ${FAMILIES.map((f) => f.family).join(', ')})`);
  return spec;
}
