// Config keys that change the computation: each family refuses, by key and value, every
// value it does not implement, and reads windows the way transformers does.
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { FAMILIES } from '../src/model/families.js';
import { parseModelConfig } from '../src/model/config.js';
import { CheckpointError } from '../src/common/errors.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';

const configs = Object.fromEntries(
  Object.entries(FAMILY_FIXTURES).map(([family, spec]) => {
    const fx = makeFixture(spec);
    return [family, JSON.parse(fs.readFileSync(path.join(fx.dir, 'config.json'), 'utf8'))];
  }),
);

// A value each rule must refuse (the opposite of the default).
const REFUSED: Record<string, unknown> = {
  attention_bias: true,
  mlp_bias: true,
  scale_attn_weights: false,
  scale_attn_by_inverse_layer_idx: true,
  use_bidirectional_attention: true,
};

describe('config keys that change the computation', () => {
  it('every family has a fixture, so every rule below is walked', () => {
    const fixtures = new Set(Object.values(FAMILY_FIXTURES).map((f) => f.family));
    for (const f of FAMILIES) expect(fixtures, f.family).toContain(f.family);
  });

  it("reads biases as each family's modeling code does", () => {
    const biased = { attention_bias: true, mlp_bias: true };
    expect(parseModelConfig({ ...configs.llama, ...biased }).bias).toEqual({ qkv: true, o: true, mlp: true });
    expect(parseModelConfig({ ...configs.qwen3, ...biased }).bias).toEqual({ qkv: true, o: true, mlp: false });
    expect(parseModelConfig({ ...configs.olmo2, ...biased }).bias).toEqual({ qkv: true, o: true, mlp: false });
    // MistralAttention, Phi3Attention: no biases whatever the config says; Qwen2: q/k/v always.
    expect(parseModelConfig({ ...configs.mistral, ...biased }).bias).toEqual({ qkv: false, o: false, mlp: false });
    expect(parseModelConfig({ ...configs.phi3, ...biased }).bias).toEqual({ qkv: false, o: false, mlp: false });
    expect(parseModelConfig(configs.qwen2!).bias).toEqual({ qkv: true, o: false, mlp: false });
    expect(parseModelConfig(configs.llama!).bias).toEqual({ qkv: false, o: false, mlp: false });
  });

  for (const spec of FAMILIES) {
    for (const rule of spec.unsupported) {
      it(`${spec.family}: ${rule.key} = ${JSON.stringify(REFUSED[rule.key])} is refused by name; the default loads`, () => {
        expect(rule.key in REFUSED, `add a refused value for ${rule.key}`).toBe(true);
        const raw = configs[spec.family]!;
        expect(() => parseModelConfig({ ...raw, [rule.key]: REFUSED[rule.key] })).toThrow(CheckpointError);
        expect(() => parseModelConfig({ ...raw, [rule.key]: REFUSED[rule.key] })).toThrow(
          new RegExp(`${rule.key} = ${JSON.stringify(REFUSED[rule.key])} is not supported for ${spec.family}`),
        );
        expect(() => parseModelConfig(raw)).not.toThrow();
      });
    }
  }

  it('windows as transformers does: Mistral and Phi-3 by sliding_window, Llama never, Qwen only when asked', () => {
    expect(parseModelConfig({ ...configs.mistral, sliding_window: 9 }).slidingWindow).toBe(9);
    expect(parseModelConfig({ ...configs.phi3, sliding_window: 9 }).slidingWindow).toBe(9);
    // LlamaModel ignores the key; Qwen2/3 configs default use_sliding_window to false.
    expect(parseModelConfig({ ...configs.llama, sliding_window: 9 }).slidingWindow).toBeUndefined();
    expect(parseModelConfig({ ...configs.qwen2, sliding_window: 9 }).slidingWindow).toBeUndefined();
    expect(parseModelConfig({ ...configs.qwen3, sliding_window: 9, use_sliding_window: false }).slidingWindow).toBeUndefined();
    // With use_sliding_window: the layers from max_window_layers (default 28) on, or layer_types.
    const on = parseModelConfig({ ...configs.qwen3, num_hidden_layers: 30, use_sliding_window: true, sliding_window: 9 });
    expect(on.slidingWindow).toBe(9);
    expect(on.slidingLayers).toEqual(Array.from({ length: 30 }, (_, l) => l >= 28));
    expect(parseModelConfig({ ...configs.qwen2, use_sliding_window: true }).slidingWindow).toBe(4096);
    expect(parseModelConfig({ ...configs.qwen2, use_sliding_window: true, max_window_layers: 1 }).slidingLayers).toEqual([false, true]);
    expect(
      parseModelConfig({ ...configs.qwen2, use_sliding_window: true, layer_types: ['sliding_attention', 'full_attention'] }).slidingLayers,
    ).toEqual([true, false]);
  });

  it("reads Gemma 2 as Gemma2Config does: class defaults for absent keys, null turns a cap or the window off, layer_types wins", () => {
    const { head_dim: _h, query_pre_attn_scalar: _q, attn_logit_softcapping: _a, final_logit_softcapping: _f, sliding_window: _w, ...bare } =
      configs.gemma2!;
    const d = parseModelConfig({ ...bare, num_hidden_layers: 4 });
    expect([d.headDim, d.attentionScale, d.attentionSoftcap, d.finalSoftcap, d.slidingWindow]).toEqual([256, 256 ** -0.5, 50, 30, 4096]);
    // Layer l slides when (l + 1) % 2 ≠ 0: the even layers.
    expect(d.slidingLayers).toEqual([true, false, true, false]);
    const off = parseModelConfig({ ...configs.gemma2, attn_logit_softcapping: null, final_logit_softcapping: null, sliding_window: null });
    expect([off.attentionSoftcap, off.finalSoftcap, off.slidingWindow]).toEqual([undefined, undefined, undefined]);
    expect(off.slidingLayers).toEqual([false, false]);
    const typed = parseModelConfig({ ...configs.gemma2, layer_types: ['full_attention', 'sliding_attention'] });
    expect(typed.slidingLayers).toEqual([false, true]);
    expect(() => parseModelConfig({ ...configs.gemma2, layer_types: ['full_attention'] })).toThrow(/layer_types has 1 entries for 2 layers/);
    expect(() => parseModelConfig({ ...configs.gemma2, layer_types: ['chunked_attention', 'full_attention'] })).toThrow(
      /layer_types\[0\] = "chunked_attention" is not supported/,
    );
    expect(() => parseModelConfig({ ...configs.gemma2, attn_logit_softcapping: -1 })).toThrow(/attn_logit_softcapping must be a positive number or null/);
    // Gemma 2 reads hidden_activation; the embedding is scaled and tied by default.
    expect(parseModelConfig({ ...configs.gemma2, hidden_activation: 'silu' }).activation).toBe('silu');
    expect(parseModelConfig(configs.gemma2!).tiedEmbeddings).toBe(true);
  });

  it('reads Gemma 3 as Gemma3TextConfig does: pattern 6, rope_theta 1e6 globally, 10000 locally, no attention cap ever', () => {
    const { sliding_window_pattern: _p, rope_theta: _t, rope_local_base_freq: _l, final_logit_softcapping: _f, rope_scaling: _s, ...bare } =
      configs.gemma3_text!;
    const d = parseModelConfig({ ...bare, num_hidden_layers: 12 });
    expect(d.slidingLayers).toEqual([true, true, true, true, true, false, true, true, true, true, true, false]);
    expect([d.attentionSoftcap, d.finalSoftcap]).toEqual([undefined, undefined]);
    const inv = (theta: number) => Array.from({ length: d.headDim / 2 }, (_, i) => Math.fround(1 / theta ** ((2 * i) / d.headDim)));
    expect(Array.from(d.rope!.invFreq)).toEqual(inv(1e6));
    expect(Array.from(d.localRope!.invFreq)).toEqual(inv(1e4));
    // rope_scaling is the global layers' only.
    const scaled = parseModelConfig({ ...bare, rope_scaling: { rope_type: 'linear', factor: 8 } });
    expect(Array.from(scaled.rope!.invFreq)).toEqual(inv(1e6).map((f) => Math.fround(f / 8)));
    expect(Array.from(scaled.localRope!.invFreq)).toEqual(inv(1e4));
    // The per-layer-type form newer transformers save.
    const typed = parseModelConfig({
      ...bare,
      rope_parameters: {
        full_attention: { rope_type: 'linear', factor: 8, rope_theta: 1e6 },
        sliding_attention: { rope_type: 'default', rope_theta: 1e4 },
      },
    });
    expect(typed.rope!.invFreq).toEqual(scaled.rope!.invFreq);
    expect(typed.localRope!.invFreq).toEqual(scaled.localRope!.invFreq);
  });

  it('reads expert routing as MixtralConfig and Qwen3MoeConfig do', () => {
    const { num_local_experts: _e, num_experts_per_tok: _k, ...mix } = configs.mixtral!;
    expect(parseModelConfig(mix).moe).toEqual({ experts: 8, topK: 2, renormalize: true, expertIntermediate: 24, sparseLayers: [true, true] });
    const { num_experts: _n, num_experts_per_tok: _t, moe_intermediate_size: _m, norm_topk_prob: _p, mlp_only_layers: _o, ...q } = configs.qwen3_moe!;
    expect(parseModelConfig(q).moe).toEqual({ experts: 128, topK: 8, renormalize: false, expertIntermediate: 768, sparseLayers: [true, true] });
    // decoder_sparse_step 2: layers 1, 3 sparse; mlp_only_layers wins.
    const stepped = parseModelConfig({ ...configs.qwen3_moe, num_hidden_layers: 4, decoder_sparse_step: 2, mlp_only_layers: [3] });
    expect(stepped.moe!.sparseLayers).toEqual([false, true, false, false]);
    expect(parseModelConfig({ ...configs.qwen3_moe, norm_topk_prob: true }).moe!.renormalize).toBe(true);
    expect(() => parseModelConfig({ ...configs.qwen3_moe, num_experts_per_tok: 5 })).toThrow(/num_experts_per_tok 5 is more than the 4 experts/);
    // Qwen3-MoE windows every layer when asked; Mixtral whenever sliding_window is set.
    expect(parseModelConfig({ ...configs.qwen3_moe, use_sliding_window: true, sliding_window: 9 }).slidingLayers).toEqual([true, true]);
    expect(parseModelConfig({ ...configs.mixtral, sliding_window: null }).slidingWindow).toBeUndefined();
  });

  it('reads rope_parameters (newer transformers) as rope_theta and rope_scaling', () => {
    const { rope_theta: _t, ...raw } = configs.qwen2!;
    const old = parseModelConfig({ ...raw, rope_theta: 5e5 }).rope!.invFreq;
    expect(parseModelConfig({ ...raw, rope_parameters: { rope_type: 'default', rope_theta: 5e5 } }).rope!.invFreq).toEqual(old);
    const linear = parseModelConfig({ ...raw, rope_theta: 5e5, rope_scaling: { rope_type: 'linear', factor: 2 } }).rope!.invFreq;
    expect(parseModelConfig({ ...raw, rope_parameters: { rope_type: 'linear', factor: 2, rope_theta: 5e5 } }).rope!.invFreq).toEqual(linear);
    expect(() => parseModelConfig({ ...raw, rope_parameters: { rope_type: 'yarn', factor: 2, rope_theta: 5e5 } })).toThrow(/rope_scaling type yarn/);
  });

  it('serves rotary models up to the size of their cos/sin tables', () => {
    expect(parseModelConfig({ ...configs.qwen2, max_position_embeddings: 1010000 }).maxPositions).toBe(131072);
    expect(parseModelConfig({ ...configs.qwen2, max_position_embeddings: 32768 }).maxPositions).toBe(32768);
  });

  it("takes Qwen3's head_dim default of 128 from its config class", () => {
    const { head_dim: _, ...raw } = configs.qwen3!;
    expect(parseModelConfig(raw).headDim).toBe(128);
    expect(parseModelConfig(configs.qwen3!).headDim).toBe(12);
  });
});
