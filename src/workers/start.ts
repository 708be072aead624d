// Worker threads and child processes from typed modules in this folder. From dist/ (what
// ships) a worker is its compiled .js file. From src/ (vitest, tsx) Node cannot run the .ts
// itself: the compiled file is used when dist/ holds one at least as new (`npm test` builds
// first), else tsx compiles the .ts as it starts (a worker thread through a one-line
// bootstrap, ~0.3 s more per worker start, enough to upset tests that time a request's way
// into the queue; a process through `--import tsx`).
import { fork, type ChildProcess, type ForkOptions } from 'node:child_process';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker, type WorkerOptions } from 'node:worker_threads';

/** The file that runs worker module `name`: compiled (.js), or its source (.ts) when dist/
 * lacks it or is older than the module or one of its parts (src/workers/NAME/). */
function moduleOf(name: string): { url: URL; source: boolean } {
  const fromSource = import.meta.url.endsWith('.ts');
  const module = new URL(`./${name}${fromSource ? '.ts' : '.js'}`, import.meta.url);
  if (!fromSource) return { url: module, source: false };
  const compiled = new URL(`../../dist/src/workers/${name}.js`, import.meta.url);
  const mtime = (url: URL) => fs.statSync(url, { throwIfNoEntry: false })?.mtimeMs ?? -1;
  // The newest of the module and its parts: a part edited since the build makes dist/ stale.
  const parts = new URL(`./${name}/`, import.meta.url);
  const partTimes = fs.existsSync(parts) ? fs.readdirSync(parts).map((f) => mtime(new URL(f, parts))) : [];
  if (mtime(compiled) >= Math.max(mtime(module), ...partTimes)) return { url: compiled, source: false };
  return { url: module, source: true };
}

/** Start the worker module `name` of src/workers/ (e.g. `session`), with its parts in the
 * folder of that name (src/workers/session/). */
export function startWorker(name: string, options: WorkerOptions = {}): Worker {
  const { url, source } = moduleOf(name);
  if (!source) return new Worker(url, options);
  const boot = `import { tsImport } from ${JSON.stringify(import.meta.resolve('tsx/esm/api'))}; await tsImport(${JSON.stringify(url.href)}, import.meta.url);`;
  return new Worker(new URL(`data:text/javascript,${encodeURIComponent(boot)}`), options);
}

/** Start the worker module `name` of src/workers/ in a process of its own, with an IPC
 * channel (its `execArgv` replace this process's, which it does not inherit). */
export function forkWorker(name: string, options: ForkOptions = {}): ChildProcess {
  const { url, source } = moduleOf(name);
  const execArgv = [...(options.execArgv ?? []), ...(source ? ['--import', import.meta.resolve('tsx')] : [])];
  return fork(fileURLToPath(url), [], { ...options, execArgv });
}
