// Worker threads from typed modules in this folder. From dist/ (what ships) a worker is
// its compiled .js file. From src/ (vitest, tsx) Node cannot run the .ts itself: the
// compiled file is used when dist/ holds one at least as new (`npm test` builds first),
// else a one-line bootstrap has tsx compile the .ts in the worker (~0.3 s more per worker
// start, enough to upset tests that time a request's way into the queue).
import fs from 'node:fs';
import { Worker, type WorkerOptions } from 'node:worker_threads';

/** Start the worker module `name` of src/workers/ (e.g. `session`), with its parts in the
 * folder of that name (src/workers/session/). */
export function startWorker(name: string, options: WorkerOptions = {}): Worker {
  const fromSource = import.meta.url.endsWith('.ts');
  const module = new URL(`./${name}${fromSource ? '.ts' : '.js'}`, import.meta.url);
  if (!fromSource) return new Worker(module, options);
  const compiled = new URL(`../../dist/src/workers/${name}.js`, import.meta.url);
  const mtime = (url: URL) => fs.statSync(url, { throwIfNoEntry: false })?.mtimeMs ?? -1;
  // The newest of the module and its parts: a part edited since the build makes dist/ stale.
  const parts = new URL(`./${name}/`, import.meta.url);
  const partTimes = fs.existsSync(parts) ? fs.readdirSync(parts).map((f) => mtime(new URL(f, parts))) : [];
  if (mtime(compiled) >= Math.max(mtime(module), ...partTimes)) return new Worker(compiled, options);
  const boot = `import { tsImport } from ${JSON.stringify(import.meta.resolve('tsx/esm/api'))}; await tsImport(${JSON.stringify(module.href)}, import.meta.url);`;
  return new Worker(new URL(`data:text/javascript,${encodeURIComponent(boot)}`), options);
}
