// Every command in the ```sh blocks of the README and of each page of docs/, run as a
// newcomer runs it on a fresh machine: against the small default model (a `--model /…` the
// reader does not have is dropped, `--models /etc/…` is the repository that ships), from a
// folder of its own holding the shipped data/, against one default server where a command
// names its ports (127.0.0.1:50051, :8000, :9464). Each command must succeed — or be
// refused on the default model as its page says it is (a flag for a kind of checkpoint the
// default model is not), or, for what cannot run here, the test says why it is left out (a
// GPU, a download, a package PyPI would bring, minutes of benchmark). One describe per page.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from './cli-serve.js';
import { tempDir } from './fixtures.js';
import { docPages, readDoc, shCommands } from './markdown.js';

/** Each page and the commands of its sh blocks. */
const PAGES = docPages().map((page) => [page, shCommands(readDoc(page))] as const);

/** What cannot run on this machine, and why (matched on the command's start). */
const LEFT_OUT: [RegExp, string][] = [
  [/^npm ci && npm test$/, 'this is the run it starts'],
  [/^\(cd node_modules\/onnxruntime-node && ONNXRUNTIME_NODE_INSTALL=cuda12/, "downloads onnxruntime's CUDA binaries: GPU hosts only"],
  [
    /^(scripts\/add-backports\.sh\b|apt-get )/,
    'installs Debian packages as root: .ci/run does it before the tests',
  ],
  [
    /^(node bench\/gpu\.js|bash bench\/gpu-host\.sh)\b/,
    'benchmarks: minutes of a GPU at the 360M shape, far longer on lavapipe; test/webgpu.test.ts checks the same contracts on lavapipe',
  ],
  [
    /^(npm run bench|(npm run build && )?npx tsx bench\/(?!memory-table\.ts))/,
    'benchmarks: minutes each on two cores, printing figures and asserting nothing (bench/RESULTS.md holds what they printed); the tests assert the same behaviour',
  ],
  [/^npx vitest run /, 'test files: the suite this file belongs to runs them'],
  [
    /^lm_eval /,
    'lm-evaluation-harness comes from PyPI, which this machine cannot reach; test/harness.test.ts replays its local-completions scoring requests, test/generate.test.ts the generate_until bodies of local-completions and local-chat-completions',
  ],
];

/** Flags for a kind of checkpoint the default model (F32, no quantized weights) is not, or a
 * device this machine lacks: the start is refused, saying why, never run as something else. */
const REFUSED_ON_DEFAULT: [RegExp, RegExp][] = [
  [/--device cuda/, /CUDA build of onnxruntime-node is not installed/],
  [/--weights-at-rest stored/, /has no weights narrower than its compute dtype/],
  [/--quantized-activations int8/, /has no quantized weights/],
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

/** A folder of its own, with the shipped data where the pages' relative paths expect it. */
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
  metricsPort: number;
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
              metricsPort: Number(listening.metricsPort),
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

/** The server `npm start` gives a fresh machine, started once and left up for the commands
 * that talk to one (curl, the Python clients, `ctxprobe health`, …). */
let defaultServer: Promise<Started> | undefined;
function theDefaultServer(): Promise<Started> {
  defaultServer ??= npmStart('').then((s) => (started.push(s), s));
  return defaultServer;
}

/** The command aimed at the default server's ports instead of the documented ones. */
function onItsPorts(command: string, s: Started): string {
  return command
    .replace(/127\.0\.0\.1:50051/g, `127.0.0.1:${s.grpcPort}`)
    .replace(/127\.0\.0\.1:8000/g, `127.0.0.1:${s.httpPort}`)
    .replace(/127\.0\.0\.1:9464/g, `127.0.0.1:${s.metricsPort}`);
}
const NAMES_A_PORT = /127\.0\.0\.1:(50051|8000|9464)\b/;

/** `npm start [-- ARGS]` as written: it serves (the viewer and the API's document answer),
 * or it is refused as its page says, and it drains on SIGTERM. */
async function runStart(args: string): Promise<void> {
  const refusal = REFUSED_ON_DEFAULT.find(([flag]) => flag.test(args));
  if (refusal) {
    const err = await npmStart(args).then(
      (s) => (started.push(s), undefined),
      (e) => e,
    );
    expect(err?.message, `npm start -- ${args}`).toMatch(refusal[1]);
    return;
  }
  if (/--device webgpu/.test(args) && !hasVulkan) {
    console.warn(`skipping npm start -- ${args}: no Vulkan driver (apt-get install libvulkan1, and mesa-vulkan-drivers from bookworm-backports)`);
    return;
  }
  const s = args === '' ? await theDefaultServer() : await npmStart(args);
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
    // Once more on a socket error: a pooled connection the server closed while this process
    // was blocked in a command (keep-alive's 5 s) fails at its next use, as browsers retry.
    const get = (url: string) => fetch(url).catch(() => fetch(url));
    for (const url of [listening.viewer, listening.openapi]) expect((await get(url)).status, url).toBe(200);
  }
  if (args !== '') expect(await s.stop()).toBe('drained');
}

/** A command against a server (curl, the HTTP client, `ctxprobe health --address …`). */
async function runAgainstServer(command: string): Promise<void> {
  const s = await theDefaultServer();
  const run = spawnSync('sh', ['-c', onItsPorts(onDefaultModel(command), s).replace(/^python3 /, `${python} `)], {
    cwd: /^python3 examples\//.test(command) ? ROOT : cwd,
    encoding: 'utf8',
    env: { ...process.env, MALLOC_MMAP_THRESHOLD_: '1048576', CTXPROBE_URL: `http://127.0.0.1:${s.httpPort}` },
  });
  expect(run.status, run.stderr).toBe(0);
  if (!/^(curl|python3) /.test(command)) return;
  // An answer, not an error: curl prints what the server said (JSON, a JSON line a
  // message, or Prometheus text).
  const text = run.stdout.trim();
  expect(text, 'an empty answer').not.toBe('');
  const first = (() => {
    for (const candidate of [text, text.split('\n')[0]!]) {
      try {
        return JSON.parse(candidate);
      } catch {
        /* not JSON as a whole, or not JSON lines */
      }
    }
    return undefined;
  })();
  if (first && typeof first === 'object') {
    expect(first.code, run.stdout).toBeUndefined();
    expect(first.error, run.stdout).toBeUndefined();
  }
}

/** The Python gRPC client's commands (its stubs, then calls to the default server). */
async function runGrpcPython(command: string): Promise<void> {
  if (!hasGrpcPython) {
    console.warn(`skipping ${command}: ${python} lacks grpcio / grpc_tools (apt-get install python3-grpcio python3-grpc-tools)`);
    return;
  }
  const s = await theDefaultServer();
  const run = spawnSync('sh', ['-c', command.replace(/^python3 /, `${python} `)], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, PYTHON: python, CTXPROBE_ADDRESS: `127.0.0.1:${s.grpcPort}` },
  });
  expect(run.status, run.stderr).toBe(0);
}

/** `npx tsx bench/memory-table.ts`: the page's table is what the load's arithmetic prints. */
function runMemoryTable(page: string): void {
  const printed = execFileSync(process.execPath, [path.join(ROOT, 'node_modules/tsx/dist/cli.mjs'), 'bench/memory-table.ts'], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  const rows = printed.split('\n').filter((l) => l.startsWith('|'));
  expect(rows.length).toBe(5);
  const text = readDoc(page);
  for (const row of rows) expect(text, `${page} holds the table bench/memory-table.ts prints`).toContain(row);
}

/** A one-off `npx ctxprobe …` (no server): it succeeds and writes what it says it writes. */
function runCli(command: string): void {
  const run = spawnSync('sh', ['-c', onDefaultModel(command)], {
    cwd,
    encoding: 'utf8',
    env: { ...process.env, MALLOC_MMAP_THRESHOLD_: '1048576' },
  });
  expect(run.signal, run.stderr).toBeNull();
  expect(run.status, run.stderr).toBe(0);
  for (const [, dir] of command.matchAll(/--out (\S+)/g)) expect(fs.existsSync(path.join(cwd, dir!, 'results.json')), dir).toBe(true);
  for (const [, file] of command.matchAll(/--html (\S+)/g)) expect(fs.existsSync(path.join(cwd, file!)), file).toBe(true);
  for (const [, prefix] of command.matchAll(/--svg (\S+)/g)) {
    const dir = path.join(cwd, path.dirname(prefix!));
    expect(
      fs.readdirSync(dir).some((f) => f.startsWith(path.basename(prefix!)) && f.endsWith('.svg')),
      prefix,
    ).toBe(true);
  }
}

async function runCommand(page: string, command: string): Promise<void> {
  const out = LEFT_OUT.find(([pattern]) => pattern.test(command));
  if (out) {
    console.log(`left out: ${command}: ${out[1]}`);
    return;
  }
  const start = /^(?:npm ci && )?npm start(?: -- (.*))?$/.exec(command);
  if (start) return runStart(onDefaultModel(` ${start[1] ?? ''}`).trim());
  if (/^npx tsx bench\/memory-table\.ts$/.test(command)) return runMemoryTable(page);
  if (/^(examples\/python\/|python3 examples\/python\/ctxprobe_client\.py)/.test(command)) return runGrpcPython(command);
  if (/^curl /.test(command) || /^python3 examples\/python\/ctxprobe_http\.py/.test(command) || NAMES_A_PORT.test(command)) {
    return runAgainstServer(command);
  }
  expect(command, `a command of ${page} this test does not know how to run`).toMatch(/^npx ctxprobe /);
  runCli(command);
}

describe('the pages have the commands this test knows how to run', () => {
  it("the README's first is the fresh machine's start, and every page's commands are its own", () => {
    const readme = PAGES.find(([page]) => page === 'README.md')![1];
    expect(readme[0]).toBe('npm ci && npm start');
    expect(readme.length).toBeGreaterThan(5);
    // A command shown on two pages runs twice: show it on one, link to it from the other.
    const seen = new Map<string, string>();
    for (const [page, commands] of PAGES) {
      for (const c of commands) {
        if (LEFT_OUT.some(([pattern]) => pattern.test(c))) continue;
        expect(seen.get(c), `${c}: on ${seen.get(c)} and ${page}`).toBeUndefined();
        seen.set(c, page);
      }
    }
  });
});

for (const [page, commands] of PAGES) {
  if (commands.length === 0) continue;
  describe(`every command of ${page}, on the default model`, () => {
    it.each(commands.map((c, i) => [i, c] as const))('%i: %s', (_i, command) => runCommand(page, command), 120_000);
  });
}
