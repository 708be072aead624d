// Every command in the README's ```sh blocks, run as a newcomer runs it on a fresh
// machine: against the small default model (a `--model /models/…` the reader does not
// have is dropped, `--models /etc/…` is the repository that ships), from a folder of its
// own holding the shipped data/. Each command must succeed — or, for what cannot run
// here, the test says why it is left out (a GPU, a download, a package PyPI would bring).
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from './cli-serve.js';
import { tempDir } from './fixtures.js';

/** The commands of the README's sh blocks, continuation lines joined, comments dropped. */
function readmeCommands(): string[] {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const commands: string[] = [];
  for (const block of readme.matchAll(/^```sh\n([\s\S]*?)^```/gm)) {
    const joined = block[1]!.replace(/\\\n\s*/g, '');
    for (const line of joined.split('\n')) {
      const command = line.replace(/\s+#.*$/, '').trim();
      if (command) commands.push(command);
    }
  }
  return commands;
}

const COMMANDS = readmeCommands();

/** What cannot run on this machine, and why (matched on the command's start). */
const LEFT_OUT: [RegExp, string][] = [
  [/^npm ci && npm test$/, 'this is the run it starts'],
  [/^\(cd node_modules\/onnxruntime-node && ONNXRUNTIME_NODE_INSTALL=cuda12/, "downloads onnxruntime's CUDA binaries: GPU hosts only"],
  [
    /^(echo 'deb http:\/\/deb\.debian\.org\/debian bookworm-backports main' >|scripts\/add-backports\.sh\b|apt-get )/,
    'installs Debian packages as root: .ci/run does it before the tests',
  ],
  [
    /^(node bench\/gpu\.js|bash bench\/gpu-host\.sh)\b/,
    'benchmarks: minutes of a GPU at the 360M shape, far longer on lavapipe; test/webgpu.test.ts checks the same contracts on lavapipe',
  ],
  [
    /^lm_eval /,
    'lm-evaluation-harness comes from PyPI, which this machine cannot reach; test/harness.test.ts replays its local-completions scoring requests, test/generate.test.ts the generate_until bodies of local-completions and local-chat-completions',
  ],
];

const python = process.env.CTXPROBE_PYTHON ?? '/usr/bin/python3';
const hasGrpcPython = (() => {
  try {
    execFileSync(python, ['-c', 'import grpc, grpc_tools.protoc'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

const hasVulkan = ['/usr/share/vulkan/icd.d', '/etc/vulkan/icd.d'].some(
  (d) => fs.existsSync(d) && fs.readdirSync(d).some((f) => f.endsWith('.json')),
);

/** A folder of its own, with the shipped data where the README's relative paths expect it. */
const cwd = tempDir('readme');
fs.symlinkSync(path.join(ROOT, 'data'), path.join(cwd, 'data'));

/** The command as a newcomer without checkpoints runs it. */
function onDefaultModel(command: string): string {
  return command
    .replace(/ --model \/\S+/g, '')
    .replace(/ --models \/\S+/g, ` --models ${path.join(ROOT, 'models')}`)
    .replace(/^npx ctxprobe /, `node ${path.join(ROOT, 'bin/ctxprobe.js')} `);
}

interface Started {
  lines: Record<string, any>[];
  grpcPort: number;
  httpPort: number;
  /** SIGTERM to the process group, as a terminal's Ctrl-C or a container stop reaches the
   * server (npm itself does not pass SIGTERM on); resolves with how the server stopped. */
  stop(): Promise<string | undefined>;
}

/** `npm start -- …` as written, on free ports; resolves once serving, rejects with what it
 * printed if it exits first. */
function npmStart(args: string): Promise<Started> {
  const child = spawn('sh', ['-c', `npm start --silent -- ${args} --port 0 --http-port 0 --metrics-port 0`], {
    cwd: ROOT,
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const lines: Record<string, any>[] = [];
  let text = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  // The pipe closes when the last process holding it (the server) has gone.
  const closed = new Promise<void>((resolve) => child.stderr!.on('close', () => resolve()));
  return new Promise((resolve, reject) => {
    child.stderr!.on('data', (d) => {
      text += d;
      for (const raw of String(d).split('\n')) {
        try {
          const line = JSON.parse(raw);
          lines.push(line);
          if (line.event === 'serving') {
            const listening = lines.find((l) => l.event === 'listening')!;
            resolve({
              lines,
              grpcPort: Number(listening.address.split(':').at(-1)),
              httpPort: Number(listening.httpPort),
              stop: async () => {
                process.kill(-child.pid!, 'SIGTERM');
                await closed;
                return lines.find((l) => l.event === 'stopped')?.how;
              },
            });
          }
        } catch {
          /* npm's own lines */
        }
      }
    });
    void exited.then((code) => reject(Object.assign(new Error(text), { code })));
  });
}

describe('npm start under a supervisor', () => {
  it('a SIGTERM to the npm process reaches the server, which drains and exits: nothing is left running', async () => {
    // As systemd or a container runtime stops it: the signal goes to npm's own pid, not to
    // its process group. npm forwards it to the script's shell; without `exec` in the script
    // the shell died and left the server running under PID 1, still serving.
    const child = spawn('npm', ['start', '--silent', '--', '--port', '0', '--http-port', '0', '--metrics-port', '0'], {
      cwd: ROOT,
      detached: true,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const lines: Record<string, any>[] = [];
    const closed = new Promise<void>((resolve) => child.stderr!.on('close', () => resolve()));
    const serving = new Promise<void>((resolve, reject) => {
      child.stderr!.on('data', (d) => {
        for (const raw of String(d).split('\n')) {
          try {
            const line = JSON.parse(raw);
            lines.push(line);
            if (line.event === 'serving') resolve();
          } catch {
            /* npm's own lines */
          }
        }
      });
      child.on('exit', (code) => reject(new Error(`npm start exited (${code}) before serving`)));
    });
    try {
      await serving;
      process.kill(child.pid!, 'SIGTERM');
      // The pipe closes when the last process holding it — the server — has gone.
      const gone = await Promise.race([closed.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 15_000))]);
      expect(gone, 'the server outlived npm').toBe(true);
      expect(lines.find((l) => l.event === 'stopped')?.how).toBe('drained');
    } finally {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
  }, 60_000);
});

const started: Started[] = [];
afterAll(async () => {
  for (const s of started) await s.stop().catch(() => {});
});

describe('every README command, on the default model', () => {
  it('the README has the commands this test knows how to run', () => {
    expect(COMMANDS.length).toBeGreaterThan(15);
    expect(COMMANDS[0]).toBe('npm ci && npm start');
  });

  let server: Started | undefined;
  const commandCases = COMMANDS.map((c, i) => [i, c] as const);
  it.each(commandCases)(
    '%i: %s',
    async (_i, command) => {
      const out = LEFT_OUT.find(([pattern]) => pattern.test(command));
      if (out) {
        console.log(`left out: ${command}: ${out[1]}`);
        return;
      }
      // Serving: start it as written, see it serve, stop it with SIGTERM (a clean drain).
      const start = /^(?:npm ci && )?npm start(?: -- (.*))?$/.exec(command);
      if (start) {
        const args = onDefaultModel(` ${start[1] ?? ''}`).trim();
        if (/--device cuda/.test(args)) {
          // No GPU here: the CUDA choice is refused with what to install, never a silent CPU run.
          const err = await npmStart(args).then(
            (s) => (started.push(s), undefined),
            (e) => e,
          );
          expect(err?.message).toMatch(/CUDA build of onnxruntime-node is not installed/);
          return;
        }
        if (/--device webgpu/.test(args) && !hasVulkan) {
          console.warn(
            `skipping ${command}: no Vulkan driver (apt-get install libvulkan1, and mesa-vulkan-drivers from bookworm-backports)`,
          );
          return;
        }
        const s = await npmStart(args);
        expect(s.lines.find((l) => l.event === 'serving')!.models.length).toBeGreaterThan(0);
        if (/--device webgpu/.test(args)) {
          // On the (software) GPU, with no float op left to the CPU, as its load log says.
          const loaded = s.lines.find((l) => l.event === 'model_loaded')!;
          expect([loaded.device, loaded.floatNodesOnCpu]).toEqual(['webgpu', []]);
          expect(loaded.adapter).toMatch(/Vulkan/);
        }
        // The start log says where the viewer and the API's document are; both answer.
        const listening = s.lines.find((l) => l.event === 'listening')!;
        if (!/--tls/.test(args)) {
          expect(listening.viewer).toBe(`http://127.0.0.1:${listening.httpPort}/ui/`);
          for (const url of [listening.viewer, listening.openapi]) expect((await fetch(url)).status, url).toBe(200);
        }
        if (!server && args === '') {
          server = s; // the default server stays up for the Python client below
          started.push(s);
        } else expect(await s.stop()).toBe('drained');
        return;
      }
      // The HTTP/JSON examples, against the default server's HTTP port (the README's :8000).
      if (/^curl /.test(command) || /^python3 examples\/python\/ctxprobe_http\.py/.test(command)) {
        expect(server, 'npm start serves the default model first').toBeDefined();
        const run = spawnSync(
          'sh',
          ['-c', command.replace(/127\.0\.0\.1:8000/g, `127.0.0.1:${server!.httpPort}`).replace(/^python3 /, `${python} `)],
          {
            cwd: ROOT,
            encoding: 'utf8',
            env: { ...process.env, CTXPROBE_URL: `http://127.0.0.1:${server!.httpPort}` },
          },
        );
        expect(run.status, run.stderr).toBe(0);
        // An answer, not an error: curl prints what the server said.
        const first = JSON.parse(run.stdout.split('\n')[0]!);
        expect(first.code, run.stdout).toBeUndefined();
        expect(first.error, run.stdout).toBeUndefined();
        return;
      }
      if (/^(examples\/python\/|python3 )/.test(command)) {
        if (!hasGrpcPython) {
          console.warn(`skipping ${command}: ${python} lacks grpcio / grpc_tools (apt-get install python3-grpcio python3-grpc-tools)`);
          return;
        }
        expect(server, 'npm start serves the default model first').toBeDefined();
        const run = spawnSync('sh', ['-c', command.replace(/^python3 /, `${python} `)], {
          cwd: ROOT,
          encoding: 'utf8',
          env: { ...process.env, PYTHON: python, CTXPROBE_ADDRESS: `127.0.0.1:${server!.grpcPort}` },
        });
        expect(run.status, run.stderr).toBe(0);
        return;
      }
      expect(command, 'a README command this test does not know how to run').toMatch(/^npx ctxprobe /);
      const run = spawnSync('sh', ['-c', onDefaultModel(command)], {
        cwd,
        encoding: 'utf8',
        env: { ...process.env, MALLOC_MMAP_THRESHOLD_: '1048576' },
      });
      expect(run.signal, run.stderr).toBeNull();
      expect(run.status, run.stderr).toBe(0);
      // What it says it writes is there.
      for (const [, dir] of command.matchAll(/--out (\S+)/g)) expect(fs.existsSync(path.join(cwd, dir!, 'results.json')), dir).toBe(true);
      for (const [, file] of command.matchAll(/--html (\S+)/g)) expect(fs.existsSync(path.join(cwd, file!)), file).toBe(true);
      for (const [, prefix] of command.matchAll(/--svg (\S+)/g)) {
        const dir = path.join(cwd, path.dirname(prefix!));
        expect(
          fs.readdirSync(dir).some((f) => f.startsWith(path.basename(prefix!)) && f.endsWith('.svg')),
          prefix,
        ).toBe(true);
      }
    },
    120_000,
  );
});
