// Every line `ctxprobe serve` writes on stderr is JSON, as docs/operations.md (Logs) says, also what native
// libraries print there (Dawn's adapter-limit warnings on a software GPU, onnxruntime's own
// coloured log): bin/ctxprobe.js relays the server's stderr (src/cli/stderr-json.ts). The
// real server, started as a user starts it, on the CPU and, where a Vulkan driver is
// installed, on `--device webgpu`.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, serveCli } from './cli-serve.js';
import { tempDir } from './fixtures.js';
import { jsonLine } from '../src/cli/stderr-json.js';
import { VULKAN_DRIVERS } from './helpers.js';

if (!VULKAN_DRIVERS)
  console.warn(
    'stderr on --device webgpu skipped: no Vulkan driver (apt-get install libvulkan1 and, from bookworm-backports, mesa-vulkan-drivers)',
  );

// As onnxruntime-node 1.30 and Dawn print them (captured here).
const ORT_WARNING =
  "\x1b[0;93m2026-11-27 14:06:09.531536439 [W:onnxruntime:, graph.cc:5607 CleanUnusedInitializersAndNodeArgs] Removing initializer 'unused'. It is not used by any node and should be removed from the model.\x1b[m";
const DAWN_WARNING =
  'Warning: maxDynamicUniformBuffersPerPipelineLayout artificially reduced from 1000000 to 16 to fit dynamic offset allocation limit.';

describe('a line of the server’s stderr', () => {
  it('passes as it is when JSON; otherwise becomes a native_log line with its level, colours stripped; a blank line is dropped', () => {
    const ours = '{"time":"2026-11-27T14:02:09.830Z","level":"info","event":"serving","models":["m"]}';
    expect(jsonLine(ours)).toBe(ours);
    expect(JSON.parse(jsonLine(ORT_WARNING)!)).toMatchObject({
      level: 'warn',
      event: 'native_log',
      source: 'onnxruntime',
      message: ORT_WARNING.slice('\x1b[0;93m'.length, -'\x1b[m'.length),
    });
    expect(JSON.parse(jsonLine(DAWN_WARNING)!)).toMatchObject({
      level: 'warn',
      event: 'native_log',
      source: 'native',
      message: DAWN_WARNING,
    });
    expect(JSON.parse(jsonLine('Error: device lost')!).level).toBe('error');
    expect(JSON.parse(jsonLine('{not json')!).message).toBe('{not json');
    expect(jsonLine('  \r')).toBeUndefined();
  });
});

describe('the relay', () => {
  it('turns every line into JSON, in order, the last one too when unterminated, passes a signal on and exits with the server’s code', async () => {
    // A stand-in server: raw lines, a JSON line, and on SIGTERM a line without its newline
    // and exit code 70.
    const dir = tempDir('stderr-relay');
    const fake = path.join(dir, 'server.mjs');
    fs.writeFileSync(
      fake,
      // Its handler first: the test signals once it reads "serving" (the write to a pipe is
      // synchronous, so a handler set after it raced the signal).
      `process.on('SIGTERM', () => { process.stderr.write('terminate called'); process.exit(70); });
process.stderr.write(${JSON.stringify(ORT_WARNING + '\n' + DAWN_WARNING + '\n{"event":"serving"}\n')});
setInterval(() => {}, 1000);`,
    );
    // The relay as bin/ctxprobe.js runs it (from a file: it passes node's own flags on).
    const relay = path.join(dir, 'relay.mjs');
    fs.writeFileSync(
      relay,
      `(await import(${JSON.stringify(path.join(ROOT, 'dist/src/cli/stderr-json.js'))})).superviseServe(${JSON.stringify(fake)}, []);`,
    );
    const child = spawn(process.execPath, [relay], { stdio: ['ignore', 'ignore', 'pipe'] });
    let text = '';
    child.stderr.on('data', (d) => {
      text += d;
      if (text.includes('"event":"serving"')) child.kill('SIGTERM');
    });
    const code = await new Promise((resolve) => child.on('close', resolve)).finally(() => child.kill('SIGKILL'));
    const lines = text
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(code).toBe(70);
    expect(lines.map((l) => [l.event, l.source])).toEqual([
      ['supervisor', undefined],
      ['native_log', 'onnxruntime'],
      ['native_log', 'native'],
      ['serving', undefined],
      ['native_log', 'native'],
    ]);
    expect(lines.at(-1).message).toBe('terminate called');
  });
});

/** Serve with `args`, send the documented HTTP requests, stop; every stderr line, parsed. */
async function servedLines(args: string[]): Promise<Record<string, any>[]> {
  const s = await serveCli('', args);
  const closed = new Promise((resolve) => (s.child.stderr!.closed ? resolve(undefined) : s.child.stderr!.once('close', resolve)));
  try {
    const base = `http://127.0.0.1:${s.httpPort}`;
    const chunks = [
      { label: 'knowledge', text: 'The tower was built in 1889.' },
      { label: 'response', text: ' Built in 1889.' },
    ];
    const requests: [string, unknown][] = [
      ['/v1/probe', { samples: [{ chunks }] }],
      ['/v1/generate', { prompt: { messages: [{ role: 'user', content: 'Hi' }], addGenerationPrompt: true }, sampling: { maxTokens: 8 } }],
      [
        '/v1/score',
        { items: [{ id: 'q1', contextText: 'User: Who designed it? Bot:', continuationsText: [' Gustave Eiffel.', ' Nobody.'], topK: 2 }] },
      ],
      ['/v1/completions', { prompt: 'The tower was built in', max_tokens: 8, temperature: 0 }],
      ['/v1/chat/completions', { messages: [{ role: 'user', content: 'When was the tower built?' }], max_tokens: 8, temperature: 0 }],
    ];
    for (const [route, body] of requests) {
      const res = await fetch(base + route, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status, route).toBe(200);
      await res.text();
    }
  } finally {
    expect(await s.stop()).toBe(0);
  }
  await closed;
  return s.lines;
}

describe('ctxprobe serve, as a user starts it', () => {
  it('on the CPU: every stderr line is JSON, from start to stop', async () => {
    const lines = await servedLines([]);
    expect(lines.filter((l) => l.level === 'raw')).toEqual([]);
    expect(lines.map((l) => l.event)).toEqual(
      expect.arrayContaining(['supervisor', 'listening', 'model_loaded', 'serving', 'draining', 'stopped']),
    );
  }, 120_000);

  it.skipIf(!VULKAN_DRIVERS)(
    'on --device webgpu: every stderr line is JSON, what Dawn and onnxruntime print as native_log lines',
    async () => {
      const lines = await servedLines(['--device', 'webgpu']);
      expect(lines.filter((l) => l.level === 'raw')).toEqual([]);
      expect(lines.find((l) => l.event === 'model_loaded')?.device).toBe('webgpu');
      expect(lines.find((l) => l.event === 'stopped')?.how).toBe('drained');
      const native = lines.filter((l) => l.event === 'native_log');
      console.log(`native lines relayed as JSON on ${lines.find((l) => l.event === 'model_loaded')?.adapter}: ${native.length}`);
      for (const l of native) expect(typeof l.message).toBe('string');
    },
    300_000,
  );
});
