// The model repository: one JSON file per served model in `models/`.
//
//   { "name": "llama-3.2-1b", "path": "/models/Llama-3.2-1B", "device": "cuda:0",
//     "dtype": "float16", "threads": 0, "maxLength": 4096, "maxBatchTokens": 8192 }
//
// `path` is a Hugging Face checkpoint folder or a GGUF file (relative paths start at the
// repository folder). A `synthetic` block makes the checkpoint on first use when the folder is
// missing: that is how the small default model exists on a fresh machine.
import fs from 'node:fs';
import path from 'node:path';
import { PACKAGE_ROOT } from '../common/paths.js';
import { Ajv } from 'ajv';
import { readJsonObject } from '../checkpoint/files.js';
import { settingSchemas, type ModelSettings } from './model-settings.js';
import { writeSyntheticCheckpoint, type SyntheticSpec } from '../model/synthetic.js';
import { Engine, type EngineOptions } from '../engine/engine.js';
import { MODEL_PATH_HELP, checkpointKind } from '../engine/checkpoint.js';
import { ConfigError } from '../common/errors.js';
import { Scorer } from '../core/scorer.js';
import { Prober } from '../requests/probe.js';
import { encoderFor, type RequestEncoder } from '../requests/scoring.js';
import type { LoadProgressListener } from '../common/load-progress.js';
import { defaultWeightsCache } from '../weights/held-cache.js';

/** A served model: its name, its checkpoint, and its settings (model-settings.ts). */
export interface ModelEntry extends ModelSettings {
  name: string;
  path: string;
  description?: string;
  synthetic?: SyntheticSpec;
  /** The repository file it was read from (not a setting). */
  configFile?: string;
}

export interface LoadedModel {
  entry: ModelEntry;
  engine: Engine;
  scorer: Scorer;
  /** Score requests as units, within the scorer's limits. */
  encoder: RequestEncoder;
  prober: Prober;
  loadSeconds: number;
}

export const DEFAULT_REPOSITORY = path.join(PACKAGE_ROOT, 'models');

const positive = { type: 'integer', minimum: 1 };
const SYNTHETIC_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['family', 'hidden', 'layers', 'heads', 'kvHeads', 'intermediate', 'vocab', 'maxPositions'],
  properties: {
    family: { type: 'string' },
    hidden: positive,
    layers: positive,
    heads: positive,
    kvHeads: positive,
    intermediate: positive,
    vocab: positive,
    vocabSize: positive,
    maxPositions: positive,
    tied: { type: 'boolean' },
    seed: { type: 'integer' },
    scale: { type: 'number', exclusiveMinimum: 0 },
    ropeTheta: { type: 'number', exclusiveMinimum: 0 },
    ropeScaling: { type: 'object' },
    slidingWindow: positive,
    headDim: positive,
    extraConfig: { type: 'object' },
    chatTemplate: { enum: ['chatml'] },
  },
};

/** A model repository file: unknown keys and wrong types are refused, not ignored. */
const ENTRY_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['path'],
  properties: {
    name: { type: 'string', minLength: 1 },
    path: { type: 'string', minLength: 1 },
    description: { type: 'string' },
    ...settingSchemas(),
    synthetic: SYNTHETIC_SCHEMA,
  },
};

const validEntry = new Ajv({ allErrors: false }).compile<Omit<ModelEntry, 'name'> & { name?: string }>(ENTRY_SCHEMA);

/** Read every `*.json` model config of a repository folder, sorted by file name; the first
 * file that is not a model config is an error. */
export function readRepository(dir: string = DEFAULT_REPOSITORY): ModelEntry[] {
  const { entries, failed } = readRepositoryEntries(dir);
  if (failed[0]) throw new ConfigError(failed[0].reason);
  return entries;
}

/** A model config of a repository that cannot be served: its name (the file's when it names
 * none), its file, and why. */
export interface FailedModel {
  name: string;
  file: string;
  reason: string;
}

/** Every `*.json` model config of a repository folder, sorted by file name, and the files
 * that are not one (a later file naming a model again among them). */
export function readRepositoryEntries(dir: string = DEFAULT_REPOSITORY): { entries: ModelEntry[]; failed: FailedModel[] } {
  if (!fs.existsSync(dir)) throw new ConfigError(`model repository ${dir} does not exist`);
  const entries: ModelEntry[] = [];
  const failed: FailedModel[] = [];
  for (const f of fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()) {
    const file = path.join(dir, f);
    try {
      const entry = readEntry(dir, file);
      if (entries.some((e) => e.name === entry.name)) throw new ConfigError(`model name ${entry.name} appears twice in ${dir}`);
      entries.push(entry);
    } catch (e) {
      failed.push({ name: nameIn(file) ?? path.basename(f, '.json'), file, reason: (e as Error).message });
    }
  }
  return { entries, failed };
}

/** The `name` a config file gives, if it can be read at all. */
function nameIn(file: string): string | undefined {
  try {
    const name = JSON.parse(fs.readFileSync(file, 'utf8'))?.name;
    return typeof name === 'string' && name.length > 0 ? name : undefined;
  } catch {
    return undefined;
  }
}

function readEntry(dir: string, file: string): ModelEntry {
  const raw = readJsonObject(file, ConfigError);
  if ('maxProbeAttentionBytes' in raw)
    throw new ConfigError(
      `${file}: maxProbeAttentionBytes is gone: probes share passes with scores, all under maxAttentionBytes (default 192 MiB); remove the key or move its value there`,
    );
  if (!validEntry(raw)) {
    const e = validEntry.errors![0]!;
    const at = e.instancePath.replace(/^\//, '').replaceAll('/', '.');
    const key =
      e.keyword === 'additionalProperties'
        ? String(e.params.additionalProperty)
        : e.keyword === 'required'
          ? String(e.params.missingProperty)
          : '';
    const field = [at, key].filter(Boolean).join('.');
    const why =
      e.keyword === 'additionalProperties'
        ? 'is not a setting ctxprobe knows (misspelt?)'
        : e.keyword === 'required'
          ? 'is required'
          : e.message;
    throw new ConfigError(`${file}: ${field || 'the file'} ${why}`);
  }
  const cache = raw.weightsCache !== undefined && raw.weightsCache !== 'off' ? { weightsCache: path.resolve(dir, raw.weightsCache) } : {};
  return { ...raw, ...cache, name: raw.name ?? path.basename(file, '.json'), path: path.resolve(dir, raw.path), configFile: file };
}

/** Make the checkpoint of a synthetic entry if it is not there yet. It is written into a
 * temporary folder beside its place and renamed into it when complete, so a process
 * killed halfway leaves nothing that a later start would take for a checkpoint. */
export function ensureCheckpoint(entry: ModelEntry): void {
  // A GGUF file is read as it is (a path that is neither a folder nor a GGUF file is refused, saying what a model is).
  if (!entry.synthetic && checkpointKind(entry.path) === 'gguf') return;
  const configFile = path.join(entry.path, 'config.json');
  if (fs.existsSync(configFile)) {
    // A generated checkpoint is made again when its spec changed (an older release's
    // default model had no chat template): config.json records the spec it came from.
    if (!entry.synthetic || generatedFrom(configFile) === JSON.stringify(entry.synthetic)) return;
  } else if (!entry.synthetic)
    throw new ConfigError(`model ${entry.name}: ${entry.path} has no config.json; a model is ${MODEL_PATH_HELP}`);
  const parent = path.dirname(entry.path);
  fs.mkdirSync(parent, { recursive: true });
  const temp = fs.mkdtempSync(path.join(parent, `.${path.basename(entry.path)}.partial-`));
  try {
    writeSyntheticCheckpoint(temp, entry.synthetic);
    const config = JSON.parse(fs.readFileSync(path.join(temp, 'config.json'), 'utf8'));
    fs.writeFileSync(path.join(temp, 'config.json'), JSON.stringify({ ...config, [GENERATED_FROM]: entry.synthetic }, null, 2));
    // A folder without config.json here is not a checkpoint (an earlier, interrupted
    // writer's): ours replaces it.
    fs.rmSync(entry.path, { recursive: true, force: true });
    fs.renameSync(temp, entry.path);
  } catch (e) {
    fs.rmSync(temp, { recursive: true, force: true });
    // Another process may have completed the same checkpoint first.
    if (!fs.existsSync(path.join(entry.path, 'config.json'))) throw e;
  }
}

/** The config.json key of a generated checkpoint that holds its synthetic spec. */
const GENERATED_FROM = 'ctxprobe_generated_from';

function generatedFrom(configFile: string): string | undefined {
  try {
    const spec = JSON.parse(fs.readFileSync(configFile, 'utf8'))[GENERATED_FROM];
    return spec === undefined ? undefined : JSON.stringify(spec);
  } catch {
    return undefined;
  }
}

/** What the engine is asked for `entry`: its device and weights settings, and what its
 * scorer's passes will be (for the memory plan: the scorer's own settings). */
export function engineOptionsOf(entry: ModelEntry): EngineOptions {
  return {
    device: entry.device,
    dtype: entry.dtype,
    threads: entry.threads,
    cpuMemArena: entry.cpuMemArena,
    ...(entry.gpuBufferCache !== undefined && { bufferCache: entry.gpuBufferCache }),
    ...(entry.probeSession !== undefined && { probeSession: entry.probeSession }),
    ...(entry.quantizedActivations !== undefined && { quantizedActivations: entry.quantizedActivations }),
    ...(entry.quantize !== undefined && { quantize: entry.quantize }),
    ...(entry.weightsAtRest !== undefined && { weightsAtRest: entry.weightsAtRest }),
    ...(entry.checkpointLinks !== undefined && { checkpointLinks: entry.checkpointLinks }),
    ...(entry.weightsCache !== 'off' && { weightsCache: entry.weightsCache ?? defaultWeightsCache() }),
    passLimits: {
      maxBatchTokens: entry.maxBatchTokens,
      maxAttentionBytes: entry.maxAttentionBytes,
      prefixCacheBytes: entry.prefixCacheBytes,
    },
  };
}

/** Load `entry`'s model; `progress` hears each step of the load (common/load-progress.ts). */
export async function loadModel(entry: ModelEntry, progress?: LoadProgressListener): Promise<LoadedModel> {
  const started = performance.now();
  ensureCheckpoint(entry);
  const engine = await Engine.load(entry.path, { ...engineOptionsOf(entry), ...(progress && { progress }) });
  const scorer = new Scorer(engine, {
    maxLength: entry.maxLength,
    maxBatchTokens: entry.maxBatchTokens,
    maxAttentionBytes: entry.maxAttentionBytes,
    prefixCacheBytes: entry.prefixCacheBytes,
  });
  const prober = new Prober(engine, {
    maxRawBytes: entry.maxRawAttentionBytes,
    scorer,
  });
  const encoder = encoderFor(scorer, entry.maxContinuations);
  return { entry, engine, scorer, encoder, prober, loadSeconds: (performance.now() - started) / 1000 };
}
