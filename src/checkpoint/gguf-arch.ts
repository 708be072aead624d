// A GGUF file's architecture as a Hugging Face checkpoint: llama.cpp's metadata keys read
// into the config.json keys each family's spec reads (model/families.ts), and llama.cpp's
// tensor names mapped to the Hugging Face names the decoder asks for, with what the
// converter did to the bytes on the way (convert_hf_to_gguf.py): q/k rows permuted for
// llama-type rotary, Gemma's norm weights stored as 1 + w, GPT-2's Conv1D weights
// transposed, experts stacked into one tensor per projection. Defaults are llama.cpp's
// (src/llama-model.cpp load_hparams), not the config classes': what llama.cpp computes
// for a file is what it means.
import { CheckpointError } from '../common/errors.js';
import { DIM_CAPS } from '../common/dim-caps.js';
import { GgufMeta } from './gguf-meta.js';
import { readF32Tensor, type GgufFile } from './gguf.js';

/** Where a Hugging Face tensor's bytes lie in the file. */
export interface TensorRef {
  /** The GGUF tensor. */
  tensor: string;
  /** One expert's slice of a stacked [experts, out, in] tensor. */
  expert?: { index: number; of: number };
  /** Rows permuted by llama.cpp's converter (LlamaModel.permute) within each of this many heads. */
  permutedHeads?: number;
}

export interface GgufModel {
  arch: string;
  /** config.json, in the family's own key names. */
  config: Record<string, unknown>;
  /** The GGUF key each config key came from (for refusals). */
  sources: Record<string, string>;
  /** Norm weights are stored as 1 + w (Gemma): computed as plain RMSNorm weights. */
  normWeightsPlusOne: boolean;
  /** Linear weights are stored [out, in] whatever the family's checkpoints do (GPT-2). */
  linearOutIn: boolean;
  /** Hugging Face tensor name → its bytes. */
  names: Map<string, TensorRef>;
  /** llama.cpp's rope_freqs.weight (Llama 3's rope scaling): each frequency divided by its factor. */
  ropeFreqFactors?: Float32Array;
}

type Pairs = [gguf: string, hf: string][];
const PROJECTIONS: Pairs = [
  ['attn_q', 'self_attn.q_proj'],
  ['attn_k', 'self_attn.k_proj'],
  ['attn_v', 'self_attn.v_proj'],
  ['attn_output', 'self_attn.o_proj'],
  ['attn_q_norm', 'self_attn.q_norm'],
  ['attn_k_norm', 'self_attn.k_norm'],
];
const GATED: Pairs = [
  ['ffn_gate', 'mlp.gate_proj'],
  ['ffn_up', 'mlp.up_proj'],
  ['ffn_down', 'mlp.down_proj'],
];
const LLAMA_LAYER: Pairs = [['attn_norm', 'input_layernorm'], ...PROJECTIONS, ['ffn_norm', 'post_attention_layernorm'], ...GATED];
const GEMMA_LAYER: Pairs = [
  ['attn_norm', 'input_layernorm'],
  ...PROJECTIONS,
  ['post_attention_norm', 'post_attention_layernorm'],
  ['ffn_norm', 'pre_feedforward_layernorm'],
  ['post_ffw_norm', 'post_feedforward_layernorm'],
  ...GATED,
];
const HF_TOP: Pairs = [
  ['token_embd', 'model.embed_tokens'],
  ['output_norm', 'model.norm'],
  ['output', 'lm_head'],
];

interface Arch {
  modelType: (m: GgufMeta, arch: string) => string;
  layer: Pairs;
  top: Pairs;
  layerPrefix: string;
  /** Stacked experts: GGUF projection → Hugging Face expert prefix and name. */
  experts?: { router: string; prefix: string; gate: string; up: string; down: string };
  permuteQK?: boolean;
  normWeightsPlusOne?: boolean;
  linearOutIn?: boolean;
  /** Family keys beyond the common ones. */
  config: (m: GgufMeta, arch: string, c: ConfigBuilder) => void;
}

const ARCHS: Record<string, Arch> = {
  // Llama, Mistral (llama.cpp writes it as `llama`) and Mixtral (`llama` with experts).
  llama: {
    // A window makes it Mistral (llama.cpp's converter writes none for Mistral, and llama.cpp
    // reads none for `llama`; a file that states one gets it, as transformers' Mistral),
    // unless the file has biases, which Mistral never reads.
    modelType: (m, a) =>
      (m.int(`${a}.expert_count`) ?? 0) > 0
        ? 'mixtral'
        : (m.int(`${a}.attention.sliding_window`) ?? 0) > 0 && !m.g.tensors.has('blk.0.attn_q.bias')
          ? 'mistral'
          : 'llama',
    layer: LLAMA_LAYER,
    top: HF_TOP,
    layerPrefix: 'model.layers.',
    experts: { router: 'block_sparse_moe.gate', prefix: 'block_sparse_moe.experts', gate: 'w1', up: 'w3', down: 'w2' },
    permuteQK: true,
    config: (m, a, c) => {
      if (c.raw.model_type !== 'llama') c.window(`${a}.attention.sliding_window`);
      c.experts(a, 'num_local_experts');
    },
  },
  qwen2: { modelType: () => 'qwen2', layer: LLAMA_LAYER, top: HF_TOP, layerPrefix: 'model.layers.', config: () => {} },
  qwen3: { modelType: () => 'qwen3', layer: LLAMA_LAYER, top: HF_TOP, layerPrefix: 'model.layers.', config: () => {} },
  qwen3moe: {
    modelType: () => 'qwen3_moe',
    layer: LLAMA_LAYER,
    top: HF_TOP,
    layerPrefix: 'model.layers.',
    experts: { router: 'mlp.gate', prefix: 'mlp.experts', gate: 'gate_proj', up: 'up_proj', down: 'down_proj' },
    config: (m, a, c) => {
      c.experts(a, 'num_experts');
      // llama.cpp's qwen3moe: every layer sparse, its top experts always renormalised; the
      // expert width defaults to feed_forward_length / experts used.
      const used = m.int(`${a}.expert_used_count`) ?? 1;
      c.set(
        'moe_intermediate_size',
        m.int(`${a}.expert_feed_forward_length`) ?? Math.floor(Number(c.raw.intermediate_size) / used),
        `${a}.expert_feed_forward_length`,
      );
      c.set('norm_topk_prob', m.bool(`${a}.expert_weights_norm`) ?? true, `${a}.expert_weights_norm`);
      c.set('mlp_only_layers', [], `${a}.block_count`);
      c.set('decoder_sparse_step', 1, `${a}.block_count`);
    },
  },
  olmo2: {
    modelType: () => 'olmo2',
    layer: [...PROJECTIONS, ['post_attention_norm', 'post_attention_layernorm'], ['post_ffw_norm', 'post_feedforward_layernorm'], ...GATED],
    top: HF_TOP,
    layerPrefix: 'model.layers.',
    config: (m, a) => {
      if (m.has(`${a}.attention.sliding_window`))
        throw new CheckpointError(`${m.file}: ${a}.attention.sliding_window is set: OLMo 3's sliding windows are not supported`);
    },
  },
  phi3: {
    modelType: () => 'phi3',
    layer: [
      ['attn_norm', 'input_layernorm'],
      ['attn_qkv', 'self_attn.qkv_proj'],
      ['attn_output', 'self_attn.o_proj'],
      ['ffn_norm', 'post_attention_layernorm'],
      ['ffn_up', 'mlp.gate_up_proj'],
      ['ffn_down', 'mlp.down_proj'],
    ],
    top: HF_TOP,
    layerPrefix: 'model.layers.',
    // The window as transformers applies it (llama.cpp disables Phi-3's for now); 0: none.
    config: (m, a, c) => c.window(`${a}.attention.sliding_window`),
  },
  gemma2: {
    modelType: () => 'gemma2',
    layer: GEMMA_LAYER,
    top: HF_TOP,
    layerPrefix: 'model.layers.',
    normWeightsPlusOne: true,
    config: (m, a, c) => {
      // llama.cpp's defaults: caps 50 and 30, a window of 4096 on every other layer.
      c.set('attn_logit_softcapping', m.number(`${a}.attn_logit_softcapping`) ?? 50, `${a}.attn_logit_softcapping`);
      c.set('final_logit_softcapping', m.number(`${a}.final_logit_softcapping`) ?? 30, `${a}.final_logit_softcapping`);
      c.set('sliding_window', m.int(`${a}.attention.sliding_window`) ?? 4096, `${a}.attention.sliding_window`);
      c.swaPattern(`${a}.attention.sliding_window_pattern`);
      c.gemmaScale(46);
    },
  },
  gemma3: {
    modelType: () => 'gemma3_text',
    layer: GEMMA_LAYER,
    top: HF_TOP,
    layerPrefix: 'model.layers.',
    normWeightsPlusOne: true,
    config: (m, a, c) => {
      c.set('final_logit_softcapping', m.number(`${a}.final_logit_softcapping`) ?? null, `${a}.final_logit_softcapping`);
      // No window key: no window (Gemma3TextConfig's default of 4096 is not llama.cpp's).
      const w = m.int(`${a}.attention.sliding_window`);
      c.set('sliding_window', w !== undefined && w > 0 ? w : null, `${a}.attention.sliding_window`);
      c.set('rope_local_base_freq', m.number(`${a}.rope.freq_base_swa`) ?? 10000, `${a}.rope.freq_base_swa`);
      c.swaPattern(`${a}.attention.sliding_window_pattern`);
      c.gemmaScale(62);
    },
  },
  gpt2: {
    modelType: () => 'gpt2',
    layer: [
      ['attn_norm', 'ln_1'],
      ['attn_qkv', 'attn.c_attn'],
      ['attn_output', 'attn.c_proj'],
      ['ffn_norm', 'ln_2'],
      ['ffn_up', 'mlp.c_fc'],
      ['ffn_down', 'mlp.c_proj'],
    ],
    top: [
      ['token_embd', 'transformer.wte'],
      ['position_embd', 'transformer.wpe'],
      ['output_norm', 'transformer.ln_f'],
      ['output', 'lm_head'],
    ],
    layerPrefix: 'transformer.h.',
    linearOutIn: true,
    config: () => {},
  },
};

/** The config.json keys of each family's spec (families.ts `keys`), by model_type. */
const KEYS: Record<string, Record<'hidden' | 'layers' | 'heads' | 'intermediate' | 'maxPositions' | 'normEps', string>> = {
  default: {
    hidden: 'hidden_size',
    layers: 'num_hidden_layers',
    heads: 'num_attention_heads',
    intermediate: 'intermediate_size',
    maxPositions: 'max_position_embeddings',
    normEps: 'rms_norm_eps',
  },
  gpt2: {
    hidden: 'n_embd',
    layers: 'n_layer',
    heads: 'n_head',
    intermediate: 'n_inner',
    maxPositions: 'n_positions',
    normEps: 'layer_norm_epsilon',
  },
};

/** The architectures ctxprobe reads. */
export const GGUF_ARCHITECTURES = Object.keys(ARCHS);

class ConfigBuilder {
  readonly raw: Record<string, unknown> = {};
  readonly sources: Record<string, string> = {};

  constructor(private readonly m: GgufMeta) {}

  /** `key` from `source` (an absent value leaves the key out, and names its source in a refusal). */
  set(key: string, value: unknown, source: string): void {
    this.sources[key] = source;
    if (value !== undefined) this.raw[key] = value;
  }

  /** A window size where the key is set and positive (0: none, as llama.cpp writes Phi-3 without one). */
  window(key: string): void {
    const w = this.m.int(key);
    if (w !== undefined) this.set('sliding_window', w > 0 ? w : null, key);
  }

  /** The experts the file declares (`expert_count`; none when absent or 0): what the
   * stacked expert tensors must hold. */
  expertCount?: { n: number; key: string };

  experts(arch: string, countKey: string): void {
    const key = `${arch}.expert_count`;
    const n = this.m.int(key);
    if (n === undefined || n === 0) return;
    // Checked here, before the tensor names are made one per expert.
    if (!Number.isSafeInteger(n) || n < 0 || n > DIM_CAPS.experts)
      throw new CheckpointError(`${this.m.file}: ${key} (${countKey}) is ${n}, more than the ${DIM_CAPS.experts} experts any model has`);
    this.expertCount = { n, key };
    this.set(countKey, n, key);
    this.set('num_experts_per_tok', this.m.int(`${arch}.expert_used_count`), `${arch}.expert_used_count`);
  }

  /** Which layers slide: llama.cpp's `sliding_window_pattern`, a bool per layer or a period. */
  swaPattern(key: string): void {
    if (!this.m.has(key)) return;
    const flags = this.m.g.metadata.get(key)!.type === 9 ? this.m.bools(key)! : undefined;
    if (flags)
      this.set(
        'layer_types',
        flags.map((f) => (f ? 'sliding_attention' : 'full_attention')),
        key,
      );
    else this.set('sliding_window_pattern', this.m.int(key), key);
  }

  /** Gemma's query scale: 1/√head_dim, but 1/√(hidden/heads) for the 27B models, as
   * llama.cpp tells them by their layer count (gemma_pytorch's config). */
  gemmaScale(layers27b: number): void {
    const [hidden, heads, headDim, layers] = ['hidden_size', 'num_attention_heads', 'head_dim', 'num_hidden_layers'].map((k) =>
      Number(this.raw[k]),
    );
    this.set('query_pre_attn_scalar', layers === layers27b ? hidden! / heads! : headDim, this.sources.head_dim ?? 'attention.key_length');
  }
}

/** Read `g`'s architecture: its config and where each Hugging Face tensor lies. */
export function ggufModel(g: GgufFile): GgufModel {
  const m = new GgufMeta(g);
  const arch = m.string('general.architecture');
  if (arch === undefined) throw new CheckpointError(`${g.file}: no general.architecture`);
  const spec = ARCHS[arch];
  if (!spec)
    throw new CheckpointError(
      `${g.file}: general.architecture ${JSON.stringify(arch.slice(0, 80))} is not supported (supported: ${GGUF_ARCHITECTURES.join(', ')})`,
    );
  if ((m.int('split.count') ?? 1) > 1)
    throw new CheckpointError(
      `${g.file}: split.count is ${m.int('split.count')}: a split GGUF; merge its parts into one file first (llama-gguf-split --merge)`,
    );
  const modelType = spec.modelType(m, arch);
  const c = new ConfigBuilder(m);
  commonConfig(m, g, arch, modelType, c);
  spec.config(m, arch, c);
  const names = tensorNames(g, arch, spec, c);
  return {
    arch,
    config: c.raw,
    sources: c.sources,
    normWeightsPlusOne: spec.normWeightsPlusOne ?? false,
    linearOutIn: spec.linearOutIn ?? false,
    names,
    ropeFreqFactors: g.tensors.has('rope_freqs.weight') ? readF32Tensor(g, 'rope_freqs.weight') : undefined,
  };
}

/** The keys every architecture has: sizes, norms, rotary, vocabulary and special ids. */
function commonConfig(m: GgufMeta, g: GgufFile, a: string, modelType: string, c: ConfigBuilder): void {
  const k = KEYS[modelType] ?? KEYS.default!;
  c.set('model_type', modelType, 'general.architecture');
  const layers = m.int(`${a}.block_count`);
  c.set(k.layers, layers, `${a}.block_count`);
  c.set(k.hidden, m.int(`${a}.embedding_length`), `${a}.embedding_length`);
  c.set(k.maxPositions, m.int(`${a}.context_length`), `${a}.context_length`);
  c.set(k.intermediate, m.perLayer(`${a}.feed_forward_length`, layers ?? 0), `${a}.feed_forward_length`);
  const heads = m.perLayer(`${a}.attention.head_count`, layers ?? 0);
  c.set(k.heads, heads, `${a}.attention.head_count`);
  if (modelType !== 'gpt2')
    c.set('num_key_value_heads', m.perLayer(`${a}.attention.head_count_kv`, layers ?? 0, heads), `${a}.attention.head_count_kv`);
  else if ((m.perLayer(`${a}.attention.head_count_kv`, layers ?? 0, heads) ?? heads) !== heads)
    throw new CheckpointError(`${g.file}: ${a}.attention.head_count_kv must equal ${a}.attention.head_count for gpt2`);
  // llama.cpp's head sizes: key_length and value_length, each embedding_length / head_count
  // when absent (whatever the family's config class would default to); one size for both.
  const hidden = Number(c.raw[k.hidden]);
  const even = heads && Number.isInteger(hidden / heads) ? hidden / heads : undefined;
  const headDim = m.int(`${a}.attention.key_length`) ?? even;
  const valueLength = m.int(`${a}.attention.value_length`) ?? even;
  if (valueLength !== headDim)
    throw new CheckpointError(
      `${g.file}: ${a}.attention.value_length ${valueLength} differs from key_length ${headDim}, which is not supported`,
    );
  if (modelType !== 'gpt2') c.set('head_dim', headDim, `${a}.attention.key_length`);
  c.set(
    k.normEps,
    m.number(`${a}.attention.layer_norm_${modelType === 'gpt2' ? 'epsilon' : 'rms_epsilon'}`),
    `${a}.attention.layer_norm_${modelType === 'gpt2' ? 'epsilon' : 'rms_epsilon'}`,
  );
  if (modelType !== 'gpt2') rotaryConfig(m, g, a, modelType, headDim, c);
  c.set('vocab_size', g.tensors.get('token_embd.weight')?.dims[1], 'token_embd.weight');
  c.set('tie_word_embeddings', !g.tensors.has('output.weight'), 'output.weight');
  const biased = g.tensors.has('blk.0.attn_q.bias') || g.tensors.has('blk.0.attn_qkv.bias');
  if (biased) c.set('attention_bias', true, 'blk.0.attn_q.bias');
  if (g.tensors.has('blk.0.ffn_gate.bias') || g.tensors.has('blk.0.ffn_up.bias')) c.set('mlp_bias', true, 'blk.0.ffn_up.bias');
  c.set('torch_dtype', storedDtype(m, g), 'general.file_type');
  specialIds(m, c);
}

/** rope_theta (llama.cpp's default 10000 whatever the family's), linear scaling, the
 * rotated dimensions, and Phi-3's longrope factors. */
function rotaryConfig(m: GgufMeta, g: GgufFile, a: string, modelType: string, headDim: number | undefined, c: ConfigBuilder): void {
  c.set('rope_theta', m.number(`${a}.rope.freq_base`) ?? 10000, `${a}.rope.freq_base`);
  const type = m.string(`${a}.rope.scaling.type`);
  const factor = m.number(`${a}.rope.scaling.factor`) ?? m.number(`${a}.rope.scale_linear`);
  const dims = m.int(`${a}.rope.dimension_count`);
  if (dims !== undefined && headDim !== undefined && dims !== headDim)
    c.set('partial_rotary_factor', dims / headDim, `${a}.rope.dimension_count`);
  const longFactors = g.tensors.has('rope_factors_long.weight');
  if (modelType === 'phi3' && longFactors) {
    const original = m.int(`${a}.rope.scaling.original_context_length`);
    c.set('original_max_position_embeddings', original, `${a}.rope.scaling.original_context_length`);
    const scaling: Record<string, unknown> = {
      type: 'longrope',
      long_factor: Array.from(readF32Tensor(g, 'rope_factors_long.weight')),
      short_factor: Array.from(readF32Tensor(g, 'rope_factors_short.weight')),
    };
    // The converter stores longrope's default attention factor as float32: the default is
    // left to the config reader (as transformers computes it), another value is kept.
    const attn = m.number(`${a}.rope.scaling.attn_factor`);
    const max = Number(c.raw.max_position_embeddings);
    const scale = max / (original ?? max);
    const defaultFactor = scale > 1 ? Math.sqrt(1 + Math.log(scale) / Math.log(original!)) : 1;
    if (attn !== undefined && attn !== Math.fround(defaultFactor)) scaling.attention_factor = attn;
    c.set('rope_scaling', scaling, `${a}.rope.scaling.*, rope_factors_long.weight`);
    return;
  }
  if (type === undefined || type === 'linear') {
    if (factor !== undefined && factor !== 0 && factor !== 1)
      c.set('rope_scaling', { rope_type: 'linear', factor }, `${a}.rope.scaling.factor`);
  } else if (type !== 'none') {
    throw new CheckpointError(
      `${g.file}: ${a}.rope.scaling.type ${JSON.stringify(type.slice(0, 40))} is not supported (none, linear${modelType === 'phi3' ? ', longrope' : ''})`,
    );
  }
}

/** Control tokens llama.cpp ends generation at by their text (llama-vocab.cpp). */
const EOG_TEXTS = new Set([
  '<|eot_id|>',
  '<|im_end|>',
  '<|end|>',
  '<end_of_turn>',
  '<|endoftext|>',
  '<|eom_id|>',
  '<EOT>',
  '_<EOT>',
  '<|end_of_text|>',
  '<end_of_utterance>',
]);

/** bos/eos/pad ids (a SentencePiece vocabulary's defaults are llama.cpp's: 1, 2); the end
 * of a generation is also each id llama.cpp ends it at: eot, eom, and control tokens it
 * knows by their text (eos first, as config.json lists several). */
function specialIds(m: GgufMeta, c: ConfigBuilder): void {
  const spm = m.string('tokenizer.ggml.model') === 'llama';
  c.set('bos_token_id', m.tokenId('tokenizer.ggml.bos_token_id', spm ? 1 : undefined), 'tokenizer.ggml.bos_token_id');
  const eos = m.tokenId('tokenizer.ggml.eos_token_id', spm ? 2 : undefined);
  const tokens = m.strings('tokenizer.ggml.tokens') ?? [];
  const types = m.numbers('tokenizer.ggml.token_type') ?? [];
  const byText = tokens.flatMap((t, id) => (types[id] === 3 && EOG_TEXTS.has(t) ? [id] : []));
  const ends = [...new Set([eos, m.tokenId('tokenizer.ggml.eot_token_id'), m.tokenId('tokenizer.ggml.eom_token_id'), ...byText])].filter(
    (id): id is number => id !== undefined,
  );
  c.set('eos_token_id', ends.length > 1 && eos !== undefined ? ends : eos, 'tokenizer.ggml.eos_token_id');
  c.set('pad_token_id', m.tokenId('tokenizer.ggml.padding_token_id'), 'tokenizer.ggml.padding_token_id');
}

/** The weights' dtype: general.file_type's, else the embedding's. */
function storedDtype(m: GgufMeta, g: GgufFile): string | undefined {
  const byType: Record<number, string> = { 0: 'float32', 1: 'float16', 30: 'bfloat16' };
  const fileType = m.int('general.file_type');
  const byFile: Record<number, string> = { 0: 'float32', 1: 'float16', 32: 'bfloat16' };
  return (fileType !== undefined ? byFile[fileType] : undefined) ?? byType[g.tensors.get('token_embd.weight')?.type ?? -1];
}

/** Every GGUF tensor mapped to the Hugging Face name(s) it holds; a tensor the
 * architecture does not have is refused by name (llama.cpp refuses it too). */
function tensorNames(g: GgufFile, arch: string, spec: Arch, c: ConfigBuilder): Map<string, TensorRef> {
  const names = new Map<string, TensorRef>();
  const heads = Number(c.raw.num_attention_heads);
  const kvHeads = Number(c.raw.num_key_value_heads ?? heads);
  const extra = new Set(['rope_freqs.weight', 'rope_factors_long.weight', 'rope_factors_short.weight']);
  const unknown: string[] = [];
  for (const [tensor, info] of g.tensors) {
    if (extra.has(tensor)) continue;
    const top = /^([a-z_]+)\.(weight|bias)$/.exec(tensor);
    const hfTop = top && spec.top.find(([gg]) => gg === top[1])?.[1];
    if (hfTop) {
      names.set(`${hfTop}.${top[2]}`, { tensor });
      continue;
    }
    const layer = /^blk\.(\d+)\.([a-z_0-9]+)\.(weight|bias)$/.exec(tensor);
    if (!layer) {
      unknown.push(tensor);
      continue;
    }
    const [, l, part, what] = layer as unknown as [string, string, string, string];
    const prefix = `${spec.layerPrefix}${Number(l)}.`;
    const hf = spec.layer.find(([gg]) => gg === part)?.[1];
    if (hf) {
      const permuted = spec.permuteQK && (part === 'attn_q' || part === 'attn_k') ? (part === 'attn_q' ? heads : kvHeads) : undefined;
      names.set(`${prefix}${hf}.${what}`, { tensor, ...(permuted !== undefined && { permutedHeads: permuted }) });
    } else if (spec.experts && c.expertCount && part === 'ffn_gate_inp') {
      names.set(`${prefix}${spec.experts.router}.${what}`, { tensor });
    } else if (spec.experts && c.expertCount && /^ffn_(gate|up|down)_exps$/.test(part)) {
      // One name per expert, so the stack must hold the experts the file declares (capped):
      // a stack that declares 2^40 of them named nothing until the heap ran out.
      const { n: of, key } = c.expertCount;
      if (info.dims.length !== 3 || info.dims[2] !== of)
        throw new CheckpointError(
          `${g.file}: tensor ${tensor} has dims [${info.dims}], not [in, out, ${of}] for the ${of} experts of ${key}`,
        );
      const ex = spec.experts;
      const which = part === 'ffn_gate_exps' ? ex.gate : part === 'ffn_up_exps' ? ex.up : ex.down;
      for (let e = 0; e < of; e++) names.set(`${prefix}${ex.prefix}.${e}.${which}.${what}`, { tensor, expert: { index: e, of } });
    } else if (/^ffn_(gate|up|down)_exps$|^ffn_gate_inp$/.test(part)) {
      // A dense model's file with an expert tensor (llama.cpp refuses a tensor it does not read).
      const declares = spec.experts ? `${arch}.expert_count is absent or 0` : `a ${arch} model has no experts`;
      throw new CheckpointError(`${g.file}: tensor ${tensor} is an expert tensor, but the file declares no experts (${declares})`);
    } else unknown.push(tensor);
  }
  if (unknown.length > 0)
    throw new CheckpointError(
      `${g.file}: tensor${unknown.length > 1 ? 's' : ''} ${unknown.slice(0, 3).join(', ')}${unknown.length > 3 ? ` and ${unknown.length - 3} more` : ''} ${unknown.length > 1 ? 'are' : 'is'} not part of a ${c.raw.model_type} model as llama.cpp writes it`,
    );
  return names;
}
