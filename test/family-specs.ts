// Tiny deterministic model specs of every supported family (test fixtures and
// bench/reference-deltas.ts): no test-runner imports here.
import type { SyntheticSpec } from '../src/model/synthetic.js';

// The size every fixture shares: small enough for the float64 reference, big enough for
// grouped heads and windows shorter than the test inputs.
const TINY = { hidden: 32, layers: 2, heads: 4, vocab: 300, maxPositions: 64 };

export const FAMILY_FIXTURES: Record<string, SyntheticSpec> = {
  // Grouped-query attention and llama3 rope scaling (all three frequency bands hit).
  llama: {
    family: 'llama',
    ...TINY,
    kvHeads: 2,
    intermediate: 48,
    seed: 11,
    ropeScaling: { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 16 },
  },
  // Llama with q/k/v/o and MLP biases (attention_bias, mlp_bias).
  'llama-bias': {
    family: 'llama',
    ...TINY,
    kvHeads: 2,
    intermediate: 48,
    seed: 18,
    extraConfig: { attention_bias: true, mlp_bias: true },
  },
  // Multi-query attention and a sliding window shorter than the test inputs.
  mistral: {
    family: 'mistral',
    ...TINY,
    kvHeads: 1,
    intermediate: 40,
    seed: 12,
    slidingWindow: 5,
  },
  // q/k/v biases, tied embeddings.
  qwen2: {
    family: 'qwen2',
    ...TINY,
    kvHeads: 2,
    intermediate: 40,
    seed: 13,
    tied: true,
    ropeTheta: 1e6,
  },
  // Qwen2 with use_sliding_window: a window of 5 on the layers from max_window_layers (1) on.
  'qwen2-window': {
    family: 'qwen2',
    ...TINY,
    kvHeads: 2,
    intermediate: 40,
    seed: 21,
    slidingWindow: 5,
    extraConfig: { use_sliding_window: true, max_window_layers: 1 },
  },
  // Fused q/k/v under grouped-query attention ((heads + 2·kv_heads)·head_dim wide) and a
  // fused gate/up projection, a head_dim apart from hidden/heads, and a sliding window.
  phi3: {
    family: 'phi3',
    ...TINY,
    kvHeads: 2,
    headDim: 12,
    intermediate: 40,
    seed: 15,
    slidingWindow: 7,
  },
  // Phi-3 long-context: half the head dimensions rotate (partial_rotary_factor 0.5), and
  // longrope picks short or long factors per sequence (original 16 of 64 positions: the
  // tests' sequences fall on both sides), cos/sin × √(1 + ln 4 / ln 16).
  'phi3-longrope': {
    family: 'phi3',
    ...TINY,
    kvHeads: 2,
    headDim: 12,
    intermediate: 40,
    seed: 24,
    ropeScaling: { type: 'longrope', short_factor: [1, 1.5, 2], long_factor: [2, 4, 8] },
    extraConfig: { partial_rotary_factor: 0.5, original_max_position_embeddings: 16 },
  },
  // Per-head q/k RMSNorm before rotary, a head_dim apart from hidden/heads.
  qwen3: {
    family: 'qwen3',
    ...TINY,
    kvHeads: 2,
    headDim: 12,
    intermediate: 40,
    seed: 16,
  },
  // No pre-norms: q/k RMSNorm over the whole projections, norms on the attention and MLP
  // outputs before each residual add.
  olmo2: { family: 'olmo2', ...TINY, kvHeads: 4, intermediate: 40, seed: 17 },
  // Gemma 2: (1 + w) RMSNorms, sandwich norms, √hidden embeddings, query_pre_attn_scalar,
  // soft-capped scores and logits (caps near the values' size, so they bite), a window
  // of 5 on even layers only, gelu_pytorch_tanh, tied head, head_dim apart.
  gemma2: {
    family: 'gemma2',
    ...TINY,
    kvHeads: 2,
    headDim: 12,
    intermediate: 40,
    seed: 19,
    slidingWindow: 5,
    extraConfig: { query_pre_attn_scalar: 10, attn_logit_softcapping: 0.5, final_logit_softcapping: 1.5 },
  },
  // Gemma 3: Gemma 2's layout plus per-head (1 + w) q/k norms; a pattern of 2 (layer 0
  // sliding with rope_local_base_freq, layer 1 global with rope_theta and linear
  // scaling); attn_logit_softcapping set but never applied; logits soft-capped.
  gemma3_text: {
    family: 'gemma3_text',
    ...TINY,
    kvHeads: 2,
    headDim: 12,
    intermediate: 40,
    seed: 20,
    slidingWindow: 5,
    ropeTheta: 1e4,
    ropeScaling: { rope_type: 'linear', factor: 4 },
    extraConfig: {
      sliding_window_pattern: 2,
      rope_local_base_freq: 100,
      query_pre_attn_scalar: 10,
      attn_logit_softcapping: 0.5,
      final_logit_softcapping: 1.5,
    },
  },
  // Mixtral: 4 experts, 2 per token, renormalised; a window on every layer.
  mixtral: {
    family: 'mixtral',
    ...TINY,
    kvHeads: 2,
    intermediate: 24,
    seed: 22,
    slidingWindow: 7,
    extraConfig: { num_local_experts: 4, num_experts_per_tok: 2 },
  },
  // Qwen3-MoE: per-head q/k norms, 4 experts of 16, 2 per token, not renormalised; layer 1
  // dense (mlp_only_layers) with the 40-wide MLP.
  qwen3_moe: {
    family: 'qwen3_moe',
    ...TINY,
    kvHeads: 2,
    headDim: 12,
    intermediate: 40,
    seed: 23,
    extraConfig: { num_experts: 4, num_experts_per_tok: 2, moe_intermediate_size: 16, norm_topk_prob: false, mlp_only_layers: [1] },
  },
  // Learned positions, LayerNorm, gelu_new, Conv1D weights, fused qkv, tied head.
  gpt2: { family: 'gpt2', ...TINY, kvHeads: 4, intermediate: 64, seed: 14 },
};
