// A served model's settings, declared once. Each is a key of a model repository file
// (models/*.json); most are also a command-line flag (the key in kebab case: `maxBatchTokens`
// is `--max-batch-tokens`) and an environment variable (`CTXPROBE_MAX_BATCH_TOKENS`). From
// this table come the commands' flags (cli/common.ts), the repository file's schema
// (repository.ts: a wrong type or an unknown key is refused, naming it) and the TypeScript
// type of a model entry; the choices are the owning module's own lists (`--quantize`'s are
// model/quantized.ts's), so a new choice is written once.
import { COMPUTE_DTYPES } from '../common/dtypes.js';
import { CHECKPOINT_LINKS } from '../checkpoint/files.js';
import { PROBE_SESSIONS, SETTABLE_GPU_BUFFER_CACHES } from '../engine/device.js';
import { QUANTIZE_AT_LOAD, QUANTIZED_ACTIVATIONS } from '../model/quantized.js';
import { WEIGHTS_AT_REST } from '../model/ops.js';
import { defaultWeightsCache } from '../weights/held-cache.js';

/** What a setting's value is: a text, a whole number of at least `min`, one of `values`, or
 * a switch (`true`/`false` in a file, `on`/`off` on the command line). */
export type SettingType =
  { kind: 'text' } | { kind: 'whole'; min: 0 | 1 } | { kind: 'oneOf'; values: readonly string[] } | { kind: 'switch' };

export interface Setting {
  type: SettingType;
  /** The flag's value in its help (`<n>`); none: a repository key only. */
  arg?: string;
  help: string | (() => string);
}

const text = { kind: 'text' } as const;
const whole = <M extends 0 | 1>(min: M) => ({ kind: 'whole', min }) as const;
const oneOf = <V extends readonly string[]>(values: V) => ({ kind: 'oneOf', values }) as const;
const onOff = { kind: 'switch' } as const;

export const MODEL_SETTINGS = {
  device: { type: text, arg: '<device>', help: 'cpu, webgpu, cuda or cuda:N' },
  dtype: { type: oneOf(COMPUTE_DTYPES), arg: '<dtype>', help: 'compute dtype' },
  threads: { type: whole(0), arg: '<n>', help: 'CPU threads (0: one per core)' },
  cpuMemArena: {
    type: onOff,
    arg: '<on|off>',
    help: "onnxruntime's CPU memory arena (default off: memory goes back after large requests)",
  },
  gpuBufferCache: {
    type: oneOf(SETTABLE_GPU_BUFFER_CACHES),
    arg: '<mode>',
    help: "WebGPU's buffer cache: bucket (default), or simple (faster when shapes repeat; keeps every buffer size it has used)",
  },
  probeSession: {
    type: oneOf(PROBE_SESSIONS),
    arg: '<mode>',
    help: 'WebGPU: probes in a session of their own (separate, default) or one session for every pass (shared: every pass dispatches the probe nodes); either way one copy of the weights on the device',
  },
  maxLength: { type: whole(1), arg: '<n>', help: "context length (default: the model's)" },
  maxBatchTokens: { type: whole(1), arg: '<n>', help: 'padded tokens per forward pass' },
  prefixCacheBytes: {
    type: whole(0),
    arg: '<n>',
    help: 'KV bytes of the prefix cache kept across requests (default 1 GiB; 0: none)',
  },
  quantizedActivations: {
    type: oneOf(QUANTIZED_ACTIVATIONS),
    arg: '<type>',
    help: "quantized weights' products: float32 activations (default: exact, the file's model) or int8 (faster, approximate, as llama.cpp)",
  },
  quantize: {
    type: oneOf(QUANTIZE_AT_LOAD),
    arg: '<type>',
    help: "quantize float matrices at load (approximate: the numbers are no longer the checkpoint's), then compute them exactly as a GGUF of that type",
  },
  weightsAtRest: {
    type: oneOf(WEIGHTS_AT_REST),
    arg: '<how>',
    help: 'BF16 / F16 weights computed in float32, CPU and WebGPU: stored (two bytes a weight, each matrix widened for its product, exactly) or compute (widened at load) (default: widened where that fits in memory)',
  },
  checkpointLinks: {
    type: oneOf(CHECKPOINT_LINKS),
    arg: '<how>',
    help: "where a checkpoint folder's symlinks may lead: follow (default: anywhere, as transformers) or contain (only inside the folder, or a Hugging Face cache's blobs/)",
  },
  weightsCache: {
    type: text,
    arg: '<dir|off>',
    help: () =>
      `where a model's repacked (quantized) weights are kept between starts, so a restart maps them instead of repacking (default: ${defaultWeightsCache()}; off: none)`,
  },
  // Repository keys only: `serve` sets the server's own limit of the same name for every model.
  maxRawAttentionBytes: { type: whole(1), help: 'largest raw-attention answer (default 64 MiB)' },
  maxContinuations: { type: whole(1), help: 'continuations per Score item (default 256)' },
  maxAttentionBytes: {
    type: whole(1),
    help: 'bytes of one layer’s attention a scoring pass may build (default 192 MiB, 128 MiB on WebGPU)',
  },
} as const satisfies Record<string, Setting>;

export type SettingKey = keyof typeof MODEL_SETTINGS;

type ValueOf<T extends SettingType> = T extends { kind: 'oneOf'; values: readonly (infer V)[] }
  ? V
  : T extends { kind: 'whole' }
    ? number
    : T extends { kind: 'switch' }
      ? boolean
      : string;

/** A model's settings, as a repository file or the flags give them (each may be absent). */
export type ModelSettings = { -readonly [K in SettingKey]?: ValueOf<(typeof MODEL_SETTINGS)[K]['type']> };

export const settingKeys = Object.keys(MODEL_SETTINGS) as SettingKey[];

/** `maxBatchTokens` → `--max-batch-tokens`. */
export const flagOf = (key: SettingKey) => `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
/** `maxBatchTokens` → `CTXPROBE_MAX_BATCH_TOKENS`. */
export const envOf = (key: SettingKey) => `CTXPROBE_${key.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;
export const helpOf = (s: Setting) => (typeof s.help === 'function' ? s.help() : s.help);

/** The JSON schema of each setting, for the repository file's. */
export function settingSchemas(): Record<SettingKey, object> {
  const schema = ({ type }: Setting): object => {
    switch (type.kind) {
      case 'text':
        return { type: 'string', minLength: 1 };
      case 'whole':
        return { type: 'integer', minimum: type.min };
      case 'oneOf':
        return { enum: [...type.values] };
      case 'switch':
        return { type: 'boolean' };
    }
  };
  return Object.fromEntries(settingKeys.map((k) => [k, schema(MODEL_SETTINGS[k])])) as Record<SettingKey, object>;
}

/** The settings given in `values` (the others left out, so they do not hide a file's). */
export function givenSettings(values: ModelSettings): ModelSettings {
  return Object.fromEntries(settingKeys.filter((k) => values[k] !== undefined).map((k) => [k, values[k]])) as ModelSettings;
}
