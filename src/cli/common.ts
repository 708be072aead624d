// What the commands share: argument parsers, texts from files, the JSON log, model flags
// and the entries they select, writing figures.
import fs from 'node:fs';
import path from 'node:path';
import { Command, Option, InvalidArgumentError } from 'commander';
import { DEFAULT_REPOSITORY, loadModel, readRepository, type ModelEntry } from '../serving/repository.js';
import { Service, type ServedModel } from '../serving/service.js';
import { Metrics } from '../serving/metrics.js';
import {
  MODEL_SETTINGS,
  envOf,
  flagOf,
  givenSettings,
  helpOf,
  settingKeys,
  type ModelSettings,
  type Setting,
} from '../serving/model-settings.js';

/** A whole number of at least `min` (a flag's value; `name` names it when it is not). */
export const whole = (name: string, min: number) => (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`${name} must be a whole number ≥ ${min}`);
  return n;
};

export const int = (name: string) => whole(name, 0);

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

/** The model flags: `--model`, and every setting of serving/model-settings.ts that has one. */
export interface ModelFlags extends ModelSettings {
  model?: string;
}

/** Inline chunks: `label=text` each (`label=@FILE` reads the text from FILE). */
export function chunkArguments(values: string[]): { label: string; text: string }[] {
  return values.map((c) => {
    const eq = c.indexOf('=');
    if (eq <= 0) throw new InvalidArgumentError(`--chunk ${JSON.stringify(c)}: write label=text`);
    return { label: c.slice(0, eq), text: textArgument(c.slice(eq + 1), `--chunk ${c.slice(0, eq)}`) };
  });
}

/** `--model` and a flag for each model setting that has one (serving/model-settings.ts),
 * each also read from its environment variable. */
export function withModelFlags(cmd: Command): Command {
  cmd.addOption(
    new Option('--model <path>', 'a Hugging Face checkpoint folder or a GGUF file (.gguf) (default: the small default model)').env(
      'CTXPROBE_MODEL',
    ),
  );
  for (const key of settingKeys) {
    const setting: Setting = MODEL_SETTINGS[key];
    if (!setting.arg) continue;
    const option = new Option(`${flagOf(key)} ${setting.arg}`, helpOf(setting)).env(envOf(key));
    const { type } = setting;
    switch (type.kind) {
      case 'text':
        break;
      case 'whole':
        option.argParser(whole(flagOf(key).slice(2), type.min));
        break;
      case 'oneOf':
        option.choices(type.values);
        break;
      case 'switch':
        option.argParser(onOff(flagOf(key)));
        break;
    }
    cmd.addOption(option);
  }
  return cmd;
}

const onOff = (flag: string) => (value: string) => {
  if (value !== 'on' && value !== 'off') throw new InvalidArgumentError(`${flag} is on or off`);
  return value === 'on';
};

/** The models to serve, with the flags' settings over theirs: one checkpoint from --model,
 * else every config of the repository (or the entries given, read from it). */
export function entriesFrom(flags: ModelFlags & { models?: string; name?: string }, repository?: ModelEntry[]): ModelEntry[] {
  const overrides = givenSettings(flags);
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
