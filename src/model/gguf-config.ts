// A GGUF file's config, read through the same parsing and checks as a config.json
// (config.ts): the architecture table (checkpoint/gguf-arch.ts) gives config.json keys,
// and a refusal names the GGUF key each came from. What the file's format changed is
// put back on the parsed config: Gemma's norm weights stored as 1 + w are plain RMSNorm
// weights, GPT-2's transposed Conv1D weights are [out, in], and Llama 3's rope scaling
// comes as llama.cpp's per-frequency divisors (rope_freqs.weight).
import { CheckpointError } from '../common/errors.js';
import type { GgufModel } from '../checkpoint/gguf-arch.js';
import { parseModelConfig } from './config.js';
import type { ModelConfig, RopeSpec } from './family-spec.js';

/** `model`'s config parsed as a config.json would be; refusals name `file` and the GGUF key. */
export function ggufModelConfig(model: GgufModel, file: string): ModelConfig {
  let config: ModelConfig;
  try {
    config = parseModelConfig(model.config, file);
  } catch (e) {
    throw e instanceof CheckpointError ? renamed(e, model, file) : e;
  }
  let spec = config.spec;
  if (model.normWeightsPlusOne && spec.norm === 'rmsOffset') spec = { ...spec, norm: 'rms' };
  if (model.linearOutIn) spec = { ...spec, linearLayout: 'out_in' };
  const rope = config.rope && model.ropeFreqFactors ? dividedRope(config.rope, model, file) : config.rope;
  return { ...config, spec, rope };
}

/** `config.json: hidden_size must be …` as `FILE: llama.embedding_length (hidden_size) must be …`. */
function renamed(e: CheckpointError, model: GgufModel, file: string): CheckpointError {
  const bare = 'config.json: ';
  if (!e.message.startsWith(bare)) return e;
  const rest = e.message.slice(bare.length);
  const key = /^[A-Za-z_.]+/.exec(rest)?.[0] ?? '';
  const known = Object.keys(model.sources)
    .filter((k) => key === k || key.startsWith(`${k}.`) || key.startsWith(`${k}[`))
    .sort((a, b) => b.length - a.length)[0];
  const named = known ? `${model.sources[known]} (${key})${rest.slice(key.length)}` : rest;
  return new CheckpointError(`${file}: ${named}`);
}

/** Each rotary frequency divided by its rope_freqs factor, as llama.cpp's rope does with
 * freq_factors (its converter's Llama 3 scaling: factor, 1, or the smoothed band). */
function dividedRope(rope: RopeSpec, model: GgufModel, file: string): RopeSpec {
  const factors = model.ropeFreqFactors!;
  const half = rope.rotaryDim / 2;
  if (factors.length !== half)
    throw new CheckpointError(`${file}: rope_freqs.weight must hold ${half} factors (rotary dimensions / 2), not ${factors.length}`);
  if (rope.long) throw new CheckpointError(`${file}: rope_freqs.weight with longrope scaling is not supported`);
  const scaling = model.config.rope_scaling as { factor?: number } | undefined;
  const linear = scaling?.factor ?? 1;
  const invFreq = Float32Array.from({ length: half }, (_, i) => 1 / rope.theta ** ((2 * i) / rope.rotaryDim) / linear / factors[i]!);
  // A factor must be positive, and small ones must still give a float32 frequency whose
  // angle at the last position is finite: 1e-45 passed as "finite positive" and scored NaN.
  const maxPositions = Number(model.config.max_position_embeddings ?? 1);
  const bad = invFreq.findIndex(
    (f, i) => !(Number.isFinite(factors[i]) && factors[i]! > 0) || !Number.isFinite(Math.fround(f * maxPositions)),
  );
  if (bad >= 0)
    throw new CheckpointError(
      `${file}: rope_freqs.weight[${bad}] is ${factors[bad]}: each factor must be finite, positive and give a finite rotary angle (frequency ${invFreq[bad]} × ${maxPositions} positions)`,
    );
  return { ...rope, invFreq };
}
