// config.json of a checkpoint, read through its family's spec: the dimensions, rotary
// frequencies and per-family settings the graph builder uses.
import fs from 'node:fs';
import { CheckpointError, shownValue } from '../common/errors.js';
import { checkpointFile, readJsonObject, type CheckpointLinks } from '../checkpoint/files.js';
import { FAMILIES } from './families.js';
import { DIM_CAPS } from '../common/dim-caps.js';
import {
  MAX_ROTARY_POSITIONS,
  activation,
  flag,
  globalRopeConfig,
  int,
  positiveNumber,
  positiveOrNone,
  ropeFrequencies,
  windowOrNone,
} from './config-values.js';
import { checkSpecialIds } from './config-checks.js';
import { readQuantConfig } from '../checkpoint/hf-quantized.js';
import type { Dims, FamilySpec, ModelConfig, RawConfig } from './family-spec.js';

/** The dimensions of a config, read through the family's key names and defaults, each
 * checked for type and range (DIM_CAPS) before anything is sized by it. */
export function readDims(spec: FamilySpec, c: RawConfig): Dims {
  const { keys, defaults } = spec;
  const hidden = int(c, keys.hidden, undefined, DIM_CAPS.hidden);
  const heads = int(c, keys.heads, undefined, DIM_CAPS.heads);
  const headDimKey = keys.headDim !== undefined && c[keys.headDim] != null ? keys.headDim : undefined;
  if (headDimKey === undefined && defaults.headDim === undefined && hidden % heads !== 0)
    throw new CheckpointError(`config.json: ${keys.hidden} ${hidden} is not a multiple of ${keys.heads} ${heads} (and there is no head_dim)`);
  const headDim = headDimKey ? int(c, headDimKey) : (defaults.headDim ?? hidden / heads);
  if (headDim > DIM_CAPS.headDim)
    throw new CheckpointError(`config.json: ${headDimKey ?? `${keys.hidden} / ${keys.heads}`} (head_dim ${headDim}) must be at most ${DIM_CAPS.headDim}`);
  // Checked wherever the family reads it or not: a window of 0 or -1 is a broken config.
  windowOrNone(c.sliding_window);
  return {
    hiddenSize: hidden,
    numLayers: int(c, keys.layers, undefined, DIM_CAPS.layers),
    numHeads: heads,
    numKvHeads: keys.kvHeads ? int(c, keys.kvHeads, heads, DIM_CAPS.heads) : heads,
    headDim,
    intermediateSize: int(c, keys.intermediate, defaults.intermediate?.(hidden), DIM_CAPS.intermediate),
    vocabSize: int(c, keys.vocab, undefined, DIM_CAPS.vocab),
    // Rotary models look cos/sin up in tables of this many rows (decoder.ts): 131072
    // positions are 64 MiB for a 128-wide head; longer configs (Qwen2.5-1M) are served up
    // to it.
    maxPositions: Math.min(
      int(c, keys.maxPositions, defaults.maxPositions, DIM_CAPS.maxPositions),
      spec.positions.kind === 'rope' ? MAX_ROTARY_POSITIONS : Infinity,
    ),
    normEps: positiveNumber(c[keys.normEps] ?? defaults.normEps, keys.normEps),
    activation: activation(c[keys.activation] ?? defaults.activation, keys.activation),
    tiedEmbeddings: flag(c, keys.tied, defaults.tied),
    slidingWindow: windowOrNone(spec.slidingWindow(c)),
  };
}

/** A parsed config.json in the shape the graph builder uses. */
export function parseModelConfig(raw: RawConfig, file = 'config.json'): ModelConfig {
  const modelType: string = raw.model_type;
  const spec = FAMILIES.find((f) => f.modelTypes.includes(modelType));
  if (!spec) {
    const known = FAMILIES.flatMap((f) => f.modelTypes).join(', ');
    throw new CheckpointError(`${file}: model_type ${shownValue(modelType)} is not supported (supported: ${known})`);
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
  if (moe && moe.topK > moe.experts)
    throw new CheckpointError(`${file}: num_experts_per_tok ${moe.topK} is more than the ${moe.experts} experts`);
  if (dims.numHeads % dims.numKvHeads !== 0) {
    throw new CheckpointError(`${file}: num_attention_heads ${dims.numHeads} is not a multiple of num_key_value_heads ${dims.numKvHeads}`);
  }
  checkSpecialIds(raw, spec.keys.vocab, dims.vocabSize);
  const quantization = readQuantConfig(raw, file);
  if (quantization && spec.linearLayout !== 'out_in')
    throw new CheckpointError(`${file}: quantization_config: ${quantization.label} weights are computed for families whose linear weights are [out, in] (${spec.family}'s are [in, out])`);
  return {
    ...(quantization && { quantization }),
    ...dims,
    modelType,
    spec,
    bias: spec.bias(raw),
    rope:
      spec.positions.kind === 'rope'
        ? ropeFrequencies(
            globalRopeConfig(raw),
            dims.headDim,
            spec.defaults.ropeTheta,
            spec.partialRotary ?? false,
            raw.rope_parameters?.full_attention ? 'rope_parameters.full_attention' : 'rope_parameters',
          )
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
    torchDtype:
      typeof (raw.torch_dtype ?? raw.dtype) === 'string' ? String(raw.torch_dtype ?? raw.dtype).replace(/^torch\./, '') : undefined,
    bosTokenId: typeof raw.bos_token_id === 'number' ? raw.bos_token_id : undefined,
    eosTokenId: typeof raw.eos_token_id === 'number' ? raw.eos_token_id : Array.isArray(raw.eos_token_id) ? raw.eos_token_id[0] : undefined,
    // Every end-of-sequence id (Llama 3 lists two): generation stops at any of them.
    eosTokenIds: (Array.isArray(raw.eos_token_id) ? raw.eos_token_id : [raw.eos_token_id]).filter((id: unknown): id is number => Number.isInteger(id)),
  };
}

/** Read `config.json` of a checkpoint directory. The value checks name the key as
 * `config.json: key`; here the file is named by its path. */
export function readModelConfig(dir: string, links: CheckpointLinks = 'follow'): ModelConfig {
  const file = checkpointFile(dir, 'config.json', links);
  if (!fs.existsSync(file)) throw new CheckpointError(`${dir}: no config.json`);
  const raw = readJsonObject(file);
  try {
    return parseModelConfig(raw, file);
  } catch (e) {
    const bare = 'config.json: ';
    if (e instanceof CheckpointError && e.message.startsWith(bare)) throw new CheckpointError(`${file}: ${e.message.slice(bare.length)}`);
    throw e;
  }
}
