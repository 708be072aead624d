// A load a person can follow: `ctxprobe serve` logs each step of a model's load with its
// fraction and the time it has left at least every reporting interval (lowered here so a
// test-sized model's load of a few seconds shows several), /health answers LOADING with
// where the load is meanwhile, the model_loaded line ends with what the model needs of the
// memory there is, and on a terminal the supervisor draws the progress as a bar.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { writeZeroLlamaGguf } from '../src/model/synthetic-gguf.js';
import { LoadBar } from '../src/cli/load-bar.js';
import { ROOT } from './cli-serve.js';
import { tempDir } from './fixtures.js';

const INTERVAL_MS = 150;

/** A Q4_K_M GGUF of zeros big enough that its repack takes a second or more here. */
function slowModel(): string {
  const file = path.join(tempDir('load-progress'), 'mid.gguf');
  writeZeroLlamaGguf(
    file,
    {
      hidden_size: 1024,
      num_hidden_layers: 8,
      num_attention_heads: 8,
      num_key_value_heads: 4,
      intermediate_size: 4096,
      vocab_size: 32000,
      max_position_embeddings: 2048,
      rms_norm_eps: 1e-5,
    },
    'q4_k_m',
  );
  return file;
}

describe('a load tells how far it is', () => {
  it('load_progress lines step by step, at least every interval, with fractions and time left; /health says LOADING; model_loaded ends with the memory need', async () => {
    const child = spawn(
      process.execPath,
      [
        path.join(ROOT, 'bin/ctxprobe.js'),
        'serve',
        '--model',
        slowModel(),
        '--port',
        '0',
        '--http-port',
        '0',
        '--metrics-port',
        '-1',
        '--threads',
        '1',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, CTXPROBE_PROGRESS_INTERVAL_MS: String(INTERVAL_MS) } },
    );
    const lines: (Record<string, any> & { at: number })[] = [];
    const healths: Record<string, any>[] = [];
    let poller: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        let buf = '';
        child.stderr!.on('data', (d) => {
          buf += d;
          for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
            const line = { ...JSON.parse(buf.slice(0, nl)), at: performance.now() };
            buf = buf.slice(nl + 1);
            lines.push(line);
            if (line.event === 'listening' && !poller) {
              // /health while the model loads.
              poller = setInterval(async () => {
                const res = await fetch(`http://127.0.0.1:${line.httpPort}/health`).catch(() => undefined);
                if (res) healths.push({ code: res.status, ...(await res.json()) });
              }, 50);
            }
            if (line.event === 'serving') resolve();
          }
        });
        child.on('exit', (code) => reject(new Error(`serve exited (${code}): ${lines.map((l) => l.message).join(' | ')}`)));
      });
    } finally {
      clearInterval(poller);
      child.kill('SIGTERM');
    }
    const progress = lines.filter((l) => l.event === 'load_progress');
    // Each step in order, each begun with a line.
    const steps = [...new Set(progress.map((l) => l.step))];
    expect(steps).toEqual(['scan', 'prepare', 'session', 'check']);
    // The repack is measured: a fraction strictly inside (0, 1) with an estimate of the time left.
    const measured = progress.filter((l) => l.step === 'prepare' && l.fraction > 0 && l.fraction < 1);
    expect(measured.length).toBeGreaterThan(0);
    expect(measured.every((l) => typeof l.etaSeconds === 'number' && l.etaSeconds >= 0 && l.unit === 'bytes' && l.total > 0)).toBe(true);
    // No silence longer than the interval (and slack for a busy machine) from listening to loaded.
    const from = lines.findIndex((l) => l.event === 'listening');
    const to = lines.findIndex((l) => l.event === 'model_loaded');
    const watched = lines.slice(from, to + 1).map((l) => l.at);
    const gaps = watched.slice(1).map((t, i) => t - watched[i]!);
    expect(Math.max(...gaps)).toBeLessThan(INTERVAL_MS + 1000);
    // /health: 503 LOADING with the load's step while it loads, then SERVING.
    const loading = healths.filter((h) => h.status === 'LOADING');
    expect(loading.length).toBeGreaterThan(0);
    expect(loading.every((h) => h.code === 503 && h.loading.model === 'mid' && steps.includes(h.loading.step))).toBe(true);
    // The model_loaded line ends with what the model needs of what there is.
    const loaded = lines.find((l) => l.event === 'model_loaded')!;
    const { at: _at, ...fields } = loaded;
    expect(Object.keys(fields).at(-1)).toBe('memory');
    expect(loaded.memory).toMatch(/^needs \d+\.\d GiB of \d+\.\d GiB available$/);
  }, 120_000);

  it('on a terminal the supervisor shows load_progress as a bar and every other line as it is', () => {
    const written: string[] = [];
    const tty = Object.assign(Object.create(process.stderr), {
      isTTY: true,
      columns: 120,
      write: (s: string) => (written.push(s), true),
      cursorTo: () => true,
      clearLine: () => true,
      moveCursor: () => true,
      on: () => tty,
      removeListener: () => tty,
    }) as NodeJS.WriteStream;
    const bar = new LoadBar(tty);
    const progress = (fraction: number | null) =>
      JSON.stringify({
        event: 'load_progress',
        model: 'm',
        what: 'preparing the weights',
        fraction,
        stepSeconds: 1,
        etaSeconds: fraction === null ? null : 3,
      });
    expect(bar.show(progress(0.25))).toBe(true);
    expect(bar.show(progress(0.5))).toBe(true);
    // Another line ends the bar (drawn last at 50%) and is written as it is.
    expect(bar.show(JSON.stringify({ event: 'model_loaded', model: 'm' }))).toBe(false);
    expect(written.join('')).toMatch(/m: preparing the weights \[█+░+\] 50% 3s left/);
    expect(written.join('')).not.toContain('load_progress');
    expect(written.at(-1)).toBe('{"event":"model_loaded","model":"m"}\n');
  });
});
