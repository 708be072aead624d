// What the commands share: argument parsers, texts from files, the JSON log, model flags
// and the entries they select, writing figures.
import fs from 'node:fs';
import path from 'node:path';
import { Command, Option, InvalidArgumentError } from 'commander';
import { DEFAULT_REPOSITORY, loadModel, readRepository, type ModelEntry } from '../serving/repository.js';
import { Service, type ServedModel } from '../serving/service.js';
import { Metrics } from '../serving/metrics.js';
import type { ComputeDType } from '../common/dtypes.js';
import { CHECKPOINT_LINKS, type CheckpointLinks } from '../checkpoint/files.js';
import { defaultWeightsCache } from '../weights/held-cache.js';

export const int = (name: string) => (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`${name} must be a whole number ≥ 0`);
  return n;
};

export const portOrOff = (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < -1 || n > 65535) throw new InvalidArgumentError('must be a port, 0 (any free port) or -1 (none)');
  return n;
};

/** A text given on the command line: `@FILE` reads FILE (`@@…` is a literal `@…`), `-`
 * reads standard input. */
export function textArgument(value: string, flag: string): string {
  const read = (file: string | number) => {
    try {
      return fs.readFileSync(file, 'utf8');
    } catch (e) {
      throw new InvalidArgumentError(
        `${flag}: cannot read ${file === 0 ? 'standard input' : file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
      );
    }
  };
  if (value === '-') return read(0);
  if (value.startsWith('@@')) return value.slice(1);
  if (value.startsWith('@')) return read(value.slice(1));
  return value;
}

/** glibc raises its mmap threshold after large frees (up to 32 MiB), so the per-layer
 * tensors of a long row come from heap arenas that do not shrink: measured on 32k-token
 * rolling scoring, 3.7 GiB peak above the model vs 2.1 GiB with a fixed 1 MiB threshold.
 * The variable must be set before the process starts (`npm start` and the images do). */
export function mallocAdvice(): string | undefined {
  const glibc = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header?.glibcVersionRuntime;
  if (process.platform !== 'linux' || !glibc || process.env.MALLOC_MMAP_THRESHOLD_) return undefined;
  return 'MALLOC_MMAP_THRESHOLD_ is not set: glibc keeps the memory of long rows in its heap (32k-token rolling scoring peaks at 3.7 GiB above the model instead of 2.1 GiB); start with MALLOC_MMAP_THRESHOLD_=1048576 (npm start and the container images do)';
}

export const log = (line: Record<string, unknown>) =>
  process.stderr.write(JSON.stringify({ time: new Date().toISOString(), ...line }) + '\n');

export interface ModelFlags {
  model?: string;
  cpuMemArena?: 'on' | 'off';
  gpuBufferCache?: 'bucket' | 'simple';
  probeSession?: 'separate' | 'shared';
  device?: string;
  dtype?: ComputeDType;
  threads?: number;
  maxLength?: number;
  maxBatchTokens?: number;
  prefixCacheBytes?: number;
  quantizedActivations?: 'float32' | 'int8';
  quantize?: 'q8_0' | 'q4_0' | 'q4_k';
  weightsAtRest?: 'stored' | 'compute';
  checkpointLinks?: CheckpointLinks;
  weightsCache?: string;
}

/** Inline chunks: `label=text` each (`label=@FILE` reads the text from FILE). */
export function chunkArguments(values: string[]): { label: string; text: string }[] {
  return values.map((c) => {
    const eq = c.indexOf('=');
    if (eq <= 0) throw new InvalidArgumentError(`--chunk ${JSON.stringify(c)}: write label=text`);
    return { label: c.slice(0, eq), text: textArgument(c.slice(eq + 1), `--chunk ${c.slice(0, eq)}`) };
  });
}

export function withModelFlags(cmd: Command): Command {
  return cmd
    .addOption(
      new Option('--model <path>', 'a Hugging Face checkpoint folder or a GGUF file (.gguf) (default: the small default model)').env(
        'CTXPROBE_MODEL',
      ),
    )
    .addOption(new Option('--device <device>', 'cpu, webgpu, cuda or cuda:N').env('CTXPROBE_DEVICE'))
    .addOption(new Option('--dtype <dtype>', 'compute dtype').choices(['float32', 'float16', 'bfloat16']).env('CTXPROBE_DTYPE'))
    .addOption(new Option('--threads <n>', 'CPU threads (0: one per core)').argParser(int('threads')).env('CTXPROBE_THREADS'))
    .addOption(
      new Option('--cpu-mem-arena <on|off>', "onnxruntime's CPU memory arena (default off: memory goes back after large requests)")
        .choices(['on', 'off'])
        .env('CTXPROBE_CPU_MEM_ARENA'),
    )
    .addOption(
      new Option(
        '--gpu-buffer-cache <mode>',
        "WebGPU's buffer cache: bucket (default), or simple (faster when shapes repeat; keeps every buffer size it has used)",
      )
        .choices(['bucket', 'simple'])
        .env('CTXPROBE_GPU_BUFFER_CACHE'),
    )
    .addOption(
      new Option(
        '--probe-session <mode>',
        'WebGPU: probes in a session of their own (separate, default) or one session for every pass (shared: every pass dispatches the probe nodes); either way one copy of the weights on the device',
      )
        .choices(['separate', 'shared'])
        .env('CTXPROBE_PROBE_SESSION'),
    )
    .addOption(
      new Option('--max-length <n>', "context length (default: the model's)").argParser(int('max-length')).env('CTXPROBE_MAX_LENGTH'),
    )
    .addOption(
      new Option('--max-batch-tokens <n>', 'padded tokens per forward pass')
        .argParser(int('max-batch-tokens'))
        .env('CTXPROBE_MAX_BATCH_TOKENS'),
    )
    .addOption(
      new Option('--prefix-cache-bytes <n>', 'KV bytes of the prefix cache kept across requests (default 1 GiB; 0: none)')
        .argParser(int('prefix-cache-bytes'))
        .env('CTXPROBE_PREFIX_CACHE_BYTES'),
    )
    .addOption(
      new Option(
        '--quantized-activations <type>',
        "quantized weights' products: float32 activations (default: exact, the file's model) or int8 (faster, approximate, as llama.cpp)",
      )
        .choices(['float32', 'int8'])
        .env('CTXPROBE_QUANTIZED_ACTIVATIONS'),
    )
    .addOption(
      new Option(
        '--quantize <type>',
        "quantize float matrices at load (approximate: the numbers are no longer the checkpoint's), then compute them exactly as a GGUF of that type",
      )
        .choices(['q8_0', 'q4_0', 'q4_k'])
        .env('CTXPROBE_QUANTIZE'),
    )
    .addOption(
      new Option(
        '--weights-at-rest <how>',
        'BF16 / F16 weights computed in float32, CPU and WebGPU: stored (two bytes a weight, each matrix widened for its product, exactly) or compute (widened at load) (default: widened where that fits in memory)',
      )
        .choices(['stored', 'compute'])
        .env('CTXPROBE_WEIGHTS_AT_REST'),
    )
    .addOption(
      new Option(
        '--checkpoint-links <how>',
        "where a checkpoint folder's symlinks may lead: follow (default: anywhere, as transformers) or contain (only inside the folder, or a Hugging Face cache's blobs/)",
      )
        .choices([...CHECKPOINT_LINKS])
        .env('CTXPROBE_CHECKPOINT_LINKS'),
    )
    .addOption(
      new Option(
        '--weights-cache <dir|off>',
        `where a model's repacked (quantized) weights are kept between starts, so a restart maps them instead of repacking (default: ${defaultWeightsCache()}; off: none)`,
      ).env('CTXPROBE_WEIGHTS_CACHE'),
    );
}

/** The models to serve, with the flags' settings over theirs: one checkpoint from --model,
 * else every config of the repository (or the entries given, read from it). */
export function entriesFrom(flags: ModelFlags & { models?: string; name?: string }, repository?: ModelEntry[]): ModelEntry[] {
  const overrides = {
    ...(flags.device !== undefined && { device: flags.device }),
    ...(flags.dtype !== undefined && { dtype: flags.dtype }),
    ...(flags.threads !== undefined && { threads: flags.threads }),
    ...(flags.cpuMemArena !== undefined && { cpuMemArena: flags.cpuMemArena === 'on' }),
    ...(flags.gpuBufferCache !== undefined && { gpuBufferCache: flags.gpuBufferCache }),
    ...(flags.probeSession !== undefined && { probeSession: flags.probeSession }),
    ...(flags.maxLength !== undefined && { maxLength: flags.maxLength }),
    ...(flags.maxBatchTokens !== undefined && { maxBatchTokens: flags.maxBatchTokens }),
    ...(flags.prefixCacheBytes !== undefined && { prefixCacheBytes: flags.prefixCacheBytes }),
    ...(flags.quantizedActivations !== undefined && { quantizedActivations: flags.quantizedActivations }),
    ...(flags.quantize !== undefined && { quantize: flags.quantize }),
    ...(flags.weightsAtRest !== undefined && { weightsAtRest: flags.weightsAtRest }),
    ...(flags.checkpointLinks !== undefined && { checkpointLinks: flags.checkpointLinks }),
    ...(flags.weightsCache !== undefined && { weightsCache: flags.weightsCache }),
  };
  if (flags.model) {
    const dir = path.resolve(flags.model);
    return [{ name: flags.name ?? path.basename(dir).replace(/\.gguf$/i, ''), path: dir, ...overrides }];
  }
  return (repository ?? readRepository(flags.models ?? DEFAULT_REPOSITORY)).map((e) => ({ ...e, ...overrides }));
}

/** Write a figure or report where the user asked, making its folder (`--svg out/attr`). */
export function writeFile(file: string, content: string): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, content);
}

/** `--interventions remove,mask`. */
export const interventionList = (value: string) => {
  const list = value.split(',').map((v) => v.trim());
  for (const v of list)
    if (v !== 'remove' && v !== 'mask') throw new InvalidArgumentError(`unknown intervention ${JSON.stringify(v)} (remove, mask)`);
  return list as ('remove' | 'mask')[];
};

/** `--sweep 0,1,all`: history turns to keep (`all`: every turn). */
export const sweepList = (value: string) =>
  value.split(',').map((v) => {
    if (v.trim() === 'all') return 2 ** 31 - 1;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0)
      throw new InvalidArgumentError(`history sweep values are whole numbers ≥ 0 or "all" (got ${JSON.stringify(v)})`);
    return n;
  });

/** A model served in this process, through the serving layer as a client's call is: its
 * limits, batcher, prefix cache and metrics (one-off commands and `generate` take the
 * same door as the server's routes). */
export async function serveInProcess(entry: ModelEntry): Promise<{ service: Service; model: ServedModel; close(): Promise<void> }> {
  // One call: the text is tokenised on this thread, as before (a tokenizer worker would
  // parse tokenizer.json again at start-up for nothing).
  const service = new Service(new Metrics(), { tokenizerWorkers: 0 });
  const model = service.addModel(await loadModel(entry));
  service.setServing();
  return {
    service,
    model,
    close: async () => {
      await service.drain();
      await model.engine.release();
    },
  };
}
