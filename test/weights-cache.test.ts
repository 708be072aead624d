// The weights cache (src/weights/held-cache.ts) as `ctxprobe serve` uses it: a restart
// reuses the repacked copy a first start made (and answers the same bits), a changed source
// file or a copy changed after it was written is not trusted (made again), a folder other
// users may write is not used, and `--weights-cache off` turns it off.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { convertToGguf } from './gguf-convert.js';
import { serveCli, type Served } from './cli-serve.js';
import { postJson } from './helpers.js';

const running: Served[] = [];
afterAll(async () => Promise.all(running.map((s) => s.stop())));

/** A Q8_0 GGUF (rows of 32 and 64 values): every matrix repacked at load. */
function quantizedGguf(): string {
  const fx = makeFixture({ ...FAMILY_FIXTURES.llama!, intermediate: 64 });
  return convertToGguf(fx, path.join(fx.dir, 'model.gguf'), { dtype: 'Q8_0' }).file;
}

/** Serve `model` with the cache in `cache` (every size cached), score, stop: what the cache
 * did and the answer. */
async function serveOnce(model: string, cache: string, minBytes = '0'): Promise<{ cache: string; logprobs: number[] }> {
  const s = await serveCli(model, ['--weights-cache', cache, '--metrics-port', '-1'], { CTXPROBE_WEIGHTS_CACHE_MIN_BYTES: minBytes });
  running.push(s);
  try {
    const { status, body } = await postJson(`http://127.0.0.1:${s.httpPort}`, '/v1/score', {
      items: [{ contextIds: { ids: [5, 17, 40] }, continuationsIds: [{ ids: [99, 3, 250, 7] }] }],
    });
    expect(status).toBe(200);
    return { cache: s.lines.find((l) => l.event === 'model_loaded')!.weightsCache, logprobs: body.items[0].continuations[0].tokenLogprobs };
  } finally {
    await s.stop();
  }
}

const entries = (dir: string) => fs.readdirSync(dir).sort();

describe('the weights cache', () => {
  it('a restart reuses the copy the first start made, with the same answers; a changed source makes it again', async () => {
    const model = quantizedGguf();
    const cache = path.join(tempDir('weights-cache'), 'weights');
    const first = await serveOnce(model, cache);
    expect(first.cache).toMatch(/^filled .*\.held$/);
    const second = await serveOnce(model, cache);
    expect(second.cache).toBe(first.cache.replace('filled', 'reused'));
    expect(second.logprobs).toEqual(first.logprobs);
    expect(entries(cache).map((f) => path.extname(f))).toEqual(['.held', '.json']);
    // The same bytes written again (another inode, another time): not trusted, made again,
    // and the model's older entry removed.
    fs.copyFileSync(model, `${model}.copy`);
    fs.renameSync(`${model}.copy`, model);
    const third = await serveOnce(model, cache);
    expect(third.cache).toMatch(/^filled /);
    expect(third.cache).not.toBe(first.cache);
    expect(third.logprobs).toEqual(first.logprobs);
    expect(entries(cache)).toHaveLength(2);
  });

  it("a copy changed after it was written is not used: it is made again, and the answers are the model's", async () => {
    const model = quantizedGguf();
    const cache = path.join(tempDir('weights-cache'), 'weights');
    const first = await serveOnce(model, cache);
    const held = first.cache.replace(/^filled /, '');
    // Another process writes into the copy (its change time moves, whatever it sets the
    // modification time back to).
    const { atime, mtime } = fs.statSync(held);
    const fd = fs.openSync(held, 'r+');
    fs.writeSync(fd, Buffer.alloc(64, 0x7f), 0, 64, 0);
    fs.closeSync(fd);
    fs.utimesSync(held, atime, mtime);
    const second = await serveOnce(model, cache);
    expect(second.cache).toBe(first.cache);
    expect(second.logprobs).toEqual(first.logprobs);
  });

  it('a folder other users may write is not used; --weights-cache off turns it off', async () => {
    const model = quantizedGguf();
    const open = path.join(tempDir('weights-cache'), 'open');
    fs.mkdirSync(open, { mode: 0o777 });
    fs.chmodSync(open, 0o777);
    const shared = await serveOnce(model, open);
    expect(shared.cache).toMatch(/may be written by other users: not used/);
    expect(entries(open)).toEqual([]);
    expect((await serveOnce(model, 'off')).cache).toBe('off (--weights-cache off)');
  });

  // CI caught two test files' servers loading one fixture at once: the second failed the
  // start with EEXIST on the shared copy's name. Each load writes a file of its own now.
  it('servers starting at once on one model and one cache each load and answer the same, cached or not', async () => {
    const model = quantizedGguf();
    const cache = path.join(tempDir('weights-cache'), 'weights');
    const cached = await Promise.all([1, 2, 3].map(() => serveOnce(model, cache)));
    for (const s of cached) {
      expect(s.cache).toMatch(/^filled .*\.held$/);
      expect(s.logprobs).toEqual(cached[0]!.logprobs);
    }
    expect(entries(cache).map((f) => path.extname(f))).toEqual(['.held', '.json']);
    // The last rename won, and its record says so: the next start reuses it.
    expect((await serveOnce(model, cache)).cache).toBe(cached[0]!.cache.replace('filled', 'reused'));
    const small = model.replace(/\.gguf$/, '-small.gguf');
    fs.copyFileSync(model, small);
    const uncached = await Promise.all([1, 2, 3].map(() => serveOnce(small, cache, String(2 ** 30))));
    for (const s of uncached) {
      expect(s.cache).toMatch(/^not cached: \d+ bytes/);
      expect(s.logprobs).toEqual(cached[0]!.logprobs);
    }
    expect(entries(cache).map((f) => path.extname(f))).toEqual(['.held', '.json']);
  });
});
