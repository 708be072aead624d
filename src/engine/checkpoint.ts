// What a model is loaded from: a Hugging Face checkpoint folder (config.json, safetensors,
// tokenizer.json) or one GGUF file. Either gives the same things — a parsed config, a
// weight source, the tensors' shapes for the config checks, the float tensors' bytes for
// the scan, the stored dtype and the tokenizer — after the same checks, cheapest first:
// config values, then the files' headers, then the config against the headers' shapes.
import fs from 'node:fs';
import path from 'node:path';
import { SafetensorsCheckpoint } from '../checkpoint/safetensors.js';
import { HfQuantizedCheckpoint } from '../checkpoint/hf-quantized-weights.js';
import { GGML_TYPES, ggmlTypeName, readGguf, type GgufTensorInfo } from '../checkpoint/gguf.js';
import { quantTypeOf, repackedBytes } from '../checkpoint/ggml-blocks.js';
import type { StoredShape } from './memory.js';
import { ggufModel } from '../checkpoint/gguf-arch.js';
import { GgufCheckpoint } from '../checkpoint/gguf-weights.js';
import type { TensorBytes } from '../checkpoint/validate.js';
import { CheckpointError } from '../common/errors.js';
import type { CheckpointLinks } from '../checkpoint/files.js';
import { readModelConfig } from '../model/config.js';
import { ggufModelConfig } from '../model/gguf-config.js';
import { checkTensorsAgainstConfig } from '../model/config-checks.js';
import type { ModelConfig } from '../model/families.js';
import type { WeightSource } from '../model/decoder.js';
import { TextTokenizer } from '../text/tokenizer.js';

export interface OpenedCheckpoint {
  config: ModelConfig;
  weights: WeightSource;
  /** The float tensors' byte ranges, for the scan for NaN and infinity. */
  scan: TensorBytes[];
  /** The dtype the weights are stored in, when the config does not say (the device's choice). */
  storedDtype?: string;
  /** Every stored tensor's dtype (or, quantized, its bytes) and dims, for the memory plan. */
  stored: StoredShape[];
  /** How the weights are stored, in words (the load log, ListModels): `bfloat16 checkpoint`,
   * `F16/Q4_K/Q6_K GGUF`. */
  storage: string;
  /** The checkpoint's name in messages. */
  name: string;
  /** The real paths of the weights files (as the session opens them). */
  files: string[];
  /** The tokenizer, checked against the vocabulary (after the device: it starts no process). */
  tokenizer(): TextTokenizer;
}

/** What `--model` (and a model config's `path`) takes, for the refusal of anything else. */
export const MODEL_PATH_HELP = 'a Hugging Face checkpoint folder (config.json, model.safetensors, tokenizer.json) or a GGUF file (.gguf)';

/** `folder`, `gguf`, or a refusal saying what a model path must be. A path ending in
 * .gguf is read as GGUF whatever it is (a FIFO is then refused as one by the reader); another
 * regular file is GGUF when it starts with the magic. */
export function checkpointKind(p: string): 'folder' | 'gguf' {
  let st: fs.Stats;
  try {
    st = fs.statSync(p);
  } catch (e) {
    throw new CheckpointError(
      `${p}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'does not exist' : 'cannot be read'}; a model is ${MODEL_PATH_HELP}`,
    );
  }
  if (p.toLowerCase().endsWith('.gguf')) return 'gguf';
  if (st.isDirectory()) return 'folder';
  if (st.isFile() && magicOf(p) === 'GGUF') return 'gguf';
  throw new CheckpointError(`${p}: is neither a checkpoint folder nor a GGUF file; a model is ${MODEL_PATH_HELP}`);
}

function magicOf(file: string): string {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  try {
    const buf = Buffer.alloc(4);
    return buf.subarray(0, fs.readSync(fd, buf, 0, 4, 0)).toString('latin1');
  } finally {
    fs.closeSync(fd);
  }
}

/** `links`: where a folder's symlinks may lead (files.ts CheckpointLinks). */
export function openCheckpoint(p: string, links: CheckpointLinks = 'follow'): OpenedCheckpoint {
  return checkpointKind(p) === 'gguf' ? openGguf(p) : openFolder(p, links);
}

function openFolder(dir: string, links: CheckpointLinks): OpenedCheckpoint {
  const config = readModelConfig(dir, links);
  const ckpt = new SafetensorsCheckpoint(dir, links);
  const tokenizer = () => TextTokenizer.load(dir, { bos: config.bosTokenId, eos: config.eosTokenId }, config.vocabSize, links);
  if (config.quantization) return openQuantizedFolder(dir, config, new HfQuantizedCheckpoint(ckpt, config.quantization), tokenizer);
  checkTensorsAgainstConfig(config, ckpt.tensors, dir);
  return {
    config,
    weights: ckpt,
    scan: [...ckpt.tensors].filter(([, t]) => t.dtype !== 'int32').map(([name, t]) => ({ name, ...t })),
    storedDtype: config.torchDtype ?? single(new Set([...ckpt.tensors.values()].map((t) => t.dtype))),
    stored: [...ckpt.tensors.values()].map((t) => ({ dtype: t.dtype, shape: t.shape })),
    storage: `${[...new Set([...ckpt.tensors.values()].map((t) => t.dtype))].join('/')} checkpoint`,
    files: ckpt.files,
    name: path.basename(dir),
    tokenizer,
  };
}

/** A GPTQ / AWQ checkpoint: its quantized linears computed in float32 (as a GGUF's are). */
function openQuantizedFolder(
  dir: string,
  config: ModelConfig,
  ckpt: HfQuantizedCheckpoint,
  tokenizer: () => TextTokenizer,
): OpenedCheckpoint {
  checkTensorsAgainstConfig(config, ckpt.tensors, dir);
  return {
    config,
    weights: ckpt,
    scan: ckpt.scanList(),
    storedDtype: 'float32',
    stored: ckpt.stored(),
    storage: ckpt.storage,
    files: ckpt.ckpt.files,
    name: path.basename(dir),
    tokenizer,
  };
}

function openGguf(file: string): OpenedCheckpoint {
  const g = readGguf(file);
  const model = ggufModel(g);
  const config = ggufModelConfig(model, file);
  const ckpt = new GgufCheckpoint(g, model);
  checkTensorsAgainstConfig(config, ckpt.tensors, file);
  const read = new Set([...model.names.values()].map((ref) => ref.tensor));
  return {
    config,
    weights: ckpt,
    scan: ckpt.scanList(),
    storedDtype: config.torchDtype ?? single(ckpt.dtypes),
    // The tensors the graph reads (rotary factors are read into its tables at load).
    stored: [...g.tensors.values()]
      .filter((t) => read.has(t.name))
      .map((t) => ({ dtype: FLOAT_OF[t.type] ?? 'quantized', shape: [...t.dims].reverse(), bytes: heldBytes(t) })),
    storage: `${[...new Set([...g.tensors.values()].map((t) => GGML_TYPES[t.type]?.name ?? ggmlTypeName(t.type)))].join('/')} GGUF`,
    files: [path.join(g.dir, g.location)],
    name: path.basename(file),
    tokenizer: () => TextTokenizer.fromGguf(g, { bos: config.bosTokenId, eos: config.eosTokenId }, config.vocabSize),
  };
}

/** A GGUF tensor's bytes at rest: a quantized one's exact form (ggml-blocks.ts) is larger
 * than its blocks (Q4_K 4.5 bits a value → 5.5; Q6_K 6.6 → 12; Q8_0 8.5 → 10). */
function heldBytes(t: GgufTensorInfo): number {
  const type = quantTypeOf(t.type);
  if (!type) return t.bytes;
  const cols = t.dims[0]!;
  return repackedBytes(
    type,
    t.dims.slice(1).reduce((a, b) => a * b, 1),
    cols,
  );
}

const single = <T>(set: Set<T>): T | undefined => (set.size === 1 ? [...set][0] : undefined);

/** The float ggml types as dtypes; any other is quantized (its stored bytes count as they are). */
const FLOAT_OF: Record<number, StoredShape['dtype']> = { 0: 'float32', 1: 'float16', 30: 'bfloat16' };
