// Models at the size users run, on this machine: a Llama-3-8B shape as BF16 safetensors (its
// weights zeros in sparse files) and as a Q4_K_M GGUF (llama.cpp's recipe, random blocks:
// its memory is the pages a load really touches), each loaded by ctxprobe in a process of its own — load time, peak
// RSS, a 512-token scoring pass, greedy decode tokens/s — and llama.cpp (node-llama-cpp,
// which bench/peer.ts installs into .bench/peer/) on the same GGUF. Then, on a small model
// with real weights quantized as Q4_K_M, each side's log-prob distance to the exact values:
// a float64 forward pass over the file's dequantized weights (ggml's definition of each
// format), which ctxprobe's exact mode should meet to ~1e-5 and an int8-activation mode
// (ctxprobe's on request, llama.cpp's always) does not. Prints figures, asserts nothing.
//   npx tsx bench/real-models.ts [bf16] [q4km] [int8] [peer] [exactness]   (default: all)
//   npx tsx bench/real-models.ts webgpu-bf16   (the BF16 shape kept as stored on lavapipe: ~20 min)
//   BENCH_THREADS=2 BENCH_TOKENS=512 BENCH_DECODE=8
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { writeZeroCheckpoint } from '../src/model/synthetic.js';
import { LLAMA3_8B, writeZeroLlamaGguf } from '../src/model/synthetic-gguf.js';
import { readGguf } from '../src/checkpoint/gguf.js';
import { BLOCKS, quantTypeOf } from '../src/checkpoint/ggml-blocks.js';
import { randomFillSync } from 'node:crypto';
import { randomIds } from './model.js';

const THREADS = Number(process.env.BENCH_THREADS ?? 2);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 512);
const DECODE = Number(process.env.BENCH_DECODE ?? 8);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const PEER_ENTRY = path.join(ROOT, '.bench/peer/node_modules/node-llama-cpp/dist/index.js');


const GiB = 2 ** 30;
/** The process's resident memory now and at its peak (GiB): its own and mapped files' pages. */
function memory(): { rss: number; peak: number } {
  const status = fs.readFileSync('/proc/self/status', 'utf8');
  const kb = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+)`).exec(status)![1]) * 1024;
  return { rss: kb('VmRSS') / GiB, peak: kb('VmHWM') / GiB };
}

interface SideResult {
  loadSeconds: number;
  afterLoad: { rss: number; peak: number };
  weights?: string;
  passSeconds: number;
  /** The pass's tokens where not BENCH_TOKENS. */
  passTokens?: number;
  decodeTokensPerSecond: number;
  end: { rss: number; peak: number };
}

// ---- one side, in this process ------------------------------------------------------------
async function ours(model: string, int8: boolean): Promise<SideResult> {
  const { Engine } = await import('../src/engine/engine.js');
  const { Scorer } = await import('../src/core/scorer.js');
  const { Batcher } = await import('../src/core/batcher.js');
  const { Generation, generationModel, runGenerations } = await import('../src/requests/generate.js');
  const started = performance.now();
  const engine = await Engine.load(model, { threads: THREADS, ...(int8 ? { quantizedActivations: 'int8' as const } : {}) } as never);
  const loadSeconds = (performance.now() - started) / 1000;
  const afterLoad = memory();
  const pass = async (tokens: number[]) => {
    const t = performance.now();
    await engine.forward({
      rows: [{ tokens, startPosition: 0, pastRow: 0 }],
      scored: tokens.slice(1).map((target, index) => ({ row: 0, index, target })),
      topK: 0,
      keepPresent: false,
    });
    return (performance.now() - t) / 1000;
  };
  await pass(randomIds(5, 16, LLAMA3_8B.vocab_size));
  const passSeconds = await pass(randomIds(11, TOKENS, LLAMA3_8B.vocab_size));
  // Greedy decode: each step a unit of the scheduler, its KV carried by the prefix cache.
  const scorer = new Scorer(engine);
  const batcher = new Batcher('bench', scorer);
  const steps: number[] = [];
  let last = 0;
  await runGenerations(
    [
      new Generation(generationModel(engine, scorer), randomIds(13, 16, LLAMA3_8B.vocab_size), {
        temperature: 0,
        topP: 1,
        topK: 0,
        minP: 0,
        maxTokens: DECODE,
        stop: [],
        n: 1,
        logprobs: 0,
        ignoreEos: true,
      }),
    ],
    (units, continuing) => batcher.submit(units, { continuing }).result,
    () => {
      const now = performance.now();
      if (last) steps.push(now - last);
      last = now;
    },
  );
  const decodeTokensPerSecond = steps.length / (steps.reduce((a, b) => a + b, 0) / 1000);
  const weights = engine.info.weights;
  await engine.release();
  return { loadSeconds, afterLoad, weights, passSeconds, decodeTokensPerSecond, end: memory() };
}

/** The BF16 shape on WebGPU (lavapipe: the device's memory is this process's), kept as
 * stored: load, memory, and one 4-token pass (the widening of every matrix each pass runs
 * as shaders on the CPU here: minutes). */
async function oursOnWebgpu(model: string): Promise<SideResult> {
  const { Engine } = await import('../src/engine/engine.js');
  const started = performance.now();
  const engine = await Engine.load(model, { device: 'webgpu', threads: THREADS, weightsAtRest: 'stored' });
  const loadSeconds = (performance.now() - started) / 1000;
  const afterLoad = memory();
  const tokens = randomIds(11, 4, LLAMA3_8B.vocab_size);
  const t = performance.now();
  await engine.forward({ rows: [{ tokens, startPosition: 0, pastRow: 0 }], scored: tokens.slice(1).map((target, index) => ({ row: 0, index, target })), topK: 0, keepPresent: false });
  const passSeconds = (performance.now() - t) / 1000;
  const weights = `${engine.info.weights}; ${((await engine.deviceWeights()).bytes / GiB).toFixed(2)} GiB on the device`;
  await engine.release();
  return { loadSeconds, afterLoad, weights, passSeconds, passTokens: tokens.length, decodeTokensPerSecond: NaN, end: memory() };
}

async function llamaCpp(gguf: string): Promise<SideResult> {
  const { getLlama } = await import(pathToFileURL(PEER_ENTRY).href);
  const llama = await getLlama({ gpu: false, logLevel: 'error' });
  const started = performance.now();
  const model = await llama.loadModel({ modelPath: gguf });
  const loadSeconds = (performance.now() - started) / 1000;
  const afterLoad = memory();
  const context = await model.createContext({ contextSize: TOKENS + 64, batchSize: 512, threads: THREADS, flashAttention: false });
  const seq = context.getSequence();
  await seq.evaluateWithoutGeneratingNewTokens(randomIds(5, 16, LLAMA3_8B.vocab_size) as never);
  await seq.clearHistory();
  let t = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(randomIds(11, TOKENS, LLAMA3_8B.vocab_size) as never);
  const passSeconds = (performance.now() - t) / 1000;
  await seq.clearHistory();
  let count = 0;
  t = 0;
  for await (const _ of seq.evaluate(randomIds(13, 16, LLAMA3_8B.vocab_size) as never, { temperature: 0 })) {
    if (count === 0) t = performance.now();
    if (++count >= DECODE) break;
  }
  const decodeTokensPerSecond = (DECODE - 1) / ((performance.now() - t) / 1000);
  await context.dispose();
  await model.dispose();
  return { loadSeconds, afterLoad, passSeconds, decodeTokensPerSecond, end: memory() };
}

// ---- exactness: each side's log-prob distance to the exact values ----------------------------
/** llama.cpp's log-prob of each next token of `rows` (ids), F32 KV, flash attention off. */
async function llamaCppLogprobs(gguf: string, rows: number[][]): Promise<number[][]> {
  const { getLlama } = await import(pathToFileURL(PEER_ENTRY).href);
  const llama = await getLlama({ gpu: false, logLevel: 'error' });
  const model = await llama.loadModel({ modelPath: gguf });
  const context = await model.createContext({
    contextSize: 256,
    batchSize: 256,
    threads: THREADS,
    experimentalKvCacheKeyType: 'F32',
    experimentalKvCacheValueType: 'F32',
    flashAttention: false,
  });
  const seq = context.getSequence();
  const out: number[][] = [];
  for (const tokens of rows) {
    await seq.clearHistory();
    const got = await seq.controlledEvaluate(tokens.slice(0, -1).map((t) => [t, { generateNext: { probabilities: true } }]) as never);
    out.push(tokens.slice(1).map((t, k) => Math.log((got[k] as { next: { probabilities: Map<number, number> } }).next.probabilities.get(t)!)));
  }
  await context.dispose();
  await model.dispose();
  return out;
}

/**
 * A 3-layer llama of hidden 256 (random weights of a large spread: peaked outputs), written as
 * a Q4_K_M-like GGUF (Q6_K v, down and head; Q4_K the rest) and as an F32 GGUF of exactly its
 * dequantized values; the exact log-probs are a float64 forward pass over those values. Each
 * side's mean and largest distance per token: ctxprobe exact and with int8 activations on the
 * quantized file, llama.cpp on both files.
 */
async function exactness(): Promise<void> {
  const { makeFixture } = await import('../test/fixtures.js');
  const { convertToGguf } = await import('../test/gguf-convert.js');
  const { referenceForward } = await import('../test/reference.js');
  const { Engine } = await import('../src/engine/engine.js');
  const fx = makeFixture({ family: 'llama', hidden: 256, layers: 3, heads: 4, kvHeads: 2, intermediate: 512, vocab: 300, maxPositions: 256, seed: 77, scale: 1 });
  const q4km = (name: string) => (/v_proj|down_proj|lm_head/.test(name) ? ('Q6_K' as const) : ('Q4_K' as const));
  const quantized = convertToGguf(fx, path.join(fx.dir, 'exact-q4_k_m.gguf'), { dtype: 'Q4_K', typeOf: q4km });
  const f32 = convertToGguf({ ...fx, tensors: quantized.reference.tensors }, path.join(fx.dir, 'exact-f32.gguf'));
  const rows = [1, 2, 3, 4].map((seed) => randomIds(seed, 128, 300));
  const exact = rows.map((r) => {
    const ref = referenceForward(quantized.reference, r);
    return r.slice(1).map((t, k) => ref.logprobs[k]![t]!);
  });
  const ours = async (int8: boolean) => {
    const e = await Engine.load(quantized.file, { threads: THREADS, ...(int8 ? { quantizedActivations: 'int8' as const } : {}) });
    const out: number[][] = [];
    for (const tokens of rows) {
      const r = await e.forward({ rows: [{ tokens, startPosition: 0, pastRow: 0 }], scored: tokens.slice(1).map((target, index) => ({ row: 0, index, target })), topK: 0, keepPresent: false });
      out.push(Array.from(r.logprobs));
    }
    await e.release();
    return out;
  };
  const distance = (got: number[][]) => {
    const d = got.flatMap((r, i) => r.map((lp, k) => Math.abs(lp - exact[i]![k]!)));
    return `mean ${(d.reduce((a, b) => a + b, 0) / d.length).toExponential(2)}, max ${Math.max(...d).toExponential(2)} nats a token`;
  };
  console.log(`exactness: a 3-layer llama of hidden 256, Q4_K_M-like (Q4_K, Q6_K), ${rows.length} × 127 tokens, against a float64 pass over its dequantized values`);
  console.log(`  ctxprobe exact (float32 activations)  ${distance(await ours(false))}`);
  console.log(`  ctxprobe --quantized-activations int8 ${distance(await ours(true))}`);
  if (!fs.existsSync(PEER_ENTRY)) console.log('  llama.cpp: run bench/peer.ts once first (it installs node-llama-cpp into .bench/peer/)');
  else {
    console.log(`  llama.cpp on the Q4_K_M file          ${distance(await llamaCppLogprobs(quantized.file, rows))}`);
    console.log(`  llama.cpp on the F32 file of its values ${distance(await llamaCppLogprobs(f32.file, rows))}`);
  }
}

function child(args: string[]): SideResult {
  const out = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--side', ...args], { cwd: ROOT, encoding: 'utf8' });
  const line = out.stdout.split('\n').find((l) => l.startsWith('{'));
  if (out.status !== 0 || !line) throw new Error(`${args.join(' ')} failed (${out.status ?? out.signal}): ${out.stderr.slice(-2000)}`);
  return JSON.parse(line);
}

const args = process.argv.slice(2);
if (args[0] === '--side') {
  const result = args[1] === 'llama.cpp' ? await llamaCpp(args[2]!) : args[1] === 'webgpu' ? await oursOnWebgpu(args[2]!) : await ours(args[2]!, args[3] === 'int8');
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exit(0);
}

/** Fill a GGUF's quantized tensors with random blocks whose f16 scales are small and finite
 * (a file of zeros is holes: pages never touched say nothing of memory); its norms stay
 * zeros. Returns the file's size. */
function writeRandomBlocks(file: string, size: number): number {
  const g = readGguf(file);
  const fd = fs.openSync(file, 'r+');
  try {
    for (const t of g.tensors.values()) {
      const type = quantTypeOf(t.type);
      if (!type) continue;
      const { bytes } = BLOCKS[type];
      // Where each block's f16 scales lie: Q6_K's d last, the others' d (and dmin) first.
      const scales = type === 'Q6_K' ? [208] : type === 'Q4_K' || type === 'Q5_K' || type === 'Q4_1' ? [0, 2] : [0];
      const chunk = Buffer.alloc(bytes * 65536);
      for (let done = 0; done < t.bytes; done += chunk.length) {
        const n = Math.min(chunk.length, t.bytes - done);
        randomFillSync(chunk, 0, n);
        for (let b = 0; b < n; b += bytes) for (const at of scales) chunk.writeUInt16LE(0x1400 + (chunk[b + at]! & 0xff), b + at);
        fs.writeSync(fd, chunk, 0, n, t.offset + done);
      }
    }
  } finally {
    fs.closeSync(fd);
  }
  return size;
}

// ---- the parent: write the models, run each side ------------------------------------------
const want = (k: string) => args.length === 0 || args.includes(k);
const bf16Dir = path.join(os.tmpdir(), 'ctxprobe-bench-llama3-8b-bf16');
const ggufFile = path.join(os.tmpdir(), 'ctxprobe-bench-llama3-8b-q4_k_m.gguf');
const wantsGguf = ['q4km', 'int8', 'peer'].some(want);
// Only when asked: on lavapipe the 4-token pass of the 8B shape takes minutes.
const wantsWebgpu = args.includes('webgpu-bf16');
if ((want('bf16') || wantsWebgpu) && !fs.existsSync(path.join(bf16Dir, 'config.json')))
  writeZeroCheckpoint(
    bf16Dir,
    { family: 'llama', hidden: 4096, layers: 32, heads: 32, kvHeads: 8, intermediate: 14336, vocab: 384, vocabSize: 128256, maxPositions: 8192, ropeTheta: 500000 },
    'bfloat16',
    4,
  );
const ggufBytes = !wantsGguf ? 0 : fs.existsSync(ggufFile) ? fs.statSync(ggufFile).size : writeRandomBlocks(ggufFile, writeZeroLlamaGguf(ggufFile, LLAMA3_8B, 'q4_k_m'));
const bf16Bytes = !want('bf16') && !wantsWebgpu ? 0 : fs.readdirSync(bf16Dir).filter((f) => f.endsWith('.safetensors')).reduce((n, f) => n + fs.statSync(path.join(bf16Dir, f)).size, 0);

if (want('bf16') || wantsGguf) console.log(
  `Llama-3-8B shape (BF16 zeros, Q4_K_M random blocks); ${THREADS} threads, ${os.cpus()[0]?.model ?? 'cpu'}, ${(os.totalmem() / GiB).toFixed(0)} GiB; ` +
    `a ${TOKENS}-token scoring pass, ${DECODE} greedy tokens after a 16-token prompt`,
);
const show = (name: string, fileBytes: number, r: SideResult) =>
  console.log(
    `${name.padEnd(26)} load ${r.loadSeconds.toFixed(1)} s, peak RSS ${r.end.peak.toFixed(2)} GiB (${(r.end.peak / (fileBytes / GiB)).toFixed(2)}x the file's ${(fileBytes / GiB).toFixed(2)} GiB; ` +
      `${r.afterLoad.peak.toFixed(2)} by the end of the load), ${r.passTokens ?? TOKENS} tokens in ${r.passSeconds.toFixed(1)} s (${((r.passTokens ?? TOKENS) / r.passSeconds).toFixed(r.passTokens ? 3 : 1)} tokens/s)` +
      `${Number.isFinite(r.decodeTokensPerSecond) ? `, decode ${r.decodeTokensPerSecond.toFixed(2)} tokens/s` : ''}${r.weights ? ` — ${r.weights}` : ''}`,
  );
const results = new Map<string, SideResult>();
const run = (name: string, fileBytes: number, sideArgs: string[]) => {
  try {
    const r = child(sideArgs);
    results.set(name, r);
    show(name, fileBytes, r);
  } catch (e) {
    console.log(`${name.padEnd(26)} ${(e as Error).message.split('\n').slice(0, 3).join(' ')}`);
  }
};
if (want('bf16')) run('ctxprobe BF16 safetensors', bf16Bytes, ['ours', bf16Dir]);
if (want('q4km')) run('ctxprobe Q4_K_M GGUF', ggufBytes, ['ours', ggufFile]);
if (wantsWebgpu) run('ctxprobe BF16, WebGPU', bf16Bytes, ['webgpu', bf16Dir]);
if (want('int8')) run('ctxprobe Q4_K_M, int8 act.', ggufBytes, ['ours', ggufFile, 'int8']);
if (want('peer')) {
  if (!fs.existsSync(PEER_ENTRY)) console.log('llama.cpp: run bench/peer.ts once first (it installs node-llama-cpp into .bench/peer/)');
  else run('llama.cpp Q4_K_M GGUF', ggufBytes, ['llama.cpp', ggufFile]);
}
if (want('exactness')) await exactness();
const peer = results.get('llama.cpp Q4_K_M GGUF');
for (const name of ['ctxprobe Q4_K_M GGUF', 'ctxprobe Q4_K_M, int8 act.']) {
  const r = results.get(name);
  if (peer && r)
    console.log(
      `${name} ÷ llama.cpp: pass ${(peer.passSeconds / r.passSeconds).toFixed(2)}x its speed, decode ${(r.decodeTokensPerSecond / peer.decodeTokensPerSecond).toFixed(2)}x, peak RSS ${(r.end.peak / peer.end.peak).toFixed(2)}x`,
    );
}
