// Reading single values of a config.json, with the key named in every refusal: what the
// family table and the config reader share. Every value the graph uses is checked here for
// type and range before anything is built from it: a rope_theta of 0 or "abc", a negative
// norm epsilon or a linear rope_scaling without its factor served NaN scores from a model
// that reported SERVING, and a hidden_size of 1e10 aborted V8 without naming the key.
import { CheckpointError, shownValue } from '../common/errors.js';
import type { Activation, RawConfig, RopeSpec } from './family-spec.js';

const fail = (key: string, want: string, got: unknown) =>
  new CheckpointError(`config.json: ${key} must be ${want} (got ${shownValue(got)})`);

/** A positive integer (absent: `fallback`), at most `max`. */
export function int(c: RawConfig, key: string, fallback?: number, max: number = Number.MAX_SAFE_INTEGER): number {
  const v = c[key] ?? fallback;
  if (!Number.isSafeInteger(v) || v <= 0) throw fail(key, 'a positive integer', c[key]);
  if (v > max) throw fail(key, `a positive integer of at most ${max}`, c[key]);
  return v;
}

export const positiveInt = int;

/** An integer ≥ 0 (absent: `fallback`). */
export function countOf(c: RawConfig, key: string, fallback: number): number {
  const v = c[key] ?? fallback;
  if (!Number.isSafeInteger(v) || v < 0) throw fail(key, 'an integer ≥ 0', c[key]);
  return v;
}

/** A finite number > 0 (`v` already read; `key` names it). */
export function positiveNumber(v: unknown, key: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw fail(key, 'a finite number > 0', v);
  return v;
}

/** `true` / `false`; absent or null: `fallback`. */
export function flag(c: RawConfig, key: string, fallback = false): boolean {
  const v = c[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'boolean') throw fail(key, 'true or false', v);
  return v;
}

/** A window size: a positive integer, or absent / null for none. */
export function windowOrNone(v: unknown, key = 'sliding_window'): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Number.isSafeInteger(v) || (v as number) <= 0) throw fail(key, 'a positive integer or null', v);
  return v as number;
}

export function activation(name: unknown, key = 'hidden_act'): Activation {
  if (name === 'silu' || name === 'swish') return 'silu';
  if (name === 'gelu_new' || name === 'gelu_pytorch_tanh' || name === 'gelu_fast') return 'gelu_tanh';
  if (name === 'gelu') return 'gelu';
  throw new CheckpointError(
    `config.json: ${key} = ${shownValue(name)} is not supported (silu, swish, gelu, gelu_new, gelu_fast, gelu_pytorch_tanh)`,
  );
}

/** Positions a rotary model serves at most (the size of its cos/sin tables). */
export const MAX_ROTARY_POSITIONS = 131072;

const isObject = (v: unknown): v is RawConfig => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Rotary frequencies as transformers computes them, with `rope_scaling` applied.
 * `paramsKey` names `c.rope_parameters` in messages (it may be a per-layer-type block). */
export function ropeFrequencies(
  c: RawConfig,
  headDim: number,
  defaultTheta = 10000,
  partialRotary = false,
  paramsKey = 'rope_parameters',
): RopeSpec {
  // Newer transformers save `rope_parameters` ({rope_type, rope_theta, …}) in place of
  // rope_theta / rope_scaling.
  const params = c.rope_parameters ?? undefined;
  if (params !== undefined && !isObject(params)) throw fail(paramsKey, 'an object or null', params);
  const theta =
    c.rope_theta != null
      ? positiveNumber(c.rope_theta, 'rope_theta')
      : params?.rope_theta != null
        ? positiveNumber(params.rope_theta, `${paramsKey}.rope_theta`)
        : defaultTheta;
  const partialKey = c.partial_rotary_factor != null ? 'partial_rotary_factor' : `${paramsKey}.partial_rotary_factor`;
  const partial = positiveNumber(c.partial_rotary_factor ?? params?.partial_rotary_factor ?? 1, partialKey);
  // transformers: dim = int(head_dim * partial_rotary_factor).
  const rotaryDim = Math.floor(headDim * partial);
  if (rotaryDim !== headDim && !partialRotary)
    throw new CheckpointError(`config.json: ${partialKey} = ${partial} is not supported for this family (it rotates every dimension)`);
  if (rotaryDim <= 0 || rotaryDim % 2 !== 0 || rotaryDim > headDim)
    throw new CheckpointError(
      `config.json: ${partialKey} = ${partial} gives ${rotaryDim} rotary dimensions (need an even number in 1..head_dim)`,
    );
  const half = rotaryDim / 2;
  const base = Array.from({ length: half }, (_, i) => 1 / theta ** ((2 * i) / rotaryDim));
  const scaling = c.rope_scaling ?? (params && (params.rope_type ?? 'default') !== 'default' ? params : null);
  const key = c.rope_scaling != null ? 'rope_scaling' : paramsKey;
  if (scaling !== null && !isObject(scaling)) throw fail(key, 'an object or null', scaling);
  const type: unknown = scaling ? (scaling.rope_type ?? scaling.type ?? 'default') : 'default';
  const plain = { theta, rotaryDim, attentionFactor: 1, dependsOnLength: false };
  let freqs = base;
  if (type === 'longrope') return longRope(c, scaling!, key, base, plain);
  if (type === 'linear') {
    const factor = positiveNumber(scaling!.factor, `${key}.factor`);
    freqs = base.map((f) => f / factor);
  } else if (type === 'llama3') {
    const need = (name: string) => positiveNumber(scaling![name], `${key}.${name}`);
    const [factor, low, high, oldLen] = ['factor', 'low_freq_factor', 'high_freq_factor', 'original_max_position_embeddings'].map(need) as [
      number,
      number,
      number,
      number,
    ];
    // The smoothing divides by high − low (transformers' validation asks for high > low).
    if (high <= low) throw fail(`${key}.high_freq_factor`, `greater than low_freq_factor ${low}`, high);
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
    const where = key === 'rope_scaling' ? '' : ` (in ${key})`;
    throw new CheckpointError(
      `config.json: rope_scaling type ${typeof type === 'string' ? type.slice(0, 80) : shownValue(type)}${where} is not supported (default, linear, llama3, longrope)`,
    );
  }
  return finiteRope({ ...plain, invFreq: Float32Array.from(freqs) }, key);
}

/** modeling_rope_utils' longrope: per forward pass, long factors when the sequence is
 * longer than original_max_position_embeddings, else short ones; inv_freq = 1 /
 * (factor_i · θ^(2i/dim)); cos and sin × attention_factor, by default
 * √(1 + ln(max/original) / ln(original)) when max > original. */
function longRope(c: RawConfig, scaling: RawConfig, key: string, base: number[], plain: Omit<RopeSpec, 'invFreq'>): RopeSpec {
  const half = base.length;
  const original: unknown = c.original_max_position_embeddings ?? scaling.original_max_position_embeddings ?? c.max_position_embeddings;
  if (!Number.isSafeInteger(original) || (original as number) <= 0)
    throw fail('original_max_position_embeddings', 'a positive integer (longrope needs it)', original);
  const factor =
    c.original_max_position_embeddings !== undefined
      ? positiveNumber(c.max_position_embeddings / (original as number), 'max_position_embeddings')
      : positiveNumber(scaling.factor ?? 1, `${key}.factor`);
  const attentionFactor =
    scaling.attention_factor != null
      ? positiveNumber(scaling.attention_factor, `${key}.attention_factor`)
      : factor <= 1
        ? 1
        : Math.sqrt(1 + Math.log(factor) / Math.log(original as number));
  if (!Number.isFinite(attentionFactor))
    throw fail('original_max_position_embeddings', `more than 1 (longrope's attention factor divides by its log)`, original);
  const factors = (name: string): number[] => {
    const f = scaling[name];
    if (!Array.isArray(f) || f.length !== half || !f.every((v) => typeof v === 'number' && Number.isFinite(v) && v > 0))
      throw new CheckpointError(`config.json: ${key}.${name} must be ${half} finite positive numbers (rotary dimensions / 2)`);
    return f;
  };
  const [short, long] = [factors('short_factor'), factors('long_factor')];
  return finiteRope(
    {
      ...plain,
      attentionFactor,
      dependsOnLength: true,
      invFreq: Float32Array.from(base.map((f, i) => f / short[i]!)),
      long: { invFreq: Float32Array.from(base.map((f, i) => f / long[i]!)), originalMax: original as number },
    },
    key,
  );
}

/** The last guard: frequencies a table can be made of (each key above was checked; this
 * catches a combination that still overflows). */
function finiteRope(rope: RopeSpec, key: string): RopeSpec {
  const all = [...rope.invFreq, ...(rope.long?.invFreq ?? [])];
  if (!all.every(Number.isFinite) || !Number.isFinite(rope.attentionFactor))
    throw new CheckpointError(`config.json: rope_theta and ${key} give rotary frequencies that are not finite`);
  return rope;
}

/** The config as the global layers' rotary reads it: newer transformers keep Gemma 3's
 * per-layer-type parameters under `rope_parameters.full_attention`. */
export function globalRopeConfig(c: RawConfig): RawConfig {
  const full = c.rope_parameters?.full_attention;
  return full ? { ...c, rope_parameters: full } : c;
}

export function positiveOrNone(v: unknown, key: string, file: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || !(v > 0))
    throw new CheckpointError(`${file}: ${key} must be a positive number or null (finite; got ${shownValue(v)})`);
  return v;
}
