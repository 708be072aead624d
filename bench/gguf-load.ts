// The bench model loaded from its safetensors folder and from the F32 GGUF llama.cpp's
// converter would write (bench/gguf.ts: q/k rows permuted), each in a process of its own:
// load time, RSS (the process's own, and the weight files' mapped pages) after load and
// after a 512-token pass, the pass's time, and the largest log-prob difference between
// the two (0: the q/k rows put back by a Gather that onnxruntime folds at load give the
// same bits as the unpermuted file). Prints figures, asserts nothing.
//   npx tsx bench/gguf-load.ts
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchModelDir, randomIds } from './model.js';
import { writeLlamaGguf } from './gguf.js';

/** Resident MiB: the process's own memory and the mapped files' pages (the weights in place). */
const rssMiB = () => {
  const status = fs.readFileSync('/proc/self/status', 'utf8');
  const kb = (key: string) => Math.round(Number(new RegExp(`${key}:\\s+(\\d+)`).exec(status)![1]) / 1024);
  return { anon: kb('RssAnon'), file: kb('RssFile') };
};

/** One side in this process: load, one pass, and what it cost. */
async function side(model: string): Promise<void> {
  const { Engine } = await import('../src/engine/engine.js');
  const started = performance.now();
  const engine = await Engine.load(model, { threads: 2 });
  const loadSeconds = (performance.now() - started) / 1000;
  const afterLoad = rssMiB();
  const tokens = randomIds(11, 512);
  const pass = async () => {
    const t = performance.now();
    const out = await engine.forward({
      rows: [{ tokens, startPosition: 0, pastRow: 0 }],
      scored: tokens.slice(1).map((target, index) => ({ row: 0, index, target })),
      topK: 0,
      keepPresent: false,
    });
    return { seconds: (performance.now() - t) / 1000, logprobs: Array.from(out.logprobs) };
  };
  await pass();
  const timed = await pass();
  console.log(
    JSON.stringify({
      loadSeconds,
      sessionSeconds: engine.info.sessionSeconds,
      afterLoad,
      afterPass: rssMiB(),
      pass: timed.seconds,
      logprobs: timed.logprobs,
    }),
  );
  await engine.release();
}

if (process.argv[2]) {
  await side(process.argv[2]);
} else {
  const dir = benchModelDir();
  const file = path.join(os.tmpdir(), 'ctxprobe-bench-llama-56m.gguf');
  if (!fs.existsSync(file)) writeLlamaGguf(dir, file);
  const run = (model: string) => {
    const tsx = path.join(path.dirname(fileURLToPath(import.meta.url)), '../node_modules/.bin/tsx');
    const out = spawnSync(tsx, [fileURLToPath(import.meta.url), model], { encoding: 'utf8' });
    if (out.status !== 0) throw new Error(out.stderr);
    return JSON.parse(out.stdout.trim().split('\n').at(-1)!);
  };
  const [a, b] = [run(dir), run(file)];
  const delta = Math.max(...a.logprobs.map((x: number, i: number) => Math.abs(x - b.logprobs[i])));
  for (const [name, r] of [
    ['safetensors', a],
    ['gguf', b],
  ] as const)
    console.log(
      `${name.padEnd(12)} load ${r.loadSeconds.toFixed(2)} s (session ${r.sessionSeconds.toFixed(2)} s), RSS after load ${r.afterLoad.anon} MiB own + ${r.afterLoad.file} MiB of mapped files, after a 512-token pass of ${(r.pass * 1000).toFixed(0)} ms ${r.afterPass.anon} + ${r.afterPass.file}`,
    );
  console.log(`max |Δ log-prob| over 511 tokens: ${delta}`);
}
