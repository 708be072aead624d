// Reading single values of a config.json, with the checkpoint named in every refusal:
// what the family table and the config reader share.
import { CheckpointError } from '../common/errors.js';
import type { Activation, RawConfig, RopeSpec } from './family-spec.js';

export function int(c: RawConfig, key: string, fallback?: number): number {
  const v = c[key] ?? fallback;
  if (!Number.isInteger(v) || v <= 0)
    throw new CheckpointError(`config.json: ${key} must be a positive integer (got ${JSON.stringify(c[key])})`);
  return v;
}

export function activation(name: string): Activation {
  if (name === 'silu' || name === 'swish') return 'silu';
  if (name === 'gelu_new' || name === 'gelu_pytorch_tanh' || name === 'gelu_fast') return 'gelu_tanh';
  if (name === 'gelu') return 'gelu';
  throw new CheckpointError(`config.json: activation ${name} is not supported (silu, gelu, gelu_new, gelu_pytorch_tanh)`);
}

/** Positions a rotary model serves at most (the size of its cos/sin tables). */
export const MAX_ROTARY_POSITIONS = 131072;

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
    throw new CheckpointError(
      `config.json: partial_rotary_factor = ${partial} is not supported for this family (it rotates every dimension)`,
    );
  if (rotaryDim <= 0 || rotaryDim % 2 !== 0)
    throw new CheckpointError(
      `config.json: partial_rotary_factor = ${partial} gives ${rotaryDim} rotary dimensions (need an even number > 0)`,
    );
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
    if (!Number.isInteger(original) || original <= 0)
      throw new CheckpointError('config.json: longrope needs original_max_position_embeddings');
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

export function positiveInt(c: RawConfig, key: string, fallback: number): number {
  const v = c[key] ?? fallback;
  if (!Number.isInteger(v) || v <= 0)
    throw new CheckpointError(`config.json: ${key} must be a positive integer (got ${JSON.stringify(c[key])})`);
  return v;
}

/** The config as the global layers' rotary reads it: newer transformers keep Gemma 3's
 * per-layer-type parameters under `rope_parameters.full_attention`. */
export function globalRopeConfig(c: RawConfig): RawConfig {
  const full = c.rope_parameters?.full_attention;
  return full ? { ...c, rope_parameters: full } : c;
}

export function positiveOrNone(v: unknown, key: string, file: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !(v > 0))
    throw new CheckpointError(`${file}: ${key} must be a positive number or null (got ${JSON.stringify(v)})`);
  return v;
}
