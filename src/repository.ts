// The model repository: one JSON file per served model in `models/`.
//
//   { "name": "llama-3.2-1b", "path": "/models/Llama-3.2-1B", "device": "cuda:0",
//     "dtype": "float16", "threads": 0, "maxLength": 4096, "maxBatchTokens": 8192 }
//
// `path` is a Hugging Face checkpoint folder (relative paths start at the repository
// folder). A `synthetic` block makes the checkpoint on first use when the folder is
// missing: that is how the small default model exists on a fresh machine.
import fs from 'node:fs';
import path from 'node:path';
import { PACKAGE_ROOT } from './paths.js';
import { writeSyntheticCheckpoint, type SyntheticSpec } from './model/synthetic.js';
import { Engine } from './engine.js';
import { ConfigError } from './errors.js';
import { Scorer } from './scoring/scorer.js';
import { Prober } from './probe.js';
import type { ComputeDType } from './dtypes.js';

export interface ModelEntry {
  name: string;
  path: string;
  description?: string;
  device?: string;
  dtype?: ComputeDType;
  threads?: number;
  maxLength?: number;
  maxBatchTokens?: number;
  /** Bytes of one layer's attention a probe pass may hold (default 512 MiB). */
  maxProbeAttentionBytes?: number;
  /** Largest raw-attention answer (default 64 MiB). */
  maxRawAttentionBytes?: number;
  synthetic?: SyntheticSpec;
}

export interface LoadedModel {
  entry: ModelEntry;
  engine: Engine;
  scorer: Scorer;
  prober: Prober;
  loadSeconds: number;
}

export const DEFAULT_REPOSITORY = path.join(PACKAGE_ROOT, 'models');

/** Read every `*.json` model config of a repository folder, sorted by file name. */
export function readRepository(dir: string = DEFAULT_REPOSITORY): ModelEntry[] {
  if (!fs.existsSync(dir)) throw new ConfigError(`model repository ${dir} does not exist`);
  const entries = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => {
      const file = path.join(dir, f);
      let raw: Partial<ModelEntry>;
      try {
        raw = JSON.parse(fs.readFileSync(file, 'utf8'));
      } catch (e) {
        throw new ConfigError(`${file}: not valid JSON (${(e as Error).message})`);
      }
      if (typeof raw.path !== 'string') throw new ConfigError(`${file}: "path" (the checkpoint folder) is required`);
      return { ...raw, name: raw.name ?? path.basename(f, '.json'), path: path.resolve(dir, raw.path) } as ModelEntry;
    });
  const names = new Set<string>();
  for (const e of entries) {
    if (names.has(e.name)) throw new ConfigError(`model name ${e.name} appears twice in ${dir}`);
    names.add(e.name);
  }
  return entries;
}

/** Make the checkpoint of a synthetic entry if it is not there yet. */
export function ensureCheckpoint(entry: ModelEntry): void {
  if (fs.existsSync(path.join(entry.path, 'config.json'))) return;
  if (!entry.synthetic) throw new ConfigError(`model ${entry.name}: ${entry.path} has no config.json`);
  writeSyntheticCheckpoint(entry.path, entry.synthetic);
}

export async function loadModel(entry: ModelEntry): Promise<LoadedModel> {
  const started = performance.now();
  ensureCheckpoint(entry);
  const engine = await Engine.load(entry.path, { device: entry.device, dtype: entry.dtype, threads: entry.threads });
  const scorer = new Scorer(engine, { maxLength: entry.maxLength, maxBatchTokens: entry.maxBatchTokens });
  const prober = new Prober(engine, { maxAttentionBytes: entry.maxProbeAttentionBytes, maxRawBytes: entry.maxRawAttentionBytes });
  return { entry, engine, scorer, prober, loadSeconds: (performance.now() - started) / 1000 };
}
