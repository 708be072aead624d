// A plain reference forward pass in float64 loops, written from the Hugging Face model
// code (LlamaModel / MistralModel / Qwen2Model / Qwen3Model / Phi3Model / Olmo2Model /
// Gemma2Model / Gemma3TextModel / MixtralModel / Qwen3MoeModel / GPT2Model), independent of the graph builder: it reads config.json keys
// and HF tensor names itself.
import type { TensorData } from '../src/checkpoint/safetensors.js';

type Tensors = Map<string, TensorData>;
type Vec = Float64Array;

export interface ReferenceModel {
  config: Record<string, any>;
  tensors: Tensors;
}

export interface ReferenceOutput {
  /** Log-softmax rows, one per input position: logprobs[t][v] = log p(v | tokens[..t]). */
  logprobs: Vec[];
  /** attention[l][h][t][j]: probability from query t to key j (0 for j > t). */
  attention: number[][][][];
}

function get(m: ReferenceModel, name: string): TensorData {
  const t = m.tensors.get(name);
  if (!t) throw new Error(`reference: no tensor ${name}`);
  return t;
}

/** y = W x (+ b) with W stored [out, in] (nn.Linear) or [in, out] (GPT-2 Conv1D). */
function linear(x: Vec, w: TensorData, b: TensorData | undefined, layout: 'out_in' | 'in_out'): Vec {
  const [d0, d1] = w.shape as [number, number];
  const out = layout === 'out_in' ? d0 : d1;
  const inF = layout === 'out_in' ? d1 : d0;
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = b ? b.data[o]! : 0;
    for (let i = 0; i < inF; i++) s += x[i]! * (layout === 'out_in' ? w.data[o * inF + i]! : w.data[i * out + o]!);
    y[o] = s;
  }
  return y;
}

/** RMSNorm; Gemma's scales by (1 + w) (Gemma2RMSNorm). */
function rmsNorm(x: Vec, w: TensorData, eps: number, offset = 0): Vec {
  let ms = 0;
  for (const v of x) ms += v * v;
  const r = 1 / Math.sqrt(ms / x.length + eps);
  return x.map((v, i) => v * r * (offset + w.data[i]!));
}

/** Gemma 2's soft-capping: cap · tanh(x / cap); a null cap is none. */
const softcap = (x: number, cap: number | null) => (cap === null ? x : cap * Math.tanh(x / cap));

function layerNorm(x: Vec, w: TensorData, b: TensorData, eps: number): Vec {
  const mean = x.reduce((a, v) => a + v, 0) / x.length;
  const variance = x.reduce((a, v) => a + (v - mean) ** 2, 0) / x.length;
  const r = 1 / Math.sqrt(variance + eps);
  return x.map((v, i) => (v - mean) * r * w.data[i]! + b.data[i]!);
}

function logSoftmax(x: Vec): Vec {
  const max = Math.max(...x);
  let sum = 0;
  for (const v of x) sum += Math.exp(v - max);
  const lse = max + Math.log(sum);
  return x.map((v) => v - lse);
}

function softmax(x: number[]): number[] {
  const max = Math.max(...x);
  const e = x.map((v) => Math.exp(v - max));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / s);
}

/** inv_freq of transformers' rope init functions (default, linear, llama3, longrope) over
 * `dim` rotary dimensions, for a forward pass over `seqLen` positions (longrope picks its
 * factors by it), and the factor cos/sin are multiplied by. */
export function referenceRope(config: Record<string, any>, dim: number, seqLen: number): { inv: number[]; factor: number } {
  const rs = config.rope_scaling;
  if (rs && (rs.rope_type ?? rs.type) === 'longrope') {
    // _compute_longrope_parameters + longrope_frequency_update (Phi-3).
    const original = config.original_max_position_embeddings ?? config.max_position_embeddings;
    const scale = config.original_max_position_embeddings ? config.max_position_embeddings / original : (rs.factor ?? 1);
    const factor = rs.attention_factor ?? (scale <= 1 ? 1 : Math.sqrt(1 + Math.log(scale) / Math.log(original)));
    const ext: number[] = seqLen > original ? rs.long_factor : rs.short_factor;
    const theta = config.rope_theta ?? 10000;
    return { inv: ext.map((f, i) => 1 / (f * Math.pow(theta, (2 * i) / dim))), factor };
  }
  return { inv: referenceInvFreq(config, dim), factor: 1 };
}

/** inv_freq of transformers' rope init functions (default, linear, llama3). */
export function referenceInvFreq(config: Record<string, any>, headDim: number): number[] {
  const theta = config.rope_theta ?? 10000;
  const inv: number[] = [];
  for (let i = 0; i < headDim; i += 2) inv.push(Math.pow(theta, -i / headDim));
  const rs = config.rope_scaling;
  if (!rs) return inv;
  const type = rs.rope_type ?? rs.type;
  if (type === 'linear') return inv.map((f) => f / rs.factor);
  if (type === 'llama3') {
    return inv.map((f) => {
      const wavelen = (2 * Math.PI) / f;
      const lowWavelen = rs.original_max_position_embeddings / rs.low_freq_factor;
      const highWavelen = rs.original_max_position_embeddings / rs.high_freq_factor;
      const scaled = wavelen > lowWavelen ? f / rs.factor : f;
      const smooth = (rs.original_max_position_embeddings / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
      const isMedium = !(wavelen < highWavelen) && !(wavelen > lowWavelen);
      return isMedium ? (1 - smooth) * (scaled / rs.factor) + smooth * scaled : scaled;
    });
  }
  throw new Error(`reference: rope type ${type}`);
}

/** Mistral, Phi-3 and Mixtral window every layer: key j is visible from query t iff t - j < window.
 * (Gemma 2 windows some layers only: see `referenceLayerWindow`; this is the window every
 * layer shares, if any.) */
export function referenceWindow(config: Record<string, any>): number | undefined {
  return ['mistral', 'phi3', 'mixtral'].includes(config.model_type) ? (config.sliding_window ?? undefined) : undefined;
}

/** The window of layer `l`: Gemma 2's `layer_types`, by default "sliding_attention" when
 * (l + 1) % 2 (Gemma2Config.__post_init__), window `sliding_window` (default 4096). */
export function referenceLayerWindow(config: Record<string, any>, l: number): number | undefined {
  // Qwen3MoeConfig: only with use_sliding_window, then every layer.
  if (config.model_type === 'qwen3_moe')
    return config.use_sliding_window === true ? (config.sliding_window === undefined ? 4096 : (config.sliding_window ?? undefined)) : undefined;
  // Qwen2Config / Qwen3Config: sliding_window only with use_sliding_window; layer_types, else
  // the layers from max_window_layers (default 28) on.
  if (['qwen2', 'qwen3'].includes(config.model_type)) {
    if (config.use_sliding_window !== true) return undefined;
    const sliding = config.layer_types ? config.layer_types[l] === 'sliding_attention' : l >= (config.max_window_layers ?? 28);
    return sliding ? (config.sliding_window === undefined ? 4096 : (config.sliding_window ?? undefined)) : undefined;
  }
  if (!referenceSliding(config, l)) return config.model_type.startsWith('gemma') ? undefined : referenceWindow(config);
  const window = config.sliding_window === undefined ? 4096 : config.sliding_window;
  return window ?? undefined;
}

/** Mixtral: every layer sparse; Qwen3-MoE: unless in mlp_only_layers, and only every
 * decoder_sparse_step-th layer. */
function referenceSparse(config: Record<string, any>, l: number): boolean {
  if (config.model_type === 'mixtral') return true;
  if (config.model_type !== 'qwen3_moe') return false;
  return !(config.mlp_only_layers ?? []).includes(l) && (l + 1) % (config.decoder_sparse_step ?? 1) === 0;
}

/** Gemma 2/3: whether layer l is a sliding layer (`layer_types`, else Gemma2Config's every
 * other layer, Gemma3TextConfig's all but each sliding_window_pattern-th, default 6). */
function referenceSliding(config: Record<string, any>, l: number): boolean {
  if (!config.model_type.startsWith('gemma')) return false;
  if (config.layer_types) return config.layer_types[l] === 'sliding_attention';
  const pattern = config.model_type === 'gemma2' ? 2 : (config.sliding_window_pattern ?? 6);
  return (l + 1) % pattern !== 0;
}

/** Chunks knocked out of attention: query t at or after a range's end gets zero weight on
 * its keys, the rest of its row renormalised (attribution's `mask`). */
export interface ReferenceKnockout {
  hidden?: { start: number; end: number }[];
}

export function referenceForward(m: ReferenceModel, tokens: number[], knockout: ReferenceKnockout = {}): ReferenceOutput {
  const c = m.config;
  const gpt2 = c.model_type === 'gpt2';
  const hidden: number = gpt2 ? c.n_embd : c.hidden_size;
  const nLayers: number = gpt2 ? c.n_layer : c.num_hidden_layers;
  const nHeads: number = gpt2 ? c.n_head : c.num_attention_heads;
  const nKv: number = gpt2 ? nHeads : (c.num_key_value_heads ?? nHeads);
  const gemma3 = c.model_type === 'gemma3_text';
  // Gemma 2 and 3 share the sandwich layout, (1 + w) norms, scaled embeddings, gelu.
  const gemma2 = c.model_type === 'gemma2' || gemma3;
  const D: number = c.head_dim ?? (c.model_type === 'qwen3' ? 128 : gemma2 ? 256 : hidden / nHeads);
  const olmo2 = c.model_type === 'olmo2';
  const mixtral = c.model_type === 'mixtral';
  const qwen3 = c.model_type === 'qwen3' || c.model_type === 'qwen3_moe';
  const eps: number = gpt2 ? c.layer_norm_epsilon : c.rms_norm_eps;
  // Gemma2RMSNorm: x̂ · (1 + w).
  const norm = (x: Vec, name: string) => rmsNorm(x, get(m, name), eps, gemma2 ? 1 : 0);
  // Gemma2Attention: scaling = query_pre_attn_scalar^-0.5; soft-caps (defaults 50 and 30;
  // null is none).
  const scaling = gemma2 ? (c.query_pre_attn_scalar ?? 256) ** -0.5 : 1 / Math.sqrt(D);
  // Gemma3Attention passes no cap at all; Gemma3TextConfig's final cap defaults to none.
  const attnCap: number | null = gemma3 ? null : gemma2 ? (c.attn_logit_softcapping === undefined ? 50 : c.attn_logit_softcapping) : null;
  const finalCap: number | null = gemma3
    ? (c.final_logit_softcapping ?? null)
    : gemma2
      ? c.final_logit_softcapping === undefined
        ? 30
        : c.final_logit_softcapping
      : null;
  const layout = gpt2 ? 'in_out' : 'out_in';
  const T = tokens.length;
  const embed = get(m, gpt2 ? 'transformer.wte.weight' : 'model.embed_tokens.weight');
  const row = (t: TensorData, r: number) => Float64Array.from(t.data.subarray(r * t.shape[1]!, (r + 1) * t.shape[1]!));

  let xs: Vec[] = tokens.map((tok, t) => {
    const e = row(embed, tok);
    if (gpt2) {
      const p = row(get(m, 'transformer.wpe.weight'), t);
      return e.map((v, i) => v + p[i]!);
    }
    // Gemma2Model: hidden_states * hidden_size ** 0.5.
    return gemma2 ? e.map((v) => v * Math.sqrt(hidden)) : e;
  });
  // Gemma 3: global layers rotate with rope_theta (default 1e6) and rope_scaling, sliding
  // layers with rope_local_base_freq (default 10000), unscaled.
  // Phi3: the first int(D · partial_rotary_factor) dimensions rotate, the rest pass.
  const R = Math.floor(D * (c.partial_rotary_factor ?? 1));
  const globalRope = gpt2 ? { inv: [], factor: 1 } : referenceRope(gemma3 ? { ...c, rope_theta: c.rope_theta ?? 1e6 } : c, R, T);
  const localRope = gemma3 ? { inv: referenceInvFreq({ rope_theta: c.rope_local_base_freq ?? 10000 }, D), factor: 1 } : globalRope;
  let inv = globalRope.inv;
  let cosSinFactor = globalRope.factor;
  const rope = (v: Vec, pos: number) => {
    const out = Float64Array.from(v);
    for (let i = 0; i < R / 2; i++) {
      const a = pos * inv[i]!;
      const [cs, sn] = [Math.cos(a) * cosSinFactor, Math.sin(a) * cosSinFactor];
      out[i] = v[i]! * cs - v[i + R / 2]! * sn;
      out[i + R / 2] = v[i + R / 2]! * cs + v[i]! * sn;
    }
    return out;
  };
  const attention: number[][][][] = [];
  for (let l = 0; l < nLayers; l++) {
    const p = gpt2 ? `transformer.h.${l}.` : `model.layers.${l}.`;
    const opt = (n: string) => m.tensors.get(n);
    // OLMo 2 has no norm before attention.
    const window = referenceLayerWindow(c, l);
    ({ inv, factor: cosSinFactor } = referenceSliding(c, l) ? localRope : globalRope);
    const hs = xs.map((x) =>
      gpt2 ? layerNorm(x, get(m, p + 'ln_1.weight'), get(m, p + 'ln_1.bias'), eps) : olmo2 ? x : norm(x, p + 'input_layernorm.weight'),
    );
    let qs: Vec[][], ks: Vec[][], vs: Vec[][];
    const heads = (v: Vec, n: number) => Array.from({ length: n }, (_, h) => v.slice(h * D, (h + 1) * D));
    if (gpt2) {
      const qkv = hs.map((h) => linear(h, get(m, p + 'attn.c_attn.weight'), get(m, p + 'attn.c_attn.bias'), 'in_out'));
      qs = qkv.map((v) => heads(v.slice(0, hidden), nHeads));
      ks = qkv.map((v) => heads(v.slice(hidden, 2 * hidden), nHeads));
      vs = qkv.map((v) => heads(v.slice(2 * hidden), nHeads));
    } else if (c.model_type === 'phi3') {
      // Phi3Attention: qkv_proj's output is [q (heads·D) | k (kv·D) | v (kv·D)].
      const qkv = hs.map((h) => linear(h, get(m, p + 'self_attn.qkv_proj.weight'), undefined, 'out_in'));
      qs = qkv.map((v, t) => heads(v.slice(0, nHeads * D), nHeads).map((x) => rope(x, t)));
      ks = qkv.map((v, t) => heads(v.slice(nHeads * D, (nHeads + nKv) * D), nKv).map((x) => rope(x, t)));
      vs = qkv.map((v) => heads(v.slice((nHeads + nKv) * D), nKv));
    } else {
      const proj = (name: string, n: number) =>
        hs.map((h, t) => {
          let full: Vec = linear(h, get(m, `${p}self_attn.${name}.weight`), opt(`${p}self_attn.${name}.bias`), 'out_in');
          if (name === 'v_proj') return heads(full, n);
          const normName = `${p}self_attn.${name[0]}_norm.weight`;
          // Olmo2Attention: q_norm / k_norm over the whole projection, before the heads split.
          if (olmo2) full = rmsNorm(full, get(m, normName), eps);
          let hd: Vec[] = heads(full, n);
          // Qwen3Attention, Gemma3Attention: q_norm / k_norm over each head, before rotary.
          if (qwen3 || gemma3) hd = hd.map((v) => rmsNorm(v, get(m, normName), eps, gemma3 ? 1 : 0));
          return hd.map((v) => rope(v, t));
        });
      qs = proj('q_proj', nHeads);
      ks = proj('k_proj', nKv);
      vs = proj('v_proj', nKv);
    }
    const layerAttn: number[][][] = [];
    const ctx: Vec[] = Array.from({ length: T }, () => new Float64Array(nHeads * D));
    for (let h = 0; h < nHeads; h++) {
      const kvh = Math.floor(h / (nHeads / nKv));
      const headAttn: number[][] = [];
      for (let t = 0; t < T; t++) {
        const allowed = (j: number) => j <= t && (window === undefined || t - j < window);
        const scores = Array.from({ length: T }, (_, j) => {
          if (!allowed(j)) return -Infinity;
          let s = 0;
          for (let d = 0; d < D; d++) s += qs[t]![h]![d]! * ks[j]![kvh]![d]!;
          return softcap(s * scaling, attnCap);
        });
        let probs = softmax(scores);
        const knocked = (j: number) => (knockout.hidden ?? []).some((r) => t >= r.end && j >= r.start && j < r.end);
        if (knockout.hidden?.length) {
          const zeroed = probs.map((p, j) => (knocked(j) ? 0 : p));
          const total = zeroed.reduce((a, b) => a + b, 0);
          probs = zeroed.map((p) => p / total);
        }
        headAttn.push(probs);
        for (let j = 0; j < T; j++) for (let d = 0; d < D; d++) ctx[t]![h * D + d]! += probs[j]! * vs[j]![kvh]![d]!;
      }
      layerAttn.push(headAttn);
    }
    attention.push(layerAttn);
    const o = gpt2 ? 'attn.c_proj' : 'self_attn.o_proj';
    xs = xs.map((x, t) => {
      let a = linear(ctx[t]!, get(m, `${p}${o}.weight`), opt(`${p}${o}.bias`), layout);
      // Olmo2DecoderLayer, Gemma2DecoderLayer: post_attention_layernorm normalises the
      // attention output.
      if (olmo2 || gemma2) a = norm(a, p + 'post_attention_layernorm.weight');
      return x.map((v, i) => v + a[i]!);
    });
    xs = xs.map((x) => {
      if (gpt2) {
        const h = layerNorm(x, get(m, p + 'ln_2.weight'), get(m, p + 'ln_2.bias'), eps);
        const f = linear(h, get(m, p + 'mlp.c_fc.weight'), get(m, p + 'mlp.c_fc.bias'), 'in_out').map(
          (u) => 0.5 * u * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (u + 0.044715 * u ** 3))),
        );
        const y = linear(f, get(m, p + 'mlp.c_proj.weight'), get(m, p + 'mlp.c_proj.bias'), 'in_out');
        return x.map((v, i) => v + y[i]!);
      }
      const h = olmo2 ? x : gemma2 ? norm(x, p + 'pre_feedforward_layernorm.weight') : norm(x, p + 'post_attention_layernorm.weight');
      let gate: Vec, up: Vec;
      if (c.model_type === 'phi3') {
        // Phi3MLP: gate, up = gate_up_proj(x).chunk(2): the gate is the first half.
        const both = linear(h, get(m, p + 'mlp.gate_up_proj.weight'), undefined, 'out_in');
        [gate, up] = [both.slice(0, both.length / 2), both.slice(both.length / 2)];
      } else if (referenceSparse(c, l)) {
        // MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock: softmax over every expert's router
        // logit, the top k, renormalised (Mixtral always, Qwen3-MoE with norm_topk_prob),
        // Σ weight · expert(h).
        const router = linear(h, get(m, p + (mixtral ? 'block_sparse_moe.gate.weight' : 'mlp.gate.weight')), undefined, 'out_in');
        const probs = softmax(Array.from(router));
        const k: number = c.num_experts_per_tok;
        const chosen = probs.map((_, e) => e).sort((a, b) => probs[b]! - probs[a]!).slice(0, k);
        const total = chosen.reduce((a, e) => a + probs[e]!, 0);
        const y = new Float64Array(hidden);
        for (const e of chosen) {
          const w = mixtral || c.norm_topk_prob ? probs[e]! / total : probs[e]!;
          const name = (part: string) => p + (mixtral ? `block_sparse_moe.experts.${e}.${part}` : `mlp.experts.${e}.${part}`) + '.weight';
          const eg = linear(h, get(m, name(mixtral ? 'w1' : 'gate_proj')), undefined, 'out_in');
          const eu = linear(h, get(m, name(mixtral ? 'w3' : 'up_proj')), undefined, 'out_in');
          const ey = linear(
            eg.map((g, i) => (g / (1 + Math.exp(-g))) * eu[i]!),
            get(m, name(mixtral ? 'w2' : 'down_proj')),
            undefined,
            'out_in',
          );
          ey.forEach((v, i) => (y[i]! += w * v));
        }
        return x.map((v, i) => v + y[i]!);
      } else {
        // LlamaMLP: biases when config.mlp_bias.
        gate = linear(h, get(m, p + 'mlp.gate_proj.weight'), opt(p + 'mlp.gate_proj.bias'), 'out_in');
        up = linear(h, get(m, p + 'mlp.up_proj.weight'), opt(p + 'mlp.up_proj.bias'), 'out_in');
      }
      // Gemma2MLP: gelu_pytorch_tanh; the others: silu.
      const act = (g: number) => (gemma2 ? 0.5 * g * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (g + 0.044715 * g ** 3))) : g / (1 + Math.exp(-g)));
      let y = linear(
        gate.map((g, i) => act(g) * up[i]!),
        get(m, p + 'mlp.down_proj.weight'),
        opt(p + 'mlp.down_proj.bias'),
        'out_in',
      );
      // Olmo2DecoderLayer, Gemma2DecoderLayer: post_feedforward_layernorm normalises the MLP output.
      if (olmo2 || gemma2) y = norm(y, p + 'post_feedforward_layernorm.weight');
      return x.map((v, i) => v + y[i]!);
    });
  }
  const head = c.tie_word_embeddings ? embed : get(m, 'lm_head.weight');
  const logprobs = xs.map((x) => {
    const h = gpt2
      ? layerNorm(x, get(m, 'transformer.ln_f.weight'), get(m, 'transformer.ln_f.bias'), eps)
      : norm(x, 'model.norm.weight');
    // Gemma2ForCausalLM: final_logit_softcapping on the logits.
    return logSoftmax(linear(h, head, undefined, 'out_in').map((v) => softcap(v, finalCap)));
  });
  return { logprobs, attention };
}

/** log p(tokens[i+1] | tokens[..i]) for the positions `from..tokens.length-2`. */
export function referenceTokenLogprobs(
  m: ReferenceModel,
  tokens: number[],
  scoredTargets: number,
  knockout: ReferenceKnockout = {},
): { logprobs: number[]; greedy: boolean[] } {
  const out = referenceForward(m, tokens.slice(0, -1), knockout);
  const logprobs: number[] = [];
  const greedy: boolean[] = [];
  for (let i = tokens.length - 1 - scoredTargets; i < tokens.length - 1; i++) {
    const rowLp = out.logprobs[i]!;
    const target = tokens[i + 1]!;
    logprobs.push(rowLp[target]!);
    let arg = 0;
    for (let v = 1; v < rowLp.length; v++) if (rowLp[v]! > rowLp[arg]!) arg = v;
    greedy.push(arg === target);
  }
  return { logprobs, greedy };
}
