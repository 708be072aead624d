// Architectures differ by data: one FamilySpec per Hugging Face `model_type`.
//
// A spec says where each weight lives in the checkpoint (by role: the norm before
// attention, the norm before the MLP, …), how config.json names the dimensions, and
// which kind of each block the family uses (separate or fused q/k/v, gated or plain
// MLP, rotary or learned positions). Families are overrides of the Llama base. The
// decoder in decoder.ts switches on the kinds; it has no per-family code paths.
import fs from 'node:fs';
import path from 'node:path';
import { CheckpointError } from '../errors.js';
import { readJsonObject } from '../checkpoint/files.js';

/** `rms`: x̂ · w; `rmsOffset`: x̂ · (1 + w) (Gemma, in float32); `layer`: LayerNorm. */
export type NormKind = 'rms' | 'rmsOffset' | 'layer';

/** `sqrtHidden`: embeddings × √hidden, the factor rounded to the compute dtype (Gemma). */
export type EmbedScale = 'none' | 'sqrtHidden';
export type Activation = 'silu' | 'gelu_tanh' | 'gelu';

/** Per-layer norms by what they normalise (names relative to the layer prefix; the
 * `.weight` / `.bias` suffixes are added). A role a family lacks is absent. */
export interface LayerNorms {
  /** Before attention (Llama's `input_layernorm`). */
  attnIn?: string;
  /** On the attention output, before the residual add (Gemma 2's `post_attention_layernorm`). */
  attnOut?: string;
  /** Before the MLP (Llama's `post_attention_layernorm`: the name lies, the role does not). */
  mlpIn?: string;
  /** On the MLP output, before the residual add. */
  mlpOut?: string;
  /** On the queries and keys, per head (`[head_dim]`) or over the whole projection. */
  q?: QkNorm;
  k?: QkNorm;
}

export interface QkNorm {
  name: string;
  over: 'head' | 'projection';
}

export type QkvSpec =
  | { kind: 'separate'; q: string; k: string; v: string }
  /** One projection whose output is [q | k | v]: (heads + 2·kv_heads)·head_dim wide. */
  | { kind: 'fused'; qkv: string };

export type MlpSpec =
  | { kind: 'gated'; gate: string; up: string; down: string }
  /** One projection whose output is [gate | up] (Phi-3's `gate_up_proj`). */
  | { kind: 'gatedFused'; gateUp: string; down: string }
  | { kind: 'plain'; fc: string; proj: string }
  /** Sparse mixture of gated experts: `router` scores every expert per token; expert e's
   * weights are `${experts}.${e}.${gate|up|down}`. Layers that are not sparse (Qwen3-MoE's
   * `mlp_only_layers`, `decoder_sparse_step`) use the `dense` gated MLP. */
  | { kind: 'moe'; router: string; experts: string; expert: { gate: string; up: string; down: string }; dense?: { gate: string; up: string; down: string } };

/** How a config routes tokens to experts. */
export interface MoeConfig {
  experts: number;
  /** Experts per token. */
  topK: number;
  /** Softmax over all experts, take the top k, then divide by their sum (Mixtral always;
   * Qwen3-MoE when `norm_topk_prob`). */
  renormalize: boolean;
  /** Width of each expert's MLP. */
  expertIntermediate: number;
  /** Per layer: sparse (true) or the dense MLP. */
  sparseLayers: boolean[];
}

export type PositionSpec = { kind: 'rope' } | { kind: 'learned'; table: string };

/** config.json keys of the dimensions, in the family's own names. */
export interface ConfigKeys {
  hidden: string;
  layers: string;
  heads: string;
  /** Absent: every head has its own key/value head. */
  kvHeads?: string;
  headDim?: string;
  intermediate: string;
  vocab: string;
  maxPositions: string;
  normEps: string;
  activation: string;
  tied: string;
}

export interface ConfigDefaults {
  maxPositions?: number;
  /** When the config has no head_dim: this, else hidden / heads (Qwen3's class says 128). */
  headDim?: number;
  normEps: number;
  activation: string;
  tied: boolean;
  /** Default MLP width from the hidden size (GPT-2's n_inner: 4 × hidden). */
  intermediate?: (hidden: number) => number;
  /** rope_theta when the config has none (10000 unless the config class says otherwise). */
  ropeTheta?: number;
}

export interface FamilySpec {
  family: string;
  modelTypes: string[];
  keys: ConfigKeys;
  defaults: ConfigDefaults;
  embed: string;
  positions: PositionSpec;
  layerPrefix: (i: number) => string;
  norm: NormKind;
  norms: LayerNorms;
  /** The final norm's name (without `.weight`). */
  finalNorm: string;
  qkv: QkvSpec;
  o: string;
  mlp: MlpSpec;
  lmHead: string;
  /** `out_in`: torch.nn.Linear `[out, in]`; `in_out`: GPT-2's Conv1D `[in, out]`. */
  linearLayout: 'out_in' | 'in_out';
  /** Which projections carry a bias, as the family's modeling code reads the config. */
  bias: (c: RawConfig) => Biases;
  /** The sliding window this config asks for, if any. */
  slidingWindow: (c: RawConfig) => number | undefined;
  /** Which layers the window applies to (default: every layer). */
  slidingLayers?: (c: RawConfig, layers: number) => boolean[];
  embedScale: EmbedScale;
  /** Factor of q·kᵀ before the softmax (default 1/√head_dim). */
  attentionScale?: (c: RawConfig, headDim: number) => number;
  /** `cap · tanh(x / cap)` of the attention scores (after scaling, before the mask), and
   * of the output logits before the log-softmax. */
  attentionSoftcap?: (c: RawConfig) => number | undefined;
  finalSoftcap?: (c: RawConfig) => number | undefined;
  /** Rotates the first head_dim × partial_rotary_factor dimensions only (Phi-3's
   * apply_rotary_pos_emb); families without it refuse a factor < 1. */
  partialRotary?: boolean;
  /** Expert routing, for `mlp.kind === 'moe'`. */
  moe?: (c: RawConfig, layers: number) => MoeConfig;
  /** Rotary frequencies of the sliding layers, when they differ from the others' (Gemma 3:
   * `rope_local_base_freq`, no scaling). */
  localRope?: (c: RawConfig, headDim: number) => RopeSpec;
  /** Config values that would change the computation in ways not implemented: refused
   * at load with the key and value named, never ignored. */
  unsupported: ConfigRule[];
  /** Where checkpoints of the family also store a tensor (e.g. the original GPT-2 files
   * name `h.0.attn.c_attn.weight` without the `transformer.` prefix). */
  alternativeNames?: (name: string) => string[];
}

export type RawConfig = Record<string, any>;

export interface Biases {
  qkv: boolean;
  o: boolean;
  mlp: boolean;
}

const fixedBiases = (qkv: boolean, o: boolean, mlp: boolean) => (): Biases => ({ qkv, o, mlp });
/** q/k/v/o biases with `attention_bias`, none in the MLP (Qwen3, OLMo 2, Gemma, Qwen3-MoE). */
const attentionBiases = (c: RawConfig): Biases => ({ qkv: c.attention_bias === true, o: c.attention_bias === true, mlp: false });

export interface ConfigRule {
  key: string;
  /** Whether this value (undefined when absent) is one the family computes correctly. */
  supported: (value: unknown) => boolean;
  /** What is not implemented. */
  why: string;
}

const absentOr =
  (...ok: unknown[]) =>
  (v: unknown) =>
    v === undefined || v === null || ok.includes(v);

export interface Dims {
  hiddenSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  intermediateSize: number;
  vocabSize: number;
  maxPositions: number;
  normEps: number;
  activation: Activation;
  tiedEmbeddings: boolean;
  slidingWindow?: number;
}

export interface RopeSpec {
  theta: number;
  /** One frequency per rotated pair, rope_scaling already applied. */
  invFreq: Float32Array;
  /** The rotary values depend on the whole sequence's length (Phi-3 `longrope` picks its
   * factors per forward pass): the same prefix has other KV in a longer sequence, so no
   * prefix cache or prefix sharing may reuse it, and query blocks must say how long their
   * whole sequence is. */
  dependsOnLength: boolean;
  /** Dimensions rotated (the first ones; the rest pass through): head_dim ×
   * partial_rotary_factor. */
  rotaryDim: number;
  /** Multiplies cos and sin (longrope's attention factor; 1 otherwise). */
  attentionFactor: number;
  /** longrope: the frequencies of sequences longer than `originalMax` (`invFreq` is then
   * the short ones). */
  long?: { invFreq: Float32Array; originalMax: number };
}

export interface ModelConfig extends Dims {
  modelType: string;
  spec: FamilySpec;
  bias: Biases;
  rope?: RopeSpec;
  /** The sliding layers' rotary frequencies, when not `rope`'s. */
  localRope?: RopeSpec;
  moe?: MoeConfig;
  /** Per layer: whether `slidingWindow` applies (all false without a window). */
  slidingLayers: boolean[];
  attentionScale: number;
  attentionSoftcap?: number;
  finalSoftcap?: number;
  bosTokenId?: number;
  eosTokenId?: number;
  /** config.json's `torch_dtype` (newer: `dtype`), as a dtype name. */
  torchDtype?: string;
}

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
  bias: (c) => ({ qkv: c.attention_bias === true, o: c.attention_bias === true, mlp: c.mlp_bias === true }),
  // LlamaModel has no sliding window: a `sliding_window` key in its config is ignored there too.
  slidingWindow: () => undefined,
  embedScale: 'none',
  unsupported: [],
};

// Qwen2 and Qwen3 (Qwen2Config, Qwen3Config): a window only with `use_sliding_window:
// true` (default false), of `sliding_window` (default 4096), on the layers `layer_types`
// names, else on the layers from `max_window_layers` (default 28) on.
const qwenWindows: Pick<FamilySpec, 'slidingWindow' | 'slidingLayers'> = {
  slidingWindow: (c) => (c.use_sliding_window === true ? (c.sliding_window === undefined ? 4096 : (c.sliding_window ?? undefined)) : undefined),
  slidingLayers: (c, layers) =>
    Array.isArray(c.layer_types) ? layerTypes(c, layers, 1) : Array.from({ length: layers }, (_, l) => l >= (c.max_window_layers ?? 28)),
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
      throw new CheckpointError(`config.json: layer_types[${l}] = ${JSON.stringify(t)} is not supported (sliding_attention, full_attention)`);
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
  slidingWindow: (c) => (c.sliding_window === undefined ? 4096 : (c.sliding_window ?? undefined)),
  slidingLayers: (c, layers) => layerTypes(c, layers, 2),
  attentionScale: (c) => (c.query_pre_attn_scalar ?? 256) ** -0.5,
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
    slidingWindow: (c) => c.sliding_window ?? undefined,
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
    slidingWindow: (c) => c.sliding_window ?? undefined,
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
    slidingLayers: (c, layers) => layerTypes(c, layers, c.sliding_window_pattern ?? 6),
    attentionSoftcap: () => undefined,
    finalSoftcap: (c) => c.final_logit_softcapping ?? undefined,
    localRope: (c, headDim) => {
      const local = c.rope_parameters?.sliding_attention;
      return local
        ? ropeFrequencies({ rope_parameters: local }, headDim)
        : ropeFrequencies({ rope_theta: c.rope_local_base_freq ?? 10000 }, headDim);
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
    mlp: { kind: 'moe', router: 'block_sparse_moe.gate', experts: 'block_sparse_moe.experts', expert: { gate: 'w1', up: 'w3', down: 'w2' } },
    moe: (c, layers) => ({
      experts: positiveInt(c, 'num_local_experts', 8),
      topK: positiveInt(c, 'num_experts_per_tok', 2),
      renormalize: true,
      expertIntermediate: positiveInt(c, 'intermediate_size', 14336),
      sparseLayers: new Array(layers).fill(true),
    }),
    bias: fixedBiases(false, false, false),
    slidingWindow: (c) => c.sliding_window ?? undefined,
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
      if (!Array.isArray(only) || !only.every((l) => Number.isInteger(l)))
        throw new CheckpointError(`config.json: mlp_only_layers must be a list of layer indices (got ${JSON.stringify(only)})`);
      const experts = positiveInt(c, c.num_experts !== undefined ? 'num_experts' : 'num_local_experts', 128);
      return {
        experts,
        topK: positiveInt(c, 'num_experts_per_tok', 8),
        renormalize: c.norm_topk_prob === true,
        expertIntermediate: positiveInt(c, 'moe_intermediate_size', 768),
        sparseLayers: Array.from({ length: layers }, (_, l) => !only.includes(l) && (l + 1) % step === 0),
      };
    },
    bias: attentionBiases,
    slidingWindow: (c) => (c.use_sliding_window === true ? (c.sliding_window === undefined ? 4096 : (c.sliding_window ?? undefined)) : undefined),
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

// ---- reading config.json ----------------------------------------------------------------

function int(c: RawConfig, key: string, fallback?: number): number {
  const v = c[key] ?? fallback;
  if (!Number.isInteger(v) || v <= 0)
    throw new CheckpointError(`config.json: ${key} must be a positive integer (got ${JSON.stringify(c[key])})`);
  return v;
}

function activation(name: string): Activation {
  if (name === 'silu' || name === 'swish') return 'silu';
  if (name === 'gelu_new' || name === 'gelu_pytorch_tanh' || name === 'gelu_fast') return 'gelu_tanh';
  if (name === 'gelu') return 'gelu';
  throw new CheckpointError(`config.json: activation ${name} is not supported (silu, gelu, gelu_new, gelu_pytorch_tanh)`);
}

/** Positions a rotary model serves at most (the size of its cos/sin tables). */
export const MAX_ROTARY_POSITIONS = 131072;

/** The dimensions of a config, read through the family's key names and defaults. */
export function readDims(spec: FamilySpec, c: RawConfig): Dims {
  const { keys, defaults } = spec;
  const hidden = int(c, keys.hidden);
  const heads = int(c, keys.heads);
  return {
    hiddenSize: hidden,
    numLayers: int(c, keys.layers),
    numHeads: heads,
    numKvHeads: keys.kvHeads ? int(c, keys.kvHeads, heads) : heads,
    headDim: keys.headDim ? int(c, keys.headDim, defaults.headDim ?? hidden / heads) : hidden / heads,
    intermediateSize: int(c, keys.intermediate, defaults.intermediate?.(hidden)),
    vocabSize: int(c, keys.vocab),
    // Rotary models look cos/sin up in tables of this many rows (decoder.ts): 131072
    // positions are 64 MiB for a 128-wide head; longer configs (Qwen2.5-1M) are served up
    // to it.
    maxPositions: Math.min(int(c, keys.maxPositions, defaults.maxPositions), spec.positions.kind === 'rope' ? MAX_ROTARY_POSITIONS : Infinity),
    normEps: c[keys.normEps] ?? defaults.normEps,
    activation: activation(c[keys.activation] ?? defaults.activation),
    tiedEmbeddings: c[keys.tied] ?? defaults.tied,
    slidingWindow: spec.slidingWindow(c),
  };
}

/** Rotary frequencies as transformers computes them, with `rope_scaling` applied. */
export function ropeFrequencies(c: RawConfig, headDim: number, defaultTheta = 10000, partialRotary = false): RopeSpec {
  // Newer transformers save `rope_parameters` ({rope_type, rope_theta, …}) in place of
  // rope_theta / rope_scaling.
  const params = c.rope_parameters ?? undefined;
  const theta: number = c.rope_theta ?? params?.rope_theta ?? defaultTheta;
  const partial = c.partial_rotary_factor ?? params?.partial_rotary_factor ?? 1;
  // transformers: dim = int(head_dim * partial_rotary_factor).
  const rotaryDim = Math.floor(headDim * partial);
  if (rotaryDim !== headDim && !partialRotary)
    throw new CheckpointError(`config.json: partial_rotary_factor = ${partial} is not supported for this family (it rotates every dimension)`);
  if (rotaryDim <= 0 || rotaryDim % 2 !== 0)
    throw new CheckpointError(`config.json: partial_rotary_factor = ${partial} gives ${rotaryDim} rotary dimensions (need an even number > 0)`);
  const half = rotaryDim / 2;
  const base = Array.from({ length: half }, (_, i) => 1 / theta ** ((2 * i) / rotaryDim));
  const scaling = c.rope_scaling ?? (params && (params.rope_type ?? 'default') !== 'default' ? params : null);
  const type: string = scaling ? (scaling.rope_type ?? scaling.type ?? 'default') : 'default';
  let freqs = base;
  const plain = { theta, rotaryDim, attentionFactor: 1, dependsOnLength: false };
  if (type === 'longrope') {
    // modeling_rope_utils' longrope: per forward pass, long factors when the sequence is
    // longer than original_max_position_embeddings, else short ones; inv_freq = 1 /
    // (factor_i · θ^(2i/dim)); cos and sin × attention_factor, by default
    // √(1 + ln(max/original) / ln(original)) when max > original.
    const original: number = c.original_max_position_embeddings ?? scaling.original_max_position_embeddings ?? c.max_position_embeddings;
    const factor: number = c.original_max_position_embeddings !== undefined ? c.max_position_embeddings / original : (scaling.factor ?? 1);
    const attentionFactor: number = scaling.attention_factor ?? (factor <= 1 ? 1 : Math.sqrt(1 + Math.log(factor) / Math.log(original)));
    const factors = (name: string): number[] => {
      const f = scaling[name];
      if (!Array.isArray(f) || f.length !== half || !f.every((v) => typeof v === 'number' && v > 0))
        throw new CheckpointError(`config.json: rope_scaling.${name} must be ${half} positive numbers (rotary dimensions / 2)`);
      return f;
    };
    const [short, long] = [factors('short_factor'), factors('long_factor')];
    if (!Number.isInteger(original) || original <= 0) throw new CheckpointError('config.json: longrope needs original_max_position_embeddings');
    return {
      ...plain,
      attentionFactor,
      dependsOnLength: true,
      invFreq: Float32Array.from(base.map((f, i) => f / short[i]!)),
      long: { invFreq: Float32Array.from(base.map((f, i) => f / long[i]!)), originalMax: original },
    };
  }
  if (type === 'linear') {
    freqs = base.map((f) => f / scaling.factor);
  } else if (type === 'llama3') {
    const { factor, low_freq_factor: low, high_freq_factor: high, original_max_position_embeddings: oldLen } = scaling;
    const lowWavelen = oldLen / low;
    const highWavelen = oldLen / high;
    freqs = base.map((f) => {
      const wavelen = (2 * Math.PI) / f;
      if (wavelen < highWavelen) return f;
      if (wavelen > lowWavelen) return f / factor;
      const smooth = (oldLen / wavelen - low) / (high - low);
      return (1 - smooth) * (f / factor) + smooth * f;
    });
  } else if (type !== 'default') {
    throw new CheckpointError(`config.json: rope_scaling type ${type} is not supported (default, linear, llama3, longrope)`);
  }
  return { ...plain, invFreq: Float32Array.from(freqs) };
}

/** A parsed config.json in the shape the graph builder uses. */
export function parseModelConfig(raw: RawConfig, file = 'config.json'): ModelConfig {
  const modelType: string = raw.model_type;
  const spec = FAMILIES.find((f) => f.modelTypes.includes(modelType));
  if (!spec) {
    const known = FAMILIES.flatMap((f) => f.modelTypes).join(', ');
    throw new CheckpointError(`${file}: model_type ${JSON.stringify(modelType)} is not supported (supported: ${known})`);
  }
  for (const rule of spec.unsupported) {
    if (!rule.supported(raw[rule.key])) {
      throw new CheckpointError(
        `${file}: ${rule.key} = ${JSON.stringify(raw[rule.key])} is not supported for ${spec.family} (${rule.why})`,
      );
    }
  }
  const dims = readDims(spec, raw);
  const moe = spec.moe?.(raw, dims.numLayers);
  if (moe && moe.topK > moe.experts) throw new CheckpointError(`${file}: num_experts_per_tok ${moe.topK} is more than the ${moe.experts} experts`);
  if (dims.numHeads % dims.numKvHeads !== 0) {
    throw new CheckpointError(`${file}: num_attention_heads ${dims.numHeads} is not a multiple of num_key_value_heads ${dims.numKvHeads}`);
  }
  return {
    ...dims,
    modelType,
    spec,
    bias: spec.bias(raw),
    rope:
      spec.positions.kind === 'rope'
        ? ropeFrequencies(globalRopeConfig(raw), dims.headDim, spec.defaults.ropeTheta, spec.partialRotary ?? false)
        : undefined,
    localRope: spec.localRope?.(raw, dims.headDim),
    moe,
    slidingLayers:
      dims.slidingWindow === undefined
        ? new Array(dims.numLayers).fill(false)
        : (spec.slidingLayers?.(raw, dims.numLayers) ?? new Array(dims.numLayers).fill(true)),
    attentionScale: spec.attentionScale?.(raw, dims.headDim) ?? 1 / Math.sqrt(dims.headDim),
    attentionSoftcap: positiveOrNone(spec.attentionSoftcap?.(raw), 'attn_logit_softcapping', file),
    finalSoftcap: positiveOrNone(spec.finalSoftcap?.(raw), 'final_logit_softcapping', file),
    torchDtype: typeof (raw.torch_dtype ?? raw.dtype) === 'string' ? String(raw.torch_dtype ?? raw.dtype).replace(/^torch\./, '') : undefined,
    bosTokenId: typeof raw.bos_token_id === 'number' ? raw.bos_token_id : undefined,
    eosTokenId: typeof raw.eos_token_id === 'number' ? raw.eos_token_id : Array.isArray(raw.eos_token_id) ? raw.eos_token_id[0] : undefined,
  };
}

function positiveInt(c: RawConfig, key: string, fallback: number): number {
  const v = c[key] ?? fallback;
  if (!Number.isInteger(v) || v <= 0) throw new CheckpointError(`config.json: ${key} must be a positive integer (got ${JSON.stringify(c[key])})`);
  return v;
}

/** The config as the global layers' rotary reads it: newer transformers keep Gemma 3's
 * per-layer-type parameters under `rope_parameters.full_attention`. */
function globalRopeConfig(c: RawConfig): RawConfig {
  const full = c.rope_parameters?.full_attention;
  return full ? { ...c, rope_parameters: full } : c;
}

function positiveOrNone(v: unknown, key: string, file: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !(v > 0)) throw new CheckpointError(`${file}: ${key} must be a positive number or null (got ${JSON.stringify(v)})`);
  return v;
}

/** Read `config.json` of a checkpoint directory. */
export function readModelConfig(dir: string): ModelConfig {
  const file = path.join(dir, 'config.json');
  if (!fs.existsSync(file)) throw new CheckpointError(`${dir}: no config.json`);
  return parseModelConfig(readJsonObject(file), file);
}
