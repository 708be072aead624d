// The shape of a family spec (families.ts holds the families) and of a parsed config
// (config.ts reads it): roles and kinds, never per-family code.
import type { HfQuantConfig } from '../checkpoint/hf-quantized.js';

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
  | {
      kind: 'moe';
      router: string;
      experts: string;
      expert: { gate: string; up: string; down: string };
      dense?: { gate: string; up: string; down: string };
    };

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

export interface ConfigRule {
  key: string;
  /** Whether this value (undefined when absent) is one the family computes correctly. */
  supported: (value: unknown) => boolean;
  /** What is not implemented. */
  why: string;
}

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
  /** Every `eos_token_id` of config.json (a number or a list). */
  eosTokenIds: number[];
  /** config.json's `torch_dtype` (newer: `dtype`), as a dtype name. */
  torchDtype?: string;
  /** config.json's `quantization_config`: a GPTQ / AWQ 4-bit checkpoint. */
  quantization?: HfQuantConfig;
}
