// Architectures differ by data: one FamilySpec per Hugging Face `model_type`.
//
// A spec says where each weight lives in the checkpoint, how the config names the
// dimensions, and which variant of each block the family uses. The decoder in
// decoder.ts reads the spec; it has no per-family code paths of its own.
import fs from 'node:fs';
import path from 'node:path';
import { CheckpointError } from '../checkpoint/safetensors.js';

export type NormKind = 'rms' | 'layer';
export type Activation = 'silu' | 'gelu_tanh' | 'gelu';

export interface WeightNames {
  embed: string;
  /** Learned absolute positions (GPT-2); rope families have none. */
  positionEmbed?: string;
  layer: (i: number) => string;
  inputNorm: string;
  postAttentionNorm: string;
  /** Separate q/k/v projections, or one fused `[hidden, 3·hidden]` projection. */
  qkv: { q: string; k: string; v: string } | { fused: string };
  o: string;
  mlp: { gate: string; up: string; down: string } | { fc: string; proj: string };
  finalNorm: string;
  lmHead: string;
}

export interface FamilySpec {
  family: string;
  modelTypes: string[];
  weights: WeightNames;
  /** `out_in`: torch.nn.Linear `[out, in]`; `in_out`: GPT-2's Conv1D `[in, out]`. */
  linearLayout: 'out_in' | 'in_out';
  norm: NormKind;
  positions: 'rope' | 'learned';
  /** Which projections carry a bias. */
  bias: { qkv: boolean; o: boolean; mlp: boolean };
  /** Read the dimensions from config.json, in the family's own key names. */
  dims: (c: RawConfig) => Dims;
  /** Where checkpoints of the family also store a tensor (e.g. the original GPT-2 files
   * name `h.0.attn.c_attn.weight` without the `transformer.` prefix). */
  alternativeNames?: (name: string) => string[];
}

type RawConfig = Record<string, any>;

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
}

export interface ModelConfig extends Dims {
  modelType: string;
  spec: FamilySpec;
  rope?: RopeSpec;
  bosTokenId?: number;
  eosTokenId?: number;
}

const llamaLike = (family: string, modelTypes: string[], qkvBias: boolean): FamilySpec => ({
  family,
  modelTypes,
  weights: {
    embed: 'model.embed_tokens.weight',
    layer: (i) => `model.layers.${i}.`,
    inputNorm: 'input_layernorm',
    postAttentionNorm: 'post_attention_layernorm',
    qkv: { q: 'self_attn.q_proj', k: 'self_attn.k_proj', v: 'self_attn.v_proj' },
    o: 'self_attn.o_proj',
    mlp: { gate: 'mlp.gate_proj', up: 'mlp.up_proj', down: 'mlp.down_proj' },
    finalNorm: 'model.norm',
    lmHead: 'lm_head.weight',
  },
  linearLayout: 'out_in',
  norm: 'rms',
  positions: 'rope',
  bias: { qkv: qkvBias, o: false, mlp: false },
  dims: (c) => {
    const heads = int(c, 'num_attention_heads');
    const hidden = int(c, 'hidden_size');
    return {
      hiddenSize: hidden,
      numLayers: int(c, 'num_hidden_layers'),
      numHeads: heads,
      numKvHeads: c.num_key_value_heads ?? heads,
      headDim: c.head_dim ?? hidden / heads,
      intermediateSize: int(c, 'intermediate_size'),
      vocabSize: int(c, 'vocab_size'),
      maxPositions: c.max_position_embeddings ?? 2048,
      normEps: c.rms_norm_eps ?? 1e-6,
      activation: activation(c.hidden_act ?? 'silu'),
      tiedEmbeddings: c.tie_word_embeddings ?? false,
      slidingWindow: c.use_sliding_window === false ? undefined : (c.sliding_window ?? undefined),
    };
  },
});

export const FAMILIES: FamilySpec[] = [
  llamaLike('llama', ['llama'], false),
  llamaLike('mistral', ['mistral'], false),
  llamaLike('qwen2', ['qwen2'], true),
  {
    family: 'gpt2',
    modelTypes: ['gpt2'],
    weights: {
      embed: 'transformer.wte.weight',
      positionEmbed: 'transformer.wpe.weight',
      layer: (i) => `transformer.h.${i}.`,
      inputNorm: 'ln_1',
      postAttentionNorm: 'ln_2',
      qkv: { fused: 'attn.c_attn' },
      o: 'attn.c_proj',
      mlp: { fc: 'mlp.c_fc', proj: 'mlp.c_proj' },
      finalNorm: 'transformer.ln_f',
      lmHead: 'lm_head.weight',
    },
    linearLayout: 'in_out',
    norm: 'layer',
    positions: 'learned',
    bias: { qkv: true, o: true, mlp: true },
    alternativeNames: (name) => (name.startsWith('transformer.') ? [name.slice('transformer.'.length)] : []),
    dims: (c) => {
      const hidden = int(c, 'n_embd');
      const heads = int(c, 'n_head');
      return {
        hiddenSize: hidden,
        numLayers: int(c, 'n_layer'),
        numHeads: heads,
        numKvHeads: heads,
        headDim: hidden / heads,
        intermediateSize: c.n_inner ?? 4 * hidden,
        vocabSize: int(c, 'vocab_size'),
        maxPositions: int(c, 'n_positions'),
        normEps: c.layer_norm_epsilon ?? 1e-5,
        activation: activation(c.activation_function ?? 'gelu_new'),
        tiedEmbeddings: c.tie_word_embeddings ?? true,
      };
    },
  },
];

function int(c: RawConfig, key: string): number {
  const v = c[key];
  if (!Number.isInteger(v) || v <= 0)
    throw new CheckpointError(`config.json: ${key} must be a positive integer (got ${JSON.stringify(v)})`);
  return v;
}

function activation(name: string): Activation {
  if (name === 'silu' || name === 'swish') return 'silu';
  if (name === 'gelu_new' || name === 'gelu_pytorch_tanh' || name === 'gelu_fast') return 'gelu_tanh';
  if (name === 'gelu') return 'gelu';
  throw new CheckpointError(`config.json: activation ${name} is not supported (silu, gelu, gelu_new, gelu_pytorch_tanh)`);
}

/** Rotary frequencies as transformers computes them, with `rope_scaling` applied. */
export function ropeFrequencies(c: RawConfig, headDim: number): RopeSpec {
  const theta: number = c.rope_theta ?? 10000;
  const rotaryDim = Math.round(headDim * (c.partial_rotary_factor ?? 1));
  if (rotaryDim !== headDim) throw new CheckpointError('config.json: partial_rotary_factor < 1 is not supported yet');
  const half = rotaryDim / 2;
  const base = Array.from({ length: half }, (_, i) => 1 / theta ** ((2 * i) / rotaryDim));
  const scaling = c.rope_scaling ?? null;
  const type: string = scaling ? (scaling.rope_type ?? scaling.type ?? 'default') : 'default';
  let freqs = base;
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
    throw new CheckpointError(`config.json: rope_scaling type ${type} is not supported (default, linear, llama3)`);
  }
  return { theta, invFreq: Float32Array.from(freqs) };
}

/** Read `config.json` of a checkpoint directory into the shape the graph builder uses. */
export function readModelConfig(dir: string): ModelConfig {
  const file = path.join(dir, 'config.json');
  if (!fs.existsSync(file)) throw new CheckpointError(`${dir}: no config.json`);
  const raw: RawConfig = JSON.parse(fs.readFileSync(file, 'utf8'));
  const modelType: string = raw.model_type;
  const spec = FAMILIES.find((f) => f.modelTypes.includes(modelType));
  if (!spec) {
    const known = FAMILIES.flatMap((f) => f.modelTypes).join(', ');
    throw new CheckpointError(`${file}: model_type ${JSON.stringify(modelType)} is not supported (supported: ${known})`);
  }
  const dims = spec.dims(raw);
  if (dims.numHeads % dims.numKvHeads !== 0) {
    throw new CheckpointError(`${file}: num_attention_heads ${dims.numHeads} is not a multiple of num_key_value_heads ${dims.numKvHeads}`);
  }
  return {
    ...dims,
    modelType,
    spec,
    rope: spec.positions === 'rope' ? ropeFrequencies(raw, dims.headDim) : undefined,
    bosTokenId: typeof raw.bos_token_id === 'number' ? raw.bos_token_id : undefined,
    eosTokenId: typeof raw.eos_token_id === 'number' ? raw.eos_token_id : Array.isArray(raw.eos_token_id) ? raw.eos_token_id[0] : undefined,
  };
}
