// A weights file changed under a running server (truncated, rewritten in place): the server
// stays up, answers with the weights it loaded, and says what happened. onnxruntime keeps the
// file memory-mapped for the weights it does not copy at load (the embedding, norm weights,
// biases): a truncation used to kill the process with SIGBUS at the next request, logging
// nothing. Those weights are now read into a private copy at load (graph/held-weights.ts).
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { WeightFiles } from '../src/checkpoint/weight-files.js';
import { WeightsWatch } from '../src/serving/weights-watch.js';
import type { EngineWeights } from '../src/engine/engine.js';
import { serveCli, type Served } from './cli-serve.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { postJson } from './helpers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every prompt token's log-prob, as /v1/completions echoes them (the embedding, every norm
 * and every product weight take part). */
async function logprobs(s: Served): Promise<number[]> {
  const res = await postJson(`http://127.0.0.1:${s.httpPort}`, '/v1/completions', {
    prompt: 'The tower was designed by Gustave Eiffel.',
    max_tokens: 0,
    echo: true,
    logprobs: 1,
  });
  expect(res.status, res.text).toBe(200);
  return res.body.choices[0].logprobs.token_logprobs.slice(1);
}

async function lineOf(s: Served, event: string): Promise<Record<string, any>> {
  for (let t = 0; t < 200 && !s.lines.some((l) => l.event === event); t++) await sleep(25);
  return s.lines.find((l) => l.event === event)!;
}

describe('a weights file changed under ctxprobe serve (CPU)', () => {
  it('truncated: the next requests get the same numbers, the process stays up, an error line names the file', async () => {
    const dir = makeFixture(FAMILY_FIXTURES['llama-bias']!).dir;
    const file = path.join(fs.realpathSync(dir), 'model.safetensors');
    const s = await serveCli(dir);
    try {
      const loaded = await lineOf(s, 'model_loaded');
      // Nothing of the weights file is left mapped: the weights onnxruntime would have read
      // from it are held in a private copy (embedding, norms, biases: a few KiB here).
      expect(loaded.weightsMapped).toEqual([]);
      expect(loaded.heldWeightBytes).toBeGreaterThan(0);
      const before = await logprobs(s);
      fs.truncateSync(file, 0);
      expect(await logprobs(s)).toEqual(before);
      expect(await logprobs(s)).toEqual(before);
      expect(s.child.exitCode).toBeNull();
      const line = await lineOf(s, 'weights_changed');
      expect(line).toMatchObject({ level: 'error', file, change: expect.stringMatching(/^truncated from \d+ to 0 bytes$/) });
      expect(line.message).toMatch(/goes on answering with the weights it loaded/);
      expect(s.lines.filter((l) => l.event === 'weights_changed')).toHaveLength(1);
      expect(await s.stop()).toBe(0);
    } finally {
      s.child.kill('SIGKILL');
    }
  }, 60_000);

  it('rewritten in place (same size, other bytes): the same numbers, and an error line says so', async () => {
    const dir = makeFixture(FAMILY_FIXTURES.llama!).dir;
    const file = path.join(fs.realpathSync(dir), 'model.safetensors');
    const s = await serveCli(dir);
    try {
      const before = await logprobs(s);
      const size = fs.statSync(file).size;
      const fd = fs.openSync(file, 'r+');
      const headerEnd = 8 + Number(fs.readFileSync(file).readBigUInt64LE(0));
      fs.writeSync(fd, Buffer.alloc(size - headerEnd, 0x41), 0, size - headerEnd, headerEnd);
      fs.closeSync(fd);
      fs.utimesSync(file, new Date(), new Date(Date.now() + 5000)); // a new mtime, whatever the clock's grain
      expect(fs.statSync(file).size).toBe(size);
      expect(await logprobs(s)).toEqual(before);
      const line = await lineOf(s, 'weights_changed');
      expect(line).toMatchObject({ level: 'error', file, change: expect.stringMatching(/^rewritten in place/) });
      expect(s.child.exitCode).toBeNull();
      expect(await s.stop()).toBe(0);
    } finally {
      s.child.kill('SIGKILL');
    }
  }, 60_000);
});

describe('the weights watch', () => {
  const watched = (held: boolean, file: string) => ({
    entry: { name: 'm' },
    engine: { weights: { dir: path.dirname(file), files: new WeightFiles([file]), held, heldBytes: 0 } satisfies EngineWeights },
  });

  it('refuses a model that reads a changed file in place (FAILED_PRECONDITION), telling it once', () => {
    const file = path.join(tempDir('watch'), 'w.bin');
    fs.writeFileSync(file, Buffer.alloc(64));
    const lines: Record<string, unknown>[] = [];
    const refused: [string, Error][] = [];
    const watch = new WeightsWatch(
      (l) => lines.push(l),
      (model, err) => refused.push([model, err]),
    );
    const inPlace = watched(false, file);
    watch.check(inPlace);
    expect(lines).toEqual([]);
    fs.truncateSync(file, 8);
    watch.check(inPlace);
    watch.check(inPlace);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 'error', event: 'weights_changed', model: 'm', file, change: 'truncated from 64 to 8 bytes' });
    expect(refused).toHaveLength(1);
    expect(refused[0]![0]).toBe('m');
    expect(refused[0]![1]).toMatchObject({ kind: 'checkpoint', message: expect.stringContaining(file) });
  });

  it('keeps a model whose weights are held answering, and notices a replaced file', () => {
    const file = path.join(tempDir('watch'), 'w.bin');
    fs.writeFileSync(file, Buffer.alloc(64));
    const lines: Record<string, unknown>[] = [];
    const refused: string[] = [];
    const watch = new WeightsWatch(
      (l) => lines.push(l),
      (model) => refused.push(model),
    );
    const held = watched(true, file);
    fs.writeFileSync(`${file}.new`, Buffer.alloc(64));
    fs.renameSync(`${file}.new`, file);
    watch.check(held);
    expect(lines[0]).toMatchObject({ event: 'weights_changed', change: 'replaced by another file' });
    expect(refused).toEqual([]);
  });
});
